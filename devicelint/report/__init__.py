"""One small module per output format, each with `render(findings, context) -> str`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from devicelint.finding import Finding


@dataclass(frozen=True)
class ReportContext:
    files_checked: int = 0
    show_source: bool = True
    color: bool = False
    # In-memory sources by path (stdin, notebooks); other paths are read from disk.
    sources: Mapping[str, str] = field(default_factory=dict)


FORMATS = ("text", "json", "sarif", "github")


def printable_path(path: str) -> str:
    """A path as valid Unicode: bytes that are not UTF-8 in a file name (which Python keeps as
    lone surrogates, rejected by strict JSON readers) become `\\xff` escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def path_uri(path: str) -> str:
    """A path as a URI reference (SARIF `artifactLocation.uri`): `/` separators, and spaces,
    `%`, `#` and non-UTF-8 bytes percent-encoded."""
    from urllib.parse import quote

    return quote(path.replace("\\", "/").encode("utf-8", "surrogateescape"), safe="/")


def render(fmt: str, findings: Sequence[Finding], context: ReportContext | None = None) -> str:
    """Render findings (static or runtime) in one of FORMATS."""
    from devicelint.report import github, json_format, sarif, text

    renderers: dict[str, Callable[[Sequence[Finding], ReportContext], str]] = {
        "text": text.render, "json": json_format.render, "sarif": sarif.render, "github": github.render,
    }
    return renderers[fmt](sorted(findings, key=lambda f: f.sort_key), context or ReportContext())
