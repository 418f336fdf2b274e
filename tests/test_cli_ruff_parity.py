"""What a Ruff user expects of the command line: mistyped commands, fix-only runs, colour,
settings and file listings, and the report formats CI systems read."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from devicelint.cli import cli

BUGGY = 'import torch\n\n\ndef restore(p, x):\n    state = torch.load(p)\n    if x.device == torch.device("cuda"):\n        return state\n'


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "buggy.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)


def test_a_mistyped_command_is_refused_with_the_closest_one(project: Path) -> None:
    for typed, meant in (("rul", "rule"), ("chek", "check"), ("cleen", "clean")):
        result = invoke(typed, "DL101")
        assert result.exit_code == 2
        assert f"unknown command {typed!r} (and no such file); did you mean `devicelint {meant}`?" in result.stderr
    # A real path named like a command is linted, and an unknown name far from any command is a missing path.
    (project / "rules").mkdir()
    (project / "rules" / "a.py").write_text(BUGGY)
    assert invoke("rules").stdout.startswith("CODE")  # still the `rules` command
    assert "rules/a.py:5:13: DL501" in invoke("./rules", "--no-cache", "-q").stdout
    assert "zzz: no such file or directory" in invoke("zzz").stderr


def test_fix_only_reports_what_was_fixed_and_exit_non_zero_on_fix(project: Path) -> None:
    done = invoke("check", "--no-cache", "--fix-only", "buggy.py")
    assert done.exit_code == 0  # the unsafe DL501 stays, unreported, as in Ruff
    assert done.stdout == "Fixed 1 problem. All clear: 1 file checked.\n"
    assert 'x.device.type == "cuda"' in (project / "buggy.py").read_text()
    (project / "buggy.py").write_text(BUGGY)
    again = invoke("check", "--no-cache", "--fix", "--exit-non-zero-on-fix", "--select", "DL502", "buggy.py")
    assert again.exit_code == 1 and again.stdout.endswith("Fixed 1 problem. All clear: 1 file checked.\n")
    assert (
        invoke("check", "--no-cache", "--fix", "--exit-non-zero-on-fix", "--select", "DL502", "buggy.py").exit_code == 0
    )


def test_colour_follows_the_option_then_no_color_and_force_color(project: Path) -> None:
    def coloured(*args: str, env: dict[str, str] | None = None) -> bool:
        return "\x1b[" in invoke("check", "--no-cache", *args, "buggy.py", env=env).stdout

    assert not coloured()  # not a terminal
    assert coloured("--color", "always")
    assert not coloured("--color", "never", env={"FORCE_COLOR": "1"})
    assert coloured(env={"FORCE_COLOR": "1"})
    assert not coloured(env={"FORCE_COLOR": "1", "NO_COLOR": "1"})


def test_show_files_and_show_settings(project: Path) -> None:
    (project / "devicelint.toml").write_text('ignore = ["DL502"]\nextend-exclude = ["skip/"]\n')
    (project / "skip").mkdir()
    (project / "skip" / "b.py").write_text(BUGGY)
    files = invoke("check", "--show-files", ".")
    assert (files.exit_code, files.stdout) == (0, "buggy.py\n")
    settings = invoke("check", "--show-settings", ".")
    assert settings.exit_code == 0
    rows = {line[:17].strip(): line[19:] for line in settings.stdout.splitlines()}
    assert rows["config file"] == str(project / "devicelint.toml")
    assert "DL501" in rows["rules"] and "DL502" not in rows["rules"]
    assert rows["extend-exclude"] == "skip/"


def test_both_config_files_warn_and_say_which_wins(project: Path) -> None:
    (project / "devicelint.toml").write_text('ignore = ["DL501"]\n')
    (project / "pyproject.toml").write_text('[tool.devicelint]\nignore = ["DL502"]\n')
    result = invoke("check", "--no-cache", "buggy.py")
    assert "both configure devicelint; devicelint.toml wins and the table is ignored" in result.stderr
    assert "DL502" in result.stdout and "DL501" not in result.stdout


def test_github_output_points_notebook_findings_at_the_notebook() -> None:
    result = invoke(
        "check", "--no-cache", "--output-format", "github", str(FIXTURES / "notebooks" / "bad_resume.ipynb")
    )
    first = result.stdout.splitlines()[0]
    assert ",line=1,col=1,title=DL501::DL501 cell 4, line 1:9: `torch.load(...)`" in first


def test_ci_formats(project: Path) -> None:
    def output(fmt: str) -> str:
        return invoke("check", "--no-cache", "--output-format", fmt, "buggy.py").stdout

    lines = [json.loads(line) for line in output("json-lines").splitlines()]
    assert output("concise") == "".join(
        f"buggy.py:{r['line']}:{r['column']}: {r['code']} {r['message']}\n" for r in lines
    ) + ("Found 2 problems in 1 file. 1 fixable with `--fix` (1 more with `--unsafe-fixes`).\n")
    assert [(r["line"], r["code"]) for r in lines] == [(5, "DL501"), (6, "DL502")]
    assert lines == json.loads(output("json"))
    assert [line.split(" ", 2)[:2] for line in output("pylint").splitlines()] == [
        ["buggy.py:5:", "[DL501]"],
        ["buggy.py:6:", "[DL502]"],
    ]
    assert "  5 |     state = torch.load(p)" in output("full")
    suites = ElementTree.fromstring(output("junit"))
    assert (suites.tag, suites.get("tests"), suites.get("failures")) == ("testsuites", "2", "2")
    cases = suites.findall("./testsuite/testcase")
    assert [(c.get("classname"), c.get("line"), c.find("failure").get("type")) for c in cases] == [
        ("buggy.py", "5", "DL501"),
        ("buggy.py", "6", "DL502"),
    ]
    quality = json.loads(output("gitlab"))
    assert [set(q) for q in quality] == [{"description", "check_name", "fingerprint", "severity", "location"}] * 2
    assert [(q["check_name"], q["severity"], q["location"]) for q in quality] == [
        ("DL501", "major", {"path": "buggy.py", "lines": {"begin": 5, "end": 5}}),
        ("DL502", "major", {"path": "buggy.py", "lines": {"begin": 6, "end": 6}}),
    ]
    assert len({q["fingerprint"] for q in quality}) == 2
    assert json.loads(output("gitlab")) == quality  # fingerprints are stable across runs


def test_add_noqa_marks_every_finding_once_and_the_run_is_then_clean(project: Path) -> None:
    (project / "legacy.py").write_bytes(
        b"import torch\n"
        b"state = torch.load(p)\r\n"
        b"other = torch.load(q)  # noqa: E501\n"
        b"third = torch.load(r)  # keep\n"
        b'msg = """\n%s""" % torch.load(s)\n'
        b"x = 1 + \\\n    torch.load(t)\n"
        b"blanket = torch.load(u)  # noqa\n"
    )
    first = invoke("check", "--no-cache", "--add-noqa", "legacy.py")
    assert (first.exit_code, first.stdout) == (0, "Added 5 noqa directives.\n")
    assert (project / "legacy.py").read_bytes() == (
        b"import torch\n"
        b"state = torch.load(p)  # noqa: DL501\r\n"
        b"other = torch.load(q)  # noqa: DL501, E501\n"
        b"third = torch.load(r)  # keep  # noqa: DL501\n"
        b'msg = """\n%s""" % torch.load(s)  # noqa: DL501\n'
        b"x = 1 + \\\n    torch.load(t)  # noqa: DL501\n"
        b"blanket = torch.load(u)  # noqa\n"
    )
    assert invoke("check", "--no-cache", "legacy.py").stdout == "All clear: 1 file checked.\n"
    assert invoke("check", "--no-cache", "--add-noqa", "legacy.py").stdout == "Added 0 noqa directives.\n"


def test_command_line_overrides_of_the_config(project: Path) -> None:
    (project / "devicelint.toml").write_text('ignore = ["DL502"]\n')
    # Not `tests/`: DL501 leaves test modules alone (they reload what they just saved).
    (project / "scripts").mkdir()
    (project / "scripts" / "t.py").write_text(BUGGY)

    def codes(*args: str) -> list[tuple[str, str]]:
        done = invoke("check", "--no-cache", "--output-format", "json", *args, ".")
        return sorted((r["path"], r["code"]) for r in json.loads(done.stdout))

    assert codes() == [("buggy.py", "DL501"), ("scripts/t.py", "DL501")]
    # KEY=VALUE in TOML syntax replaces that key; a file path still names a config file.
    assert codes("--config", 'ignore = ["DL501"]') == [("buggy.py", "DL502"), ("scripts/t.py", "DL502")]
    assert codes("--per-file-ignores", "scripts/*:DL501") == [("buggy.py", "DL501")]
    assert codes("--extend-exclude", "scripts/") == [("buggy.py", "DL501")]
    settings = invoke("check", "--torch-version", "2.3", "--show-settings", ".").stdout
    assert "torch-version      2.3\n" in settings
    bad = invoke("check", "--config", 'ignore = ["DL999"]', ".")
    assert bad.exit_code == 2 and "--config: `ignore` has an unknown rule selector 'DL999'" in bad.stderr
    assert "expected GLOB:CODES" in invoke("check", "--per-file-ignores", "scripts", ".").stderr


def test_each_file_takes_the_nearest_config_above_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `devicelint newbie/proj/` from the parent folder once ignored newbie/proj/pyproject.toml.
    project = tmp_path / "newbie" / "proj"
    (project / "skip").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    for path in (project / "a.py", project / "skip" / "b.py", tmp_path / "other" / "c.py"):
        path.write_text(BUGGY)
    (project / "pyproject.toml").write_text(
        '[tool.devicelint]\nignore = ["DL502"]\nextend-exclude = ["skip/"]\nper-file-ignores = { "a.py" = ["DL000"] }\n'
    )
    monkeypatch.chdir(tmp_path)

    def codes(*args: str) -> list[tuple[str, str]]:
        done = invoke("check", "--no-cache", "--output-format", "json", *args)
        assert done.exit_code in (0, 1), done.output
        return sorted((r["path"], r["code"]) for r in json.loads(done.stdout))

    expected_project = [("newbie/proj/a.py", "DL501")]
    assert codes("newbie/proj/") == expected_project
    assert codes(".") == [*expected_project, ("other/c.py", "DL501"), ("other/c.py", "DL502")]
    # Command-line overrides replace that key in every project's config; --isolated ignores them all.
    assert codes("--config", 'ignore = ["DL501"]', ".") == [("newbie/proj/a.py", "DL502"), ("other/c.py", "DL502")]
    assert ("newbie/proj/skip/b.py", "DL502") in codes("--isolated", ".")


def test_show_settings_shows_the_settings_of_the_file_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.py").write_text(BUGGY)
    (tmp_path / "b.py").write_text(BUGGY)
    (project / "devicelint.toml").write_text('ignore = ["DL502"]\n')
    monkeypatch.chdir(tmp_path)
    inner = invoke("check", "--show-settings", "proj/a.py").stdout
    assert (
        f"config file        {project / 'devicelint.toml'}\n" in inner
        and "DL502" not in inner.split("rules", 1)[1].splitlines()[0]
    )
    outer = invoke("check", "--show-settings", "b.py").stdout
    assert "config file        (defaults: no config file found)\n" in outer
