"""Run the engine over many files: in-process or in a process pool, results sorted."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, TypeVar, cast

from devicelint.files import NOTEBOOK_SUFFIX
from devicelint.finding import FileResult, Finding, error_finding, not_analysed_finding
from devicelint.project.view import EMPTY_VIEW, ProjectView
from devicelint.registry import REGISTRY, all_rules

# LibCST's native parser and its Python code paths recurse once per nesting level; a big
# thread stack and recursion limit let valid but deep files (200 chained calls) parse.
THREAD_STACK_BYTES = 512 * 1024 * 1024
RECURSION_LIMIT = 30_000
# Below this many files a process pool costs more to start than it saves.
MIN_FILES_FOR_POOL = 8
# The default per-file time limit: generous for real code (the slowest file of torch's sources,
# 1.4 MB, takes 7 s against 17 s), yet a pathological file cannot hold a run for minutes.
DEFAULT_SECONDS = 10.0
SECONDS_PER_MB = 5.0
# How many lint passes the limit allows when fixes are applied (a fix round re-lints the file).
FIX_ROUND_ALLOWANCE = 3
# How often a worker checks that the command it works for is still running.
PARENT_POLL_SECONDS = 0.5
# A worker whose resident memory passes this mark after a file retires (real code: the busiest
# worker on torch's sources stays near 320 MiB).
WORKER_MEMORY_MIB = 512.0
# A worker that gave up on a file exits this long after handing back its result.
EXIT_DELAY_SECONDS = 0.5


@dataclass(frozen=True)
class Task:
    path: str
    display: str
    codes: tuple[str, ...]
    size: int = 0
    # What the file sees of its project's other modules (part of its cache key).
    project: ProjectView = EMPTY_VIEW


@dataclass(frozen=True)
class TaskOptions:
    torch_version: str | None
    fix_mode: str
    prefilter: bool = True
    # Per-file time limit (`max-file-seconds`): None for the default, 0 for none.
    max_file_seconds: float | None = None
    # Per-file size limit in tokens (`max-file-tokens`): None for the default, 0 for none.
    max_file_tokens: int | None = None
    # The language server lints version after version of a buffer: its workers reparse only
    # the edited statements (`devicelint.reparse`).
    reuse_parses: bool = False

    def seconds_for(self, size: int) -> float | None:
        if self.max_file_seconds == 0:
            return None
        limit = (
            self.max_file_seconds
            if self.max_file_seconds is not None
            else (DEFAULT_SECONDS + SECONDS_PER_MB * size / 1_000_000)
        )
        # With fixes the file is linted again after each round of edits.
        return limit * FIX_ROUND_ALLOWANCE if self.fix_mode != "none" else limit


class FileTimeout(Exception):
    """Linting one file ran past its time limit."""


@dataclass
class RunOutcome:
    results: list[FileResult]
    internal_errors: list[str]

    @property
    def findings(self) -> list[Finding]:
        return sorted((f for r in self.results for f in r.findings), key=lambda f: f.sort_key)


# Lint threads given up at the time limit. They cannot be stopped, and one still inside the
# native parser when Python shuts down aborts the process: the command must end with os._exit.
_abandoned: list[threading.Thread] = []

T = TypeVar("T")


def abandoned_work() -> bool:
    return any(thread.is_alive() for thread in _abandoned)


def in_big_stack(fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
    """Run `fn(*args)` in a thread with a large stack; re-raise whatever it raised. After
    `timeout` seconds raise FileTimeout (the thread, a daemon, is left to the caller)."""
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, fn(*args)))
        except BaseException as err:  # noqa: BLE001 - handed back to the caller unchanged
            outcome.append((False, err))

    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    previous = threading.stack_size(THREAD_STACK_BYTES)
    try:
        thread = threading.Thread(target=target, name="devicelint-lint", daemon=True)
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join(timeout)
    if thread.is_alive() and timeout is not None:
        _wait_while_working(thread, timeout)
    if thread.is_alive():
        _abandoned.append(thread)
        raise FileTimeout
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)  # ok: what fn returned


# How many times its limit in wall seconds a file may take while its CPU time stays under it.
LOADED_WALL_FACTOR = 5


def _wait_while_working(thread: threading.Thread, limit: float) -> None:
    """The limit is CPU seconds of the file's own work where the platform tells them: on a
    machine loaded by other jobs a file's lint is slowed, not stuck, so past `limit` wall seconds
    it goes on while its thread has used less CPU than that (up to `LOADED_WALL_FACTOR` times
    the limit in wall seconds, for work that waits without computing)."""
    try:
        clock = time.pthread_getcpuclockid(cast(int, thread.ident))
    except (AttributeError, OSError, TypeError):
        return  # no per-thread CPU clock here: wall seconds
    deadline = time.monotonic() + limit * (LOADED_WALL_FACTOR - 1)
    while thread.is_alive():
        try:
            used = time.clock_gettime(clock)
        except OSError:
            return  # the thread ended meanwhile
        left = min(limit - used, deadline - time.monotonic())
        if left <= 0:
            return
        thread.join(max(left, 0.05))


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while one file is linted. A LibCST tree is hundreds of
    thousands of objects without cycles, and the analysis allocates many small ones: every full
    collection it triggers walks the whole tree again (measured: 10% of the lint time on torch's
    sources). What the file left behind is collected once the collector runs again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_error_result(display: str, error: OSError) -> FileResult:
    reason = error.strerror or str(error)
    return FileResult(display, (error_finding(display, 1, 1, f"cannot read the file: {reason}"),))


def lint_task(task: Task, options: TaskOptions) -> FileResult | str:
    """Lint one file from disk; an internal error comes back as a string, not an exception."""
    try:
        data = Path(task.path).read_bytes()
    except OSError as err:
        return read_error_result(task.display, err)
    return lint_data(data, task, options)


def lint_data(data: bytes | str, task: Task, options: TaskOptions) -> FileResult | str:
    """Lint one file's contents: bytes from disk, or (the language server's unsaved buffer) text."""
    result = _lint_data(data, task, options)
    if _in_worker and isinstance(result, FileResult) and not result.ends_worker and resident_mib() > WORKER_MEMORY_MIB:
        # Python keeps freed memory in its arenas: a worker that parsed a huge file stays big.
        # It retires after this result and the pool starts a fresh one.
        _exit_soon()
        return replace(result, ends_worker=True)
    return result


def resident_mib() -> float:
    """This process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


