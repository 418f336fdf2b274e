"""Turn fix proposals into text edits and apply them to a source string."""

from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst

from devicelint.cst_parse import parse_module
from devicelint.finding import Edit, Finding

_NEWLINE = re.compile(r"\r\n|\r|\n")


def line_offsets(source: str) -> list[int]:
    # Python's line breaks only: str.splitlines also breaks at \f, \v, \x1c.. and \u2028,
    # which would shift every edit after such a character by a line.
    return [0] + [match.end() for match in _NEWLINE.finditer(source)]


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits; an edit overlapping an earlier one is dropped."""
    offsets = line_offsets(source)

    def offset(line: int, column: int) -> int:
        return offsets[min(line - 1, len(offsets) - 1)] + column - 1

    spans = sorted(
        ((offset(e.line, e.column), offset(e.end_line, e.end_column), e.content) for e in edits),
        key=lambda span: (span[0], span[1]),
    )
    pieces: list[str] = []
    cursor = 0
    for start, end, content in spans:
        if start < cursor:
            continue
        pieces.append(source[cursor:start])
        pieces.append(content)
        cursor = end
    pieces.append(source[cursor:])
    return "".join(pieces)


def apply_fixes(source: str, findings: Iterable[Finding], unsafe: bool) -> tuple[str | None, tuple[str, ...]]:
    """The source with every wanted fix applied (None if nothing changed or it would not parse),
    and the codes of the findings whose fix went in.

    Fixes go in one pass; a fix whose edits overlap an earlier fix is left for a later round.
    """
    chosen: list[Edit] = []
    applied: list[str] = []
    taken: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for finding in sorted(findings, key=lambda f: f.sort_key):
        fix = finding.fix
        if fix is None or (not fix.safe and not unsafe):
            continue
        spans = [((e.line, e.column), (e.end_line, e.end_column)) for e in fix.edits]
        if any(s < t_end and t_start < e for s, e in spans for t_start, t_end in taken):
            continue
        taken.extend(spans)
        chosen.extend(fix.edits)
        applied.append(finding.code)
    if not chosen:
        return None, ()
    fixed = apply_edits(source, chosen)
    if fixed == source:
        return None, ()
    try:
        parse_module(fixed)
    except cst.ParserSyntaxError:
        return None, ()
    return fixed, tuple(applied)
