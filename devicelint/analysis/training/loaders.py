"""`DataLoader`s: which loop iterates one, and the `DataLoader(...)` calls a loader expression
can hold (directly, through names, `self.x`, builder functions of the file and, for a loader
the function receives, the arguments its callers in the file pass).

Shared by DL402 (pinned memory) and DL404 (workers). Flow-insensitive, like `values`: a value the
file does not show is unknown, and rules stay silent on unknowns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

import libcst as cst

from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.execution_order import calls_by_name
from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.syntax import positional, scope_of, text_of
from devicelint.analysis.training.values import attribute_values, values_of
from devicelint.context import FileContext

LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# Calls that hand on the batches of the loader they wrap (`enumerate(loader)`, `tqdm(loader)`).
WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "tqdm.tqdm", "tqdm.auto.tqdm", "trange"})
_MAX_DEPTH = 4


def is_loader_call(ctx: FileContext, node: cst.CSTNode | None) -> bool:
    return type(node) is cst.Call and ctx.qualified_name(node.func) in LOADERS


def iterated_loader(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The loader a `for` loop iterates: `loader` in `for x in tqdm(enumerate(loader))`, or the
    `DataLoader(...)` call itself; None when the loop iterates something a wrapper hides."""
    while type(node) is cst.Call:
        if is_loader_call(ctx, node):
            return node  # `for x, y in DataLoader(...):`
        name = ctx.qualified_name(node.func) or (node.func.value if type(node.func) is cst.Name else None)
        args = positional(node)
        if name is None or (name not in WRAPPERS and name.rsplit(".", 1)[-1] not in WRAPPERS) or not args:
            return None
        node = args[0]
    return node


