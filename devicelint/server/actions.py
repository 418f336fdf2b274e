"""Code actions and hovers built from a lint outcome.

Every edit names the document version it was computed on (a TextDocumentEdit), so a client
refuses it once the buffer has moved on instead of applying it in the wrong place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lsprotocol import types

from devicelint.add_noqa import add_noqa
from devicelint.finding import FILE_CODES
from devicelint.server.conversions import SOURCE, replacement, text_edits, versioned_edit
from devicelint.server.documents import LintOutcome, Problem, touches

FIX_ALL_KIND = "source.fixAll.devicelint"
FIX_ALL_TITLE = "Fix all safe devicelint problems"
QUICK_FIX = types.CodeActionKind.QuickFix


def wanted(only: list[str] | None, kind: str) -> bool:
    """Whether the client's `only` filter admits `kind` (`source` admits `source.fixAll.x`)."""
    return only is None or any(kind == asked or kind.startswith(asked + ".") for asked in only)


def fix_title(problem: Problem) -> str:
    fix = problem.finding.fix
    assert fix is not None
    return f"devicelint ({problem.finding.code}): {fix.description}" + ("" if fix.safe else " (unsafe)")


def noqa_title(code: str) -> str:
    return f"Disable {code} for this line"


def quick_fixes(
    outcome: LintOutcome, uri: str, area: types.Range, shown: Sequence[types.Diagnostic] = ()
) -> list[types.CodeAction]:
    """For each problem touching `area` or among the diagnostics the client says it `shown`
    there: its fix (if it has one), then a `# noqa` action."""
    snapshot = outcome.snapshot(uri)
    if snapshot is None:
        return []
    index = outcome.index(uri)
    fixes: list[types.CodeAction] = []
    silencers: list[types.CodeAction] = []
    silenced: set[tuple[int, str]] = set()
    asked = {(str(d.code), _key(d.range)) for d in shown if d.source == SOURCE}
    for problem in outcome.problems:
        if problem.uri != uri or not (
            touches(problem.diagnostic.range, area)
            or (str(problem.diagnostic.code), _key(problem.diagnostic.range)) in asked
        ):
            continue
        finding = problem.finding
        # Notebook findings carry no fixes: the engine does not rewrite notebooks.
        if finding.fix is not None and finding.cell is None:
            fixes.append(
                types.CodeAction(
                    title=fix_title(problem),
                    kind=QUICK_FIX,
                    diagnostics=[problem.diagnostic],
                    is_preferred=finding.fix.safe,
                    edit=versioned_edit(uri, snapshot.version, text_edits(finding.fix.edits, index)),
                )
            )
        if finding.code in FILE_CODES or (finding.line, finding.code) in silenced:
            continue
        # A cell's finding counts lines within the cell, which is the text being edited here.
        marked, added = add_noqa(snapshot.text, [replace(finding, cell=None)])
        edit = replacement(index, marked) if added else None
        if edit is not None:
            silenced.add((finding.line, finding.code))
            silencers.append(
                types.CodeAction(
                    title=noqa_title(finding.code),
                    kind=QUICK_FIX,
                    diagnostics=[problem.diagnostic],
                    edit=versioned_edit(uri, snapshot.version, [edit]),
                )
            )
    return fixes + silencers


def _key(area: types.Range) -> tuple[int, int, int, int]:
    return area.start.line, area.start.character, area.end.line, area.end.character


def has_safe_fix(outcome: LintOutcome, uri: str) -> bool:
    return any(p.uri == uri and p.finding.fix is not None and p.finding.fix.safe for p in outcome.problems)


def codes_at(outcome: LintOutcome, uri: str, position: types.Position) -> tuple[list[str], types.Range | None]:
    """The codes of the problems whose range holds `position`, and the first one's range."""
    point = types.Range(position, position)
    problems = outcome.problems_in(uri, point)
    codes = list(dict.fromkeys(p.finding.code for p in problems))
    return codes, problems[0].diagnostic.range if problems else None
