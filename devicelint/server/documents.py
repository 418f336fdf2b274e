"""What the server knows about each open document: the latest lint of it and nothing older.

A Python file is linted on its own; a notebook's code cells are linted together (a model moved
in one cell, a tensor made in the next), and each finding belongs to one cell's document.
Only the latest outcome per file or notebook is kept, and it is dropped when the document
closes, so memory does not grow with edits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lsprotocol import types

from devicelint.finding import Finding
from devicelint.server.positions import LineIndex


@dataclass(frozen=True)
class Snapshot:
    """One text document as it was linted."""

    uri: str
    version: int | None
    text: str


@dataclass(frozen=True)
class Problem:
    """One finding in one document, with its LSP diagnostic."""

    uri: str
    finding: Finding
    diagnostic: types.Diagnostic


@dataclass(frozen=True)
class LintOutcome:
    """One lint of a file or notebook: the texts it read and what it found in them."""

    # The file's version, or the notebook's (which changes with its cells and their order).
    target_version: int | None
    snapshots: tuple[Snapshot, ...]
    problems: tuple[Problem, ...]
    internal_errors: tuple[str, ...] = ()
    position_encoding: str = "utf-16"
    # Line indexes are built when first asked for (code actions need them; most lints never do).
    _indexes: dict[str, LineIndex] = field(default_factory=dict, compare=False, repr=False)

    def snapshot(self, uri: str) -> Snapshot | None:
        return next((s for s in self.snapshots if s.uri == uri), None)

    def index(self, uri: str) -> LineIndex:
        if uri not in self._indexes:
            snapshot = self.snapshot(uri)
            self._indexes[uri] = LineIndex(snapshot.text if snapshot else "", self.position_encoding)
        return self._indexes[uri]

    def diagnostics_by_uri(self) -> dict[str, list[types.Diagnostic]]:
        """Every linted document's diagnostics, empty lists included (to clear old ones)."""
        by_uri: dict[str, list[types.Diagnostic]] = {s.uri: [] for s in self.snapshots}
        for problem in self.problems:
            by_uri.setdefault(problem.uri, []).append(problem.diagnostic)
        return by_uri

    def problems_in(self, uri: str, area: types.Range) -> list[Problem]:
        """The problems of `uri` whose range touches `area`."""
        return [p for p in self.problems if p.uri == uri and touches(p.diagnostic.range, area)]


def touches(a: types.Range, b: types.Range) -> bool:
    def key(position: types.Position) -> tuple[int, int]:
        return position.line, position.character

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


class OpenDocuments:
    """The latest outcome per lint target (a file's URI, or a notebook's), and which target
    each cell document belongs to."""

    def __init__(self) -> None:
        self.outcomes: dict[str, LintOutcome] = {}
        self.target_of_cell: dict[str, str] = {}

    def store(self, target: str, outcome: LintOutcome) -> LintOutcome | None:
        """Keep `outcome` as the target's latest; return the one it replaces."""
        previous = self.outcomes.get(target)
        self.outcomes[target] = outcome
        return previous

    def target_of(self, uri: str) -> str:
        return self.target_of_cell.get(uri, uri)

    def outcome_for(self, uri: str) -> LintOutcome | None:
        return self.outcomes.get(self.target_of(uri))

    def drop(self, target: str) -> LintOutcome | None:
        for cell in [c for c, t in self.target_of_cell.items() if t == target]:
            del self.target_of_cell[cell]
        return self.outcomes.pop(target, None)
