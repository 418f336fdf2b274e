"""Formats that other CI tools read: JSON lines, pylint lines, JUnit XML, GitLab code quality.

Each is one function `render(findings, context) -> str`, registered in `report.render`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence
from xml.etree import ElementTree

from devicelint.finding import Finding
from devicelint.report import ReportContext, printable_path
from devicelint.report.json_format import finding_to_dict


def _where(finding: Finding) -> str:
    cell = f"cell {finding.cell}:" if finding.cell is not None else ""
    return f"{printable_path(finding.path)}:{cell}{finding.line}:{finding.column}"


def json_lines(findings: Sequence[Finding], context: ReportContext) -> str:
    """One JSON object per line, the same keys as `json` (streams and `jq -c` friendly)."""
    return "".join(json.dumps(finding_to_dict(f)) + "\n" for f in findings)


def pylint(findings: Sequence[Finding], context: ReportContext) -> str:
    """`path:line: [CODE] message`, the line format pylint parsers (and editors) read."""
    return "".join(f"{printable_path(f.path)}:{f.line}: [{f.code}] {f.message}\n" for f in findings)


def junit(findings: Sequence[Finding], context: ReportContext) -> str:
    """JUnit XML: one test suite per file with findings, one failed test case per finding."""
    root = ElementTree.Element("testsuites", name="devicelint", tests=str(len(findings)), failures=str(len(findings)))
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(printable_path(finding.path), []).append(finding)
    for path, found in by_file.items():
        suite = ElementTree.SubElement(root, "testsuite", name=path, tests=str(len(found)), failures=str(len(found)))
        for finding in found:
            case = ElementTree.SubElement(suite, "testcase", name=f"{finding.code} {_where(finding)}", classname=path,
                                          file=path, line=str(finding.line))
            failure = ElementTree.SubElement(case, "failure", message=finding.message, type=finding.code)
            failure.text = f"{_where(finding)}: {finding.code} {finding.message}"
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def gitlab(findings: Sequence[Finding], context: ReportContext) -> str:
    """GitLab code quality JSON: description, check_name, fingerprint, severity, location."""
    issues = []
    for finding in findings:
        path = printable_path(finding.path)
        # Stable across runs and unrelated edits elsewhere in the file (as GitLab compares reports).
        fingerprint = hashlib.sha256(f"{path}\0{finding.code}\0{finding.message}".encode()).hexdigest()
        issues.append({
            "description": f"{finding.code} {finding.message}",
            "check_name": finding.code,
            "fingerprint": fingerprint,
            "severity": "minor" if finding.severity == "warning" else "major",
            "location": {"path": path, "lines": {"begin": finding.line, "end": finding.end_line}},
        })
    return json.dumps(issues, indent=2) + "\n"
