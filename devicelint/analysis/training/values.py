"""What names and `self.x` attributes are assigned, and the literal values (dtypes, device
strings) an expression can take through names, conditionals and dict look-ups.

A flow-insensitive table, good enough for configuration values (`amp_dtype`, `device_type`,
`loader`) that are assigned once or on a few branches. Where a tensor lives is not asked here:
that is the placement interpreter's job.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.training.syntax import scope_of
from devicelint.context import FileContext

UNKNOWN = "?"
DTYPES = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float32": "float32",
    "torch.float": "float32",
}


def _record_target(
    assigned: dict[str, list[cst.BaseExpression | None]], target: cst.BaseExpression, value: cst.BaseExpression | None
) -> None:
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _record_target(assigned, element.value, None)
        return
    if type(target) is cst.StarredElement:
        _record_target(assigned, target.value, None)
        return
    text = dotted_name(target)
    if text is not None:
        assigned.setdefault(text, []).append(value)


def assignments(ctx: FileContext) -> dict[int, dict[str, list[cst.BaseExpression | None]]]:
    """id(scope) -> target text -> the values assigned to it there (None: not followable)."""

    def build(c: FileContext) -> dict[int, dict[str, list[cst.BaseExpression | None]]]:
        table: dict[int, dict[str, list[cst.BaseExpression | None]]] = {}
        for node in c.index.of_type(cst.Assign):
            scope = table.setdefault(id(scope_of(c, node)), {})
            for target in node.targets:
                _record_target(scope, target.target, node.value)
        for node in c.index.of_type(cst.AnnAssign):
            if node.value is not None:
                _record_target(table.setdefault(id(scope_of(c, node)), {}), node.target, node.value)
        for node in c.index.of_type(cst.AugAssign):
            _record_target(table.setdefault(id(scope_of(c, node)), {}), node.target, None)
        for node in c.index.of_type(cst.For):
            _record_target(table.setdefault(id(scope_of(c, node)), {}), node.target, None)
        for node in c.index.of_type(cst.FunctionDef):
            own = table.setdefault(id(node), {})
            for param in (*node.params.params, *node.params.kwonly_params, *node.params.posonly_params):
                own.setdefault(param.name.value, []).append(None)
        return table

    return ctx.shared("training.values.assignments", build)


def values_of(ctx: FileContext, name: str, scope: cst.CSTNode) -> list[cst.BaseExpression | None] | None:
    """The values assigned to `name` in its scope, else at module level; None when never assigned."""
    table = assignments(ctx)
    local = table.get(id(scope), {}).get(name)
    if local is not None:
        return local
    if scope is not ctx.module:
        return table.get(id(ctx.module), {}).get(name)
    return None


def attribute_values(ctx: FileContext, node: cst.BaseExpression) -> list[cst.BaseExpression | None] | None:
    """The values assigned to `self.x` in any method of the file; None for other expressions."""
    text = dotted_name(node) if type(node) is cst.Attribute else None
    if text is None or not text.startswith("self.") or text.count(".") != 1:
        return None
    return [v for table in assignments(ctx).values() for v in table.get(text, [])] or None


def built_class(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """The class, as the file spells it, that `node` (a name, or `self.<attr>` in any method)
    is bound once to an instance of: `Trainer` for `trainer = Trainer(cfg)`."""
    owner = dotted_name(node)
    if owner is None:
        return None
    values = attribute_values(ctx, node) if owner.startswith("self.") else values_of(ctx, owner, scope_of(ctx, node))
    if values is None or len(values) != 1 or type(values[0]) is not cst.Call:
        return None
    return dotted_name(values[0].func)


def _resolve(
    ctx: FileContext,
    node: cst.BaseExpression,
    scope: cst.CSTNode,
    leaf: Callable[[cst.BaseExpression], str | None],
    depth: int = 0,
) -> frozenset[str]:
    """Possible values of `node` through names, conditionals, dict look-ups, parameter defaults and
    configuration fields; `leaf` reads one."""
    if depth > 8:
        return frozenset({UNKNOWN})
    direct = leaf(node)
    if direct is not None:
        return frozenset({direct})
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "get" and node.args:
        table = node.func.value  # `{"fp16": torch.float16, ...}.get(cfg.dtype)`, or a name bound to that dict
        if type(table) is cst.Name:
            bound = values_of(ctx, table.value, scope)
            table = bound[0] if bound and len(bound) == 1 and type(bound[0]) is cst.Dict else table
        if type(table) is cst.Dict:
            looked_up = _resolve(
                ctx, cst.Subscript(table, [cst.SubscriptElement(cst.Index(node.args[0].value))]), scope, leaf, depth + 1
            )
            return looked_up | (
                _resolve(ctx, node.args[1].value, scope, leaf, depth + 1)
                if len(node.args) > 1
                else frozenset({UNKNOWN})
            )
    helper = _helper_called(ctx, node, scope) if type(node) is cst.Call else None
    if helper is not None:  # `ptdtype = pick_dtype(cfg.dtype)`: what the helper can return
        returned = [r.value for r in ctx.index.returns_of(helper) if r.value is not None]
        if returned:
            return frozenset().union(*(_resolve(ctx, value, helper, leaf, depth + 1) for value in returned))
    if isinstance(leaf, _DtypeLeaf) and type(node) is cst.Call:
        name = _torch_attribute_name(ctx, node)
        if name is not None:  # `getattr(torch, cfg.dtype)` with `dtype: str = "float16"`
            return _resolve(ctx, name, scope, _dtype_string_leaf, depth + 1)
        return frozenset({UNKNOWN})
    if type(node) is cst.IfExp:
        return _resolve(ctx, node.body, scope, leaf, depth + 1) | _resolve(ctx, node.orelse, scope, leaf, depth + 1)
    if type(node) is cst.Subscript and type(node.value) is cst.Dict:
        out: frozenset[str] = frozenset()
        for element in node.value.elements:
            if type(element) is cst.DictElement:
                out |= _resolve(ctx, element.value, scope, leaf, depth + 1)
            else:
                out |= {UNKNOWN}
        return out or frozenset({UNKNOWN})
    if type(node) is cst.Subscript and type(node.value) is cst.Name:
        values = values_of(ctx, node.value.value, scope)
        if values and all(type(v) is cst.Dict for v in values):
            return _resolve(ctx, node.with_changes(value=values[0]), scope, leaf, depth + 1)
        return frozenset({UNKNOWN})
    if (type(node) is cst.Name and ctx.qualified_name(node) is None) or type(node) is cst.Attribute:
        values = values_of(ctx, node.value, scope) if type(node) is cst.Name else attribute_values(ctx, node)
        if not values and type(node) is cst.Attribute:
            values = config_field_values(ctx, node, scope)
        if not values:
            return frozenset({UNKNOWN})
        out = frozenset()
        for value in values:
            if value is None:
                passed = _parameter_values(ctx, node, scope) if type(node) is cst.Name else None
                if passed is None:
                    out |= {UNKNOWN}
                for given in passed or ():
                    out |= _resolve(ctx, given, scope, leaf, depth + 1) if given is not None else {UNKNOWN}
                continue
            # `self.x = ...` is read in the scope that assigned it.
            where = scope if type(node) is cst.Name else scope_of(ctx, value)
            out |= _resolve(ctx, value, where, leaf, depth + 1)
        return out
    return frozenset({UNKNOWN})


def _helper_called(ctx: FileContext, call: cst.Call, scope: cst.CSTNode) -> cst.FunctionDef | None:
    """The file's function a call runs: a top-level function by name, or a method of the class
    around `scope` called on `self`, `cls` or the class by name."""
    func = call.func
    if type(func) is cst.Name:
        return next(
            (s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == func.value),
            None,
        )
    if type(func) is not cst.Attribute or type(func.value) is not cst.Name:
        return None
    cls = ctx.index.enclosing_class(scope) if type(scope) is cst.FunctionDef else None
    if cls is None or func.value.value not in ("self", "cls", cls.name.value):
        return None
    return next(
        (s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == func.attr.value),
        None,
    )


def _parameter_values(ctx: FileContext, node: cst.Name, scope: cst.CSTNode) -> list[cst.BaseExpression | None] | None:
    """What parameter `node` of function `scope` can hold, when it has a default
    (`amp_dtype=torch.float16`): the arguments the file's calls of the function pass, plus the
    default where a call leaves it out or where no call is seen (None: unknown, for a caller
    elsewhere). None when it is not such a parameter."""
    if type(scope) is not cst.FunctionDef:
        return None
    params = scope.params
    positional_params = [*params.posonly_params, *params.params]
    param = next((p for p in (*positional_params, *params.kwonly_params) if p.name.value == node.value), None)
    if param is None or param.default is None:
        return None
    passed = passed_arguments(ctx, scope, node.value)
    if not passed:
        return [param.default, None]
    return [given if given is not None else param.default for given in passed]


def passed_arguments(ctx: FileContext, func: cst.FunctionDef, name: str) -> list[cst.BaseExpression | None]:
    """What the file's calls of `func` (a top-level function, or a class's `__init__` through
    `Class(...)`) pass for its parameter `name`, one entry per call: None where a call leaves it
    out or passes `*args`/`**kwargs`. Empty when the file shows no call."""
    params = func.params
    positional_params = [*params.posonly_params, *params.params]
    param = next((p for p in (*positional_params, *params.kwonly_params) if p.name.value == name), None)
    if param is None:
        return []
    index = positional_params.index(param) if param in positional_params else None
    if index is not None and ctx.index.enclosing_class(func) is not None:
        index -= 1  # `self` is not passed
    out: list[cst.BaseExpression | None] = []
    for call in _calls_of_function(ctx, func):
        if any(arg.star for arg in call.args):
            out.append(None)
            continue
        given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
        if given is None and index is not None:
            args = [a.value for a in call.args if a.keyword is None]
            given = args[index] if 0 <= index < len(args) else None
        out.append(given)
    return out


def _calls_of_function(ctx: FileContext, func: cst.FunctionDef) -> list[cst.Call]:
    """Calls in the file of a top-level function (`train(...)`) or of a class's `__init__`
    (`Trainer(...)`)."""
    cls = ctx.index.enclosing_class(func)
    if cls is not None:
        name = cls.name.value if func.name.value == "__init__" else None
    else:
        name = func.name.value if any(s is func for s in ctx.module.body) else None
    if name is None:
        return []
    return [c for c in ctx.index.of_type(cst.Call) if type(c.func) is cst.Name and c.func.value == name]


def config_field_values(
    ctx: FileContext, node: cst.Attribute, scope: cst.CSTNode
) -> list[cst.BaseExpression | None] | None:
    """What a configuration field (`cfg.amp_dtype`, `self.cfg.dtype`) can hold when its receiver
    is an instance of a class of the file (built with `Config(...)` there, or a parameter
    annotated `Config` or defaulting to `Config()`): the class-level default and the
    `Config(field=...)` keywords the file passes (`Config(**kwargs)` or a positional argument:
    unknown). None when the receiver's class is not known or does not declare the field."""
    cls = _receiver_class(ctx, node.value, scope)
    if cls is None:
        return None
    values = _config_fields(ctx).get((cls, node.attr.value))
    return list(values) if values else None


