"""What the runtime checker accumulates, and how it turns into `Finding` objects."""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field
from typing import Any

from devicelint.finding import Finding
from devicelint.runtime._sites import Site, display_path, library_line, package_of

# Runtime codes (documented by the rule classes in devicelint/checks/runtime_*.py).
MIXED_DEVICE_OP = "DL601"
HOST_SYNC = "DL602"
PER_STEP_COPY = "DL603"
OFF_DEVICE_PARAMETER = "DL604"
UNREGISTERED_TENSOR = "DL605"
PLAIN_CONTAINER = "DL606"

NAMES = {
    MIXED_DEVICE_OP: "mixed-device-op",
    HOST_SYNC: "host-sync-in-checked-region",
    PER_STEP_COPY: "per-step-host-to-device-copy",
    OFF_DEVICE_PARAMETER: "parameter-or-buffer-off-device",
    UNREGISTERED_TENSOR: "unregistered-tensor-attribute",
    PLAIN_CONTAINER: "module-in-plain-container",
}
RULES_URL = "https://github.com/devicelint/devicelint/blob/main/rules/"


@dataclass
class Record:
    """One finding in the making: a code at one source line, counted over every hit."""

    code: str
    site: Site | None
    module_path: str | None
    severity: str
    # The message, with `{count}` (times hit) and `{ops}` (aten ops seen) filled in at the end.
    template: str
    count: int = 0
    ops: dict[str, None] = field(default_factory=dict)
    backward: bool = False
    # Records with the same code, site and group are one finding (one bug, however many
    # module instances ran the line).
    group: str = ""

    def hit(self, op: str | None = None, backward: bool = False) -> None:
        self.count += 1
        if op is not None and op not in self.ops and len(self.ops) < 4:
            self.ops[op] = None
        self.backward = self.backward or backward

    def to_finding(self, also_in: list[str] | None = None) -> Finding:
        path, line = (self.site[0], self.site[1]) if self.site else ("<unknown>", 1)
        column, end_column = _statement_columns(path, line)
        ops = ", ".join(f"`{op}`" for op in self.ops) or "an op"
        times = "once" if self.count == 1 else f"{self.count} times"
        message = self.template.format(count=self.count, times=times, ops=ops)
        inside = library_line(self.site)
        if inside is not None:
            message += f" (in `{package_of(inside[0])}` at {display_path(inside[0])}:{inside[1]})"
        if self.backward and self.code == MIXED_DEVICE_OP:
            message += " (also in the backward pass)"
        if also_in:
            shown = ", ".join(f"`{p}`" for p in also_in[:3])
            more = f" and {len(also_in) - 3} more" if len(also_in) > 3 else ""
            message += f"; also in {shown}{more}"
        return Finding(
            path=display_path(path),
            line=line,
            column=column,
            end_line=line,
            end_column=end_column,
            code=self.code,
            name=NAMES[self.code],
            message=message,
            severity=self.severity,
            module_path=self.module_path,
            url=f"{RULES_URL}{self.code}.md",
        )


def _statement_columns(path: str, line: int) -> tuple[int, int]:
    """1-based columns spanning the source line's text (the op's exact column is unknown)."""
    text = linecache.getline(path, line).rstrip("\r\n")
    stripped = text.strip()
    if not stripped:
        return 1, 1
    start = len(text) - len(text.lstrip()) + 1
    return start, start + len(stripped)


def merge(records: list[Record]) -> list[Finding]:
    """One finding per (code, source line, group), summing the hits of every module instance."""
    groups: dict[tuple[Any, ...], list[Record]] = {}
    for record in records:
        groups.setdefault((record.code, record.site, record.group), []).append(record)
    findings = []
    for members in groups.values():
        first = members[0]
        if len(members) == 1:
            findings.append(first.to_finding())
            continue
        combined = Record(first.code, first.site, first.module_path, first.severity, first.template, group=first.group)
        for member in members:
            combined.count += member.count
            combined.backward = combined.backward or member.backward
            for op in member.ops:
                if op not in combined.ops and len(combined.ops) < 4:
                    combined.ops[op] = None
        others = [m.module_path for m in members[1:] if m.module_path and m.module_path != first.module_path]
        findings.append(combined.to_finding(list(dict.fromkeys(others))))
    return findings
