"""One test walks every fixture folder: adding a case is adding a file."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES
from fixture_markers import expected_findings, matches

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules, find_rule

ALL = EngineOptions(rules=tuple(all_rules()))
FIXTURE_FILES = sorted(p for p in FIXTURES.glob("DL*/*.py") if not p.name.startswith("fix_"))
FIX_CASES = sorted(FIXTURES.glob("DL*/fix_*.in.py"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_every_rule_has_fixtures() -> None:
    for rule in all_rules():
        folder = FIXTURES / rule.code
        if rule.code.startswith("DL6") or rule.code == "DL002":
            continue  # runtime-only codes are exercised by the runtime tests, DL002 by test_robustness
        assert list(folder.glob("bad*.py")), f"{rule.code} has no bad fixture"
        if rule.code != "DL000":
            assert list(folder.glob("good*.py")), f"{rule.code} has no good fixture"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=_id)
def test_fixture(path: Path) -> None:
    result = lint_source(path.read_bytes(), str(path), ALL)
    expected = expected_findings(path)
    if path.name.startswith("good"):
        assert expected == set(), "good fixtures carry no markers"
    else:
        assert expected, "a bad fixture needs at least one `# expect:` marker"
        assert any(code == path.parent.name for _, code, _ in expected), "bad fixture never expects its own rule"
    missing, unexpected = matches(expected, result.findings)
    detail = "\n".join(f"  {f.line}:{f.column} {f.code} {f.message}" for f in result.findings)
    assert not missing and not unexpected, (
        f"missing markers: {sorted(missing)}; unexpected findings: {sorted(unexpected)}\n{detail}"
    )


@pytest.mark.parametrize("path", FIX_CASES, ids=_id)
def test_fix_case(path: Path) -> None:
    rule = find_rule(path.parent.name)
    assert rule is not None
    # DL001 judges the noqa codes of the rules that ran, so its cases run every rule.
    options = EngineOptions(rules=tuple(all_rules()) if rule.code == "DL001" else (rule,), fix_mode="unsafe")
    expected = path.with_name(path.name.replace(".in.py", ".out.py")).read_text()
    fixed = lint_source(path.read_text(), str(path), options).fixed_source
    assert fixed == expected
    cst.parse_module(fixed)
    second = lint_source(fixed, str(path), options)
    assert second.fixed_source is None, "a second --fix must change nothing"
    # Findings the rule cannot fix may stay; every fixable one must be gone.
    assert [f"{f.line}: {f.message}" for f in second.findings if f.fix is not None] == [], "a fixed finding came back"


def test_declared_fix_safety_matches_the_fixes_offered() -> None:
    # `devicelint rules` shows each rule's fix as declared: the fixtures must agree with it.
    offered: dict[str, set[bool]] = {}
    for path in sorted(FIXTURES.glob("DL*/*.py")):
        for finding in lint_source(path.read_bytes(), str(path), ALL).findings:
            if finding.fix is not None:
                offered.setdefault(finding.code, set()).add(finding.fix.safe)
    expected = {"safe": {True}, "unsafe": {False}, "sometimes": {True, False}}
    for rule in all_rules():
        if rule.code.startswith("DL6") or rule.code in ("DL000", "DL002"):
            continue
        if rule.fix_availability == "none":
            assert rule.code not in offered, f"{rule.code} declares no fix but offers one"
        elif rule.fix_availability == "sometimes" and offered.get(rule.code) == {True}:
            pass  # safe in every fixture shape; its page says when it is not (DL305: torch versions)
        else:
            assert offered.get(rule.code) == expected[rule.fix_availability], (rule.code, offered.get(rule.code))
