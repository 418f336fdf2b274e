"""Lint Jupyter notebooks: code cells joined into one module, findings mapped back to cells.

Cells are joined so that facts flow between them as they do when the notebook runs (a model
moved in one cell, a tensor made in the next). IPython magics and shell lines become `pass`
at their indent (their backslash-continued lines blank), keeping line numbers and blocks, and
an assignment from one (`files = !ls`, `t = %timeit -o f()`) keeps its target bound to `None`; a
cell pasted with a leading indent is dedented, as IPython does; a cell that starts with a cell magic (`%%bash`) is skipped whole.
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
        for index, line in enumerate(cell_lines, start=1):
            removed = len(prefix) if prefix and line.startswith(prefix) else 0
            line = line[removed:]
            stripped = line.lstrip()
            if continued:
                # IPython joins a magic's backslash-continued lines into the magic itself.
                continued = line.endswith("\\")
                line = ""
            elif (assigned := _MAGIC_ASSIGNMENT.match(stripped)) is not None:
                continued = line.endswith("\\")
                line = line[: len(line) - len(stripped)] + assigned.group(1) + " = None"
            elif stripped.startswith(("%", "!")) or stripped.endswith("?") and not stripped.startswith("#"):
                continued = stripped.startswith(("%", "!")) and line.endswith("\\")
                # `pass`, not a blank line: a block that held only magics must stay a block.
                line = line[: len(line) - len(stripped)] + "pass"
            lines.append(line)
            origin.append(CellLine(number, index, removed))
        # A blank separator keeps an unfinished block in one cell from swallowing the next.
        lines.append("")
        origin.append(CellLine(number, len(cell_lines) + 1))
    return "\n".join(lines) + "\n", origin


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
    result = lint_source(source, path, replace(options, fix_mode="none"))
    return FileResult(path, tuple(_to_cell(f, origin) for f in result.findings))


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
