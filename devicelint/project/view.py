"""What one linted file sees of the project's other modules: plain data, hashed into its cache key.

Names are spelled as the file spells them (`Net` after `from .models import Net`, `D.make_mask`
after `import data as D`), so a rule looks one up with the dotted text of the expression.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from devicelint.project.helpers import ParameterUses, parameter_uses_from


@dataclass(frozen=True)
class ImportedClass:
    """An `nn.Module` class of another project module, as the file imports it."""

    qualified: str
    # It builds parameters, buffers or parameterised layers itself (or through project bases)
    # and never places itself: an instance is on the CPU until something moves it.
    owns_cpu_parameters: bool = False
    # The `self.<attr>` its own (or its bases') `_apply`/`to`/`cuda` override moves; None when
    # such an override reaches every attribute (`vars(self)`, `getattr`).
    moved_attributes: tuple[str, ...] | None = ()
    # It (or a project base) moves or places something itself (`.to("cuda:1")`, `device=`): where
    # its outputs live depends on its `forward`, which the file cannot follow.
    places_itself: bool = False
    # (attribute, device text, stated) for each submodule its `__init__` places on a device
    # (`project.summary.ClassSummary.placed`): a model split over GPUs by hand
    placed: tuple[tuple[str, str, bool], ...] = ()
    # (method, "cpu-tensor" or "device-tensor") for each of its methods that certainly returns one
    method_places: tuple[tuple[str, str], ...] = ()
    # (`project.summary.ClassSummary.host_only`): the parameters its methods hand to an argument
    # PyTorch takes only on the CPU (`pack_padded_sequence(x, lengths)` in `forward`)
    host_only: tuple[HostUpdate, ...] = ()
    # its file, relative to the project root (for messages; "" where the class is a library's)
    path: str = ""


@dataclass(frozen=True)
class ImportedPlainClass:
    """A plain (not `nn.Module`) class of another project module that adds what its methods are
    handed into host tensors it keeps (`project.summary.ClassSummary.host_updates`)."""

    qualified: str
    path: str  # its file, relative to the project root (for messages)
    host_updates: tuple[HostUpdate, ...] = ()
    # (`ClassSummary.unmoved_inputs`): what its methods hand, unmoved, to a model it moved
    unmoved_inputs: tuple[HostUpdate, ...] = ()
    # its constructor's parameters, how many are positional, and (`ClassSummary.state_loads`)
    # the methods that load an optimizer's state over one of them
    init_params: tuple[str, ...] = ()
    init_positional: int = 0
    state_loads: tuple[tuple[str, str, int], ...] = ()
    # (`ClassSummary.metric_feeds`): what its methods feed to a torchmetrics metric it keeps unmoved
    metric_feeds: tuple[HostUpdate, ...] = ()
    # (`ClassSummary.step_effects`): the training-step calls its methods make
    step_effects: tuple[tuple[str, str, str, bool, str], ...] = ()
    # (method, "cpu-tensor" or "device-tensor") for each of its methods that certainly returns one
    # (`def class_weights(self): return counts.sum() / counts` of `self.labels` built on the host)
    method_places: tuple[tuple[str, str], ...] = ()
    # (`ClassSummary.moved_params`): the constructor parameters it moves to a device
    moved_params: tuple[str, ...] = ()


HostUpdate = tuple[str, tuple[str, ...], str, str, str, int]


def host_updates_from(data: Any) -> tuple[HostUpdate, ...]:
    """`ClassSummary.host_updates` from its JSON form (a damaged entry raises; callers catch it)."""
    return tuple((str(m), tuple(str(a) for a in ps), str(p), str(a), str(f), int(n)) for m, ps, p, a, f, n in data)


@dataclass(frozen=True)
class ImportedHelper:
    """A function of another project module that does something to the arguments it is handed."""

    qualified: str  # `utils.to_device`
    path: str  # its file, relative to the project root (for messages)
    uses: ParameterUses = ParameterUses()
    # (parameter, name, factory, line): the function combines the parameter with a tensor its
    # module builds on the host at import (`MEAN = torch.tensor(...)` at `line`)
    host_mixes: tuple[tuple[str, str, str, int], ...] = ()

    def places_arguments(self) -> bool:
        """It does something the placement rules that read helpers ask about (`Rule.reads_helpers`):
        `.numpy()` on an argument, a moved copy returned, batches or host inputs handed to a
        model, a host constant combined with an argument."""
        uses = self.uses
        return bool(uses.to_numpy or uses.returns_moved or uses.unmoved_batches or uses.host_inputs or self.host_mixes)


@dataclass(frozen=True)
class ProjectView:
    root: str = ""
    # spelled name -> the imported module class
    classes: dict[str, ImportedClass] = field(default_factory=dict)
    # spelled name -> where the imported function's result lives ("cpu-tensor", "device-tensor",
    # "device-value"), "metric" for a torchmetrics object it builds and returns unmoved, or
    # "tuple:<place>|<place>..." for each part of a tuple it returns ("" where unknown)
    functions: dict[str, str] = field(default_factory=dict)
    # class of this file -> attributes that another class's `_apply`/`to`/`cuda` moves on its
    # instances (`if isinstance(m, Detect): m.stride = fn(m.stride)` in the model's module)
    moved_elsewhere: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # file names (`path_key`) this file's text names that a module of the project (a script of
    # the same folder, or a module of the same package) `torch.save`s from host data, and that
    # no module saves from anything else: a `torch.load` of one reads host tensors
    host_saved: tuple[str, ...] = ()
    # spelled name -> an imported function that reads, converts or moves what it is handed
    helpers: dict[str, ImportedHelper] = field(default_factory=dict)
    # (file name, checkpoint key, saving file, line) for each file name this file's text names
    # that another module saves from a `DataParallel`/`DDP` wrapper's state dict (key "" for
    # the state dict itself): its keys start with `module.`
    wrapped_saved: tuple[tuple[str, str, str, int], ...] = ()
    # spelled name -> an imported plain class that accumulates its arguments into host tensors
    plain_classes: dict[str, ImportedPlainClass] = field(default_factory=dict)
    # spelled name (`MEAN`, `T.MEAN`) -> (torch factory, its module's file, line) for each tensor
    # another module builds on the host at import and this file reads
    host_constants: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    # spelled name (`DEVICE`, `settings.DEVICE`) -> (its module's file, line) for each name
    # another module binds at import to a `torch.device(...)`, which never equals a string
    device_constants: dict[str, tuple[str, int]] = field(default_factory=dict)
    # class of this file -> (file, line, may span several GPUs) of an `nn.DataParallel` call in
    # another module that wraps one of its instances: its `forward` runs on per-GPU replicas
    replicated: dict[str, tuple[str, int, bool]] = field(default_factory=dict)
    # class of this file -> (attribute, base class, its file) for each `self.<attribute>` that a
    # project base class in another module sets to a `DataParallel`/DDP wrapper and never
    # unwraps (`self.net = DDP(net, ...)` in a base trainer): a subclass's `self.net.x` misses
    base_wrappers: dict[str, tuple[tuple[str, str, str], ...]] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """A hash of everything a rule may read: part of the file's cache key."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def __bool__(self) -> bool:
        return bool(
            self.classes
            or self.functions
            or self.moved_elsewhere
            or self.host_saved
            or self.helpers
            or self.wrapped_saved
            or self.plain_classes
            or self.host_constants
            or self.device_constants
            or self.replicated
            or self.base_wrappers
        )