def iterated_loaders(ctx: FileContext, node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """Like `iterated_loader`, and also each loader of `zip(loader_a, loader_b)` (two domains read
    in step, as GANs between image sets do)."""
    while type(node) is cst.Call and not is_loader_call(ctx, node):
        name = ctx.qualified_name(node.func) or (node.func.value if type(node.func) is cst.Name else None)
        args = positional(node)
        if name == "zip":
            return [found for arg in args if (found := iterated_loader(ctx, arg)) is not None]
        if name is None or (name not in WRAPPERS and name.rsplit(".", 1)[-1] not in WRAPPERS) or not args:
            return []
        node = args[0]
    return [node]


@dataclass(frozen=True)
class LoopItems:
    """What a loop walks: `iterable` as a `for` header would name it, and the targets that receive
    each item."""

    iterable: cst.BaseExpression
    targets: tuple[cst.BaseExpression, ...]


def loop_items(ctx: FileContext, loop: cst.For | cst.While) -> LoopItems | None:
    """A `for` loop's iterable and target; for `while` (`it = iter(loader)` before it, then
    `x, y = next(it)` in its body, also under `try: ... except StopIteration: break`), the
    iterator's source as the iterable and the names `next()` fills as the targets: the same
    loop over the loader. `next(iter(loader))` in the body reads the loader too. None for a
    `while` whose body takes nothing with `next()` or whose iterator the file does not show once."""
    if isinstance(loop, cst.For):
        return LoopItems(loop.iter, (loop.target,))
    memo: dict[int, LoopItems | None] = ctx.shared("training.loaders.loop_items", lambda c: {})
    key = id(loop)
    if key not in memo:
        memo[key] = _while_items(ctx, loop)
    return memo[key]


def _while_items(ctx: FileContext, loop: cst.While) -> LoopItems | None:
    sources: list[cst.BaseExpression] = []
    targets: list[cst.BaseExpression] = []
    for assign in ctx.index.within(loop.body, cst.Assign):
        value = assign.value
        if not (type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "next"):
            continue
        if not value.args or value.args[0].keyword is not None or value.args[0].star:
            continue
        if _inner_loop(ctx, assign, loop):
            continue  # a `next()` of a loop of its own, or of a function defined inside
        source = _iterator_source(ctx, value.args[0].value, loop)
        if source is None:
            return None
        sources.append(source)
        targets.extend(t.target for t in assign.targets)
    if not sources or any(s is not sources[0] for s in sources):
        return None
    return LoopItems(sources[0], tuple(targets))


def ends_iteration(handler: cst.ExceptHandler) -> bool:
    """`except StopIteration:` (alone or with other names of it): where a `while`-`next()` loop
    learns its iterator is spent, not a retry of failed work."""
    caught = handler.type
    names = [e.value for e in caught.elements] if type(caught) is cst.Tuple else [caught] if caught is not None else []
    return bool(names) and all(dotted_name(n) in ("StopIteration", "builtins.StopIteration") for n in names)


def _inner_loop(ctx: FileContext, node: cst.CSTNode, loop: cst.While) -> bool:
    for ancestor in ctx.index.ancestors(node):
        if ancestor is loop:
            return False
        if type(ancestor) in (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return True
    return True


def _iterator_source(ctx: FileContext, it: cst.BaseExpression, loop: cst.While) -> cst.BaseExpression | None:
    """`iter(loader)` for `next(iter(loader))`, or the one `iter(...)` value the iterator's name
    is bound to in the loop's scope."""
    if type(it) is cst.Call:
        return it if _is_iter_call(it) else None
    if type(it) is not cst.Name:
        return None
    values = values_of(ctx, it.value, scope_of(ctx, loop))
    if not values:
        return None
    # a restarted iterator (`except StopIteration: it = iter(loader)`) is the same loader's
    sources = {text_of(positional(v)[0]) if _is_iter_call(v) else None for v in values}
    return values[0] if len(sources) == 1 and None not in sources else None


def _is_iter_call(value: cst.BaseExpression | None) -> TypeGuard[cst.Call]:
    return (
        isinstance(value, cst.Call)
        and type(value.func) is cst.Name
        and value.func.value == "iter"
        and len(positional(value)) == 1
    )


def same_file_function(ctx: FileContext, call: cst.Call) -> cst.FunctionDef | None:
    """The top-level function of this file that `call` calls (`make_loader(...)`)."""
    if type(call.func) is not cst.Name:
        return None
    for stmt in ctx.module.body:
        if type(stmt) is cst.FunctionDef and stmt.name.value == call.func.value:
            return stmt
    return None


def loader_calls(
    ctx: FileContext, loader: cst.BaseExpression, scope: cst.CSTNode, depth: int = 0
) -> list[cst.Call] | None:
    """Every `DataLoader(...)` call `loader` can hold, or None when some value it can hold is not
    one the file shows (a loader from another module, `accelerator.prepare(...)`).

    Names are looked up in `scope`, else at module level; `self.x` in every method of the file; a
    parameter of `scope` through the arguments its callers in the file pass; a builder function
    of the file through its returns."""
    if depth > _MAX_DEPTH:
        return None
    held = through_containers(ctx, loader)  # `loaders[0]`, `run.loader`: what was put in
    if held is not loader:
        loader, scope = held, scope_of(ctx, held)
    if type(loader) is cst.Call:
        if is_loader_call(ctx, loader):
            return [loader]
        builder = same_file_function(ctx, loader)
        if builder is None:
            return None
        returned = [n.value for n in ctx.index.walk(builder.body) if type(n) is cst.Return]
        return _all(ctx, [(r, builder) for r in returned], depth)
    if type(loader) is cst.Name:
        values = values_of(ctx, loader.value, scope)
        if values is None:
            return None
        if type(scope) is cst.FunctionDef and None in values and is_parameter(scope, loader.value):
            passed = passed_arguments(ctx, scope, loader.value)
            if passed is None:
                return None
            return _all(ctx, [*((v, scope_of(ctx, v)) for v in values if v is not None), *passed], depth)
        return _all(ctx, [(v, scope_of(ctx, v) if v is not None else scope) for v in values], depth)
    values = attribute_values(ctx, loader)
    if values is None:
        return None
    return _all(ctx, [(v, scope_of(ctx, v) if v is not None else scope) for v in values], depth)


def _all(
    ctx: FileContext, values: list[tuple[cst.BaseExpression | None, cst.CSTNode]], depth: int
) -> list[cst.Call] | None:
    if not values:
        return None
    out: list[cst.Call] = []
    for value, scope in values:
        if value is None:
            return None
        found = loader_calls(ctx, value, scope, depth + 1)
        if found is None:
            return None
        out.extend(c for c in found if all(c is not o for o in out))
    return out


def is_parameter(func: cst.FunctionDef, name: str) -> bool:
    return any(
        p.name.value == name for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)
    )


def passed_arguments(
    ctx: FileContext, func: cst.FunctionDef, name: str
) -> list[tuple[cst.BaseExpression, cst.CSTNode]] | None:
    """(argument, caller's scope) for each call of `func` in the file (`train(...)`, `self.train(...)`),
    for its parameter `name`; None when `func` is never called here or a call hides the argument."""
    params = [*func.params.posonly_params, *func.params.params]
    owner = ctx.index.enclosing_class(func)
    method = owner is not None and ctx.index.parent(ctx.index.parent(func)) is owner  # type: ignore[arg-type]  # a def always has a parent
    if method:
        params = params[1:]  # `self`
    index = next((i for i, p in enumerate(params) if p.name.value == name), None)
    out: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
    called = owner.name.value if method and func.name.value == "__init__" and owner is not None else func.name.value
    for call in calls_by_name(ctx).get(called, ()):
        callee = call.func
        if method and func.name.value == "__init__":  # `Trainer(model, loader)` builds the class
            if not (type(callee) is cst.Name and owner is not None and callee.value == owner.name.value):
                continue
        elif method:
            if not (
                type(callee) is cst.Attribute
                and callee.attr.value == func.name.value
                and type(callee.value) is cst.Name
                and callee.value.value == "self"
            ):
                continue
        elif not (
            type(callee) is cst.Name and callee.value == func.name.value and same_file_function(ctx, call) is func
        ):
            continue
        argument = _argument(call, index, name)
        if argument is None:
            return None
        out.append((argument, scope_of(ctx, call)))
    return out or None


def _argument(call: cst.Call, index: int | None, name: str) -> cst.BaseExpression | None:
    position = 0
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value == name:
                return arg.value
            continue
        if position == index:
            return arg.value
        position += 1
    return None
