"""The `devicelint` command line: every flag of `check`, the other commands, exit codes.

Each behaviour is checked in-process with click's CliRunner; the ones that depend on a real
process (stdin, the console script, worker pools, exit status) also as a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner

from devicelint import __version__
from devicelint.checks.torch_load_without_map_location import TorchLoadWithoutMapLocation
from devicelint.cli import cli

DL501_MESSAGE = (
    "`torch.load(...)` has no `map_location`: a checkpoint saved on a GPU fails on a CPU-only "
    'machine or lands on the saving GPU; pass `map_location=device` (or "cpu")'
)
DL502_MESSAGE = (
    '`x.device == torch.device("cuda")` is always False: `torch.device("cuda")` has no index '
    'and devices on a GPU are `cuda:0`, `cuda:1`...; compare `x.device.type == "cuda"` instead'
)
# DL501 on line 5 (unsafe fix), DL502 on line 6 (safe fix).
BUGGY = """import torch


def restore(p, x):
    state = torch.load(p)
    if x.device == torch.device("cuda"):
        return state
    return None
"""
CLEAN = """import torch


def restore(p, x):
    state = torch.load(p, map_location="cpu")
    if x.device.type == "cuda":
        return state
    return None
"""
LOAD_ONLY = "import torch\nstate = torch.load(p)\n"


def invoke(*args: str, input: str | bytes | None = None):  # type: ignore[no-untyped-def]
    """Run the CLI in-process; an uncaught exception fails the test instead of being hidden."""
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def run(*args: str, cwd: Path, input: str | None = None, script: bool = False) -> subprocess.CompletedProcess[str]:
    """Run devicelint as a real process (`python -m devicelint`, or the console script)."""
    if script:
        command = [str(Path(sys.executable).with_name("devicelint"))]
    else:
        command = [sys.executable, "-m", "devicelint"]
    done = subprocess.run([*command, *args], cwd=cwd, input=input, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def codes_of(json_text: str) -> list[tuple[str, int, str]]:
    return [(f["path"], f["line"], f["code"]) for f in json.loads(json_text)]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with one buggy and one clean file, as the working directory."""
    (tmp_path / "buggy.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text(CLEAN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- selection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        (["--select", "DL501"], ["DL501"]),
        (["--select", "DL502"], ["DL502"]),
        (["--select", "DL501,DL502"], ["DL501", "DL502"]),
        (["--select", "DL501", "--select", "DL502"], ["DL501", "DL502"]),
        (["--select", "DL5"], ["DL501", "DL502"]),
        (["--select", "dl50"], ["DL501", "DL502"]),
        (["--select", "torch-load-without-map-location"], ["DL501"]),
        (["--select", "ALL", "--ignore", "DL501"], ["DL502"]),
        (["--select", "DL5", "--ignore", "device-compared-to-string-or-bare-type"], ["DL501"]),
        (["--select", "DL501", "--extend-select", "DL502"], ["DL501", "DL502"]),
        (["--ignore", "DL5"], []),
        (["--ignore", "DL501"], ["DL502"]),
    ],
)
def test_select_ignore_extend_select(project: Path, selectors: list[str], expected: list[str]) -> None:
    result = invoke("check", "--no-cache", "--output-format", "json", *selectors, "buggy.py")
    assert [code for _, _, code in codes_of(result.stdout)] == expected
    assert result.exit_code == (1 if expected else 0)


def test_select_all_reports_both_proof_rules(project: Path) -> None:
    result = invoke("check", "--no-cache", "--output-format", "json", "--select", "ALL", "buggy.py")
    found = codes_of(result.stdout)
    assert ("buggy.py", 5, "DL501") in found and ("buggy.py", 6, "DL502") in found
    assert result.exit_code == 1


def test_extend_select_adds_to_config_select(project: Path) -> None:
    (project / "devicelint.toml").write_text('select = ["DL501"]\n')
    only = invoke("check", "--no-cache", "--output-format", "json", "buggy.py")
    assert [c for _, _, c in codes_of(only.stdout)] == ["DL501"]
    both = invoke("check", "--no-cache", "--output-format", "json", "--extend-select", "DL502", "buggy.py")
    assert [c for _, _, c in codes_of(both.stdout)] == ["DL501", "DL502"]
    # A command-line --select replaces the config's select.
    other = invoke("check", "--no-cache", "--output-format", "json", "--select", "DL502", "buggy.py")
    assert [c for _, _, c in codes_of(other.stdout)] == ["DL502"]


