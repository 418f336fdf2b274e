"""Device bugs re-created from public threads (`fixtures/recreated/`): each bad file is found by
its rule at one of the lines its header names, and its one-fix twin is clean.

The bugs were written by other people, so the pairs measure the engine rather than fit it: bad
files the current rules miss are listed in `known_misses.txt`, and good twins they still report in
`known_false_alarms.txt`; both run as strict xfail, so a stale entry fails and the lists shrink as
the engine improves.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

RECREATED = FIXTURES / "recreated"
DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))
BAD_FILES = sorted(RECREATED.glob("*_bad.py"))


def _stems_listed(name: str) -> set[str]:
    """The stems in a list file: one per line, `#` starts a comment."""
    path = RECREATED / name
    if not path.is_file():
        return set()
    stems = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {stem for stem in stems if stem}


# Bad files the current rules do not find, and good twins they wrongly report.
KNOWN_MISSES = _stems_listed("known_misses.txt")
KNOWN_FALSE_ALARMS = _stems_listed("known_false_alarms.txt")


def _expectation(bad: Path) -> tuple[str, set[int]]:
    """`(code, lines)` from line 2, `# expect: CODE; lines=a,b`, read as `../shared/realbugs/score.py` does."""
    header = bad.read_text(encoding="utf-8").splitlines()[1]
    assert header.startswith("# expect:"), f"{bad.name}: line 2 must be `# expect: CODE; lines=N[,N...]`"
    body = header.split(":", 1)[1].strip()
    lines = re.search(r"lines=([0-9,\s]+)", body)
    assert lines, f"{bad.name}: the expect line names no `lines=`"
    return body.split(";")[0].strip(), {int(n) for n in lines.group(1).replace(" ", "").split(",") if n}


def _findings(path: Path) -> list:
    return lint_source(path.read_bytes(), str(path), DEFAULT).findings


def _stem(bad: Path) -> str:
    return bad.name[: -len("_bad.py")]


def _case(bad: Path, listed: set[str], reason: str):
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if _stem(bad) in listed else []
    return pytest.param(bad, id=_stem(bad), marks=marks)


def test_there_are_recreated_pairs() -> None:
    assert BAD_FILES
    stems = {_stem(bad) for bad in BAD_FILES}
    assert KNOWN_MISSES <= stems, f"known misses without a pair: {sorted(KNOWN_MISSES - stems)}"
    assert KNOWN_FALSE_ALARMS <= stems, f"known false alarms without a pair: {sorted(KNOWN_FALSE_ALARMS - stems)}"


@pytest.mark.parametrize("bad", [_case(bad, KNOWN_FALSE_ALARMS, "known false alarm") for bad in BAD_FILES])
def test_good_twin_is_clean(bad: Path) -> None:
    good = bad.with_name(bad.name.replace("_bad.py", "_good.py"))
    assert good.is_file(), f"{bad.name} has no good twin"
    bad_header, good_header = (p.read_text(encoding="utf-8").splitlines()[:2] for p in (bad, good))
    assert bad_header[0].startswith("# source: https://") and good_header[0] == bad_header[0]
    assert good_header[1].strip() == "# expect: clean"
    detail = [f"{f.line}:{f.column} {f.code} {f.message}" for f in _findings(good)]
    assert not detail, "\n".join(detail)


@pytest.mark.parametrize("bad", [_case(bad, KNOWN_MISSES, "known miss") for bad in BAD_FILES])
def test_bad_file_is_found(bad: Path) -> None:
    code, lines = _expectation(bad)
    hits = [
        f
        for f in _findings(bad)
        if any(f.line <= n <= max(f.line, f.end_line) for n in lines) and (code.startswith("NEW:") or f.code == code)
    ]
    assert hits, f"{bad.name}: no {code} finding on lines {sorted(lines)}"
