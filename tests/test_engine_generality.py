"""Engine shapes of issue 23, each on code written apart from the re-created bugs: the shape is
found under other names and containers, and the one-fix twin is clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "models/head.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


def _messages(source: str) -> list[str]:
    return [f.message for f in lint_source(textwrap.dedent(source), "models/head.py", DEFAULT).findings]


# -- a parameter that no call passes holds its default ------------------------------------------

DEFAULTS = """
    import torch
    import torch.nn as nn


    def ramp(length, device=torch.device("cpu")):
        return torch.arange(length, device=device).float()


    class AnchorHead(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.sizes = sizes
            self.proj = nn.Linear(4, 4)
            self.table = self._build_table(len(sizes))

        def _build_table(self, count, dtype=torch.float32, device="cpu"):
            rows = []
            for i in range(count):
                rows.append(torch.full((2,), float(self.sizes[i]), dtype=dtype, device=device))
            return rows

        def forward(self, x, level):
            anchors = self.table[level].expand(x.shape[0], 2)
            return self.proj(torch.cat([x[:, :2], anchors], dim=1)) + ramp(x.shape[1])
"""


def test_left_out_device_defaults_place_a_helper_s_tensors_on_the_cpu() -> None:
    assert _found(DEFAULTS) == [(7, "DL101"), (15, "DL102")]
    assert _messages(DEFAULTS)[1].startswith("`self.table` keeps tensors in a plain list")


def test_defaults_twin_that_passes_the_device_and_moves_at_use_is_clean() -> None:
    fixed = DEFAULTS.replace("ramp(x.shape[1])", "ramp(x.shape[1], device=x.device)").replace(
        "self.table[level].expand", "self.table[level].to(x.device).expand"
    )
    assert _found(fixed) == []


def test_a_default_some_call_overrides_says_nothing() -> None:
    # `_build_table` is also called with the input's device: its default is not its only value
    overridden = DEFAULTS.replace(
        "anchors = self.table[level].expand(x.shape[0], 2)",
        "anchors = self._build_table(len(self.sizes), device=x.device)[level].expand(x.shape[0], 2)",
    ).replace("ramp(x.shape[1])", "ramp(x.shape[1], x.device)")
    assert _found(overridden) == []
