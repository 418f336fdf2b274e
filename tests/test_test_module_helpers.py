"""Plain helpers of a test module are not device code by their tensor parameters alone: they get
what the test builds, on the CPU unless the test says otherwise."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule

HELPER = """
import torch


def find_box(image):
    height, width = image.size()
    ones = torch.ones(height, width)
    zeros = torch.zeros(height, width)
    return torch.where(image == 0, ones, zeros)
"""

TEST = """

def test_box():
    image = torch.zeros(8, 8)
    assert find_box(image).sum() == 64
"""

CUDA_TEST = """

def test_box_on_gpu():
    image = torch.zeros(8, 8, device="cuda")
    assert find_box(image).sum() == 64
"""


def _codes(path: str, source: str) -> list[tuple[str, int]]:
    rule = find_rule("DL101")
    assert rule is not None
    result = lint_source(textwrap.dedent(source), path, EngineOptions(rules=(rule,)))
    return [(f.code, f.line) for f in result.findings]


def test_a_test_modules_helper_is_not_device_code() -> None:
    assert _codes("proj/tests/test_boxes.py", HELPER + TEST) == []


def test_a_helper_fed_device_tensors_by_the_test_still_is() -> None:
    assert _codes("proj/tests/test_boxes.py", HELPER + CUDA_TEST) == [("DL101", 7)]


def test_the_same_helper_outside_tests_is_device_code() -> None:
    assert _codes("proj/boxes.py", HELPER) == [("DL101", 7)]
