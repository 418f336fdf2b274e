"""What a step's helpers do: the step operations (backward, scaler calls, clipping, optimizer
steps) a call performs through functions of the file, followed a few levels deep.

Below the rules and above `helpers` (which finds the callee) and `step_parts` (which says what
a scaler, a clipper and an optimizer are): `step_parts` asks `helpers` for a helper's result, so
`helpers` cannot ask `step_parts` back.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.helpers import callee, handed_arguments
from devicelint.analysis.training.step_parts import is_clipper, is_scaler, looks_like_optimizer, scaled_backward
from devicelint.analysis.training.syntax import body_nodes, enclosing_ifs, has_star, method_name, positional, receiver
from devicelint.analysis.training.values import built_class
from devicelint.context import FileContext

# Effect kinds, in the words the rules use.
SCALED_BACKWARD = "scaled_backward"  # `scaler.scale(loss).backward()`
BACKWARD = "backward"  # plain `loss.backward()`
UNSCALE = "unscale"  # `scaler.unscale_(opt)` or a method named for unscaling
CLIP = "clip"  # `clip_grad_norm_(...)`
SCALER_STEP = "scaler_step"  # `scaler.step(opt)`
OPTIMIZER_STEP = "optimizer_step"  # plain `opt.step()`
UPDATE = "update"  # `scaler.update()`

_MAX_DEPTH = 3


@dataclass(frozen=True)
class Effect:
    """One step operation a callee performs."""

    kind: str
    node: cst.Call  # the call inside the callee (or inside a helper it calls)
    scaler: str | None  # the scaler as the callee writes it (`self.scaler`), for scaler calls
    conditional: bool  # under an `if` or a loop of the callee (or of a helper on the way)
    # for an unscale by a function of another module (`node` is then the caller's own call):
    # the optimizer the call hands it, in the caller's words
    optimizer: str | None = None


def effects_of_call(ctx: FileContext, call: cst.Call) -> tuple[Effect, ...]:
    """The step operations `call` performs through a function of this file, or of another module
    of the project as its summary says (empty when unknown)."""
    func = callee(ctx, call)
    if func is not None:
        return effects(ctx, func)
    if ctx.project.plain_classes and type(call.func) is cst.Attribute:
        found = _imported_method_effects(ctx, call, call.func)
        if found:
            return found
    return _imported_effects(ctx, call) if ctx.project.helpers else ()


def _imported_method_effects(ctx: FileContext, call: cst.Call, func: cst.Attribute) -> tuple[Effect, ...]:
    """`trainer.optimize_parameters(i)` on an instance of another project module's class: the
    step calls that method makes, its scaler in the caller's words (`trainer.gradscaler`)."""
    owner = dotted_name(func.value)
    cls = ctx.project.plain_classes.get(built_class(ctx, func.value) or _handed_class(ctx, func.value, call) or "")
    if owner is None or cls is None:
        return ()
    return tuple(
        Effect(kind, call, f"{owner}.{scaler}" if scaler else None, conditional, f"{owner}.{opt}" if opt else None)
        for method, kind, scaler, conditional, opt in cls.step_effects
        if method == func.attr.value
    )


def _handed_class(ctx: FileContext, owner: cst.BaseExpression, call: cst.Call) -> str | None:
    """The class, as the file spells it, of the instance every caller of the function around
    `call` hands its parameter `owner` (`train_one_step(model, batch, optimizer)` called with
    `optimizer = MixedPrecisionOptimizer(...)`)."""
    if type(owner) is not cst.Name:
        return None
    classes = {
        dotted_name(value.func) if type(value) is cst.Call else built_class(ctx, value) if value is not None else None
        for _, value in handed_arguments(ctx, owner, call) or ()
    }
    return classes.pop() if len(classes) == 1 else None


