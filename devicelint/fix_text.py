"""Building blocks for fixes that add whole lines: the statement a node sits in and its indent.

A fix that adds a line (`scaler.update()` after `scaler.step(...)`) must indent it exactly as
its neighbour, with the file's own indent unit and line break; LibCST knows both.
"""

from __future__ import annotations

from typing import Literal

import libcst as cst
from libcst._nodes.internal import CodegenState

from devicelint.context import FileContext
from devicelint.rule_base import FixProposal

Insertion = tuple[cst.CSTNode, Literal["before", "after"], str]


def own_line_statement(ctx: FileContext, node: cst.CSTNode) -> cst.BaseStatement | None:
    """The statement on its own line(s) that holds `node`, or None inside `if x: a; b` suites."""
    current: cst.CSTNode | None = node
    while current is not None and not isinstance(current, cst.BaseStatement):
        if type(current) is cst.SimpleStatementSuite:
            return None
        current = ctx.index.parent(current)
    if current is None:
        return None
    if type(current) is cst.SimpleStatementLine and len(current.body) > 1:
        return None  # `a = 1; b = 2`: a line added after it would split what reads as one line
    return current


def indent_of(ctx: FileContext, statement: cst.CSTNode) -> str:
    """The whitespace that starts the line of the statement that holds `statement`."""
    return "".join(_indent_units(ctx, statement))


def _indent_units(ctx: FileContext, node: cst.CSTNode) -> list[str]:
    units = [
        block.indent if block.indent is not None else ctx.module.default_indent
        for block in ctx.index.ancestors(node)
        if type(block) is cst.IndentedBlock
    ]
    return units[::-1]


def code_in_place(ctx: FileContext, new: cst.CSTNode, old: cst.CSTNode) -> str:
    """The source of `new` as it reads where `old` stands. LibCST indents the continuation lines of
    a bracketed expression relative to the enclosing block; rendered on its own
    (`Module.code_for_node`), a multi-line call would lose that indent."""
    state = CodegenState(default_indent=ctx.module.default_indent, default_newline=ctx.module.default_newline)
    state.indent_tokens = _indent_units(ctx, old)
    new._codegen(state)
    return "".join(state.tokens)


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
    if type(node) is cst.SimpleStatementLine:
        return node.trailing_whitespace
    for child in reversed(node.children):
        if not isinstance(child, (cst.EmptyLine, cst.BaseExpression)):
            found = _last_line_break(child)
            if type(found) is cst.TrailingWhitespace:
                return found
    return node


def adding_lines(description: str, safe: bool, *insertions: Insertion) -> FixProposal:
    return FixProposal(description=description, safe=safe, insertions=tuple(insertions))


def keyword_argument(name: str, value: str) -> cst.Arg:
    """`name=value` as a call argument (`value` is source text)."""
    return cst.Arg(
        keyword=cst.Name(name),
        value=cst.parse_expression(value),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )


def with_argument(call: cst.Call, added: cst.Arg) -> cst.Call | None:
    """`call` with `added` as its last argument, laid out as the call already is (one argument
    per line gets a line of its own; comments stay on their lines). None when a comment sits
    between the last argument and its comma, where no edit keeps it readable."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[added])
    last = args[-1]
    if _has_comment(last.whitespace_after_arg):
        return None
    previous = args[-2].comma if len(args) > 1 else None
    between = _uncommented(previous.whitespace_after if type(previous) is cst.Comma else call.whitespace_before_args)
    if type(between) is not cst.ParenthesizedWhitespace and type(last.comma) is not cst.Comma:
        between = cst.SimpleWhitespace(" ")  # `f(a)` and `f(a, b)` become `f(a, x=1)`, `f(a, b, x=1)`
    if type(last.comma) is cst.Comma:  # a trailing comma: the new argument takes the closing layout
        own = last.comma.whitespace_after
        after_last: cst.BaseParenthesizableWhitespace
        if type(own) is cst.ParenthesizedWhitespace and type(between) is cst.ParenthesizedWhitespace:
            # Keep the last argument's own comment on its line, then go on as between arguments.
            after_last = own.with_changes(indent=between.indent, last_line=between.last_line)
        else:
            after_last = between
        closing = last.comma.with_changes(whitespace_after=_uncommented(own))
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=after_last))
        return call.with_changes(args=[*args, added.with_changes(comma=closing)])
    # `f(\n    a, b\n)`: the line break before `)` follows the last argument; it moves behind
    # the new one so the bracket keeps its own line.
    closing_break = last.whitespace_after_arg
    args[-1] = last.with_changes(
        comma=cst.Comma(whitespace_after=between), whitespace_after_arg=cst.SimpleWhitespace("")
    )
    return call.with_changes(args=[*args, added.with_changes(whitespace_after_arg=closing_break)])


def _has_comment(space: cst.BaseParenthesizableWhitespace) -> bool:
    return type(space) is cst.ParenthesizedWhitespace and (
        space.first_line.comment is not None or any(line.comment is not None for line in space.empty_lines)
    )


def _uncommented(space: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """The same layout without the comments in it (they belong to their own argument)."""
    if type(space) is cst.ParenthesizedWhitespace:
        return space.with_changes(first_line=cst.TrailingWhitespace(newline=space.first_line.newline), empty_lines=[])
    return space


def torch_nn_spelling(ctx: FileContext) -> str | None:
    """How this file spells `torch.nn` at module level (`nn`, `torch.nn`), or None."""
    spelled = None
    for statement in ctx.module.body:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.ImportFrom and not isinstance(small.names, cst.ImportStar):
                module = ctx.module.code_for_node(small.module) if small.module is not None else ""
                for alias in small.names:
                    if module == "torch" and ctx.module.code_for_node(alias.name) == "nn":
                        return alias.asname.name.value if alias.asname else "nn"  # type: ignore[union-attr]  # an import's `as` binds a plain Name
            elif type(small) is cst.Import:
                for alias in small.names:
                    name = ctx.module.code_for_node(alias.name)
                    if name == "torch.nn" and alias.asname is not None:
                        return alias.asname.name.value  # type: ignore[union-attr]  # as above
                    if name in ("torch", "torch.nn") and alias.asname is None:
                        spelled = "torch.nn"
    return spelled
