"""DL502's lossy device tests, on code written apart from the re-created bugs (ra23, rc17): a
device rebuilt from a tensor's CUDA flag, and a legacy type string used as a CUDA test. Each
shape is found under other names and with its logic in a helper; the one-fix twin is clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "models/cells.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


def _messages(source: str) -> list[str]:
    return [f.message for f in lint_source(textwrap.dedent(source), "models/cells.py", DEFAULT).findings]


# -- a device rebuilt from `is_cuda` -----------------------------------------------------------

REBUILT = """
    import torch
    from torch import nn


    def _where(sample):
        if sample.is_cuda:
            target = torch.device("cuda")
        else:
            target = torch.device("cpu")
        return torch.zeros(sample.size(0), 8).to(target)


    class Neuron(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRUCell(8, 8)

        def forward(self, spikes, hidden=None):
            hidden = _where(spikes) if hidden is None else hidden
            return self.gru(spikes, hidden)
"""


def test_device_rebuilt_from_is_cuda_in_a_helper_is_reported() -> None:
    assert _found(REBUILT) == [(8, "DL502")]
    (message,) = _messages(REBUILT)
    assert message == (
        '`target = torch.device("cuda")` is an index-less device rebuilt from `sample`\'s CUDA flag: '
        '`"cuda"` is the current GPU, not `sample`\'s (`cuda:1` becomes `cuda:0`), and an MPS or XPU '
        "tensor gets the CPU; use `sample.device` instead"
    )


def test_device_taken_from_the_tensor_is_clean() -> None:
    fixed = REBUILT.replace(
        """        if sample.is_cuda:
            target = torch.device("cuda")
        else:
            target = torch.device("cpu")
""",
        """        target = sample.device
""",
    )
    assert _found(fixed) == []


def test_device_type_for_autocast_is_clean() -> None:
    source = """
        import torch


        def run(layer, batch):
            kind = "cuda" if batch.is_cuda else "cpu"
            with torch.autocast(kind, enabled=False):
                return layer(batch.float())
    """
    assert _found(source) == []


def test_rebuilt_device_only_printed_is_clean() -> None:
    source = """
        def describe(t):
            place = "cuda" if t.is_cuda else "cpu"
            return f"{place}: {tuple(t.shape)}"
    """
    assert _found(source) == []


# -- a legacy type string as a CUDA test -------------------------------------------------------

TYPE_TEST = """
    import torch
    from torch.autograd import Function


    def _on_gpu(a):
        return a.type() == "torch.cuda.FloatTensor"


    class Hinge(Function):
        @staticmethod
        def forward(ctx, scores, labels):
            if labels.type() != "torch.cuda.FloatTensor":
                labels = labels.to(scores.device)
            ctx.save_for_backward(scores, labels)
            return (1 - scores * labels).clamp_min(0).mean()
"""


def test_type_string_as_cuda_test_is_reported() -> None:
    # the helper named for the device and the dispatch in `forward` both test the dtype too
    assert _found(TYPE_TEST) == [(7, "DL502"), (13, "DL502")]
    assert _messages(TYPE_TEST)[1].endswith("test `not labels.is_cuda` instead")


def test_cuda_flag_test_is_clean() -> None:
    fixed = TYPE_TEST.replace('labels.type() != "torch.cuda.FloatTensor"', "not labels.is_cuda")
    assert _found(fixed.replace('a.type() == "torch.cuda.FloatTensor"', "a.is_cuda")) == []


def test_predicate_named_for_the_dtype_is_clean() -> None:
    source = """
        def is_cuda_float(t):
            return t.type() == "torch.cuda.FloatTensor"
    """
    assert _found(source) == []


def test_type_dispatch_over_several_dtypes_is_clean() -> None:
    source = """
        def pick(x):
            if x.type() == "torch.cuda.FloatTensor":
                return "f32"
            elif x.type() == "torch.cuda.DoubleTensor":
                return "f64"
            return "ref"
    """
    assert _found(source) == []


# -- a value just tested to be a string is compared as a string (fresh30 W5) --------------------

NARROWED = """
    import torch
    from torch import nn


    class Table(nn.Module):
        def __init__(self, where: torch.device):
            super().__init__()
            self.where = where

        @property
        def home(self) -> torch.device:
            return self.where

        def skip_init(self) -> bool:
            return isinstance(self.home, str) and self.home == "meta"

        def lazy(self) -> bool:
            if isinstance(self.home, (str, bytes)):
                return self.home == "meta"
            return False

        def unguarded(self) -> bool:
            return self.home == "meta"
"""


def test_a_device_compared_with_a_string_without_a_str_test_is_reported() -> None:
    assert _found(NARROWED) == [(24, "DL502")]
    assert _messages(NARROWED)[0] == (
        '`self.home == "meta"` is always False: a `torch.device` never equals a string; '
        'compare `self.home.type == "meta"` instead'
    )
