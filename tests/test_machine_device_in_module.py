"""DL107's machine-device shape on code written apart from the re-created bug (ra33): a module
method places a tensor on a module-level choice of the machine's device (a helper function or
a constant), not on the model's; the one-fix twin and scripts are clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "lib/decoder.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


DECODER = """
    import torch
    from torch import nn


    def _runtime_device():
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


    class Decoder(nn.Module):
        def __init__(self, vocab, hidden):
            super().__init__()
            self.hidden = hidden
            self.cell = nn.GRUCell(hidden, hidden)
            self.out = nn.Linear(hidden, vocab)

        def _start(self, batch):
            return torch.zeros(batch, self.hidden, device=_runtime_device())

        def forward(self, steps):
            h = self._start(steps.size(1))
            for x in steps:
                h = self.cell(x, h)
            return self.out(h)
"""


def test_state_on_a_helper_chosen_machine_device_is_reported() -> None:
    assert _found(DECODER) == [(18, "DL107")]


def test_state_on_the_model_device_is_clean() -> None:
    fixed = DECODER.replace("device=_runtime_device()", "device=self.out.weight.device")
    assert _found(fixed) == []


def test_a_script_choosing_its_device_once_is_clean() -> None:
    script = (
        DECODER
        + """

    if __name__ == "__main__":
        model = Decoder(10, 8).to(_runtime_device())
        print(model(torch.randn(5, 2, 8, device=_runtime_device())))
    """
    )
    assert _found(script) == []


CONSTANT = """
    import torch
    from torch import nn

    DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


    class Cell(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.width = width
            self.lin = nn.Linear(width, width)

        def blank(self, batch, DEVICE=None):
            return torch.zeros(batch, self.width, device=DEVICE)

        def forward(self, x):
            return self.lin(x) + torch.ones(self.width).to(DEVICE)
"""


def test_module_level_constant_read_in_forward_is_reported_and_a_shadowing_parameter_is_not() -> None:
    assert _found(CONSTANT) == [(18, "DL107")]


def test_a_file_that_moves_its_models_to_the_same_device_is_clean() -> None:
    assert _found(CONSTANT + "\n\n    cell = Cell(4).to(DEVICE)\n") == []