def _config_fields(ctx: FileContext) -> dict[tuple[str, str], list[cst.BaseExpression | None]]:
    """(class name, field) -> class-level default and constructor keywords, for classes of the file."""

    def build(c: FileContext) -> dict[tuple[str, str], list[cst.BaseExpression | None]]:
        table: dict[tuple[str, str], list[cst.BaseExpression | None]] = {}
        for cls in c.index.of_type(cst.ClassDef):
            body = cls.body.body if type(cls.body) is cst.IndentedBlock else []
            for statement in body:
                for small in statement.body if type(statement) is cst.SimpleStatementLine else ():
                    if type(small) is cst.AnnAssign and type(small.target) is cst.Name:
                        table.setdefault((cls.name.value, small.target.value), []).append(small.value)
                    elif (
                        type(small) is cst.Assign
                        and len(small.targets) == 1
                        and type(small.targets[0].target) is cst.Name
                    ):
                        table.setdefault((cls.name.value, small.targets[0].target.value), []).append(small.value)
        for call in c.index.of_type(cst.Call):
            if type(call.func) is not cst.Name:
                continue
            fields = [key for key in table if key[0] == call.func.value]
            for arg in call.args:
                if arg.keyword is not None and (call.func.value, arg.keyword.value) in table:
                    table[(call.func.value, arg.keyword.value)].append(arg.value)
                elif arg.star or arg.keyword is None:
                    for key in fields:
                        table[key].append(None)
        return table

    return ctx.shared("training.values.config_fields", build)


