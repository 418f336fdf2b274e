"""Generality, fortieth stop (the lead's own changes): a helper's returned call followed through
a chain of helpers, with every parameter in the caller's words."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from devicelint.analysis.training.helpers import returned_call
from devicelint.context import FileContext
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import REGISTRY, all_rules


def _findings(source: str, code: str) -> list[tuple[str, int, str]]:
    all_rules()
    result = lint_source(textwrap.dedent(source), "case.py", EngineOptions(rules=(REGISTRY[code],)))
    return [(f.code, f.line, f.message) for f in result.findings]


def _returned(source: str, helper: str) -> str:
    source = textwrap.dedent(source)
    ctx = FileContext("case.py", source, cst.parse_module(source))
    call = next(
        c
        for c in ctx.index.of_type(cst.Call)
        if type(c.func) is cst.Name
        and c.func.value == helper
        and (f := ctx.index.enclosing_function(c)) is not None
        and f.name.value == "main"
    )
    found = returned_call(ctx, call)
    return ctx.module.code_for_node(found) if found is not None else "-"


def test_every_parameter_of_a_helper_is_put_in_the_callers_words() -> None:
    # before, only the first parameter was replaced: `lr=b` kept the helper's own name
    source = """
        import torch
        def make(a, b, momentum=0.0):
            return torch.optim.SGD(a, lr=b, momentum=momentum)
        def main(model):
            return make(model.parameters(), 0.1, momentum=0.9)
    """
    assert _returned(source, "make") == "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)"


@pytest.mark.parametrize(
    "helpers",
    [
        # a function returning another function's call
        """
        def _adagrad(params, lr):
            return optim.Adagrad(params, lr=lr)

        def make_optimizer(net, lr):
            return _adagrad(net.parameters(), lr)
        """,
        # three deep, the middle one a lambda-free alias with its own parameter names
        """
        def _build(kind, group, rate):
            return kind(group, lr=rate)

        def _adagrad(p, r):
            return _build(optim.Adagrad, p, r)

        def make_optimizer(net, lr):
            return _adagrad(net.parameters(), lr)
        """,
    ],
    ids=["two-deep", "three-deep"],
)
def test_optimizer_built_through_a_chain_of_helpers_before_the_move(helpers: str) -> None:
    source = (
        "import torch\nfrom torch import nn, optim\n"
        + textwrap.dedent(helpers)
        + textwrap.dedent(
            """
            def main(device, batches):
                model = nn.Linear(4, 2)
                optimizer = make_optimizer(model, 0.1)
                model.to(device)
                for x, y in batches:
                    loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """
        )
    )
    line = source.splitlines().index("    optimizer = make_optimizer(model, 0.1)") + 1
    assert _findings(source, "DL111") == [
        (
            "DL111",
            line,
            "`make_optimizer(model, 0.1)` creates Adagrad's `sum` state in its constructor while `model` is "
            "still on the CPU, so the state stays there after `model.to(device)` and the first `step()` fails; "
            "move the model before building the optimizer",
        )
    ]
    moved_first = source.replace(
        "    optimizer = make_optimizer(model, 0.1)\n    model.to(device)\n",
        "    model.to(device)\n    optimizer = make_optimizer(model, 0.1)\n",
    )
    assert moved_first != source
    assert _findings(moved_first, "DL111") == []


def test_a_chain_through_a_method_of_the_trainer() -> None:
    source = textwrap.dedent(
        """
        import torch
        from torch import nn, optim


        def adagrad_over(params, lr):
            return optim.Adagrad(params, lr=lr)


        class Trainer:
            def __init__(self, device):
                self.device = device
                self.model = nn.Linear(4, 2)
                self.optimizer = self._optimizer(0.05)

            def _optimizer(self, lr):
                return adagrad_over(self.model.parameters(), lr)

            def fit(self, batches):
                self.model.to(self.device)
                for x, y in batches:
                    loss = nn.functional.mse_loss(self.model(x.to(self.device)), y.to(self.device))
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
        """
    )
    found = _findings(source, "DL111")
    assert [(code, line) for code, line, _ in found] == [("DL111", 14)]
    assert _findings(source.replace("Adagrad", "SGD"), "DL111") == []  # SGD makes no state until a step


_ENCODING_HELPER = """
import torch
from torch import nn


def sincos(n, dim, dtype=torch.float32):
    pos = torch.arange(n)[:, None] / (1e4 ** (torch.arange(dim // 2) / dim))
    return torch.cat((pos.sin(), pos.cos()), dim=1).type(dtype)


class Encoder(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        table = sincos(n, dim{passed})
        self.table = table

    def forward(self, x):
        return self.proj(x) + self.table
"""


@pytest.mark.parametrize(
    "passed", ["", ", dtype=torch.float16", ", torch.bfloat16"], ids=["default", "keyword", "positional"]
)
def test_a_table_cast_with_a_dtype_parameter_stays_on_the_cpu(passed: str) -> None:
    # `.type(dtype)` where `dtype` defaults to a torch dtype and every call leaves it out or
    # passes one is a cast: the table stays where it was made, on the CPU
    source = _ENCODING_HELPER.format(passed=passed)
    assert _findings(source, "DL102") == [
        (
            "DL102",
            16,
            "`self.table` holds a CPU tensor that is not a parameter or buffer: `model.to(device)` never moves it "
            'and `state_dict()` never saves it; use `self.register_buffer("table", ...)` (or `nn.Parameter` if it '
            "is trained)",
        )
    ]
    registered = source.replace("self.table = table", 'self.register_buffer("table", table)')
    assert _findings(registered, "DL102") == []


def test_a_type_argument_that_may_name_a_cuda_tensor_type_is_not_a_cast() -> None:
    # a parameter without a dtype default, or a call passing a tensor type, may move the table
    no_default = _ENCODING_HELPER.format(passed="").replace("dtype=torch.float32", "dtype")
    no_default = no_default.replace("sincos(n, dim)", "sincos(n, dim, torch.cuda.FloatTensor)")
    assert _findings(no_default, "DL102") == []
    tensor_type = _ENCODING_HELPER.format(passed=", torch.cuda.FloatTensor")
    assert _findings(tensor_type, "DL102") == []
