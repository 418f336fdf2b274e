"""GitHub Actions workflow commands: one `::error` or `::warning` annotation per finding."""

from __future__ import annotations

from collections.abc import Sequence

from devicelint.finding import Finding
from devicelint.report.base import ReportContext, printable_path


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    lines = []
    for f in findings:
        level = "warning" if f.severity == "warning" else "error"
        if f.cell is not None:
            # A notebook's lines count within a cell, not in the JSON file GitHub shows: point at
            # the notebook itself (as Ruff does) and name the cell in the message.
            where = "line=1,col=1"
            message = f"{f.code} cell {f.cell}, line {f.line}:{f.column}: {f.message}"
        else:
            where = f"line={f.line},col={f.column},endLine={f.end_line},endColumn={f.end_column}"
            message = f"{f.code} {f.message}"
        lines.append(
            f"::{level} file={_escape_property(printable_path(f.path))},{where},"
            f"title={_escape_property(f.code)}::{_escape_data(message)}"
        )
    return "".join(line + "\n" for line in lines)
