"""Lint each variant with the default rules (plus the case's own rule) and judge it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from devicelint.engine import EngineOptions, lint_source
from devicelint.finding import Finding
from devicelint.registry import all_rules, find_rule

from .variants import Variant


@cache
def options_for(*codes: str) -> EngineOptions:
    """The default rules plus the case's own rule and every rule its markers expect (an
    off-by-default rule such as DL207 marked in another rule's fixture is run, as the fixture
    test runs it)."""
    rules = [r for r in all_rules() if r.default_enabled and not r.code.startswith("DL6")]
    for code in codes:
        extra = find_rule(code) if code else None
        if extra is not None and extra not in rules:
            rules.append(extra)
    return EngineOptions(rules=tuple(rules))


@dataclass
class Row:
    """One scored line of the report: a bad case's expected finding, or a twin staying clean."""

    id: str
    variant: Variant
    passed: bool
    reason: str
    rule: str


def _hit(findings: list[Finding], lines: set[int], code: str) -> bool:
    return any(
        (code.startswith("NEW:") or f.code == code) and any(f.line <= x <= max(f.end_line, f.line) for x in lines)
        for f in findings
    )


def _describe(findings: list[Finding], limit: int = 3) -> str:
    if not findings:
        return "no findings"
    return ", ".join(f"{f.code}@{f.line}" for f in findings[:limit]) + (" ..." if len(findings) > limit else "")


def score(variant: Variant) -> list[Row]:
    case = variant.case
    assert variant.lines is not None
    expected = sorted({code for code in case.expected.values() if not code.startswith("NEW:")})
    result = lint_source(variant.text, case.name, options_for(case.rule, *expected))
    findings = [f for f in result.findings if f.code != "DL001"]
    if not case.bad:
        reason = "" if not findings else f"false alarm: {_describe(findings)}"
        return [Row(variant.id, variant, not findings, reason, case.rule or "NEW")]
    rows = []
    tags = list(case.expected) if variant.target is None else [variant.target]
    if case.grouped:
        tags = list(case.expected)
    for tag in tags:
        code = case.expected[tag]
        lines = set().union(*(variant.lines.get(t, set()) for t in ([tag] if not case.grouped else case.expected)))
        row_id = variant.id if case.grouped or variant.target is not None else f"{variant.id}::L{case.origin[tag]}"
        if not lines:
            rows.append(Row(row_id, variant, False, "generator error: the expected line was lost", code))
            continue
        passed = _hit(findings, lines, code)
        near = [f for f in findings if code.startswith("NEW:") or f.code == code]
        reason = (
            ""
            if passed
            else f"missed {code} at {sorted(lines)}; got {_describe(near) if near else _describe(findings)}"
        )
        rows.append(Row(row_id, variant, passed, reason, "NEW" if code.startswith("NEW:") else code))
        if case.grouped:
            break
    return rows
