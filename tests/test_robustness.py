"""Bad and pathological input: each file yields a clear finding or message, never a traceback,
the exit code is right, and the other files are still linted, with one job and with several.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

import devicelint.runner
from devicelint.cli import cli
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

LOAD = "import torch\nstate = torch.load(p)\n"  # DL501 at 2:9
DL501_AT_2 = ("DL501", 2, 9)
DECODE_MESSAGE = (
    "cannot decode the file as utf-8: byte 0xe9 is invalid; save it as UTF-8 or declare its "
    "encoding with a `# -*- coding: ... -*-` line"
)


def _deep_files() -> dict[str, str]:
    """Valid but deep Python, each with a `torch.load(p)` the linter must still find."""
    return {
        "nested_calls.py": "import torch\nz = " + "f(" * 150 + "torch.load(p)" + ")" * 150 + "\n",
        "method_chain.py": "import torch\nz = torch.load(p)" + ".m()" * 200 + "\n",
        "plus_chain.py": "import torch\nz = torch.load(p) + " + " + ".join(["a"] * 399) + "\n",
    }


def _slow_files() -> dict[str, str]:
    """Valid files that take LibCST seconds: linted once, in their own test."""
    return {
        "unary_chain.py": "import torch\nz = torch.load(p)\nw = " + "-" * 2000 + "1\n",
        "big.py": "import torch\n" + "y = 1\n" * 50_000 + "state = torch.load(p)\n",
    }


def _bad_files() -> dict[str, bytes]:
    return {
        "syntax.py": b"import torch\ndef f(:\n    pass\n",
        "syntax_no_torch.py": b"def f(:\n    pass\n",
        "latin1.py": b"import torch\nname = 'caf\xe9'\n",
        "latin1_line1.py": b"name = 'caf\xe9'  # torch\n",
        "nul.py": b"import torch\nx = 1\x00\n",
        "deep1000.py": ("import torch\nz = " + "(" * 1000 + "1" + ")" * 1000 + "\n").encode(),
        "deep5000.py": ("import torch\nz = " + "(" * 5000 + "1" + ")" * 5000 + "\n").encode(),
        "empty.py": b"",
    }


# What each file must yield: (code, line, column) and, for DL000, the message.
EXPECTED = {
    "syntax.py": [("DL000", 2, 7, "syntax error: invalid syntax")],
    "syntax_no_torch.py": [("DL000", 1, 7, "syntax error: invalid syntax")],
    "latin1.py": [("DL000", 2, 12, DECODE_MESSAGE)],
    "latin1_line1.py": [("DL000", 1, 12, DECODE_MESSAGE)],
    "nul.py": [("DL000", 2, 1, "the file contains a NUL byte; it is not Python source")],
    "deep1000.py": [("DL000", 2, 205, "not parsed: too many nested parentheses")],
    "deep5000.py": [("DL000", 2, 205, "not parsed: too many nested parentheses")],
    "empty.py": [],
    "ok.py": [DL501_AT_2],
    "nested_calls.py": [("DL501", 2, 305)],
    "method_chain.py": [("DL501", 2, 5)],
    "plus_chain.py": [("DL501", 2, 5)],
    "unary_chain.py": [("DL501", 2, 5)],
    "big.py": [("DL501", 50_002, 9)],
    "broken_link.py": [("DL000", 1, 1, "cannot read the file: broken symbolic link")],
    "x.py/inner.py": [DL501_AT_2],
}


def _options(**kw) -> EngineOptions:  # type: ignore[no-untyped-def]
    return EngineOptions(rules=tuple(all_rules()), **kw)


def _lint_in_big_stack(data: bytes | str, name: str, **kw):  # type: ignore[no-untyped-def]
    # The runner lints in a thread with a big stack; the engine relies on it for deep files.
    return devicelint.runner.in_big_stack(lint_source, data, name, _options(**kw))


def _shape(findings) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [
        (f.code, f.line, f.column, f.message) if f.code == "DL000" else (f.code, f.line, f.column) for f in findings
    ]


@pytest.mark.parametrize("name", sorted(_bad_files()))
def test_bad_input_in_process(name: str) -> None:
    result = _lint_in_big_stack(_bad_files()[name], name)
    assert _shape(result.findings) == EXPECTED[name]
    assert all(f.path == name and f.end_column > f.column for f in result.findings)


@pytest.mark.parametrize("name", ["nested_calls.py", "method_chain.py", "plus_chain.py"])
def test_deep_valid_files_are_linted_and_fixed(name: str) -> None:
    source = _deep_files()[name]
    result = _lint_in_big_stack(source, name, fix_mode="unsafe")
    assert _shape(result.findings) == EXPECTED[name]
    fixed = result.fixed_source
    assert fixed == source.replace("torch.load(p)", 'torch.load(p, map_location="cpu")', 1)
    devicelint.runner.in_big_stack(cst.parse_module, fixed)
    again = _lint_in_big_stack(fixed, name, fix_mode="unsafe")
    assert again.findings == () and again.fixed_source is None


def test_syntax_error_without_prefilter_tokens_is_still_reported() -> None:
    # No rule's token occurs in this file, so no rule runs, yet it must not pass as clean.
    result = lint_source("def f(:\n", "a.py", _options())
    assert _shape(result.findings) == [("DL000", 1, 7, "syntax error: invalid syntax")]
    assert lint_source("x = 1\n", "a.py", _options()).findings == ()


@pytest.mark.parametrize(
    "source",
    [
        "type Vector = list[float]\n",  # Python 3.12 syntax
        "def first[T](xs: list[T]) -> T:\n    return xs[0]\n",
        'name = f"{"nested"}"\n',
        "match x:\n    case 1:\n        pass\n",
    ],
)
def test_newer_syntax_than_this_python_is_not_a_syntax_error(source: str) -> None:
    # With no rule to run, CPython's parser screens the file; what it refuses, LibCST confirms.
    assert lint_source(source, "a.py", _options()).findings == ()
    with_torch = lint_source("import torch\n" + source + "state = torch.load(p)\n", "a.py", _options())
    assert [f.code for f in with_torch.findings] == ["DL501"]


def test_coding_cookie_is_honoured() -> None:
    source = "# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\nstate = torch.load(p)\n"
    result = lint_source(source.encode("latin-1"), "a.py", _options())
    assert [(f.code, f.line) for f in result.findings] == [("DL501", 4)]
    bad_cookie = lint_source(b"# -*- coding: nonsense -*-\nimport torch\n", "a.py", _options())
    assert [(f.code, f.line) for f in bad_cookie.findings] == [("DL000", 1)]
    assert bad_cookie.findings[0].message.startswith("cannot decode the file: ")


def _make_tree(root: Path, with_deep: bool) -> None:
    for name, data in _bad_files().items():
        (root / name).write_bytes(data)
    (root / "ok.py").write_text(LOAD)
    if with_deep:
        for name, text in _deep_files().items():
            (root / name).write_text(text)
    (root / "broken_link.py").symlink_to(root / "nowhere.py")
    (root / "x.py").mkdir()
    (root / "x.py" / "inner.py").write_text(LOAD)


def _by_file(json_text: str) -> dict[str, list[tuple]]:
    found: dict[str, list[tuple]] = {}
    for f in json.loads(json_text):
        row = (
            (f["code"], f["line"], f["column"], f["message"])
            if f["code"] == "DL000"
            else (f["code"], f["line"], f["column"])
        )
        found.setdefault(f["path"], []).append(row)
    return found


def _expected(names) -> dict[str, list[tuple]]:  # type: ignore[no-untyped-def]
    return {name: EXPECTED[name] for name in names if EXPECTED[name]}


def test_every_bad_file_via_subprocess_with_one_and_two_jobs(tmp_path: Path) -> None:
    """The whole zoo in one tree, as real processes, with -j 1 and with a pool of 2."""
    _make_tree(tmp_path, with_deep=True)
    outputs = []
    for jobs in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "devicelint", "--no-cache", "-j", jobs, "--output-format", "json", "."],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1
        assert done.stderr == ""
        assert _by_file(done.stdout) == _expected(set(EXPECTED) - set(_slow_files()))
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]


@pytest.mark.slow
def test_big_file_and_long_unary_chain(tmp_path: Path) -> None:
    """A 50,000-line file and a 2,000-long `-` chain (CPython accepts it; seconds in LibCST): linted, once."""
    for name, text in _slow_files().items():
        (tmp_path / name).write_text(text)
    small = [f"ok{i}.py" for i in range(6)]  # enough files for a pool: the two slow ones run side by side
    for name in small:
        (tmp_path / name).write_text(LOAD)
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "--no-cache", "-j", "2", "--output-format", "json", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr == ""
    assert _by_file(done.stdout) == {**_expected(["big.py", "unary_chain.py"]), **{n: [DL501_AT_2] for n in small}}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_bad_files_in_process_text_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str) -> None:
    _make_tree(tmp_path, with_deep=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["check", "--no-cache", "-j", jobs, "--no-show-source", "."], catch_exceptions=False
    )
    assert result.exit_code == 1
    assert "broken_link.py:1:1: DL000 cannot read the file: broken symbolic link\n" in result.stdout
    assert f"latin1.py:2:12: DL000 {DECODE_MESSAGE}\n" in result.stdout
    assert "x.py/inner.py:2:9: DL501 " in result.stdout
    assert result.stdout.endswith("Found 10 problems in 10 files. 2 fixable with `--fix --unsafe-fixes`.\n")
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("name", ["broken_link.py", "x.py", "deep5000.py", "latin1.py"])
def test_bad_file_named_explicitly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    _make_tree(tmp_path, with_deep=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["check", "--no-cache", "--output-format", "json", name, "ok.py"], catch_exceptions=False
    )
    assert result.exit_code == 1
    key = "x.py/inner.py" if name == "x.py" else name
    assert _by_file(result.stdout) == _expected([key, "ok.py"])


def test_unreadable_file_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As root, chmod 0 does not stop reading: make the read itself fail.
    (tmp_path / "secret.py").write_text(LOAD)
    (tmp_path / "ok.py").write_text(LOAD)
    real_read_bytes = pathlib.Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["check", "--no-cache", "-j", "1", "--output-format", "json", "."], catch_exceptions=False
    )
    assert result.exit_code == 1
    assert _by_file(result.stdout) == {
        "ok.py": [DL501_AT_2],
        "secret.py": [("DL000", 1, 1, "cannot read the file: Permission denied")],
    }
    # The cache must not remember a failed read.
    cached = CliRunner().invoke(cli, ["check", "-j", "1", "--output-format", "json", "."], catch_exceptions=False)
    assert "secret.py" in _by_file(cached.stdout)


def test_unreadable_paths_named_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As a user who is not root: `secret.py` cannot be read, `locked/` cannot be searched (so
    # even `stat` of `locked/b.py` fails). Each is a DL000 finding; the run goes on.
    (tmp_path / "secret.py").write_text(LOAD)
    (tmp_path / "ok.py").write_text(LOAD)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "b.py").write_text(LOAD)
    real_read_bytes, real_stat, real_access = pathlib.Path.read_bytes, pathlib.Path.stat, os.access

    def read_bytes(self: Path) -> bytes:
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    def stat(self: Path, **kwargs):  # type: ignore[no-untyped-def]
        if "locked" in self.parts and self.name == "b.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    monkeypatch.setattr(pathlib.Path, "stat", stat)
    monkeypatch.setattr(
        os, "access", lambda path, mode, **kw: "secret" not in str(path) and real_access(path, mode, **kw)
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli,
        ["check", "--no-cache", "-j", "1", "--output-format", "json", "ok.py", "secret.py", "locked/b.py"],
        catch_exceptions=False,
    )
    assert result.exit_code == 1, result.output
    assert _by_file(result.stdout) == {
        "ok.py": [DL501_AT_2],
        "secret.py": [("DL000", 1, 1, "cannot read the file: Permission denied")],
        "locked/b.py": [("DL000", 1, 1, "cannot read the file: Permission denied")],
    }


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can read a chmod 0 file")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_unreadable_file_subprocess(tmp_path: Path, jobs: str) -> None:
    for i in range(8):
        (tmp_path / f"ok{i}.py").write_text(LOAD)
    secret = tmp_path / "secret.py"
    secret.write_text(LOAD)
    secret.chmod(0)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "devicelint", "--no-cache", "-j", jobs, "--output-format", "json", "."],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        secret.chmod(0o644)
    assert done.returncode == 1
    found = _by_file(done.stdout)
    assert found["secret.py"] == [("DL000", 1, 1, "cannot read the file: Permission denied")]
    assert len(found) == 9
    assert "Traceback" not in done.stderr


def crashing_lint_task(task, options):  # type: ignore[no-untyped-def]
    """Stands in for the runner's worker function: dies like a segfaulting parser on one file."""
    if task.path.endswith("crash.py"):
        os._exit(139)
    from devicelint.runner import lint_data

    return lint_data(Path(task.path).read_bytes(), task, options)


