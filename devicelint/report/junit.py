"""`junit`: JUnit XML, one test suite per file with findings, one failed test case per finding."""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree

from devicelint.finding import Finding
from devicelint.report.base import ReportContext, printable_path
from devicelint.report.text import location


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    """JUnit XML: one test suite per file with findings, one failed test case per finding."""
    root = ElementTree.Element("testsuites", name="devicelint", tests=str(len(findings)), failures=str(len(findings)))
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(printable_path(finding.path), []).append(finding)
    for path, found in by_file.items():
        suite = ElementTree.SubElement(root, "testsuite", name=path, tests=str(len(found)), failures=str(len(found)))
        for finding in found:
            case = ElementTree.SubElement(
                suite,
                "testcase",
                name=f"{finding.code} {location(finding)}",
                classname=path,
                file=path,
                line=str(finding.line),
            )
            failure = ElementTree.SubElement(case, "failure", message=finding.message, type=finding.code)
            failure.text = f"{location(finding)}: {finding.code} {finding.message}"
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"
