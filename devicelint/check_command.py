"""`devicelint check`: settings -> tasks -> runner -> fixes -> report -> exit code."""

from __future__ import annotations

import difflib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import pathspec

from devicelint.config import Config, ConfigError, find_config, load_config, with_overrides
from devicelint.exit_codes import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_INTERRUPTED
from devicelint.files import DEFAULT_EXCLUDES, Excluder, SourceFile, discover
from devicelint.finding import FileResult, Finding
from devicelint.registry import PROJECT_URL, rule_info
from devicelint.report import ReportContext, render
from devicelint.report.text import fixes_listing, statistics, summary
from devicelint.runner import (
    RunOutcome,
    Task,
    TaskOptions,
    default_jobs,
    encode_like,
    lint_data,
    read_error_result,
    start_pool_early,
    write_atomically,
)
from devicelint.selection import Selection, SelectorError, applies_to_torch

if TYPE_CHECKING:
    from devicelint.project.index import ProjectIndex

# Human-readable formats: colour, a summary line, a progress bar.
TEXT_FORMATS = ("text", "concise", "full")


def _error(message: str) -> None:
    click.echo(f"devicelint: error: {message}", err=True)


def _internal_error(message: str) -> None:
    click.echo(
        f"devicelint: internal error: {message}. This is a bug in devicelint, not a problem in the "
        f"file; the other rules' findings are reported. Please report it at {PROJECT_URL}/issues",
        err=True,
    )


def enabled_codes(settings: Config, options: dict[str, Any]) -> set[str]:
    cli_select = _split(options["select"])
    if cli_select:
        selection = Selection(cli_select, _split(options["extend_select"]), _split(options["ignore"]))
    else:
        selection = Selection(
            settings.select,
            (*settings.extend_select, *_split(options["extend_select"])),
            (*settings.ignore, *_split(options["ignore"])),
        )
    codes = selection.codes()
    return {c for c in codes if applies_to_torch(rule_info(c), settings.torch_version)}


def _split(values: Any) -> list[str]:
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


class PerFileIgnores:
    """Rules switched off for files matching glob patterns (relative to the config's folder)."""

    def __init__(self, settings: Config) -> None:
        from devicelint.selection import resolve_all

        self.root = settings.root
        self.entries = [
            (pathspec.GitIgnoreSpec.from_lines([pattern]), resolve_all(codes))
            for pattern, codes in settings.per_file_ignores
        ]

    def codes_for(self, path: Path, codes: set[str]) -> tuple[str, ...]:
        if self.entries:
            absolute = path.absolute()
            try:
                relative = absolute.relative_to(self.root).as_posix()
            except ValueError:
                relative = path.as_posix()
            for spec, ignored in self.entries:
                if spec.match_file(relative) or spec.match_file(path.name):
                    codes = codes - ignored
        return tuple(sorted(codes))


