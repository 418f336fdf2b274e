"""Lint Jupyter notebooks: code cells joined into one module, findings mapped back to cells.

Cells are joined so that facts flow between them as they do when the notebook runs (a model
moved in one cell, a tensor made in the next). IPython magics and shell lines (at the start of a
logical line only, and automagic `pip install ...`) become `pass`
at their indent (their backslash-continued lines blank), keeping line numbers and blocks, and
an assignment from one (`files = !ls`, `t = %timeit -o f()`) keeps its target bound to `None`; a
cell pasted with a leading indent is dedented, as IPython does; a cell that starts with a cell magic (`%%bash`) is skipped whole.
IPython's help lines (`obj?`, `?obj`) become `pass` too, and a notebook whose kernel runs another
language (Julia, R) has no Python to lint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from devicelint.engine import EngineOptions, lint_source
from devicelint.finding import FileResult, Finding


@dataclass(frozen=True)
class CellLine:
    cell: int  # 1-based, counting every cell (markdown too), as the notebook shows them
    line: int  # 1-based within the cell
    indent: int = 0  # characters of leading indent removed from the line (IPython's leading_indent)


# IPython's `files = !ls` / `out = %sx ls` (SystemAssign, MagicAssign): names or attributes,
# comma-separated, then `=` and the magic.
_MAGIC_ASSIGNMENT = re.compile(r"([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*[%!]")


class NotebookError(ValueError):
    pass


def virtual_source(data: bytes) -> tuple[str, list[CellLine]]:
    """The code cells as one module, and for each of its lines the cell line it came from."""
    try:
        notebook = json.loads(data.decode("utf-8"))
        cells = notebook["cells"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise NotebookError(f"not a readable Jupyter notebook: {err}") from err
    if not _python_kernel(notebook):
        return "", []  # a Julia or R notebook: its cells are no Python to lint
    lines: list[str] = []
    origin: list[CellLine] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        cell_lines = _cell_text(cell).splitlines()
        if cell_lines and cell_lines[0].lstrip().startswith("%%"):
            continue
        # IPython strips the first line's indent from a cell pasted indented (`leading_indent`).
        first = next((line for line in cell_lines if line.strip()), "")
        prefix = first[: len(first) - len(first.lstrip())]
        continued = False
        logical = _LogicalLines()
        for index, line in enumerate(cell_lines, start=1):
            removed = len(prefix) if prefix and line.startswith(prefix) else 0
            line = line[removed:]
            stripped = line.lstrip()
            if not continued and not logical.at_start():
                # inside brackets, a string or after a backslash: `% (a, b)` is an operator there
                logical.feed(line)
            elif continued:
                # IPython joins a magic's backslash-continued lines into the magic itself.
                continued = line.endswith("\\")
                line = ""
            elif (assigned := _MAGIC_ASSIGNMENT.match(stripped)) is not None:
                continued = line.endswith("\\")
                line = line[: len(line) - len(stripped)] + assigned.group(1) + " = None"
            elif stripped.startswith(("%", "!")) or _asks_for_help(stripped) or _automagic(stripped):
                continued = line.endswith("\\")
                # `pass`, not a blank line: a block that held only magics must stay a block.
                line = line[: len(line) - len(stripped)] + "pass"
            else:
                logical.feed(line)
            lines.append(line)
            origin.append(CellLine(number, index, removed))
        # A blank separator keeps an unfinished block in one cell from swallowing the next.
        lines.append("")
        origin.append(CellLine(number, len(cell_lines) + 1))
    return "\n".join(lines) + "\n", origin


def _python_kernel(notebook: Any) -> bool:
    """The notebook runs Python: its kernel's language (or its `language_info`) says so, or it
    says nothing (a notebook saved without metadata)."""
    metadata = notebook.get("metadata") if isinstance(notebook, dict) else None
    if not isinstance(metadata, dict):
        return True
    for section, key in (("kernelspec", "language"), ("language_info", "name")):
        entry = metadata.get(section)
        language = entry.get(key) if isinstance(entry, dict) else None
        if isinstance(language, str) and language.strip():
            return language.strip().lower() == "python"
    return True


def _asks_for_help(stripped: str) -> bool:
    """`obj?` / `obj??` / `?obj` / `??obj`: IPython's help syntax, a `?` token ending or starting
    the line. A `?` that ends a comment (`fit(x,  # why?`) or sits in a string is Python's, as
    IPython's tokenizer sees it; a line never starts with one in Python."""
    return stripped.startswith("?") or _code_of(stripped).rstrip().endswith("?")


def _code_of(line: str) -> str:
    """The line without its trailing comment (a `#` outside a one-line string)."""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "#":
            return line[:i]
        if c in "\"'":
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        i += 1
    return line


# Line magics that IPython's automagic (on by default) runs without their `%`, as notebooks write
# them in set-up cells (`pip install -r requirements.txt`); only where the line is not Python.
_AUTOMAGICS = re.compile(r"(pip|conda|mamba)\s+[A-Za-z-]")


def _automagic(stripped: str) -> bool:
    if _AUTOMAGICS.match(stripped) is None:
        return False
    try:
        compile(stripped, "<cell>", "exec")
    except SyntaxError:
        return True
    return False  # `pip = 3`, `conda -x`: Python after all


class _LogicalLines:
    """Where a cell's lines stand against Python's logical lines: IPython only reads a magic at
    the start of one, never inside open brackets (`print(...\\n    % (a, b))` is the string-format
    operator), a triple-quoted string or after a backslash."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: str | None = None  # the open triple quote
        self.joined = False

    def at_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.joined

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if self.quote is not None:
                if c == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += 3
                    self.quote = None
                    continue
                i += 1
                continue
            if c == "#":
                break
            if c in "\"'":
                if line.startswith(c * 3, i):
                    self.quote = c * 3
                    i += 3
                    continue
                j = i + 1  # a one-line string: skip to its close
                while j < n and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                i = j + 1
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        self.joined = self.quote is None and line.endswith("\\") and not line.rstrip().startswith("#")


def _cell_text(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def cell_line(path: str, cell: int, line: int) -> str | None:
    """One source line of one cell, for showing a finding under its location."""
    try:
        with open(path, "rb") as handle:
            cells = json.loads(handle.read().decode("utf-8"))["cells"]
        lines = _cell_text(cells[cell - 1]).splitlines()
    except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError):
        return None
    return lines[line - 1] if 0 < line <= len(lines) else None


def lint_notebook(data: bytes, path: str, options: EngineOptions) -> FileResult:
    """Lint a notebook; fixes are not offered (the notebook's JSON would need rewriting)."""
    source, origin = virtual_source(data)
    result = lint_source(source, path, replace(options, fix_mode="none", cells=tuple(o.cell for o in origin)))
    return FileResult(path, tuple(_to_cell(f, origin) for f in result.findings), analysed=result.analysed)


def _to_cell(finding: Finding, origin: list[CellLine]) -> Finding:
    if not origin:
        return finding
    start = origin[min(finding.line, len(origin)) - 1]
    end = origin[min(finding.end_line, len(origin)) - 1]
    end_line = end.line if end.cell == start.cell else start.line
    end_column = finding.end_column + end.indent if end.cell == start.cell else finding.end_column
    return replace(
        finding,
        line=start.line,
        end_line=end_line,
        cell=start.cell,
        fix=None,
        column=finding.column + start.indent,
        end_column=end_column,
    )
