"""The project index: the modules of one project, their summaries, and each file's view of them.

The root is the folder of the nearest config file, else the folder linted (for a single file,
the folder above its package). Module names are paths below the root (`models/net.py` is
`models.net`); an import that names no module there is tried from the importing file's own
folder (scripts run from their folder) and from `src/`. What resolves outside the project
stays unknown. Summaries are built on demand (what a linted file imports, through re-exports
and bases) and once per run; every lookup keeps a set of what it visited, so import cycles end.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicelint.analysis.vocabulary import MODULE_BASE_SUFFIXES, MODULE_BASES
from devicelint.project.summary import ClassSummary, ModuleSummary, scan_imports, summarise
from devicelint.project.view import ImportedClass, ProjectView

# Bases whose constructor places nothing: a class ending at them owns CPU parameters.
_CPU_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module", "object"})
# Folders never walked for movers of other modules' attributes.
_SKIPPED = frozenset({".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", "site-packages"})
_MOVER_WORDS = ("def _apply(", "def to(", "def cuda(")
_STORE_FORMAT = "1"
# How far a re-export or a `return helper()` chain is followed.
_MAX_HOPS = 12


@dataclass(frozen=True)
class _Found:
    module: ModuleSummary
    name: str | None  # a class or function of `module`; None for the module itself


def project_root(path: Path, config_root: Path | None) -> Path:
    """The config's folder when `path` is below it, else the first folder above `path` that is
    not a package (holds no `__init__.py`)."""
    absolute = path.absolute()
    if config_root is not None and (absolute == config_root or config_root in absolute.parents):
        return config_root
    folder = absolute if absolute.is_dir() else absolute.parent
    while (folder / "__init__.py").exists() and folder.parent != folder:
        folder = folder.parent
    return folder


class ProjectIndex:
    """`store`: a folder where what one run learnt of each module's text is kept for the next
    (JSON keyed by the text's hash, so an edited file is read afresh); None keeps nothing."""

    def __init__(self, root: Path, store: Path | None = None, salt: str = "") -> None:
        self.root = root.absolute()
        self.store = store
        # devicelint's own code fingerprint: summaries an older release wrote are not read
        self.salt = salt
        self._keys: dict[int, str] = {}
        self._restored: set[int] = set()
        self.summaries: dict[Path, ModuleSummary] = {}
        self._by_name: dict[tuple[str, str], Path | None] = {}
        # Each name is resolved once per importing folder; a name met again while it is being
        # resolved (re-exports in a circle, star imports of each other) resolves to nothing.
        self._resolved: dict[tuple[str, str], _Found | None] = {}
        self._others_moved: dict[str, set[str]] | None = None
        self._paths: dict[int, Path] = {}
        self._members: dict[tuple[int, str], ImportedClass | str | None] = {}

    # -- modules and their summaries
    def module_name(self, path: Path) -> tuple[str, bool]:
        absolute = path.absolute()
        try:
            relative = absolute.relative_to(self.root)
        except ValueError:
            return absolute.stem, absolute.name == "__init__.py"
        parts = list(relative.with_suffix("").parts)
        is_package = parts[-1:] == ["__init__"]
        if is_package:
            parts = parts[:-1]
        return ".".join(parts), is_package

    def summary(self, path: Path) -> ModuleSummary:
        absolute = path.absolute()
        known = self.summaries.get(absolute)
        if known is None:
            name, is_package = self.module_name(absolute)
            try:
                data = absolute.read_bytes()
            except OSError as err:
                known = ModuleSummary(name, is_package, error=str(err))
            else:
                text = data.decode("utf-8", errors="replace")
                key = self._key("module", absolute, name, is_package, data)
                saved = self._read(key)
                known = None
                if saved is not None:
                    try:
                        known = ModuleSummary(name, is_package, saved=saved, load=lambda: text)
                        self._restored.add(id(known))
                    except (KeyError, TypeError, ValueError, AttributeError):
                        known = None  # an entry of another shape: read the text afresh
                if known is None:
                    known = summarise(text, name, is_package)
                self._keys[id(known)] = key
            self.summaries[absolute] = known
            self._paths[id(known)] = absolute
        return known

    def _scan(self, path: Path, data: bytes, name: str, is_package: bool) -> tuple[dict[str, str], list[str], set[str]]:
        """`scan_imports` of a linted file, kept in the store like the summaries."""
        key = self._key("scan", path, name, is_package, data)
        saved = self._read(key)
        if saved is not None:
            try:
                imports, stars, used = saved["imports"], saved["stars"], saved["used"]
                if isinstance(imports, dict) and isinstance(stars, list) and isinstance(used, list):
                    return {str(k): str(v) for k, v in imports.items()}, [str(s) for s in stars], set(used)
            except (KeyError, TypeError):
                pass
        imports, stars, used_names = scan_imports(data.decode("utf-8", errors="replace"), name, is_package)
        self._write(key, {"imports": imports, "stars": stars, "used": sorted(used_names)})
        return imports, stars, used_names

    # -- the store
    def _key(self, kind: str, path: Path, name: str, is_package: bool, data: bytes) -> str:
        digest = hashlib.sha256(f"{_STORE_FORMAT}\0{self.salt}\0{kind}\0{path}\0{name}\0{is_package}\0".encode())
        digest.update(data)
        return digest.hexdigest()

    def _read(self, key: str) -> dict[str, Any] | None:
        if self.store is None:
            return None
        try:
            value = json.loads((self.store / key[:2] / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def _write(self, key: str, value: dict[str, Any]) -> None:
        if self.store is None:
            return
        folder = self.store / key[:2]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(prefix=f".{key}.", dir=folder)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(value, out, sort_keys=True)
            os.replace(temp, folder / f"{key}.json")
        except OSError:
            pass  # a read-only checkout still lints, only slower

    def save(self) -> None:
        """Keep what this run learnt of each module for the next run."""
        for summary in self.summaries.values():
            key = self._keys.get(id(summary))
            if key is not None and (id(summary) not in self._restored or summary.learnt):
                self._write(key, summary.saved())

    def _module_path(self, name: str, importer: Path) -> Path | None:
        key = (name, str(importer.parent))
        if key in self._by_name:
            return self._by_name[key]
        found = None
        relative = Path(*name.split(".")) if name else None
        if relative is not None:
            for base in (self.root, importer.parent, self.root / "src"):
                for candidate in (base / relative.with_suffix(".py"), base / relative / "__init__.py"):
                    if candidate.is_file():
                        found = candidate
                        break
                if found is not None:
                    break
        self._by_name[key] = found
        return found

    def _resolve(self, qualified: str, importer: Path, hops: int = 0) -> _Found | None:
        """The project module, class or function a qualified name denotes, through re-exports."""
        if hops > _MAX_HOPS:
            return None
        key = (qualified, str(importer.parent))
        if key in self._resolved:
            return self._resolved[key]
        self._resolved[key] = None  # in progress: a circle back to this name finds nothing
        found = self._resolve_once(qualified, importer, hops)
        self._resolved[key] = found
        return found

    def _resolve_once(self, qualified: str, importer: Path, hops: int) -> _Found | None:
        path = self._module_path(qualified, importer)
        if path is not None:
            return _Found(self.summary(path), None)
        if "." not in qualified:
            return None
        owner, _, last = qualified.rpartition(".")
        path = self._module_path(owner, importer)
        if path is None:
            return None
        module = self.summary(path)
        if last in module.classes or last in module.functions:
            return _Found(module, last)
        if last in module.imports and module.imports[last] != qualified:
            return self._resolve(module.imports[last], path, hops + 1)
        for star in module.star_imports:
            found = self._resolve(f"{star}.{last}", path, hops + 1)
            if found is not None:
                return found
        return None

    def _path_of(self, module: ModuleSummary) -> Path:
        return self._paths[id(module)]

    # -- class facts across modules
    def _class(self, qualified: str, importer: Path) -> tuple[ClassSummary, Path] | None:
        found = self._resolve(qualified, importer)
        if found is None or found.name is None or found.name not in found.module.classes:
            return None
        return found.module.classes[found.name], self._path_of(found.module)

    def is_module_class(self, bases: tuple[str, ...], where: Path, seen: frozenset[str] = frozenset()) -> bool:
        """Whether a class with these bases (qualified, as written in `where`) is an `nn.Module`."""
        for base in bases:
            if base in MODULE_BASES:
                return True
            if base in seen:
                continue
            found = self._resolve(base, where)
            if found is not None and found.name is not None and found.name in found.module.bases:
                module = found.module
                if self.is_module_class(module.bases[found.name], self._path_of(module), seen | {base}):
                    return True
            elif base.rsplit(".", 1)[-1] in MODULE_BASE_SUFFIXES:
                return True
        return False

    def owns_cpu_parameters(self, cls: ClassSummary, where: Path, seen: frozenset[str] = frozenset()) -> bool | None:
        """True: builds parameters on the CPU; False: may place itself; None: owns none."""
        if cls.places_itself:
            return False
        own = cls.makes_parameters
        for built in cls.builds:
            found = self._class(built, where) if built not in seen and not own else None
            if found is not None and self.owns_cpu_parameters(found[0], found[1], seen | {built}) is True:
                own = True
        for base in cls.bases:
            if base in _CPU_BASES:
                continue
            found = self._class(base, where) if base not in seen else None
            if found is None:
                return False  # a base from elsewhere may place the module in its constructor
            inherited = self.owns_cpu_parameters(found[0], found[1], seen | {base})
            if inherited is False:
                return False
            own = own or bool(inherited)
        return True if own else None

    def _places(self, cls: ClassSummary, where: Path, seen: frozenset[str] = frozenset()) -> bool:
        """Whether the class or one of its project bases places something itself."""
        if cls.places_itself:
            return True
        for base in cls.bases:
            found = self._class(base, where) if base not in seen and len(seen) < _MAX_HOPS else None
            if found is not None and self._places(found[0], found[1], seen | {base}):
                return True
        return False

    def moved_attributes(
        self, cls: ClassSummary, where: Path, seen: frozenset[str] = frozenset()
    ) -> tuple[str, ...] | None:
        """What the class's own and its bases' `_apply`/`to`/`cuda` move (None: everything)."""
        if cls.moved_attributes is None:
            return None
        moved = set(cls.moved_attributes)
        for base in cls.bases:
            found = self._class(base, where) if base not in seen else None
            if found is None:
                continue
            inherited = self.moved_attributes(found[0], found[1], seen | {base})
            if inherited is None:
                return None
            moved.update(inherited)
        return tuple(sorted(moved))

    # -- what one file sees
    def view_for(self, path: Path) -> ProjectView:
        """What the file at `path` sees: only the imported names its text uses again (a
        re-exporting `__init__` sees nothing, so editing what it re-exports never re-lints it)."""
        path = path.absolute()
        try:
            data = path.read_bytes()
        except OSError:
            return ProjectView(str(self.root))
        name, is_package = self.module_name(path)
        imports, stars, used = self._scan(path, data, name, is_package)
        classes: dict[str, ImportedClass] = {}
        functions: dict[str, str] = {}
        for local, qualified in sorted(imports.items()):
            if local not in used:
                continue
            found = self._resolve(qualified, path)
            if found is None:
                continue
            if found.name is None:  # a module: `import data as D`, `from pkg import models`
                self._add_members(f"{local}.", found.module, classes, functions, used)
            else:
                self._add_member(local, found.module, found.name, classes, functions)
        for star in stars:
            found = self._resolve(star, path)
            if found is not None and found.name is None:
                self._add_members("", found.module, classes, functions, used)
        moved: dict[str, tuple[str, ...]] = {}
        if self._movers_elsewhere() and "class" in used:
            module = self.summary(path)
            moved = {
                name: tuple(sorted(attrs))
                for name, attrs in self._moved_by_others(path, module).items()
                if name in module.classes and attrs
            }
        return ProjectView(str(self.root), classes, functions, moved)

    def _add_members(
        self,
        prefix: str,
        module: ModuleSummary,
        classes: dict[str, ImportedClass],
        functions: dict[str, str],
        used: set[str],
        seen: frozenset[str] = frozenset(),
    ) -> None:
        """Every class and function `module` defines or re-exports that the importing file's
        text names (`used`), as `<prefix><name>`."""
        if module.name in seen or len(seen) > _MAX_HOPS:
            return
        for name in (*module.classes, *module.functions):
            if name in used:
                self._add_member(prefix + name, module, name, classes, functions)
        where = self._path_of(module)
        for local, qualified in module.imports.items():
            if local not in used or prefix + local in classes or prefix + local in functions:
                continue
            found = self._resolve(qualified, where)
            if found is not None and found.name is not None:
                self._add_member(prefix + local, found.module, found.name, classes, functions)
        for star in module.star_imports:
            found = self._resolve(star, where)
            if found is not None and found.name is None:
                self._add_members(prefix, found.module, classes, functions, used, seen | {module.name})

    def _add_member(
        self,
        spelled: str,
        module: ModuleSummary,
        name: str,
        classes: dict[str, ImportedClass],
        functions: dict[str, str],
    ) -> None:
        key = (id(module), name)
        if key not in self._members:
            self._members[key] = self._member(module, name)
        member = self._members[key]
        if isinstance(member, ImportedClass):
            classes[spelled] = member
        elif member is not None:
            functions[spelled] = member

    def _member(self, module: ModuleSummary, name: str) -> ImportedClass | str | None:
        """What a file importing `name` from `module` learns: a module class, a place, or nothing."""
        where = self._path_of(module)
        cls = module.classes.get(name)
        if cls is not None:
            if not self.is_module_class(module.bases[name], where):
                return None
            qualified = f"{module.name}.{name}" if module.name else name
            owns = self.owns_cpu_parameters(cls, where)
            return ImportedClass(qualified, owns is True, self.moved_attributes(cls, where), self._places(cls, where))
        place = self._function_place(module, name, where, 0)
        return place if place in ("cpu-tensor", "device-tensor") else None

    def _function_place(self, module: ModuleSummary, name: str, where: Path, hops: int) -> str:
        place = module.functions.get(name, "")
        if not place.startswith("call:") or hops > _MAX_HOPS:
            return place
        found = self._resolve(place[5:], where)
        if found is None or found.name is None or found.name not in found.module.functions:
            return ""
        return self._function_place(found.module, found.name, self._path_of(found.module), hops + 1)

    def _movers_elsewhere(self) -> dict[str, set[str]]:
        """Qualified class -> attributes that a mover anywhere in the project assigns on its
        instances under an `isinstance` test (built once per run)."""
        if self._others_moved is None:
            self._others_moved = {}
            for other in self._mover_files():
                summary = self.summary(other)
                for cls in summary.classes.values():
                    for target, attr in cls.moves_others:
                        found = self._resolve(target, other)
                        if found is not None and found.name is not None:
                            key = f"{found.module.name}.{found.name}"
                            self._others_moved.setdefault(key, set()).add(attr)
        return self._others_moved

    def _moved_by_others(self, path: Path, module: ModuleSummary) -> dict[str, set[str]]:
        """Attributes of this module's classes that a mover moves on their instances (also as
        instances of a base class)."""
        if not module.classes:
            return {}
        others = self._movers_elsewhere()
        out: dict[str, set[str]] = {}
        for name in module.classes:
            chain = [(f"{module.name}.{name}", module, name)]
            seen: set[str] = set()
            while chain:
                qualified, owner, class_name = chain.pop()
                if qualified in seen or len(seen) > _MAX_HOPS:
                    continue
                seen.add(qualified)
                out.setdefault(name, set()).update(others.get(qualified, ()))
                for base in owner.bases.get(class_name, ()):
                    found = self._resolve(base, self._path_of(owner))
                    if found is not None and found.name is not None and found.name in found.module.bases:
                        chain.append((f"{found.module.name}.{found.name}", found.module, found.name))
        return out

    def _mover_files(self) -> Iterable[Path]:
        """The project's files that define `_apply`, `to` or `cuda` (a text search first)."""
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED and not d.startswith("."))
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = Path(folder, name)
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                if any(word in text for word in _MOVER_WORDS):
                    yield path

    def covered(self) -> list[Path]:
        """The files whose summaries this run built."""
        return sorted(self.summaries)
