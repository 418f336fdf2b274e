"""Each open file's lint settings, resolved as `devicelint check` resolves them: the nearest
`devicelint.toml` or `[tool.devicelint]` above the file, its selection, per-file ignores and
torch version. Resolved settings are kept per folder until a config file changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devicelint.check_command import PerFileIgnores, enabled_codes
from devicelint.config import Config, ConfigError, find_config, load_config
from devicelint.selection import SelectorError

CONFIG_NAMES = ("pyproject.toml", "devicelint.toml")
# What the command line passes when it names no rules itself.
_NO_COMMAND_LINE_SELECTION = {"select": (), "extend_select": (), "ignore": ()}


@dataclass(frozen=True)
class FileSettings:
    """What one lint of one file needs to know."""

    codes: tuple[str, ...]
    torch_version: str | None
    max_file_seconds: float | None
    notebooks: bool
    max_file_tokens: int | None = None


@dataclass(frozen=True)
class _Project:
    settings: Config
    codes: frozenset[str]
    per_file: PerFileIgnores


class SettingsResolver:
    """Settings per file. A broken config is reported through `report_error` (once per
    message) and its files are linted with the defaults, so the editor keeps working."""

    def __init__(self, report_error: Callable[[str], None]) -> None:
        self._report_error = report_error
        self._config_of_folder: dict[Path, Path | None] = {}
        self._projects: dict[Path | None, _Project] = {}
        self._reported: set[str] = set()

    def forget(self) -> None:
        """Drop what was resolved: a config file was created, changed or deleted."""
        self._config_of_folder.clear()
        self._projects.clear()
        self._reported.clear()

    def for_file(self, path: Path | None, fallback_folder: Path | None) -> FileSettings:
        """The settings of `path`; a document with no path on disk (an unsaved new buffer)
        takes those of `fallback_folder` (its workspace folder), else the defaults."""
        folder = path.parent if path is not None else fallback_folder
        project = self._project(self._config_for(folder) if folder is not None else None)
        codes = set(project.codes)
        if path is not None:
            codes = set(project.per_file.codes_for(path, codes))
        settings = project.settings
        return FileSettings(
            tuple(sorted(codes)),
            settings.torch_version,
            settings.max_file_seconds,
            settings.notebooks,
            settings.max_file_tokens,
        )

    def config_folder(self, path: Path) -> Path | None:
        """The folder of the config file that applies to `path` (the root of its project)."""
        found = self._config_for(path.parent)
        return found.parent if found is not None else None

    def _config_for(self, folder: Path) -> Path | None:
        if folder not in self._config_of_folder:
            self._config_of_folder[folder] = find_config(folder)
        return self._config_of_folder[folder]

    def _project(self, config_path: Path | None) -> _Project:
        known = self._projects.get(config_path)
        if known is not None:
            return known
        try:
            settings = load_config(config_path) if config_path is not None else Config()
            project = _Project(
                settings, frozenset(enabled_codes(settings, _NO_COMMAND_LINE_SELECTION)), PerFileIgnores(settings)
            )
        except (ConfigError, SelectorError) as err:
            message = f"{err}; linting with the default settings until it is fixed"
            if message not in self._reported:
                self._reported.add(message)
                self._report_error(message)
            settings = Config()
            project = _Project(
                settings, frozenset(enabled_codes(settings, _NO_COMMAND_LINE_SELECTION)), PerFileIgnores(settings)
            )
        self._projects[config_path] = project
        return project


def is_config_file(path: str) -> bool:
    return path.replace("\\", "/").rsplit("/", 1)[-1] in CONFIG_NAMES