@pytest.mark.parametrize("flag", ["--select", "--ignore", "--extend-select"])
@pytest.mark.parametrize("selector", ["DL999", "DL9", "no-such-rule", "XYZ"])
def test_unknown_selector_is_a_usage_error(project: Path, flag: str, selector: str) -> None:
    result = invoke("check", "--no-cache", flag, selector, "buggy.py")
    assert result.exit_code == 2
    assert f"unknown rule selector {selector!r}" in result.stderr
    assert result.stdout == ""


def test_unknown_selector_subprocess(project: Path) -> None:
    done = run("--select", "DL9", "buggy.py", cwd=project)
    assert done.returncode == 2
    assert "devicelint: error: unknown rule selector 'DL9'" in done.stderr


# -- output formats, output file, exit codes --------------------------------------------------


def test_text_output_exact(project: Path) -> None:
    result = invoke("check", "--no-cache", "--select", "DL501", "buggy.py", "clean.py")
    assert result.stdout == (
        f"buggy.py:5:13: DL501 {DL501_MESSAGE}\n"
        "  5 |     state = torch.load(p)\n"
        "    |             ^^^^^^^^^^^^^\n"
        '  = unsafe fix available: Add `map_location="cpu"`\n'
        "Found 1 problem in 1 file. 1 fixable with `--fix --unsafe-fixes`.\n"
    )
    assert result.exit_code == 1


def test_clean_run_says_all_clear(project: Path) -> None:
    result = invoke("check", "--no-cache", "clean.py")
    assert result.stdout == "All clear: 1 file checked.\n"
    assert result.exit_code == 0
    (project / "more.py").write_text("x = 1\n")
    result = invoke("check", "--no-cache", "clean.py", "more.py")
    assert result.stdout == "All clear: 2 files checked.\n"


def test_no_show_source(project: Path) -> None:
    shown = invoke("check", "--no-cache", "--show-source", "--select", "DL502", "buggy.py")
    hidden = invoke("check", "--no-cache", "--no-show-source", "--select", "DL502", "buggy.py")
    assert '  6 |     if x.device == torch.device("cuda"):\n' in shown.stdout
    assert "    |        " + "^" * len('x.device == torch.device("cuda")') + "\n" in shown.stdout
    assert hidden.stdout == (
        f"buggy.py:6:8: DL502 {DL502_MESSAGE}\n"
        '  = fix available: Compare `x.device.type == "cuda"`\n'
        "Found 1 problem in 1 file. 1 fixable with `--fix`.\n"
    )


@pytest.mark.parametrize("fmt", ["json", "sarif", "github"])
def test_machine_formats_have_no_summary(project: Path, fmt: str) -> None:
    result = invoke("check", "--no-cache", "--output-format", fmt, "buggy.py")
    assert "Found" not in result.stdout and "All clear" not in result.stdout
    assert result.exit_code == 1


def test_github_format(project: Path) -> None:
    result = invoke("check", "--no-cache", "--output-format", "github", "--select", "DL501", "buggy.py")
    assert result.stdout == (
        f"::error file=buggy.py,line=5,col=13,endLine=5,endColumn=26,title=DL501::DL501 {DL501_MESSAGE}\n"
    )


def test_output_format_from_config_and_overridden(project: Path) -> None:
    (project / "devicelint.toml").write_text('output-format = "github"\n')
    from_config = invoke("check", "--no-cache", "buggy.py")
    assert from_config.stdout.startswith("::error file=buggy.py,line=5,")
    overridden = invoke("check", "--no-cache", "--output-format", "json", "buggy.py")
    assert json.loads(overridden.stdout)[0]["code"] == "DL501"


def test_bad_output_format_is_usage_error(project: Path) -> None:
    result = invoke("check", "--output-format", "xml", "buggy.py")
    assert result.exit_code == 2
    assert "xml" in result.stderr