_PARSES: list[Any] = []  # this process's ParseCache, made on first use


def _parse_cache() -> Any:
    if not _PARSES:
        from devicelint.reparse import ParseCache

        _PARSES.append(ParseCache())
    return _PARSES[0]


def _lint_data(data: bytes | str, task: Task, options: TaskOptions) -> FileResult | str:
    # Imported here: a fully cached run never lints, and LibCST is most of the start-up time.
    from devicelint.engine import DEFAULT_MAX_TOKENS, EngineOptions, lint_source
    from devicelint.notebook import NotebookError, lint_notebook

    all_rules()
    engine_options = EngineOptions(
        rules=tuple(REGISTRY[c] for c in task.codes),
        torch_version=options.torch_version,
        fix_mode=options.fix_mode,
        prefilter=options.prefilter,
        parse_cache=_parse_cache() if options.reuse_parses else None,
        project=task.project,
        max_file_tokens=DEFAULT_MAX_TOKENS if options.max_file_tokens is None else options.max_file_tokens,
    )
    seconds = options.seconds_for(len(data))
    try:
        with collector_paused():
            if task.path.endswith(NOTEBOOK_SUFFIX):
                return in_big_stack(lint_notebook, data, task.display, engine_options, timeout=seconds)
            return in_big_stack(lint_source, data, task.display, engine_options, timeout=seconds)
    except FileTimeout:
        if _in_worker:
            _exit_soon()  # the stuck thread cannot be stopped; the pool replaces this worker
        return FileResult(
            task.display,
            (
                not_analysed_finding(
                    task.display,
                    (f"linting took longer than {seconds:g} s (set `max-file-seconds` to change the limit)"),
                ),
            ),
            timed_out=True,
            ends_worker=_in_worker,
        )
    except NotebookError as err:
        return FileResult(task.display, (error_finding(task.display, 1, 1, str(err)),))
    except MemoryError:
        return FileResult(task.display, (not_analysed_finding(task.display, "out of memory while linting it"),))
    except Exception as err:  # noqa: BLE001 - devicelint's own bug: named, never blamed on the file
        return f"{type(err).__name__} while linting {task.display}: {err}"


# True in pool workers, which may end themselves; never in the command's own process.
_in_worker = False


