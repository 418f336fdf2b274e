"""Configuration discovery and validation, per-file ignores, excludes and file discovery."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from devicelint.cli import cli
from devicelint.config import Config, ConfigError, find_config, load_config
from devicelint.selection import applies_to_torch

BUGGY = "import torch\nstate = torch.load(p)\n"  # DL501 at 2:9


def lint(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["check", "--no-cache", *args], catch_exceptions=False)


def paths_found(*args: str) -> list[str]:
    result = lint("--output-format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return sorted({f["path"] for f in json.loads(result.stdout)})


def write(path: Path, text: str = BUGGY) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- discovery ------------------------------------------------------------------------------


def test_pyproject_found_upward_from_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pyproject.toml", '[tool.devicelint]\nignore = ["DL501"]\n')
    sub = tmp_path / "src" / "pkg"
    write(sub / "a.py")
    monkeypatch.chdir(sub)
    assert find_config(sub) == tmp_path / "pyproject.toml"
    assert lint("a.py").exit_code == 0
    assert lint("--isolated", "a.py").exit_code == 1


def test_pyproject_without_table_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "devicelint.toml", 'ignore = ["DL501"]\n')
    write(tmp_path / "inner" / "pyproject.toml", '[project]\nname = "x"\n[tool.other]\na = 1\n')
    write(tmp_path / "inner" / "a.py")
    monkeypatch.chdir(tmp_path / "inner")
    assert find_config(Path.cwd()) == tmp_path / "devicelint.toml"
    assert lint("a.py").exit_code == 0


def test_nearest_config_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pyproject.toml", '[tool.devicelint]\nignore = ["DL501"]\n')
    write(tmp_path / "inner" / "pyproject.toml", '[tool.devicelint]\nselect = ["DL501"]\n')
    write(tmp_path / "inner" / "a.py")
    write(tmp_path / "b.py")
    monkeypatch.chdir(tmp_path / "inner")
    assert lint("a.py").exit_code == 1
    # From the parent folder too, a file takes the config nearest above it (as Ruff does).
    monkeypatch.chdir(tmp_path)
    assert lint("inner/a.py").exit_code == 1
    assert lint("b.py").exit_code == 0


def test_devicelint_toml_before_pyproject_in_same_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pyproject.toml", '[tool.devicelint]\nselect = ["DL501"]\n')
    write(tmp_path / "devicelint.toml", 'ignore = ["DL501"]\n')
    write(tmp_path / "a.py")
    monkeypatch.chdir(tmp_path)
    assert lint("a.py").exit_code == 0


def test_devicelint_toml_may_use_a_tool_table(tmp_path: Path) -> None:
    path = write(tmp_path / "devicelint.toml", '[tool.devicelint]\nignore = ["DL5"]\n')
    assert load_config(path).ignore == ("DL5",)


def test_empty_table_is_the_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "pyproject.toml", "[tool.devicelint]\n"))
    assert config.select is None and config.ignore == () and config.exclude is None
    assert config.root == tmp_path.resolve()


def test_config_subprocess(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.devicelint]\noutput-format = "json"\nignore = ["DL502"]\n')
    write(tmp_path / "pkg" / "a.py")
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "--no-cache"],
        cwd=tmp_path / "pkg",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert [(f["path"], f["line"], f["code"]) for f in json.loads(done.stdout)] == [("a.py", 2, "DL501")]


# -- config errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("bogus = 1\n", "`tool.devicelint.bogus` is not a devicelint setting"),
        ('selct = ["DL501"]\n', "`tool.devicelint.selct` is not a devicelint setting"),
        ('ignore = ["DL999"]\n', "`tool.devicelint.ignore` has an unknown rule selector 'DL999'"),
        ('select = ["nope"]\n', "`tool.devicelint.select` has an unknown rule selector 'nope'"),
        ('extend-select = ["DL9"]\n', "`tool.devicelint.extend-select` has an unknown rule selector 'DL9'"),
        ('select = "DL501"\n', "`tool.devicelint.select` must be a list of strings"),
        ("exclude = [1]\n", "`tool.devicelint.exclude` must be a list of strings"),
        (
            'output-format = "xml"\n',
            "`tool.devicelint.output-format` must be one of text, concise, full, json, json-lines, sarif, github, gitlab, junit, pylint",
        ),
        ('torch-version = "two"\n', "`tool.devicelint.torch-version`"),
        ("torch-version = 2.4\n", "`tool.devicelint.torch-version` must be a string"),
        (
            '[tool.devicelint.per-file-ignores]\n"a.py" = ["DL999"]\n',
            "`tool.devicelint.per-file-ignores.a.py` has an unknown rule selector 'DL999'",
        ),
        ("per-file-ignores = 3\n", "`tool.devicelint.per-file-ignores` must be a table"),
        ('respect-gitignore = "yes"\n', "`tool.devicelint.respect-gitignore` must be true or false"),
        ("max-file-seconds = -1\n", "`tool.devicelint.max-file-seconds` must be a number of seconds, 0 for no limit"),
        ('max-file-seconds = "10"\n', "`tool.devicelint.max-file-seconds` must be a number of seconds"),
        ("max-file-seconds = true\n", "`tool.devicelint.max-file-seconds` must be a number of seconds"),
        (
            "max-file-tokens = 1.5\n",
            "`tool.devicelint.max-file-tokens` must be a whole number of tokens, 0 for no limit",
        ),
        ("max-file-tokens = -1\n", "`tool.devicelint.max-file-tokens` must be a whole number of tokens"),
        ("max-file-tokens = true\n", "`tool.devicelint.max-file-tokens` must be a whole number of tokens"),
    ],
)
def test_bad_pyproject_is_exit_2_naming_key_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, needle: str
) -> None:
    header = "" if body.startswith("[") else "[tool.devicelint]\n"
    config = write(tmp_path / "pyproject.toml", header + body)
    write(tmp_path / "a.py")
    monkeypatch.chdir(tmp_path)
    result = lint("a.py")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"devicelint: error: {config}: ")
    assert needle in result.stderr
    assert result.stdout == ""


def test_unknown_key_in_devicelint_toml_names_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path / "devicelint.toml", 'ignore = ["DL501"]\nmax-line = 3\n')
    with pytest.raises(ConfigError, match=r"devicelint\.toml: `max-line` is not a devicelint setting"):
        load_config(path)


def test_invalid_toml_is_exit_2(tmp_path: Path) -> None:
    config = write(tmp_path / "devicelint.toml", "select = [\n")
    write(tmp_path / "a.py")
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "--config", str(config), str(tmp_path / "a.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert f"devicelint: error: {config}: not valid TOML" in done.stderr
    assert "Traceback" not in done.stderr


def test_config_error_subprocess_names_key_and_file(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.devicelint]\nselect = ["DL501"]\nunknown-thing = true\n')
    write(tmp_path / "a.py")
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "a.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "pyproject.toml: `tool.devicelint.unknown-thing` is not a devicelint setting" in done.stderr
    assert "Traceback" not in done.stderr


def test_torch_version_filters_rules() -> None:
    class Old:
        torch_versions = "<2.4"

    class Any:
        torch_versions = ""

    assert applies_to_torch(Old, "2.3") and not applies_to_torch(Old, "2.4")
    assert applies_to_torch(Any, "2.4") and applies_to_torch(Old, None)


# -- per-file ignores -----------------------------------------------------------------------


def test_per_file_ignores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(
        tmp_path / "pyproject.toml",
        (
            "[tool.devicelint.per-file-ignores]\n"
            '"tests/*" = ["DL501"]\n'
            '"legacy.py" = ["DL5"]\n'
            '"scripts/**/*.py" = ["torch-load-without-map-location"]\n'
        ),
    )
    for name in ("tests/t.py", "legacy.py", "deep/legacy.py", "scripts/a/b/run.py", "src/m.py", "tests_x/m.py"):
        write(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    # Patterns are relative to the config's folder; a bare file name matches in any folder.
    assert paths_found(".") == ["src/m.py", "tests_x/m.py"]
    monkeypatch.chdir(tmp_path / "tests")
    assert lint("t.py").exit_code == 0


# -- excludes and discovery -----------------------------------------------------------------


def test_default_excludes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in (
        ".venv",
        "venv",
        "build",
        "dist",
        "__pycache__",
        "lib/site-packages",
        "node_modules",
        ".git",
        ".tox",
        "pkg.egg-info",
        "myenv",
    ):
        write(tmp_path / folder / "m.py")
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    write(tmp_path / "src" / "keep.py")
    write(tmp_path / "src" / "stub.pyi")
    write(tmp_path / "notes.txt")
    monkeypatch.chdir(tmp_path)
    assert paths_found(".") == ["src/keep.py", "src/stub.pyi"]
    # Named explicitly, an excluded file is linted, unless --force-exclude (the pre-commit hook).
    assert paths_found("build/m.py", "myenv/m.py") == ["build/m.py", "myenv/m.py"]
    assert paths_found("--force-exclude", "build/m.py", "myenv/m.py", "src/keep.py") == ["src/keep.py"]
    assert paths_found("--force-exclude", "build", "myenv") == []


def test_exclude_and_extend_exclude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("gen/a.py", "src/gen_b.py", "src/c.py", "build/d.py", "src/deep/gen/e.py"):
        write(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "devicelint.toml", 'extend-exclude = ["gen/", "gen_*.py"]\n')
    assert paths_found(".") == ["src/c.py"]
    # `exclude` replaces the default list, as in Ruff; `extend-exclude` adds to it.
    write(tmp_path / "devicelint.toml", 'exclude = ["gen"]\n')
    assert paths_found(".") == ["build/d.py", "src/c.py", "src/gen_b.py"]
    # Anchored patterns are relative to the config's folder, also when run from below it.
    write(tmp_path / "devicelint.toml", 'extend-exclude = ["/src/c.py"]\n')
    monkeypatch.chdir(tmp_path / "src")
    assert paths_found(".") == ["deep/gen/e.py", "gen_b.py"]


def test_gitignore_respected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".gitignore", "generated/\n*_pb2.py\n!keep_pb2.py\n")
    write(tmp_path / "pkg" / ".gitignore", "local.py\n")
    for name in ("generated/a.py", "pkg/x_pb2.py", "pkg/keep_pb2.py", "pkg/local.py", "pkg/main.py", "local.py"):
        write(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    assert paths_found(".") == ["local.py", "pkg/keep_pb2.py", "pkg/main.py"]
    write(tmp_path / "devicelint.toml", "respect-gitignore = false\n")
    assert paths_found(".") == [
        "generated/a.py",
        "local.py",
        "pkg/keep_pb2.py",
        "pkg/local.py",
        "pkg/main.py",
        "pkg/x_pb2.py",
    ]


def test_gitignore_above_the_repository_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / ".gitignore", "*.py\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(repo / "a.py")
    monkeypatch.chdir(repo)
    assert paths_found(".") == ["a.py"]


def test_zero_files_is_a_clean_run_with_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "README.md", "# nothing to lint\n")
    monkeypatch.chdir(tmp_path)
    result = lint(".")
    assert result.exit_code == 0
    assert result.stderr == "devicelint: no Python files to lint.\n"
    assert result.stdout == "All clear: 0 files checked.\n"
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    assert "no Python files to lint" in done.stderr


def test_duplicate_paths_are_linted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "a.py")
    monkeypatch.chdir(tmp_path)
    result = lint("--output-format", "json", "a.py", ".", str(tmp_path / "a.py"))
    assert len(json.loads(result.stdout)) == 1


def test_paths_are_shown_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pkg" / "a.py")
    monkeypatch.chdir(tmp_path)
    assert paths_found(str(tmp_path / "pkg")) == ["pkg/a.py"]
    assert paths_found("pkg") == ["pkg/a.py"]


def test_config_dataclass_defaults() -> None:
    config = Config()
    assert config.path is None and config.notebooks and config.respect_gitignore


def test_broken_pyproject_with_our_table_is_an_error_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "devicelint.toml", 'ignore = ["DL501"]\n')
    inner = write(tmp_path / "inner" / "pyproject.toml", '[tool.devicelint]\nignore = ["DL501"\n')
    write(tmp_path / "inner" / "a.py")
    monkeypatch.chdir(tmp_path / "inner")
    result = lint("a.py")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"devicelint: error: {inner}: not valid TOML")
    # A broken pyproject.toml that does not configure devicelint is none of our business.
    inner.write_text('[project\nname = "x"\n')
    assert lint("a.py").exit_code == 0


def test_folder_named_on_purpose_is_linted_even_if_its_name_is_a_default_exclude(tmp_path: Path, monkeypatch) -> None:
    """`devicelint build/` or a package inside site-packages: excludes apply below the named folder."""
    bug = "import torch\nstate = torch.load('a.pt')\n"
    (tmp_path / "build" / "lib").mkdir(parents=True)
    (tmp_path / "build" / "lib" / "train.py").write_text(bug)
    (tmp_path / "site-packages" / "pkg" / "build").mkdir(parents=True)
    (tmp_path / "site-packages" / "pkg" / "model.py").write_text(bug)
    (tmp_path / "site-packages" / "pkg" / "build" / "gen.py").write_text(bug)
    monkeypatch.chdir(tmp_path)
    named = CliRunner().invoke(
        cli, ["check", "--no-cache", "--isolated", "--output-format", "json", "build", "site-packages/pkg"]
    )
    assert sorted(row["path"] for row in json.loads(named.stdout)) == [
        "build/lib/train.py",
        "site-packages/pkg/model.py",
    ]
    walked = CliRunner().invoke(cli, ["check", "--no-cache", "--isolated", "--output-format", "json", "."])
    assert json.loads(walked.stdout) == []