@pytest.mark.parametrize("flag", ["-o", "--output-file"])
def test_output_file(project: Path, flag: str) -> None:
    result = invoke("check", "--no-cache", "--output-format", "json", flag, "report.json", "buggy.py")
    assert result.stdout == ""
    assert result.exit_code == 1
    assert [c for _, _, c in codes_of((project / "report.json").read_text())] == ["DL501", "DL502"]
    text = invoke("check", "--no-cache", "-o", "report.txt", "buggy.py")
    assert text.stdout == ""
    written = (project / "report.txt").read_text()
    assert written.startswith("buggy.py:5:13: DL501 ") and written.endswith(
        "Found 2 problems in 1 file. 1 fixable with `--fix` (1 more with `--unsafe-fixes`).\n"
    )
    assert "\x1b[" not in written


def test_exit_zero(project: Path) -> None:
    result = invoke("check", "--no-cache", "--exit-zero", "buggy.py")
    assert result.exit_code == 0
    assert "buggy.py:5:13: DL501" in result.stdout
    assert "Found 2 problems in 1 file." in result.stdout


def test_exit_zero_does_not_hide_errors(project: Path) -> None:
    result = invoke("check", "--no-cache", "--exit-zero", "buggy.py", "missing.py")
    assert result.exit_code == 2


def test_statistics(project: Path) -> None:
    (project / "second.py").write_text(LOAD_ONLY)
    result = invoke("check", "--no-cache", "--statistics", "buggy.py", "second.py")
    assert result.stdout == (
        "    2  DL501  torch-load-without-map-location\n"
        "    1  DL502  device-compared-to-string-or-bare-type\n"
        "Found 3 problems in 2 files. 1 fixable with `--fix` (2 more with `--unsafe-fixes`).\n"
    )
    assert result.exit_code == 1


def test_statistics_counts_the_files_the_prefilter_only_syntax_checked(project: Path) -> None:
    (project / "maths.py").write_text("def add(a, b):\n    return a + b\n")
    (project / "strings.py").write_text("NAME = 'x'\n")
    for cache in (["--no-cache"], [], []):  # cold, then a warm run answered from the cache
        result = invoke("check", *cache, "--statistics", "buggy.py", "maths.py", "strings.py")
        assert result.stdout.startswith(
            "    1  DL501  torch-load-without-map-location\n"
            "    1  DL502  device-compared-to-string-or-bare-type\n"
            "2 files hold no word a selected rule looks for: syntax-checked only, not analysed\n"
        )
    clean = invoke("check", "--no-cache", "--statistics", "buggy.py")
    assert "syntax-checked" not in clean.stdout


@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet(project: Path, flag: str) -> None:
    result = invoke("check", "--no-cache", flag, "--select", "DL501", "buggy.py")
    assert result.stdout.startswith(f"buggy.py:5:13: DL501 {DL501_MESSAGE}\n")
    assert "Found" not in result.stdout
    assert result.exit_code == 1
    clean = invoke("check", "--no-cache", flag, "clean.py")
    assert clean.stdout == "" and clean.exit_code == 0


def test_missing_path_is_exit_2_and_other_files_still_linted(project: Path) -> None:
    result = invoke("check", "--no-cache", "--output-format", "json", "buggy.py", "nothere.py")
    assert result.exit_code == 2
    assert "devicelint: error: nothere.py: no such file or directory" in result.stderr
    assert [c for _, _, c in codes_of(result.stdout)] == ["DL501", "DL502"]


def test_missing_path_subprocess(project: Path) -> None:
    done = run("nothere.py", cwd=project)
    assert done.returncode == 2
    assert "nothere.py: no such file or directory" in done.stderr
    assert "All clear" not in done.stdout


@pytest.mark.parametrize("cache", ["--no-cache", "--cache-dir=.c"])
def test_a_crashing_rule_is_exit_3_and_keeps_the_other_rules_findings(
    project: Path, monkeypatch: pytest.MonkeyPatch, cache: str
) -> None:
    def boom(self, ctx):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")
        yield  # pragma: no cover

    (project / "second.py").write_text(BUGGY.replace("torch.load(p)", "torch.load(p, 'cpu')"))
    monkeypatch.setattr(TorchLoadWithoutMapLocation, "check", boom)
    for _ in range(2):  # a file a rule failed on is not cached as if it were fine
        result = invoke("check", cache, "-j", "1", "--output-format", "json", "buggy.py", "second.py")
        assert result.exit_code == 3
        assert (
            result.stderr.count(
                "devicelint: internal error: DL501 crashed on buggy.py: RuntimeError: boom. This is a bug in devicelint"
            )
            == 1
        )
        assert "DL501 crashed on second.py" in result.stderr
        assert "Traceback" not in result.stderr + result.stdout
        # DL502 still reports both files; nothing is blamed on the files as a syntax error.
        assert sorted(codes_of(result.stdout)) == [("buggy.py", 6, "DL502"), ("second.py", 6, "DL502")]


