"""Output formats: exact text, JSON keys, SARIF validated against the OASIS schema, GitHub lines."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from devicelint import __version__
from devicelint.cli import cli
from devicelint.finding import Edit, Finding, Fix
from devicelint.registry import all_rules
from devicelint.report import ReportContext, render
from devicelint.report.text import statistics, summary

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
JSON_KEYS = ["path", "line", "column", "end_line", "end_column", "code", "name", "message", "severity", "url", "fix"]

BUGGY = """import torch


def restore(p, x):
    state = torch.load(p)
    if x.device == torch.device("cuda"):
        return state
    return None
"""


def finding(path: str = "a.py", line: int = 1, column: int = 1, code: str = "DL501", **kw) -> Finding:
    values = dict(
        end_line=line,
        end_column=column + 3,
        name="torch-load-without-map-location",
        message="msg",
        url=f"https://example.org/{code}.md",
    )
    values.update(kw)
    return Finding(path=path, line=line, column=column, code=code, **values)  # type: ignore[arg-type]


def lint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str):  # type: ignore[no-untyped-def]
    (tmp_path / "buggy.py").write_text(BUGGY)
    (tmp_path / "b_syntax.py").write_text("import torch\nx = (\n")
    (tmp_path / "clean.py").write_text("import torch\n")
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(cli, ["check", "--no-cache", *args], catch_exceptions=False)


# -- json -----------------------------------------------------------------------------------


def test_json_keys_and_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = lint(tmp_path, monkeypatch, "--output-format", "json", ".")
    rows = json.loads(result.stdout)
    assert all(list(row) == JSON_KEYS for row in rows)
    assert [(r["path"], r["line"], r["column"], r["code"]) for r in rows] == [
        ("b_syntax.py", 2, 5, "DL000"),
        ("buggy.py", 5, 13, "DL501"),
        ("buggy.py", 6, 8, "DL502"),
    ]
    load = rows[1]
    assert load["end_line"] == 5 and load["end_column"] == 26
    assert load["name"] == "torch-load-without-map-location"
    assert load["severity"] == "error"
    assert load["url"].endswith("/rules/DL501.md")
    assert load["fix"] == {
        "description": 'Add `map_location="cpu"`',
        "safe": False,
        "edits": [
            {"line": 5, "column": 13, "end_line": 5, "end_column": 26, "content": 'torch.load(p, map_location="cpu")'}
        ],
    }
    assert rows[0]["fix"] is None
    assert rows[0]["name"] == "syntax-error"
    assert rows[0]["url"].endswith("/rules/DL000.md")


def test_json_empty_is_an_empty_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = lint(tmp_path, monkeypatch, "--output-format", "json", "clean.py")
    assert result.stdout == "[]\n"
    assert result.exit_code == 0


def test_json_warning_severity() -> None:
    rows = json.loads(render("json", [finding(severity="warning")]))
    assert rows[0]["severity"] == "warning"


# -- sarif ----------------------------------------------------------------------------------


def test_sarif_validates_with_findings_fixes_and_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = lint(tmp_path, monkeypatch, "--output-format", "sarif", ".")
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["version"] == "2.1.0"
    run = document["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "devicelint" and driver["version"] == __version__
    rules = driver["rules"]
    assert [r["id"] for r in rules] == [r.code for r in all_rules()]
    dl501 = next(r for r in rules if r["id"] == "DL501")
    assert dl501["name"] == "torch-load-without-map-location"
    assert dl501["helpUri"].endswith("/rules/DL501.md")
    assert dl501["shortDescription"]["text"]
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["DL000", "DL501", "DL502"]
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
    location = results[1]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "buggy.py"
    assert location["region"] == {"startLine": 5, "startColumn": 13, "endLine": 5, "endColumn": 26}
    assert results[1]["level"] == "error"
    assert results[1]["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == (
        'torch.load(p, map_location="cpu")'
    )


def test_sarif_validates_when_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = lint(tmp_path, monkeypatch, "--output-format", "sarif", "clean.py")
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["runs"][0]["results"] == []


def test_sarif_validates_runtime_and_warning_findings() -> None:
    findings = [
        finding(severity="warning", module_path="encoder.layers.3"),
        finding("b\\win.py", 2, 1, fix=Fix("d", True, (Edit(2, 1, 2, 4, "new"),))),
    ]
    document = json.loads(render("sarif", findings))
    jsonschema.validate(document, SCHEMA)
    results = document["runs"][0]["results"]
    assert results[0]["level"] == "warning"
    assert results[0]["properties"] == {"modulePath": "encoder.layers.3"}
    assert results[1]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "b/win.py"


def test_schema_rejects_a_broken_document() -> None:
    # The vendored schema really constrains: the test above could not pass by accident.
    document = json.loads(render("sarif", [finding()]))
    document["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, SCHEMA)


# -- github ---------------------------------------------------------------------------------


def test_github_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = lint(tmp_path, monkeypatch, "--output-format", "github", ".")
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert (
        lines[0]
        == "::error file=b_syntax.py,line=2,col=5,endLine=2,endColumn=6,title=DL000::DL000 syntax error: '(' was never closed"
    )
    assert lines[1].startswith(
        "::error file=buggy.py,line=5,col=13,endLine=5,endColumn=26,title=DL501::DL501 `torch.load(...)` has no"
    )
    assert lines[2].startswith("::error file=buggy.py,line=6,col=8,endLine=6,endColumn=40,title=DL502::DL502 ")


def test_github_escaping_and_warnings() -> None:
    text = render("github", [finding("dir,x/a:b.py", message="50% done\nnext", severity="warning")])
    assert (
        text
        == "::warning file=dir%2Cx/a%3Ab.py,line=1,col=1,endLine=1,endColumn=4,title=DL501::DL501 50%25 done%0Anext\n"
    )


# -- text -----------------------------------------------------------------------------------


def test_text_format_with_carets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = lint(tmp_path, monkeypatch, ".")
    assert result.stdout.startswith(
        "b_syntax.py:2:5: DL000 syntax error: '(' was never closed\n  2 | x = (\n    |     ^\nbuggy.py:5:13: DL501 "
    )
    assert (
        '  6 |     if x.device == torch.device("cuda"):\n'
        "    |        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  = fix available: Compare `x.device.type == "cuda"`\n'
        "Found 3 problems in 2 files. 1 fixable with `--fix` (1 more with `--unsafe-fixes`).\n"
    ) in result.stdout
    assert "\x1b[" not in result.stdout  # no colour when not a terminal


def test_colour_only_when_asked() -> None:
    plain = render("text", [finding()], ReportContext(show_source=False))
    coloured = render("text", [finding()], ReportContext(show_source=False, color=True))
    assert plain == "a.py:1:1: DL501 msg\n"
    assert "\x1b[" in coloured and "DL501" in coloured


def test_multiline_finding_caret_runs_to_end_of_line() -> None:
    text = render(
        "text",
        [finding(line=1, column=5, end_line=3, end_column=2)],
        ReportContext(sources={"a.py": "x = f(\n  1,\n)\n"}),
    )
    assert text == "a.py:1:5: DL501 msg\n  1 | x = f(\n    |     ^^\n"


def test_summaries() -> None:
    assert summary([], 0) == "All clear: 0 files checked."
    assert summary([], 1) == "All clear: 1 file checked."
    assert summary([], 41) == "All clear: 41 files checked."
    one = [finding()]
    assert summary(one, 5) == "Found 1 problem in 1 file."
    three = [finding("a.py"), finding("b.py"), finding("b.py", 2, fix=Fix("d", True, ()))]
    assert summary(three, 5) == "Found 3 problems in 2 files. 1 fixable with `--fix`."
    unsafe = [*three, finding("c.py", fix=Fix("d", False, ()))]
    assert summary(unsafe, 5) == "Found 4 problems in 3 files. 1 fixable with `--fix` (1 more with `--unsafe-fixes`)."
    assert summary(unsafe[3:], 5) == "Found 1 problem in 1 file. 1 fixable with `--fix --unsafe-fixes`."
    assert statistics(three) == "    3  DL501  torch-load-without-map-location\n"


def test_every_format_sorts_by_path_line_column() -> None:
    shuffled = [
        finding("b.py", 1, 1),
        finding("a.py", 10, 1),
        finding("a.py", 2, 9),
        finding("a.py", 2, 3),
        finding("a/z.py", 1, 1),
    ]
    order = [("a.py", 2, 3), ("a.py", 2, 9), ("a.py", 10, 1), ("a/z.py", 1, 1), ("b.py", 1, 1)]
    rows = json.loads(render("json", shuffled))
    assert [(r["path"], r["line"], r["column"]) for r in rows] == order
    sarif = json.loads(render("sarif", shuffled))["runs"][0]["results"]
    assert [
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
        )
        for r in sarif
    ] == [(p, ln) for p, ln, _ in order]
    text = render("text", shuffled, ReportContext(show_source=False)).splitlines()
    assert [line.split(": ")[0] for line in text] == [f"{p}:{ln}:{c}" for p, ln, c in order]
    github = render("github", shuffled).splitlines()
    assert [line.split(",")[0] for line in github] == [f"::error file={p}" for p, _, _ in order]


@pytest.mark.skipif(not hasattr(__import__("os"), "openpty"), reason="needs a pseudo-terminal")
def test_colour_on_a_terminal_only(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "buggy.py").write_text(BUGGY)
    command = [sys.executable, "-m", "devicelint", "--no-cache", "--select", "DL501", "buggy.py"]
    controller, terminal = os.openpty()
    try:
        done = subprocess.run(command, cwd=tmp_path, stdout=terminal, stderr=subprocess.PIPE, timeout=120)
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(controller)
    on_terminal = b"".join(chunks).decode()
    assert done.returncode == 1
    assert "\x1b[" in on_terminal and "DL501" in on_terminal
    piped = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "\x1b[" not in piped.stdout and "DL501" in piped.stdout


def test_non_utf8_and_odd_file_names_are_valid_json_and_sarif() -> None:
    # A file name with a latin-1 byte reaches devicelint as a lone surrogate, which strict
    # JSON readers reject; spaces and `#` are not allowed raw in a SARIF URI.
    name = b"data/caf\xe9 #1.py".decode("utf-8", "surrogateescape")
    fix = Fix("Add", False, (Edit(1, 1, 1, 2, "x"),))
    findings = [finding(path=name, fix=fix)]
    as_json = render("json", findings)
    as_json.encode("utf-8")  # strict: no lone surrogates
    assert json.loads(as_json)[0]["path"] == "data/caf\\xe9 #1.py"
    document = json.loads(render("sarif", findings))
    jsonschema.validate(document, SCHEMA)
    result = document["runs"][0]["results"][0]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "data/caf%E9%20%231.py"
    assert result["fixes"][0]["artifactChanges"][0]["artifactLocation"]["uri"] == "data/caf%E9%20%231.py"
    render("github", findings).encode("utf-8")
    render("text", findings).encode("utf-8")