def _imported_effects(ctx: FileContext, call: cst.Call) -> tuple[Effect, ...]:
    """`backward_step(loss, opt)` of a project function: its step calls on the branch this call
    takes (`scaler` left out: the `else` of its `if scaler is not None:`), at the call."""
    spelled = dotted_name(call.func)
    helper = ctx.project.helpers.get(spelled) if spelled is not None else None
    if helper is None or not helper.uses.step_effects or has_star(call):
        return ()
    bound: dict[str, cst.BaseExpression] = {}
    for position, arg in enumerate(call.args):
        param = helper.uses.parameter_at(position, arg.keyword.value if arg.keyword is not None else None)
        if param is not None:
            bound[param] = arg.value
    out: list[Effect] = []
    unscaled = dict(helper.uses.unscales)
    for kind, param, guard in helper.uses.step_effects:
        if guard:
            value = bound.get(guard[1:])
            given = value is not None and not (isinstance(value, cst.Name) and value.value == "None")
            if given != (guard[0] == "+"):
                continue
        if kind in _SCALER_KINDS and param in bound and not is_scaler(ctx, bound[param]):
            # The summary reads any `p.step(x)` as a scaler's: a gym environment stepped with an
            # action (`env.step(action)`) or a scheduler with a metric is not one, and only the
            # caller's file tells what it hands there.
            continue
        # (a scaler call names its scaler parameter: the scaler the caller hands there)
        scaler = dotted_name(bound[param]) if kind in _SCALER_KINDS and param in bound else None
        optimizer = bound.get(unscaled.get(param, "")) if kind == UNSCALE and scaler is not None else None
        out.append(Effect(kind, call, scaler, False, dotted_name(optimizer) if optimizer is not None else None))
    return tuple(out)


_SCALER_KINDS = frozenset({UNSCALE, SCALER_STEP, UPDATE})


def effects(ctx: FileContext, func: cst.FunctionDef) -> tuple[Effect, ...]:
    """The step operations `func` performs, in source order, following its own helpers."""
    cache: dict[tuple[int, int], tuple[Effect, ...]] = ctx.shared("training.helpers.effects", lambda c: {})
    return _effects(ctx, func, cache, ())


def _effects(
    ctx: FileContext, func: cst.FunctionDef, cache: dict[tuple[int, int], tuple[Effect, ...]], stack: tuple[int, ...]
) -> tuple[Effect, ...]:
    # Keyed by the depth left too: a helper seen deep in a chain is followed less far, and each
    # (function, depth) is walked once however many call paths reach it.
    key = (id(func), len(stack))
    if key in cache:
        return cache[key]
    if id(func) in stack or len(stack) > _MAX_DEPTH:
        return ()
    out: list[Effect] = []
    for node in body_nodes(func.body):
        if type(node) is not cst.Call:
            continue
        name = method_name(node)
        owner = receiver(node)
        kind: str | None = None
        scaler: str | None = None
        if is_clipper(ctx, node):
            kind = CLIP
        elif name == "backward" and not positional(node) and not has_star(node):
            kind = SCALED_BACKWARD if scaled_backward(ctx, node) else BACKWARD
        elif (
            name in ("unscale_", "step", "update") and is_scaler(ctx, owner) and (name == "update" or positional(node))
        ):
            kind = {"unscale_": UNSCALE, "step": SCALER_STEP, "update": UPDATE}[name]
            scaler = dotted_name(owner) if owner is not None else None
        elif name is not None and "unscale" in name.lower():
            kind = UNSCALE
        elif name == "step" and not node.args and looks_like_optimizer(owner, ctx):
            kind = OPTIMIZER_STEP
        conditional = _conditional(ctx, node, func)
        if kind is not None:
            out.append(Effect(kind, node, scaler, conditional))
            continue
        inner = callee(ctx, node)
        if inner is not None and inner is not func:
            for effect in _effects(ctx, inner, cache, (*stack, id(func))):
                out.append(Effect(effect.kind, effect.node, effect.scaler, effect.conditional or conditional))
    result = tuple(out)
    cache[key] = result
    return result


def _conditional(ctx: FileContext, node: cst.CSTNode, func: cst.FunctionDef) -> bool:
    """Whether `node` runs only on some calls of `func`: under an `if`, a loop or a handler of it."""
    if any(True for _ in enclosing_ifs(ctx, node, func)):
        return True
    for ancestor in ctx.index.ancestors(node):
        if ancestor is func:
            return False
        if type(ancestor) in (cst.For, cst.While, cst.ExceptHandler):
            return True
    return False


def named_unscale(call: cst.Call) -> Effect:
    """A call of another object's method named for unscaling (`strategy.unscale_gradients(opt)`)."""
    return Effect(UNSCALE, call, None, False)


def kinds(found: tuple[Effect, ...]) -> set[str]:
    return {effect.kind for effect in found}
