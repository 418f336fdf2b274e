"""Whether the argument of `t.type(x)` is a dtype (a cast that keeps `t` where it is) rather than a
tensor type that names a device (`torch.cuda.FloatTensor`, `t.type()`'s string, a name bound to
either), which `t.type(x)` moves `t` to."""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.devices import DTYPE_NAMES
from devicelint.analysis.training.helpers import bound_arguments, call_sites
from devicelint.context import FileContext


def holds_a_dtype(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`torch.float32` itself, or a parameter of the enclosing function that defaults to a torch
    dtype, is never rebound there, and that every call of the function in the file leaves out or
    fills with a torch dtype (`def posemb(h, w, dim, dtype=torch.float32): ... pe.type(dtype)`).
    A name that may hold a tensor type (`dtype = torch.cuda.FloatTensor if cuda else ...`, a
    parameter without such a default) is not."""
    if _torch_dtype(ctx, node):
        return True
    function = ctx.index.enclosing_function(node) if type(node) is cst.Name else None
    if function is None or type(node) is not cst.Name:
        return False
    params = function.params
    param = next(
        (p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == node.value),
        None,
    )
    if param is None or param.default is None or not _torch_dtype(ctx, param.default):
        return False
    if any(
        type(bound) is cst.Name and bound.value == node.value and ctx.index.in_binding_target(bound)
        for bound in ctx.index.within(function.body, cst.Name)
    ):
        return False  # rebound in the body: what it holds there is another question
    for call in call_sites(ctx, function).calls:
        if any(arg.star for arg in call.args):
            return False
        bound = bound_arguments(ctx, function, call)
        if bound is None:
            return False
        given = bound.get(node.value)
        if given is not None and not _torch_dtype(ctx, given):
            return False
    return True


def _torch_dtype(ctx: FileContext, node: cst.BaseExpression) -> bool:
    qualified = ctx.qualified_name(node) or ""
    return qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in DTYPE_NAMES
