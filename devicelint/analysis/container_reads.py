"""Values read back from the containers they were put in: which expression a read gives.

`box = (scaler, None)` then `s, _ = box`, `pair = [loader]` then `pair[0]`, `parts = {"m":
model.to(dev)}` then `parts["m"]`, `rec = Record(value=torch.tensor(t))` then `rec.value`: the
read is the value that was put in. `through_containers(ctx, expr)` answers with that expression
(itself when `expr` is no such read), so an analysis that asks what built a value (a constructor
call, a move, a device) sees through the container, as the placement engine's facts already do
(`Fact.elements`/`Fact.fields`).

Only what one scope shows for certain is followed: a container literal (tuple, list, dict with
string keys, `dict(k=v)`), or an instance of one of the file's dataclasses or NamedTuples built
with the field, bound once to a local name that nothing writes into (no `box[0] = ...`,
`box.append(...)`, `box.value = ...`), read with a literal index or key, a field name, or by
unpacking with as many names as parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.names import dotted_name, literal_value
from devicelint.context import FileContext

# Calls on a container name that change what it holds.
_MUTATORS = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "reverse", "sort"}
)
_MAX_DEPTH = 6


def record_classes(ctx: FileContext) -> dict[str, list[str]]:
    """The file's dataclasses and NamedTuples, with their fields in declaration order: an
    instance carries the values it was built from (memoised per file)."""
    return ctx.shared("record_classes", _record_classes)


def _record_classes(ctx: FileContext) -> dict[str, list[str]]:
    records: dict[str, list[str]] = {}
    for stmt in ctx.module.body:
        if type(stmt) is not cst.ClassDef or type(stmt.body) is not cst.IndentedBlock:
            continue
        decorators = {
            (dotted_name(d.decorator.func if type(d.decorator) is cst.Call else d.decorator) or "").rsplit(".", 1)[-1]
            for d in stmt.decorators
        }
        bases = {(dotted_name(b.value) or "").rsplit(".", 1)[-1] for b in stmt.bases}
        if "dataclass" not in decorators and "NamedTuple" not in bases:
            continue
        records[stmt.name.value] = [
            small.target.value
            for line in stmt.body.body
            if type(line) is cst.SimpleStatementLine
            for small in line.body
            if type(small) is cst.AnnAssign and type(small.target) is cst.Name
        ]
    return records


def through_containers(ctx: FileContext, expr: cst.BaseExpression) -> cst.BaseExpression:
    """The expression that a read of a container gives back (`box[0]`, `rec.value`, `s` after
    `s, _ = box`, through any number of such steps), or `expr` itself when it is no such read."""
    if type(expr) not in (cst.Name, cst.Subscript, cst.Attribute):
        return expr
    state = _file_state(ctx)
    if not state.names:
        return expr
    found = _read(ctx, state, expr, 0)
    return found if found is not None else expr


def unpacked_part(ctx: FileContext, target: cst.BaseExpression) -> cst.BaseExpression | None:
    """For a name or attribute bound by unpacking (`self.pe, _ = box`, `a, b = x, y`), the
    expression of its part, where the value unpacked is a container the file shows; else None."""
    owner, pattern = ctx.index.unpacking_owner(target)
    if type(owner) is not cst.AssignTarget or pattern is target:
        return None
    assign = ctx.index.parent(owner)
    if type(assign) is not cst.Assign:
        return None
    path = _path_in(pattern, target)
    if path is None:
        return None
    state = _file_state(ctx)
    value: cst.BaseExpression | None = assign.value
    for position in path:
        container = _container(ctx, state, value, 0) if value is not None else None
        value = _element(container, position)
        if value is None:
            return None
    return _read(ctx, state, value, 1) or value if value is not None else None


@dataclass
class _FileState:
    # Names some assignment of the file binds to a container, to a read of one, or by unpacking:
    # the only names worth looking up.
    names: set[str] = field(default_factory=set)
    scopes: dict[int, _Scope] = field(default_factory=dict)
    # what `holders` answers, by the `id` of the value put in (built on first use)
    held: dict[int, list[cst.BaseExpression]] | None = None


@dataclass
class _Scope:
    plain: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    unpacked: dict[str, list[tuple[cst.BaseExpression, tuple[int, ...]]]] = field(default_factory=dict)
    other: set[str] = field(default_factory=set)  # bound some other way, or written into


def _file_state(ctx: FileContext) -> _FileState:
    return ctx.shared("container_reads", _build)


def _build(ctx: FileContext) -> _FileState:
    state = _FileState()
    records = record_classes(ctx)
    for assign in ctx.index.of_type(cst.Assign):
        value = assign.value
        kind = type(value)
        if kind in (cst.Tuple, cst.List, cst.Dict):
            containerish = True
        elif kind is cst.Call:
            func = value.func  # type: ignore[attr-defined]  # a Call
            containerish = type(func) is cst.Name and (func.value in records or func.value == "dict")
        elif kind is cst.Subscript:
            containerish = True
        elif kind is cst.Attribute:
            containerish = bool(records)  # a field of a record only where the file has records
        elif kind is cst.Name:
            containerish = True
        else:
            containerish = False
        for target in assign.targets:
            if type(target.target) is cst.Name:
                if containerish:
                    state.names.add(target.target.value)
            elif type(target.target) in (cst.Tuple, cst.List):
                for node in ctx.index.walk(target.target):
                    if type(node) is cst.Name:
                        state.names.add(node.value)
    return state


def _scope_of(ctx: FileContext, state: _FileState, use: cst.CSTNode) -> _Scope:
    function = ctx.index.enclosing_function(use)
    root: cst.CSTNode = function if function is not None else ctx.module
    found = state.scopes.get(id(root))
    if found is None:
        found = state.scopes[id(root)] = _scan(ctx, function, root)
    return found


def _scan(ctx: FileContext, function: cst.FunctionDef | None, root: cst.CSTNode) -> _Scope:
    scope = _Scope()
    if function is not None:
        params = function.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        every += [p for p in (params.star_arg, params.star_kwarg) if type(p) is cst.Param]
        scope.other.update(p.name.value for p in every)
    index = ctx.index
    for node in index.walk(root):
        kind = type(node)
        if kind is cst.Assign:
            if index.enclosing_function(node) is not function:
                continue
            for target in node.targets:  # type: ignore[attr-defined]  # an Assign
                _bind_target(scope, target.target, node.value, ())  # type: ignore[attr-defined]  # as above
        elif kind in (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr):
            if index.enclosing_function(node) is function:
                for name in index.walk(node.target):  # type: ignore[attr-defined]  # each has a target
                    if type(name) is cst.Name:
                        scope.other.add(name.value)
        elif kind is cst.AsName:
            if type(node.name) is cst.Name and index.enclosing_function(node) is function:  # type: ignore[attr-defined]  # an AsName
                scope.other.add(node.name.value)  # type: ignore[attr-defined]  # as above
        elif kind in (cst.Global, cst.Nonlocal, cst.Del):
            scope.other.update(n.value for n in index.walk(node) if type(n) is cst.Name)
        elif kind is cst.Call:
            func = node.func  # type: ignore[attr-defined]  # a Call
            if type(func) is cst.Attribute and func.attr.value in _MUTATORS and type(func.value) is cst.Name:
                scope.other.add(func.value.value)
    return scope


def _bind_target(scope: _Scope, target: cst.BaseExpression, value: cst.BaseExpression, path: tuple[int, ...]) -> None:
    if type(target) is cst.Name:
        if path:
            scope.unpacked.setdefault(target.value, []).append((value, path))
        else:
            scope.plain.setdefault(target.value, []).append(value)
    elif type(target) in (cst.Tuple, cst.List):
        elements = target.elements  # type: ignore[attr-defined]  # a Tuple or List
        starred = any(type(e) is cst.StarredElement for e in elements)
        for position, element in enumerate(elements):
            if starred:
                _bind_other(scope, element.value)
            else:
                _bind_target(scope, element.value, value, (*path, position))
    elif type(target) in (cst.Subscript, cst.Attribute):
        base = target.value  # type: ignore[attr-defined]  # a Subscript or Attribute
        if type(base) is cst.Name:
            scope.other.add(base.value)  # `box[0] = x`, `rec.value = x`: written into
    elif type(target) is cst.StarredElement:
        _bind_other(scope, target.value)


def _bind_other(scope: _Scope, target: cst.CSTNode) -> None:
    if type(target) is cst.Name:
        scope.other.add(target.value)
    elif type(target) in (cst.Tuple, cst.List, cst.StarredElement, cst.Element):
        for child in target.children:
            _bind_other(scope, child)


def _path_in(pattern: cst.CSTNode, target: cst.CSTNode) -> tuple[int, ...] | None:
    """The positions leading from an unpacking pattern to one of its names (None past a `*`)."""
    if pattern is target:
        return ()
    if type(pattern) in (cst.Tuple, cst.List):
        elements = pattern.elements  # type: ignore[attr-defined]  # a Tuple or List
        if any(type(e) is cst.StarredElement for e in elements):
            return None
        for position, element in enumerate(elements):
            inner = _path_in(element.value, target)
            if inner is not None:
                return (position, *inner)
    return None


def _single(ctx: FileContext, state: _FileState, name: cst.Name) -> tuple[cst.BaseExpression, tuple[int, ...]] | None:
    """The one binding of a local name that nothing else binds or writes into: its value, and
    the unpacking positions of the name in the pattern that bound it."""
    if name.value not in state.names:
        return None
    scope = _scope_of(ctx, state, name)
    key = name.value
    if key in scope.other:
        return None
    plain = scope.plain.get(key, [])
    unpacked = scope.unpacked.get(key, [])
    if len(plain) + len(unpacked) != 1:
        return None
    return (plain[0], ()) if plain else unpacked[0]


def _container(ctx: FileContext, state: _FileState, expr: cst.BaseExpression, depth: int) -> cst.BaseExpression | None:
    """The literal container or record instance that `expr` is (through names and reads)."""
    if depth > _MAX_DEPTH:
        return None
    kind = type(expr)
    if kind in (cst.Tuple, cst.List, cst.Dict):
        return expr
    if kind is cst.Call:
        func = expr.func  # type: ignore[attr-defined]  # a Call
        if type(func) is cst.Name and (func.value in record_classes(ctx) or func.value == "dict"):
            return expr
        return None
    if kind is cst.Name:
        bound = _single(ctx, state, expr)  # type: ignore[arg-type]  # a Name
        if bound is None:
            return None
        value: cst.BaseExpression | None = bound[0]
        for position in bound[1]:
            value = _element(_container(ctx, state, value, depth + 1) if value is not None else None, position)
        return _container(ctx, state, value, depth + 1) if value is not None else None
    if kind in (cst.Subscript, cst.Attribute):
        part = _read(ctx, state, expr, depth + 1)
        return _container(ctx, state, part, depth + 1) if part is not None else None
    return None


def _element(container: cst.BaseExpression | None, position: int) -> cst.BaseExpression | None:
    if type(container) not in (cst.Tuple, cst.List):
        return None
    elements = container.elements  # type: ignore[union-attr]  # a Tuple or List
    if any(type(e) is cst.StarredElement for e in elements) or not -len(elements) <= position < len(elements):
        return None
    part: cst.BaseExpression = elements[position].value
    return part


def _read(ctx: FileContext, state: _FileState, expr: cst.BaseExpression, depth: int) -> cst.BaseExpression | None:
    """What a read of a container gives back, resolved as far as the file shows; None when
    `expr` is no read of a container the file shows."""
    if depth > _MAX_DEPTH:
        return None
    part: cst.BaseExpression | None = None
    kind = type(expr)
    if kind is cst.Subscript:
        slices = expr.slice  # type: ignore[attr-defined]  # a Subscript
        if len(slices) != 1 or type(slices[0].slice) is not cst.Index:
            return None
        container = _container(ctx, state, expr.value, depth + 1)  # type: ignore[attr-defined]  # a Subscript
        if container is None:
            return None
        part = _part(ctx, container, slices[0].slice.value)
    elif kind is cst.Attribute:
        container = _container(ctx, state, expr.value, depth + 1)  # type: ignore[attr-defined]  # an Attribute
        if type(container) is not cst.Call:
            return None
        part = _field(ctx, container, expr.attr.value)  # type: ignore[attr-defined]  # an Attribute
    elif kind is cst.Name:
        bound = _single(ctx, state, expr)  # type: ignore[arg-type]  # a Name
        if bound is None:
            return None
        value, path = bound
        if path:
            for position in path:
                found = _element(_container(ctx, state, value, depth + 1), position)
                if found is None:
                    return None
                value = found
            part = value
        elif type(value) in (cst.Subscript, cst.Attribute, cst.Name):
            part = _read(ctx, state, value, depth + 1)  # `x = box[0]`: x is what box[0] gives
            return part
        else:
            return None
    if part is None:
        return None
    deeper = _read(ctx, state, part, depth + 1) if type(part) in (cst.Subscript, cst.Attribute, cst.Name) else None
    return deeper if deeper is not None else part


def _part(ctx: FileContext, container: cst.BaseExpression, key: cst.BaseExpression) -> cst.BaseExpression | None:
    if type(container) in (cst.Tuple, cst.List):
        if type(key) is cst.Integer:
            return _element(container, int(key.value, 0))
        if type(key) is cst.UnaryOperation and type(key.operator) is cst.Minus and type(key.expression) is cst.Integer:
            return _element(container, -int(key.expression.value, 0))
        return None
    text = literal_value(key) if type(key) is cst.SimpleString else None
    if not isinstance(text, str):
        return None
    if type(container) is cst.Dict:
        for element in reversed(container.elements):
            if not isinstance(element, cst.DictElement):
                return None  # `{**base, ...}`: the key may come from elsewhere
            if type(element.key) is cst.SimpleString and literal_value(element.key) == text:
                return element.value
        return None
    if type(container) is cst.Call and type(container.func) is cst.Name and container.func.value == "dict":
        if container.args and container.args[0].keyword is None:
            return None
        return next((a.value for a in container.args if a.keyword is not None and a.keyword.value == text), None)
    return None


def _field(ctx: FileContext, call: cst.Call, name: str) -> cst.BaseExpression | None:
    """The argument a dataclass or NamedTuple instance of the file was given for one field."""
    if type(call.func) is not cst.Name:
        return None
    fields = record_classes(ctx).get(call.func.value)
    if fields is None:
        return None
    for position, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value == name:
                return arg.value
        elif position < len(fields) and fields[position] == name:
            return arg.value
    return None


def holders(ctx: FileContext, expr: cst.CSTNode) -> list[cst.BaseExpression]:
    """The names and attributes that receive `expr` back from a container it was put in (`s` in
    `box = Box(GradScaler()); s = box.value`, or `s, _ = (GradScaler(), None)`), in source order."""
    state = _file_state(ctx)
    if not state.names:
        return []
    if state.held is None:
        state.held = {}
        for assign in ctx.index.of_type(cst.Assign):
            for target in assign.targets:
                pattern = target.target
                if type(pattern) in (cst.Name, cst.Attribute):
                    if type(assign.value) in (cst.Subscript, cst.Attribute, cst.Name):
                        found = _read(ctx, state, assign.value, 0)
                        if found is not None:
                            state.held.setdefault(id(found), []).append(pattern)
                elif type(pattern) in (cst.Tuple, cst.List):
                    for node in ctx.index.walk(pattern):
                        if type(node) in (cst.Name, cst.Attribute) and type(ctx.index.parent(node)) is cst.Element:
                            part = unpacked_part(ctx, node)  # type: ignore[arg-type]  # a Name or Attribute
                            if part is not None:
                                state.held.setdefault(id(part), []).append(node)  # type: ignore[arg-type]  # as above
    return state.held.get(id(expr), [])
