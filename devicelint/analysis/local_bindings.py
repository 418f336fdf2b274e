"""What one file shows about the values of local names: every value a name is bound to, the
values a `self.` attribute is given, the keys of `**` mappings, and the device type that a
device expression names (from the placement engine's `DeviceId`). Used by the default-device
and random-draw analyses.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.facts import file_facts
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_facts import DEVICE_VALUE
from devicelint.context import FileContext

CPU = "cpu"


def device_type_of(ctx: FileContext, expr: cst.BaseExpression) -> str | None:
    """ "cuda"/"cpu"/... for the device an expression names, as the placement engine resolves
    it (literals, `torch.device(...)`, names and attributes bound to them, `"cuda" if
    available else "cpu"`, which is the accelerator on a GPU machine); else None."""
    fact = file_facts(ctx).value(expr)
    if fact.kind == DEVICE_VALUE and fact.where == CPU:
        return CPU
    device = fact.device if fact.kind == DEVICE_VALUE else None
    return (device or file_facts(ctx).device_of(expr)).type


def bindings(ctx: FileContext, name: str, use: cst.CSTNode) -> list[cst.BaseExpression] | None:
    """Every value assigned to the local or global `name` seen from `use` (None: it is also
    bound some other way, e.g. as a parameter or a loop target)."""
    scope: cst.CSTNode | None = ctx.index.enclosing_function(use)
    while True:
        values, other = _assigned_in(ctx, scope or ctx.module, name)
        if values or other or scope is None:
            return None if other else values
        scope = ctx.index.enclosing_function(scope)


def _assigned_in(ctx: FileContext, scope: cst.CSTNode, name: str) -> tuple[list[cst.BaseExpression], bool]:
    """Values assigned to `name` by plain `name = ...` in `scope` itself, and whether `scope`
    also binds it otherwise (parameter, loop target, unpacking, `as`, augmented assignment)."""
    function = scope if type(scope) is cst.FunctionDef else None
    values: list[cst.BaseExpression] = []
    other = False
    if function is not None:
        params = function.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        every += [p for p in (params.star_arg, params.star_kwarg) if type(p) is cst.Param]
        other = any(p.name.value == name for p in every)
    for node in ctx.index.walk(scope):
        if type(node) is cst.Assign:
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.For, cst.AugAssign, cst.AnnAssign)):
            targets = [node.target]
        elif type(node) is cst.AsName:
            targets = [node.name]
        else:
            continue
        if not any(_binds_inside(t, name) for t in targets) or ctx.index.enclosing_function(node) is not function:
            continue
        if type(node) is cst.Assign and any(type(t) is cst.Name for t in targets if _binds_inside(t, name)):
            # `ckpt = box["value"]` of a container the file fills: what was put in
            values.append(through_containers(ctx, node.value))
        else:
            other = True
    return values, other


def _binds_inside(target: cst.CSTNode | None, name: str) -> bool:
    if type(target) is cst.Name:
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds_inside(e.value, name) for e in target.elements)
    return False


def attribute_bindings(ctx: FileContext, attr: str, use: cst.CSTNode) -> list[cst.BaseExpression]:
    """Values assigned to `self.<attr>` in the methods of the class around `use`."""
    owner = ctx.index.enclosing_class(use)
    if owner is None:
        return []
    values: list[cst.BaseExpression] = []
    for node in ctx.index.walk(owner):
        if isinstance(node, (cst.Assign, cst.AnnAssign)) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for target in targets:
                if (
                    type(target) is cst.Attribute
                    and target.attr.value == attr
                    and type(target.value) is cst.Name
                    and target.value.value == "self"
                ):
                    values.append(node.value)
    return values


def mapping_values(
    ctx: FileContext, expr: cst.BaseExpression, key: str, use: cst.CSTNode, depth: int = 0
) -> list[cst.BaseExpression | None] | None:
    """What a `**` mapping gives `key` on each path (None where that path leaves it out): a dict
    literal, `dict(...)`, a conditional between such, or a name bound only to them. None when
    the file does not show the mapping."""
    if depth > 3:
        return None
    if type(expr) is cst.Dict:
        if not all(type(e) is cst.DictElement and type(e.key) is cst.SimpleString for e in expr.elements):
            return None
        return [next((e.value for e in expr.elements if literal_value(e.key) == key), None)]  # type: ignore[attr-defined]  # all() above: each is a DictElement
    if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "dict":
        if not all(a.keyword is not None for a in expr.args):
            return None
        return [next((a.value for a in expr.args if a.keyword.value == key), None)]  # type: ignore[union-attr]  # all() above: every argument has a keyword
    branches: list[cst.BaseExpression] | None = None
    if type(expr) is cst.IfExp:
        branches = [expr.body, expr.orelse]
    elif type(expr) is cst.Name:
        branches = bindings(ctx, expr.value, use) or None
    if not branches:
        return None
    found: list[cst.BaseExpression | None] = []
    for branch in branches:
        values = mapping_values(ctx, branch, key, use, depth + 1)
        if values is None:
            return None
        found += values
    return found


def record_field(ctx: FileContext, value: cst.BaseExpression, field: str) -> cst.BaseExpression | None:
    """The expression a dataclass instance built here holds in `field`: what the construction
    (`Config(lr=0.1)`, a call of a `@dataclass` class of the file) passes for it, by keyword or
    position, else the field's default in the class body; None where the construction spreads
    arguments or the field has no default."""
    if type(value) is not cst.Call or type(value.func) is not cst.Name or any(a.star for a in value.args):
        return None
    record = next(
        (
            c
            for c in ctx.module.body
            if type(c) is cst.ClassDef
            and c.name.value == value.func.value
            and any(dotted_name(d.decorator) in ("dataclass", "dataclasses.dataclass") for d in c.decorators)
        ),
        None,
    )
    if record is None or type(record.body) is not cst.IndentedBlock:
        return None
    declared = [
        line.body[0]
        for line in record.body.body
        if type(line) is cst.SimpleStatementLine
        and type(line.body[0]) is cst.AnnAssign
        and type(line.body[0].target) is cst.Name
    ]
    names = [d.target.value for d in declared]  # type: ignore[attr-defined]  # filtered to Name targets above
    if field not in names:
        return None
    for arg in value.args:
        if arg.keyword is not None and arg.keyword.value == field:
            return arg.value
    positional = [a.value for a in value.args if a.keyword is None]
    position = names.index(field)
    if position < len(positional):
        return positional[position]
    return declared[position].value