# -- config flags ---------------------------------------------------------------------------


def test_config_file_flag(project: Path) -> None:
    elsewhere = project / "conf" / "settings.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text('ignore = ["DL501"]\n')
    result = invoke("check", "--no-cache", "--config", str(elsewhere), "--output-format", "json", "buggy.py")
    assert [c for _, _, c in codes_of(result.stdout)] == ["DL502"]
    missing = invoke("check", "--config", "nope.toml", "buggy.py")
    assert missing.exit_code == 2
    assert "nope.toml" in missing.stderr


def test_isolated_ignores_config(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.devicelint]\nignore = ["DL501", "DL502"]\n')
    assert invoke("check", "--no-cache", "buggy.py").exit_code == 0
    result = invoke("check", "--no-cache", "--isolated", "--output-format", "json", "buggy.py")
    assert [c for _, _, c in codes_of(result.stdout)] == ["DL501", "DL502"]
    (project / "pyproject.toml").write_text("[tool.devicelint]\nbogus = 1\n")
    assert invoke("check", "--no-cache", "buggy.py").exit_code == 2
    assert invoke("check", "--no-cache", "--isolated", "buggy.py").exit_code == 1


def test_force_exclude(project: Path) -> None:
    (project / "build").mkdir()
    shutil.copy(project / "buggy.py", project / "build" / "gen.py")
    (project / "devicelint.toml").write_text('extend-exclude = ["skipme.py"]\n')
    shutil.copy(project / "buggy.py", project / "skipme.py")
    named = invoke("check", "--no-cache", "--output-format", "json", "build/gen.py", "skipme.py")
    assert sorted({p for p, _, _ in codes_of(named.stdout)}) == ["build/gen.py", "skipme.py"]
    forced = invoke("check", "--no-cache", "--force-exclude", "build/gen.py", "skipme.py", "buggy.py")
    assert "build/gen.py" not in forced.stdout and "skipme.py" not in forced.stdout
    assert "buggy.py:5:13: DL501" in forced.stdout
    only_excluded = invoke("check", "--no-cache", "--force-exclude", "build/gen.py")
    assert only_excluded.exit_code == 0
    assert "no Python files to lint" in only_excluded.stderr


# -- stdin ----------------------------------------------------------------------------------


def test_stdin_with_filename(project: Path) -> None:
    result = invoke("check", "--no-cache", "--select", "DL501", "--stdin-filename", "pkg/mod.py", "-", input=LOAD_ONLY)
    assert result.stdout.startswith(f"pkg/mod.py:2:9: DL501 {DL501_MESSAGE}\n  2 | state = torch.load(p)\n")
    assert result.stdout.endswith("Found 1 problem in 1 file. 1 fixable with `--fix --unsafe-fixes`.\n")
    assert result.exit_code == 1
    clean = invoke("check", "--no-cache", "--stdin-filename", "pkg/mod.py", "-", input=CLEAN)
    assert clean.exit_code == 0


def test_stdin_per_file_ignores_use_the_stdin_filename(project: Path) -> None:
    (project / "devicelint.toml").write_text('[per-file-ignores]\n"scripts/*.py" = ["DL501"]\n')
    ignored = invoke("check", "--no-cache", "--stdin-filename", "scripts/run.py", "-", input=LOAD_ONLY)
    assert ignored.exit_code == 0
    reported = invoke("check", "--no-cache", "--stdin-filename", "src/run.py", "-", input=LOAD_ONLY)
    assert reported.exit_code == 1