def run_check(paths: list[str], settings: Config, options: dict[str, Any]) -> int:
    try:
        codes = enabled_codes(settings, options)
    except SelectorError as err:
        _error(str(err))
        return EXIT_ERROR
    output_format = options["output_format"] or settings.output_format or "text"
    if options.get("fix_only"):
        options = {**options, "fix": True}
    fix_mode = (
        "unsafe"
        if options["unsafe_fixes"] and (options["fix"] or options["diff"])
        else ("safe" if options["fix"] or options["diff"] else "none")
    )
    task_options = TaskOptions(
        torch_version=settings.torch_version,
        fix_mode=fix_mode,
        max_file_seconds=settings.max_file_seconds,
        max_file_tokens=settings.max_file_tokens,
    )
    per_file = PerFileIgnores(settings)
    sources: dict[str, str] = {}

    if paths == ["-"]:
        return _check_stdin(options, codes, per_file, task_options, output_format)

    excludes = (*(settings.exclude if settings.exclude is not None else DEFAULT_EXCLUDES), *settings.extend_exclude)
    excluder = Excluder(settings.root, excludes, settings.respect_gitignore)
    found = discover(paths, excluder, options["force_exclude"], Path.cwd(), notebooks=settings.notebooks)
    projects = ProjectSettings(settings, codes, per_file, options)
    if options.get("show_settings"):
        # As Ruff: the settings that apply to the first file named (or found).
        shown, shown_codes = (settings, codes)
        if found.files:
            project = projects.project_of(found.files[0])
            shown, shown_codes = project[0], project[1]
        click.echo(_settings_text(shown, shown_codes, fix_mode), nl=False)
        return EXIT_CLEAN
    if options.get("show_files"):
        for source in found.files:
            click.echo(source.display)
        for missing in found.missing:
            _error(f"{missing}: no such file or directory")
        return EXIT_ERROR if found.missing else EXIT_CLEAN
    for missing in found.missing:
        _error(f"{missing}: no such file or directory")
    try:
        tasks = [_task(f, *projects.for_file(f)) for f in found.files if not projects.excludes(f, paths)]
    except (ConfigError, SelectorError) as err:
        _error(str(err))
        return EXIT_ERROR
    jobs = options["jobs"] or default_jobs()
    if options.get("no_cache") and not options.get("show_project"):
        # Every file will be linted: the workers' server starts (and imports the rules) while
        # the project index is built here.
        start_pool_early(len(tasks), jobs)
    views: ProjectViews | None = None
    if not options.get("no_project") or options.get("show_project"):
        # Under --fix/--diff each fix round re-lints the file's new text with the view of its
        # text as read: a fix changes no import, and another file's fixes are seen on the next run.
        store = None if options.get("no_cache") else _project_store(settings, options)
        salt = "" if store is None else _code_fingerprint()
        views = ProjectViews(found.files, projects, paths, store, salt)
    if views is not None and (options.get("show_project") or fix_mode != "none" or options.get("add_noqa")):
        # every view now: fixes and `--add-noqa` lint the files again after the run
        tasks = [views.attach(task) for task in tasks]
        views.save()
        if options.get("show_project"):
            click.echo(_project_text(views.indexes), nl=False)
            return EXIT_CLEAN
        views = None
    try:
        with _terminate_as_interrupt():
            outcome = _run(tasks, task_options, jobs, settings, options, output_format, views)
    except KeyboardInterrupt:
        _error("interrupted: nothing reported; the files finished so far are cached")
        return EXIT_INTERRUPTED
    for display, reason in found.unreadable:
        outcome.results.append(read_error_result(display, OSError(reason)))
    fixed: list[tuple[str, tuple[str, ...]]] = []
    if options.get("add_noqa"):
        return _add_noqa(outcome, tasks)
    if fix_mode != "none":
        fixed = _apply_fixes(outcome, tasks, task_options, options["diff"])
    findings = [] if options.get("fix_only") else outcome.findings
    files_checked = len(tasks) + len(found.unreadable)
    if not found.files and not found.unreadable and not found.missing and not options["quiet"]:
        click.echo("devicelint: no Python files to lint.", err=True)
    failed = bool(found.missing or outcome.internal_errors)
    syntax_only = sum(1 for result in outcome.results if not result.analysed)
    _emit(findings, files_checked, output_format, options, sources, failed, fixed, syntax_only)
    for message in outcome.internal_errors:
        _internal_error(message)
    if outcome.internal_errors:
        return EXIT_INTERNAL
    if found.missing:
        return EXIT_ERROR
    if options.get("exit_non_zero_on_fix") and not options["diff"] and any(codes for _, codes in fixed):
        return EXIT_FINDINGS
    if findings and not options["exit_zero"]:
        return EXIT_FINDINGS
    return EXIT_CLEAN


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) ends the run as Ctrl-C does: workers stopped, the results
    already computed kept in the cache, no traceback."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class ProjectSettings:
    """Each file's settings: those of the nearest config file above it (a monorepo of projects,
    each with its own config, lints in one run), else the ones found from the current folder.
    Output, cache and fix options stay those of the run."""

    def __init__(self, settings: Config, codes: set[str], per_file: PerFileIgnores, options: dict[str, Any]) -> None:
        self.default = (settings, codes, per_file)
        self.options = options
        self.overrides = options.get("nested_configs")
        self.by_folder: dict[Path, tuple[Config, set[str], PerFileIgnores]] = {}
        self.by_config: dict[Path, tuple[Config, set[str], PerFileIgnores]] = {}
        self.excluders: dict[int, Excluder] = {}

    def _for_folder(self, folder: Path) -> tuple[Config, set[str], PerFileIgnores]:
        known = self.by_folder.get(folder)
        if known is not None:
            return known
        settings = self.default[0]
        found = find_config(folder) if self.overrides is not None else None
        if found is None or (settings.path is not None and found.resolve() == settings.path.resolve()):
            project = self.default
        else:
            project = self.by_config.get(found.resolve())
            if project is None:
                nested = with_overrides(load_config(found), self.overrides or [])
                project = (nested, enabled_codes(nested, self.options), PerFileIgnores(nested))
                self.by_config[found.resolve()] = project
        self.by_folder[folder] = project
        return project

    def project_of(self, source: SourceFile) -> tuple[Config, set[str], PerFileIgnores]:
        return self._for_folder(source.path.absolute().parent)

    def for_file(self, source: SourceFile) -> tuple[PerFileIgnores, set[str]]:
        _, codes, per_file = self.project_of(source)
        return per_file, codes

    def excludes(self, source: SourceFile, named: list[str]) -> bool:
        """A nested project's own excludes, for files found by walking a folder."""
        project = self._for_folder(source.path.absolute().parent)[0]
        if project is self.default[0] or str(source.path) in named:
            return False
        excluder = self.excluders.get(id(project))
        if excluder is None:
            patterns = (
                *(project.exclude if project.exclude is not None else DEFAULT_EXCLUDES),
                *project.extend_exclude,
            )
            excluder = self.excluders[id(project)] = Excluder(project.root, patterns, project.respect_gitignore)
        return excluder.excluded(source.path.absolute(), False)


