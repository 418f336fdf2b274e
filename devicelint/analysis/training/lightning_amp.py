"""Lightning's manual optimisation under float16 mixed precision.

With `Trainer(precision="16-mixed")` (or `16`, `"16"`), Lightning's precision plugin owns a
GradScaler: `self.manual_backward(loss)` in a LightningModule backpropagates the scaled loss, and
`opt.step()` on an optimizer from `self.optimizers()` unscales and steps through the scaler. So a
manual step is `scaler.scale(loss).backward()` ... `scaler.step(opt)` spelled in Lightning's words,
and a plain `torch.nn.utils.clip_grad_norm_` between them clips scaled gradients
(`self.clip_gradients(opt, ...)` is Lightning's way, which unscales first).

Only a precision the file spells out counts: a Trainer built in another module, or a precision
read from a config, is unknown and nothing here claims it.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.syntax import body_nodes, keyword, method_name, receiver
from devicelint.context import FileContext

_TRAINERS = frozenset(
    {
        "pytorch_lightning.Trainer",
        "pytorch_lightning.trainer.Trainer",
        "pytorch_lightning.trainer.trainer.Trainer",
        "lightning.Trainer",
        "lightning.pytorch.Trainer",
        "lightning.pytorch.trainer.Trainer",
        "lightning.pytorch.trainer.trainer.Trainer",
    }
)
# `precision=` values that run float16 autocast with a GradScaler ("16-true" has no scaler).
_FLOAT16_MIXED = frozenset({"16", "16-mixed"})


def float16_mixed_trainer(ctx: FileContext) -> bool:
    """Whether the file builds a Lightning Trainer with float16 mixed precision."""

    def build(c: FileContext) -> bool:
        if "precision" not in c.source:
            return False
        for call in c.index.of_type(cst.Call):
            if c.qualified_name(call.func) not in _TRAINERS:
                continue
            value = keyword(call, "precision")
            if type(value) is cst.Integer and value.value == "16":
                return True
            if type(value) is cst.SimpleString and value.evaluated_value in _FLOAT16_MIXED:
                return True
        return False

    return ctx.shared("training.lightning_amp.trainer", build)


def manual_backwards(ctx: FileContext, func: cst.CSTNode) -> list[cst.Call]:
    """`self.manual_backward(loss)` calls of a LightningModule method, in source order."""
    if type(func) is not cst.FunctionDef or not _in_lightning_module(ctx, func):
        return []
    return [
        node
        for node in body_nodes(func.body)
        if type(node) is cst.Call
        and method_name(node) == "manual_backward"
        and type(receiver(node)) is cst.Name
        and receiver(node).value == "self"  # type: ignore[union-attr]  # checked on the line above
    ]


def _in_lightning_module(ctx: FileContext, func: cst.FunctionDef) -> bool:
    cls = ctx.index.enclosing_class(func)
    if cls is None:
        return False
    return any((dotted_name(base.value) or "").rsplit(".", 1)[-1] == "LightningModule" for base in cls.bases)