def test_stdin_subprocess(project: Path) -> None:
    done = run("-", "--stdin-filename", "piped.py", "--output-format", "json", cwd=project, input=BUGGY)
    assert done.returncode == 1
    assert codes_of(done.stdout) == [("piped.py", 5, "DL501"), ("piped.py", 6, "DL502")]
    nameless = run("check", "-", "--select", "DL501", "--no-show-source", cwd=project, input=LOAD_ONLY)
    assert nameless.stdout.startswith("-:2:9: DL501 ")
    syntax = run("-", "--stdin-filename", "bad.py", cwd=project, input="def f(:\n")
    assert syntax.returncode == 1
    assert "bad.py:1:7: DL000 syntax error" in syntax.stdout


def test_stdin_fix_writes_fixed_source_to_stdout(project: Path) -> None:
    done = run("-", "--stdin-filename", "piped.py", "--fix", "--unsafe-fixes", cwd=project, input=BUGGY)
    assert done.stdout == CLEAN
    assert done.returncode == 0
    safe_only = run("-", "--stdin-filename", "piped.py", "--fix", cwd=project, input=BUGGY)
    assert safe_only.stdout == BUGGY.replace('x.device == torch.device("cuda")', 'x.device.type == "cuda"')
    assert "piped.py:5:13: DL501" in safe_only.stderr
    assert safe_only.returncode == 1


# -- jobs -----------------------------------------------------------------------------------


def _many_files(root: Path) -> None:
    for i in range(12):
        sub = root / f"pkg{i % 3}"
        sub.mkdir(exist_ok=True)
        (sub / f"m{i:02d}.py").write_text(BUGGY if i % 2 else LOAD_ONLY + "\n" * i + "torch.load(q)\n")
    (root / "pkg1" / "broken.py").write_text("def f(:\n")


def test_jobs_do_not_change_output(project: Path) -> None:
    _many_files(project)
    outputs = {}
    for fmt in ("text", "json"):
        for jobs in ("1", "2"):
            result = invoke("check", "--no-cache", "-j", jobs, "--output-format", fmt, ".")
            assert result.exit_code == 1
            outputs[fmt, jobs] = result.stdout
        assert outputs[fmt, "1"] == outputs[fmt, "2"]
    rows = [(f["path"], f["line"], f["column"]) for f in json.loads(outputs["json", "1"])]
    assert rows == sorted(rows)
    assert len(rows) == 6 * 2 + 6 * 2 + 1 + 2  # BUGGY x6, LOAD_ONLY x6, broken, buggy.py


def test_jobs_subprocess(project: Path) -> None:
    _many_files(project)
    one = run("--no-cache", "-j", "1", ".", cwd=project)
    two = run("--no-cache", "--jobs", "2", ".", cwd=project)
    assert one.returncode == two.returncode == 1
    assert one.stdout == two.stdout
    assert one.stdout.endswith(
        "Found 27 problems in 14 files. 7 fixable with `--fix` (19 more with `--unsafe-fixes`).\n"
    )


def test_jobs_must_be_positive(project: Path) -> None:
    assert invoke("check", "-j", "0", "buggy.py").exit_code == 2


# -- fixes ----------------------------------------------------------------------------------


def test_fix_applies_safe_fixes_only(project: Path) -> None:
    result = invoke("check", "--no-cache", "--fix", "buggy.py")
    after = (project / "buggy.py").read_text()
    assert after == BUGGY.replace('x.device == torch.device("cuda")', 'x.device.type == "cuda"')
    assert result.exit_code == 1  # the unsafe DL501 remains
    assert "DL502" not in result.stdout
    assert "buggy.py:5:13: DL501" in result.stdout
    assert "Fixed 1 problem. Found 1 remaining problem in 1 file." in result.stdout


def test_unsafe_fixes_twice_changes_nothing(project: Path) -> None:
    first = invoke("check", "--no-cache", "--fix", "--unsafe-fixes", "buggy.py")
    assert first.exit_code == 0
    assert (project / "buggy.py").read_text() == CLEAN
    cst.parse_module((project / "buggy.py").read_text())
    second = invoke("check", "--no-cache", "--fix", "--unsafe-fixes", "buggy.py")
    assert second.exit_code == 0
    assert (project / "buggy.py").read_text() == CLEAN


