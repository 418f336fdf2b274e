"""What every format module shares: the report context, the format names, and path spellings.
Below `report/__init__.py`, whose `render` imports the format modules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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
