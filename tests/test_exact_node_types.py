"""The analysis tests LibCST node classes with `type(node) is cst.X` (and `type(node) in (...)`):
a negative `isinstance` on LibCST's abstract node classes goes through ABCMeta and costs several
times more, and the engine makes millions of such tests per corpus. That is only the same test
while no class so named has a subclass: this checks it for every class the sources name so."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst

SOURCES = Path(__file__).resolve().parent.parent / "devicelint"
EXACT_TEST = re.compile(r"type\([^()]*(?:\([^()]*\)[^()]*)*\) (?:is|is not|in|not in) \(?((?:cst\.\w+(?:, )?)+)")


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_every_class_tested_by_exact_type_has_no_subclass() -> None:
    named: set[str] = set()
    for path in SOURCES.rglob("*.py"):
        for match in EXACT_TEST.finditer(path.read_text(encoding="utf-8")):
            named.update(name.strip().removeprefix("cst.") for name in match.group(1).split(",") if name.strip())
    assert len(named) > 50  # the pattern still finds the tests it is about
    with_subclasses = {name: sorted(c.__name__ for c in _subclasses(getattr(cst, name))) for name in sorted(named)}
    assert {name: subs for name, subs in with_subclasses.items() if subs} == {}
