"""`pylint`: `path:line: [CODE] message`, the line format pylint parsers and editors read."""

from __future__ import annotations

from collections.abc import Sequence

from devicelint.finding import Finding
from devicelint.report.base import ReportContext, printable_path


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    """`path:line: [CODE] message`, the line format pylint parsers (and editors) read."""
    return "".join(f"{printable_path(f.path)}:{f.line}: [{f.code}] {f.message}\n" for f in findings)
