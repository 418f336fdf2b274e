"""DL117: a module built on the CPU and never moved, called with inputs on the device."""

from __future__ import annotations

import textwrap

import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule

NET = """
    import argparse
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)
"""


def findings(source: str) -> list[tuple[int, str, str]]:
    options = EngineOptions(rules=(find_rule("DL117"),))
    result = lint_source(textwrap.dedent(NET) + textwrap.dedent(source), "scripts/infer.py", options)
    return [(f.line, f.code, f.message) for f in result.findings]


def test_restored_model_fed_a_moved_batch_is_reported_at_the_call() -> None:
    assert findings("""
        def predict(path, x, device):
            model = Net()
            model.load_state_dict(torch.load(path, map_location=device))
            model.eval()
            x = x.to(device)
            return model(x)
    """) == [
        (
            19,
            "DL117",
            "`model` is built on the CPU by `Net(...)` and never moved, but is called with `x`, which is on "
            "the device; move the model first: `model.to(device)`",
        ),
    ]


def test_builder_helper_argparse_device_and_while_loop() -> None:
    assert findings("""
        def build():
            network = Net()
            network.load_state_dict(torch.load("w.pt", map_location="cpu"))
            return network.eval()

        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="cuda")
            args = parser.parse_args()
            net = build()
            x = torch.randn(1, 4).to(args.device)
            while True:
                y = net.forward(x)
                if y.sum() > 0:
                    break
    """) == [
        (
            26,
            "DL117",
            "`net` is built on the CPU by `Net(...)` and never moved, but is called with `x`, which is on "
            "the device; move the model first: `net.to(args.device)`",
        ),
    ]


@pytest.mark.parametrize(
    "body",
    [
        # renamed, and the device from a config object
        """
    def run(cfg, batch):
        clf = Net()
        return clf(batch.to(cfg.device))
    """,
        # kept in a dict, the input made on the device
        """
    def run(device):
        nets = {"a": Net()}
        return nets["a"](torch.zeros(2, 4, device=device))
    """,
        # a loop over batches, `**inputs` of a moved batch
        """
    def run(loader, device):
        model = Net()
        for step, inputs in enumerate(loader):
            inputs = {k: v for k, v in inputs.items()}
            model(**inputs.to(device))
    """,
    ],
)
def test_variants_are_reported(body: str) -> None:
    assert [code for _, code, _ in findings(body)] == ["DL117"]


@pytest.mark.parametrize(
    "body",
    [
        # moved by a helper of unknown body
        """
    def run(x, device, place):
        model = Net()
        place(model)
        return model(x.to(device))
    """,
        # moved through an alias, or a part of it
        """
    def run(x, device):
        model = Net()
        other = model
        other.cuda()
        return model(x.to(device))
    """,
        # moved on one path only
        """
    def run(x, device, cuda):
        model = Net()
        if cuda:
            model.to(device)
        return model(x.to(device))
    """,
        # a wrapper that scatters its inputs, a launcher
        """
    def run(x, accelerator):
        model = accelerator.prepare(Net())
        return model(x.to(accelerator.device)), nn.DataParallel(Net())(x.cuda())
    """,
        # built under a device context, or by a class that places itself
        """
    def run(x):
        with torch.device("cuda"):
            model = Net()
        return model(x.cuda())
    """,
        # the input follows the model
        """
    def run(x):
        model = Net()
        return model(x.to(next(model.parameters()).device)), model(x.to(model.fc.weight.device))
    """,
        # moved by a method of the object that holds it
        """
    class Runner:
        def run(self, x, device):
            self.model = Net()
            self.setup(device)
            return self.model(x.to(device))

        def setup(self, device):
            self.model.to(device)
    """,
    ],
)
def test_uncertain_places_are_not_reported(body: str) -> None:
    assert findings(body) == []
