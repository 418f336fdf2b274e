"""Callables a module keeps on itself that close over the instance: a bound method
(`self.op = self._gaussian`), `functools.partial(self._step, ...)`, or a lambda that reads
`self` (or a local name the method bound to one of its layers, `m = self.mlp`). `nn.DataParallel` builds each replica by copying the module's `__dict__`, so the copy
still calls the original instance, with the original's layers on the first GPU."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.names import dotted_name, is_staticmethod
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
        aliases = _layer_aliases(ctx, facts, method)
        kept = _over_instance(ctx, facts, value, aliases)
        if kept is None:
            continue
        runs, body = kept
        state = _state_reached(ctx, facts, body, _DEPTH, aliases)
        if state is not None:
            found.append(KeptCallable(attr, value, runs, state))
    return found


def _over_instance(
    ctx: FileContext, facts: ClassFacts, value: cst.BaseExpression, aliases: dict[str, str]
) -> tuple[str, cst.CSTNode] | None:
    """What `value` runs on the instance and the code it runs: `self.method` (also inside
    `functools.partial(...)`), or a lambda whose body reads `self` or a name in `aliases` (a
    local bound to a layer of the instance); either branch of `self._a if flag else self._b`."""
    if type(value) is cst.IfExp:
        return _over_instance(ctx, facts, value.body, aliases) or _over_instance(ctx, facts, value.orelse, aliases)
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
        if method is None or is_staticmethod(method):
            return None
        return f"the method `self.{attr}`", method.body
    if type(value) is cst.Attribute and self_attribute(value.value) in facts.submodules:
        # `self.encode = self.encoder.forward`: bound to the original submodule
        return f"the method `{dotted_name(value)}` of a submodule", value
    if type(value) is cst.Lambda and any(
        type(node) is cst.Name and node.value == "self" for node in ctx.index.walk(value.body)
    ):
        return "a lambda over `self`", value.body
    if type(value) is cst.Lambda:
        own = {p.name.value for p in (*value.params.posonly_params, *value.params.params, *value.params.kwonly_params)}
        for node in ctx.index.walk(value.body):
            if type(node) is cst.Name and node.value in aliases and node.value not in own:
                return f"a lambda over `{node.value}` (`self.{aliases[node.value]}`)", value.body
    return None


def _layer_aliases(ctx: FileContext, facts: ClassFacts, method: cst.FunctionDef) -> dict[str, str]:
    """Local names that `method` binds once, to a layer or registered tensor of the instance
    (`m = self.mlp`): a lambda over such a name holds the original layer as `self.mlp` would."""
    bound: dict[str, list[str | None]] = {}
    for node in ctx.index.walk(method.body):
        if type(node) is cst.Assign:
            for target in node.targets:
                if type(target.target) is cst.Name:
                    attr = self_attribute(node.value)
                    bound.setdefault(target.target.value, []).append(attr)
        elif type(node) in (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr):
            target = getattr(node, "target", None)
            if type(target) is cst.Name:
                bound.setdefault(target.value, []).append(None)
    return {
        name: attrs[0]
        for name, attrs in bound.items()
        if len(attrs) == 1 and attrs[0] is not None and (attrs[0] in facts.submodules or attrs[0] in facts.registered)
    }


def _state_reached(
    ctx: FileContext, facts: ClassFacts, body: cst.CSTNode, depth: int, aliases: dict[str, str] | None = None
) -> str | None:
    """A layer or registered tensor of the instance that `body` reads, directly, through a local
    alias of one (`aliases`) or through the methods it calls on `self`."""
    for node in ctx.index.walk(body):
        if aliases and type(node) is cst.Name and node.value in aliases:
            return aliases[node.value]
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
