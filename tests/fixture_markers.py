"""Read the `# expect: CODE [col=N]` markers that fixtures carry on offending lines."""

from __future__ import annotations

import re
from pathlib import Path

_MARKER = re.compile(r"#\s*expect:\s*(?P<body>[^#]*)")
_ITEM = re.compile(r"(?P<code>DL\d{3})(?:\s+col=(?P<col>\d+))?")


def expected_findings(path: Path) -> set[tuple[int, str, int | None]]:
    """(line, code, column or None) for each marker in a fixture file."""
    expected: set[tuple[int, str, int | None]] = set()
    text = path.read_bytes().decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        match = _MARKER.search(line)
        if not match:
            continue
        for item in _ITEM.finditer(match.group("body")):
            column = int(item.group("col")) if item.group("col") else None
            expected.add((number, item.group("code"), column))
    return expected


def matches(expected: set[tuple[int, str, int | None]], findings) -> tuple[set, set]:  # type: ignore[no-untyped-def]
    """(missing markers, unexpected findings), comparing columns only where a marker gives one."""
    found = {(f.line, f.code, f.column) for f in findings}
    missing = {
        e for e in expected if not any(f[0] == e[0] and f[1] == e[1] and (e[2] is None or f[2] == e[2]) for f in found)
    }
    unexpected = {
        f for f in found if not any(e[0] == f[0] and e[1] == f[1] and (e[2] is None or e[2] == f[2]) for e in expected)
    }
    return missing, unexpected
