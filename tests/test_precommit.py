"""The real pre-commit runs the `devicelint` hook from this repository on a temporary git repo.

pre-commit builds the hook's virtualenv by installing this project (and libcst, click...)
from PyPI, so the test needs the network and takes a while; it stays in the default run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

BUGGY = "import torch\n\n\ndef resume(p):\n    return torch.load(p)\n"
FIXED = BUGGY.replace("torch.load(p)", 'torch.load(p, map_location="cpu")')


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=120)
    return done.stdout


def _untracked_hook_sources() -> list[str]:
    """Files the hook needs that git does not track yet (try-repo would leave them out)."""
    out = git(
        "status",
        "--porcelain",
        "--untracked-files=all",
        "--",
        ".pre-commit-hooks.yaml",
        "pyproject.toml",
        "README.md",
        "devicelint",
        cwd=ROOT,
    )
    return [line[3:] for line in out.splitlines() if line.startswith("??")]


def _hook_repo(tmp_path: Path) -> Path:
    """This repository, or a committed snapshot of its working tree when files are untracked.

    `pre-commit try-repo` runs a repository with uncommitted changes to tracked files from a
    temporary commit, but leaves untracked files out; a new, not yet committed module would
    then be missing from the installed hook.
    """
    if not (ROOT / ".git").exists() or _untracked_hook_sources():
        snapshot = tmp_path / "hook-repo"
        listed = (
            git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT)
            if (ROOT / ".git").exists()
            else ""
        )
        names = [n for n in listed.split("\0") if n] or [
            str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts
        ]
        for name in names:
            source = ROOT / name
            if source.is_file():
                target = snapshot / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        _commit_all(snapshot)
        return snapshot
    return ROOT


def _dirty() -> bool:
    """Whether tracked files of this repository differ from HEAD (what try-repo checks)."""
    return subprocess.run(["git", "diff", "--quiet", "--no-ext-diff", "HEAD"], cwd=ROOT, timeout=60).returncode == 1


def _commit_all(repo: Path) -> None:
    if not (repo / ".git").exists():
        git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git(
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.org",
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "-m",
        "snapshot",
        cwd=repo,
    )


def test_hook_definition() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert [h["id"] for h in hooks] == ["devicelint"]
    hook = hooks[0]
    assert hook["entry"] == "devicelint check --force-exclude"
    assert hook["language"] == "python"
    assert hook["types_or"] == ["python", "pyi", "jupyter"]
    assert hook["name"] and hook["description"]
    assert hook["require_serial"] is False


@pytest.mark.slow
def test_pre_commit_try_repo_fails_then_passes(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    hook_repo = _hook_repo(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", cwd=work)
    (work / "train.py").write_text(BUGGY)
    (work / "build").mkdir()
    (work / "build" / "generated.py").write_text(BUGGY)  # excluded by default, even when named
    (work / "notes.txt").write_text("torch.load(p)\n")
    git("add", "-A", cwd=work)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "PRE_COMMIT_COLOR": "never",
        "GIT_CONFIG_NOSYSTEM": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    (tmp_path / "home").mkdir()
    command = [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), "devicelint", "--all-files"]

    dirty_before = hook_repo == ROOT and _dirty()
    failing = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    output = failing.stdout + failing.stderr
    assert failing.returncode == 1, output
    assert "devicelint" in output and "Failed" in output
    assert "train.py:5:12: DL501 `torch.load(...)` has no `map_location`" in output
    assert "generated.py" not in output
    assert "Found 1 problem in 1 file." in output
    if hook_repo == ROOT and dirty_before and _dirty():
        # Uncommitted edits to tracked files are run from a temporary commit, not HEAD.
        assert "Creating temporary repo with uncommitted changes" in output

    (work / "train.py").write_text(FIXED)
    git("add", "-A", cwd=work)
    passing = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    output = passing.stdout + passing.stderr
    assert passing.returncode == 0, output
    assert "Passed" in output
