"""Read `[tool.devicelint]` from pyproject.toml or a devicelint.toml, and check every key."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from devicelint.report import FORMATS
from devicelint.selection import SelectorError, resolve_all, validate_torch_version

OUTPUT_FORMATS = FORMATS  # the CLI offers these as --output-format's choices

_LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude")
KNOWN_KEYS = frozenset(
    _LIST_KEYS
    + (
        "per-file-ignores",
        "output-format",
        "torch-version",
        "cache-dir",
        "notebooks",
        "respect-gitignore",
        "max-file-seconds",
        "max-file-tokens",
    )
)


class ConfigError(Exception):
    """A configuration problem; the message names the file and the key."""


@dataclass(frozen=True)
class Config:
    # The file the settings came from (None: defaults), and the folder patterns are relative to.
    path: Path | None = None
    root: Path = field(default_factory=Path.cwd)
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    output_format: str | None = None
    torch_version: str | None = None
    cache_dir: str | None = None
    notebooks: bool = True
    respect_gitignore: bool = True
    # Seconds one file may take before it is a DL002 (None: 10 s plus 5 s per MB; 0: no limit).
    max_file_seconds: float | None = None
    # Tokens a file may weigh before it is a DL002 unparsed (None: the engine's default; 0: no limit).
    max_file_tokens: int | None = None


def find_config(start: Path) -> Path | None:
    """The nearest devicelint.toml, or pyproject.toml with a [tool.devicelint] table, upward from `start`."""
    for folder in (start, *start.parents):
        candidate = folder / "devicelint.toml"
        if candidate.is_file():
            return candidate
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and has_devicelint_table(candidate):
            return candidate
    return None


def has_devicelint_table(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        # Broken TOML that means to configure devicelint: load_config reports it, never skips it.
        return "tool.devicelint" in text
    return isinstance(data.get("tool"), dict) and "devicelint" in data["tool"]


def load_config(path: Path) -> Config:
    """Parse and validate one config file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file: {err.strerror or err}") from err
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from err
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("devicelint", {})
        prefix = "tool.devicelint."
    else:
        table = data.get("tool", {}).get("devicelint", data)
        prefix = ""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [{prefix.rstrip('.') or 'devicelint'}] must be a table")
    return _from_table(table, path, prefix)


def _from_table(table: dict[str, Any], path: Path, prefix: str) -> Config:
    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(f"{path}: `{prefix}{key}` {why}")

    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise fail(unknown[0], f"is not a devicelint setting (known: {', '.join(sorted(KNOWN_KEYS))})")
    values: dict[str, Any] = {}
    for key in _LIST_KEYS:
        if key in table:
            value = table[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(key, "must be a list of strings")
            values[key] = tuple(value)
    for key in ("select", "ignore", "extend-select"):
        try:
            resolve_all(values.get(key, ()))
        except SelectorError as err:
            raise fail(key, f"has an {err}") from err
    per_file: list[tuple[str, tuple[str, ...]]] = []
    raw = table.get("per-file-ignores", {})
    if not isinstance(raw, dict):
        raise fail("per-file-ignores", "must be a table of glob = [codes]")
    for pattern, codes in raw.items():
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise fail(f"per-file-ignores.{pattern}", "must be a list of rule codes")
        try:
            resolve_all(codes)
        except SelectorError as err:
            raise fail(f"per-file-ignores.{pattern}", f"has an {err}") from err
        per_file.append((pattern, tuple(codes)))
    output_format = table.get("output-format")
    if output_format is not None and output_format not in OUTPUT_FORMATS:
        raise fail("output-format", f"must be one of {', '.join(OUTPUT_FORMATS)}")
    torch_version = table.get("torch-version")
    if torch_version is not None:
        if not isinstance(torch_version, str):
            raise fail("torch-version", 'must be a string such as "2.4"')
        try:
            validate_torch_version(torch_version)
        except SelectorError as err:
            raise fail("torch-version", str(err)) from err
    for key in ("notebooks", "respect-gitignore"):
        if key in table and not isinstance(table[key], bool):
            raise fail(key, "must be true or false")
    cache_dir = table.get("cache-dir")
    if cache_dir is not None and not isinstance(cache_dir, str):
        raise fail("cache-dir", "must be a string")
    max_seconds = table.get("max-file-seconds")
    if max_seconds is not None and (
        isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or max_seconds < 0
    ):
        raise fail("max-file-seconds", "must be a number of seconds, 0 for no limit")
    max_tokens = table.get("max-file-tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0):
        raise fail("max-file-tokens", "must be a whole number of tokens, 0 for no limit")
    return Config(
        path=path,
        root=path.parent.resolve(),
        select=values.get("select"),
        ignore=values.get("ignore", ()),
        extend_select=values.get("extend-select", ()),
        per_file_ignores=tuple(per_file),
        exclude=values.get("exclude"),
        extend_exclude=values.get("extend-exclude", ()),
        output_format=output_format,
        torch_version=torch_version,
        cache_dir=cache_dir,
        notebooks=table.get("notebooks", True),
        respect_gitignore=table.get("respect-gitignore", True),
        max_file_seconds=max_seconds,
        max_file_tokens=max_tokens,
    )


def with_overrides(settings: Config, overrides: list[str]) -> Config:
    """`settings` with command-line overrides applied: each `KEY=VALUE` in TOML syntax
    (`--config 'ignore = ["DL502"]'`), validated as a config file's keys are."""
    from dataclasses import replace

    table: dict[str, Any] = {}
    for override in overrides:
        try:
            parsed = tomllib.loads(override)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"--config {override!r}: not a KEY = VALUE pair in TOML syntax ({err})") from err
        table.update(parsed)
    if not table:
        return settings
    given = _from_table(table, Path("--config"), "")
    changes = {key.replace("-", "_"): getattr(given, key.replace("-", "_")) for key in table}
    if "per_file_ignores" in changes:  # added to the config file's entries, as Ruff merges them
        changes["per_file_ignores"] = (*settings.per_file_ignores, *changes["per_file_ignores"])
    return replace(settings, **changes)
