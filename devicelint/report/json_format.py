"""A JSON array, one object per finding, with a fixed set of keys."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from devicelint.finding import Finding
from devicelint.report.base import ReportContext, printable_path


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    data = {
        "path": printable_path(finding.path),
        "line": finding.line,
        "column": finding.column,
        "end_line": finding.end_line,
        "end_column": finding.end_column,
        "code": finding.code,
        "name": finding.name,
        "message": finding.message,
        "severity": finding.severity,
        "url": finding.url,
        "fix": None
        if finding.fix is None
        else {
            "description": finding.fix.description,
            "safe": finding.fix.safe,
            "edits": [asdict(edit) for edit in finding.fix.edits],
        },
    }
    if finding.cell is not None:
        data["cell"] = finding.cell  # notebooks only: `line` counts within this code cell
    return data


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    return json.dumps([finding_to_dict(f) for f in findings], indent=2) + "\n"
