"""Rewrite `fixtures/recreated/known_misses.txt` and `known_false_alarms.txt` from what the
default rules find now (not a test): `python tests/recreated_lists.py [NOTES...]`.

A stem keeps the `# why` comment it had; a new one takes its comment from the notes files named
(lines `stem  # why`), else a placeholder to fill in. Entries are grouped by set prefix.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_recreated_fixtures import BAD_FILES, RECREATED, _expectation, _findings, _stem  # noqa: E402

HEADERS = {
    "known_misses.txt": (
        "# Re-created bugs the default rules do not report at their `lines=` (with their rule, for DLxxx).\n"
        "# tests/test_recreated_fixtures.py runs these as strict xfail: when the engine learns the shape,\n"
        "# the test fails until the stem is removed here. One stem per line; `#` starts a comment.\n"
    ),
    "known_false_alarms.txt": (
        "# Good twins (the fixed code) that the default rules still report. tests/test_recreated_fixtures.py\n"
        "# runs these as strict xfail. One stem per line; `#` starts a comment.\n"
    ),
}
ENTRY = re.compile(r"^([a-z]{2}\d+_\w+)\s+#\s*(.*)$")
SET_HEADER = re.compile(r"^# Set ([a-z]{2})\b")


def _comments(paths: list[Path]) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            match = ENTRY.match(line.strip())
            if match:
                found.setdefault(match.group(1), match.group(2))
    return found


def _set_headers(path: Path) -> dict[str, str]:
    """Each set's header line as written (`# Set sa (measured before any engine change...)`)."""
    if not path.is_file():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    return {m.group(1): line for line in lines if (m := SET_HEADER.match(line))}


def _found(bad: Path) -> bool:
    code, lines = _expectation(bad)
    return any(
        (code.startswith("NEW") or f.code == code) and f.line <= line <= max(f.end_line, f.line)
        for f in _findings(bad)
        for line in lines
    )


def main(notes: list[str]) -> None:
    lists = {name: RECREATED / name for name in HEADERS}
    extra = _comments([Path(n) for n in notes])
    failing: dict[str, list[str]] = {"known_misses.txt": [], "known_false_alarms.txt": []}
    for bad in BAD_FILES:
        stem = _stem(bad)
        if not _found(bad):
            failing["known_misses.txt"].append(stem)
        if _findings(bad.with_name(bad.name.replace("_bad.py", "_good.py"))):
            failing["known_false_alarms.txt"].append(stem)
    for name, stems in failing.items():
        # a stem's comment and a set's header come from the same list (a twin's why is not a miss's)
        why = _comments([lists[name]]) if lists[name].is_file() else {}
        headers = _set_headers(lists[name])
        out = [HEADERS[name]]
        for prefix in sorted({s[:2] for s in stems}):
            out.append(f"\n{headers.get(prefix, f'# Set {prefix}')}\n")
            for stem in (s for s in stems if s.startswith(prefix)):
                comment = why.get(stem) or extra.get(stem) or "why: to be read"
                out.append(f"{stem}  # {comment}\n")
        lists[name].write_text("".join(out), encoding="utf-8")
        print(f"{name}: {len(stems)}")


if __name__ == "__main__":
    main(sys.argv[1:])
