"""`# noqa` handling, applied once in the engine so every rule and output gets it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_LINE_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.I)
_NEWLINE = re.compile(r"\r\n|\r|\n")
_FILE_NOQA = re.compile(
    r"^\s*#\s*devicelint:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?\s*$",
    re.I | re.M,
)


def malformed(text: str, match: re.Match[str]) -> bool:
    """`# noqa: any text`: a colon without codes. It silences nothing (DL001 reports it)."""
    return match.group("codes") is None and text[match.end() :].lstrip().startswith(":")


def _codes(text: str | None) -> frozenset[str] | None:
    if not text:
        return None  # bare noqa: everything
    return frozenset(c.strip().upper() for c in text.split(","))


@dataclass(frozen=True)
class Suppressions:
    # None means the whole file is silenced; a set silences those codes everywhere.
    file_codes: frozenset[str] | None | Literal[False]
    lines: tuple[str, ...]

    @classmethod
    def parse(cls, source: str) -> Suppressions:
        file_codes: frozenset[str] | None | Literal[False] = False
        for match in _FILE_NOQA.finditer(source):
            codes = _codes(match.group("codes"))
            if codes is None:
                file_codes = None
                break
            file_codes = (file_codes or frozenset()) | codes
        # Python's line breaks only (str.splitlines also breaks at \f and \u2028).
        return cls(file_codes=file_codes, lines=tuple(_NEWLINE.split(source)))

    def silences(self, code: str, line: int) -> bool:
        if self.file_codes is None:
            return True
        if self.file_codes and code in self.file_codes:
            return True
        if not 1 <= line <= len(self.lines):
            return False
        text = self.lines[line - 1]
        if "#" not in text:
            return False
        match = _LINE_NOQA.search(text)
        if match is None or malformed(text, match):
            return False
        codes = _codes(match.group("codes"))
        return codes is None or code in codes
