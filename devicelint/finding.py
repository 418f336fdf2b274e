"""Plain data passed from the engine to the runner and the reporters."""

from __future__ import annotations

from dataclasses import dataclass, field

from devicelint.registry import RULES_URL


@dataclass(frozen=True)
class Edit:
    """Replace the text between two 1-based positions (end exclusive) with `content`."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str


@dataclass(frozen=True)
class Fix:
    description: str
    safe: bool
    edits: tuple[Edit, ...]


@dataclass(frozen=True)
class Finding:
    """One problem at one place. Lines and columns are 1-based; the end is exclusive."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    severity: str = "error"
    fix: Fix | None = None
    # Notebook cell number (1-based) when `line` counts within a cell.
    cell: int | None = None
    # Runtime findings name the module that ran the op (`encoder.layers.3.attn`).
    module_path: str | None = None
    url: str = field(default="", compare=False)

    @property
    def sort_key(self) -> tuple[str, int, int, int, str, str]:
        return (self.path, self.cell or 0, self.line, self.column, self.code, self.message)


@dataclass(frozen=True)
class FileResult:
    """Everything the engine learnt about one file."""

    path: str
    findings: tuple[Finding, ...]
    # Source text after all selected fixes (None when no fix was asked for or none applied).
    fixed_source: str | None = None
    # The code of each finding whose fix is in `fixed_source`, once per fix.
    fixes_applied: tuple[str, ...] = ()
    # devicelint's own failures on this file (a rule that raised): never the user's problem.
    internal_errors: tuple[str, ...] = ()
    # Linting stopped at the per-file time limit (the finding says so); never cached.
    timed_out: bool = False
    # The pool worker that produced this result exits after sending it (time limit, memory mark).
    ends_worker: bool = False
    # False when the prefilter found no word any selected rule looks for: only the syntax was
    # checked (`--statistics` counts these files).
    analysed: bool = True


SYNTAX_ERROR = "DL000"
SYNTAX_ERROR_NAME = "syntax-error"
# A valid file devicelint gave up on (too large, over the time limit, too deep for an analysis):
# devicelint's limit, never the user's syntax error.
NOT_ANALYSED = "DL002"
NOT_ANALYSED_NAME = "file-not-analysed"
# The codes the engine and runner report about a file as a whole, not a rule about its code.
FILE_CODES = frozenset({SYNTAX_ERROR, NOT_ANALYSED})


def error_finding(path: str, line: int, column: int, message: str) -> Finding:
    """A DL000 finding: the file could not be read, decoded or parsed."""
    return Finding(
        path=path,
        line=max(line, 1),
        column=max(column, 1),
        end_line=max(line, 1),
        end_column=max(column, 1) + 1,
        code=SYNTAX_ERROR,
        name=SYNTAX_ERROR_NAME,
        message=message,
        url=f"{RULES_URL}{SYNTAX_ERROR}.md",
    )


def not_analysed_finding(path: str, reason: str) -> Finding:
    """A DL002 finding at the file's start: a valid file that was not analysed, and why."""
    return Finding(
        path=path,
        line=1,
        column=1,
        end_line=1,
        end_column=2,
        code=NOT_ANALYSED,
        name=NOT_ANALYSED_NAME,
        message=f"not analysed: {reason}",
        url=f"{RULES_URL}{NOT_ANALYSED}.md",
    )
