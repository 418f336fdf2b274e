"""Loader helpers that leave `map_location` to their callers.

`def load_checkpoint(path, map_location=None): return torch.load(path, map_location=map_location)`
maps nothing unless its caller says where to: the load inside is right as written, and the bug is
at each call that leaves the parameter out (or hands `None`). The helper may be a function or
method of the file (read here from its tree) or a function of another module of the project
(`ParameterUses.unmapped_loads`, from the project index).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.imported_helpers import imported_calls
from devicelint.analysis.training.helpers import bound_arguments, callee
from devicelint.context import FileContext

LOADERS = frozenset({"torch.load", "torch.serialization.load"})


@dataclass(frozen=True)
class UnmappedCall:
    """A call of a loader helper that leaves its `map_location` parameter `None`."""

    call: cst.Call
    helper: str  # as the message names it: `load_checkpoint`, `utils.checkpoint.load_checkpoint`
    param: str  # the helper's parameter that becomes `map_location`
    where: str  # `utils/checkpoint.py:13` for a helper of another module, "" for one of the file


def unmapped_calls(ctx: FileContext) -> Iterator[UnmappedCall]:
    """Every call of a loader helper (of the file or of the project) that binds nothing but
    `None` to the parameter the helper hands `torch.load` as `map_location`, and whose result
    goes to a `load_state_dict` (a checkpoint: a generic loader also reads samplers and RNG
    states, which hold no device tensors)."""
    imported = any(helper.uses.unmapped_loads for helper in ctx.project.helpers.values())
    for call, helper, bound in imported_calls(ctx) if imported else ():
        for param, line in helper.uses.unmapped_loads:
            if _left_none(bound.get(param)) and _loads_state_from(ctx, call):
                yield UnmappedCall(call, helper.qualified, param, f"{helper.path}:{line}")
    local = ctx.shared("unmapped_loads.local", _local_loaders)
    if not local:
        return
    for call in ctx.index.of_type(cst.Call):
        function = callee(ctx, call) if not any(arg.star for arg in call.args) else None
        found = local.get(id(function)) if function is not None else None
        if function is None or not found:
            continue
        bound = bound_arguments(ctx, function, call)
        for param in found:
            if bound is not None and _left_none(bound.get(param)) and _loads_state_from(ctx, call):
                yield UnmappedCall(call, function.name.value, param, "")


def _loads_state_from(ctx: FileContext, call: cst.Call) -> bool:
    """`model.load_state_dict(load_checkpoint(p))`, or the result bound to a name of which a part
    goes to one (`ckpt = load_checkpoint(p)`, then `model.load_state_dict(ckpt["model"])`)."""
    if _into_load_state_dict(ctx, call):
        return True
    holder = ctx.index.parent(call)
    targets = holder.targets if type(holder) is cst.Assign and holder.value is call else ()
    if len(targets) != 1 or type(targets[0].target) is not cst.Name:
        return False
    name = targets[0].target.value
    scope = ctx.index.enclosing_function(call) or ctx.module
    return any(
        node.value == name and _into_load_state_dict(ctx, node)
        for node in ctx.index.within(scope, cst.Name)
        if node is not targets[0].target
    )


def _into_load_state_dict(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`node`, or a subscript of it, is what a `.load_state_dict(...)` call is handed."""
    parent = ctx.index.parent(node)
    while type(parent) is cst.Subscript and parent.value is node:
        node, parent = parent, ctx.index.parent(parent)
    call = ctx.index.parent(parent) if type(parent) is cst.Arg else None
    return (
        type(call) is cst.Call
        and type(call.func) is cst.Attribute
        and call.func.attr.value == "load_state_dict"
        and any(arg.value is node for arg in call.args)
    )


def _left_none(given: cst.BaseExpression | None) -> bool:
    return given is None or (type(given) is cst.Name and given.value == "None")


def _local_loaders(ctx: FileContext) -> dict[int, list[str]]:
    """The file's functions that hand a parameter defaulting to `None`, never rebound, to
    `torch.load` as `map_location`: id of the function -> those parameters."""
    found: dict[int, list[str]] = {}
    for call in ctx.index.of_type(cst.Call):
        if ctx.qualified_name(call.func) not in LOADERS:
            continue
        given = _map_location(call)
        function = ctx.index.enclosing_function(call)
        if type(given) is not cst.Name or function is None:
            continue
        if given.value in _none_defaults(function) and not _rebound(ctx, function, given.value):
            found.setdefault(id(function), []).append(given.value)
    return found


def _map_location(call: cst.Call) -> cst.BaseExpression | None:
    keyword = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "map_location"), None)
    positional = [a.value for a in call.args if a.keyword is None]
    return keyword if keyword is not None else (positional[1] if len(positional) > 1 else None)


def _none_defaults(function: cst.FunctionDef) -> set[str]:
    params = function.params
    return {
        p.name.value
        for p in (*params.posonly_params, *params.params, *params.kwonly_params)
        if type(p.default) is cst.Name and p.default.value == "None"
    }


def _rebound(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """`map_location = map_location or "cpu"`: the function fills the gap itself."""
    for target in ctx.index.within(function, cst.AssignTarget):
        if any(type(n) is cst.Name and n.value == name for n in _target_names(target.target)):
            return True
    for node in ctx.index.within(function, cst.AugAssign):
        if type(node.target) is cst.Name and node.target.value == name:
            return True
    return any(
        type(node.target) is cst.Name and node.target.value == name
        for node in ctx.index.within(function, cst.AnnAssign)
    )


def _target_names(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _target_names(e.value)]
    return [target]
