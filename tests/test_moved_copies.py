"""DL104 through the summaries of the file's own helpers (analysis/moved_copies.py)."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def lines(source: str) -> list[int]:
    options = EngineOptions(rules=(find_rule("DL104"),))
    result = lint_source(textwrap.dedent(source), "train.py", options)
    return [f.line for f in result.findings if f.code == "DL104"]


def test_helper_returning_another_helpers_copies_is_followed() -> None:
    assert lines("""
        def send(batch, device):
            return {k: v.to(device) for k, v in batch.items()}

        def prepare(batch, device):
            return send(batch, device)

        def step(model, batch, device):
            prepare(batch, device)
            return model(batch["x"])
    """) == [9]


def test_mutual_recursion_and_odd_calls_do_not_crash_or_report() -> None:
    assert (
        lines("""
        def ping(batch, device):
            return pong(batch, device)

        def pong(batch, device):
            return ping(batch, device)

        def nothing(batch):
            print(batch)

        def step(batch, device, *rest, **options):
            ping(batch, device)
            nothing(batch)
            ping(*rest)
            ping(batch=batch, device=device)
            ping()
    """)
        == []
    )


def test_the_device_argument_is_never_the_reported_receiver() -> None:
    source = """
        def on(device, tensors):
            return [t.to(device) for t in tensors]

        def step(device, tensors):
            on(device, tensors)
    """
    options = EngineOptions(rules=(find_rule("DL104"),))
    found = lint_source(textwrap.dedent(source), "train.py", options).findings
    assert [(f.line, f.message) for f in found] == [
        (
            6,
            "`on(device, tensors)` returns a moved copy that is thrown away, so `tensors` is not moved; "
            "assign it: `tensors = on(device, tensors)`",
        ),
    ]


def test_a_cast_after_an_in_place_fill_names_the_filled_tensor_and_fixes_validly() -> None:
    import ast

    from devicelint.fixes import apply_fixes

    source = textwrap.dedent("""
        import torch


        def init_(weight, low, high):
            scratch = torch.empty(weight.shape, device=weight.device)
            scratch.uniform_(low, high).clamp_(-1, 1).to(weight.dtype)
            model_out(weight).cuda()
            weight.data.copy_(scratch)
    """)
    options = EngineOptions(rules=(find_rule("DL104"),))
    findings = [f for f in lint_source(source, "train.py", options).findings if f.code == "DL104"]
    assert [(f.line, f.message) for f in findings] == [
        (
            7,
            "`scratch.uniform_(low, high).clamp_(-1, 1).to(weight.dtype)` returns a new tensor that is thrown "
            "away, so `scratch` is not converted; assign it: "
            "`scratch = scratch.uniform_(low, high).clamp_(-1, 1).to(weight.dtype)`",
        ),
        (
            8,
            "`model_out(weight).cuda()` returns a new tensor that is thrown away, so `model_out(weight)` is not "
            "moved; assign the result to a name and use that",
        ),
    ]
    fixed, _ = apply_fixes(source, findings, unsafe=True)
    assert fixed is not None
    ast.parse(fixed)
    assert "    scratch = scratch.uniform_(low, high).clamp_(-1, 1).to(weight.dtype)\n" in fixed
