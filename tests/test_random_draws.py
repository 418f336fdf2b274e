"""DL114 and DL115: exact messages, which default device is in force where, and that the two
rules split every generator mismatch between them without overlap."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from recreated_bugs import REALBUGS, assert_pair, needs_realbugs

from devicelint.analysis.default_device import ACCELERATOR_DEFAULT, CPU_DEFAULT, UNKNOWN_DEFAULT, default_device_at
from devicelint.context import FileContext
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def findings(source: str, codes: tuple[str, ...] = ("DL114", "DL115")) -> list[tuple[int, str, str]]:
    options = EngineOptions(rules=tuple(find_rule(c) for c in codes))
    result = lint_source(textwrap.dedent(source), "train.py", options)
    return [(f.line, f.code, f.message) for f in result.findings]


def test_shuffling_loader_under_default_device_message() -> None:
    found = findings("""
        import torch
        from torch.utils.data import DataLoader

        def main(ds):
            torch.set_default_device("cuda")
            return DataLoader(ds, shuffle=True)
    """)
    assert found == [
        (
            7,
            "DL114",
            "`DataLoader(...)` draws with the CPU generator of its shuffling `RandomSampler` after "
            "`torch.set_default_device(\"cuda\")`, so it fails with `Expected a 'cuda' device type for "
            "generator but found 'cpu'`; pass `generator=torch.Generator(device=\"cuda\")`",
        )
    ]


def test_cuda_generator_to_random_split_message() -> None:
    found = findings("""
        import torch
        from torch.utils.data import random_split

        def split(ds):
            g = torch.Generator(device="cuda").manual_seed(0)
            return random_split(ds, [0.5, 0.5], generator=g)
    """)
    assert found == [
        (
            7,
            "DL115",
            "`random_split(...)` draws on cpu but its generator `g` is a cuda generator, so it fails with "
            "`Expected a 'cpu' device type for generator but found 'cuda'`; create it with `torch.Generator()` "
            "(data samplers draw their indices on the CPU), or with `torch.Generator(device=torch.get_default_device())` "
            "if another module makes the GPU the default device",
        )
    ]


@pytest.mark.parametrize(
    ("default", "generator", "expected"),
    [
        ("", 'torch.Generator(device="cuda")', []),  # may follow a CUDA default set in another module
        ("", "torch.Generator()", []),
        ("", "", []),
        ('torch.set_default_device("cuda")', 'torch.Generator(device="cuda")', []),  # the exception
        ('torch.set_default_device("cuda")', "torch.Generator()", ["DL114"]),
        ('torch.set_default_device("cuda")', "", ["DL114"]),
        ('torch.set_default_device("cpu")', 'torch.Generator(device="cuda")', ["DL115"]),
    ],
)
def test_rules_split_loader_generators_without_overlap(default: str, generator: str, expected: list[str]) -> None:
    argument = f", generator={generator}" if generator else ""
    found = findings(f"""
        import torch
        from torch.utils.data import DataLoader

        def main(ds):
            {default or "pass"}
            return DataLoader(ds, shuffle=True{argument})
    """)
    assert [code for _, code, _ in found] == expected


def test_explicit_device_factory_is_dl115_even_under_a_default() -> None:
    found = findings("""
        import torch

        def noise():
            torch.set_default_device("cuda")
            g = torch.Generator()
            a = torch.randn(3, generator=g)
            b = torch.randn(3, generator=g, device="cuda")
            c = torch.randn(3, generator=g, device="cpu")
            return a, b, c
    """)
    assert [(line, code) for line, code, _ in found] == [(7, "DL114"), (8, "DL115")]


def _state_at(source: str, marker: str) -> str:
    module = cst.parse_module(textwrap.dedent(source))
    ctx = FileContext("m.py", module.code, module)
    call = next(c for c in ctx.index.of_type(cst.Call) if ctx.code_for(c.func) == marker)
    return default_device_at(ctx, call).state


def test_default_device_states() -> None:
    source = """
        import torch

        def helper():
            torch.set_default_device("cuda")

        def uses_helper():
            helper()
            first()

        def before_helper():
            second()
            helper()

        def in_block():
            with torch.device("cuda"):
                with torch.device("cpu"):
                    third()
                fourth()

        def plain():
            fifth()
    """
    assert _state_at(source, "first") == ACCELERATOR_DEFAULT
    assert _state_at(source, "second") == UNKNOWN_DEFAULT  # the file sets one, order unknown here
    assert _state_at(source, "third") == CPU_DEFAULT
    assert _state_at(source, "fourth") == ACCELERATOR_DEFAULT
    assert _state_at("import torch\ndef f():\n    fifth()\n", "fifth") == CPU_DEFAULT


RECREATED = [
    ("DL114", "i02_cuda_default_tensor_sampler"),
    ("DL114", "i10_default_device_ctx_dataloader"),
    ("DL115", "i11_random_split_cuda_generator"),
]


@needs_realbugs
@pytest.mark.parametrize(("code", "stem"), RECREATED)
def test_recreated_bug_pairs(code: str, stem: str) -> None:
    assert_pair(code, stem)


@needs_realbugs
def test_no_finding_on_good_or_clean_files() -> None:
    options = EngineOptions(rules=(find_rule("DL114"), find_rule("DL115")))
    noisy = [
        (path.name, f.line, f.code)
        for path in sorted(REALBUGS.glob("clean_*.py")) + sorted(REALBUGS.glob("*_good.py"))
        for f in lint_source(path.read_bytes(), str(path), options).findings
    ]
    assert noisy == []


def test_accelerator_default_on_one_path_is_in_force() -> None:
    found = findings("""
        import torch
        from torch.utils.data import DataLoader

        if torch.cuda.is_available():
            if args.cuda:
                torch.set_default_tensor_type("torch.cuda.FloatTensor")
            else:
                torch.set_default_tensor_type("torch.FloatTensor")
        else:
            torch.set_default_tensor_type("torch.FloatTensor")

        def train(ds):
            return DataLoader(ds, shuffle=True)
    """)
    assert [(line, code) for line, code, _ in found] == [(14, "DL114")]


def test_a_later_unconditional_reset_ends_the_default() -> None:
    found = findings("""
        import torch
        from torch.utils.data import DataLoader

        if args.cuda:
            torch.set_default_tensor_type("torch.cuda.FloatTensor")
        torch.set_default_tensor_type("torch.FloatTensor")

        def train(ds):
            return DataLoader(ds, shuffle=True)
    """)
    assert found == []
