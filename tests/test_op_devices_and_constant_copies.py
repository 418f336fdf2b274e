"""Behaviour of DL116 (op arguments on different devices) and DL405 (per-step constant copy)
that the fixtures do not pin down: exact messages, the reverse cases PyTorch accepts, the
split with DL101/DL102, and odd calls that must not crash."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def findings(codes: str, source: str, path: str = "pkg/module.py") -> list[tuple[int, str, str]]:
    rules = tuple(find_rule(code) for code in codes.split(","))
    result = lint_source(textwrap.dedent(source), path, EngineOptions(rules=rules))
    return [(f.line, f.code, f.message) for f in result.findings]


# ---------------------------------------------------------------------------- DL116

SAMPLER = """
    import torch

    class Sampler:
        def __init__(self, steps):
            self.alphas = torch.cumprod(1 - torch.linspace(1e-4, 0.02, steps), 0)

        def extract(self, t):
            return self.alphas[t]

        def run(self, n, device="cuda"):
            t = torch.full((n,), 10, device=device, dtype=torch.long)
            return self.extract(t)
"""


def test_cpu_attribute_indexed_by_device_timesteps_names_both() -> None:
    assert findings("DL116", SAMPLER) == [
        (
            9,
            "DL116",
            (
                "`self.alphas` is a CPU tensor (a plain attribute set in `__init__`) indexed by `t`, which is on the "
                "device (indices must be on the CPU or on the indexed tensor's device); move the table first: "
                "`self.alphas.to(t.device)[...]`, or move `self.alphas` once where the device is known"
            ),
        )
    ]


def test_attribute_moved_by_the_class_is_not_a_cpu_tensor() -> None:
    moved = (
        SAMPLER
        + """
        def to(self, device):
            self.alphas = self.alphas.to(device)
            return self
    """
    )
    assert findings("DL116", moved) == []


def test_attribute_moved_by_a_subclass_is_not_constant() -> None:
    subclassed = (
        SAMPLER
        + """
    class MovingSampler(Sampler):
        def to(self, device):
            self.alphas = self.alphas.to(device)
            return self
    """
    )
    assert findings("DL116", subclassed) == []


def test_cpu_indices_into_a_device_tensor_are_fine() -> None:
    assert (
        findings(
            "DL116",
            """
        import torch

        def pick(x, device):
            table = torch.randn(10, 4).to(device)
            rows = torch.arange(3).cpu()
            return table[rows], table.index_select(0, torch.arange(2))
    """,
        )
        == []
    )


def test_zero_dim_cpu_operands_are_fine_in_where_and_maximum() -> None:
    assert (
        findings(
            "DL116",
            """
        import torch

        def squash(x, device):
            y = x.to(device)
            zero = torch.tensor(0.0)
            return torch.where(y > 0, y, zero), torch.maximum(y, zero), y.clamp(max=zero)
    """,
        )
        == []
    )


def test_factory_meeting_is_left_to_dl101() -> None:
    source = """
        import torch
        import torch.nn as nn

        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                upper = torch.ones(4)
                return torch.minimum(self.fc(x), upper)
    """
    found = findings("DL101,DL116", source)
    assert [(line, code) for line, code, _ in found] == [(11, "DL101")]


def test_clamp_bound_through_a_helper_parameter() -> None:
    found = findings(
        "DL116",
        """
        import torch

        def bound(values, limit):
            return values.clamp(max=limit)

        def run(device):
            limit = torch.linspace(0, 1, 8).cpu()
            return bound(torch.rand(8, device=device), limit)
    """,
    )
    assert [(line, code) for line, code, _ in found] == [(5, "DL116")]
    assert "`.clamp()` needs its tensors on one device, but `limit` is a CPU tensor" in found[0][2]


def test_inputs_of_a_plain_function_are_not_assumed_on_the_device() -> None:
    source = """
        import torch

        def dense_values(pattern):
            table = torch.zeros(pattern.shape, dtype=torch.int64)
            hits = torch.where(pattern != 0)
            return table[hits]
    """
    assert findings("DL116", source) == []
    in_module = """
        import torch
        import torch.nn as nn

        class Dense(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.table = torch.zeros(16, 4)

            def forward(self, x):
                hits = self.fc(x).argmax(-1)
                return self.table[hits]
    """
    assert [(line, code) for line, code, _ in findings("DL116", in_module)] == [(13, "DL116")]


def test_odd_calls_do_not_crash() -> None:
    assert (
        findings(
            "DL116",
            """
        import torch

        def odd(x, *args, **kwargs):
            a = torch.clamp(*args)
            b = x.clamp(**kwargs)
            c = torch.where()
            d = x.masked_fill()
            e = torch.gather(x, dim=1, index=x)
            return a, b, c, d, e, x[()], x[...]
    """,
        )
        == []
    )


# ---------------------------------------------------------------------------- DL405

NORMALIZE = """
    import torch
    import torch.nn as nn

    MEAN = [0.5, 0.4, 0.3]

    class Normalize(nn.Module):
        def __init__(self):
            super().__init__()
            self.std = torch.tensor([0.2, 0.2, 0.2]).view(3, 1, 1)

        def forward(self, x):
            mean = torch.tensor(MEAN, device=x.device).view(3, 1, 1)
            return (x - mean) / self.std.to(x.device)
"""


def test_constant_copies_in_forward_with_messages() -> None:
    assert findings("DL405", NORMALIZE) == [
        (
            13,
            "DL405",
            "`torch.tensor(MEAN, device=x.device)` copies the constant `MEAN` from the host to the device "
            "on every call of `forward`; make it once in `__init__` and register it "
            "(`self.register_buffer(name, ..., persistent=False)`)",
        ),
        (
            14,
            "DL405",
            "`self.std.to(x.device)` copies `self.std`, a constant CPU tensor set once in `__init__`, to "
            "the device on every call of `forward`; register it once in `__init__` "
            '(`self.register_buffer("std", ..., persistent=False)`) and use `self.std`: '
            "`model.to(device)` then moves it once",
        ),
    ]


def test_dl405_is_a_warning_on_by_default() -> None:
    rule = find_rule("DL405")
    assert rule is not None and rule.default_enabled and rule.severity == "warning"


def test_changing_or_local_values_are_not_constants() -> None:
    assert (
        findings(
            "DL405",
            """
        import torch
        import torch.nn as nn

        MEAN = [0.5]
        MEAN = MEAN + [0.4]

        class Running(nn.Module):
            def __init__(self):
                super().__init__()
                self.stats = torch.zeros(3)

            def forward(self, x, shifts):
                self.stats.mul_(0.9)
                a = torch.tensor(shifts, device=x.device)
                b = torch.tensor(MEAN, device=x.device)
                return x + self.stats.to(x.device) + a + b
    """,
        )
        == []
    )


def test_dl102_attribute_is_not_reported_again() -> None:
    source = """
        import torch
        import torch.nn as nn

        class Anchors(nn.Module):
            def __init__(self):
                super().__init__()
                self.anchors = torch.tensor([[1.0, 2.0], [3.0, 4.0]])

            def forward(self, x):
                return x * self.anchors[0].to(x.device) + self.anchors
    """
    assert [(line, code) for line, code, _ in findings("DL102,DL405", source)] == [(8, "DL102")]


def test_not_per_step_and_test_files_are_silent() -> None:
    once = """
        import torch

        def build(device):
            return torch.tensor([1.0, 2.0], device=device)
    """
    assert findings("DL405", once) == []
    assert findings("DL405", NORMALIZE, path="tests/test_norm.py") == []


def test_one_statement_gives_one_dl405_finding() -> None:
    source = """
        import torch
        import torch.nn as nn

        class Schedule(nn.Module):
            def __init__(self):
                super().__init__()
                self.s = torch.tensor([0.008])
                self.base = torch.cos(self.s / (1 + self.s) * torch.pi * 0.5) ** 2

            def forward(self, t):
                return torch.cos(
                    (t + self.s.to(t.device)) / (1 + self.s.to(t.device))
                ) / self.base.to(t.device)
    """
    assert [(line, code) for line, code, _ in findings("DL405", source)] == [(13, "DL405")]
