"""What a notebook shows: IPython displays the value of a cell's last top-level expression.

`m.to(device)` as the last line of a cell is not thrown away: the cell prints the moved copy
(a tutorial showing where the tensor went), so rules about discarded values leave it alone.
"""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext
from devicelint.positions import node_ranges


def shown_by_cell(ctx: FileContext, expression: cst.Expr) -> bool:
    """Whether `expression` is the last statement of its notebook cell, at the top level, last
    on its line and not ended by `;`: IPython displays its value."""
    if not ctx.cells:
        return False
    line = ctx.index.parent(expression)
    if type(line) is not cst.SimpleStatementLine or line.body[-1] is not expression:
        return False
    if type(expression.semicolon) is cst.Semicolon:
        return False  # `x.to(device);`: the trailing semicolon hides the output
    if ctx.index.parent(line) is not ctx.module:
        return False  # inside a block: a loop's or a function's value is never displayed
    body = list(ctx.module.body)
    position = next(i for i, statement in enumerate(body) if statement is line)
    following = body[position + 1] if position + 1 < len(body) else None
    wanted = [line] if following is None else [line, following]
    ranges = node_ranges(ctx.module, wanted, ctx.index, ctx.source)
    cell = _cell(ctx, ranges[line].end.line)
    if cell is None or cell != _cell(ctx, ranges[line].start.line):
        return False
    return following is None or _cell(ctx, ranges[following].start.line) != cell


def _cell(ctx: FileContext, line: int) -> int | None:
    return ctx.cells[line - 1] if 0 < line <= len(ctx.cells) else None
