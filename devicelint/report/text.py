"""Human output: `path:line:col: CODE message`, the source line with a caret, and a summary."""

from __future__ import annotations

import linecache
import re
from collections.abc import Sequence
from typing import Any

import click

from devicelint.finding import Finding
from devicelint.report.base import ReportContext, printable_path


def _source_line(finding: Finding, context: ReportContext) -> str | None:
    if finding.path in context.sources:
        lines = re.split(r"\r\n|\r|\n", context.sources[finding.path])  # not at \f, as splitlines
        return lines[finding.line - 1] if 0 < finding.line <= len(lines) else None
    if finding.cell is not None:
        from devicelint.notebook import cell_line

        return cell_line(finding.path, finding.cell, finding.line)
    linecache.checkcache(finding.path)  # the file may have changed (--fix, a long-lived process)
    text = linecache.getline(finding.path, finding.line)
    return text.rstrip("\r\n") if text else None


def location(finding: Finding) -> str:
    cell = f"cell {finding.cell}:" if finding.cell is not None else ""
    return f"{printable_path(finding.path)}:{cell}{finding.line}:{finding.column}"


MAX_SHOWN = 120


def _window(line: str, f: Finding) -> tuple[str, int, int]:
    """The part of a long line around the finding, its column in that part, and the caret width."""
    width = (f.end_column - f.column) if f.end_line == f.line else len(line) - f.column + 1
    width = max(1, min(width, MAX_SHOWN))
    if len(line) <= MAX_SHOWN:
        return line, f.column, width
    start = max(0, f.column - 1 - 20)
    shown = line[start : start + MAX_SHOWN]
    prefix = "..." if start else ""
    suffix = "..." if start + MAX_SHOWN < len(line) else ""
    return prefix + shown + suffix, f.column - start + len(prefix), min(width, MAX_SHOWN - (f.column - 1 - start))


def render_concise(findings: Sequence[Finding], context: ReportContext) -> str:
    """One line per finding: `path:line:col: CODE message`."""
    return render(findings, context, concise=True)


def render(findings: Sequence[Finding], context: ReportContext, concise: bool = False) -> str:
    def style(text: str, **kw: Any) -> str:
        return click.style(text, **kw) if context.color else text

    out: list[str] = []
    for f in findings:
        code_colour = "yellow" if f.severity == "warning" else "red"
        head = f"{style(location(f), bold=True)}: {style(f.code, fg=code_colour, bold=True)} {f.message}"
        if f.module_path:
            head += f" [module `{f.module_path}`]"
        out.append(head)
        if concise:
            continue
        if context.show_source:
            line = _source_line(f, context)
            if line is not None and line.strip():
                shown, column, width = _window(line.expandtabs(1), f)
                gutter = str(f.line)
                out.append(f"  {gutter} | {shown}")
                out.append(f"  {' ' * len(gutter)} | {' ' * (column - 1)}{style('^' * width, fg=code_colour)}")
        if f.fix is not None:
            kind = "fix" if f.fix.safe else "unsafe fix"
            out.append(f"  = {kind} available: {f.fix.description}")
    return "".join(line + "\n" for line in out)


def summary(findings: Sequence[Finding], files_checked: int, fixed: int = 0) -> str:
    fixed_text = f"Fixed {fixed} {'problem' if fixed == 1 else 'problems'}. " if fixed else ""
    if not findings:
        noun = "file" if files_checked == 1 else "files"
        return f"{fixed_text}All clear: {files_checked} {noun} checked."
    files = len({f.path for f in findings})
    problems = "problem" if len(findings) == 1 else "problems"
    fixable = sum(1 for f in findings if f.fix is not None and f.fix.safe)
    hidden = sum(1 for f in findings if f.fix is not None and not f.fix.safe)
    text = f"{fixed_text}Found {len(findings)} {'remaining ' if fixed else ''}{problems} in {files} {'file' if files == 1 else 'files'}."
    if fixable:
        text += f" {fixable} fixable with `--fix`"
        text += f" ({hidden} more with `--unsafe-fixes`)." if hidden else "."
    elif hidden:
        text += f" {hidden} fixable with `--fix --unsafe-fixes`."
    return text


def fixes_listing(fixed: Sequence[tuple[str, tuple[str, ...]]], would: bool) -> str:
    """Ruff's `--show-fixes` block: per file, how many fixes of each rule went in."""
    from devicelint.registry import rule_info

    total = sum(len(codes) for _, codes in fixed)
    verb = "Would fix" if would else "Fixed"
    if not total:
        return f"{'No fixes available' if would else 'No problems fixed'}.\n"
    lines = [f"{verb} {total} {'problem' if total == 1 else 'problems'}:"]
    for path, codes in sorted(fixed):
        if not codes:
            continue
        lines.append(f"- {path}:")
        for code in sorted(set(codes)):
            lines.append(f"    {codes.count(code)} × {code} ({rule_info(code).name})")
    return "\n".join(lines) + "\n"


def statistics(findings: Sequence[Finding], syntax_only: int = 0) -> str:
    """Findings per rule; then, when the prefilter spared some files the analysis, how many."""
    counts: dict[tuple[str, str], int] = {}
    for f in findings:
        counts[(f.code, f.name)] = counts.get((f.code, f.name), 0) + 1
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    text = "".join(f"{count:>5}  {code}  {name}\n" for (code, name), count in rows)
    if syntax_only:
        files = "file holds" if syntax_only == 1 else "files hold"
        text += f"{syntax_only} {files} no word a selected rule looks for: syntax-checked only, not analysed\n"
    return text
