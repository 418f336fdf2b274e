"""Building blocks for fixes that add whole lines: the statement a node sits in and its indent.

A fix that adds a line (`scaler.update()` after `scaler.step(...)`) must indent it exactly as
its neighbour, with the file's own indent unit and line break; LibCST knows both.
"""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext
from devicelint.registry import FixProposal

Insertion = tuple[cst.CSTNode, str, str]


def own_line_statement(ctx: FileContext, node: cst.CSTNode) -> cst.BaseStatement | None:
    """The statement on its own line(s) that holds `node`, or None inside `if x: a; b` suites."""
    current: cst.CSTNode | None = node
    while current is not None and not isinstance(current, cst.BaseStatement):
        if isinstance(current, cst.SimpleStatementSuite):
            return None
        current = ctx.index.parent(current)
    if current is None:
        return None
    if isinstance(current, cst.SimpleStatementLine) and len(current.body) > 1:
        return None  # `a = 1; b = 2`: a line added after it would split what reads as one line
    return current


def indent_of(ctx: FileContext, statement: cst.BaseStatement) -> str:
    """The whitespace that starts `statement`'s line."""
    units = [
        block.indent if block.indent is not None else ctx.module.default_indent
        for block in ctx.index.ancestors(statement)
        if isinstance(block, cst.IndentedBlock)
    ]
    return "".join(reversed(units))


def line_before(ctx: FileContext, statement: cst.BaseStatement, code: str) -> Insertion:
    """Insert `code` as a line of its own just above `statement`, at the same indent."""
    return (statement, "before", f"{code}{ctx.module.default_newline}{indent_of(ctx, statement)}")


def line_after(ctx: FileContext, statement: cst.BaseStatement, code: str) -> Insertion:
    """Insert `code` as a line of its own just below `statement` (below a compound statement's
    last body line), at `statement`'s indent."""
    return (_last_line_break(statement), "after", f"{indent_of(ctx, statement)}{code}{ctx.module.default_newline}")


def _last_line_break(node: cst.CSTNode) -> cst.CSTNode:
    # A statement's own range stops before its comment and line break: the text goes after the
    # `TrailingWhitespace` that ends its last line (a block's footer comments stay below).
    if isinstance(node, cst.SimpleStatementLine):
        return node.trailing_whitespace
    for child in reversed(node.children):
        if not isinstance(child, (cst.EmptyLine, cst.BaseExpression)):
            found = _last_line_break(child)
            if isinstance(found, cst.TrailingWhitespace):
                return found
    return node


def adding_lines(description: str, safe: bool, *insertions: Insertion) -> FixProposal:
    return FixProposal(description=description, safe=safe, insertions=tuple(insertions))  # type: ignore[arg-type]