def test_show_fixes_lists_what_was_fixed(project: Path) -> None:
    would = invoke("check", "--no-cache", "--diff", "--unsafe-fixes", "--show-fixes", "buggy.py")
    assert would.stdout.startswith("--- a/buggy.py\n")  # stdout: the diff alone; the rest on stderr
    assert "Would fix 2 problems:\n- buggy.py:\n    1 × DL501 (torch-load-without-map-location)\n" in would.stderr
    assert "    1 × DL502 (device-compared-to-string-or-bare-type)\n" in would.stderr
    assert "Would fix" not in would.stdout and "DL501" not in would.stdout
    assert (project / "buggy.py").read_text() == BUGGY
    done = invoke("check", "--no-cache", "--fix", "--show-fixes", "buggy.py")
    assert "Fixed 1 problem:\n- buggy.py:\n    1 × DL502 (device-compared-to-string-or-bare-type)\n" in done.stdout
    assert done.stdout.endswith(
        "Fixed 1 problem. Found 1 remaining problem in 1 file. 1 fixable with `--fix --unsafe-fixes`.\n"
    )
    again = invoke("check", "--no-cache", "--fix", "--show-fixes", "--output-format", "json", "buggy.py")
    assert json.loads(again.stdout)[0]["code"] == "DL501"  # the listing goes to stderr with JSON
    assert "No problems fixed.\n" in again.stderr


def test_unsafe_fixes_without_fix_changes_nothing(project: Path) -> None:
    result = invoke("check", "--no-cache", "--unsafe-fixes", "buggy.py")
    assert result.exit_code == 1
    assert (project / "buggy.py").read_text() == BUGGY


def test_diff_does_not_write(project: Path) -> None:
    safe = invoke("check", "--no-cache", "--diff", "buggy.py")
    assert (project / "buggy.py").read_text() == BUGGY
    assert "--- a/buggy.py\n+++ b/buggy.py\n" in safe.stdout
    assert '-    if x.device == torch.device("cuda"):\n+    if x.device.type == "cuda":\n' in safe.stdout
    assert "+    state = torch.load(p, map_location" not in safe.stdout  # unsafe: not without --unsafe-fixes
    assert safe.exit_code == 1
    unsafe = invoke("check", "--no-cache", "--diff", "--unsafe-fixes", "buggy.py")
    assert '+    state = torch.load(p, map_location="cpu")\n' in unsafe.stdout
    assert (project / "buggy.py").read_text() == BUGGY
    assert unsafe.exit_code == 1


def test_fix_keeps_encoding_and_bom(project: Path) -> None:
    latin = '# -*- coding: latin-1 -*-\nimport torch\nname = "café"\nstate = torch.load(p)\n'
    (project / "latin.py").write_bytes(latin.encode("latin-1"))
    (project / "bom.py").write_bytes(b"\xef\xbb\xbf" + LOAD_ONLY.encode())
    (project / "crlf.py").write_bytes(LOAD_ONLY.replace("\n", "\r\n").encode())
    result = invoke("check", "--no-cache", "--fix", "--unsafe-fixes", "latin.py", "bom.py", "crlf.py")
    assert result.exit_code == 0, result.stdout
    assert (project / "latin.py").read_bytes() == latin.replace(
        "torch.load(p)", 'torch.load(p, map_location="cpu")'
    ).encode("latin-1")
    assert (project / "bom.py").read_bytes() == b"\xef\xbb\xbf" + LOAD_ONLY.replace(
        "torch.load(p)", 'torch.load(p, map_location="cpu")'
    ).encode()
    assert (project / "crlf.py").read_bytes() == LOAD_ONLY.replace(
        "torch.load(p)", 'torch.load(p, map_location="cpu")'
    ).replace("\n", "\r\n").encode()


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_fix_keeps_file_mode(project: Path) -> None:
    target = project / "buggy.py"
    target.chmod(0o750)
    invoke("check", "--no-cache", "--fix", "--unsafe-fixes", "buggy.py")
    assert target.read_text() == CLEAN
    assert target.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in project.iterdir()) == ["buggy.py", "clean.py"]  # no temp files left


def test_fix_subprocess(project: Path) -> None:
    done = run("--no-cache", "--fix", "--unsafe-fixes", "buggy.py", cwd=project)
    assert done.returncode == 0
    assert done.stdout == "Fixed 2 problems. All clear: 1 file checked.\n"
    assert (project / "buggy.py").read_text() == CLEAN


# -- cache ----------------------------------------------------------------------------------


