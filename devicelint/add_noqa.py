"""`--add-noqa`: mark every current finding with `# noqa: CODE`, so a team can adopt devicelint
on a large codebase today and work off the backlog later."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable

from devicelint.finding import FILE_CODES, Finding
from devicelint.suppression import _LINE_NOQA, _codes

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?")


def add_noqa(source: str, findings: Iterable[Finding]) -> tuple[str, int]:
    """The source with `# noqa: CODE` on each finding's line (merged into an existing
    `# noqa: ...`), and how many codes were added. Lines that end inside a string or with a
    backslash cannot take a comment and are left alone, as are blanket `# noqa` lines."""
    wanted: dict[int, set[str]] = {}
    for finding in findings:
        if finding.code not in FILE_CODES and finding.cell is None:
            wanted.setdefault(finding.line, set()).add(finding.code)
    if not wanted:
        return source, 0
    blocked = _lines_without_room(source)
    if blocked is None:
        return source, 0
    lines = [m.group() for m in _LINE.finditer(source) if m.group()]
    added = 0
    for number, codes in sorted(wanted.items()):
        if number in blocked or not 1 <= number <= len(lines):
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        match = _LINE_NOQA.search(body)
        if match is None:
            lines[number - 1] = f"{body}  # noqa: {', '.join(sorted(codes))}{ending}"
            added += len(codes)
            continue
        existing = _codes(match.group("codes"))
        if existing is None or codes <= existing:
            continue  # a blanket noqa already covers it
        merged = ", ".join(sorted(existing | codes))
        lines[number - 1] = f"{body[: match.start()]}# noqa: {merged}{body[match.end() :]}{ending}"
        added += len(codes - existing)
    return "".join(lines), added


def _lines_without_room(source: str) -> set[int] | None:
    """Lines whose end is inside a string or continued with a backslash; None if the source
    does not tokenize."""
    blocked: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.start[0] != token.end[0] and token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                blocked.update(range(token.start[0], token.end[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    for number, line in enumerate(source.splitlines(), start=1):
        if line.rstrip().endswith("\\"):
            blocked.add(number)
    return blocked