class ProjectViews:
    """What each task's file sees of the other modules of its project (`devicelint.project`),
    built when a task asks: the runner asks just before it hands the file to a worker, so that
    building the views overlaps the linting instead of preceding it."""

    def __init__(
        self,
        files: Sequence[SourceFile],
        projects: ProjectSettings,
        named: list[str],
        store: Path | None = None,
        salt: str = "",
    ) -> None:
        self._sources = {str(f.path): f for f in files}
        self._projects = projects
        self._folders = [str(Path(p).absolute()) for p in named if _holds_dir(p)]
        self._store = store
        self._salt = salt
        self.indexes: dict[Path, ProjectIndex] = {}

    def _index_of(self, task: Task) -> tuple[ProjectIndex, Path] | None:
        from devicelint.project.index import ProjectIndex, project_root

        source = self._sources.get(task.path)
        if source is None:
            return None
        config = self._projects.project_of(source)[0]
        path = source.path.absolute()
        text = str(path)
        linted = max((f for f in self._folders if text.startswith(f.rstrip(os.sep) + os.sep)), key=len, default=None)
        root = project_root(
            Path(linted) if linted is not None else path, config.root if config.path is not None else None
        )
        index = self.indexes.get(root)
        if index is None:
            index = self.indexes[root] = ProjectIndex(root, self._store, self._salt)
        return index, path

    def attach(self, task: Task) -> Task:
        """The task with its file's view (built now unless the last run's record holds it)."""
        found = self._index_of(task)
        if found is None:
            return task
        view = found[0].view(found[1])
        return replace(task, project=view) if view else task

    def recorded(self, task: Task) -> Task | None:
        """The task with its view where that costs nothing (no project file to summarise: the
        last run's record holds it), else None."""
        found = self._index_of(task)
        if found is None:
            return task
        view = found[0].recorded_view(found[1])
        if view is None:
            return None
        return replace(task, project=view) if view else task

    def save(self) -> None:
        for index in self.indexes.values():
            index.save()


def _holds_dir(path: str) -> bool:
    from devicelint.project.index import holds

    return holds(Path(path).is_dir)


def _code_fingerprint() -> str:
    from devicelint.cache import code_fingerprint

    return code_fingerprint()


def _project_store(settings: Config, options: dict[str, Any]) -> Path:
    """Where the project index keeps module summaries between runs: beside the result cache."""
    from devicelint.cache import cache_root

    return cache_root(settings, options) / "project"


def _project_text(indexes: dict[Path, ProjectIndex]) -> str:
    """What `--show-project` prints: each project's root and the files its index summarised."""
    lines = []
    for root, index in sorted(indexes.items()):
        lines.append(f"project root  {root}")
        if index.too_large:
            lines.append(
                "  (more .py files below it than one project holds: imports are resolved, no whole-project scan)"
            )
        for path in index.covered():
            summary = index.summaries[path]
            try:
                shown = path.relative_to(root).as_posix()
            except ValueError:
                shown = str(path)
            note = f"  (not read: {summary.error})" if summary.error else ""
            lines.append(f"  {shown}  {summary.name or '-'}{note}")
    return "".join(line + "\n" for line in lines) or "no project files\n"