def test_cache_dir_and_clean(project: Path) -> None:
    first = invoke("check", "--cache-dir", "mycache", "--output-format", "json", "buggy.py")
    assert list((project / "mycache").rglob("*.json"))
    second = invoke("check", "--cache-dir", "mycache", "--output-format", "json", "buggy.py")
    assert second.stdout == first.stdout and second.exit_code == 1
    # A changed file is linted again, not served from the cache.
    (project / "buggy.py").write_text(CLEAN)
    assert invoke("check", "--cache-dir", "mycache", "buggy.py").exit_code == 0
    removed = invoke("clean", "--cache-dir", "mycache")
    assert removed.stdout == "Removed mycache\n"
    assert not (project / "mycache").exists()
    assert invoke("clean", "--cache-dir", "mycache").stdout == "No cache at mycache\n"
    warm = run("--cache-dir", "sub/cache", "buggy.py", cwd=project)
    assert warm.returncode == 0 and (project / "sub" / "cache").is_dir()
    cleaned = run("clean", "--cache-dir", "sub/cache", cwd=project)
    assert cleaned.stdout == "Removed sub/cache\n" and not (project / "sub" / "cache").exists()


def test_default_cache_and_no_cache(project: Path) -> None:
    invoke("check", "--no-cache", "buggy.py")
    assert not (project / ".devicelint_cache").exists()
    invoke("check", "buggy.py")
    assert (project / ".devicelint_cache").is_dir()
    assert invoke("clean").stdout == "Removed .devicelint_cache\n"
    assert not (project / ".devicelint_cache").exists()


def test_cache_hit_keeps_findings_per_selection(project: Path) -> None:
    invoke("check", "--select", "DL501", "buggy.py")
    result = invoke("check", "--select", "DL502", "--output-format", "json", "buggy.py")
    assert [c for _, _, c in codes_of(result.stdout)] == ["DL502"]


# -- the other commands ---------------------------------------------------------------------


def test_bare_path_means_check(project: Path) -> None:
    assert invoke("buggy.py", "--no-cache").stdout == invoke("check", "--no-cache", "buggy.py").stdout
    short = run("--no-cache", "--output-format", "json", "buggy.py", cwd=project, script=True)
    full = run("check", "--no-cache", "--output-format", "json", "buggy.py", cwd=project)
    assert short.stdout == full.stdout
    assert short.returncode == full.returncode == 1


def test_no_path_lints_the_current_folder(project: Path) -> None:
    result = invoke("check", "--no-cache", "--output-format", "json")
    assert sorted({p for p, _, _ in codes_of(result.stdout)}) == ["buggy.py"]


