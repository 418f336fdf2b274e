"""The calls a function makes in the order they run, with the methods it calls on `self`
spliced in where it calls them: a class is one unit, and `fit()` calling `self.resume()` then
`self.to_gpu()` loads before it moves, whichever methods hold the statements."""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.placement_classes import self_attribute
from devicelint.context import FileContext

# How deep `self.a()` -> `self.b()` -> ... is spliced (recursion stops earlier).
_MAX_DEPTH = 3


def calls_by_scope(ctx: FileContext) -> dict[int, list[cst.Call]]:
    """id(function) (or id(module)) -> the calls written in its own body, in source order."""

    def build(c: FileContext) -> dict[int, list[cst.Call]]:
        found: dict[int, list[cst.Call]] = {}
        for call in c.index.of_type(cst.Call):
            found.setdefault(id(c.index.enclosing_function(call) or c.module), []).append(call)
        return found

    return ctx.shared("execution_order.calls", build)


def calls_by_name(ctx: FileContext) -> dict[str, list[cst.Call]]:
    """The file's calls by the name they call (`f` for `f(...)` and for `x.f(...)`), in source
    order: finding the calls of one function is then a lookup, not a walk of every call."""

    def build(c: FileContext) -> dict[str, list[cst.Call]]:
        found: dict[str, list[cst.Call]] = {}
        for call in c.index.of_type(cst.Call):
            func = call.func
            name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
            if name is not None:
                found.setdefault(name, []).append(call)
        return found

    return ctx.shared("execution_order.calls_by_name", build)


def calls_in_order(ctx: FileContext, scope: cst.CSTNode) -> list[cst.Call]:
    """`scope`'s calls in source order, each `self.method(...)` of its class followed by that
    method's own calls (a few levels deep, never re-entering a method already on the path)."""
    out: list[cst.Call] = []
    _splice(ctx, scope, out, (id(scope),))
    return out


def _splice(ctx: FileContext, scope: cst.CSTNode, out: list[cst.Call], path: tuple[int, ...]) -> None:
    methods = _sibling_methods(ctx, scope)
    for call in calls_by_scope(ctx).get(id(scope), ()):
        out.append(call)
        name = self_attribute(call.func)
        callee = methods.get(name) if name is not None else None
        if callee is not None and id(callee) not in path and len(path) <= _MAX_DEPTH:
            _splice(ctx, callee, out, path + (id(callee),))


def _sibling_methods(ctx: FileContext, scope: cst.CSTNode) -> dict[str, cst.FunctionDef]:
    if type(scope) is not cst.FunctionDef:
        return {}
    cls = ctx.index.parent(ctx.index.parent(scope) or scope)
    if type(cls) is not cst.ClassDef or type(cls.body) is not cst.IndentedBlock:
        return {}
    return {f.name.value: f for f in cls.body.body if type(f) is cst.FunctionDef}


def init_of(ctx: FileContext, scope: cst.CSTNode) -> cst.FunctionDef | None:
    """The `__init__` of the class `scope` is a method of (None for `__init__` itself)."""
    init = _sibling_methods(ctx, scope).get("__init__")
    return init if init is not scope else None