EMPTY_VIEW = ProjectView()


# The last component of a path that names a file `torch.save` writes: `embedding.pt`,
# `sgc_dict.pt`, `model_best.pth.tar` (not a folder, not `.pt` alone, not `config.json`).
_FILE_NAME = re.compile(r"^\w[\w.-]*\.(\w{1,10})$")
_SAVED_SUFFIXES = frozenset(
    {"pt", "pth", "bin", "ckpt", "tar", "pkl", "pickle", "pk", "p", "th", "torch", "model", "data", "dat", "state"}
)


def path_key(literal: str, whole: bool = True) -> str | None:
    """The file name a path literal ends in (`"out/embedding.pt"` -> `embedding.pt`), when its
    suffix is one `torch.save` files carry: how saves and loads in different files are matched.
    `whole`: the literal is the path's last part (for an f-string's trailing text, or a literal
    joined with `+`, only what follows a `/` is a whole file name)."""
    if not whole and "/" not in literal:
        return None
    name = literal.rstrip().rsplit("/", 1)[-1]
    match = _FILE_NAME.match(name)
    return name if match is not None and match.group(1).lower() in _SAVED_SUFFIXES else None


def view_data(view: ProjectView) -> dict[str, Any]:
    """The view as JSON-ready data, for the index's store (`view_from` reads it back)."""
    return asdict(view)