def _exit_soon() -> None:
    """End this worker once its last result is on its way (a stuck lint thread keeps burning CPU
    and memory otherwise)."""
    timer = threading.Timer(EXIT_DELAY_SECONDS, os._exit, args=(0,))
    timer.daemon = True
    timer.start()


def _worker_init(parent_pid: int) -> None:
    global _in_worker, WORKER_MEMORY_MIB
    _in_worker = True
    # Tests set a tiny mark to make every worker retire after each file.
    WORKER_MEMORY_MIB = float(os.environ.get("DEVICELINT_WORKER_MEMORY_MIB", WORKER_MEMORY_MIB))
    all_rules()
    sys.setrecursionlimit(RECURSION_LIMIT)
    threading.Thread(target=_exit_with, args=(parent_pid,), name="devicelint-parent-watch", daemon=True).start()


def _exit_with(parent_pid: int) -> None:
    """End this worker once the command that started it is gone (`kill -9`, a closed terminal).
    Its real parent is the forkserver, and the pool's pipes stay open in the workers
    themselves, so nothing else would ever tell it."""
    while True:
        time.sleep(PARENT_POLL_SECONDS)
        if not _alive(parent_pid):
            os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed parent its own parent has not reaped yet is a zombie, not alive
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def start_pool_early(files: int, jobs: int) -> None:
    """Start the workers' server now when `files` will be linted by a pool of `jobs`, so that
    its imports overlap what the caller does before the run (building the project index)."""
    if jobs > 1 and files >= MIN_FILES_FOR_POOL:
        import multiprocessing

        _start_forkserver(multiprocessing.get_context("forkserver"))


def _start_forkserver(context: BaseContext) -> None:
    """Start the server that forks the workers, with devicelint and the rules imported once.

    The server is `python -c ...`, which puts the current folder first on `sys.path`, and
    Python up to 3.12 ignores the parent's `sys.path` it is handed. A `devicelint/` folder in the
    current folder (a checkout next to the project) would then shadow the installed package and
    every worker would fail to import it. PYTHONSAFEPATH (3.11+) keeps the folder off the path;
    older Pythons skip the preload when the folder holds anything named devicelint.
    """
    from multiprocessing import forkserver

    shadowed = any(Path(name).exists() for name in ("devicelint", "devicelint.py"))
    if sys.version_info >= (3, 11) or not shadowed:
        context.set_forkserver_preload(
            ["devicelint.runner", "devicelint.engine", "devicelint.notebook", "devicelint.checks"]
        )
    saved = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        with _callers_main_hidden():
            forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = saved


def run_tasks(
    tasks: Sequence[Task],
    options: TaskOptions,
    jobs: int,
    on_done: Callable[[], None] | None = None,
    on_result: Callable[[FileResult], None] | None = None,
    prepare: Callable[[Task], Task | FileResult] | None = None,
) -> RunOutcome:
    """Lint every task; the result order never depends on `jobs`. `on_done` ticks per file;
    `on_result` sees each file's result as soon as it is ready (the cache keeps it at once, so
    an interrupted run loses nothing it finished). `prepare` runs on each task just before it
    is linted (in the order files are handed out) and gives the task to lint, or the file's
    result where it needs no linting after all."""
    outcome = RunOutcome([], [])
    tick = on_done or (lambda: None)

    def collect(result: FileResult | str) -> None:
        _collect(outcome, result)
        if on_result is not None and isinstance(result, FileResult):
            on_result(result)
        tick()

    def answered(result: FileResult) -> None:
        _collect(outcome, result)
        tick()

    ready = _Prepared(prepare, answered)
    if jobs <= 1 or len(tasks) < MIN_FILES_FOR_POOL:
        for task in tasks:
            prepared = ready(task)
            if prepared is not None:
                collect(lint_task(prepared, options))
    else:
        _run_pool(tasks, options, jobs, collect, ready)
    outcome.results.sort(key=lambda r: r.path)
    outcome.internal_errors.sort()
    return outcome


class _Prepared:
    """`prepare` run once per task: the task to lint, or None where `prepare` answered it
    (handed to `answered`)."""

    def __init__(
        self, prepare: Callable[[Task], Task | FileResult] | None, answered: Callable[[FileResult], None]
    ) -> None:
        self._prepare = prepare
        self._answered = answered
        self._done: dict[str, Task] = {}

    def __call__(self, task: Task) -> Task | None:
        if self._prepare is None:
            return task
        done = self._done.get(task.path)
        if done is not None:
            return done
        prepared = self._prepare(task)
        if isinstance(prepared, FileResult):
            self._answered(prepared)
            return None
        self._done[task.path] = prepared
        return prepared


