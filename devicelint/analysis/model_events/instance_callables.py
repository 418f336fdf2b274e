"""Callables a module keeps on itself that close over the instance: a bound method
(`self.op = self._gaussian`), `functools.partial(self._step, ...)`, or a lambda that reads
`self`. `nn.DataParallel` builds each replica by copying the module's `__dict__`, so the copy
still calls the original instance, with the original's layers on the first GPU."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import ClassFacts, self_attribute
from devicelint.context import FileContext

# How many `self.method(...)` calls deep a kept callable is followed to find the layers it runs.
_DEPTH = 3


@dataclass(frozen=True)
class KeptCallable:
    attr: str  # the attribute the callable is kept on (`op` for `self.op = ...`)
    value: cst.BaseExpression  # what is assigned
    runs: str  # what it runs, for the message (the method `self._gaussian`, a lambda over `self`)
    state: str  # one layer or tensor of the instance it reaches (`g`)


def kept_callables(
    ctx: FileContext, facts: ClassFacts, called: set[str], running: list[cst.FunctionDef]
) -> list[KeptCallable]:
    """The attributes in `called` (attributes the code calls as `self.attr(...)`) that a method
    outside `running` (the methods a replica runs) binds to a callable over the instance that
    reaches the instance's layers or tensors; `self.forward = self._forward_eager` counts."""
    found: list[KeptCallable] = []
    for attr, value, method in facts.assignments:
        if attr not in called or any(method is run for run in running):
            continue
        kept = _over_instance(ctx, facts, value)
        if kept is None:
            continue
        runs, body = kept
        state = _state_reached(ctx, facts, body, _DEPTH)
        if state is not None:
            found.append(KeptCallable(attr, value, runs, state))
    return found


def _over_instance(ctx: FileContext, facts: ClassFacts, value: cst.BaseExpression) -> tuple[str, cst.CSTNode] | None:
    """What `value` runs on the instance and the code it runs: `self.method` (also inside
    `functools.partial(...)`), or a lambda whose body reads `self`; either branch of
    `self._a if flag else self._b`."""
    if type(value) is cst.IfExp:
        return _over_instance(ctx, facts, value.body) or _over_instance(ctx, facts, value.orelse)
    partial = False
    if type(value) is cst.Call and (ctx.qualified_name(value.func) or "") == "functools.partial" and value.args:
        partial, value = True, value.args[0].value
    attr = self_attribute(value)
    if attr is not None:
        if partial and attr in facts.submodules:
            # `partial(self.encoder, ...)` holds the module object itself; assigning the module
            # (`self.enc = self.encoder`) would register it and is replicated
            return f"the submodule `self.{attr}` in a `functools.partial`", value
        method = facts.methods.get(attr)
        if method is None or any(dotted_name(d.decorator) == "staticmethod" for d in method.decorators):
            return None
        return f"the method `self.{attr}`", method.body
    if type(value) is cst.Attribute and self_attribute(value.value) in facts.submodules:
        # `self.encode = self.encoder.forward`: bound to the original submodule
        return f"the method `{dotted_name(value)}` of a submodule", value
    if type(value) is cst.Lambda and any(
        type(node) is cst.Name and node.value == "self" for node in ctx.index.walk(value.body)
    ):
        return "a lambda over `self`", value.body
    return None


def _state_reached(ctx: FileContext, facts: ClassFacts, body: cst.CSTNode, depth: int) -> str | None:
    """A layer or registered tensor of the instance that `body` reads, directly or through the
    methods it calls on `self`."""
    for node in ctx.index.walk(body):
        attr = self_attribute(node)
        if attr is None:
            continue
        if attr in facts.submodules or attr in facts.registered:
            return attr
        method = facts.methods.get(attr)
        if method is not None and depth > 1:
            reached = _state_reached(ctx, facts, method.body, depth - 1)
            if reached is not None:
                return reached
    return None
