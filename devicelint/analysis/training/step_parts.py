"""The parts of a training step that are told by what they call: a GradScaler and its name, an
optimizer's `step`, a gradient clipper, a scaled backward.

Below `step.py` (which orders them within a scope) and `helpers.py` (which finds them inside
the file's own functions that a step calls), so that each can use the other's answers without
importing it back. `step.py` re-exports these names.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.training.syntax import (
    is_false,
    keyword,
    last_word,
    method_name,
    positional,
    receiver,
    scope_of,
    text_of,
)
from devicelint.analysis.training.values import assignments, attribute_values, built_class, values_of
from devicelint.context import FileContext

GRAD_SCALERS = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
CLIPPERS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
    }
)


def is_clipper(ctx: FileContext, call: cst.Call) -> bool:
    """A call that clips gradients: a torch clipper, or a name or `self.<attr>` bound once to
    `functools.partial(<clipper>, ...)` (`self.grad_clip_fn(model.parameters())`)."""
    if ctx.qualified_name(call.func) in CLIPPERS:
        return True
    if type(call.func) not in (cst.Name, cst.Attribute) or "partial" not in ctx.source:
        return False
    func = call.func
    if type(func) is cst.Name:
        values = values_of(ctx, func.value, scope_of(ctx, call))
    else:
        values = attribute_values(ctx, func)
    if values is None or len(values) != 1 or type(values[0]) is not cst.Call:
        return False
    bound = values[0]
    return (
        ctx.qualified_name(bound.func) == "functools.partial"
        and bool(bound.args)
        and bound.args[0].keyword is None
        and ctx.qualified_name(bound.args[0].value) in CLIPPERS
    )


SCHEDULER_WORDS = ("sched", "lr", "warmup", "env", "swa")


def scaler_names(ctx: FileContext) -> frozenset[str]:
    """Targets (`scaler`, `self.scaler`) assigned a GradScaler anywhere in the file."""

    def build(c: FileContext) -> frozenset[str]:
        names = set(assigned_scalers(c))
        # Whatever its name, an object that unscales an optimizer's gradients (`s.unscale_(opt)`)
        # or scales a loss that is then backpropagated (`s.scale(loss).backward()`) is a scaler:
        # the helper that takes it as a parameter is written for one.
        for call in c.index.of_type(cst.Call):
            name = method_name(call)
            if name == "unscale_" and positional(call):
                text = text_of(receiver(call))
            elif name == "backward" and type(inner := receiver(call)) is cst.Call:
                text = text_of(receiver(inner)) if method_name(inner) == "scale" and positional(inner) else None
            else:
                continue
            if text is not None:
                names.add(text)
        return frozenset(names)

    return ctx.shared("training.step.scalers", build)


def optimizer_names(ctx: FileContext) -> frozenset[str]:
    """Targets (`opt_g`, `self.optimizer`) assigned a `torch.optim` optimizer (or the file's own
    subclass of one) anywhere in the file, and what a scaler steps (`scaler.step(opt)`)."""

    def build(c: FileContext) -> frozenset[str]:
        names = set()
        for scope in assignments(c).values():
            for target, values in scope.items():
                for value in values:
                    if type(value) is cst.Call and optimizer_class(c.qualified_name(value.func) or ""):
                        names.add(target)
        scalers = scaler_names(c)
        zeroed: set[str] = set()
        stepped: set[str] = set()
        for call in c.index.of_type(cst.Call):
            name = method_name(call)
            if name == "step" and text_of(receiver(call)) in scalers and positional(call):
                text = text_of(positional(call)[0])
                if text is not None:
                    names.add(text)
            elif name in ("zero_grad", "step") and not positional(call):
                text = text_of(receiver(call))
                if text is not None:
                    (zeroed if name == "zero_grad" else stepped).add(text)
        # `opt.zero_grad()` ... `opt.step()`: a module zeroes gradients too, but never steps
        names.update(zeroed & stepped)
        return frozenset(names)

    return ctx.shared("training.step.optimizers", build)


def optimizer_class(qualified: str) -> bool:
    last = qualified.rsplit(".", 1)[-1]
    return (
        qualified.startswith("torch.optim.")
        and last[:1].isupper()
        and "lr_scheduler" not in qualified
        and "swa_utils" not in qualified
    )


def is_scaler(ctx: FileContext, node: cst.BaseExpression | None) -> bool:
    """A GradScaler that scales: built with `GradScaler(...)` in this file or named like one,
    and not one the file only ever builds with a literal `enabled=False` (its calls are
    pass-throughs: `scale(loss)` returns the loss unscaled)."""
    if node is None:
        return False
    text = text_of(node)
    if text is None:
        return type(node) is cst.Call and ctx.qualified_name(node.func) in GRAD_SCALERS and not _disabled(node)
    if is_disabled_scaler(ctx, text):
        return False
    if text in scaler_names(ctx) or "scaler" in text.rsplit(".", 1)[-1].lower():
        return True
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value != "self":
        # `owner.amp` in a helper every caller of which hands it `self`: the class's `self.amp`
        from devicelint.analysis.training.helpers import handed_instance_attribute  # helpers builds on this module

        alias = handed_instance_attribute(ctx, node)
        return (alias is not None and is_scaler(ctx, alias)) or _instance_scaler(ctx, node)
    return False


def _instance_scaler(ctx: FileContext, node: cst.Attribute) -> bool:
    """`learner.amp` where `learner` is bound once to an instance of a class of the file whose
    `self.amp` is a scaler, or of another project module's class whose methods step, update or
    unscale `self.amp` (`ImportedPlainClass.step_effects`)."""
    built = built_class(ctx, node.value) or "" if type(node.value) is cst.Name else ""
    attr = node.attr.value
    if any(c.name.value == built for c in ctx.index.of_type(cst.ClassDef)):
        return f"self.{attr}" in scaler_names(ctx)
    imported = ctx.project.plain_classes.get(built)
    return imported is not None and any(
        scaler == attr and kind in ("scaler_step", "update", "unscale")
        for _, kind, scaler, _, _ in imported.step_effects
    )


def built_scaler(ctx: FileContext, call: cst.Call) -> cst.Call | None:
    """The `GradScaler(...)` that `call` builds: the call itself, or, for a call of a helper of
    the file whose one `return` builds one (`make_scaler()`, `self._new_scaler(cfg)`), that
    construction in the caller's words (`helpers.returned_call`)."""
    if ctx.qualified_name(call.func) in GRAD_SCALERS:
        return call
    func = call.func
    name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
    if name is None or name not in _scaler_factories(ctx):
        return None
    from devicelint.analysis.training.helpers import returned_call  # helpers builds on this module

    returned = returned_call(ctx, call)
    return returned if returned is not None and ctx.qualified_name(returned.func) in GRAD_SCALERS else None