def _task(source: SourceFile, per_file: PerFileIgnores, codes: set[str]) -> Task:
    try:
        size = source.path.stat().st_size
    except OSError:
        size = 0
    return Task(str(source.path), source.display, per_file.codes_for(source.path, codes), size)


def _run(
    tasks: list[Task],
    task_options: TaskOptions,
    jobs: int,
    settings: Config,
    options: dict[str, Any],
    output_format: str,
    views: ProjectViews | None,
) -> RunOutcome:
    from devicelint.cache import run_with_cache
    from devicelint.progress import Progress

    try:
        with Progress(len(tasks), enabled=output_format in TEXT_FORMATS and not options["quiet"]) as progress:
            return run_with_cache(tasks, task_options, jobs, settings, options, progress.tick, views)
    finally:
        if views is not None:
            views.save()


def _check_stdin(
    options: dict[str, Any], codes: set[str], per_file: PerFileIgnores, task_options: TaskOptions, output_format: str
) -> int:
    display = options["stdin_filename"] or "-"
    data = sys.stdin.buffer.read()
    task = Task(display, display, per_file.codes_for(Path(display), codes), len(data))
    result = lint_data(data, task, task_options)
    if isinstance(result, str):
        _internal_error(result)
        return EXIT_INTERNAL
    text = _readable(data)
    findings = list(result.findings)
    # The fixed source in the input's own encoding, BOM and coding cookie kept.
    fixed = encode_like(data, result.fixed_source) if result.fixed_source is not None else None
    if options["fix"] and not options["diff"]:
        # As Ruff does: the fixed source goes to stdout, the remaining findings to stderr.
        sys.stdout.flush()
        sys.stdout.buffer.write(fixed if fixed is not None else data)
        sys.stdout.flush()
        if fixed is not None:
            remaining = lint_data(fixed, replace(task, size=len(fixed)), replace(task_options, fix_mode="none"))
            findings = list(remaining.findings) if isinstance(remaining, FileResult) else findings
            text = _readable(fixed)
        report = render(output_format, findings, ReportContext(1, options["show_source"], False, {display: text}))
        sys.stderr.write(report)
        if options.get("show_fixes"):
            sys.stderr.write(fixes_listing([(display, result.fixes_applied)], would=False))
    else:
        if options["diff"] and fixed is not None:
            click.echo(unified_diff(display, data, fixed), nl=False)
        _emit(findings, 1, output_format, options, {display: text}, fixed=[(display, result.fixes_applied)])
    for message in result.internal_errors:
        _internal_error(message)
    if result.internal_errors:
        return EXIT_INTERNAL
    if findings and not options["exit_zero"]:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _settings_text(settings: Config, codes: set[str], fix_mode: str) -> str:
    """What `--show-settings` prints: where the settings came from and what they resolve to."""
    source = str(settings.path) if settings.path is not None else "(defaults: no config file found)"
    rows = [
        ("config file", source),
        ("root", str(settings.root)),
        ("rules", ", ".join(sorted(codes))),
        ("per-file-ignores", "; ".join(f"{p} = {', '.join(c)}" for p, c in settings.per_file_ignores) or "-"),
        ("exclude", ", ".join(settings.exclude) if settings.exclude is not None else "(defaults)"),
        ("extend-exclude", ", ".join(settings.extend_exclude) or "-"),
        ("output-format", settings.output_format or "text"),
        ("torch-version", settings.torch_version or "(any)"),
        ("cache-dir", settings.cache_dir or "(default)"),
        ("notebooks", str(settings.notebooks).lower()),
        ("respect-gitignore", str(settings.respect_gitignore).lower()),
        ("max-file-seconds", "(default)" if settings.max_file_seconds is None else f"{settings.max_file_seconds:g}"),
        ("max-file-tokens", "(default)" if settings.max_file_tokens is None else str(settings.max_file_tokens)),
        ("fix", fix_mode),
    ]
    width = max(len(name) for name, _ in rows)
    return "".join(f"{name:<{width}}  {value}\n" for name, value in rows)


