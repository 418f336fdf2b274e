"""Where the elements of a comprehension come from, for the container rules: `[h.to(device) for h
in heads]` in `__init__` holds what the caller handed in as `heads`, moved or not."""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext

# Module methods that return the module itself (`nn.Module.to`, `.cuda()`, `.eval()`).
MODULE_SELF_METHODS = frozenset(
    {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval", "requires_grad_", "share_memory"}
)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


def kept_receiver(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """`head` in `head.to(device)`: a module's own move hands back the module."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in MODULE_SELF_METHODS:
        return node.func.value
    return None


def iterated_parameter(ctx: FileContext, name: cst.Name) -> tuple[cst.FunctionDef, cst.Name] | None:
    """(`__init__`, the parameter) when `name` is the loop variable of a comprehension of a
    class's `__init__` that runs over one of its parameters, unchanged (`for h in heads`)."""
    node: cst.CSTNode | None = ctx.index.parent(name)
    while node is not None and not isinstance(node, _COMPREHENSIONS):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            return None
        node = ctx.index.parent(node)
    if node is None:
        return None
    for_in = node.for_in
    if for_in.inner_for_in is not None or type(for_in.target) is not cst.Name or type(for_in.iter) is not cst.Name:
        return None
    if for_in.target.value != name.value:
        return None
    function = ctx.index.enclosing_function(node)
    if function is None or function.name.value != "__init__" or ctx.index.enclosing_class(function) is None:
        return None
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    if for_in.iter.value not in params or _rebound(ctx, function, for_in.iter.value):
        return None
    return function, for_in.iter


def _rebound(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    return any(
        type(n) is cst.AssignTarget and type(n.target) is cst.Name and n.target.value == name
        for n in ctx.index.walk(function.body)
    )
