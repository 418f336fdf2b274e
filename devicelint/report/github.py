"""GitHub Actions workflow commands: one `::error` or `::warning` annotation per finding."""

from __future__ import annotations

from typing import Sequence

from devicelint.finding import Finding
from devicelint.report import ReportContext, printable_path


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    lines = []
    for f in findings:
        level = "warning" if f.severity == "warning" else "error"
        lines.append(
            f"::{level} file={_escape_property(printable_path(f.path))},line={f.line},col={f.column},"
            f"endLine={f.end_line},endColumn={f.end_column},title={_escape_property(f.code)}::"
            f"{_escape_data(f.code + ' ' + f.message)}"
        )
    return "".join(line + "\n" for line in lines)