def _collect(outcome: RunOutcome, result: FileResult | str) -> None:
    if isinstance(result, str):
        outcome.internal_errors.append(result)
    else:
        outcome.results.append(result)
        outcome.internal_errors.extend(result.internal_errors)


def _run_pool(
    tasks: Sequence[Task],
    options: TaskOptions,
    jobs: int,
    collect: Callable[[FileResult | str], None],
    ready: Callable[[Task], Task | None],
) -> None:
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    _start_forkserver(context)
    pending = {t.path: t for t in sorted(tasks, key=lambda t: -t.size)}  # large files first
    with _callers_main_hidden():
        while pending:
            announced = _pool_round(context, jobs, pending, options, collect, ready)
            if pending and not announced:
                # A worker died unexplained (the native parser can crash on pathological input):
                # find the file by linting what is left one file per process.
                for task in list(pending.values()):
                    prepared = ready(task)
                    if prepared is not None:
                        collect(_lint_isolated(prepared, options, context))
                return


@contextmanager
def _callers_main_hidden() -> Iterator[None]:
    """New worker processes start without the caller's main module. multiprocessing runs the
    parent's `__main__` again in every new process (as `__mp_main__`) unless it has neither a
    module name nor a file: a script that calls devicelint in-process without an
    `if __name__ == "__main__":` guard would run again in each worker, and `python -` or a
    notebook (no file to run) kills every worker. The workers need only devicelint."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, object] = {name: main.__dict__[name] for name in ("__spec__", "__file__") if name in main.__dict__}
    main.__dict__["__spec__"] = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _pool_round(
    context: BaseContext,
    jobs: int,
    pending: dict[str, Task],
    options: TaskOptions,
    collect: Callable[[FileResult | str], None],
    ready: Callable[[Task], Task | None],
) -> bool:
    """Lint `pending` (removing each file done) until done or the pool breaks; whether a worker
    announced its exit in this round (a file over the time limit, memory over the mark): its
    exit breaks the pool, and a new round goes on with what is left."""
    pool = _pool(context, jobs)
    announced = False
    try:
        futures = {}
        for path, task in list(pending.items()):
            prepared = ready(task)
            if prepared is None:
                del pending[path]  # answered without linting
                continue
            futures[pool.submit(lint_task, prepared, options)] = path
        for future in as_completed(futures):
            result = future.result()
            announced |= isinstance(result, FileResult) and result.ends_worker
            collect(result)
            del pending[futures[future]]
    except BrokenProcessPool:
        pool.shutdown(wait=True)
    except BaseException:  # Ctrl-C, SIGTERM: stop the workers now rather than finish the queue
        _stop(pool)
        raise
    else:
        pool.shutdown(wait=True)
    return announced


def _pool(context: BaseContext, jobs: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init, initargs=(os.getpid(),))


def _stop(pool: ProcessPoolExecutor) -> None:
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=5)


def _lint_isolated(task: Task, options: TaskOptions, context: BaseContext) -> FileResult | str:
    try:
        with _pool(context, 1) as pool:
            return pool.submit(lint_task, task, options).result()
    except BrokenProcessPool:
        # Most likely LibCST's native parser crashing on this input: devicelint's failure to report,
        # not a finding in the user's file.
        return f"the worker process died while linting {task.display} (not analysed)"


def default_jobs() -> int:
    return os.cpu_count() or 1


def write_atomically(path: Path, data: bytes) -> None:
    """Replace a file's contents so that a reader never sees half of it."""
    import tempfile

    folder = path.parent
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".devicelint", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        try:
            os.chmod(temp, path.stat().st_mode & 0o7777)
        except OSError:
            pass
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def encode_like(original: bytes, text: str) -> bytes:
    """Encode fixed text the way the original file was encoded (BOM and coding cookie kept)."""
    import io
    import tokenize

    encoding, _ = tokenize.detect_encoding(io.BytesIO(original).readline)
    if encoding == "utf-8-sig":
        return "\ufeff".encode("utf-8") + text.encode("utf-8")
    return text.encode(encoding)
