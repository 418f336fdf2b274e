"""`gitlab`: GitLab code quality JSON (description, check_name, fingerprint, severity, location)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from devicelint.finding import Finding
from devicelint.report.base import ReportContext, printable_path


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    """GitLab code quality JSON: description, check_name, fingerprint, severity, location."""
    issues = []
    for finding in findings:
        path = printable_path(finding.path)
        # Stable across runs and unrelated edits elsewhere in the file (as GitLab compares reports).
        fingerprint = hashlib.sha256(f"{path}\0{finding.code}\0{finding.message}".encode()).hexdigest()
        issues.append(
            {
                "description": f"{finding.code} {finding.message}",
                "check_name": finding.code,
                "fingerprint": fingerprint,
                "severity": "minor" if finding.severity == "warning" else "major",
                "location": {"path": path, "lines": {"begin": finding.line, "end": finding.end_line}},
            }
        )
    return json.dumps(issues, indent=2) + "\n"
