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
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicelint.analysis.vocabulary import MODULE_BASE_SUFFIXES, MODULE_BASES, is_cpu_model_builder
from devicelint.project.helpers import ParameterUses
from devicelint.project.view import (
    HostUpdate,
    ImportedClass,
    ImportedHelper,
    ImportedPlainClass,
    ProjectView,
    path_key,
    view_data,
    view_from,
)

if TYPE_CHECKING:
    from devicelint.project.summary import ClassSummary, ModuleSummary

# Bases whose constructor places nothing: a class ending at them owns CPU parameters.
_CPU_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module", "object"})
# Folders never walked for movers of other modules' attributes.
# More `.py` files than any one training project holds (transformers has about 4,000).
_MAX_PROJECT_FILES = 30_000
_SKIPPED = frozenset({".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", "site-packages"})
_MOVER_WORDS = (b"def _apply(", b"def to(", b"def cuda(")
# A file that may save something (`torch.save(`, `save_checkpoint(`), and one that loads with torch.
_SAVE_CALL = re.compile(rb"save\w*\(")
_TORCH_SAVES = (b"torch.save", b"serialization.save")
_TORCH_LOADS = (b"torch.load", b"serialization.load")
# What a plain class's text holds where it may update host tensors in place or hand its input to
# a model it moved (`ClassSummary.host_updates`, `unmoved_inputs`): others are not summarised.
_PLAIN_CLASS_WORDS = (
    *("+=", "-=", "*=", "/=", ".to(", ".cuda(", "load_state_dict", "torchmetrics"),
    *(".backward(", "unscale_(", ".update()", ".step("),  # a trainer class's step calls
    # (a host tensor kept or built by a method: `self.labels = torch.as_tensor(labels)`)
    *("torch.tensor(", "torch.as_tensor(", "torch.from_numpy(", "torch.zeros(", "torch.ones(", "torch.arange("),
    *("DataParallel(", "DDP("),  # a method that returns a wrapper it makes (`setup_model`)
)
_STORE_FORMAT = "1"
_RECORD_FORMAT = "2"
# A file modified this close before the record was written may change again within the same
# timestamp tick: its hash is checked, not its size and time (as git treats "racy" entries).
_RACY_NS = 2_000_000_000
# How far a re-export or a `return helper()` chain is followed.
_MAX_HOPS = 12


@dataclass(frozen=True)
class _Found:
    module: ModuleSummary
    name: str | None  # a class or function of `module`; None for the module itself


def holds(test: Callable[[], bool]) -> bool:
    """A file-system test (`path.is_dir`) that is false where the path cannot be looked at
    (a folder without search permission): the linter reports such files, the index skips them."""
    try:
        return test()
    except OSError:
        return False


def _is_mover(data: bytes) -> bool:
    return any(word in data for word in _MOVER_WORDS)


def _is_saver(data: bytes) -> bool:
    return _SAVE_CALL.search(data) is not None


def _may_save(data: bytes) -> bool:
    """A file a loader's view may depend on: one that saves, or that names a wrapper (a trainer
    subclass whose base saves `self.model.state_dict()`)."""
    return _is_saver(data) or b"DataParallel" in data


# A quoted literal that ends in a file name (`"embedding.pt"`, `f"{root}/sgc_dict.pt"`).
_QUOTED_FILE = re.compile(rb"""["']([^"'\n]{0,200}?\w\.[A-Za-z]\w{0,7})["']""")


def _file_names(data: bytes) -> set[str]:
    """The file names (`path_key`) the quoted literals of a text end in."""
    names = set()
    for match in _QUOTED_FILE.finditer(data):
        key = path_key(match.group(1).decode("utf-8", errors="replace"))
        if key is not None:
            names.add(key)
    return names


def _constant_references(data: bytes, imports: dict[str, str]) -> set[str]:
    """`@<qualified>` for each name the text reads from an import that may be a path constant of
    another module (`config.CKPT` after `import config`, `CKPT` after `from config import CKPT`),
    as the saving module's summary names a save to it (`project.saves`)."""
    if not imports:
        return set()
    text = data.decode("utf-8", errors="replace")
    # One scan of the text's dotted names, then each import looked up in them (a regular
    # expression per import took seconds on files with hundreds of imports).
    words: set[str] = set()
    reads: dict[str, set[str]] = {}  # owner -> the upper-case attributes read on it (`owner.ATTR`)
    for chain in _DOTTED_NAME.findall(text):
        parts = chain.split(".")
        words.update(parts)
        for end in range(1, len(parts)):
            if parts[end][:1].isupper() or parts[end][:1] == "_":
                for start in range(end):
                    reads.setdefault(".".join(parts[start:end]), set()).add(parts[end])
    found = set()
    for local, qualified in imports.items():
        if local[:1].isupper() and (
            local in words if "." not in local else re.search(rf"\b{re.escape(local)}\b", text) is not None
        ):
            found.add(f"@{qualified}")  # `from config import CKPT`
        found.update(f"@{qualified}.{attr}" for attr in reads.get(local, ()))  # `config.CKPT`
    return found


_DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass
class _Members:
    """What a file's view holds of the names it imports, as it is gathered."""

    classes: dict[str, ImportedClass] = field(default_factory=dict)
    functions: dict[str, str] = field(default_factory=dict)
    helpers: dict[str, ImportedHelper] = field(default_factory=dict)
    plain: dict[str, ImportedPlainClass] = field(default_factory=dict)
    constants: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    devices: dict[str, tuple[str, int]] = field(default_factory=dict)

    def holds(self, spelled: str) -> bool:
        return spelled in self.classes or spelled in self.functions


def _metric_class(qualified: str) -> bool:
    """A torchmetrics metric class (`torchmetrics.MetricCollection`), not a functional metric."""
    last = qualified.rsplit(".", 1)[-1]
    return qualified.startswith("torchmetrics.") and ".functional." not in qualified and last[:1].isupper()


def _one_of(classes: list[ImportedClass | None]) -> ImportedClass | None:
    """What every class a builder may return has in common: it owns CPU parameters only if each
    does, places itself if any does, and its movers move what all of theirs move."""
    if not classes or any(c is None for c in classes):
        return None
    known = [c for c in classes if c is not None]
    if len(known) == 1:
        return known[0]
    moved: set[str] | None = None
    for cls in known:
        if cls.moved_attributes is not None:
            moved = set(cls.moved_attributes) if moved is None else moved & set(cls.moved_attributes)
    return ImportedClass(
        known[0].qualified,
        all(c.owns_cpu_parameters for c in known),
        None if moved is None else tuple(sorted(moved)),
        any(c.places_itself for c in known),
    )  # (what each places is left out: the model is one of them, not all)


def _notebook_code(data: bytes) -> bytes:
    """A notebook's code cells as one module's text: its imports are what its view needs."""
    from devicelint.notebook import NotebookError, virtual_source

    try:
        return virtual_source(data)[0].encode()
    except (NotebookError, ValueError):
        return b""


def project_root(path: Path, config_root: Path | None) -> Path:
    """The config's folder when `path` is below it, else the first folder above `path` that is
    not a package (holds no `__init__.py`)."""
    absolute = path.absolute()
    if config_root is not None and (absolute == config_root or config_root in absolute.parents):
        return config_root
    folder = absolute if holds(absolute.is_dir) else absolute.parent
    while holds((folder / "__init__.py").exists) and folder.parent != folder:
        folder = folder.parent
    return folder


