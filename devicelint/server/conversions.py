"""Findings and fixes as LSP diagnostics and text edits."""

from __future__ import annotations

from collections.abc import Iterable

from lsprotocol import types

from devicelint.finding import Edit, Finding
from devicelint.server.positions import LineIndex

SOURCE = "devicelint"
_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning}


def lsp_range(index: LineIndex, line: int, column: int, end_line: int, end_column: int) -> types.Range:
    start = index.lsp_position(line, column)
    end = index.lsp_position(end_line, end_column)
    return types.Range(types.Position(*start), types.Position(*max(start, end)))


def diagnostic(finding: Finding, index: LineIndex) -> types.Diagnostic:
    """The finding as an editor shows it: its whole range, code, rule page and severity."""
    return types.Diagnostic(
        range=lsp_range(index, finding.line, finding.column, finding.end_line, finding.end_column),
        message=finding.message,
        severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Error),
        code=finding.code,
        code_description=types.CodeDescription(href=finding.url) if finding.url else None,
        source=SOURCE,
    )


def text_edits(edits: Iterable[Edit], index: LineIndex) -> list[types.TextEdit]:
    return [
        types.TextEdit(range=lsp_range(index, e.line, e.column, e.end_line, e.end_column), new_text=e.content)
        for e in edits
    ]


def replacement(index: LineIndex, new_text: str) -> types.TextEdit | None:
    """One edit that turns the indexed text into `new_text`, covering only what differs (so
    the editor keeps the cursor and folds elsewhere); None when they are equal."""
    old_text = index.text
    if old_text == new_text:
        return None
    prefix = 0
    shortest = min(len(old_text), len(new_text))
    while prefix < shortest and old_text[prefix] == new_text[prefix]:
        prefix += 1
    suffix = 0
    while suffix < shortest - prefix and old_text[len(old_text) - 1 - suffix] == new_text[len(new_text) - 1 - suffix]:
        suffix += 1
    # Never start or end between "\r" and "\n": LSP has no position inside a line break.
    if prefix and old_text[prefix - 1] == "\r" and old_text[prefix : prefix + 1] == "\n":
        prefix -= 1
    end_offset = len(old_text) - suffix
    if suffix and old_text[end_offset - 1 : end_offset] == "\r" and old_text[end_offset] == "\n":
        suffix -= 1
        end_offset += 1
    start = index.position_of_offset(prefix)
    end = index.position_of_offset(end_offset)
    return types.TextEdit(
        range=types.Range(types.Position(*start), types.Position(*end)),
        new_text=new_text[prefix : len(new_text) - suffix],
    )


def versioned_edit(uri: str, version: int | None, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    """Edits the client applies only to the version they were computed on."""
    return types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                edits=edits,
            )
        ]
    )
