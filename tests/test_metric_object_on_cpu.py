"""DL113: a torchmetrics metric outside the model, fed device tensors, never moved."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def findings(source: str) -> list[tuple[int, str]]:
    options = EngineOptions(rules=(find_rule("DL113"),))
    result = lint_source(textwrap.dedent(source), "scripts/evaluate.py", options)
    return [(f.line, f.message) for f in result.findings if f.code == "DL113"]


def test_local_metric_fed_moved_predictions_is_reported_at_its_creation() -> None:
    assert findings("""
        import torch
        from torchmetrics.classification import BinaryAccuracy

        def evaluate(model, loader, device):
            acc = BinaryAccuracy()
            for x, y in loader:
                acc.update(model(x.to(device)).sigmoid(), y.to(device))
            return acc.compute()
    """) == [
        (
            6,
            "`BinaryAccuracy()` is created on the CPU and never moved, but "
            "`acc.update(model(x.to(device)).sigmoid(), y.to(device))` feeds it the device tensor "
            "`model(x.to(device)).sigmoid()`; create it with `.to(device)` (or make it an attribute of the model)",
        ),
    ]


def test_entry_of_a_plain_dict_indexed_by_key_counts_as_the_container() -> None:
    found = findings("""
        import torch
        import torchmetrics

        class Runner:
            def __init__(self, model):
                self.model = model.cuda()
                self.metrics = {}
                self.metrics["mae"] = torchmetrics.MeanAbsoluteError()

            def step(self, x, y):
                pred = self.model(x.cuda())
                self.metrics["mae"](pred, y.cuda())
    """)
    assert [line for line, _ in found] == [9]
    assert found[0][1] == (
        "`torchmetrics.MeanAbsoluteError()` is created on the CPU and never moved, but "
        '`self.metrics["mae"](pred, y.cuda())` feeds it the device tensor `pred`; create it with `.to(device)` '
        "(or make it an attribute of the model)"
    )


def test_silent_on_moves_module_attributes_cpu_inputs_and_unknown_bases() -> None:
    assert (
        findings("""
        import torch
        import torch.nn as nn
        from torchmetrics import Accuracy
        from mypkg.base import BaseEvaluator

        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.acc = Accuracy(task="binary")

            def forward(self, x, y):
                out = x.cuda().sigmoid()
                self.acc(out, y.cuda())
                return out

        class Evaluator(BaseEvaluator):  # may be a module: its base lives elsewhere
            def __init__(self):
                self.acc = Accuracy(task="binary")

            def run(self, x, y):
                self.acc.update(x.cuda(), y.cuda())

        def moved_later(model, x, y, device):
            acc = Accuracy(task="binary")
            acc.cuda()
            acc.update(model(x.to(device)), y.to(device))

        def on_host(model, x, y, device):
            acc = Accuracy(task="binary")
            acc.update(model(x.to(device)).cpu(), y)

        def handed_on(accelerator, model, x, device):
            acc = accelerator.prepare(Accuracy(task="binary"))
            other = Accuracy(task="binary")
            register(other)
            other.update(model(x.to(device)), x.to(device))
    """)
        == []
    )


def test_odd_calls_do_not_crash() -> None:
    assert (
        findings("""
        from torchmetrics import Accuracy

        m = Accuracy(task="binary")
        m()
        m.update(*args, **kwargs)
        m.update(preds=None)
        metrics = [Accuracy(task="binary")]
        metrics[0]()
        for x in metrics: x.update()
    """)
        == []
    )


def test_callback_metric_fed_the_hooks_batch_names_the_callback_fix() -> None:
    found = findings("""
        from pytorch_lightning import Callback
        from torchmetrics import MeanSquaredError

        class TrackError(Callback):
            def __init__(self):
                self.error = MeanSquaredError()

            def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                self.error.update(outputs["pred"], batch["target"])
                self.error.update(outputs["pred"].cpu(), batch["target"].cpu())
    """)
    assert found == [
        (
            7,
            "`MeanSquaredError()` is created on the CPU and never moved, but "
            '`self.error.update(outputs["pred"], batch["target"])` feeds it the device tensor '
            '`outputs["pred"]`; Lightning moves the LightningModule, not its callbacks: move it to '
            "`pl_module.device` in the callback's `setup()`",
        )
    ]