class ProjectIndex:
    """`store`: a folder where what one run learnt of each module's text is kept for the next
    (JSON keyed by the text's hash, so an edited file is read afresh); None keeps nothing."""

    def __init__(
        self, root: Path, store: Path | None = None, salt: str = "", overlay: dict[str, bytes] | None = None
    ) -> None:
        self.root = root.absolute()
        # the root holds too many files to be one project (see `_walk`)
        self.too_large = False
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
        # qualified class -> where another module wraps an instance in `nn.DataParallel`
        self._replicated: dict[str, tuple[str, int, bool]] | None = None
        self._replicated_deps: set[str] = set()
        self._paths: dict[int, Path] = {}
        self._members: dict[
            tuple[int, str],
            tuple[
                ImportedClass | ImportedPlainClass | str | None,
                ImportedHelper | None,
                dict[str, ImportedHelper],
                dict[str, ImportedClass],
            ],
        ] = {}
        self._root_text = str(self.root)
        self._exists: dict[str, bool] = {}
        # every `.py` file below the root -> (size, mtime), listed once per run (None until needed)
        self._files: dict[str, tuple[int, int]] | None = None
        # each file read at most once per run; `overlay`: texts that replace the files' on disk
        # (the language server's unsaved buffers, by absolute path)
        self._texts: dict[str, bytes] = dict(overlay or {})
        # the files each lookup read: a stack of sets, one per view or cached lookup being built
        self._deps: list[set[str]] = []
        self._member_deps: dict[tuple[int, str], set[str]] = {}
        self._mover_deps: set[str] = set()
        self._mover_paths: list[str] = []
        # the views of the last run, reused while nothing they read changed (`view`)
        self._record: dict[str, Any] | None = None
        self._changed: set[str] | None = None
        self._movers_changed = False
        self._new_views: dict[str, Any] = {}
        self._hashes: dict[str, str] | None = None
        self._stats: dict[str, list[Any]] = {}
        self._movers_now: list[str] = []
        self._asked_movers = False
        # file name -> the files that save it from host data, for names no file saves otherwise
        # (built once per run, like the movers, when a linted file loads with torch)
        self._host_saves: dict[str, tuple[list[str], set[str]]] = {}
        # checkpoint name -> the wrappers' saves of it, and the files that answer depends on
        self._wrapper_saves: dict[str, tuple[list[tuple[str, str, str, int]], set[str]]] = {}
        self._state_saver_files: list[tuple[str, bytes]] | None = None
        self._saver_files: list[tuple[str, bytes]] | None = None
        self._savers_now: list[str] = []
        self._savers_changed = False
        self._asked_savers = False
        self._packages: dict[str, str | None] = {}
        # (module, class, attributes) for each class that keeps a wrapper on `self`, in the files
        # whose text names one (built once per run, when a class's save needs it)
        self._wrapper_classes: list[tuple[ModuleSummary, str, tuple[str, ...]]] | None = None
        self._wrapper_paths: list[str] = []
        self._wrapper_texts: list[tuple[str, bytes]] | None = None

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
        if self._deps:
            self._deps[-1].add(str(absolute))
        known = self.summaries.get(absolute)
        if known is None:
            # imported here: a warm run that reuses every view needs no summaries
            from devicelint.project.summary import ModuleSummary, summarise

            name, is_package = self.module_name(absolute)
            try:
                data = self._data(absolute)
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
        from devicelint.project.summary import scan_imports

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
        """Keep what this run learnt of each module, and each file's view, for the next run."""
        for summary in self.summaries.values():
            key = self._keys.get(id(summary))
            if key is not None and (id(summary) not in self._restored or summary.learnt):
                self._write(key, summary.saved())
        if self.store is None or self._changed is None or self._hashes is None:
            return
        record = self._record
        if (
            record is not None
            and not self._changed
            and self._stats == record["files"]
            and all(record["views"].get(k) is v for k, v in self._new_views.items())
        ):
            return  # nothing changed, nothing new learnt
        views = {}
        if record is not None:  # the entries of files not linted this run, while still true
            for key, entry in record["views"].items():
                if isinstance(entry, dict) and not self._changed.intersection(entry.get("deps", ())):
                    if not (entry.get("movers") and self._movers_changed) and not (
                        entry.get("savers") and self._savers_changed
                    ):
                        views[key] = entry
        views.update(self._new_views)
        if self._others_moved is not None:
            mover_deps = sorted(self._mover_deps)
        elif record is not None and not self._movers_changed:
            mover_deps = record["mover_deps"]
        else:  # no view kept depends on the movers: they are found afresh when one does
            mover_deps = []
            views = {k: v for k, v in views.items() if not v.get("movers")}
        self._write(
            self._record_key(),
            {
                "files": self._stats,
                "written": time.time_ns(),
                "views": views,
                "movers": self._movers_now,
                "mover_deps": mover_deps,
                "savers": self._savers_now,
            },
        )

    def _module_path(self, name: str, importer: Path) -> Path | None:
        folder = os.path.dirname(importer)
        key = (name, folder)
        if key in self._by_name:
            return self._by_name[key]
        found = None
        if name:
            relative = name.replace(".", os.sep)
            for base in (self._root_text, folder, os.path.join(self._root_text, "src")):
                stem = os.path.join(base, relative)
                for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                    if self._is_file(candidate):
                        found = Path(candidate)
                        break
                if found is not None:
                    break
        self._by_name[key] = found
        return found

    def _is_file(self, path: str) -> bool:
        known = self._exists.get(path)
        if known is None:
            known = self._exists[path] = os.path.isfile(path)
        return known

    def _walk(self) -> dict[str, tuple[int, int]]:
        """Every `.py` file below the root (skipping `_SKIPPED` and hidden folders), with its size
        and modification time. A root holding more than `_MAX_PROJECT_FILES` of them (a home or
        temporary folder a script was linted in) is no project: the scans over every file (movers,
        savers) then see none, and imports still resolve file by file."""
        if self._files is None:
            self._files = {}
            folders = [self._root_text]
            while folders:
                if len(self._files) > _MAX_PROJECT_FILES:
                    self._files = {}
                    self.too_large = True
                    break
                folder = folders.pop()
                try:
                    entries = sorted(os.scandir(folder), key=lambda e: e.name)
                except OSError:
                    continue
                for entry in entries:
                    try:
                        if entry.is_dir():
                            if entry.name not in _SKIPPED and not entry.name.startswith("."):
                                folders.append(entry.path)
                        elif entry.name.endswith(".py") and entry.is_file():
                            stat = entry.stat()
                            self._files[entry.path] = (stat.st_size, stat.st_mtime_ns)
                    except OSError:
                        continue
        return self._files

    def _data(self, path: Path | str) -> bytes:
        key = str(path)
        known = self._texts.get(key)
        if known is None:
            with open(key, "rb") as handle:
                known = self._texts[key] = handle.read()
        return known

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
        if last[:1].isalpha() and (module.binds_at_import(last) or module.binds_under(last)):
            return _Found(module, last)  # `MEAN = torch.tensor(...)`, `DEVICE = torch.device(...)` at its top level
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

    # -- what one file sees, reused from the last run while nothing it read changed
    def view(self, path: Path) -> ProjectView:
        """`view_for(path)`, taken from the last run's record when the file, every file its view
        read, and the project's file list are unchanged (and, for a file with classes, no mover of
        other modules' attributes changed or appeared): a warm run then needs no summaries."""
        path = path.absolute()
        key = str(path)
        recorded = self.recorded_view(path)
        if recorded is not None:
            return recorded
        view, deps = self.view_and_reads(path)
        # a notebook is outside the walk (no module imports it): its own hash is kept instead
        own = self._own_digest(path) if key in deps and path.suffix == ".ipynb" else None
        walked = deps - {key} if own is not None else deps
        if self._hashes is not None and walked <= self._hashes.keys():  # a file outside the walk: not kept
            self._new_views[key] = {
                "deps": sorted(walked),
                "movers": self._asked_movers,
                "savers": self._asked_savers,
                "view": view_data(view),
                **({"own": own} if own is not None else {}),
            }
        return view

    def recorded_view(self, path: Path) -> ProjectView | None:
        """The view the last run's record holds for `path` while nothing it read changed (cheap:
        no summary is built), else None."""
        if self.store is None:
            return None
        if self._changed is None:
            self._compare()
        record = self._record
        key = str(path.absolute())
        if record is None:
            return None
        entry = record["views"].get(key)
        try:
            if (
                isinstance(entry, dict)
                and not self._changed.intersection(entry["deps"])  # type: ignore[union-attr]
                and not (entry["movers"] and self._movers_changed)
                and not (entry["savers"] and self._savers_changed)
                and entry.get("own") in (None, self._own_digest(path.absolute()))
            ):
                view = view_from(entry["view"])
                self._new_views[key] = entry
                return view
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # an entry of another shape: build the view afresh
        return None

    def _own_digest(self, path: Path) -> str | None:
        try:
            return _digest(self._data(path))
        except OSError:
            return None

    def view_and_reads(self, path: Path) -> tuple[ProjectView, set[str]]:
        """`view_for(path)` and the files it read (absolute paths): editing one of them may
        change the view (the language server re-lints an open file when one of them changes)."""
        self._deps.append(set())
        self._asked_movers = False
        self._asked_savers = False
        try:
            view = self.view_for(path.absolute())
        finally:
            deps = self._deps.pop()
        return view, deps

    def _record_key(self) -> str:
        digest = hashlib.sha256(f"{_RECORD_FORMAT}\0{self.salt}\0views\0{self.root}".encode())
        return digest.hexdigest()

    def _compare(self) -> None:
        """Find the project files that changed since the record was written: a file whose size
        and modification time are as recorded (and not within `_RACY_NS` of the record's writing)
        keeps its recorded hash; any other is read and hashed."""
        files = self._walk()
        self._changed = set()
        record = self._read(self._record_key())
        old: dict[str, Any] = {}
        trusted_before = 0
        try:
            if record is not None and isinstance(record["views"], dict) and isinstance(record["files"], dict):
                old = record["files"]
                trusted_before = int(record["written"]) - _RACY_NS
            else:
                record = None
        except (KeyError, TypeError, ValueError):
            record = None
        hashes: dict[str, str] = {}
        stats: dict[str, list[Any]] = {}
        for path, (size, mtime) in files.items():
            before = old.get(path)
            if (
                isinstance(before, list)
                and len(before) == 3
                and before[0] == size
                and before[1] == mtime
                and mtime < trusted_before
            ):
                digest = str(before[2])
            else:
                try:
                    digest = _digest(self._data(path))
                except OSError:
                    continue
            hashes[path] = digest
            stats[path] = [size, mtime, digest]
        self._hashes = hashes
        self._stats = stats
        try:
            if record is None or old.keys() != hashes.keys():
                # no record, or a file added or removed (an import may now resolve elsewhere)
                self._movers_now = sorted(p for p in hashes if _is_mover(self._data(p)))
                self._savers_now = sorted(p for p in hashes if _may_save(self._data(p)))
                return
            self._changed = {path for path, digest in hashes.items() if old[path][2] != digest}
            movers = set(record["movers"])
            now = {p for p in self._changed if _is_mover(self._data(p))}
            self._movers_now = sorted((movers - self._changed) | now)
            watched = movers | set(record["mover_deps"])
            self._movers_changed = record["movers"] != self._movers_now or bool(watched & self._changed)
            # a loader's view depends on every file that may save: any of them edited, added or
            # gone builds such views afresh
            savers = set(record["savers"])
            now = {p for p in self._changed if _may_save(self._data(p))}
            self._savers_now = sorted((savers - self._changed) | now)
            self._savers_changed = record["savers"] != self._savers_now or bool(savers & self._changed)
            self._record = record
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OSError):
            self._record = None
            self._changed = set(hashes)

    def view_for(self, path: Path) -> ProjectView:
        """What the file at `path` sees: only the imported names its text uses again (a
        re-exporting `__init__` sees nothing, so editing what it re-exports never re-lints it)."""
        path = path.absolute()
        if self._deps:
            self._deps[-1].add(str(path))
        try:
            data = self._data(path)
        except OSError:
            return ProjectView(str(self.root))
        if path.suffix == ".ipynb":
            data = _notebook_code(data)
        name, is_package = self.module_name(path)
        imports, stars, used = self._scan(path, data, name, is_package)
        members = _Members()
        for local, qualified in sorted(imports.items()):
            if local.split(".", 1)[0] not in used:
                continue
            found = self._resolve(qualified, path)
            if found is None:
                continue
            if found.name is None:  # a module: `import data as D`, `from pkg import models`
                self._add_members(f"{local}.", found.module, members, used)
            else:
                self._add_member(local, found.module, found.name, members)
        for star in stars:
            found = self._resolve(star, path)
            if found is not None and found.name is None:
                self._add_members("", found.module, members, used)
        for local, qualified in sorted(imports.items()):
            # `MODELS.build(cfg)` of an imported registry object: one of the classes it registers
            if f"{local}.build(".encode() in data and not members.holds(f"{local}.build"):
                built = self._built(f"{qualified}[]", path, "call")
                if built:
                    cls = _one_of(
                        [self._imported_class(m, n) if m is not None else ImportedClass(n, True) for m, n in built]
                    )
                    if cls is not None:
                        members.classes[f"{local}.build"] = cls
        moved: dict[str, tuple[str, ...]] = {}
        if "class" in used:
            self._asked_movers = True  # the view depends on every mover, even when there is none
        if "class" in used and self._movers_elsewhere():
            module = self.summary(path)
            moved = {
                name: tuple(sorted(attrs))
                for name, attrs in self._moved_by_others(path, module).items()
                if name in module.classes and attrs
            }
        replicated: dict[str, tuple[str, int, bool]] = {}
        if "class" in used and self._wrapper_files():
            self._asked_savers = True  # the view depends on every file that names a wrapper
            replicated = self._replicated_from_elsewhere(path, name)
        base_wrappers: dict[str, tuple[tuple[str, str, str], ...]] = {}
        if "class" in used and self._wrapper_files():
            self._asked_savers = True
            base_wrappers = self._wrapped_by_bases(path)
        host_saved: tuple[str, ...] = ()
        if any(word in data for word in _TORCH_LOADS):
            self._asked_savers = True  # the view depends on every file that saves
            host_saved = tuple(
                sorted(
                    key
                    for key in _file_names(data)
                    if any(self._near(Path(saver), path) for saver in self._saved_from_host(key))
                )
            )
        wrapped: tuple[tuple[str, str, str, int], ...] = ()
        if b"load_state_dict" in data and b"torch" in data:
            self._asked_savers = True
            wrapped = tuple(
                sorted(
                    entry
                    for key in _file_names(data) | _constant_references(data, imports)
                    for entry in self._saved_from_wrapper(key)
                    if (self.root / entry[2]).absolute() != path.absolute()
                    and self._near((self.root / entry[2]).absolute(), path.absolute())
                )
            )
        return ProjectView(
            str(self.root),
            members.classes,
            members.functions,
            moved,
            host_saved,
            members.helpers,
            wrapped,
            members.plain,
            members.constants,
            members.devices,
            replicated,
            base_wrappers,
        )

    def _add_members(
        self,
        prefix: str,
        module: ModuleSummary,
        members: _Members,
        used: set[str],
        seen: frozenset[str] = frozenset(),
    ) -> None:
        """Every class and function `module` defines or re-exports that the importing file's
        text names (`used`), as `<prefix><name>`."""
        if module.name in seen or len(seen) > _MAX_HOPS:
            return
        for name in (*module.classes, *module.functions):
            if name in used:
                self._add_member(prefix + name, module, name, members)
        where = self._path_of(module)
        self._add_constants(prefix, module, [name for name in used if name not in members.functions], members)
        for local, qualified in module.imports.items():
            if local not in used or members.holds(prefix + local):
                continue
            found = self._resolve(qualified, where)
            if found is not None and found.name is not None:
                self._add_member(prefix + local, found.module, found.name, members)
        for star in module.star_imports:
            found = self._resolve(star, where)
            if found is not None and found.name is None:
                self._add_members(prefix, found.module, members, used, seen | {module.name})

    def _add_constants(self, prefix: str, module: ModuleSummary, names: list[str], members: _Members) -> None:
        """The host tensors and `torch.device` objects `module` binds at import among `names`
        (read only where its text binds torch values at import at all: the whole module is
        parsed for them)."""
        if not names or not any(module.binds_at_import(name) or module.binds_under(name) for name in names):
            return
        constants = module.host_constants()
        devices = module.device_constants()
        for name in names:
            if name in constants:
                factory, line = constants[name]
                members.constants[prefix + name] = (factory, self._shown(self._path_of(module)), line)
            elif name in devices:
                members.devices[prefix + name] = (self._shown(self._path_of(module)), devices[name])
        for key, line in devices.items():
            if "." in key and key.split(".", 1)[0] in names:  # `cfg.device` of `cfg = Config()`
                members.devices[prefix + key] = (self._shown(self._path_of(module)), line)

    def _add_member(
        self,
        spelled: str,
        module: ModuleSummary,
        name: str,
        members: _Members,
    ) -> None:
        key = (id(module), name)
        if key not in self._members:
            self._deps.append(set())
            try:
                self._members[key] = (
                    self._member(module, name),
                    self._helper(module, name),
                    self._method_helpers(module, name) if name in module.classes else {},
                    self._constructors(module, name) if name in module.classes else {},
                )
            finally:
                self._member_deps[key] = self._deps.pop()
        if self._deps:
            self._deps[-1].update(self._member_deps[key])
        member, helper, inherited, made = self._members[key]
        if member is None and helper is None and name not in module.classes and name not in module.functions:
            self._add_constants("", module, [name], members)
            if spelled != name:  # `from .t import MEAN as M`
                if name in members.constants:
                    members.constants[spelled] = members.constants.pop(name)
                for key in [k for k in members.devices if k == name or k.startswith(name + ".")]:
                    members.devices[spelled + key[len(name) :]] = members.devices.pop(key)
        if isinstance(member, ImportedClass):
            members.classes[spelled] = member
        elif isinstance(member, ImportedPlainClass):
            members.plain[spelled] = member
        elif member is not None:
            members.functions[spelled] = member
        if helper is not None:
            members.helpers[spelled] = helper
        for method, found in inherited.items():
            members.helpers[f"{spelled}#{method}"] = found
        for method, built in made.items():
            members.classes[f"{spelled}.{method}"] = built  # `TextCNN.from_config(cfg)`: a builder

    def _constructors(self, module: ModuleSummary, name: str) -> dict[str, ImportedClass]:
        """The class's alternative constructors (`ClassSummary.constructors`: `@classmethod def
        from_config(cls, cfg): return cls(...)`) that certainly build an `nn.Module` unmoved,
        by method, with what they build (as a builder function's result)."""
        found: dict[str, ImportedClass] = {}
        where = self._path_of(module)
        for method, place in module.classes[name].constructors:
            built = self._function_place(module, name, where, 0, place=place)
            if isinstance(built, list):
                made = _one_of(
                    [self._imported_class(b, n) if b is not None else ImportedClass(n, True) for b, n in built]
                )
                if made is not None:
                    found[method] = made
        return found

    def _class_chain(self, module: ModuleSummary, name: str) -> Iterator[tuple[ModuleSummary, str, ClassSummary]]:
        """The class `name` of `module`, then its project bases in any module, nearest first
        (each once, at most `_MAX_HOPS`); every file it reads counts as read by the lookup."""
        chain = [(module, name)]
        seen: set[str] = set()
        while chain and len(seen) <= _MAX_HOPS:
            owner, cls_name = chain.pop(0)
            qualified = f"{owner.name}.{cls_name}" if owner.name else cls_name
            if qualified in seen or cls_name not in owner.classes:
                continue
            seen.add(qualified)
            where = self._path_of(owner)
            self.summary(where)  # (a file this lookup read, also when resolved before)
            cls = owner.classes[cls_name]
            yield owner, cls_name, cls
            for base in cls.bases:
                hit = self._resolve(base, where)
                if hit is not None and hit.name is not None and hit.name in hit.module.bases:
                    chain.append((hit.module, hit.name))

    def _method_helpers(self, module: ModuleSummary, name: str) -> dict[str, ImportedHelper]:
        """The methods of the class `name` (its own, then its project bases', through modules)
        that do something to the arguments they are handed (`ClassSummary.method_uses`), by
        method: what a subclass's `self.<method>(...)` runs (`ProjectView.helpers` under
        `<class as spelled>#<method>`)."""
        found: dict[str, ImportedHelper] = {}
        defined: set[str] = set()
        for owner, cls_name, cls in self._class_chain(module, name):
            qualified = f"{owner.name}.{cls_name}" if owner.name else cls_name
            where = self._path_of(owner)
            for method, uses in cls.method_uses:
                if method not in defined:
                    uses = self._forwarded(uses, (id(owner), f"{cls_name}.{method}"), where, frozenset(), {})
                    if uses:
                        found[method] = ImportedHelper(f"{qualified}.{method}", self._shown(where), uses)
            defined.update(cls.defined)
        return found

    def _inherited_updates(self, module: ModuleSummary, name: str) -> tuple[HostUpdate, ...]:
        """The class's `ClassSummary.open_updates` into attributes that its nearest project base
        binding them builds only on the host (`ClassSummary.attribute_tables`): `update` of
        `PerClassAccuracy` adding into `self.correct`, which `Meter.reset` of another module
        builds with `torch.zeros(n)`. The line stays the add's, in the class's own file."""
        cls = module.classes[name]
        if not cls.open_updates:
            return ()
        wanted = {attr for _, _, _, attr, _, _ in cls.open_updates}
        decided: dict[str, str] = {}
        for owner, cls_name, base_cls in self._class_chain(module, name):
            if base_cls is cls:
                continue  # the class's own tables are not its bases'
            if not wanted - set(decided):
                break
            if self.is_module_class(owner.bases[cls_name], self._path_of(owner)):
                return ()  # a layer's attributes: not a plain accumulator
            for attr, factory, _ in base_cls.attribute_tables:
                decided.setdefault(attr, factory)
        return tuple((m, ps, p, a, decided[a], line) for m, ps, p, a, _, line in cls.open_updates if decided.get(a))

    def _inherited_places(self, module: ModuleSummary, name: str) -> tuple[tuple[str, str], ...]:
        """`ClassSummary.method_places` of the class `name` and of its project bases in any module,
        for the methods no class nearer to it defines (`init_hidden` of a base class in
        `models/base.py` that a subclass in `models/lstm.py` inherits)."""
        found: dict[str, str] = {}
        defined: set[str] = set()
        for _, _, cls in self._class_chain(module, name):
            for method, place in cls.method_places:
                if method not in defined:
                    found.setdefault(method, place)
            defined.update(cls.defined)
        return tuple(sorted(found.items()))

    def _helper(self, module: ModuleSummary, name: str) -> ImportedHelper | None:
        """A function of `module` that reads, converts or moves what it is handed (or a class
        whose methods read attributes on what its constructor keeps)."""
        if name in module.classes:
            if self.is_module_class(module.bases[name], self._path_of(module)):
                return None  # a layer is built, not handed a model (its summary is not needed)
            cls = module.classes[name]
            if not (cls.constructor_reads or cls.runs_unmoved):
                return None
            uses = ParameterUses(
                cls.init_params, cls.init_positional, reads=cls.constructor_reads, runs_unmoved=cls.runs_unmoved
            )
            qualified = f"{module.name}.{name}" if module.name else name
            return ImportedHelper(qualified, self._shown(self._path_of(module)), uses)
        if name not in module.uses:
            return None
        uses = self._uses(module, name, frozenset(), {})
        constants = module.host_constants() if uses.mixes else {}
        host_mixes = tuple((p, n, *constants[n]) for p, n, _ in uses.mixes if n in constants)
        if not (replace(uses, mixes=()) or host_mixes):
            return None  # (what it mixes with module names counts only where they are host tensors)
        qualified = f"{module.name}.{name}" if module.name else name
        return ImportedHelper(qualified, self._shown(self._path_of(module)), uses, host_mixes)

    def _uses(
        self,
        module: ModuleSummary,
        name: str,
        seen: frozenset[tuple[int, str]],
        done: dict[tuple[int, str], ParameterUses],
    ) -> ParameterUses:
        """`module.uses[name]` with what the project functions it hands its parameters to do to
        them (`ParameterUses.forwards`), at the line of its own call: `accuracy(logits, y)` that
        returns `to_number((logits.argmax(1) == y).float().mean())` reads `logits` on the host
        where `to_number` calls `.item()` in another module; a chain ends after twelve hops and
        at a function met again. `done` keeps each function's answer for the rest of the walk:
        helpers that hand on to the same helpers (torch's inductor) made it exponential."""
        return self._forwarded(module.uses[name], (id(module), name), self._path_of(module), seen, done)

    def _forwarded(
        self,
        uses: ParameterUses,
        key: tuple[int, str],
        where: Path,
        seen: frozenset[tuple[int, str]],
        done: dict[tuple[int, str], ParameterUses],
    ) -> ParameterUses:
        """`uses` (of the function `key` names, in the module at `where`) with what the project
        functions it hands its parameters to do to them (`_uses`)."""
        if not uses.forwards or key in seen or len(seen) > _MAX_HOPS:
            return uses
        if key in done:
            return done[key]
        kept = set(uses.params)
        to_numpy = dict((p, line) for p, line in uses.to_numpy)
        syncs = {p: (read, line) for p, read, line in uses.host_syncs}
        unmoved = dict(uses.runs_unmoved)
        reads = {(p, a): line for p, a, line in uses.reads}
        accelerator = uses.accelerator_tensor
        for param, callee, position, keyword, as_is, always, line in uses.forwards:
            if param == "" and accelerator:
                continue
            found = self._resolve(callee, where)
            if found is None or found.name is None or found.name not in found.module.uses:
                continue
            if param not in kept and param != "":
                continue
            self.summary(self._path_of(found.module))  # (a file this lookup read, also when resolved before)
            inner = self._uses(found.module, found.name, seen | {key}, done)
            if always and inner.accelerator_tensor and not accelerator:
                # a helper's helper that puts a tensor on the GPU, called on every path
                accelerator = ((inner.accelerator_tensor[0][0], line),)
            if param == "":
                continue
            target = inner.parameter_at(position if position >= 0 else None, keyword or None)
            if target is None:
                continue
            if always and any(p == target for p, _ in inner.to_numpy):
                to_numpy.setdefault(param, line)
            sync = next((read for p, read, _ in inner.host_syncs if p == target and p not in inner.loose_syncs), None)
            if sync is not None:
                syncs.setdefault(param, (sync, line))
            if as_is and any(p == target for p, _ in inner.runs_unmoved):
                unmoved.setdefault(param, line)
            if as_is and always:
                for attribute in sorted({a for p, a, _ in inner.reads if p == target}):
                    reads.setdefault((param, attribute), line)
        done[key] = replace(
            uses,
            to_numpy=tuple(sorted(to_numpy.items())),
            host_syncs=tuple(sorted((p, read, line) for p, (read, line) in syncs.items())),
            runs_unmoved=tuple(sorted(unmoved.items())),
            reads=tuple(sorted((p, a, line) for (p, a), line in reads.items())),
            accelerator_tensor=accelerator,
        )
        return done[key]

    def _shown(self, where: Path) -> str:
        """A project file's path for messages: relative to the root."""
        try:
            return where.relative_to(self.root).as_posix()
        except ValueError:
            return where.name

    def _member(self, module: ModuleSummary, name: str) -> ImportedClass | ImportedPlainClass | str | None:
        """What a file importing `name` from `module` learns: a module class, a plain class that
        accumulates into host tensors, a place, or nothing."""
        where = self._path_of(module)
        if name in module.classes:
            imported = self._imported_class(module, name)
            if imported is not None or not module.mentions(name, _PLAIN_CLASS_WORDS):
                return imported
            summary = module.classes[name]
            inherited = self._inherited_places(module, name) if summary.bases else summary.method_places
            updates = summary.host_updates + self._inherited_updates(module, name)
            if (
                updates
                or summary.unmoved_inputs
                or summary.state_loads
                or summary.metric_feeds
                or summary.step_effects
                or inherited
                or summary.moved_params
            ):
                qualified = f"{module.name}.{name}" if module.name else name
                return ImportedPlainClass(
                    qualified,
                    self._shown(where),
                    updates,
                    summary.unmoved_inputs,
                    summary.init_params,
                    summary.init_positional,
                    summary.state_loads,
                    summary.metric_feeds,
                    summary.step_effects,
                    inherited,
                    summary.moved_params,
                )
            return imported
        place = self._function_place(module, name, where, 0)
        if isinstance(place, list):  # a builder: `def build_model(args): return Net(args)`
            return _one_of(
                [
                    self._imported_class(built, name) if built is not None else ImportedClass(name, True)
                    for built, name in place
                ]
            )
        if place.startswith("tuple:"):  # `return loss, to_host(parts)`: each part's place
            parts = [self._part_place(part, where) for part in place[len("tuple:") :].split("|")]
            return "tuple:" + "|".join(parts) if any(parts) else None
        if place.startswith("follows:"):
            return place  # a tensor computed from a parameter: where the argument is
        if place.startswith(("generator:", "optimizer:", "wrapper:", "options:")):
            # a `torch.Generator` and its device; an optimizer and the model it steps; a
            # `DataParallel`/DDP wrapper made right there; the parsed options, with a GPU index
            return place
        if place.startswith("loss:"):  # a loss built with a host class weight: and where
            kind, keyword, line = place[len("loss:") :].split(":")
            return f"loss:{kind}:{keyword}:{self._shown(where)}:{line}"
        kept = (
            "cpu-tensor",
            "device-tensor",
            "device-value",
            "metric",
            "module-list",
            "module-dict",
            "unpinned-loader",
        )
        return place if place in kept else None

    def _part_place(self, place: str, where: Path) -> str:
        """Where one part of a returned tuple lives: a tensor's place, or what the project
        function it is the result of returns; "" when unknown."""
        kind, _, target = place.partition(":")
        if kind in ("call", "callt"):
            found = self._resolve(target, where)
            if found is None or found.name is None or found.name not in found.module.functions:
                return ""
            resolved = self._function_place(found.module, found.name, self._path_of(found.module), 1, False)
            place = resolved if isinstance(resolved, str) else ""
        return place if place in ("cpu-tensor", "device-tensor") else ""

    def _imported_class(self, module: ModuleSummary, name: str) -> ImportedClass | None:
        where = self._path_of(module)
        if not self.is_module_class(module.bases[name], where):
            return None
        cls = module.classes[name]
        qualified = f"{module.name}.{name}" if module.name else name
        owns = self.owns_cpu_parameters(cls, where)
        return ImportedClass(
            qualified,
            owns is True,
            self.moved_attributes(cls, where),
            self._places(cls, where),
            cls.placed,
            self._inherited_places(module, name),
            cls.host_only,
            self._shown(where) if cls.host_only else "",
        )

    def _function_place(
        self,
        module: ModuleSummary,
        name: str,
        where: Path,
        hops: int,
        modules: bool = True,
        place: str | None = None,
    ) -> str | list[tuple[ModuleSummary | None, str]]:
        """Where the function's result lives, or the modules and classes of the `nn.Module`s it
        builds and returns unmoved (`modules`: no step of the chain may have moved it; several
        for a builder that picks the class by name; module None for a library's model builder,
        `torchvision.models.resnet18`); `place`: the function's place when it is no top-level
        function of `module` (a class's constructor method)."""
        if place is None:
            place = module.functions.get(name, "")
        kind, _, target = place.partition(":")
        if kind == "callp":  # `return ImageClassifier(backbone, head)`, the parts built right there
            kind, (target, _, parts) = "call", target.partition("|")
            if modules and hops <= _MAX_HOPS:
                composed = self._composed(target, parts.split(";"), where, hops)
                if composed is not None:
                    return composed
        if kind not in ("call", "callt", "callk") or hops > _MAX_HOPS:
            return place
        modules = modules and kind != "callt"
        if "," in target or target.endswith("[]") or is_cpu_model_builder(target):
            # `if name == "resnet": model = ResNet() ... return model`, `MODELS[name](...)`,
            # `torchvision.models.resnet18()` with its head replaced
            built = [self._built(choice, where, kind, hops) for choice in target.split(",")] if modules else [None]
            if any(b is None for b in built):
                return ""
            return [c for b in built if b is not None for c in b]
        if kind == "call" and _metric_class(target):
            return "metric"  # `return MetricCollection({...})`: a torchmetrics object, unmoved
        found = self._resolve(target, where)
        if (found is None or found.name is None) and target.endswith(".build") and modules:
            # `MODELS.build(cfg)` of a registry object (`MODELS = Registry("models")`)
            built = self._built(target[: -len("build")] + "[]", where, kind)
            return built if built is not None else ""
        if found is None or found.name is None:
            return ""
        if found.name in found.module.functions:
            if kind == "callk":
                return ""  # a function handed `**kwargs` may be handed a device
            return self._function_place(found.module, found.name, self._path_of(found.module), hops + 1, modules)
        if modules and found.name in found.module.classes:
            return [(found.module, found.name)]
        return ""

    def _composed(
        self, target: str, parts: list[str], where: Path, hops: int
    ) -> list[tuple[ModuleSummary | None, str]] | None:
        """A module class with no parameters of its own that never places itself, built by a
        builder from modules it builds on the CPU right there (`torch.nn` layers, project classes
        that own CPU parameters, builders of such): the instance owns theirs (module None, as a
        library's model). None where any of that is not known."""
        found = self._resolve(target, where)
        if found is None or found.name is None or found.name not in found.module.classes:
            return None
        home = self._path_of(found.module)
        if not self.is_module_class(found.module.bases[found.name], home):
            return None
        cls = found.module.classes[found.name]
        if self.owns_cpu_parameters(cls, home) is not None or self._places(cls, home):
            return None  # (True: it owns some itself, as judged elsewhere; False: it may place itself)
        for part in parts:
            if part == "torch.nn":
                continue
            hit = self._resolve(part, where)
            if hit is None or hit.name is None:
                return None
            if hit.name in hit.module.classes:
                owner = self._path_of(hit.module)
                if not self.is_module_class(hit.module.bases[hit.name], owner):
                    return None
                inner = hit.module.classes[hit.name]
                if self.owns_cpu_parameters(inner, owner) is not True or self._places(inner, owner):
                    return None
                continue
            if hit.name not in hit.module.functions:
                return None
            built = self._function_place(hit.module, hit.name, self._path_of(hit.module), hops + 1)
            if not isinstance(built, list) or not built:
                return None
            for module, name in built:
                if module is None:
                    continue  # a library's model, on the CPU
                owner = self._path_of(module)
                inner = module.classes[name]
                if self.owns_cpu_parameters(inner, owner) is not True or self._places(inner, owner):
                    return None
        qualified = f"{found.module.name}.{found.name}" if found.module.name else found.name
        return [(None, qualified)]

    def _built(
        self, target: str, where: Path, kind: str, hops: int = 0
    ) -> list[tuple[ModuleSummary | None, str]] | None:
        """The classes a call of `target` builds (`where` spells it): a project class, a library's
        model builder (module None; not one handed `**kwargs`), each callable of a registry
        dict (`MODELS[name]`), or what a project builder function returns (`@register_model`
        over `def resnet50(num_classes): ... return net`; handed `**kwargs` only where it takes
        no device); None where any is something else."""
        if is_cpu_model_builder(target):
            return [(None, target)] if kind == "call" else None
        if target.endswith(".__dict__[]") and is_cpu_model_builder(target[: -len("__dict__[]")] + "model"):
            # `torchvision.models.__dict__[arch](...)`, `getattr(torchvision.models, arch)(...)`
            return [(None, target[: -len(".__dict__[]")])] if kind == "call" else None
        if target.endswith("[]"):
            found = self._registry(target[:-2].rstrip("."), where, 0)
            if found is None:
                return None
            home, registry = found
            picked = [self._built(choice, home, kind, hops + 1) for choice in registry]
            return None if any(p is None for p in picked) else [c for p in picked if p is not None for c in p]
        found = self._resolve(target, where)
        if found is None or found.name is None:
            return None
        if found.name in found.module.functions and hops <= _MAX_HOPS:
            if kind == "callk" and any("device" in p for p in found.module.uses[found.name].params):
                return None
            place = self._function_place(found.module, found.name, self._path_of(found.module), hops + 1)
            return place if isinstance(place, list) and place else None
        if found.name not in found.module.classes:
            return None
        return [(found.module, found.name)]

    def _registry(
        self, qualified: str, where: Path, hops: int, importer: Path | None = None
    ) -> tuple[Path, tuple[str, ...]] | None:
        """The module that defines the registry dict `qualified` names (through re-exports) and
        the callables it maps names to (`ModuleSummary.registry`)."""
        owner, _, last = qualified.rpartition(".")
        found = self._resolve(owner, where) if owner and hops <= _MAX_HOPS else None
        if found is None or found.name is not None:
            return None
        module, home = found.module, self._path_of(found.module)
        if last in module.imports and module.imports[last] != qualified:  # `from .registry import MODELS`
            return self._registry(module.imports[last], home, hops + 1, importer or where)
        registry = module.registry(last)
        if registry and any(r.startswith("@") for r in registry):
            user = (importer or where) if any(r.endswith(".") for r in registry) else None
            decorated = self._decorated_by(home, {r[1:] for r in registry if r.startswith("@")}, user)
            registry = tuple(r for r in registry if not r.startswith("@")) + decorated
        return (home, registry) if registry else None

    def _module_object(self, qualified: str, where: Path, hops: int = 0) -> str | None:
        """`registry.MODELS` for a name a module binds at its top level (`MODELS =
        Registry("models")`), through re-exports (`from .registry import MODELS`); None for
        anything else."""
        owner, _, last = qualified.rpartition(".")
        path = self._module_path(owner, where) if owner and hops <= _MAX_HOPS else None
        if path is None:
            return None
        module = self.summary(path)
        if last in module.imports and module.imports[last] != qualified:
            return self._module_object(module.imports[last], path, hops + 1)
        return f"{module.name}.{last}" if module.name else last

    def _decorated_by(self, home: Path, registrars: set[str], importer: Path | None = None) -> tuple[str, ...]:
        """The classes (and functions) that the decorators `registrars` (functions of the module
        at `home` that fill a registry dict) decorate in the modules its package's `__init__`
        imports (what must run for the registry to be filled: `from . import resnet, vit`), and
        in the module itself. A registrar ending in `.` is a registry object, any of whose methods
        registers what it decorates (`@MODELS.register_module()`); its classes also live in the
        modules `importer` (the file that builds from it) imports, and those their package's
        `__init__` imports (`import models` to fill the registry)."""
        modules = [self.summary(home)]

        def add_imports_of(init: Path) -> None:
            summary = self.summary(init)
            for target in (*summary.imports.values(), *summary.star_imports):
                found = self._resolve(target, init)
                if found is not None and all(found.module is not m for m in modules):
                    modules.append(found.module)

        package = home.parent / "__init__.py"
        if self._is_file(str(package)):
            add_imports_of(package)
        if importer is not None:
            add_imports_of(importer)
            inits = {importer.parent / "__init__.py"}
            for target in self.summary(importer).imports.values():
                # (`from nets import build`: the package `nets` is imported, its `__init__` runs)
                head = target.split(".", 1)[0]
                found_path = self._module_path(head, importer)
                if found_path is not None and found_path.name == "__init__.py":
                    inits.add(found_path)
            for module in list(modules):
                if module.is_package:
                    inits.add(self._path_of(module))
            for init in sorted(inits - {package}):
                if self._is_file(str(init)):
                    add_imports_of(init)
        marked: list[str] = []
        for module in modules:
            where = self._path_of(module)
            for decorator, names in module.decorated().items():
                found = self._resolve(decorator, where)
                if found is None or found.name is None:
                    owner = self._module_object(decorator.rpartition(".")[0], where)
                    if owner is None:
                        continue
                    qualified = owner + "."
                else:
                    qualified = f"{found.module.name}.{found.name}" if found.module.name else found.name
                if qualified in registrars:
                    marked.extend(f"{module.name}.{n}" if module.name else n for n in names)
        return tuple(marked)

    def _movers_elsewhere(self) -> dict[str, set[str]]:
        """Qualified class -> attributes that a mover anywhere in the project assigns on its
        instances under an `isinstance` test (built once per run)."""
        if self._others_moved is None:
            self._others_moved = {}
            self._deps.append(set())
            try:
                for other in self._mover_files():
                    self._mover_paths.append(str(other))
                    summary = self.summary(other)
                    for cls in summary.classes.values():
                        for target, attr in cls.moves_others:
                            found = self._resolve(target, other)
                            if found is not None and found.name is not None:
                                key = f"{found.module.name}.{found.name}"
                                self._others_moved.setdefault(key, set()).add(attr)
            finally:
                self._mover_deps = self._deps.pop()
        if self._deps:
            self._deps[-1].update(self._mover_deps)
        return self._others_moved

    def _saved_from_host(self, key: str) -> list[str]:
        """The project files that `torch.save` the file name `key` from host data; none when a
        file saves it from anything else. Only the files whose text says `key` and calls a saver
        (`torch.save(`, `save_checkpoint(`) are read (once per run, each name once)."""
        if key not in self._host_saves:
            host: dict[str, list[str]] = {}
            other: set[str] = set()
            read: set[str] = set()
            word = key.encode()
            for path, data in self._savers():
                if word in data:
                    read.add(path)
                    self._note_saves(path, key, host, other)
            self._host_saves[key] = ([] if key in other else host.get(key, []), read)
        savers, read = self._host_saves[key]
        if self._deps:
            self._deps[-1].update(read)
        return savers

    def _saved_from_wrapper(self, key: str) -> list[tuple[str, str, str, int]]:
        """(file name, checkpoint key, saving file, line) for each save of `key` from a wrapper's
        state dict in the project (`project.saves.wrapped_state_saves`); only files whose text
        names `key` and a wrapper are read. Asked once per checkpoint name a loader mentions, so
        each name's answer is kept with every file it was read from (the asking file's view
        depends on them, whichever file asked first)."""
        known = self._wrapper_saves.get(key)
        if known is None:
            self._deps.append(set())
            try:
                found = self._wrapper_saves_of(key)
            finally:
                read = self._deps.pop()
            known = self._wrapper_saves[key] = (found, read)
        if self._deps:
            self._deps[-1].update(known[1])
        return known[0]

    def _wrapper_saves_of(self, key: str) -> list[tuple[str, str, str, int]]:
        from devicelint.project.saves import attribute_state_saves, wrapped_helper_calls, wrapped_state_saves

        found: list[tuple[str, str, str, int]] = []
        word = key.rsplit(".", 1)[-1].encode()  # `@config.CKPT`: savers naming `CKPT`
        for path, data in self._state_savers():
            if word in data and b"DataParallel" in data and b"state_dict" in data:
                if self._deps:
                    self._deps[-1].add(path)
                saves = self.summary(Path(path)).wrapped_saves(wrapped_state_saves)
                shown = self._shown(Path(path))
                found.extend((name, dict_key, shown, line) for name, dict_key, line in saves if name == key)
            if word in data and b"self." in data and b".state_dict()" in data:
                # a class that saves `self.model.state_dict()` where a class of its hierarchy in
                # another module keeps a wrapper there (a base trainer and its subclass)
                module = self.summary(Path(path))
                for cls, attr, name, dict_key, line in module.read_tree(attribute_state_saves):
                    if name == key and self._wrapped_in_hierarchy(module, cls, attr):
                        if self._deps:
                            self._deps[-1].add(path)
                        found.append((name, dict_key, self._shown(Path(path)), line))
        for path, data in self._wrapper_files():
            if word in data:
                # a wrapper handed to a function that saves that parameter's state dict to the
                # path it is also handed (`save_checkpoint(model, opt, epoch, config.CKPT)`)
                module = self.summary(Path(path))
                for callee, position, keyword, arguments, line in module.read_tree(wrapped_helper_calls):
                    for dict_key in self._saves_state_to(callee, Path(path), position, keyword, arguments, key):
                        if self._deps:
                            self._deps[-1].add(path)
                        found.append((key, dict_key, self._shown(Path(path)), line))
        return sorted(set(found))

    def _state_savers(self) -> list[tuple[str, bytes]]:
        """The savers whose text saves a state dict: the only ones a wrapper's save can be in
        (asked once per checkpoint name a loader mentions, so filtered once)."""
        if self._state_saver_files is None:
            self._state_saver_files = [
                (path, data)
                for path, data in self._savers()
                if (b"DataParallel" in data and b"state_dict" in data)
                or (b"self." in data and b".state_dict()" in data)
            ]
        return self._state_saver_files

    def _replicated_from_elsewhere(self, path: Path, module_name: str) -> dict[str, tuple[str, int, bool]]:
        """Class of the module at `path` -> (the file, the line, whether it may span several
        GPUs) of an `nn.DataParallel` call in another module of the project that wraps one of its
        instances (`project.replicas.data_parallel_wraps`)."""
        shown = self._shown(path)
        prefix = f"{module_name}."
        return {
            key[len(prefix) :]: where
            for key, where in self._data_parallel_wraps().items()
            if key.startswith(prefix) and "." not in key[len(prefix) :] and where[0] != shown
        }

    def _data_parallel_wraps(self) -> dict[str, tuple[str, int, bool]]:
        """Qualified class -> the first `nn.DataParallel` call in the project that wraps one of
        its instances (read once per run from the files that name a wrapper)."""
        from devicelint.project.replicas import data_parallel_wraps

        if self._replicated is None:
            self._replicated = {}
            self._deps.append(set())
            try:
                for path, data in self._wrapper_files():
                    if b"DataParallel(" not in data:
                        continue
                    summary = self.summary(Path(path))
                    for spelled, line, several in summary.read_tree(data_parallel_wraps):
                        found = self._built_class(spelled, Path(path))
                        if found is not None and found.name is not None:
                            self._deps[-1].add(path)
                            where = (self._shown(Path(path)), line, several)
                            self._replicated.setdefault(f"{found.module.name}.{found.name}", where)
            finally:
                self._replicated_deps = self._deps.pop()
        if self._deps:
            self._deps[-1].update(self._replicated_deps)
        return self._replicated

    def _built_class(self, spelled: str, where: Path) -> _Found | None:
        """The project class a call of `spelled` builds: the class itself, or the class every
        `return` of a project builder function builds (`def build_model(cfg): return Net(cfg)`)."""
        found = self._resolve(spelled, where)
        if found is None or found.name is None:
            return None
        if found.name in found.module.classes:
            return found
        place = found.module.functions[found.name] if found.name in found.module.functions else ""
        if place.startswith(("call:", "callk:")) and not place.endswith("[]"):
            inner = self._resolve(place.split(":", 1)[1], self._path_of(found.module))
            if inner is not None and inner.name is not None and inner.name in inner.module.classes:
                return inner
        return None

    def _wrapper_files(self) -> list[tuple[str, bytes]]:
        """The project's files whose text names `DataParallel` (`DistributedDataParallel` too),
        with their text (listed once per run)."""
        if self._wrapper_texts is None:
            self._wrapper_texts = self._texts_where(lambda data: b"DataParallel" in data)
        return self._wrapper_texts

    def _saves_state_to(
        self,
        callee: str,
        where: Path,
        position: int,
        keyword: str,
        arguments: tuple[tuple[int, str, tuple[str, ...]], ...],
        key: str,
    ) -> list[str]:
        """The checkpoint keys under which the project function `callee` saves the state dict
        of the parameter a call hands at `position`/`keyword`, to a path parameter the call
        hands a path naming `key` (`ParameterUses.state_saves`)."""
        found = self._resolve(callee, where)
        if found is None or found.name is None or found.name not in found.module.uses:
            return []
        uses = found.module.uses[found.name]
        model = uses.parameter_at(position if position >= 0 else None, keyword or None)
        paths = {uses.parameter_at(i if i >= 0 else None, k or None) for i, k, names in arguments if key in names}
        return sorted({k for m, k, p, _ in uses.state_saves if m == model and p in paths})

    def _wrapped_in_hierarchy(self, module: ModuleSummary, name: str, attr: str) -> bool:
        """Whether a class of the project that derives from `module.name` (or that it derives
        from) sets `self.<attr>` to a `DataParallel`/DDP wrapper: the project's files whose text
        names a wrapper are read for it (and the answer depends on them)."""
        mine = self._lineage(module, name)
        for other, cls, attrs in self._class_wrappers():
            theirs = self._lineage(other, cls) if attr in attrs else set()
            if theirs and (mine <= theirs or theirs <= mine):
                return True
        return False

    def _class_wrappers(self) -> list[tuple[ModuleSummary, str, tuple[str, ...]]]:
        """(module, class, attributes) for each class of the project that sets `self.<attr>` to a
        `DataParallel`/DDP wrapper: the files whose text names a wrapper are read once per run (and
        the answer depends on them)."""
        from devicelint.project.saves import class_wrappers

        if self._wrapper_classes is None:
            self._wrapper_classes = []
            for path, _data in self._wrapper_files():
                other = self.summary(Path(path))
                self._wrapper_paths.append(path)
                for cls, attrs in other.read_tree(class_wrappers).items():
                    self._wrapper_classes.append((other, cls, attrs))
        if self._deps:
            self._deps[-1].update(self._wrapper_paths)
        return self._wrapper_classes

    def _wrapped_by_bases(self, path: Path) -> dict[str, tuple[tuple[str, str, str], ...]]:
        """Class of the module at `path` -> (attribute, base class, its file) for each `self.<attr>`
        a project base class of another module sets to a wrapper (`project.saves.class_wrappers`)."""
        wrappers = self._class_wrappers()
        try:
            data = self._data(path)
        except OSError:
            return {}
        if not any(f"self.{attr}".encode() in data for _, _, attrs in wrappers for attr in attrs):
            return {}  # the module never reads an attribute a base class keeps a wrapper in
        module = self.summary(path)
        found: dict[str, tuple[tuple[str, str, str], ...]] = {}
        for cls in module.bases:
            bases = self._lineage(module, cls) - {f"{module.name}.{cls}" if module.name else cls}
            entries = {
                (attr, name, self._shown(self._path_of(other)))
                for other, name, attrs in wrappers
                if other.name != module.name and (f"{other.name}.{name}" if other.name else name) in bases
                for attr in attrs
            }
            if entries:
                found[cls] = tuple(sorted(entries))
        return found

    def _lineage(self, module: ModuleSummary, name: str) -> set[str]:
        """The qualified class and its project bases, through modules (at most twelve)."""
        found: set[str] = set()
        chain = [(module, name)]
        while chain and len(found) <= _MAX_HOPS:
            owner, cls = chain.pop()
            qualified = f"{owner.name}.{cls}" if owner.name else cls
            if qualified in found:
                continue
            found.add(qualified)
            for base in owner.bases.get(cls, ()):
                hit = self._resolve(base, self._path_of(owner))
                if hit is not None and hit.name is not None and hit.name in hit.module.bases:
                    chain.append((hit.module, hit.name))
        return found

    def _texts_where(self, test: Callable[[bytes], bool]) -> list[tuple[str, bytes]]:
        """The project's readable files whose text passes `test`, with their text, in path order."""
        found = []
        for path in sorted(self._walk()):
            try:
                data = self._data(path)
            except OSError:
                continue
            if test(data):
                found.append((path, data))
        return found

    def _savers(self) -> list[tuple[str, bytes]]:
        """The project's files whose text calls a saver, with their text."""
        if self._saver_files is None:
            self._saver_files = self._texts_where(_is_saver)
        return self._saver_files

    def _note_saves(self, path: str, word: str, host: dict[str, list[str]], other: set[str]) -> None:
        from devicelint.project.saves import saves_in

        for key, from_host in self.summary(Path(path)).saves(saves_in, word).items():
            if from_host:
                host.setdefault(key, []).append(path)
            else:
                other.add(key)

    def _near(self, saver: Path, loader: Path) -> bool:
        """Whether a file the saver writes by a name is the file the loader reads by that name:
        scripts of one folder (run from it), or modules of one package."""
        if saver.parent == loader.parent:
            return True
        top = self._package_top(str(saver.parent))
        # (a package beside the loading script runs from the script's folder: `base/trainer.py`
        # and `test.py`)
        return top is not None and (top == self._package_top(str(loader.parent)) or Path(top).parent == loader.parent)

    def _package_top(self, folder: str) -> str | None:
        """The outermost package folder holding `folder` (None: not in a package)."""
        if folder not in self._packages:
            top = None
            current = folder
            while self._is_file(os.path.join(current, "__init__.py")):
                top = current
                parent = os.path.dirname(current)
                if parent == current:
                    break
                current = parent
            self._packages[folder] = top
        return self._packages[folder]

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
        for path in sorted(self._walk()):
            try:
                data = self._data(path)
            except OSError:
                continue
            if _is_mover(data):
                yield Path(path)

    def covered(self) -> list[Path]:
        """The files whose summaries this run built."""
        return sorted(self.summaries)
