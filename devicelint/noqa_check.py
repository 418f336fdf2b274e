"""DL001: `# noqa` directives that silence nothing for devicelint (see `checks/unused_noqa.py`)."""

from __future__ import annotations

import io
import re
import tokenize

from devicelint.finding import Edit, Finding, Fix
from devicelint.suppression import _LINE_NOQA, malformed

UNUSED_NOQA, UNUSED_NOQA_NAME = "DL001", "unused-noqa"
_OUR_CODE = re.compile(r"^DL\d+$")


def unused_noqa(path: str, text: str, fired: set[tuple[int, str]], judged: set[str], known: set[str]) -> list[Finding]:
    """One finding per directive with dead devicelint codes: `fired` holds (line, code) of every
    finding before suppression, `judged` the codes whose rules ran, `known` every rule code."""
    if "noqa" not in text:
        return []
    try:
        comments = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    from devicelint.registry import RULES_URL

    found = []
    for token in comments:
        match = _LINE_NOQA.search(token.string)
        if match is None:
            continue
        line, start = token.start
        begin, end = start + match.start(), start + match.end()
        if malformed(token.string, match):
            # Name what fires on this line; with nothing there, a placeholder, never a real code
            # that has nothing to do with the line.
            here = sorted({code for at, code in fired if at == line and _OUR_CODE.match(code)})
            example = (
                f"`# noqa: {', '.join(here)}`" if here else "`# noqa: DLxxx`, with the code of each finding to silence"
            )
            detail = (
                f"`{token.string[match.start() :].strip()}` is not a noqa directive devicelint reads, so it "
                f"silences nothing; write the codes: {example}"
            )
            found.append(_finding(path, line, begin, end, detail, None, RULES_URL))
            continue
        codes = [c.strip().upper() for c in (match.group("codes") or "").split(",") if c.strip()]
        dead = [c for c in codes if _OUR_CODE.match(c) and (c not in known or (c in judged and (line, c) not in fired))]
        if not dead:
            continue
        kept = [c for c in codes if c not in dead]
        reasons = ", ".join(f"`{c}` ({'no such rule' if c not in known else 'nothing to silence here'})" for c in dead)
        detail = f"unused noqa: {reasons}; remove {'it' if len(dead) == 1 else 'them'}"
        line_text = token.line.rstrip("\r\n")
        if kept:
            edit = Edit(line, begin + 1, line, end + 1, f"# noqa: {', '.join(kept)}")
        else:
            # The whole directive goes, with the spaces before it.
            cut = len(line_text[:begin].rstrip())
            edit = Edit(line, cut + 1, line, end + 1, "")
        fix = Fix("Remove the unused codes", True, (edit,))
        found.append(_finding(path, line, begin, end, detail, fix, RULES_URL))
    return found


def _finding(path: str, line: int, begin: int, end: int, detail: str, fix: Fix | None, url: str) -> Finding:
    return Finding(
        path=path,
        line=line,
        column=begin + 1,
        end_line=line,
        end_column=end + 1,
        code=UNUSED_NOQA,
        name=UNUSED_NOQA_NAME,
        message=detail,
        fix=fix,
        url=f"{url}{UNUSED_NOQA}.md",
    )