def _scaler_factories(ctx: FileContext) -> frozenset[str]:
    """Names of the file's functions and methods that return a `GradScaler(...)` they build."""

    def build(c: FileContext) -> frozenset[str]:
        names = set()
        for ret in c.index.of_type(cst.Return):
            value = ret.value
            if type(value) is cst.Call and c.qualified_name(value.func) in GRAD_SCALERS:
                function = c.index.enclosing_function(ret)
                if function is not None:
                    names.add(function.name.value)
        return frozenset(names)

    return ctx.shared("training.step.scaler_factories", build)


def assigned_scalers(ctx: FileContext) -> frozenset[str]:
    """Targets (`scaler`, `self.scaler`) that the file assigns a `GradScaler(...)`."""

    def build(c: FileContext) -> frozenset[str]:
        names = set()
        for scope in assignments(c).values():
            for target, values in scope.items():
                for value in values:
                    if type(value) is cst.IfExp:
                        value = value.body if type(value.body) is cst.Call else value.orelse
                    if type(value) is cst.Call and built_scaler(c, value) is not None:
                        names.add(target)
        return frozenset(names)

    return ctx.shared("training.step.assigned_scalers", build)


def disabled_scalers(ctx: FileContext) -> frozenset[str]:
    """Targets every assignment of which in the file is `GradScaler(..., enabled=False)`."""

    def build(c: FileContext) -> frozenset[str]:
        seen: dict[str, bool] = {}
        for scope in assignments(c).values():
            for target, values in scope.items():
                for value in values:
                    built = built_scaler(c, value) if type(value) is cst.Call else None
                    off = built is not None and _disabled(built)
                    seen[target] = seen.get(target, True) and off
        return frozenset(target for target, off in seen.items() if off)

    return ctx.shared("training.step.disabled_scalers", build)


def _disabled_scaler(ctx: FileContext, node: cst.BaseExpression | None) -> bool:
    text = text_of(node) if node is not None else None
    return text is not None and is_disabled_scaler(ctx, text)


def is_disabled_scaler(ctx: FileContext, text: str) -> bool:
    """`self.scaler` built disabled, or `owner.scaler` where the file's only `.scaler` attribute
    is a disabled `self.scaler` (the trainer handed to a helper as `owner`)."""
    disabled = disabled_scalers(ctx)
    if text in disabled:
        return True
    if "." not in text:
        return False
    attr = text.rsplit(".", 1)[1]
    # what the file builds, not names that only use one (`owner.scaler.scale(loss)` itself)
    same = [t for t in assigned_scalers(ctx) | disabled if t.rsplit(".", 1)[-1] == attr and "." in t]
    return bool(same) and all(t in disabled for t in same)


def _disabled(call: cst.Call) -> bool:
    return is_false(keyword(call, "enabled"))


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


def looks_like_optimizer(node: cst.BaseExpression | None, ctx: FileContext | None = None) -> bool:
    """An optimizer by its name, or (given the file) one the file builds or steps through a scaler."""
    if ctx is not None and node is not None and text_of(node) in optimizer_names(ctx):
        return True
    word = last_word(node)
    if not word or any(w in word for w in SCHEDULER_WORDS) or "scaler" in word:
        return False
    return "optim" in word or word.startswith("opt") or word.endswith("opt")


def scaled_backward(ctx: FileContext, call: cst.Call) -> bool:
    """`scaler.scale(loss).backward()`."""
    inner = receiver(call)
    return type(inner) is cst.Call and method_name(inner) == "scale" and is_scaler(ctx, receiver(inner))