def want_color(choice: str, stream: Any) -> bool:
    """`--color`, then the NO_COLOR and FORCE_COLOR conventions, then whether it is a terminal."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(stream.isatty())


def _add_noqa(outcome: RunOutcome, tasks: list[Task]) -> int:
    from devicelint.add_noqa import add_noqa

    by_display = {t.display: t for t in tasks}
    total = 0
    for result in outcome.results:
        task = by_display.get(result.path)
        if task is None or not result.findings or task.path.endswith(".ipynb"):
            continue
        path = Path(task.path)
        original = path.read_bytes()
        marked, added = add_noqa(_readable(original), result.findings)
        if added:
            write_atomically(path, encode_like(original, marked))
            total += added
    click.echo(f"Added {total} noqa {'directive' if total == 1 else 'directives'}.")
    for message in outcome.internal_errors:
        _internal_error(message)
    return EXIT_INTERNAL if outcome.internal_errors else EXIT_CLEAN


def _readable(data: bytes) -> str:
    """The source as Python reads it (coding cookie, BOM), for showing lines under findings."""
    from devicelint.engine import decode_source

    try:
        return decode_source(data)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", errors="replace")


def _apply_fixes(
    outcome: RunOutcome, tasks: list[Task], task_options: TaskOptions, diff_only: bool
) -> list[tuple[str, tuple[str, ...]]]:
    """Write (or, with `diff_only`, print) each fixed file; returns each file's applied fix codes."""
    by_display = {t.display: t for t in tasks}
    applied: list[tuple[str, tuple[str, ...]]] = []
    for index, result in enumerate(outcome.results):
        if result.fixed_source is None or result.path not in by_display:
            continue
        applied.append((result.path, result.fixes_applied))
        task = by_display[result.path]
        path = Path(task.path)
        original = path.read_bytes()
        fixed = encode_like(original, result.fixed_source)
        if diff_only:
            click.echo(unified_diff(task.display, original, fixed), nl=False)
            continue
        write_atomically(path, fixed)
        remaining = lint_data(path.read_bytes(), task, replace(task_options, fix_mode="none"))
        if isinstance(remaining, FileResult):
            outcome.results[index] = remaining
    return applied


def unified_diff(display: str, before: bytes, after: bytes) -> bytes:
    """A unified diff of the file's bytes as `--fix` would write them, which `patch` applies
    exactly: any encoding and BOM, CRLF or CR-only line ends, form feeds, no final line break."""
    name = os.fsencode(display)
    lines = difflib.diff_bytes(
        difflib.unified_diff, _byte_lines(before), _byte_lines(after), b"a/" + name, b"b/" + name
    )
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith(b"\n"):  # the last line of a file with no final line break
            out.append(b"\n\\ No newline at end of file\n")
    return b"".join(out)


def _byte_lines(data: bytes) -> list[bytes]:
    # Lines as `patch` sees them: split after "\n" only (a CR-only file is one line; bytes and
    # str `splitlines` would also split at "\r", "\f" and others).
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _emit(
    findings: list[Finding],
    files_checked: int,
    output_format: str,
    options: dict[str, Any],
    sources: dict[str, str],
    failed: bool = False,
    fixed: Sequence[tuple[str, tuple[str, ...]]] = (),
    syntax_only: int = 0,
) -> None:
    output_file = options["output_file"]
    # With --diff, stdout carries the diff alone (as Ruff), so `patch` can read it.
    to_stderr = bool(options["diff"]) and not output_file
    stream = sys.stderr if to_stderr else sys.stdout
    textual = output_format in TEXT_FORMATS
    color = textual and output_file is None and want_color(options.get("color", "auto"), stream)
    show_source = {"concise": False, "full": True}.get(output_format, options["show_source"])
    context = ReportContext(files_checked, show_source, color, sources)
    report = render(output_format, findings, context)
    fix_count = 0 if options["diff"] else sum(len(codes) for _, codes in fixed)
    if textual and options["statistics"]:
        report = statistics(findings, syntax_only)
    if options.get("show_fixes"):
        listing = fixes_listing(fixed, would=options["diff"])
        if textual and not output_file:
            report += listing
        else:  # keep a machine-readable report clean
            click.echo(listing, err=True, nl=False)
    if textual and not options["quiet"] and not (failed and not findings):
        report += summary(findings, files_checked, fix_count) + "\n"  # never "All clear" after an error
    if output_file:
        try:
            Path(output_file).write_text(report, encoding="utf-8")
        except OSError as err:
            _error(f"cannot write {output_file}: {err.strerror or err}")
            sys.exit(EXIT_ERROR)
    else:
        click.echo(report, nl=False, color=color, err=to_stderr)
