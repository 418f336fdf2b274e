"""The device expression a fix can name: what the code around a node already moves things to.

A fix that adds `map_location=` or `device=` must name a device that exists where the edit
goes. The most telling one is the expression the same code passes to `.to(...)` or `device=`
(`device`, `args.device`, `self.device`): it says both that the code runs on an accelerator and
which spelling it uses. Only expressions whose root name is visible at the edit are offered.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.devices import is_dtype
from devicelint.analysis.index import iter_children
from devicelint.analysis.training.syntax import keyword, method_name, positional
from devicelint.context import FileContext

# A name or attribute that spells a device, as code in the wild names it.
_DEVICE_WORDS = ("device", "dev", "cuda", "gpu", "rank")


def device_in_scope(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """Source text of the device that code around `node` moves tensors or modules to, visible at
    `node`: the most used one in `node`'s function, else its class, else the file; None when
    there is none."""
    function = ctx.index.enclosing_function(node)
    owner = ctx.index.enclosing_class(node)
    # Nearest first: the same function, the same class, the file.
    counts: tuple[Counter[str], ...] = (Counter(), Counter(), Counter())
    for move in _moves(ctx):
        same_class = owner is not None and move.owner is owner
        if move.text.startswith("self.") and not same_class:
            continue  # another class's `self.device`
        counts[0 if move.function is function else 1 if same_class else 2][move.text] += 1
    for tier, ranked in enumerate(counts):
        for text, _ in ranked.most_common():
            if _visible(ctx, text, node, same_function=tier == 0):
                return text
    return None


@dataclass(frozen=True)
class _Move:
    """A call that moves something to a device named in the code (`.to(device)`, `device=dev`)."""

    text: str
    function: cst.FunctionDef | None
    owner: cst.ClassDef | None


def _moves(ctx: FileContext) -> list[_Move]:
    """Every move in the file, found once per file (each fix asks about all of them)."""

    def build(ctx: FileContext) -> list[_Move]:
        moves = []
        for call in ctx.index.of_type(cst.Call):
            target = _moved_to(ctx, call)
            if target is not None:
                moves.append(
                    _Move(ctx.code_for(target), ctx.index.enclosing_function(call), ctx.index.enclosing_class(call))
                )
        return moves

    return ctx.shared("device_in_scope.moves", build)


@dataclass(frozen=True)
class _Bindings:
    """Where the file binds each name, found in one pass: asking by walking a scope per
    candidate device and per fix cost time quadratic in the file's length."""

    # (id of the enclosing function, or 0 for module level; name) -> its binding names.
    by_scope: dict[tuple[int, str], list[cst.Name]]
    # id of a function -> the names bound anywhere in its body, nested scopes included.
    under: dict[int, set[str]]


def _bindings(ctx: FileContext) -> _Bindings:
    def build(ctx: FileContext) -> _Bindings:
        by_scope: dict[tuple[int, str], list[cst.Name]] = defaultdict(list)
        under: dict[int, set[str]] = defaultdict(set)
        for name in ctx.index.of_type(cst.Name):
            if not _binds(ctx, name, name.value):
                continue
            function = ctx.index.enclosing_function(name)
            by_scope[(id(function) if function is not None else 0, name.value)].append(name)
            while function is not None:
                under[id(function)].add(name.value)
                function = ctx.index.enclosing_function(function)
        return _Bindings(dict(by_scope), dict(under))

    return ctx.shared("device_in_scope.bindings", build)


def _moved_to(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    if method_name(call) == "to":
        args = positional(call)
        target = keyword(call, "device") or (args[0] if args else None)
    else:
        target = keyword(call, "device")
    if not isinstance(target, (cst.Name, cst.Attribute)) or is_dtype(ctx, target):
        return None
    last = (target.attr if isinstance(target, cst.Attribute) else target).value.lower()
    return target if any(word in last for word in _DEVICE_WORDS) else None


def _visible(ctx: FileContext, text: str, node: cst.CSTNode, same_function: bool) -> bool:
    """Whether `text` means at `node` what it meant where the code used it: `self.` inside a
    method, a name of the same function bound before `node`, or (from elsewhere in the file) a
    module-level name the function around `node` does not rebind (`x` in another function is
    another `x`)."""
    root = text.split(".", 1)[0]
    function = ctx.index.enclosing_function(node)
    if root == "self":
        params = function.params.params if function is not None else ()
        return bool(params) and params[0].name.value == "self"
    if same_function:
        return bound_before(ctx, text, node)
    bindings = _bindings(ctx)
    if function is not None and (
        any(p.name.value == root for p in function.params.params) or root in bindings.under.get(id(function), ())
    ):
        return False
    return (0, root) in bindings.by_scope


def bound_before(ctx: FileContext, expression: str, node: cst.CSTNode | None) -> bool:
    """Whether the name an expression starts with (`x` of `x.device`) is surely bound where
    `node` runs: a parameter of its function (`self` included), a name that function assigns
    before `node`'s statement, or, for module code, a name the module assigns before it; a
    function also sees every module-level name and import (it runs after the module is loaded)."""
    root = expression.split(".", 1)[0].split("(", 1)[0]
    if node is None or not root.isidentifier():
        return False
    function = ctx.index.enclosing_function(node)
    if function is not None:
        params = function.params
        if any(p.name.value == root for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
            return True
    bindings = _bindings(ctx)
    scope: cst.CSTNode = function.body if function is not None else ctx.module
    # Bindings before `node` in source order; all of them when `node` is outside the body
    # (a default value or decorator of the function).
    inside = node is scope or any(ancestor is scope for ancestor in ctx.index.ancestors(node))
    if any(
        not inside or _precedes(ctx, found, node)
        for found in bindings.by_scope.get((id(function) if function is not None else 0, root), ())
    ):
        return True
    if function is None:
        return False
    # (a module-level name or import: the function runs after the module is loaded)
    return (0, root) in bindings.by_scope or root in ctx.imports.bound


def _precedes(ctx: FileContext, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether `first` comes before `second` in a walk of the tree (source order, a node before
    its children): decided where their paths from the module part."""
    first_path = [first, *ctx.index.ancestors(first)]
    second_path = [second, *ctx.index.ancestors(second)]
    depth_in_second = {id(node): depth for depth, node in enumerate(second_path)}
    for depth, node in enumerate(first_path):
        other = depth_in_second.get(id(node))
        if other is None:
            continue
        if depth == 0 or other == 0:
            return depth == 0 and other > 0  # one holds the other: the holder comes first
        for child in iter_children(node):
            if child is first_path[depth - 1]:
                return True
            if child is second_path[other - 1]:
                return False
        return False
    return False


def _binds(ctx: FileContext, node: cst.CSTNode, name: str) -> bool:
    """`node` binds `name` in its function or module scope (not a comprehension's own variable)."""
    if not (type(node) is cst.Name and node.value == name and ctx.index.in_binding_target(node)):
        return False
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) in (cst.CompFor, cst.Lambda):
            return False
        if isinstance(ancestor, (cst.BaseStatement, cst.FunctionDef)):
            return True
    return True
