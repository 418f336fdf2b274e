"""Parse an edited buffer by reusing the tree of its previous version (for the language server).

A keystroke changes one top-level statement; parsing a 1,000-line file again costs most of the
time to its diagnostics. LibCST trees carry no positions, so the statements before and after
the edit can be kept as they are and only the edited statements (with one more on each side,
which settles how comments and blank lines around them are attributed) are parsed again, as a
module of their own, and put in their place.

The result is the tree a full parse gives (the tests compare them on random edits of real
files); whenever that cannot be assured cheaply (an edit in the file's header, a different
indentation unit, a piece that does not parse on its own) the answer is None and the caller
parses the whole file.
"""

from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from devicelint.cst_parse import parse_module
from devicelint.positions import lines_before_first_token, statement_lines


@dataclass(frozen=True)
class ParsedText:
    """A file's text, its tree, and where each top-level statement's text starts."""

    text: str
    module: cst.Module
    # starts[i]: offset of statement i's text (its leading comment and blank lines included);
    # ends: one past the last statement's text (where the footer starts).
    starts: tuple[int, ...]
    ends: int


def track(text: str, module: cst.Module) -> ParsedText | None:
    """The statement offsets of a freshly parsed file (from CPython's line of each statement:
    a fifth of the cost of generating the code); None if they cannot be placed."""
    lines = statement_lines(module, text)
    if lines is None:
        return None
    line_starts = [0]
    line_starts.extend(match.end() for match in _LINE_BREAK.finditer(text))
    starts = []
    for statement, line in zip(module.body, lines):
        first_line = line - lines_before_first_token(statement)
        if not 1 <= first_line <= len(line_starts):
            return None
        starts.append(line_starts[first_line - 1])
    ends = len(text) - len(_code(module, module.footer))
    if starts and (starts[0] != len(_code(module, module.header)) or sorted(starts) != starts or starts[-1] > ends):
        return None
    return ParsedText(text, module, tuple(starts), ends)


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def reparse(previous: ParsedText, text: str) -> ParsedText | None:
    """`text` parsed by reusing `previous`; None when only a full parse will do."""
    old, module = previous.text, previous.module
    if text == old:
        return previous
    count = len(module.body)
    if count < 3:
        return None
    prefix = _common_prefix(old, text)
    suffix = _common_suffix(old, text, limit=min(len(old), len(text)) - prefix)
    changed_from, changed_to = prefix, len(old) - suffix  # the old text that differs
    if changed_from < previous.starts[0]:
        return None  # in the header, which also holds the encoding and the first line break
    first = max(_statement_at(previous.starts, changed_from) - 1, 0)
    last = min(_statement_at(previous.starts, max(changed_to - 1, changed_from)) + 1, count - 1)
    to_end = last == count - 1  # the piece then takes the footer along
    start = previous.starts[first]
    delta = len(text) - len(old)
    piece = text[start:] if to_end else text[start : previous.starts[last + 1] + delta]
    try:
        parsed = parse_module(piece)
    except (cst.ParserSyntaxError, RecursionError, MemoryError, ValueError):
        return None
    if not parsed.body or parsed.default_newline != module.default_newline:
        return None
    if not to_end and (parsed.footer or not parsed.has_trailing_newline):
        return None
    # The file's first indented block settles its indentation unit (which the blocks' trees
    # depend on): it must be where it was, or in the piece with the same unit.
    piece_has_block = any(_has_block(s) for s in parsed.body)
    if any(_has_block(s) for s in module.body[:first]):
        if piece_has_block and parsed.default_indent != module.default_indent:
            return None
    elif piece_has_block:
        if parsed.default_indent != module.default_indent:
            return None
    elif any(_has_block(s) for s in module.body[first : last + 1]):
        return None  # the first block was in the piece and is gone: the unit may change
    body = list(parsed.body)
    if parsed.header:
        # Comment and blank lines before the piece's first statement are its leading lines in
        # the whole file (a module of its own calls them its header).
        if first == 0 or not hasattr(body[0], "leading_lines"):
            return None
        body[0] = body[0].with_changes(leading_lines=[*parsed.header, *body[0].leading_lines])
    statements = [*module.body[:first], *body, *module.body[last + 1 :]]
    if to_end:
        rebuilt = module.with_changes(
            body=statements, footer=parsed.footer, has_trailing_newline=parsed.has_trailing_newline
        )
    else:
        rebuilt = module.with_changes(body=statements)
    starts = list(previous.starts[:first])
    offset = start
    for statement in body:
        starts.append(offset)
        offset += len(rebuilt.code_for_node(statement))
    if to_end:
        if not rebuilt.has_trailing_newline and not rebuilt.footer:
            offset -= len(rebuilt.default_newline)
        if offset + len(_code(rebuilt, rebuilt.footer)) != len(text):
            return None
        return ParsedText(text, rebuilt, tuple(starts), offset)
    if offset != previous.starts[last + 1] + delta:
        return None
    starts.extend(s + delta for s in previous.starts[last + 1 :])
    return ParsedText(text, rebuilt, tuple(starts), previous.ends + delta)


def _code(module: cst.Module, lines: Sequence[cst.EmptyLine]) -> str:
    return "".join(module.code_for_node(line) for line in lines)


def _has_block(statement: cst.CSTNode) -> bool:
    return type(getattr(statement, "body", None)) is cst.IndentedBlock


def _statement_at(starts: tuple[int, ...], offset: int) -> int:
    """The index of the statement whose text holds `offset`."""
    low, high = 0, len(starts) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if starts[middle] <= offset:
            low = middle
        else:
            high = middle - 1
    return low


def _common_prefix(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    low, high = 0, limit
    while low < high:  # halving on slices: C-speed comparisons, not a Python loop per char
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(a: str, b: str, limit: int) -> int:
    low, high = 0, max(limit, 0)
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle :] == b[len(b) - middle :]:
            low = middle
        else:
            high = middle - 1
    return low


def first_token_lines(parsed: ParsedText) -> list[int]:
    """The line of each top-level statement's first token (what `positions` starts from)."""
    line_starts = [0]
    line_starts.extend(match.end() for match in _LINE_BREAK.finditer(parsed.text))
    return [
        bisect.bisect_right(line_starts, start) + lines_before_first_token(statement)
        for statement, start in zip(parsed.module.body, parsed.starts)
    ]


class ParseCache:
    """The last parse of each recently linted buffer, so the next version of it is parsed by
    `reparse` (a language-server worker keeps one; a command-line run has no use for it)."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._entries: OrderedDict[str, ParsedText] = OrderedDict()

    def parse(self, text: str, path: str, full_parse: Callable[[str, str], Any]) -> Any:
        """The tree of `text` (or what `full_parse` returns when it cannot parse it)."""
        previous = self._entries.get(path)
        if previous is not None:
            again = reparse(previous, text)
            if again is not None:
                self._remember(path, again)
                return again.module
        module = full_parse(text, path)
        if type(module) is cst.Module:
            tracked = track(text, module)
            if tracked is not None:
                self._remember(path, tracked)
        return module

    def first_lines(self, path: str, text: str) -> list[int] | None:
        parsed = self._entries.get(path)
        return first_token_lines(parsed) if parsed is not None and parsed.text == text else None

    def _remember(self, path: str, parsed: ParsedText) -> None:
        self._entries[path] = parsed
        self._entries.move_to_end(path)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
