"""Expected lines travel through rewrites as tags (`@@T3@@`) in comments; stripped at the end."""

from __future__ import annotations

import io
import re
import tokenize

TAG = re.compile(r"@@T(\d+)@@")
_STRIP = re.compile(r"\s*@@T\d+@@")


def _taggable_lines(text: str) -> tuple[set[int], dict[int, int]]:
    """Lines whose end may take a comment, and the end column of each line's comment."""
    ok: set[int] = set()
    comments: dict[int, int] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.NEWLINE, tokenize.NL):
            ok.add(tok.start[0])
        elif tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.end[1]
    return ok, comments


def add_tags(text: str, wanted: dict[int, int]) -> tuple[str, dict[int, str]]:
    """Put tag `wanted[line]` on each line; (tagged text, {tag: why not} for lines that cannot take one)."""
    ok, comments = _taggable_lines(text)
    lines = text.splitlines(keepends=True)
    refused: dict[int, str] = {}
    by_line: dict[int, list[int]] = {}
    for line, tag in wanted.items():
        if line not in ok or line > len(lines):
            refused[tag] = "the expected line ends inside a string or a backslash continuation"
            continue
        by_line.setdefault(line, []).append(tag)
    for line, tags in by_line.items():
        raw = lines[line - 1]
        body = raw.rstrip("\r\n")
        end = raw[len(body) :]
        marks = " ".join(f"@@T{t}@@" for t in sorted(tags))
        if line in comments:
            col = comments[line]
            body = f"{body[:col]} {marks}{body[col:]}"
        else:
            body = f"{body}  # {marks}"
        lines[line - 1] = body + end
    return "".join(lines), refused


def tag_lines(text: str) -> dict[int, set[int]]:
    """{tag: lines carrying it} in a tagged text."""
    found: dict[int, set[int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        for match in TAG.finditer(line):
            found.setdefault(int(match.group(1)), set()).add(number)
    return found


def strip_tags(text: str) -> tuple[str, dict[int, set[int]]]:
    """(text without tags, {tag: lines}); a comment that held only tags goes too."""
    where = tag_lines(text)
    out = []
    for line in text.splitlines(keepends=True):
        if "@@T" in line:
            body = line.rstrip("\r\n")
            end = line[len(body) :]
            body = _STRIP.sub("", body)
            body = re.sub(r"\s*#$", "", body)
            line = body + end
        out.append(line)
    return "".join(out), where
