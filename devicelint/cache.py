"""Per-file result cache keyed by content hash, devicelint version and the settings that matter.

Entries are JSON (never pickle: a cache in a shared checkout must not be a way to run code),
written atomically, one file per entry, so concurrent runs cannot corrupt each other; an entry
that does not read back as expected is ignored and rewritten.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from devicelint import __version__
from devicelint.finding import Edit, FileResult, Finding, Fix
from devicelint.runner import RunOutcome, Task, TaskOptions, run_tasks, write_atomically

if TYPE_CHECKING:
    from devicelint.config import Config

DEFAULT_CACHE_DIR = ".devicelint_cache"
REGISTRY_CODE = re.compile(r"^DL\d{3}$")
_FORMAT = "2"  # 2: an entry also says whether the file was analysed or only syntax-checked
# Where one format's entries live under the cache root: a new format never reads an old entry.
RESULTS_FOLDER = f"v{_FORMAT}"


def cache_root(settings: Config, options: dict[str, Any]) -> Path:
    folder = options.get("cache_dir") or settings.cache_dir
    if folder:
        return Path(folder)
    base = settings.root if settings.path is not None else Path.cwd()
    return base / DEFAULT_CACHE_DIR


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Names, sizes and mtimes of devicelint's own modules: an edited rule (editable installs,
    development) invalidates the cache even though the version number did not change."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for module in sorted(package.rglob("*.py")):
        stat = module.stat()
        digest.update(f"{module.relative_to(package)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def entry_key(data: bytes, task: Task, options: TaskOptions) -> str:
    digest = hashlib.sha256()
    digest.update(
        f"{_FORMAT}\0{__version__}\0{code_fingerprint()}\0{options.torch_version}\0{options.prefilter}\0"
        f"{options.max_file_tokens}\0".encode()
    )  # the size limit decides whether a file is analysed
    digest.update(",".join(task.codes).encode())
    # The summaries of the project modules the file imports: editing one re-lints its importers.
    digest.update(b"\0" + (task.project.fingerprint().encode() if task.project else b"-"))
    digest.update(b"\0" + task.display.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(data)
    return digest.hexdigest()


def _encode(result: FileResult) -> str:
    return json.dumps({"analysed": result.analysed, "findings": [_finding_dict(f) for f in result.findings]})


def _finding_dict(finding: Finding) -> dict[str, Any]:
    return asdict(finding)


def _decode(text: str, display: str) -> FileResult | None:
    """The cached result, or None for anything that is not exactly what `_encode` writes: a
    damaged or hand-edited entry is a miss, never a crash or a wrong report."""
    try:
        entry = json.loads(text)
    except (ValueError, RecursionError):  # deeply nested JSON exhausts the parser's recursion
        return None
    if not isinstance(entry, dict) or set(entry) != {"analysed", "findings"}:
        return None
    rows, analysed = entry["findings"], entry["analysed"]
    if not isinstance(rows, list) or not isinstance(analysed, bool):
        return None
    findings = []
    for row in rows:
        finding = _finding_from(row, display)
        if finding is None:
            return None
        findings.append(finding)
    return FileResult(display, tuple(findings), analysed=analysed)


_FINDING_FIELDS = {field.name: field.type for field in fields(Finding)}
_POSITIONS = ("line", "column", "end_line", "end_column")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _finding_from(row: object, display: str) -> Finding | None:
    if not isinstance(row, dict) or set(row) != set(_FINDING_FIELDS):
        return None
    if not all(_is_int(row[name]) for name in _POSITIONS):
        return None
    if not all(isinstance(row[name], str) for name in ("path", "code", "name", "message", "url")):
        return None
    if row["severity"] not in ("error", "warning") or not REGISTRY_CODE.match(row["code"]):
        return None
    if not (row["cell"] is None or _is_int(row["cell"])) or not (
        row["module_path"] is None or isinstance(row["module_path"], str)
    ):
        return None
    fix = row["fix"]
    if fix is not None:
        fix = _fix_from(fix)
        if fix is None:
            return None
    return Finding(**{**row, "fix": fix, "path": display})


def _fix_from(value: object) -> Fix | None:
    if not isinstance(value, dict) or set(value) != {"description", "safe", "edits"}:
        return None
    if (
        not isinstance(value["description"], str)
        or not isinstance(value["safe"], bool)
        or not isinstance(value["edits"], list)
    ):
        return None
    edits = []
    for edit in value["edits"]:
        if not isinstance(edit, dict) or set(edit) != {*_POSITIONS, "content"}:
            return None
        if not all(_is_int(edit[name]) for name in _POSITIONS) or not isinstance(edit["content"], str):
            return None
        edits.append(Edit(**edit))
    return Fix(value["description"], value["safe"], tuple(edits))


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries = root / RESULTS_FOLDER

    def prepare(self) -> bool:
        try:
            self.entries.mkdir(parents=True, exist_ok=True)
            ignore = self.root / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# Created by devicelint\n*\n", encoding="utf-8")
            return True
        except OSError:
            return False

    def _path(self, key: str) -> Path:
        return self.entries / key[:2] / f"{key}.json"

    def get(self, key: str, display: str) -> FileResult | None:
        try:
            text = self._path(key).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        return _decode(text, display)

    def put(self, key: str, result: FileResult) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(exist_ok=True)
            write_atomically(path, _encode(result).encode("utf-8"))
        except OSError:
            pass  # a read-only checkout still lints, only slower


class Views(Protocol):
    """What the run asks of the project views (`check_command.ProjectViews`)."""

    def attach(self, task: Task) -> Task: ...

    def recorded(self, task: Task) -> Task | None: ...


def run_with_cache(
    tasks: list[Task],
    task_options: TaskOptions,
    jobs: int,
    settings: Config,
    options: dict[str, Any],
    on_done: Callable[[], None] | None = None,
    views: Views | None = None,
) -> RunOutcome:
    """Lint the tasks the cache cannot answer. A task whose project view is not at hand (the
    first run, or a file its view read changed) is looked up only once the runner has built the
    view, just before the file would be linted: views are built while workers lint."""
    attach = views.attach if views is not None else None
    if options.get("no_cache") or task_options.fix_mode != "none":
        return run_tasks(tasks, task_options, jobs, on_done, prepare=attach)
    cache = Cache(cache_root(settings, options))
    if not cache.prepare():
        return run_tasks(tasks, task_options, jobs, on_done, prepare=attach)
    hits: list[FileResult] = []
    misses: list[Task] = []
    keys: dict[str, str] = {}

    def look_up(task: Task) -> FileResult | None:
        try:
            data = Path(task.path).read_bytes()
        except OSError:
            return None
        key = entry_key(data, task, task_options)
        cached = cache.get(key, task.display)
        if cached is None:
            keys[task.display] = key
        return cached

    deferred: set[str] = set()
    for task in tasks:
        ready = views.recorded(task) if views is not None else task
        if ready is None:
            deferred.add(task.path)
            misses.append(task)
            continue
        cached = look_up(ready)
        if cached is None:
            misses.append(ready)
        else:
            hits.append(cached)

    def prepare(task: Task) -> Task | FileResult:
        if views is None or task.path not in deferred:
            return task
        task = views.attach(task)
        cached = look_up(task)
        return cached if cached is not None else task

    def keep(result: FileResult) -> None:
        key = keys.get(result.path)
        if (
            key is not None
            and not result.internal_errors
            and not result.timed_out
            and not any(f.message.startswith("cannot read") for f in result.findings)
        ):
            cache.put(key, result)

    outcome = run_tasks(misses, task_options, jobs, on_done, on_result=keep, prepare=prepare if deferred else None)
    outcome.results.extend(hits)
    outcome.results.sort(key=lambda r: r.path)
    return outcome


def remove_cache(root: Path) -> bool:
    if not root.exists():
        return False
    shutil.rmtree(root)
    return True


__all__ = ["Cache", "DEFAULT_CACHE_DIR", "remove_cache", "run_with_cache"]
