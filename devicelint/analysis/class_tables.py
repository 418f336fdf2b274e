"""A class chosen at run time from a table the file writes: `OPTIMIZERS[cfg.name](params)`,
`OPTIMIZERS.get(name, SGD)(params)`, `[SGD, Adagrad][i](params)`, or a name bound to such a read
(`cls = OPTIMIZERS[args.optim]`). The table is a dict, list or tuple literal, written where it is
read or bound to a name (at module level or in the function) every binding of which is one; what
the read may give is any of its values (and the default of `.get`).
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.local_bindings import bindings
from devicelint.context import FileContext

_TABLES = (cst.Dict, cst.List, cst.Tuple)


def table_choices(ctx: FileContext, callee: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """Every value `callee` may be when it reads a table of the file, else None."""
    if type(callee) is cst.Name:
        if callee.value not in ctx.shared("class_tables.read_names", _names_bound_to_reads):
            return None  # (cheap: no assignment in the file binds the name to a table read)
        values = bindings(ctx, callee.value, callee)
        if not values:
            return None
        choices = [_read_choices(ctx, value) for value in values]
        if any(c is None for c in choices):
            return None
        return [entry for c in choices for entry in c or ()]
    return _read_choices(ctx, callee)


def _names_bound_to_reads(ctx: FileContext) -> frozenset[str]:
    """Names some plain assignment of the file binds to a subscript or a `.get(...)` call."""
    return frozenset(
        target.target.value
        for assign in ctx.index.of_type(cst.Assign)
        if type(assign.value) is cst.Subscript
        or (
            type(assign.value) is cst.Call
            and type(assign.value.func) is cst.Attribute
            and assign.value.func.attr.value == "get"
        )
        for target in assign.targets
        if type(target.target) is cst.Name
    )


def _read_choices(ctx: FileContext, read: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The values of the table `read` indexes (`T[k]`) or looks up (`T.get(k)`, `T.get(k, d)`)."""
    if type(read) is cst.Subscript and len(read.slice) == 1 and type(read.slice[0].slice) is cst.Index:
        return _table_values(ctx, read.value)
    if (
        type(read) is cst.Call
        and type(read.func) is cst.Attribute
        and read.func.attr.value == "get"
        and 1 <= len(read.args) <= 2
        and not any(a.star or a.keyword is not None for a in read.args)
    ):
        values = _table_values(ctx, read.func.value)
        if values is None or type(read.func.value) not in (cst.Dict, cst.Name):
            return None
        return values + [read.args[1].value] if len(read.args) == 2 else values
    return None


def _table_values(ctx: FileContext, table: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The values of a table literal, or of every literal a name is bound to (never otherwise)."""
    literals = [table] if type(table) in _TABLES else None
    if type(table) is cst.Name:
        literals = bindings(ctx, table.value, table) or None
    if not literals or not all(type(t) in _TABLES for t in literals):
        return None
    values: list[cst.BaseExpression] = []
    for literal in literals:
        for element in literal.elements:  # type: ignore[attr-defined]
            if type(element) in (cst.StarredElement, cst.StarredDictElement):
                return None
            values.append(element.value)
    return values or None
