"""Project views built while workers lint: the runner prepares each task just before it hands the
file out, so a cold run no longer waits for every view before the first file is linted. What is
found must not change, in the pool or in one process, with the cache or without."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from fixture_markers import expected_findings

from devicelint.cli import cli
from devicelint.finding import FileResult
from devicelint.runner import MIN_FILES_FOR_POOL, Task, TaskOptions, run_tasks

OPTIONS = TaskOptions(torch_version=None, fix_mode="none")
# A bug that only the project index finds (the model class in one module, the move in another).
PROJECT = FIXTURES / "projects" / "dataparallel_over_unmoved_import" / "bad"


def _write_tasks(root: Path, sizes: list[int]) -> list[Task]:
    tasks = []
    for n, size in enumerate(sizes):
        path = root / f"m{n}.py"
        path.write_text("x = 1\n" + "#\n" * size, encoding="utf-8")
        tasks.append(Task(str(path), path.name, ("DL101",), path.stat().st_size))
    return tasks


@pytest.mark.parametrize("jobs", [1, 2])
def test_prepare_runs_once_per_task_before_it_is_linted(tmp_path: Path, jobs: int) -> None:
    tasks = _write_tasks(tmp_path, [5, 40, 20, 0, 30, 10, 60, 50, 15])
    seen: list[str] = []

    def prepare(task: Task) -> Task:
        seen.append(task.display)
        return task

    outcome = run_tasks(tasks, OPTIONS, jobs, prepare=prepare)
    assert sorted(seen) == sorted(t.display for t in tasks)  # each once
    if jobs > 1:  # handed out largest first, each prepared as it is handed out
        assert seen == [t.display for t in sorted(tasks, key=lambda t: -t.size)]
    assert sorted(r.path for r in outcome.results) == sorted(t.display for t in tasks)


@pytest.mark.parametrize("jobs", [1, 2])
def test_prepare_may_answer_a_task_without_linting_it(tmp_path: Path, jobs: int) -> None:
    tasks = _write_tasks(tmp_path, [1] * MIN_FILES_FOR_POOL)
    answered = FileResult("m3.py", ())
    results: list[str] = []

    def prepare(task: Task) -> Task | FileResult:
        if task.display == "m3.py":
            Path(task.path).unlink()  # linting it now would report an unreadable file
            return answered
        return task

    outcome = run_tasks(tasks, OPTIONS, jobs, on_result=lambda r: results.append(r.path), prepare=prepare)
    by_path = {r.path: r for r in outcome.results}
    assert by_path["m3.py"] is answered
    assert len(outcome.results) == MIN_FILES_FOR_POOL
    assert "m3.py" not in results  # on_result sees what was linted, not what `prepare` answered


def _project_with_fillers(root: Path) -> Path:
    """The fixture project plus enough plain modules that a run with two jobs uses the pool."""
    project = root / "project"
    shutil.copytree(PROJECT, project)
    for n in range(MIN_FILES_FOR_POOL):
        (project / f"filler_{n}.py").write_text(f"import torch\n\nVALUE_{n} = torch.ones(3)\n", encoding="utf-8")
    return project


def _check(args: list[str], cwd: Path) -> set[tuple[str, int, str]]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, ["check", "--output-format", "json", "--select", "ALL", *args])
    finally:
        os.chdir(old)
    assert result.exit_code in (0, 1), result.output
    return {(Path(r["path"]).name, r["line"], r["code"]) for r in json.loads(result.stdout)}


def _expected(project: Path) -> set[tuple[str, int, str]]:
    return {(path.name, line, code) for path in project.rglob("*.py") for line, code, _ in expected_findings(path)}


def test_cross_file_findings_with_views_built_during_the_run(tmp_path: Path) -> None:
    project = _project_with_fillers(tmp_path)
    expected = _expected(project)
    assert expected
    assert _check(["--no-cache", "-j", "2", str(project)], tmp_path) == expected
    assert _check(["--no-cache", "-j", "1", str(project)], tmp_path) == expected
    # cold cache (every view built during the run), warm (every view and result recorded), and
    # after touching one file (its view and its dependants' built again during the run)
    cache = ["--cache-dir", str(tmp_path / "cache"), "-j", "2", str(project)]
    assert _check(cache, tmp_path) == expected
    assert _check(cache, tmp_path) == expected
    entry = next(p for p in project.rglob("*.py") if expected_findings(p))
    entry.write_text(entry.read_text(encoding="utf-8") + "\n# touched\n", encoding="utf-8")
    assert _check(cache, tmp_path) == expected


def test_a_warm_run_starts_no_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project_with_fillers(tmp_path)
    cache = ["--cache-dir", str(tmp_path / "cache"), "-j", "2", str(project)]
    _check(cache, tmp_path)
    import devicelint.runner as runner

    def no_pool(*args: object) -> None:
        raise AssertionError("a warm run linted files")

    monkeypatch.setattr(runner, "_run_pool", no_pool)
    monkeypatch.setattr(runner, "lint_task", no_pool)
    assert _check(cache, tmp_path) == _expected(project)


_IN_PROCESS = """
import json, sys
from click.testing import CliRunner
from devicelint.cli import cli
result = CliRunner().invoke(cli, ["check", "--no-cache", "-j", "2", "--output-format", "json", sys.argv[1]])
print(json.dumps({"code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}))
"""


def test_in_process_callers_main_module_never_runs_in_the_workers(tmp_path: Path) -> None:
    # the CLI called from a script with no file (`python -`) and no `__main__` guard: its workers
    # must not re-run (or try to find) the caller's main module, or every one of them dies
    import subprocess
    import sys

    project = _project_with_fillers(tmp_path)
    done = subprocess.run(
        [sys.executable, "-", str(project)], input=_IN_PROCESS, capture_output=True, text=True, timeout=300
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "worker process died" not in report["stderr"]
    assert report["code"] == 1
    found = {(Path(r["path"]).name, r["line"], r["code"]) for r in json.loads(report["stdout"])}
    assert _expected(project) <= found
