"""Positions: devicelint counts 1-based lines and 1-based columns in code points; LSP counts
0-based lines and columns in code units of the encoding agreed at `initialize` (UTF-16 unless
the client offers UTF-8 or UTF-32). Both break lines at "\\r\\n", "\\r" and "\\n" only."""

from __future__ import annotations

import re

_LINE_BREAK = re.compile(r"\r\n|\r|\n")

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def code_units(text: str, encoding: str) -> int:
    """How many code units `text` takes in the position encoding."""
    if encoding == UTF32 or text.isascii():
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", errors="surrogatepass"))
    # Characters beyond the Basic Multilingual Plane take two UTF-16 units (a surrogate pair).
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


class LineIndex:
    """One text's line starts, for converting positions both ways."""

    def __init__(self, text: str, encoding: str = UTF16) -> None:
        self.text = text
        self.encoding = encoding
        self.starts = [0] + [match.end() for match in _LINE_BREAK.finditer(text)]

    def _line_text(self, line: int) -> str:
        """Line `line` (0-based) without its line break."""
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def lsp_position(self, line: int, column: int) -> tuple[int, int]:
        """devicelint's (1-based line, 1-based code-point column) as LSP's (line, character),
        clamped to the text: a finding past the last line or line end points at its end."""
        line0 = line - 1
        if line0 >= len(self.starts):
            return self.end()
        line0 = max(line0, 0)
        text = self._line_text(line0)
        return line0, code_units(text[: max(column - 1, 0)], self.encoding)

    def offset(self, line: int, character: int) -> int:
        """The code-point offset in the text of an LSP position (clamped to its line)."""
        if line >= len(self.starts):
            return len(self.text)
        text = self._line_text(line)
        if self.encoding == UTF32 or text.isascii():
            return self.starts[line] + min(character, len(text))
        units = 0
        for index, char in enumerate(text):
            if units >= character:
                return self.starts[line] + index
            units += code_units(char, self.encoding)
        return self.starts[line] + len(text)

    def position_of_offset(self, offset: int) -> tuple[int, int]:
        """The LSP position of a code-point offset in the text."""
        from bisect import bisect_right

        line = bisect_right(self.starts, offset) - 1
        return line, code_units(self.text[self.starts[line] : offset], self.encoding)

    def end(self) -> tuple[int, int]:
        """The LSP position just past the last character."""
        return self.position_of_offset(len(self.text))
