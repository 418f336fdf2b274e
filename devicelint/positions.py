"""Line and column ranges for the few nodes a run reports, cheaper than LibCST's PositionProvider.

PositionProvider regenerates the whole module, splitting every token with a regex and
entering a generator-based context manager per node: about 2.5x the parse on a large file.
This state computes the same ranges (PositionProvider's semantics: syntactic positions where
a node records them, whitespace-inclusive otherwise) with cheaper bookkeeping, and stops as
soon as the last requested node has its range.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from types import TracebackType
from typing import cast

import libcst as cst
from libcst._position import CodePosition, CodeRange
from libcst.metadata.position_provider import NEWLINE_RE, PositionProvidingCodegenState

from devicelint.analysis.index import NodeIndex


class _AllFound(Exception):
    """Raised to leave code generation once every requested node is placed."""


class _Ranges:
    # The codegen state writes through `provider._computed`, as LibCST's own state does.
    def __init__(self, wanted: Iterable[cst.CSTNode]) -> None:
        self._computed: dict[cst.CSTNode, tuple[tuple[int, int], tuple[int, int]]] = {}
        self.wanted = {id(node) for node in wanted}


class _Syntactic:
    """What `record_syntactic_position` returns: a plain context manager, not a generator."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(
        self, state: _PositionState, node: cst.CSTNode, start_node: cst.CSTNode | None, end_node: cst.CSTNode | None
    ) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node
        self.start = (state.line, state.column)

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is not None:
            return  # leaving early: nothing recorded is needed
        computed = cast(_Ranges, self.state.provider)._computed  # _generate always passes a _Ranges
        start = computed[self.start_node][0] if self.start_node is not None else self.start
        end = computed[self.end_node][1] if self.end_node is not None else (self.state.line, self.state.column)
        computed[self.node] = (start, end)


class _PositionState(PositionProvidingCodegenState):
    def _update_position(self, value: str) -> None:
        if "\r" in value:
            segments = NEWLINE_RE.split(value)
            if len(segments) > 1:
                self.line += len(segments) - 1
                self.column = len(segments[-1])
            else:
                self.column += len(value)
            return
        newlines = value.count("\n")
        if newlines:
            self.line += newlines
            self.column = len(value) - value.rfind("\n") - 1
        else:
            self.column += len(value)

    def add_token(self, value: str) -> None:
        # Module codegen inspects `tokens` (to add or pop the final newline), so they are kept.
        self.tokens.append(value)
        self._update_position(value)

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        for token in self.indent_tokens:
            self._update_position(token)

    def record_syntactic_position(  # type: ignore[override]  # a plain context manager: libcst's is generator-based, and slower
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> _Syntactic:
        return _Syntactic(self, node, start_node, end_node)

    # Ranges are kept as ((line, column), (line, column)) tuples while generating: creating
    # frozen dataclasses for every node is most of PositionProvider's cost.
    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append((self.line, self.column))  # type: ignore[arg-type]  # plain tuples, see above

    def after_codegen(self, node: cst.CSTNode) -> None:
        start: tuple[int, int] = self._stack.pop()  # type: ignore[assignment]  # pushed as a tuple above
        ranges = cast(_Ranges, self.provider)  # _generate always passes a _Ranges
        computed = ranges._computed
        if node not in computed:  # a syntactic range recorded inside the node wins
            computed[node] = (start, (self.line, self.column))
        wanted = ranges.wanted
        if id(node) in wanted:
            wanted.discard(id(node))
            if not wanted:
                raise _AllFound


def node_ranges(
    module: cst.Module,
    nodes: Iterable[cst.CSTNode],
    index: NodeIndex | None = None,
    source: str | None = None,
    first_lines: list[int] | None = None,
) -> dict[cst.CSTNode, CodeRange]:
    """The range of each node (1-based lines, 0-based columns, as PositionProvider gives them).

    With the module's `index` and `source`, only the top-level statements that hold a node are
    generated, each from the line CPython's parser gives it (or `first_lines`, when the caller
    knows them): findings late in a long file cost their statements, not everything above them.
    """
    nodes = list(nodes)
    ranges = _Ranges(nodes)
    if not ranges.wanted:
        return {}
    placed = False
    if index is not None and source is not None and len(module.body) >= _PER_STATEMENT_FROM:
        placed = _by_statement(module, nodes, index, source, ranges, first_lines)
    if not placed:
        ranges = _Ranges(nodes)
        _generate(module, module, ranges, 1)
    out = {}
    for node in nodes:
        (line, column), (end_line, end_column) = ranges._computed[node]
        out[node] = CodeRange(CodePosition(line, column), CodePosition(end_line, end_column))
    return out


# Below this many top-level statements, generating from the top is as cheap as parsing again.
_PER_STATEMENT_FROM = 8


def _generate(module: cst.Module, node: cst.CSTNode, ranges: _Ranges, line: int) -> None:
    state = _PositionState(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
        provider=ranges,  # type: ignore[arg-type]  # the state uses only provider._computed, which _Ranges has
    )
    state.line = line
    try:
        node._codegen(state)
    except _AllFound:
        pass


def _by_statement(
    module: cst.Module,
    nodes: list[cst.CSTNode],
    index: NodeIndex,
    source: str,
    ranges: _Ranges,
    first_lines: list[int] | None,
) -> bool:
    """Place the nodes statement by statement; False when that cannot be done (then the caller
    generates the whole module)."""
    owners: dict[int, list[cst.CSTNode]] = {}
    body_ids = {id(statement): i for i, statement in enumerate(module.body)}
    for node in nodes:
        top = node
        while id(top) not in body_ids:
            parent = index.parent(top)
            if parent is None or parent is module:
                return False  # in the header or footer
            top = parent
        owners.setdefault(body_ids[id(top)], []).append(node)
    if first_lines is None:
        first_lines = statement_lines(module, source)
    if first_lines is None:
        return False
    for position, wanted in sorted(owners.items()):
        statement = module.body[position]
        ranges.wanted = {id(node) for node in wanted}
        _generate(module, statement, ranges, first_lines[position] - lines_before_first_token(statement))
        if any(node not in ranges._computed for node in wanted):
            return False
    return True


def statement_lines(module: cst.Module, source: str) -> list[int] | None:
    """The line of each top-level statement's first token, from CPython's parser."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    lines: list[int] = []
    at = 0
    body = tree.body
    for statement in module.body:
        if at >= len(body):
            return None
        first = body[at]
        decorators = getattr(first, "decorator_list", None)
        lines.append(min(d.lineno for d in decorators) if decorators else first.lineno)
        at += len(statement.body) if type(statement) is cst.SimpleStatementLine else 1
    return lines if at == len(body) else None


def lines_before_first_token(statement: cst.CSTNode) -> int:
    """Comment and blank lines a statement's code starts with (its own and its first decorator's)."""
    count = len(getattr(statement, "leading_lines", ()))
    decorators = getattr(statement, "decorators", ())
    if decorators:
        count += len(decorators[0].leading_lines)
    return count
