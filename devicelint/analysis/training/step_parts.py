"""The parts of a training step that are told by what they call: a GradScaler and its name, an
optimizer's `step`, a gradient clipper, a scaled backward.

Below `step.py` (which orders them within a scope) and `helpers.py` (which finds them inside
the file's own functions that a step calls), so that each can use the other's answers without
importing it back. `step.py` re-exports these names.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.training.syntax import last_word, method_name, positional, receiver, text_of
from devicelint.analysis.training.values import assignments
from devicelint.context import FileContext

GRAD_SCALERS = frozenset(
    {
        "torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler", "torch.cpu.amp.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
CLIPPERS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_", "torch.nn.utils.clip_grad.clip_grad_norm",
    }
)
SCHEDULER_WORDS = ("sched", "lr", "warmup", "env", "swa")


def scaler_names(ctx: FileContext) -> frozenset[str]:
    """Targets (`scaler`, `self.scaler`) assigned a GradScaler anywhere in the file."""

    def build(c: FileContext) -> frozenset[str]:
        names = set()
        for scope in assignments(c).values():
            for target, values in scope.items():
                for value in values:
                    if isinstance(value, cst.IfExp):
                        value = value.body if isinstance(value.body, cst.Call) else value.orelse
                    if isinstance(value, cst.Call) and c.qualified_name(value.func) in GRAD_SCALERS:
                        names.add(target)
        return frozenset(names)

    return ctx.shared("training.step.scalers", build)


def is_scaler(ctx: FileContext, node: cst.BaseExpression | None) -> bool:
    if node is None:
        return False
    text = text_of(node)
    if text is None:
        return isinstance(node, cst.Call) and ctx.qualified_name(node.func) in GRAD_SCALERS
    return text in scaler_names(ctx) or "scaler" in text.rsplit(".", 1)[-1].lower()


def proven_scaler(ctx: FileContext, node: cst.BaseExpression | None) -> bool:
    """A scaler built from `GradScaler(...)` in this file, or one that scales or unscales somewhere."""

    def build(c: FileContext) -> frozenset[str]:
        used = set(scaler_names(c))
        for call in c.index.of_type(cst.Call):
            if method_name(call) in ("scale", "unscale_") and positional(call):
                text = text_of(call.func.value)  # type: ignore[attr-defined]  # method_name() matched: func is an Attribute
                if text is not None and "scaler" in text.rsplit(".", 1)[-1].lower():
                    used.add(text)
        return frozenset(used)

    text = text_of(node) if node is not None else None
    return text is not None and text in ctx.shared("training.step.proven_scalers", build)


def looks_like_optimizer(node: cst.BaseExpression | None) -> bool:
    word = last_word(node)
    if not word or any(w in word for w in SCHEDULER_WORDS) or "scaler" in word:
        return False
    return "optim" in word or word.startswith("opt") or word.endswith("opt")


def scaled_backward(ctx: FileContext, call: cst.Call) -> bool:
    """`scaler.scale(loss).backward()`."""
    inner = receiver(call)
    return isinstance(inner, cst.Call) and method_name(inner) == "scale" and is_scaler(ctx, receiver(inner))
