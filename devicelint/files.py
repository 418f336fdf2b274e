"""Find the files to lint: recurse into folders, honour .gitignore and excludes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pathspec

DEFAULT_EXCLUDES = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    "build",
    "dist",
    "__pycache__",
    "site-packages",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".devicelint_cache",
    ".ipynb_checkpoints",
)
PYTHON_SUFFIXES = (".py", ".pyi")
NOTEBOOK_SUFFIX = ".ipynb"


@dataclass(frozen=True)
class SourceFile:
    path: Path
    # What the user sees: relative to the working directory when possible.
    display: str


@dataclass(frozen=True)
class Discovery:
    files: list[SourceFile]
    # Paths that could not be listed or read (broken symlinks, permissions), with the reason.
    unreadable: list[tuple[str, str]]
    # Paths given on the command line that do not exist.
    missing: list[str]


def display_path(path: Path, cwd: Path) -> str:
    try:
        return path.resolve().relative_to(cwd).as_posix() if path.is_absolute() else path.as_posix()
    except ValueError:
        return path.as_posix()


def _spec(patterns: Iterable[str]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(patterns)


class Excluder:
    """Decides whether a path is excluded, from defaults, config patterns and .gitignore files."""

    def __init__(self, root: Path, patterns: Iterable[str], respect_gitignore: bool) -> None:
        self.root = root.resolve()
        patterns = list(patterns)
        # `build` or `site-packages` name a folder anywhere below what is being walked; `/build`
        # or `src/gen/*.py` name places relative to the config's folder. Kept apart so that
        # `devicelint build/` or a folder inside site-packages, named on purpose, is linted.
        self.anchored = _spec(p for p in patterns if "/" in p.lstrip("!").rstrip("/"))
        self.unanchored = _spec(p for p in patterns if "/" not in p.lstrip("!").rstrip("/"))
        self.respect_gitignore = respect_gitignore
        self._gitignores: dict[Path, pathspec.GitIgnoreSpec | None] = {}

    def _relative(self, path: Path, base: Path) -> str | None:
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            return None

    def _gitignore(self, folder: Path) -> pathspec.GitIgnoreSpec | None:
        if folder not in self._gitignores:
            spec = None
            ignore_file = folder / ".gitignore"
            try:
                if ignore_file.is_file():
                    spec = pathspec.GitIgnoreSpec.from_lines(
                        ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
                    )
            except OSError:
                spec = None
            self._gitignores[folder] = spec
        return self._gitignores[folder]

    def excluded(self, path: Path, is_dir: bool, top: Path | None = None) -> bool:
        """Whether `path` is excluded; `top` is the folder named on the command line being walked."""
        path = path.absolute()
        suffix = "/" if is_dir else ""
        if is_dir and (path / "pyvenv.cfg").exists():
            return True  # a virtualenv, whatever its name
        relative = self._relative(path, self.root)
        if relative is not None and self.anchored.match_file(relative + suffix):
            return True
        below = self._relative(path, top.absolute()) if top is not None else relative
        if self.unanchored.match_file((below if below is not None else path.name) + suffix):
            return True
        if self.respect_gitignore:
            for folder in path.parents:
                spec = self._gitignore(folder)
                if spec is not None:
                    rel = self._relative(path, folder)
                    if rel is not None and spec.match_file(rel + suffix):
                        return True
                if (folder / ".git").exists():
                    break
        return False

    def inside_virtualenv(self, path: Path) -> bool:
        """Whether a folder between the root and a named `path` is a virtualenv (has pyvenv.cfg)."""
        for folder in path.absolute().parents:
            if self._relative(folder, self.root) in (None, "."):
                break
            if (folder / "pyvenv.cfg").exists():
                return True
        return False


def discover(
    paths: Iterable[str], excluder: Excluder, force_exclude: bool, cwd: Path, notebooks: bool = True
) -> Discovery:
    suffixes = PYTHON_SUFFIXES + ((NOTEBOOK_SUFFIX,) if notebooks else ())
    files: dict[Path, SourceFile] = {}
    unreadable: list[tuple[str, str]] = []
    missing: list[str] = []
    for given in paths:
        path = Path(given)
        try:
            is_folder = stat.S_ISDIR(path.stat().st_mode)
        except (FileNotFoundError, NotADirectoryError):
            if path.is_symlink():
                unreadable.append((given, "broken symbolic link"))
            else:
                missing.append(given)
            continue
        except OSError as err:  # a folder on the way we may not search: a finding, like any unreadable file
            unreadable.append((given, err.strerror or str(err)))
            continue
        if force_exclude and excluder.inside_virtualenv(path):
            continue
        if is_folder:
            if force_exclude and excluder.excluded(path, True):
                continue
            _walk(path, excluder, suffixes, files, unreadable, cwd)
        elif not (force_exclude and excluder.excluded(path, False)):
            files.setdefault(path.absolute(), SourceFile(path, display_path(path, cwd)))
    ordered = sorted(files.values(), key=lambda f: f.display)
    return Discovery(ordered, sorted(unreadable), missing)


def _walk(
    top: Path,
    excluder: Excluder,
    suffixes: tuple[str, ...],
    files: dict[Path, SourceFile],
    unreadable: list[tuple[str, str]],
    cwd: Path,
) -> None:
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as err:
            unreadable.append((display_path(folder, cwd), err.strerror or str(err)))
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                # Symlinked folders are not followed (as git and Ruff): a link to `..` loops forever.
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if not excluder.excluded(path, True, top):
                    stack.append(path)
                continue
            if not entry.name.endswith(suffixes):
                continue
            if entry.is_symlink():
                if not path.exists():
                    unreadable.append((display_path(path, cwd), "broken symbolic link"))
                    continue
                if path.is_dir():
                    continue
            if excluder.excluded(path, False, top):
                continue
            files.setdefault(path.absolute(), SourceFile(path, display_path(path, cwd)))
