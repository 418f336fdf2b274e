"""Summaries of the file's own helpers that return moved copies of their arguments.

`to_device(batch, device)` as a statement throws away what the helper returns; when the
helper only builds and returns moved copies (`{k: v.to(device) for k, v in batch.items()}`,
`return x.to(device), y.to(device)`, a recursive walk over nested containers) and changes
nothing in place, the caller's `batch` stays where it was. DL104 asks `moved_by_helper(ctx, call)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.modules import methods
from devicelint.analysis.names import is_staticmethod
from devicelint.analysis.placement_facts import moves_to_accelerator
from devicelint.analysis.training.reads import computed_from
from devicelint.context import FileContext

MOVES = frozenset({"to", "cuda", "cpu", "xpu", "mps"})
# Calls that rebuild a container from a generator (`type(batch)(to_device(v) for v in batch)`).
REBUILDERS = frozenset({"type", "tuple", "list", "dict"})
# Methods through which a helper changes its argument in place.
IN_PLACE_METHODS = frozenset({"update", "__setitem__", "setdefault", "pop"})


@dataclass(frozen=True)
class HelperResult:
    """What a dropped helper call leaves unmoved: the caller's arguments, in the order the helper
    returns their copies. `pair_only` when the copies are parts of one argument returned as a
    tuple (`images, targets = batch` in the helper): no single assignment fixes the caller."""

    receivers: tuple[cst.BaseExpression, ...]
    pair_only: bool = False


def moved_by_helper(ctx: FileContext, call: cst.Call) -> HelperResult | None:
    """The arguments that a same-file helper returns moved, when the helper only returns copies."""
    found = _helper_of(ctx, call)
    if found is None or any(a.star or a.keyword is not None for a in call.args):
        return None
    helper, params = found
    args = [a.value for a in call.args]
    returns = _returns(ctx, helper)
    if not returns or any(r.value is None for r in returns):
        return None
    paired = _returned_arguments(returns, params, args)
    if paired is not None:
        return HelperResult(paired)
    summary = _summary(ctx, helper, params)
    if summary is None or summary[0] >= len(args) or type(args[summary[0]]) is not cst.Name:
        return None
    return HelperResult((args[summary[0]],), pair_only=summary[1])


def moved_to_accelerator_by_helper(ctx: FileContext, call: cst.Call) -> tuple[cst.BaseExpression, ...]:
    """The caller's arguments that a same-file helper returns copies of moved to the accelerator
    (`pair_to_device(x, y, dev)`, whether or not the caller keeps them): what a loop hands such
    a helper are tensors meant for the device."""
    result = moved_by_helper(ctx, call)
    found = _helper_of(ctx, call) if result is not None else None
    if result is None or found is None:
        return ()
    if not any(moves_to_accelerator(node) for node in ctx.index.within(found[0].body, cst.Call)):
        return ()
    return result.receivers


def _returns(ctx: FileContext, helper: cst.FunctionDef) -> list[cst.Return]:
    return ctx.index.returns_of(helper)


# A helper's summary: (position of the parameter it returns moved copies of, whether as a tuple of
# its parts), or None. Memoised per file; a helper being summarised counts as no mover (recursion
# is recognised by name instead).
_IN_PROGRESS = (-1, False)


def _summary(ctx: FileContext, helper: cst.FunctionDef, params: list[str]) -> tuple[int, bool] | None:
    memo: dict[int, tuple[int, bool] | None] = ctx.shared("moved_copies", lambda c: {})
    if id(helper) in memo:
        found = memo[id(helper)]
        return None if found == _IN_PROGRESS else found
    memo[id(helper)] = _IN_PROGRESS
    memo[id(helper)] = result = _summarise(ctx, helper, params)
    return result


def _summarise(ctx: FileContext, helper: cst.FunctionDef, params: list[str]) -> tuple[int, bool] | None:
    returns = _returns(ctx, helper)
    if not returns or any(r.value is None for r in returns) or _falls_off_the_end(helper):
        return None  # a path that returns None is not a helper that hands back copies
    if not any(_moves_inside(ctx, r) for r in returns):
        return None  # recursion alone (`[f(x) for x in fn]`) moves nothing
    for position, param in enumerate(params):
        parts = _parts_of(ctx, helper, param)
        copies = [r for r in returns if _moved_copy_of(ctx, r.value, parts, helper.name.value)]  # type: ignore[arg-type]  # `returns` holds `return <value>` only
        # `return batch` for a leaf that is not a tensor keeps the contract: tensors come back moved
        unchanged = [r for r in returns if type(r.value) is cst.Name and r.value.value == param]
        if not copies or len(copies) + len(unchanged) != len(returns):
            continue
        if any(_changes_in_place(ctx, helper, name) for name in parts):
            return None
        return position, any(type(r.value) is cst.Tuple for r in copies)
    return None


def _falls_off_the_end(helper: cst.FunctionDef) -> bool:
    body = helper.body.body if type(helper.body) is cst.IndentedBlock else ()
    last = body[-1] if body else None
    if type(last) is cst.SimpleStatementLine:
        return not any(type(small) in (cst.Return, cst.Raise) for small in last.body)
    return type(last) in (cst.For, cst.While, cst.With)  # `if`/`try` endings: not worth proving


def _moves_inside(ctx: FileContext, ret: cst.Return) -> bool:
    """A returned value that contains a real move (`.to(...)`), or a call to another helper."""
    for node in ctx.index.walk(ret):
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in MOVES:
            return True
        if type(node) is cst.Call and not (type(node.func) is cst.Name and node.func.value == _name_of(ctx, ret)):
            found = _helper_of(ctx, node)
            if found is not None and found[0] is not ctx.index.enclosing_function(ret):
                return True
    return False


def _name_of(ctx: FileContext, node: cst.CSTNode) -> str:
    function = ctx.index.enclosing_function(node)
    return function.name.value if function is not None else ""


def _helper_of(ctx: FileContext, call: cst.Call) -> tuple[cst.FunctionDef, list[str]] | None:
    """The function of this file that `call` runs (a module-level function, or a method on `self`
    of the enclosing class or a base class of the file), with the parameters the call fills."""
    func = call.func
    if type(func) is cst.Name:
        helper = next((s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == func.value), None)
        return (helper, [p.name.value for p in helper.params.params]) if helper is not None else None
    if not (type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self"):
        return None
    classes = {c.name.value: c for c in ctx.index.of_type(cst.ClassDef)}
    todo = [ctx.index.enclosing_class(call)]
    seen: set[str] = set()
    while todo:
        cls = todo.pop(0)
        if cls is None or cls.name.value in seen:
            continue
        seen.add(cls.name.value)
        helper = methods(cls).get(func.attr.value)
        if helper is not None:
            params = [p.name.value for p in helper.params.params]
            return helper, params if is_staticmethod(helper) else params[1:]
        todo.extend(classes.get(b.value.value) for b in cls.bases if type(b.value) is cst.Name)
    return None


def _parts_of(ctx: FileContext, helper: cst.FunctionDef, param: str) -> set[str]:
    """`param` and the names the helper binds from it (`images, targets = batch`): its parts."""
    return computed_from(ctx, helper.body, {param})


def _returned_arguments(
    returns: list[cst.Return], params: list[str], args: list[cst.BaseExpression]
) -> tuple[cst.BaseExpression, ...] | None:
    """For `return a.to(d), b.to(d)` over parameters `a, b`: the caller's arguments for them, in
    the returned order, when every argument is a plain name."""
    if len(returns) != 1 or type(returns[0].value) is not cst.Tuple:
        return None
    found: list[cst.BaseExpression] = []
    for element in returns[0].value.elements:
        value = element.value
        if type(element) is cst.StarredElement or not (type(value) is cst.Call and type(value.func) is cst.Attribute):
            return None
        receiver = value.func.value
        if value.func.attr.value not in MOVES or type(receiver) is not cst.Name or receiver.value not in params:
            return None
        position = params.index(receiver.value)
        if position >= len(args) or type(args[position]) is not cst.Name:
            return None
        found.append(args[position])
    return tuple(found) if len(found) > 1 else None


def _mentions(ctx: FileContext, node: cst.CSTNode, names: set[str]) -> bool:
    return any(type(n) is cst.Name and n.value in names for n in ctx.index.walk(node))


def _moved_copy_of(ctx: FileContext, value: cst.BaseExpression, parts: set[str], helper: str) -> bool:
    """`param.to(d)`, a recursive `helper(param...)`, or a literal/comprehension of such copies of
    `param`'s parts (the moved thing, not the device argument, must be a part)."""
    if _is_copy(ctx, value, parts, helper):
        return True
    if isinstance(value, (cst.DictComp, cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        loops: list[cst.CompFor] = []
        clause: cst.CompFor | None = value.for_in
        while clause is not None:
            loops.append(clause)
            clause = clause.inner_for_in
        loop_names = {n.value for loop in loops for n in ctx.index.walk(loop.target) if type(n) is cst.Name}
        if not any(_mentions(ctx, loop.iter, parts) for loop in loops):
            return False
        elements = [value.key, value.value] if isinstance(value, cst.DictComp) else [value.elt]
        return any(_is_copy(ctx, n, parts | loop_names, helper) for e in elements for n in ctx.index.walk(e))
    if type(value) in (cst.Dict, cst.List, cst.Tuple):
        return any(_is_copy(ctx, n, parts, helper) for n in ctx.index.walk(value))
    if (
        type(value) is cst.Call
        and len(value.args) == 1
        and type(value.args[0].value) in (cst.GeneratorExp, cst.ListComp, cst.DictComp)
    ):
        func = value.func.func if type(value.func) is cst.Call else value.func  # `type(batch)(...)`
        if type(func) is cst.Name and func.value in REBUILDERS:
            return _moved_copy_of(ctx, value.args[0].value, parts, helper)
    return False


def _is_copy(ctx: FileContext, node: cst.CSTNode, parts: set[str], helper: str) -> bool:
    """`part.to(...)` (the receiver names a part) or `helper(part, ...)` (recursion)."""
    if type(node) is not cst.Call:
        return False
    func = node.func
    if type(func) is cst.Attribute and func.attr.value in MOVES:
        return _mentions(ctx, func.value, parts)
    recursive = (type(func) is cst.Name and func.value == helper) or (
        type(func) is cst.Attribute
        and type(func.value) is cst.Name
        and func.value.value == "self"
        and func.attr.value == helper
    )
    if recursive:
        return bool(node.args) and _mentions(ctx, node.args[0].value, parts)
    # another helper of the file that returns moved copies of the argument at its position
    found = _helper_of(ctx, node)
    if found is None or any(a.star or a.keyword is not None for a in node.args):
        return False
    summary = _summary(ctx, *found)
    return (
        summary is not None
        and not summary[1]
        and summary[0] < len(node.args)
        and _mentions(ctx, node.args[summary[0]].value, parts)
    )


def _changes_in_place(ctx: FileContext, helper: cst.FunctionDef, param: str) -> bool:
    """`batch[k] = ...`, `batch.x = ...`, `batch.update(...)`, `batch.to(...)` as a statement."""
    for node in ctx.index.walk(helper.body):
        if isinstance(node, (cst.AssignTarget, cst.AugAssign)):
            target = node.target
            if (
                isinstance(target, (cst.Subscript, cst.Attribute))
                and type(target.value) is cst.Name
                and target.value.value == param
            ):
                return True
        if (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and type(node.func.value) is cst.Name
            and node.func.value.value == param
            and node.func.attr.value in IN_PLACE_METHODS
        ):
            return True
        if (
            type(node) is cst.Expr
            and type(node.value) is cst.Call
            and type(node.value.func) is cst.Attribute
            and type(node.value.func.value) is cst.Name
            and node.value.func.value.value == param
        ):
            return True  # `batch.to(device)` in place (a BatchEncoding) inside the helper
    return False