def test_worker_death_is_reported_and_the_rest_linted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # LibCST's native parser can kill its process; the pool must not hang or lose other files.
    for i in range(9):
        (tmp_path / f"ok{i}.py").write_text(LOAD)
    (tmp_path / "crash.py").write_text(LOAD)
    monkeypatch.setattr(devicelint.runner, "lint_task", crashing_lint_task)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["check", "--no-cache", "-j", "2", "--output-format", "json", "."], catch_exceptions=False
    )
    assert result.exit_code == 3  # devicelint failed, which is neither "findings" nor a bad file
    assert "internal error: the worker process died while linting crash.py (not analysed)" in result.stderr
    found = _by_file(result.stdout)
    assert "crash.py" not in found  # never reported as a syntax error in the user's file
    assert found == {f"ok{i}.py": [DL501_AT_2] for i in range(9)}


def test_a_devicelint_folder_in_the_current_folder_does_not_shadow_the_workers(tmp_path: Path) -> None:
    # A checkout of devicelint next to the project (`~/src/devicelint`, run from `~/src`): as a
    # namespace package on the workers' path it once made every file a DL000.
    (tmp_path / "devicelint").mkdir()
    (tmp_path / "devicelint" / "pyproject.toml").write_text("[project]\nname = 'devicelint'\n")
    (tmp_path / "proj").mkdir()
    for i in range(10):
        (tmp_path / "proj" / f"m{i}.py").write_text(LOAD)
    script = Path(sys.executable).with_name("devicelint")
    done = subprocess.run(
        [str(script), "check", "--no-cache", "-j", "2", "--output-format", "json", "proj"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    assert _by_file(done.stdout) == {f"proj/m{i}.py": [DL501_AT_2] for i in range(10)}


def test_symlink_loop_and_symlinked_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A link back up the tree must not make the walk endless; linked folders are not followed
    # (as git and Ruff), unless named on the command line.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(LOAD)
    (tmp_path / "pkg" / "up").symlink_to(tmp_path)
    (tmp_path / "alias").symlink_to(tmp_path / "pkg")
    (tmp_path / "folder_link.py").symlink_to(tmp_path / "pkg")
    (tmp_path / "file_link.py").symlink_to(tmp_path / "pkg" / "a.py")
    monkeypatch.chdir(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "--no-cache", "--output-format", "json", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert _by_file(done.stdout) == {"file_link.py": [DL501_AT_2], "pkg/a.py": [DL501_AT_2]}
    assert done.returncode == 1
    named = CliRunner().invoke(cli, ["check", "--no-cache", "--output-format", "json", "alias"], catch_exceptions=False)
    assert _by_file(named.stdout) == {"alias/a.py": [DL501_AT_2]}


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == parent and int(stat.parent.name) not in found:
                found.add(int(stat.parent.name))
                frontier.append(int(stat.parent.name))
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _results_cached(cache: Path) -> list[Path]:
    """The result entries of a cache folder (`v<N>/`), not the project index's store beside them."""
    return [p for p in cache.glob("v*/**/*.json")]


def _slow_project(root: Path) -> None:
    # Enough work for two workers to be busy for many seconds.
    body = (FIXTURES / "DL101" / "bad_trainers_and_loops.py").read_text()
    for i in range(80):
        (root / f"m{i}.py").write_text(body * 12)


def _start_and_wait_for_workers(args: list[str], cwd: Path) -> tuple[subprocess.Popen, set[int]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "devicelint", "check", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        family = _descendants(process.pid)
        if len(family) >= 4:  # resource tracker, forkserver, two workers
            return process, family
        time.sleep(0.2)
    process.kill()
    pytest.fail("the workers never started")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_kill_9_of_the_command_leaves_no_worker_behind(tmp_path: Path) -> None:
    _slow_project(tmp_path)
    process, family = _start_and_wait_for_workers(["--no-cache", "-j", "2", "-q", "."], tmp_path)
    time.sleep(0.5)
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 15
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(family) == set()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_stops_the_workers_and_keeps_what_was_finished(tmp_path: Path) -> None:
    _slow_project(tmp_path)
    process, family = _start_and_wait_for_workers(["--cache-dir", ".c", "-j", "2", "-q", "."], tmp_path)
    deadline = time.monotonic() + 60
    while not _results_cached(tmp_path / ".c") and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert (
        stderr.decode().strip()
        == "devicelint: error: interrupted: nothing reported; the files finished so far are cached"
    )
    cached = len(_results_cached(tmp_path / ".c"))
    assert 1 <= cached < 80
    deadline = time.monotonic() + 15
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(family) == set()


PATHOLOGICAL = {
    # CPython rejects each at once; LibCST took minutes and gigabytes on them.
    "lambdas": "f = " + "lambda: " * 20000 + "0\n",
    "attributes": "x = a" + ".b" * 20000 + "\n",
    "calls": "x = f" + "()" * 20000 + "\n",
    "sum": "x = " + " + ".join(["a"] * 20000) + "\n",
    "unary": "x = " + "-" * 20000 + "1\n",
    "nots": "x = " + "not " * 20000 + "1\n",
}


@pytest.mark.parametrize("with_torch", [True, False], ids=["parsed", "prefiltered"])
@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_what_cpython_rejects_is_dl000_at_once(name: str, with_torch: bool) -> None:
    from devicelint.runner import Task, TaskOptions, lint_data

    source = ("import torch\n" if with_torch else "") + PATHOLOGICAL[name]
    task = Task("deep.py", "deep.py", tuple(r.code for r in all_rules()), len(source))
    started = time.monotonic()
    # lint_data runs as a worker does: in a big thread stack with a raised recursion limit.
    result = lint_data(source.encode(), task, TaskOptions(torch_version=None, fix_mode="none"))
    assert time.monotonic() - started < 10
    assert [(f.code, f.message) for f in result.findings] == [
        (
            "DL000",
            f"not parsed: nested too deeply for Python to compile ({'MemoryError' if name in ('lambdas', 'unary', 'nots') else 'RecursionError'})",
        )
    ]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_file_over_the_time_limit_is_dl002_and_the_run_goes_on(tmp_path: Path, jobs: str) -> None:
    # A one-line list of 110,000 numbers: valid, and seconds of LibCST work; the limit is 0.3 s.
    (tmp_path / "devicelint.toml").write_text("max-file-seconds = 0.3\n")
    (tmp_path / "slow.py").write_text("import torch\nx = [" + ", ".join(["1234567"] * 110_000) + "]\n")
    for i in range(9):
        (tmp_path / f"ok{i}.py").write_text(LOAD)
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "check", "--no-cache", "-j", jobs, "--output-format", "json", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    found = _by_file(done.stdout)
    assert found.pop("slow.py") == [("DL002", 1, 1)]
    [slow] = [f for f in json.loads(done.stdout) if f["path"] == "slow.py"]
    assert (slow["name"], slow["message"]) == (
        "file-not-analysed",
        "not analysed: linting took longer than 0.3 s (set `max-file-seconds` to change the limit)",
    )
    assert found == {f"ok{i}.py": [DL501_AT_2] for i in range(9)}


def test_workers_over_the_memory_mark_retire_and_the_run_completes(tmp_path: Path) -> None:
    # With a 1 MiB mark every worker retires after each file: the pool is rebuilt again and
    # again, and every file is still reported exactly once.
    for i in range(12):
        (tmp_path / f"m{i}.py").write_text(LOAD)
    env = {**os.environ, "DEVICELINT_WORKER_MEMORY_MIB": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "devicelint", "check", "--no-cache", "-j", "2", "--output-format", "json", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    assert _by_file(done.stdout) == {f"m{i}.py": [DL501_AT_2] for i in range(12)}


def test_keyword_only_and_starred_calls_never_crash_a_rule() -> None:
    # DL401 once raised IndexError on `loss.backward(retain_graph=False)` (diffusers).
    source = """\
import torch
def train(model, loader, opt, accelerator, scaler, args, kwargs):
    model.to("cuda")
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = model(x.cuda()).sum()
        loss.loss.backward(retain_graph=False)
        accelerator.backward(retain_graph=False)
        scaler.scale(loss=loss).backward(retain_graph=False)
        torch.autograd.backward(tensors=loss)
        scaler.step(optimizer=opt)
        scaler.update(*args)
        torch.nn.utils.clip_grad_norm_(*args, **kwargs)
        torch.load(*args, **kwargs).to(**kwargs)
        x.to(**kwargs)
        opt.step(*args)
        print(loss.item(*args), *args, **kwargs)
"""
    result = lint_source(source, "train.py", EngineOptions(rules=tuple(all_rules()), fix_mode="unsafe"))
    assert result.internal_errors == ()
    assert all(f.code != "DL000" for f in result.findings)


def _generated_calls(count: int) -> str:
    """A valid one-line generated table of `count` calls (60,000 of them: 1.2 MB, which LibCST
    would take 15 s and 1.3 GB to parse)."""
    return "import torch\ntable = [" + ", ".join(f"torch.zeros({i})" for i in range(count)) + "]\n"


def test_a_file_too_large_to_parse_is_dl002_at_once() -> None:
    from devicelint.runner import Task, TaskOptions, lint_data

    source = _generated_calls(60_000)
    task = Task("table.py", "table.py", tuple(r.code for r in all_rules()), len(source))
    started = time.monotonic()
    result = lint_data(source.encode(), task, TaskOptions(torch_version=None, fix_mode="none"))
    assert time.monotonic() - started < 5
    assert result.internal_errors == ()
    assert [(f.code, f.name, f.line, f.column, f.message) for f in result.findings] == [
        (
            "DL002",
            "file-not-analysed",
            1,
            1,
            (
                "not analysed: the file is too large: 480,006 tokens, over the limit of 270,000 (parsing it would take "
                "about 1.6 GiB; set `max-file-tokens` to change the limit)"
            ),
        )
    ]


def test_max_file_tokens_is_configurable_and_zero_turns_it_off(tmp_path: Path) -> None:
    (tmp_path / "table.py").write_text(_generated_calls(100) + "state = torch.load(p)\n")
    (tmp_path / "ok.py").write_text(LOAD)

    def run(limit: str) -> dict[str, list[tuple]]:
        (tmp_path / "devicelint.toml").write_text(f"max-file-tokens = {limit}\n")
        done = subprocess.run(
            [sys.executable, "-m", "devicelint", "check", "--no-cache", "-j", "1", "--output-format", "json", "."],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and done.stderr == "", done.stderr
        return _by_file(done.stdout)

    assert run("500") == {"table.py": [("DL002", 1, 1)], "ok.py": [DL501_AT_2]}
    assert run("0") == {"table.py": [("DL501", 3, 9)], "ok.py": [DL501_AT_2]}


def test_a_long_operator_chain_is_dl002_at_once() -> None:
    # Valid (CPython takes it), but LibCST's parse time grows with the cube of the chain: 3 s on
    # an idle machine for these 2,000 operands, 30 s for 4,000.
    source = "import torch\nstate = torch.load(p)\nx = " + " + ".join(f"a{i}" for i in range(2000)) + "\n"
    started = time.monotonic()
    result = _lint_in_big_stack(source, "sum.py")
    assert time.monotonic() - started < 5
    assert [(f.code, f.message) for f in result.findings] == [
        (
            "DL002",
            (
                "not analysed: line 3 chains 2,000 operands with binary operators, over the limit of 1,000 "
                "(the parser's time grows with the cube of such a chain)"
            ),
        )
    ]


def test_a_changed_max_file_tokens_is_not_served_from_the_cache(tmp_path: Path) -> None:
    (tmp_path / "table.py").write_text(_generated_calls(100) + "state = torch.load(p)\n")
    found = []
    for limit in ("500", "0"):
        (tmp_path / "devicelint.toml").write_text(f"max-file-tokens = {limit}\n")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "devicelint",
                "check",
                "--cache-dir",
                ".c",
                "-j",
                "1",
                "--output-format",
                "json",
                ".",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        found.append(_by_file(done.stdout))
    assert found == [{"table.py": [("DL002", 1, 1)]}, {"table.py": [("DL501", 3, 9)]}]


@pytest.mark.skipif(not hasattr(time, "pthread_getcpuclockid"), reason="no per-thread CPU clock here")
def test_the_time_limit_counts_the_file_s_own_work_not_a_loaded_machine_s_wall_clock() -> None:
    # waiting (as a file's lint does when other jobs hold the CPU) is not work: it finishes
    # within five times the limit; computing past the limit is stopped
    assert devicelint.runner.in_big_stack(lambda: time.sleep(0.4) or "done", timeout=0.2) == "done"

    def compute() -> int:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            sum(range(1000))
        return 1

    started = time.monotonic()
    with pytest.raises(devicelint.runner.FileTimeout):
        devicelint.runner.in_big_stack(compute, timeout=0.2)
    assert time.monotonic() - started < 2.5
    # a file that only waits stops at five times the limit
    started = time.monotonic()
    with pytest.raises(devicelint.runner.FileTimeout):
        devicelint.runner.in_big_stack(lambda: time.sleep(3), timeout=0.2)
    assert time.monotonic() - started < 2
