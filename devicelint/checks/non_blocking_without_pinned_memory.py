from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.argument_places import calls_of, extra_keywords, passed_for
from devicelint.analysis.facts import file_facts
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_facts import ACCELERATOR, DEVICE
from devicelint.analysis.training.loaders import LOADERS, iterated_loader, loop_items, same_file_function
from devicelint.analysis.training.syntax import (
    assigned_names,
    is_false,
    keyword,
    method_name,
    positional,
    receiver,
    scope_of,
    short,
    text_of,
)
from devicelint.analysis.training.values import assignments, values_of
from devicelint.context import FileContext
from devicelint.fix_text import keyword_argument, with_argument
from devicelint.rule_base import FixProposal, Rule, Violation, register

_MAX_DEPTH = 4


@register
class NonBlockingWithoutPinnedMemory(Rule):
    """
    ## What it does
    Flags `.to(device, non_blocking=True)` and `.cuda(non_blocking=True)` on batches drawn from
    a `DataLoader` created in the same file without `pin_memory=True`.

    ## Why it is a bug on a GPU
    An asynchronous host-to-device copy needs page-locked (pinned) host memory. From ordinary
    pageable memory CUDA first copies into a pinned staging buffer, and the call returns only
    when that is done: `non_blocking=True` is silently synchronous, so data loading and compute
    do not overlap as the code intends.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
    for x, y in loader:
        x = x.to(device, non_blocking=True)
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
    for x, y in loader:
        x = x.to(device, non_blocking=True)
    ```

    ## Fix safety
    The fix adds `pin_memory=True` to the `DataLoader(...)` call that feeds the copy, when the
    loop's loader is that one call in this file (a name or `self.` attribute assigned only
    it). It is unsafe: pinned batches take page-locked host memory, which a machine short of RAM
    may not spare. No fix when the loader comes from several calls or a builder function, when
    its arguments include `*args`/`**kwargs`, or when `pin_memory=False` is written out (a choice).

    ## Known limits
    The loader must be assigned only `DataLoader(...)` calls (directly, or returned by a function
    of the same file, or by a function of another project module whose every `return` is a
    `DataLoader(...)` that does not pin memory), in the loop's function or at module level (`loader = DataLoader(...)`), or
    on `self` anywhere in the file (`self.loader = DataLoader(...)`), and be iterated directly (or
    through `enumerate`/`tqdm`). A loader received as a parameter (also by a constructor that
    stores it on `self`) is what every call of the file passes, when no call spreads
    `*args`/`**kwargs`. Keyword arguments passed as `**kwargs` are read when `kwargs` is a dict
    literal (or `dict(...)`) of the same function, including later `kwargs.update(...)` and
    `kwargs["pin_memory"] = ...`, or the function's own `**kwargs` that it only spreads (or reads
    with `.get`): the keywords every call of the file gathers into it; a
    `pin_memory` given by a variable, a `**kwargs` that cannot be read, or a `.pin_memory()` call
    in the loop silences the rule. A batch is what the loop yields, its parts (`x, y = batch`,
    `batch["image"]`) and the values of a comprehension over it; a batch the placement analysis
    already places on the device is not a copy from pageable memory.
    """

    code = "DL402"
    name = "non-blocking-without-pinned-memory"
    summary = "`non_blocking=True` copies from a `DataLoader` without `pin_memory=True` are synchronous."
    message = (
        "`{copy}` asks for an asynchronous copy, but `{loader}` is a `DataLoader` without `pin_memory=True`, "
        "so the copy from pageable memory is synchronous anyway; pass `pin_memory=True` to the `DataLoader`"
    )
    severity = "warning"
    fix_availability = "unsafe"
    tokens = ("non_blocking",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        loops: list[cst.For | cst.While] = [*ctx.index.of_type(cst.For), *ctx.index.of_type(cst.While)]
        for loop in loops:
            items = loop_items(ctx, loop)
            loader = iterated_loader(ctx, items.iterable) if items is not None else None
            if items is None or loader is None or not _unpinned_loader(ctx, loader, scope_of(ctx, loop)):
                continue
            if any(type(n) is cst.Call and method_name(n) == "pin_memory" for n in ctx.index.walk(loop)):
                continue
            batch = _batch_names(ctx, loop, items.targets)
            for node in ctx.index.walk(loop.body):
                if type(node) is cst.Call and _non_blocking_copy(node):
                    owner = receiver(node)
                    if owner is not None and _from_batch(ctx, owner, batch):
                        yield self.violation(
                            node,
                            fix=_pin(ctx, loader, scope_of(ctx, loop)),
                            copy=short(ctx, node),
                            loader=short(ctx, loader),
                        )


def _non_blocking_copy(call: cst.Call) -> bool:
    value = keyword(call, "non_blocking")
    return method_name(call) in ("to", "cuda") and type(value) is cst.Name and value.value == "True"


def _batch_names(ctx: FileContext, loop: cst.For | cst.While, targets: tuple[cst.BaseExpression, ...]) -> set[str]:
    """The loop's targets, the parts taken from them (`x, y = batch`, `img = batch["image"]`) and
    the targets of comprehensions over them: all still in the loader's pageable memory."""
    names = {name for target in targets for name in assigned_names(target)}
    changed = True
    while changed:
        changed = False
        for node in ctx.index.walk(loop.body):
            if type(node) is cst.Assign and _root_name(node.value) in names:
                for target in node.targets:
                    new = set(assigned_names(target.target)) - names
                    if new:
                        names |= new
                        changed = True
            elif type(node) is cst.CompFor and _root_name(node.iter) in names:
                new = set(assigned_names(node.target)) - names
                if new:
                    names |= new
                    changed = True
    return names


def _root_name(node: cst.BaseExpression) -> str | None:
    """`batch` for `batch`, `batch["x"]`, `batch.x`, `batch.items()`, `batch.values()`."""
    while True:
        if type(node) is cst.Call and method_name(node) in ("items", "values") and not node.args:
            node = receiver(node)
        elif isinstance(node, (cst.Subscript, cst.Attribute)):
            node = node.value
        else:
            break
    return node.value if type(node) is cst.Name else None


def _from_batch(ctx: FileContext, owner: cst.BaseExpression, batch: set[str]) -> bool:
    fact = file_facts(ctx).value(owner)
    if fact.batch:
        return True
    if fact.kind == DEVICE:
        return False  # already moved: not a copy from the loader's memory
    return _root_name(owner) in batch


def _unpinned_loader(ctx: FileContext, loader: cst.BaseExpression, scope: cst.CSTNode) -> bool:
    """Every value the loop's loader can hold is a `DataLoader(...)` that does not pin memory.

    A name is looked up in the loop's own function, else at module level (a parameter holds
    what every call of the file passes); `self.loader` in every method of the file.
    """
    if type(loader) in (cst.Call, cst.Name):
        return _unpinned_value(ctx, loader, 0)
    text = text_of(loader) if type(loader) is not cst.Subscript else None
    if text is None or not text.startswith("self."):
        return False
    values = [v for table in assignments(ctx).values() for v in table.get(text, [])]
    if not values:
        return False
    return all(_unpinned_value(ctx, v, 0) for v in values)


def _pin(ctx: FileContext, loader: cst.BaseExpression, scope: cst.CSTNode) -> FixProposal | None:
    """`pin_memory=True` on the one `DataLoader(...)` call the loop's loader is."""
    if type(loader) is cst.Name:
        values = values_of(ctx, loader.value, scope)
    elif type(loader) is cst.Call:
        values = [loader]
    else:
        text = text_of(loader) if type(loader) is not cst.Subscript else None
        values = [v for table in assignments(ctx).values() for v in table.get(text, [])] if text else []
    calls = {id(v): v for v in values or ()}
    if len(calls) != 1:
        return None
    call = next(iter(calls.values()))
    if type(call) is not cst.Call or ctx.qualified_name(call.func) not in LOADERS:
        return None
    if keyword(call, "pin_memory") is not None or any(arg.star for arg in call.args):
        return None
    new = with_argument(call, keyword_argument("pin_memory", "True"))
    if new is None:
        return None
    return FixProposal("Pass `pin_memory=True` to the DataLoader", safe=False, replacements=((call, new),))


def _unpinned_value(ctx: FileContext, value: cst.BaseExpression | None, depth: int) -> bool:
    if type(value) is cst.Name and depth <= _MAX_DEPTH:
        # a name handed on: what it is bound to, or what every caller passes for a parameter
        bound = values_of(ctx, value.value, scope_of(ctx, value)) or []
        values: list[cst.BaseExpression | None] = list(_passed(ctx, value)) if bound == [None] else bound
        return bool(values) and all(_unpinned_value(ctx, v, depth + 1) for v in values)
    if type(value) is not cst.Call or depth > _MAX_DEPTH:
        return False
    if ctx.qualified_name(value.func) in LOADERS:
        data = positional(value)
        if data and file_facts(ctx).value(data[0]).where == ACCELERATOR:
            return False  # a dataset of device tensors yields device tensors: nothing to pin
        return _pin_off(ctx, value, scope_of(ctx, value))
    builder = same_file_function(ctx, value)
    if builder is None:
        # a loader builder of another project module (`default_loader(...)` in `data/loaders.py`)
        spelled = dotted_name(value.func)
        return spelled is not None and ctx.project.functions.get(spelled) == "unpinned-loader"
    returned = [n.value for n in ctx.index.walk(builder.body) if type(n) is cst.Return]
    return bool(returned) and all(_unpinned_value(ctx, r, depth + 1) for r in returned)


def _pin_off(ctx: FileContext, call: cst.Call, scope: cst.CSTNode) -> bool:
    pin = keyword(call, "pin_memory")
    if pin is not None:
        return is_false(pin)
    if len(positional(call)) >= 8:  # pin_memory is the 8th positional parameter
        return False
    for arg in call.args:
        if arg.star == "*":
            return False
        if arg.star == "**":
            keys = _dict_entries(ctx, arg.value, scope, 0)
            if keys is None:
                return False
            if "pin_memory" in keys and not all(is_false(v) for v in keys["pin_memory"]):
                return False
    return True


def _dict_entries(
    ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode, depth: int
) -> dict[str, list[cst.BaseExpression]] | None:
    """Every key a `**kwargs` dict can hold, with the values it can have; None when unknown.

    Reads dict literals, `dict(k=v)`, conditional expressions of them, and for a local name every
    assignment of it plus its `name.update(...)` calls and `name["key"] = value` stores."""
    if depth > _MAX_DEPTH:
        return None
    if type(node) is cst.Dict:
        out: dict[str, list[cst.BaseExpression]] = {}
        for element in node.elements:
            if type(element) is cst.DictElement and type(element.key) is cst.SimpleString:
                key = literal_value(element.key)
                if isinstance(key, str):
                    out.setdefault(key, []).append(element.value)
                    continue
            if type(element) is cst.StarredDictElement:
                inner = _dict_entries(ctx, element.value, scope, depth + 1)
                if inner is None:
                    return None
                _merge(out, inner)
                continue
            return None
        return out
    if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "dict":
        out = {}
        for arg in node.args:
            if arg.keyword is None:
                inner = _dict_entries(ctx, arg.value, scope, depth + 1)
                if inner is None:
                    return None
                _merge(out, inner)
            else:
                out.setdefault(arg.keyword.value, []).append(arg.value)
        return out
    if type(node) is cst.IfExp:
        body = _dict_entries(ctx, node.body, scope, depth + 1)
        orelse = _dict_entries(ctx, node.orelse, scope, depth + 1)
        if body is None or orelse is None:
            return None
        _merge(body, orelse)
        return body
    if type(node) is cst.Name:
        if type(scope) is cst.FunctionDef and scope.params.star_kwarg is not None:
            if scope.params.star_kwarg.name.value == node.value:
                return _gathered_entries(ctx, scope, node.value, depth)
        return _name_entries(ctx, node.value, scope, depth)
    return None


def _passed(ctx: FileContext, name: cst.Name) -> list[cst.BaseExpression]:
    """What every call of the file passes for the parameter `name` reads (empty when a call
    spreads `*args`/`**kwargs`, which may bind it unseen)."""
    function = ctx.index.enclosing_function(name)
    found = calls_of(ctx, function) if function is not None else None
    if found is None or any(a.star for call in found[0] for a in call.args):
        return []
    return passed_for(ctx, name) or []


def _gathered_entries(
    ctx: FileContext, function: cst.FunctionDef, name: str, depth: int
) -> dict[str, list[cst.BaseExpression]] | None:
    """The keys a function's own `**name` can hold: the extra keywords every call of the file
    passes, and what the `**mapping`s they spread hold; None when unknown, or when the body
    does more with the mapping than read it (`kwargs["pin_memory"] = True`, `.setdefault`)."""
    for node in ctx.index.walk(function.body):
        if type(node) is not cst.Name or node.value != name:
            continue
        parent = ctx.index.parent(node)
        read = type(parent) is cst.Attribute and parent.value is node and parent.attr.value == "get"
        if not read and not (type(parent) is cst.Arg and parent.star == "**"):
            return None  # changed, stored or handed on whole: not only spread
    calls = extra_keywords(ctx, function, name)
    if calls is None:
        return None
    out: dict[str, list[cst.BaseExpression]] = {}
    for call, keywords, spread in calls:
        for key, value in keywords.items():
            out.setdefault(key, []).append(value)
        for mapping in spread:
            inner = _dict_entries(ctx, mapping, scope_of(ctx, call), depth + 1)
            if inner is None:
                return None
            _merge(out, inner)
    return out


def _name_entries(
    ctx: FileContext, name: str, scope: cst.CSTNode, depth: int
) -> dict[str, list[cst.BaseExpression]] | None:
    values = values_of(ctx, name, scope)
    if not values or any(v is None for v in values):
        return None
    out: dict[str, list[cst.BaseExpression]] = {}
    for value in values:
        entries = _dict_entries(ctx, value, scope_of(ctx, value), depth + 1)  # type: ignore[arg-type]  # any() above: no value is None
        if entries is None:
            return None
        _merge(out, entries)
    for node in ctx.index.walk(scope):
        if type(node) is cst.Call and method_name(node) == "update" and _root_name(receiver(node)) == name:  # type: ignore[arg-type]  # `x.update(...)` has a receiver
            entries = _dict_entries(ctx, node.with_changes(func=cst.Name("dict")), scope, depth + 1)
            if entries is None:
                return None
            _merge(out, entries)
        elif type(node) is cst.AssignTarget and type(node.target) is cst.Subscript:
            if text_of(node.target) != name:
                continue
            key = node.target.slice[0].slice
            if type(key) is not cst.Index or type(key.value) is not cst.SimpleString:
                return None
            parent = ctx.index.parent(node)
            if type(parent) is cst.Assign:
                out.setdefault(str(literal_value(key.value)), []).append(parent.value)
    return out


def _merge(into: dict[str, list[cst.BaseExpression]], other: dict[str, list[cst.BaseExpression]]) -> None:
    for key, values in other.items():
        into.setdefault(key, []).extend(values)