def view_from(data: dict[str, Any]) -> ProjectView:
    """A stored view; every field is coerced, so a damaged entry raises here (the index then
    builds the view afresh). A new field of `ProjectView` is read back here too."""
    classes = {
        str(k): ImportedClass(
            str(c["qualified"]),
            bool(c["owns_cpu_parameters"]),
            None if c["moved_attributes"] is None else tuple(str(a) for a in c["moved_attributes"]),
            bool(c["places_itself"]),
            tuple((str(a), str(d), bool(s)) for a, d, s in c.get("placed", ())),
            tuple((str(m), str(p)) for m, p in c.get("method_places", ())),
            host_updates_from(c.get("host_only", ())),
            str(c.get("path", "")),
        )
        for k, c in data["classes"].items()
    }
    functions = {str(k): str(v) for k, v in data["functions"].items()}
    moved = {str(k): tuple(str(a) for a in v) for k, v in data["moved_elsewhere"].items()}
    host_saved = tuple(str(k) for k in data["host_saved"])
    helpers = {
        str(k): ImportedHelper(
            str(h["qualified"]),
            str(h["path"]),
            parameter_uses_from(h["uses"]),
            tuple((str(p), str(n), str(f), int(line)) for p, n, f, line in h.get("host_mixes", ())),
        )
        for k, h in data.get("helpers", {}).items()
    }
    wrapped = tuple((str(n), str(k), str(f), int(line)) for n, k, f, line in data.get("wrapped_saved", ()))
    plain = {
        str(k): ImportedPlainClass(
            str(c["qualified"]),
            str(c["path"]),
            host_updates_from(c["host_updates"]),
            host_updates_from(c.get("unmoved_inputs", ())),
            tuple(str(p) for p in c.get("init_params", ())),
            int(c.get("init_positional", 0)),
            tuple((str(m), str(p), int(n)) for m, p, n in c.get("state_loads", ())),
            host_updates_from(c.get("metric_feeds", ())),
            tuple((str(m), str(k), str(a), bool(b), str(o)) for m, k, a, b, o in c.get("step_effects", ())),
            tuple((str(m), str(p)) for m, p in c.get("method_places", ())),
            tuple(str(p) for p in c.get("moved_params", ())),
        )
        for k, c in data.get("plain_classes", {}).items()
    }
    constants = {str(k): (str(f), str(p), int(line)) for k, (f, p, line) in data.get("host_constants", {}).items()}
    devices = {str(k): (str(p), int(line)) for k, (p, line) in data.get("device_constants", {}).items()}
    replicated = {
        str(k): (str(p), int(line), bool(several)) for k, (p, line, several) in data.get("replicated", {}).items()
    }
    base_wrappers = {
        str(k): tuple((str(a), str(c), str(p)) for a, c, p in v) for k, v in data.get("base_wrappers", {}).items()
    }
    return ProjectView(
        str(data["root"]),
        classes,
        functions,
        moved,
        host_saved,
        helpers,
        wrapped,
        plain,
        constants,
        devices,
        replicated,
        base_wrappers,
    )