def _receiver_class(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode, depth: int = 0) -> str | None:
    """The class of the file whose instance `node` holds, when every value the file shows for it agrees."""
    classes = {key[0] for key in _config_fields(ctx)}
    if depth > 3:
        return None
    if type(node) is cst.Name and node.value in classes:
        return node.value  # `Config.amp_dtype`
    if type(node) is cst.Name:
        annotated = _parameter_annotation(node, scope)
        if annotated in classes:
            return annotated
        values = values_of(ctx, node.value, scope)
        if values and all(v is None for v in values):
            # `cfg=Config()`: a caller elsewhere passes an instance of the default's class too.
            values = [v for v in _parameter_values(ctx, node, scope) or () if v is not None]
    elif type(node) is cst.Attribute:
        values = attribute_values(ctx, node)
    else:
        return None
    found: set[str | None] = set()
    for value in values or ():
        if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in classes:
            found.add(value.func.value)
        elif type(value) is cst.Name:
            found.add(_receiver_class(ctx, value, scope_of(ctx, value), depth + 1))
        else:
            found.add(None)
    return found.pop() if len(found) == 1 and None not in found else None


def _parameter_annotation(node: cst.Name, scope: cst.CSTNode) -> str | None:
    if type(scope) is not cst.FunctionDef:
        return None
    params = scope.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.name.value == node.value and param.annotation is not None:
            annotation = param.annotation.annotation
            return annotation.value if type(annotation) is cst.Name else None
    return None


def _torch_attribute_name(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """`name` in `getattr(torch, name)`."""
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    if type(call.func) is cst.Name and call.func.value == "getattr" and len(args) >= 2:
        if ctx.qualified_name(args[0]) == "torch":
            return args[1]
    return None


def _dtype_string_leaf(node: cst.BaseExpression) -> str | None:
    """`"float16"`, `"bf16"`, the string that names a dtype in `getattr(torch, ...)`."""
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        if isinstance(value, str):
            return DTYPES.get(f"torch.{value}", UNKNOWN)
    return None


class _DtypeLeaf:
    """Reads a `torch.float16`-like name; a marker too, so that `getattr(torch, ...)` is followed
    only when dtypes are asked for."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def __call__(self, node: cst.BaseExpression) -> str | None:
        return DTYPES.get(self.ctx.qualified_name(node) or "")


def possible_dtypes(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode) -> frozenset[str]:
    return _resolve(ctx, node, scope, _DtypeLeaf(ctx))


def _device_leaf(node: cst.BaseExpression) -> str | None:
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        if isinstance(value, str):
            return value.split(":", 1)[0]
    return None


def possible_devices(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode) -> frozenset[str]:
    return _resolve(ctx, node, scope, _device_leaf)