def test_version() -> None:
    assert invoke("--version").stdout == f"devicelint, version {__version__}\n"
    done = subprocess.run([sys.executable, "-m", "devicelint", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout == f"devicelint, version {__version__}\n"


def test_rules_table() -> None:
    from devicelint.registry import all_rules

    result = invoke("rules")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CODE", "NAME", "DEFAULT", "FIX", "SUMMARY"]
    assert len(lines) == 1 + len(all_rules()) + 2
    row = next(line for line in lines if line.startswith("DL501"))
    assert row.split()[:4] == ["DL501", "torch-load-without-map-location", "on", "unsafe"]
    assert next(line for line in lines if line.startswith("DL502")).split()[3] == "safe/unsafe"
    assert next(line for line in lines if line.startswith("DL201")).split()[3] == "-"
    with_fix = sum(1 for r in all_rules() if r.fix_availability != "none")
    assert lines[-1].startswith(f"{with_fix} of {len(all_rules())} rules offer a fix")
    assert row.endswith(TorchLoadWithoutMapLocation.summary)
    listed = json.loads(invoke("rules", "--output-format", "json").stdout)
    assert [r["code"] for r in listed] == [r.code for r in all_rules()]
    assert set(listed[0]) == {"code", "name", "default", "severity", "fix", "summary"}


@pytest.mark.parametrize("key", ["DL501", "dl501", "torch-load-without-map-location"])
def test_rule_reference(key: str) -> None:
    from devicelint.docs import rule_page

    result = invoke("rule", key)
    assert result.exit_code == 0
    assert result.stdout == rule_page(TorchLoadWithoutMapLocation)
    assert result.stdout.startswith("# DL501 torch-load-without-map-location\n")
    for section in (
        "## What it does",
        "## Why it is a bug on a GPU",
        "## Example",
        "## Use instead",
        "## Fix safety",
        "## Known limits",
    ):
        assert section in result.stdout


def test_unknown_rule_reference() -> None:
    result = invoke("rule", "DL999")
    assert result.exit_code == 2
    assert "unknown rule 'DL999'" in result.stderr


def test_rule_subprocess(tmp_path: Path) -> None:
    done = run("rule", "device-compared-to-string-or-bare-type", cwd=tmp_path)
    assert done.stdout.startswith("# DL502 device-compared-to-string-or-bare-type\n")
    assert done.returncode == 0
    assert run("rules", cwd=tmp_path).returncode == 0


def test_unknown_option_is_usage_error(project: Path) -> None:
    result = invoke("check", "--no-such-flag", "buggy.py")
    assert result.exit_code == 2
    assert "No such option" in result.stderr


def test_output_file_that_cannot_be_written_is_exit_2(project: Path) -> None:
    done = run("--no-cache", "-o", "no/such/folder/report.txt", "buggy.py", cwd=project)
    assert done.returncode == 2
    assert done.stderr == "devicelint: error: cannot write no/such/folder/report.txt: No such file or directory\n"


def test_stdin_diff_and_bad_bytes(project: Path) -> None:
    diff = invoke("check", "--no-cache", "--diff", "--unsafe-fixes", "--stdin-filename", "s.py", "-", input=LOAD_ONLY)
    assert diff.stdout.startswith(
        "--- a/s.py\n+++ b/s.py\n@@ -1,2 +1,2 @@\n import torch\n-state = torch.load(p)\n"
        '+state = torch.load(p, map_location="cpu")\n'
    )
    assert diff.exit_code == 1
    latin = invoke("check", "--no-cache", "--no-show-source", "-", input=b"x = 'caf\xe9'\n")
    assert latin.stdout.startswith("-:1:9: DL000 cannot decode the file as utf-8: byte 0xe9 is invalid;")
    assert latin.exit_code == 1


def test_fix_after_a_form_feed_line(project: Path) -> None:
    source = "import torch\n\x0c\ndef f(p, q):\n    s = 'a\u2028b'\n    return torch.load(p), torch.load(q)\n"
    (project / "ff.py").write_text(source)
    result = invoke("check", "--no-cache", "--fix", "--unsafe-fixes", "ff.py")
    assert result.exit_code == 0, result.stdout
    assert (project / "ff.py").read_text() == source.replace("load(p)", 'load(p, map_location="cpu")').replace(
        "load(q)", 'load(q, map_location="cpu")'
    )


def test_source_line_is_read_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same relative path in two folders, in one process: each report shows its own file.
    for name, line in (("one", "state = torch.load(p)"), ("two", "other = torch.load(q)")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text(f"import torch\n{line}\n")
        monkeypatch.chdir(tmp_path / name)
        result = invoke("check", "--no-cache", "--select", "DL501", "m.py")
        assert f"  2 | {line}\n" in result.stdout


FLAG_SETS = [
    ["--select", "DL5", "--output-format", "json"],
    ["--ignore", "DL502", "--extend-select", "torch-load-without-map-location", "--output-format", "sarif"],
    ["--output-format", "github", "--exit-zero"],
    ["--no-show-source", "-j", "2"],
    ["--show-source", "--statistics"],
    ["-q", "--isolated", "--force-exclude"],
    ["--diff", "--unsafe-fixes"],
]


def test_subprocess_matches_in_process_for_every_flag(project: Path) -> None:
    """One real process per flag set, each printing what the in-process run prints."""
    (project / "second.py").write_text(LOAD_ONLY)
    for flags in FLAG_SETS:
        args = ["check", "--no-cache", *flags, "buggy.py", "clean.py", "second.py"]
        in_process = invoke(*args)
        done = run(*args, cwd=project, script=flags[0] == "-q")
        assert (done.returncode, done.stdout) == (in_process.exit_code, in_process.stdout), flags
        assert done.returncode == (0 if "--exit-zero" in flags else 1), flags
    assert (project / "buggy.py").read_text() == BUGGY  # --diff wrote nothing
