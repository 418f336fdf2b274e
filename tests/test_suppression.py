"""`# noqa` on a line and `# devicelint: noqa` for a file, handled once in the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from devicelint.cli import cli
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules
from devicelint.suppression import Suppressions

# Both proof rules fire on line 4; DL501 alone on line 5.
SOURCE = """import torch


ok = torch.load(p) if x.device == torch.device("cuda") else None{comment}
state = torch.load(q)
"""


def found(comment: str = "", header: str = "") -> list[tuple[str, int]]:
    source = header + SOURCE.format(comment=comment)
    result = lint_source(source, "a.py", EngineOptions(rules=tuple(all_rules())))
    offset = header.count("\n")
    return [(f.code, f.line - offset) for f in result.findings]


def test_without_noqa_both_rules_fire() -> None:
    assert found() == [("DL501", 4), ("DL502", 4), ("DL501", 5)]


@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        ("  # noqa: DL501", [("DL502", 4), ("DL501", 5)]),
        ("  # noqa: DL502", [("DL501", 4), ("DL501", 5)]),
        ("  # noqa:DL501", [("DL502", 4), ("DL501", 5)]),
        ("  #noqa: dl501", [("DL502", 4), ("DL501", 5)]),
        ("  # noqa: DL501, DL502", [("DL501", 5)]),
        ("  # noqa: DL501,DL502", [("DL501", 5)]),
        ("  # noqa: DL502,DL501 -- legacy loader, see #12", [("DL501", 5)]),
        ("  # noqa", [("DL501", 5)]),
        ("  # NOQA", [("DL501", 5)]),
        ("  # noqa: E501", [("DL501", 4), ("DL502", 4), ("DL501", 5)]),
        ("  # type: ignore  # noqa: DL502", [("DL501", 4), ("DL501", 5)]),
        ("  # a comment", [("DL501", 4), ("DL502", 4), ("DL501", 5)]),
    ],
)
def test_line_noqa(comment: str, expected: list[tuple[str, int]]) -> None:
    assert found(comment) == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("# devicelint: noqa\n", []),
        ("# devicelint: noqa: DL501\n", [("DL502", 4)]),
        ("# devicelint: noqa: DL501,DL502\n", []),
        ("# devicelint: noqa: DL501, DL502\n", []),
        ("# devicelint: noqa: DL502\n# devicelint: noqa: DL501\n", []),
        ('"""Module."""\n  # DeviceLint: NOQA: dl502\n', [("DL501", 4), ("DL501", 5)]),
        # Not a file-level directive: other text on the line, or a plain noqa.
        ("x = 1  # devicelint: noqa\n", [("DL501", 4), ("DL502", 4), ("DL501", 5)]),
        ("# noqa\n", [("DL501", 4), ("DL502", 4), ("DL501", 5)]),
        ("# devicelint: noqa: E501\n", [("DL501", 4), ("DL502", 4), ("DL501", 5)]),
    ],
)
def test_file_noqa(header: str, expected: list[tuple[str, int]]) -> None:
    assert found(header=header) == expected


def test_noqa_belongs_on_the_line_where_the_finding_starts() -> None:
    source = (
        "import torch\nstate = torch.load(  # noqa: DL501\n    p,\n)\nother = torch.load(\n    p,\n)  # noqa: DL501\n"
    )
    result = lint_source(source, "a.py", EngineOptions(rules=tuple(all_rules())))
    # The misplaced directive silences nothing, and DL001 says so.
    assert [(f.code, f.line) for f in result.findings] == [("DL501", 5), ("DL001", 7)]


def test_syntax_errors_are_not_silenced_by_a_line_noqa() -> None:
    result = lint_source("import torch\ndef f(:  # noqa\n", "a.py", EngineOptions(rules=tuple(all_rules())))
    assert [(f.code, f.line) for f in result.findings] == [("DL000", 2)]


def test_a_malformed_noqa_silences_nothing() -> None:
    parsed = Suppressions.parse("x = 1  # noqa: see the ticket\ny = 2  # noqa:DL501\n")
    assert not parsed.silences("DL501", 1)
    assert parsed.silences("DL501", 2)


def test_suppressions_parse() -> None:
    parsed = Suppressions.parse("# devicelint: noqa: DL501\nx = 1  # noqa: DL502\ny = 2  # noqa\n")
    assert parsed.file_codes == frozenset({"DL501"})
    assert parsed.silences("DL501", 3) and parsed.silences("DL999", 3)
    assert parsed.silences("DL502", 2) and not parsed.silences("DL101", 2)
    assert not parsed.silences("DL502", 99)
    assert Suppressions.parse("x = 1\n").file_codes is False


@pytest.mark.parametrize("fmt", ["json", "sarif", "github", "text"])
def test_every_output_format_honours_noqa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    (tmp_path / "a.py").write_text(SOURCE.format(comment="  # noqa: DL501,DL502"))
    (tmp_path / "b.py").write_text("# devicelint: noqa: DL501\n" + SOURCE.format(comment=""))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["check", "--no-cache", "--output-format", fmt, "--no-show-source", "."], catch_exceptions=False
    )
    assert result.exit_code == 1
    if fmt == "json":
        assert [(f["path"], f["line"], f["code"]) for f in json.loads(result.stdout)] == [
            ("a.py", 5, "DL501"),
            ("b.py", 5, "DL502"),
        ]
    elif fmt == "sarif":
        assert [r["ruleId"] for r in json.loads(result.stdout)["runs"][0]["results"]] == ["DL501", "DL502"]
    elif fmt == "github":
        assert [line.split(",")[:2] for line in result.stdout.splitlines()] == [
            ["::error file=a.py", "line=5"],
            ["::error file=b.py", "line=5"],
        ]
    else:
        assert result.stdout.splitlines()[0].startswith("a.py:5:9: DL501 ")
        assert result.stdout.endswith(
            "Found 2 problems in 2 files. 1 fixable with `--fix` (1 more with `--unsafe-fixes`).\n"
        )


@pytest.mark.parametrize("odd", ["\x0c", "\x0b", "\x1c", "\u2028", "\x85"])
def test_noqa_lines_count_python_line_breaks_only(odd: str) -> None:
    # str.splitlines breaks at form feeds and friends; Python (and LibCST) do not.
    line2 = odd if odd == "\x0c" else f"# {odd}"  # a bare form feed is whitespace; the rest, comment text
    source = f"import torch\n{line2}\nx = torch.load(p)  # noqa: DL501\ny = torch.load(q)\ns = '{odd}'\n"
    result = lint_source(source, "a.py", EngineOptions(rules=tuple(all_rules())))
    assert [(f.code, f.line) for f in result.findings] == [("DL501", 4)]


def test_a_malformed_noqa_names_the_codes_of_its_own_line() -> None:
    # A directive with no codes on a line where two rules fire suggests those two; one on a line
    # where nothing fires suggests a placeholder, never an unrelated rule's code.
    source = SOURCE.format(comment="  # noqa: see the ticket") + "x = 1  # noqa: 534\n"
    result = lint_source(source, "a.py", EngineOptions(rules=tuple(all_rules())))
    malformed = [(f.line, f.message) for f in result.findings if f.code == "DL001"]
    assert malformed == [
        (
            4,
            "`# noqa: see the ticket` is not a noqa directive devicelint reads, so it silences nothing; "
            "write the codes: `# noqa: DL501, DL502`",
        ),
        (
            6,
            "`# noqa: 534` is not a noqa directive devicelint reads, so it silences nothing; "
            "write the codes: `# noqa: DLxxx`, with the code of each finding to silence",
        ),
    ]
