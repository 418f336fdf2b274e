"""The oldest torch release the linted project says it supports, for advice that needs a newer one.

`torch.amp.GradScaler("cuda")` exists from torch 2.3 and `torch.amp.custom_fwd(device_type=...)`
from 2.4. A rule that suggests them must say so when the project still supports older releases.
The floor comes from devicelint's `torch-version` setting when one is given, else from the
project's own metadata next to the file or above it: `[project] dependencies` or Poetry's
`[tool.poetry.dependencies]` in pyproject.toml, `install_requires` in setup.cfg or setup.py, or a
requirements*.txt. The search stops at the first folder holding any of these (or a `.git`).

This is the one place in the analysis layer that reads files other than the linted one; it reads
each folder once per process. Better: the runner reads it once per project and hands it in next
to the `torch-version` setting (and the result cache keys on it, which it does not today).
"""

from __future__ import annotations

import configparser
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from devicelint.context import FileContext

_METADATA_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "requirements.txt")
_SETUP_PY_TORCH = re.compile(r"""["'](torch\s*(?:[<>=!~]=?|===)[^"']*)["']""")


@dataclass(frozen=True)
class TorchSupport:
    """The oldest supported torch release and where that was read."""

    floor: Version | None  # None: the project names torch without a lower bound
    source: str  # `pyproject.toml (torch>=1.13)`, `torch-version = "2.1"`
    # the release every allowed torch is older than (`<2.3` gives 2.3), None when unbounded
    below: Version | None = None

    def older_than(self, release: str) -> bool:
        """Whether the project supports some torch older than `release` (unknown floor: yes)."""
        return self.floor is None or self.floor < Version(release)

    def all_older_than(self, release: str) -> bool:
        """Whether every torch the project allows is older than `release` (`torch<2.3`)."""
        return self.below is not None and self.below <= Version(release)


def torch_support(ctx: FileContext) -> TorchSupport | None:
    """What the project says about torch, or None when it says nothing (or the file is not on disk)."""
    if ctx.torch_version:
        try:
            return TorchSupport(Version(ctx.torch_version), f'`torch-version = "{ctx.torch_version}"`')
        except InvalidVersion:
            return None
    path = Path(ctx.path)
    if not path.is_file():
        return None
    return _folder_support(str(path.resolve().parent))


@lru_cache(maxsize=256)
def _folder_support(folder: str) -> TorchSupport | None:
    for directory in (Path(folder), *Path(folder).parents):
        present = [directory / name for name in _METADATA_FILES if (directory / name).is_file()]
        present += sorted(p for p in directory.glob("requirements*.txt") if p.name != "requirements.txt")
        if present:
            for file in present:
                found = _read(file)
                if found is not None:
                    return found
            return None
        if (directory / ".git").exists():
            return None
    return None


def _read(file: Path) -> TorchSupport | None:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if file.name == "pyproject.toml":
        lines = _pyproject_requirements(text)
    elif file.name == "setup.cfg":
        lines = _setup_cfg_requirements(text)
    elif file.name == "setup.py":
        lines = _SETUP_PY_TORCH.findall(text)
    else:
        lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    for line in lines:
        support = _torch_requirement(line, file.name)
        if support is not None:
            return support
    return None


def _pyproject_requirements(text: str) -> list[str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    project = data.get("project", {})
    lines = [d for d in project.get("dependencies", []) if isinstance(d, str)] if isinstance(project, dict) else []
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {})
    if isinstance(poetry, dict):
        spec = poetry.get("torch")
        if isinstance(spec, dict):
            spec = spec.get("version")
        if isinstance(spec, str):
            lines.append("torch" + (spec.replace("^", ">=") if spec.strip() != "*" else ""))
    return lines


def _setup_cfg_requirements(text: str) -> list[str]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    raw = parser.get("options", "install_requires", fallback="")
    return [line.strip() for line in raw.splitlines() if line.strip()]


def _torch_requirement(line: str, source: str) -> TorchSupport | None:
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return None
    if requirement.name.lower() != "torch":
        return None
    floors = [
        Version(spec.version.rstrip(".*"))
        for spec in requirement.specifier
        if spec.operator in (">=", ">", "==", "~=", "===") and _is_version(spec.version.rstrip(".*"))
    ]
    ceilings = [
        Version(spec.version) if spec.operator == "<" else _next_release(Version(spec.version.rstrip(".*")))
        for spec in requirement.specifier
        if spec.operator in ("<", "<=", "==") and _is_version(spec.version.rstrip(".*"))
    ]
    text = str(requirement)
    return TorchSupport(max(floors) if floors else None, f"{source} (`{text}`)", min(ceilings) if ceilings else None)


def _next_release(version: Version) -> Version:
    """The smallest release above every `version.*` patch: 2.2 -> 2.3, 2.2.1 -> 2.2.2."""
    parts = list(version.release) + [0] * (2 - len(version.release))
    parts[-1] += 1
    return Version(".".join(map(str, parts)))


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


# The first torch release that has each replacement API.
INTRODUCED = {
    "torch.amp.autocast": "1.12",
    "torch.amp.GradScaler": "2.3",
    "torch.amp.custom_fwd": "2.4",
    "torch.amp.custom_bwd": "2.4",
}


def never_available(ctx: FileContext, api: str) -> bool:
    """Whether every torch the project allows predates `api` (`torch>=2.1,<2.3` and
    `torch.amp.custom_fwd`, added in 2.4): advice to use it cannot be followed."""
    release = INTRODUCED.get(api)
    support = torch_support(ctx)
    return release is not None and support is not None and support.all_older_than(release)


def too_new(ctx: FileContext, api: str) -> str | None:
    """A sentence fragment when the project supports a torch older than the one that added `api`:
    "`torch.amp.GradScaler` needs torch 2.3, but pyproject.toml (`torch>=1.13`) allows torch 1.13"."""
    release = INTRODUCED.get(api)
    support = torch_support(ctx)
    if release is None or support is None or not support.older_than(release):
        return None
    allowed = f"torch {support.floor}" if support.floor is not None else "any torch release"
    return f"`{api}` needs torch {release}, but {support.source} allows {allowed}"
