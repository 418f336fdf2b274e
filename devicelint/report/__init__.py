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


# `concise` and `full` are `text` without and with the source lines under each finding.
FORMATS = ("text", "concise", "full", "json", "json-lines", "sarif", "github", "gitlab", "junit", "pylint")


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
    from devicelint.report import github, gitlab, json_format, json_lines, junit, pylint_format, sarif, text

    renderers: dict[str, Callable[[Sequence[Finding], ReportContext], str]] = {
        "text": text.render, "concise": text.render_concise, "full": text.render, "json": json_format.render,
        "json-lines": json_lines.render, "sarif": sarif.render, "github": github.render,
        "gitlab": gitlab.render, "junit": junit.render, "pylint": pylint_format.render,
    }
    return renderers[fmt](sorted(findings, key=lambda f: f.sort_key), context or ReportContext())
