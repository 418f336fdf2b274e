"""Plain functions of a data-pipeline module (by file name or the folder holding it) are not
device code for DL101: they prepare samples in loader workers on the CPU."""

from __future__ import annotations

import textwrap

import pytest

from devicelint.analysis.placement_values import data_pipeline_path
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule

SAMPLER = """
import torch


def pick_frames(clip, first, last, count):
    steps = torch.linspace(first, last, count)
    steps = torch.clamp(steps, 0, clip.shape[0] - 1).long()
    return torch.index_select(clip, 0, steps)
"""


def _codes(path: str) -> list[tuple[str, int]]:
    rule = find_rule("DL101")
    assert rule is not None
    result = lint_source(textwrap.dedent(SAMPLER), path, EngineOptions(rules=(rule,)))
    return [(f.code, f.line) for f in result.findings]


@pytest.mark.parametrize(
    "path",
    ["videonet/datasets/decoder.py", "proj/data/utils.py", "proj/transforms/temporal.py", "proj/video_dataset.py"],
)
def test_helpers_of_the_data_pipeline_are_not_device_code(path: str) -> None:
    assert _codes(path) == []


@pytest.mark.parametrize(
    "path",
    ["videonet/models/sampling.py", "proj/utils.py", "/home/me/data/proj/models/ops.py", "net/transformers/ops.py"],
)
def test_the_same_helper_elsewhere_is_device_code(path: str) -> None:
    assert _codes(path) == [("DL101", 6)]


def test_only_the_nearest_folder_counts() -> None:
    assert data_pipeline_path("a/dataloaders/x.py")
    assert not data_pipeline_path("data/proj/models/x.py")
    assert not data_pipeline_path("x.py")
