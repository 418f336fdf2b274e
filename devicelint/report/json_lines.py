"""`json-lines`: one JSON object per line, the same keys as `json` (streams, `jq -c`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from devicelint.finding import Finding
from devicelint.report.base import ReportContext
from devicelint.report.json_format import finding_to_dict


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    """One JSON object per line, the same keys as `json` (streams and `jq -c` friendly)."""
    return "".join(json.dumps(finding_to_dict(f)) + "\n" for f in findings)
