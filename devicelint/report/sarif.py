"""SARIF 2.1.0, accepted by GitHub code scanning: rules in tool.driver.rules, results with regions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from devicelint import __version__
from devicelint.finding import Finding
from devicelint.registry import PROJECT_URL, Rule, all_rules
from devicelint.report.base import ReportContext, path_uri

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rule_descriptor(rule: type[Rule]) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "helpUri": rule.url(),
        "defaultConfiguration": {
            "level": "warning" if rule.severity == "warning" else "error",
            "enabled": rule.default_enabled,
        },
        "properties": {"tags": ["pytorch", "device"]},
    }


def _result(finding: Finding, rule_index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": "warning" if finding.severity == "warning" else "error",
        "message": {"text": finding.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": path_uri(finding.path)},
                    "region": {
                        "startLine": finding.line,
                        "startColumn": finding.column,
                        "endLine": finding.end_line,
                        "endColumn": finding.end_column,
                    },
                }
            }
        ],
    }
    if finding.code in rule_index:
        result["ruleIndex"] = rule_index[finding.code]
    properties: dict[str, Any] = {}
    if finding.module_path:
        properties["modulePath"] = finding.module_path
    if finding.cell is not None:
        properties["cell"] = finding.cell  # notebooks: the region's lines count within this cell
    if properties:
        result["properties"] = properties
    if finding.fix is not None:
        result["fixes"] = [
            {
                "description": {"text": finding.fix.description},
                "artifactChanges": [
                    {
                        "artifactLocation": {"uri": path_uri(finding.path)},
                        "replacements": [
                            {
                                "deletedRegion": {
                                    "startLine": e.line,
                                    "startColumn": e.column,
                                    "endLine": e.end_line,
                                    "endColumn": e.end_column,
                                },
                                "insertedContent": {"text": e.content},
                            }
                            for e in finding.fix.edits
                        ],
                    }
                ],
            }
        ]
    return result


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    rules = all_rules()
    rule_index = {rule.code: i for i, rule in enumerate(rules)}
    document = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "devicelint",
                        "version": __version__,
                        "informationUri": PROJECT_URL,
                        "rules": [_rule_descriptor(rule) for rule in rules],
                    }
                },
                "results": [_result(f, rule_index) for f in findings],
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"
