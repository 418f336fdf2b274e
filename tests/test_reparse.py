"""Reparsing an edited buffer from its previous tree gives the tree a full parse gives."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import libcst as cst
import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules
from devicelint.reparse import ParseCache, first_token_lines, reparse, track

ROOT = Path(__file__).resolve().parent.parent


def _sources(pattern: str = "*.py", minimum: int = 0) -> list[Path]:
    """Fixture files (UTF-8 ones) of at least `minimum` characters."""
    found = []
    for path in sorted((ROOT / "fixtures").rglob(pattern)):
        try:
            if len(path.read_text(encoding="utf-8")) > minimum:
                found.append(path)
        except UnicodeDecodeError:
            continue  # the odd-encoding fixtures
    return found


# Real, varied Python: the linter's own larger modules and the training scripts in fixtures/.
SOURCES = sorted(
    [p for p in (ROOT / "devicelint").rglob("*.py") if p.stat().st_size > 6000][:12] + _sources(minimum=1500)[:12]
)
# What typing does to a file: characters, lines, blocks, brackets and quotes left open.
TYPED = [
    "x",
    " ",
    "\n",
    "# note\n",
    "    y = 1\n",
    "\n\n",
    "(",
    ")",
    '"""',
    "'",
    "def f():\n    pass\n",
    "import os\n",
    "\tz\n",
    "@decorator\n",
    "else:\n",
    "  ",
    "class C:\n    a: int = 0\n",
]


def _cpython_parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _edit(text: str, rng: random.Random) -> str:
    at = rng.randrange(len(text) + 1)
    choice = rng.random()
    if choice < 0.45:
        return text[:at] + rng.choice(TYPED) + text[at:]
    if choice < 0.75:
        return text[:at] + text[at + rng.randint(1, 30) :]
    return text[:at] + rng.choice(TYPED) + text[at + rng.randint(0, 6) :]


def test_statement_offsets_match_the_generated_code() -> None:
    for path in SOURCES:
        text = path.read_text()
        module = cst.parse_module(text)
        tracked = track(text, module)
        assert tracked is not None, path
        offset = len("".join(module.code_for_node(line) for line in module.header))
        expected = []
        for statement in module.body:
            expected.append(offset)
            offset += len(module.code_for_node(statement))
        assert list(tracked.starts) == expected, path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_edits_reparse_to_the_full_parse(seed: int) -> None:
    rng = random.Random(seed)
    reused = 0
    for path in SOURCES:
        text = path.read_text()
        state = track(text, cst.parse_module(text))
        assert state is not None
        for _ in range(10):
            version = _edit(state.text, rng)  # typing into the last version that parsed
            got = reparse(state, version)
            try:
                full = cst.parse_module(version)
            except cst.ParserSyntaxError:
                assert got is None, (path, version)  # a broken file is never half-parsed
                continue
            if got is None:
                state = track(version, full) or state
                continue
            reused += 1
            assert got.module.deep_equals(full), path
            assert got.module.code == version
            fresh = track(version, full)
            if fresh is None and not _cpython_parses(version):
                # LibCST takes forms that CPython before 3.12 rejects (a comment or a line break
                # inside an f-string's braces), and `track` places statements by CPython's parse.
                continue
            assert fresh is not None and (got.starts, got.ends) == (fresh.starts, fresh.ends), path
            assert first_token_lines(got) == first_token_lines(fresh)
            state = got
    assert reused > 40  # most edits that keep the file valid reuse the tree


def test_an_edit_in_the_header_or_a_tiny_file_parses_in_full() -> None:
    text = '"""Doc."""\nimport os\n\n\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n'
    state = track(text, cst.parse_module(text))
    assert state is not None
    assert reparse(state, "# new header comment\n" + text) is None
    small = "x = 1\n"
    assert reparse(track(small, cst.parse_module(small)), "x = 2\n") is None  # type: ignore[arg-type]


def test_linting_with_a_parse_cache_finds_what_a_full_parse_finds() -> None:
    options = EngineOptions(rules=tuple(all_rules()))
    cached = EngineOptions(rules=tuple(all_rules()), parse_cache=ParseCache())
    rng = random.Random(5)
    for path in _sources("bad*.py")[:8]:
        text = path.read_text()
        for version in [text, *(_edit(text, rng) for _ in range(6))]:
            plain = lint_source(version, str(path), options)
            reused = lint_source(version, str(path), cached)
            assert reused.findings == plain.findings, path
