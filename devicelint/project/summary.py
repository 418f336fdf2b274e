"""One module's summary, read from its text with Python's own parser (`ast`): small, plain data.

The summary holds declarations only (classes and their bases, what their `_apply`/`to`/`cuda`
overrides move, where functions' results live, the module's imports), never trees, so building
one for every file of a project costs a few percent of linting them.
"""

from __future__ import annotations

import ast
import bisect
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from devicelint.analysis.vocabulary import (
    FACTORIES,
    GPU_INDEX_OPTION,
    HOST_ONLY_ARGUMENTS,
    PRESERVING_METHODS,
    SELECTS_DEVICE,
)
from devicelint.project.helpers import (
    ParameterUses,
    carried_parameters,
    dotted,
    moves_to_device,
    names_kept_on_device,
    parameter_uses,
    parameter_uses_from,
    root_name,
    runs_unmoved,
)
from devicelint.project.view import HostUpdate, host_updates_from

# What a mover reaches generically: the whole instance is moved.
_GENERIC_MOVES = frozenset({"__dict__", "vars", "getattr", "setattr", "named_buffers", "buffers"})
_MOVERS = frozenset({"_apply", "to", "cuda"})
# torch functions whose result lives where all their tensor arguments do.
_COMBINING = frozenset({"stack", "cat", "concat", "hstack", "vstack", "meshgrid", "outer", "matmul", "where"})
_PARAMETER_MAKERS = frozenset({"Parameter", "Buffer"})
_REGISTERS = frozenset({"register_buffer", "register_parameter"})
# torch.nn layers without parameters or buffers (the rest of `nn.<Capitalised>` own some).
_STATELESS_LAYERS_SUFFIXES = ("Loss", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "Dropout", "Identity")
_STATELESS_LAYERS = frozenset(
    {"Sequential", "ModuleList", "ModuleDict", "Flatten", "Unflatten", "MaxPool1d", "MaxPool2d", "MaxPool3d"}
    | {"AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d"}
    | {"AdaptiveMaxPool2d", "Upsample", "PixelShuffle", "Mish", "LeakyReLU", "ELU", "Hardswish", "Softplus"}
)


@dataclass(frozen=True)
class ClassSummary:
    # Each base as a qualified name (`torch.nn.Module`, `pkg.models.base.Base`), or as spelled
    # when the module does not say where it comes from.
    bases: tuple[str, ...]
    # Classes it instantiates (qualified as bases are): a project module class built inside
    # gives its parameters to this one.
    builds: tuple[str, ...] = ()
    # It makes `nn.Parameter`s, buffers or parameterised `torch.nn` layers itself.
    makes_parameters: bool = False
    # `.to(...)`, `.cuda()` or `device=` somewhere in its body: it may place itself.
    places_itself: bool = False
    # The `self.<attr>` its `_apply`/`to`/`cuda` touch (None: generically every attribute).
    moved_attributes: tuple[str, ...] | None = ()
    # (qualified class, attribute) its movers assign on other objects, by `isinstance` test.
    moves_others: tuple[tuple[str, str], ...] = ()
    # (attribute, device text, stated) for each submodule `__init__` puts on a device of its own
    # (`self.head = nn.Linear(...).to("cuda:1")`); stated: the text is a device literal
    # (`cuda:1`), else the code's name for it (`self.dev1`)
    placed: tuple[tuple[str, str, bool], ...] = ()
    # (method, place) for each method whose every `return` is certainly a CPU or a device
    # tensor (`def init_hidden(self, n): return torch.zeros(1, n, self.size)`)
    method_places: tuple[tuple[str, str], ...] = ()
    # (method, its parameters, parameter, attribute, factory, line) for each parameter a method
    # adds in place into an attribute that every assignment in the class builds with a host
    # torch factory and nothing moves (`self.correct += (preds == target).sum()`, `self.correct`
    # built by `torch.zeros(n)` at `line`): a metric bank's CPU accumulator
    host_updates: tuple[HostUpdate, ...] = ()
    # (method, its parameters, parameter, attribute, line) for each parameter a method hands,
    # unmoved, to a model its `__init__` moved (`self.model = model.to(device)`, then
    # `images, labels = batch; self.model(images)`), in a method that moves nothing itself
    unmoved_inputs: tuple[HostUpdate, ...] = ()
    # What its constructor does to its arguments through the attributes that hold them: the
    # `__init__` parameters, how many are positional, and (parameter, attribute, line) for the
    # first read of each public attribute on one kept as `self.x = param` (`self.model.backbone`
    # in any method), so a wrapper handed to `Trainer(model)` is judged as at a function call
    init_params: tuple[str, ...] = ()
    init_positional: int = 0
    constructor_reads: tuple[tuple[str, str, int], ...] = ()
    # (method, parameter, line) for each method that loads the state of an optimizer `__init__`
    # builds over a constructor parameter's parameters (`self.opt = Adam(model.parameters())`,
    # then `self.opt.load_state_dict(...)` in `resume`): the state is cast to where that model is
    state_loads: tuple[tuple[str, str, int], ...] = ()
    # (`ParameterUses.runs_unmoved` through the attributes that keep the constructor's
    # arguments): `self.model(x)` on inputs a method moved, `self.model` never moved
    runs_unmoved: tuple[tuple[str, int], ...] = ()
    # (method, its parameters, parameter, attribute, metric class, line) for each parameter a
    # method feeds (`self.acc.update(preds, target)`) to a torchmetrics metric `__init__` keeps on
    # `self` and nothing in the class moves: the metric stays on the CPU
    metric_feeds: tuple[HostUpdate, ...] = ()
    # (method, kind, scaler attribute, under an `if` or a loop, optimizer attribute) for each
    # training-step call a method makes, in source order, with what the methods of the class it
    # calls make (`ParameterUses.step_effects`' kinds, and "clip"): `self.gradscaler.update()` in
    # `optimize_parameters` is ("optimize_parameters", "update", "gradscaler", False, ""); the
    # caller's `trainer.optimize_parameters()` makes it on `trainer.gradscaler`. The optimizer is
    # an unscale's (`self.scaler.unscale_(self.optimizer)`: "optimizer"), "" for anything else
    step_effects: tuple[tuple[str, str, str, bool, str], ...] = ()
    # (method, its parameters, parameter, keyword, callee, line) for each parameter a method hands
    # as it is to an argument PyTorch takes only on the CPU (`pack_padded_sequence(x, lengths)` in
    # `forward(self, tokens, lengths)`): a caller that passes a device tensor there fails
    host_only: tuple[HostUpdate, ...] = ()
    # the `__init__` parameters it moves to a device (`self.model = model.to(self.device)`, not
    # `.to("cpu")`), for a plain class (a trainer): an argument handed there is moved after all
    moved_params: tuple[str, ...] = ()
    # (method, what it does to the arguments it is handed, `self` left out) for each method of a
    # class that is not a `torch.nn` layer whose uses say something (`ParameterUses`), and the
    # names of all the methods it defines: a subclass in another module that calls the inherited
    # `self.to_device(batch)` or `self.log_step(loss)` is judged at the call as for a function
    method_uses: tuple[tuple[str, ParameterUses], ...] = ()
    defined: tuple[str, ...] = ()
    # for a plain class, `host_updates` into attributes it never binds or moves itself (factory
    # "", the line of the add: `self.correct += torch.bincount(...)` in `update`): a project base
    # that builds them on the host (`Meter.reset`, another module) makes them host updates
    open_updates: tuple[HostUpdate, ...] = ()
    # for a plain class, (attribute, host factory or "", line) for each `self` attribute it binds
    # or moves: the factory (and its line) where it binds it only with host factories, never moved
    attribute_tables: tuple[tuple[str, str, int], ...] = ()
    # (method, place) for each class or static method whose every `return` builds an instance
    # (`@classmethod def from_config(cls, cfg): return cls(cfg.dim, cfg.depth)`), the place as
    # a function's (`call:<qualified class>`): `TextCNN.from_config(cfg)` is a builder's call
    constructors: tuple[tuple[str, str], ...] = ()


class ModuleSummary:
    """One module's declarations. Imports come from a scan of the text; each top-level class or
    function is parsed on its own, the first time an importer asks about it (most never are).

    `saved` restores what an earlier run learnt of the same text (`saved()`); the text is then
    read (`load`) only if a definition that run never looked at is asked about."""

    def __init__(
        self,
        name: str,
        is_package: bool = False,
        text: str = "",
        error: str | None = None,
        saved: dict[str, Any] | None = None,
        load: Callable[[], str] | None = None,
    ) -> None:
        self.name = name
        self.is_package = is_package
        # why the file could not be read: it then declares nothing
        self.error = error
        self._load = load
        self._source: tuple[str, dict[str, tuple[str, int, int]]] | None = None
        if saved is None:
            imports, stars, _ = scan_imports(text, name, is_package, used=False)
            blocks = _top_level_blocks(text)
            self._source = (text, blocks)
            kinds = {n: kind for n, (kind, _, _) in blocks.items()}
            # (kept with the summary: a warm run asks it of modules whose text it never reads)
            tensors_at_import = _IMPORT_TIME_TENSOR.search(text) is not None or _DEVICE_FIELD.search(text) is not None
            saved = {}
        else:
            # (coerced: a damaged entry raises here, where the index catches it, or reads as text)
            imports = {str(k): str(v) for k, v in saved["imports"].items()}
            tensors_at_import = bool(saved.get("tensors_at_import", True))
            stars = [str(s) for s in saved["stars"]]
            kinds = {str(k): str(v) for k, v in saved["kinds"].items()}
        # local name -> qualified name of what it was imported as (`D` -> `pkg.data`)
        self._tensors_at_import = tensors_at_import
        self.imports: dict[str, str] = imports
        # modules whose every public name this one re-exports (`from .layers import *`)
        self.star_imports = tuple(stars)
        self._kinds: dict[str, str] = kinds
        self._tree: ast.Module | None = None
        self._wrapped_saves: list[tuple[str, str, int]] | None = None
        self._decorated: dict[str, list[str]] | None = None
        self._tree_reads: dict[str, Any] = {}
        # (restored when an earlier run parsed the module for them)
        self._host_constants: dict[str, tuple[str, int]] | None = (
            {str(n): (str(f), int(line)) for n, (f, line) in saved["host_constants"].items()}
            if "host_constants" in saved
            else None
        )
        self._device_constants: dict[str, int] | None = (
            {str(n): int(line) for n, line in saved["device_constants"].items()}
            if "device_constants" in saved
            else None
        )
        self._registries: dict[str, list[str] | None] = {
            str(n): None if v is None else [str(c) for c in v] for n, v in saved.get("registries", {}).items()
        }
        self._nodes: dict[str, Any] = {}
        self._offsets: dict[str, int] = {}
        qualify = _Qualifier(imports, name, set(kinds))
        class_names = [n for n, kind in kinds.items() if kind == "class"]
        function_names = [n for n, kind in kinds.items() if kind != "class"]
        restored = {n: _class_from(v) for n, v in saved.get("classes", {}).items()}
        self.classes: _Lazy[ClassSummary] = _Lazy(
            class_names,
            lambda n: self._use(
                n, lambda node: _class(node, qualify, self._offsets.get(n, 0)), lambda: n in self.bases.built
            ),
            restored,
        )
        # class -> its bases, qualified (cheaper than `classes`: no walk of the body)
        bases = {str(n): tuple(str(b) for b in v) for n, v in saved.get("bases", {}).items()}
        self.bases: _Lazy[tuple[str, ...]] = _Lazy(
            class_names,
            lambda n: self._use(n, lambda node: _bases(node, qualify), lambda: n in self.classes.built),
            bases,
        )
        # function -> "cpu-tensor", "device-tensor", "call:<qualified>" (whatever that returns),
        # "tuple:<place>|<place>..." (each part of a returned tuple) or ""
        places = {str(n): str(v) for n, v in saved.get("functions", {}).items()}
        self.functions: _Lazy[str] = _Lazy(
            function_names,
            lambda n: self._use(
                n, lambda node: _returns(node, qualify, self._offsets.get(n, 0)), lambda: n in self.uses.built
            ),
            places,
        )
        # function -> what it does to the arguments it is handed (`devicelint.project.helpers`)
        uses = {str(n): parameter_uses_from(v) for n, v in saved.get("uses", {}).items()}
        self.uses: _Lazy[ParameterUses] = _Lazy(
            function_names,
            lambda n: self._use(
                n,
                lambda node: parameter_uses(
                    node,
                    _own_nodes(node) if node is not None else [],
                    self._offsets.get(n, 0),
                    self.builds_tensors_at_import(),
                    qualify.known,
                ),
                lambda: n in self.functions.built,
            ),
            uses,
        )
        # definition (or "" for the module's own statements) -> file name -> whether every
        # `torch.save` of it there writes host data (`saves`)
        self._saves: dict[str, dict[str, bool]] = {
            str(n): {str(k): bool(v) for k, v in found.items()} for n, found in saved.get("saves", {}).items()
        }
        self._qualify = qualify
        self._restored_size = self._size()

    def _size(self) -> int:
        built = len(self.classes.built) + len(self.bases.built) + len(self.functions.built) + len(self.uses.built)
        return (
            built
            + len(self._saves)
            + (self._host_constants is not None)
            + (self._device_constants is not None)
            + len(self._registries)
        )

    def saves(self, read: SavesReader, word: str) -> dict[str, bool]:
        """File name -> whether every `torch.save` of it writes host data (`read`:
        `devicelint.project.saves.saves_in`), in the definitions (and the module's own
        statements) whose text says `word` and calls a saver: each parsed alone, once."""
        if self._source is None:
            text = self._load() if self._load is not None else ""
            self._source = (text, _top_level_blocks(text))
        text, blocks = self._source
        found: dict[str, bool] = {}
        rest, last = [], 0
        for name, (_, start, end) in sorted(blocks.items(), key=lambda item: item[1][1]):
            rest.append(text[last:start])
            last = end
            if word in text[start:end] and "save" in text[start:end]:
                if name not in self._saves:
                    node = self._node(name)
                    self._saves[name] = {} if node is None else read(node, self._qualify, text)
                    self._nodes.pop(name, None)
                _merge(found, self._saves[name])
        rest.append(text[last:])
        outside = "".join(rest)
        if word in outside and "save" in outside:
            if "" not in self._saves:
                if self._tree is None:
                    self._tree = _parse(text) or ast.Module(body=[], type_ignores=[])
                self._saves[""] = read(self._tree, self._qualify, text)
            _merge(found, self._saves[""])
        return found

    def host_constants(self) -> dict[str, tuple[str, int]]:
        """Names the module's top-level code binds once to a tensor built on the host (`MEAN =
        torch.tensor([...]).view(3, 1, 1)`, not a 0-dim number): name -> (factory, line)."""
        if self._host_constants is None:
            self._import_time_values()
        assert self._host_constants is not None
        return self._host_constants

    def device_constants(self) -> dict[str, int]:
        """Names the module's top-level code binds once to a `torch.device(...)` (`DEVICE =
        torch.device("cuda" if ... else "cpu")`): name -> line. A `torch.device` never equals a
        string, wherever it is compared."""
        if self._device_constants is None:
            self._import_time_values()
        assert self._device_constants is not None
        return self._device_constants

    def _import_time_values(self) -> None:
        """`host_constants` and `device_constants`, from one pass over the top-level code."""
        if not self._tensors_at_import:
            self._host_constants, self._device_constants = {}, {}
            return
        tree = self._whole_tree()
        qualify = self._qualify
        seen: dict[str, list[tuple[str, int] | None]] = {}
        devices: dict[str, list[int | None]] = {}
        fields = _device_fields(tree, qualify)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                # `cfg = TrainConfig()`: its fields that default to a `torch.device` are devices
                value = node.value
                built = (
                    fields.get(value.func.id, ())
                    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    else ()
                )
                given = {k.arg for k in value.keywords} if isinstance(value, ast.Call) else set()
                for name in built:
                    if name not in given:
                        devices.setdefault(f"{node.targets[0].id}.{name}", []).append(node.lineno)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                pairs: list[tuple[ast.expr, ast.expr]] = [(node.target, node.value)]
            elif isinstance(node, ast.Assign):
                pairs = [(target, node.value) for target in node.targets]
            else:
                continue
            for target, value in pairs:
                whole = isinstance(target, ast.Name)
                device = whole and isinstance(value, ast.Call) and qualify(value.func) == "torch.device"
                for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                    made = _host_tensor(value, qualify) if whole else ""
                    seen.setdefault(name.id, []).append((made, node.lineno) if made else None)
                    devices.setdefault(name.id, []).append(node.lineno if device else None)
        self._host_constants = {n: made[0] for n, made in seen.items() if len(made) == 1 and made[0] is not None}
        self._device_constants = {n: at[0] for n, at in devices.items() if len(at) == 1 and at[0] is not None}

    def binds_under(self, name: str) -> bool:
        """Whether a device constant is read through `name` (`cfg` of `cfg.device`)."""
        return self._tensors_at_import and any(key.startswith(name + ".") for key in self.device_constants())

    def registry(self, name: str) -> tuple[str, ...] | None:
        """The callables a module-level dict maps names to (`MODELS = {"unet": UNet, "fcn":
        FCN8s}`, also `MODELS["segnet"] = SegNet` at top level), qualified, and `@<function>` for
        each of the module's decorators that fill it (`_registrars`); None when `name` is no
        such dict or the module changes it otherwise (`MODELS.update(...)`, rebinding)."""
        if name not in self._registries:
            self._registries[name] = _registry(self._whole_tree(), name, self._qualify)
        found = self._registries[name]
        return None if found is None else tuple(found)

    def _whole_tree(self) -> ast.Module:
        if self._tree is None:
            if self._source is None:
                text = self._load() if self._load is not None else ""
                self._source = (text, _top_level_blocks(text))
            self._tree = _parse(self._source[0]) or ast.Module(body=[], type_ignores=[])
        return self._tree

    def read_tree(self, read: Callable[[ast.Module, _Qualifier], T]) -> T:
        """What `read` finds in the whole module (parsed once, on the first ask), kept per
        reader for the run (`project.saves.class_wrappers`, `attribute_state_saves`)."""
        name = getattr(read, "__qualname__", repr(read))
        if name not in self._tree_reads:
            self._tree_reads[name] = read(self._whole_tree(), self._qualify)
        found: T = self._tree_reads[name]
        return found

    def decorated(self) -> dict[str, list[str]]:
        """Decorator (qualified as the module spells it) -> the top-level classes and functions
        it decorates, called or not (`@register_model("unet")`, `@register`); the whole module
        is parsed on the first ask."""
        if self._decorated is None:
            self._decorated = {}
            for node in self._whole_tree().body:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                    for mark in node.decorator_list:
                        spelled = self._qualify(mark.func if isinstance(mark, ast.Call) else mark)
                        if spelled is not None:
                            self._decorated.setdefault(spelled, []).append(node.name)
        return self._decorated

    def wrapped_saves(self, read: WrappedSavesReader) -> list[tuple[str, str, int]]:
        """What `read` (`devicelint.project.saves.wrapped_state_saves`) finds in the whole
        module, parsed once on the first ask: (file name, checkpoint key, line) for each save of
        a `DataParallel`/`DistributedDataParallel` wrapper's state dict."""
        if self._wrapped_saves is None:
            self._wrapped_saves = read(self._whole_tree(), self._qualify)
        return self._wrapped_saves

    @property
    def learnt(self) -> bool:
        """Whether this run learnt something `saved()` did not hold when it was restored."""
        return self._size() != self._restored_size

    def saved(self) -> dict[str, Any]:
        """What this run learnt, as JSON-ready data (`ModuleSummary(..., saved=...)` restores it)."""
        return {
            "imports": self.imports,
            "stars": list(self.star_imports),
            "kinds": self._kinds,
            "tensors_at_import": self._tensors_at_import,
            "classes": {n: asdict(c) for n, c in self.classes.built.items()},
            "bases": {n: list(b) for n, b in self.bases.built.items()},
            "functions": dict(self.functions.built),
            "uses": {n: asdict(u) for n, u in self.uses.built.items()},
            **({"saves": self._saves} if self._saves else {}),
            **({"host_constants": self._host_constants} if self._host_constants is not None else {}),
            **({"device_constants": self._device_constants} if self._device_constants is not None else {}),
            **({"registries": self._registries} if self._registries else {}),
        }

    def _use(self, name: str, make: Callable[[Any], T], others_done: Callable[[], bool]) -> T:
        """`make` of a definition's `ast` node, which is let go once nothing else needs it: a run
        over a large project holds summaries, not trees (transformers: 630 MiB before)."""
        value = make(self._node(name))
        if others_done():
            self._nodes.pop(name, None)
        return value

    def binds_at_import(self, name: str) -> bool:
        """Whether the top-level code binds `name` once to a host tensor or a `torch.device`."""
        return self._tensors_at_import and (name in self.host_constants() or name in self.device_constants())

    def builds_tensors_at_import(self) -> bool:
        """Whether a line of the module's own code binds a name to a torch call (`MEAN =
        torch.tensor(...)`): a cheap test before looking for what functions mix with such names."""
        if self._host_constants is not None:
            return bool(self._host_constants)
        return self._tensors_at_import

    def mentions(self, name: str, words: tuple[str, ...]) -> bool:
        """Whether the text of the top-level definition `name` holds one of `words`: a cheap test
        before summarising it (true where an earlier run already did)."""
        if name in self.classes.built:
            return True
        if self._source is None:
            text = self._load() if self._load is not None else ""
            self._source = (text, _top_level_blocks(text))
        text, blocks = self._source
        block = blocks.get(name)
        return block is not None and any(word in text[block[1] : block[2]] for word in words)

    def _node(self, name: str) -> Any:
        """The `ast` node of one top-level definition: its block parsed alone, else the module."""
        if name not in self._nodes:
            self._nodes[name] = self._parse_node(name)
        return self._nodes[name]

    def _parse_node(self, name: str) -> Any:
        if self._source is None:
            text = self._load() if self._load is not None else ""
            self._source = (text, _top_level_blocks(text))
        text, blocks = self._source
        if name not in blocks:
            return None
        _, start, end = blocks[name]
        tree = _parse(text[start:end])
        # lines of a block parsed alone count from its start
        self._offsets[name] = text.count("\n", 0, start) if tree is not None else 0
        if tree is None:
            if self._tree is None:
                self._tree = _parse(text) or ast.Module(body=[], type_ignores=[])
            tree = self._tree
        return next(
            (n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name),
            None,
        )


def _registry(tree: ast.Module, name: str, qualify: _Qualifier) -> list[str] | None:
    """`ModuleSummary.registry` from the module's tree."""
    found: list[str] | None = None
    top = {id(t) for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and node.id == name
            and not isinstance(node.ctx, ast.Load)
            and id(node) not in top
        ):
            return None  # bound again in a function, a loop, a `del`
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == name and node.func.attr not in ("get", "keys", "items"):
                return None  # `MODELS.update(...)`, `MODELS.setdefault(...)`
    # `MODELS = Registry("models")`: an object whose methods register the classes they decorate
    # (`@MODELS.register_module()`), "@<its qualified name>." (`ProjectIndex._decorated_by`)
    bound = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    if len(bound) == 1 and isinstance(bound[0], ast.Call) and isinstance(bound[0].func, (ast.Name, ast.Attribute)):
        maker = qualify(bound[0].func) or ""
        if maker and not maker.startswith(("torch.", "collections.")) and maker.rsplit(".", 1)[-1][:1].isupper():
            return [f"@{qualify.module}.{name}.".lstrip(".")]
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if found is not None or len(node.targets) != 1 or not isinstance(node.value, ast.Dict):
                return None
            found = []
            for value in node.value.values:
                qualified = qualify(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
                if qualified is None:
                    return None
                found.append(qualified)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name for t in node.targets
        ):
            qualified = qualify(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
            if found is None or qualified is None:
                return None
            found.append(qualified)
    if found is not None:
        found.extend(f"@{qualify(ast.Name(id=f, ctx=ast.Load()))}" for f in _registrars(tree, name))
    return found


def _registrars(tree: ast.Module, name: str) -> list[str]:
    """The module's top-level functions that put what they (or a function they define) are
    handed into the dict `name`: decorators (`def register_model(key): def wrap(cls):
    MODELS[key] = cls; return cls; return wrap`) whose classes the dict then maps names to."""
    found = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        scopes = [n for n in ast.walk(function) if isinstance(n, (ast.FunctionDef, ast.Lambda))]
        for scope in scopes:
            params = {a.arg for a in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs)}
            body = scope.body if isinstance(scope, ast.FunctionDef) else []
            if any(
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name)
                and node.value.id in params
                and any(
                    isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name
                    for t in node.targets
                )
                for statement in body
                for node in ast.walk(statement)
            ):
                found.append(function.name)
                break
    return found


def _merge(found: dict[str, bool], more: dict[str, bool]) -> None:
    for key, host in more.items():
        found[key] = found.get(key, True) and host


def _class_from(data: dict[str, Any]) -> ClassSummary:
    moved = data["moved_attributes"]
    return ClassSummary(
        bases=tuple(str(b) for b in data["bases"]),
        builds=tuple(str(b) for b in data["builds"]),
        makes_parameters=bool(data["makes_parameters"]),
        places_itself=bool(data["places_itself"]),
        moved_attributes=None if moved is None else tuple(str(m) for m in moved),
        moves_others=tuple((str(c), str(a)) for c, a in data["moves_others"]),
        placed=tuple((str(a), str(d), bool(k)) for a, d, k in data.get("placed", ())),
        method_places=tuple((str(m), str(p)) for m, p in data.get("method_places", ())),
        host_updates=host_updates_from(data.get("host_updates", ())),
        unmoved_inputs=host_updates_from(data.get("unmoved_inputs", ())),
        init_params=tuple(str(p) for p in data.get("init_params", ())),
        init_positional=int(data.get("init_positional", 0)),
        constructor_reads=tuple((str(p), str(a), int(n)) for p, a, n in data.get("constructor_reads", ())),
        state_loads=tuple((str(m), str(p), int(n)) for m, p, n in data.get("state_loads", ())),
        runs_unmoved=tuple((str(p), int(n)) for p, n in data.get("runs_unmoved", ())),
        metric_feeds=host_updates_from(data.get("metric_feeds", ())),
        step_effects=tuple((str(m), str(k), str(a), bool(c), str(o)) for m, k, a, c, o in data.get("step_effects", ())),
        host_only=host_updates_from(data.get("host_only", ())),
        moved_params=tuple(str(p) for p in data.get("moved_params", ())),
        method_uses=tuple((str(m), parameter_uses_from(u)) for m, u in data.get("method_uses", ())),
        defined=tuple(str(m) for m in data.get("defined", ())),
        open_updates=host_updates_from(data.get("open_updates", ())),
        attribute_tables=tuple((str(a), str(f), int(n)) for a, f, n in data.get("attribute_tables", ())),
        constructors=tuple((str(m), str(p)) for m, p in data.get("constructors", ())),
    )


T = TypeVar("T")
# `devicelint.project.saves.saves_in`: a definition's (or a module's own) saves
SavesReader = Callable[[ast.AST, "_Qualifier", str], dict[str, bool]]
# `devicelint.project.saves.wrapped_state_saves`
WrappedSavesReader = Callable[[ast.Module, "_Qualifier"], list[tuple[str, str, int]]]


class _Lazy(Mapping[str, T]):
    """Names known up front, each value built on first use."""

    def __init__(self, names: list[str], build: Callable[[str], T], built: dict[str, T] | None = None) -> None:
        self._names = dict.fromkeys(names)
        self._build = build
        self.built: dict[str, T] = {k: v for k, v in (built or {}).items() if k in self._names}

    def __getitem__(self, key: str) -> T:
        if key not in self._names:
            raise KeyError(key)
        if key not in self.built:
            self.built[key] = self._build(key)
        return self.built[key]

    def __contains__(self, key: object) -> bool:
        # `Mapping`'s own test looks the value up, which would build it
        return key in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _parse(text: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


_DEFINITION = re.compile(r"^(class|def|async[ \t]+def)[ \t]+(\w+)", re.M)
# A line that starts a top-level statement (not indented, not a comment or a closing bracket).
_TOP_LEVEL = re.compile(r"^[^\s#)\]}]", re.M)


def _top_level_blocks(text: str) -> dict[str, tuple[str, int, int]]:
    """name -> (kind, start, end) of each top-level `class`/`def`, its block running to the next
    top-level statement. Text at the margin inside a string ends a block early: that block
    then fails to parse alone, and the whole module is parsed instead."""
    starts = [m.start() for m in _TOP_LEVEL.finditer(text)]
    blocks: dict[str, tuple[str, int, int]] = {}
    for match in _DEFINITION.finditer(text):
        following = bisect.bisect_right(starts, match.start())
        end = starts[following] if following < len(starts) else len(text)
        blocks[match.group(2)] = (match.group(1).split()[0], match.start(), end)
    return blocks


def absolute_module(importer: str, is_package: bool, level: int, module: str | None) -> str | None:
    """The absolute name `from <level dots><module> import ...` names inside `importer`."""
    if level == 0:
        return module
    parts = importer.split(".") if importer else []
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        if level - 1 > len(parts):
            return None
        parts = parts[: len(parts) - (level - 1)]
    if module:
        parts.append(module)
    return ".".join(parts) or None


_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import\b|import\b)[ \t]*", re.M)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_ALIAS = re.compile(r"^([\w.]+|\*)(?:\s+as\s+(\w+))?$")


def scan_imports(
    text: str, name: str, is_package: bool, used: bool = True
) -> tuple[dict[str, str], list[str], set[str]]:
    """The imports of a module from its text alone (no parse: a linted file's own imports are
    all its view needs), its star imports, and every identifier the rest of the text uses.

    An import-looking line inside a string may count too; it can only name more modules."""
    bound: dict[str, str] = {}
    stars: list[str] = []
    spans: list[tuple[int, int]] = []
    for match in _IMPORT.finditer(text):
        start = end = match.end()
        if text.startswith("(", start):
            close = text.find(")", start)
            end = close + 1 if close >= 0 else len(text)
            names = text[start + 1 : end - 1]
        else:
            while True:  # backslash continuations
                line_end = text.find("\n", end)
                line_end = len(text) if line_end < 0 else line_end
                end = line_end
                if not text[:line_end].rstrip().endswith("\\"):
                    break
                end = line_end + 1
            names = text[start:end].replace("\\\n", " ")
        spans.append((match.start(), end))
        names = re.sub(r"#[^\n]*", "", names)
        dots, module = match.group(1), match.group(2)
        base = absolute_module(name, is_package, len(dots), module or None) if dots is not None else None
        for part in names.replace("\n", " ").split(","):
            alias = _ALIAS.match(part.strip().rstrip(";"))
            if alias is None:
                continue
            target, local = alias.group(1), alias.group(2)
            if dots is None:  # `import a.b [as c]`
                if local:
                    bound[local] = target
                else:
                    top = target.split(".", 1)[0]
                    bound.setdefault(top, top)
                    if top != target:
                        # `import models.net` binds `models`, and `models.net.Net` reads the submodule
                        bound.setdefault(target, target)
            elif base is None:
                continue
            elif target == "*":
                stars.append(base)
            elif "." not in target:
                bound[local or target] = f"{base}.{target}"
    if not used:
        return bound, stars, set()
    rest, last = [], 0
    for start, end in spans:
        rest.append(text[last:start])
        last = end
    rest.append(text[last:])
    used = set(_IDENTIFIER.findall("".join(rest)))
    return bound, stars, used


def summarise(text: str, name: str, is_package: bool = False) -> ModuleSummary:
    """The summary of module `name` from its source text."""
    return ModuleSummary(name, is_package, text)


class _Qualifier:
    """Qualified names of expressions, from the module's imports and its own top-level names."""

    def __init__(self, imports: dict[str, str], module: str, own: set[str]) -> None:
        self.imports = imports
        self.module = module
        self.own = own

    def __call__(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if node.id in self.imports:
            head = self.imports[node.id]
        elif node.id in self.own:
            head = f"{self.module}.{node.id}" if self.module else node.id
        else:
            head = node.id
        return ".".join([head, *reversed(parts)])

    def known(self, node: ast.expr) -> str | None:
        """The qualified name of an expression the module imports or defines (`utils.f`, `f`), or
        None (a local name, a parameter, a builtin)."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not (isinstance(root, ast.Name) and (root.id in self.imports or root.id in self.own)):
            return None
        return self(node)


def _bases(node: ast.ClassDef | None, qualify: _Qualifier) -> tuple[str, ...]:
    return () if node is None else tuple(q for q in (qualify(b) for b in node.bases) if q is not None)


def _class(node: ast.ClassDef | None, qualify: _Qualifier, first_line: int = 0) -> ClassSummary:
    if node is None:
        return ClassSummary(())
    bases = _bases(node, qualify)
    builds: set[str] = set()
    makes = places = factories = updates_self = host_only = False
    submodules: dict[str, str] = {}  # `self.head = Detect(...)` anywhere in the class
    attributes: dict[str, list[ast.expr]] = {}  # `self.labels = torch.as_tensor(labels)`
    moved_attributes: set[str] = set()  # `self.labels.cuda()`
    for inner in _descendants(node):
        if isinstance(inner, ast.Assign):
            if isinstance(inner.value, ast.Call):
                _note_submodules(inner, qualify, submodules)
            for target in inner.targets:
                attr = _self_attribute(target)
                if attr is not None:
                    attributes.setdefault(attr, []).append(inner.value)
        elif isinstance(inner, ast.AugAssign):
            target = inner.target.value if isinstance(inner.target, ast.Subscript) else inner.target
            updates_self = updates_self or _self_attribute(target) is not None
        elif isinstance(inner, ast.AnnAssign) and inner.value is not None:
            attr = _self_attribute(inner.target)
            if attr is not None:
                attributes.setdefault(attr, []).append(inner.value)
        if isinstance(inner, ast.Call):
            func = inner.func
            last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            qualified = qualify(func) or ""
            if last in _MOVERS - {"_apply"} and isinstance(func, ast.Attribute):
                places = True
                moved_attr = _self_attribute(func.value)
                if moved_attr is not None:
                    moved_attributes.add(moved_attr)
            if any(k.arg in ("device", "device_map") for k in inner.keywords):
                places = True
            if last in _REGISTERS or qualified in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
                makes = True
            elif qualified.startswith("torch.nn.") and qualified.count(".") == 2:
                makes = makes or _parameterised(last)
            elif last[:1].isupper() and qualified and not qualified.startswith("torch."):
                builds.add(qualified)
            if last in _PARAMETER_MAKERS and qualified.startswith("torch.nn"):
                makes = True
            factories = factories or (last in FACTORIES and qualified.startswith("torch."))
            host_only = host_only or (last in _HOST_ONLY_NAMES and qualified in HOST_ONLY_ARGUMENTS)
    methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
    moved, others = _movers(methods, qualify, submodules)
    placed = _placed_submodules(methods.get("__init__"), qualify) if places else ()
    # (what other files can ask for, only where the class has the calls that make it: the
    # public methods other than `forward` that build or move tensors, host tables updated in
    # place, a model `__init__` moved)
    called = [name for name in methods if not name.startswith("_") and name != "forward"]
    kept = _host_attributes(attributes, moved_attributes, methods, qualify) if factories else {}
    returned = ((name, _returns(methods[name], qualify, 0, kept)) for name in called) if factories or places else ()
    method_places = tuple((name, place) for name, place in returned if place in ("cpu-tensor", "device-tensor"))
    # a method that hands back a wrapper it makes (`DDPStrategy.setup_model` returning `DDP(model,
    # ...)`): its callers hold the wrapper (asked only of methods that name one)
    wrapping = (name for name in called if _names_wrapper(methods[name], qualify))
    method_places += tuple(
        (name, place) for name in wrapping if (place := _returns(methods[name], qualify)).startswith("wrapper:")
    )
    found = _host_updates(node, methods, qualify) if factories and updates_self else ()
    updates = tuple((m, ps, p, a, f, line + first_line) for m, ps, p, a, f, line in found)
    moving = _unmoved_inputs(methods) if places else ()
    inputs = tuple((m, ps, p, a, f, line + first_line) for m, ps, p, a, f, line in moving)
    # (what a constructor does through the attributes that keep its arguments matters for plain
    # classes and wrappers handed a model: a `torch.nn` layer's subclass is built, not handed one)
    layer = any(b.startswith("torch.nn.") for b in bases)
    metrics_imported = not layer and any(q.startswith("torchmetrics") for q in qualify.imports.values())
    params, positional, reads, unmoved = _constructor_reads(methods) if not layer else ((), 0, (), ())
    return ClassSummary(
        bases,
        tuple(sorted(builds)),
        makes,
        places,
        moved,
        others,
        placed,
        method_places,
        updates,
        inputs,
        params,
        positional,
        tuple((p, a, line + first_line) for p, a, line in reads),
        tuple((m, p, line + first_line) for m, p, line in (_state_loads(methods, params) if not layer else ())),
        tuple((p, line + first_line) for p, line in unmoved),
        tuple(
            (m, ps, p, a, f, line + first_line)
            for m, ps, p, a, f, line in (_metric_feeds(methods, qualify) if metrics_imported else ())
        ),
        _method_step_effects(methods, qualify) if not layer else (),
        tuple(
            (m, ps, p, k, f, line + first_line)
            for m, ps, p, k, f, line in (_host_only_parameters(methods, qualify) if host_only else ())
        ),
        _moved_parameters(methods.get("__init__")) if places and not layer else (),
        _method_uses(methods, qualify, first_line) if not layer else (),
        tuple(methods),
        tuple(
            (m, ps, p, a, f, line + first_line)
            for m, ps, p, a, f, line in (_open_updates(node, methods, qualify) if updates_self and not layer else ())
        ),
        _tables(node, qualify, first_line) if not layer else (),
        _constructors(node, methods, qualify),
    )


def _constructors(
    node: ast.ClassDef, methods: dict[str, ast.FunctionDef], qualify: _Qualifier
) -> tuple[tuple[str, str], ...]:
    """See `ClassSummary.constructors`: `cls` of a class method names the class itself."""
    found = []
    qualified = f"{qualify.module}.{node.name}" if qualify.module else node.name
    for name, method in methods.items():
        if name.startswith("_") or not method.decorator_list:
            continue
        marks = {qualify(mark) for mark in method.decorator_list}
        own = qualify
        if "classmethod" in marks and method.args.args:
            first = method.args.args[0].arg
            own = _Qualifier({**qualify.imports, first: qualified}, qualify.module, qualify.own)
        elif "staticmethod" not in marks:
            continue
        place = _returns(method, own)
        if place.startswith(("call:", "callt:", "callk:", "callp:")):
            found.append((name, place))
    return tuple(found)


def _tables(node: ast.ClassDef, qualify: _Qualifier, first_line: int) -> tuple[tuple[str, str, int], ...]:
    """See `ClassSummary.attribute_tables`."""
    host, touched = _attribute_tables(node, qualify)
    return tuple((a, host[a][0], host[a][1] + first_line) if a in host else (a, "", 0) for a in sorted(touched))


def _method_uses(
    methods: dict[str, ast.FunctionDef], qualify: _Qualifier, first_line: int
) -> tuple[tuple[str, ParameterUses], ...]:
    """See `ClassSummary.method_uses`: the instance methods (not dunders but `__call__`, which
    an instance called directly runs; not static or class methods, properties), each read as a
    function whose first parameter is the instance."""
    found = []
    for name, method in methods.items():
        if (name.startswith("__") and name != "__call__") or method.decorator_list:
            continue
        args = method.args
        positional = [*args.posonlyargs, *args.args]
        taken = len(positional) + len(args.kwonlyargs) + (args.kwarg is not None)
        if not positional or positional[0].arg != "self" or taken < 2:
            continue
        nodes = _own_nodes(method) if name != "__call__" else _unconfigured_nodes(method)
        uses = _without(parameter_uses(method, nodes, first_line, False, qualify.known), "self")
        if uses or uses.forwards:
            found.append((name, uses))
    return tuple(found)


def _unconfigured_nodes(method: ast.FunctionDef) -> list[ast.AST]:
    """`_own_nodes` of `__call__` without those under an `if` on the instance's own settings
    (`if self.autobalance: ... obji.item()`): a caller of the instance cannot tell whether they run
    for it, its constructor's arguments decide (YOLOv5's `ComputeLoss(model)`)."""
    nodes = _own_nodes(method)
    receiver = method.args.args[0].arg
    skipped: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.If) and id(node) not in skipped:
            if any(isinstance(n, ast.Name) and n.id == receiver for n in ast.walk(node.test)):
                skipped.update(id(child) for child in ast.walk(node))
    return [node for node in nodes if id(node) not in skipped]


def _without(uses: ParameterUses, param: str) -> ParameterUses:
    """`uses` of a method with its instance parameter left out: the call binds its arguments
    from the second parameter on, and what it does to `self` is no argument's."""
    if not uses.params or uses.params[0] != param:
        return uses
    return replace(
        uses,
        params=uses.params[1:],
        positional=max(uses.positional - 1, 0),
        reads=tuple(e for e in uses.reads if e[0] != param),
        to_numpy=tuple(e for e in uses.to_numpy if e[0] != param),
        returns_moved=None if uses.returns_moved == param else uses.returns_moved,
        unmoved_batches=tuple(e for e in uses.unmoved_batches if param not in e[:2]),
        host_inputs=tuple(e for e in uses.host_inputs if e[0] != param),
        mixes=tuple(e for e in uses.mixes if e[0] != param),
        loads_state=tuple(p for p in uses.loads_state if p != param),
        host_indexed=tuple(e for e in uses.host_indexed if e[0] != param),
        runs_unmoved=tuple(e for e in uses.runs_unmoved if e[0] != param),
        host_syncs=tuple(e for e in uses.host_syncs if e[0] != param),
        loose_syncs=tuple(p for p in uses.loose_syncs if p != param),
        step_effects=tuple(e for e in uses.step_effects if e[1] != param),
        collectives=tuple(e for e in uses.collectives if e[0] != param),
        forwards=tuple(e for e in uses.forwards if e[0] != param),
        unscales=tuple(e for e in uses.unscales if param not in e),
        state_saves=tuple(e for e in uses.state_saves if param not in (e[0], e[2])),
        unmapped_loads=tuple(e for e in uses.unmapped_loads if e[0] != param),
    )


def _moved_parameters(init: ast.FunctionDef | None) -> tuple[str, ...]:
    """See `ClassSummary.moved_params`."""
    if init is None or not init.args.args:
        return ()
    receiver = init.args.args[0].arg
    params = {a.arg for a in (*init.args.posonlyargs, *init.args.args[1:], *init.args.kwonlyargs)}
    nodes = _descendants(init, _NESTED_SCOPES)
    # `self.model = model`, then `self.model = self.model.cuda(device)`: the attribute keeps the
    # parameter, so moving it moves the caller's model (the attribute bound to one parameter only)
    kept: dict[str, set[str]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in params:
            for target in node.targets:
                held = _receiver_attribute(target, receiver)
                if held is not None:
                    kept.setdefault(held, set()).add(node.value.id)
    moved = set()
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and moves_to_device(node)):
            continue
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id in params:
            moved.add(owner.id)
        held = _receiver_attribute(owner, receiver)
        if held is not None and len(kept.get(held, ())) == 1:
            moved.update(kept[held])
    return tuple(sorted(moved))


_STEP_CLIPPERS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"})


def _method_step_effects(
    methods: dict[str, ast.FunctionDef], qualify: _Qualifier
) -> tuple[tuple[str, str, str, bool, str], ...]:
    """See `ClassSummary.step_effects`."""
    stepping = {"backward", "step", "update", "unscale_", *_STEP_CLIPPERS}
    if not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in stepping
        for method in methods.values()
        for n in _own_nodes(method)
    ):
        return ()  # most classes (every layer of a model zoo) make no step call at all
    scalers: set[str] = set()
    optimizers: set[str] = set()
    for method in methods.values():
        for node in _own_nodes(method):
            if not isinstance(node, ast.Assign):
                continue
            built = (qualify(node.value.func) or "") if isinstance(node.value, ast.Call) else ""
            for target in node.targets:
                held = _self_attribute(target)
                if held is None:
                    continue
                if built.endswith("GradScaler") or "scaler" in held.lower():
                    scalers.add(held)
                elif (built.startswith("torch.optim.") and "lr_scheduler" not in built) or held.lower().startswith(
                    ("opt", "optim")
                ):
                    optimizers.add(held)

    def statements(body: list[ast.stmt], conditional: bool, seen: tuple[str, ...]) -> list[tuple[str, str, bool, str]]:
        out: list[tuple[str, str, bool, str]] = []
        for statement in body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(statement, (ast.If, ast.For, ast.While, ast.Try, ast.With)):
                inner = conditional or not isinstance(statement, ast.With)
                if isinstance(statement, ast.If):
                    out += calls([statement.test], conditional, seen)
                for block in ("body", "orelse", "finalbody"):
                    out += statements(getattr(statement, block, []), inner, seen)
                for handler in getattr(statement, "handlers", []):
                    out += statements(handler.body, True, seen)
                continue
            out += calls([statement], conditional, seen)
        return out

    def calls(nodes: list[ast.AST], conditional: bool, seen: tuple[str, ...]) -> list[tuple[str, str, bool, str]]:
        found = sorted(
            (n for node in nodes for n in ast.walk(node) if isinstance(n, ast.Call)),
            key=lambda c: (c.lineno, c.col_offset),
        )
        out: list[tuple[str, str, bool, str]] = []
        for call in found:
            func = call.func
            if not isinstance(func, ast.Attribute):
                continue
            owner, attr = func.value, func.attr
            if attr == "backward" and not call.args:
                scaled = (
                    isinstance(owner, ast.Call) and isinstance(owner.func, ast.Attribute) and owner.func.attr == "scale"
                )
                scale = owner.func if isinstance(owner, ast.Call) else None
                scaler = _self_attribute(scale.value) if scaled and isinstance(scale, ast.Attribute) else None
                out.append(("scaled_backward" if scaled else "backward", scaler or "", conditional, ""))
            elif attr in _STEP_CLIPPERS:
                out.append(("clip", "", conditional, ""))
            elif (held := _self_attribute(owner)) is not None and attr in ("unscale_", "step", "update"):
                # a scaler's calls on what the class builds as one (or names so); a plain step on
                # an optimizer (not a scheduler's, a profiler's or an EMA's)
                if held in scalers and (attr != "step" or call.args):
                    kind = {"unscale_": "unscale", "update": "update"}.get(attr, "scaler_step")
                    unscaled = _self_attribute(call.args[0]) if kind == "unscale" and call.args else None
                    out.append((kind, held, conditional, unscaled or ""))
                elif attr == "step" and not call.args and held in optimizers:
                    out.append(("optimizer_step", held, conditional, ""))
            elif isinstance(owner, ast.Name) and owner.id == "self" and attr in methods and attr not in seen:
                if len(seen) < 3:
                    out += statements(methods[attr].body, conditional, (*seen, attr))
        return out

    return tuple(
        (name, kind, scaler, conditional, optimizer)
        for name, method in methods.items()
        if name != "__init__"
        for kind, scaler, conditional, optimizer in statements(method.body, False, (name,))
    )


_REBINDING = (ast.AugAssign, ast.AnnAssign, ast.For)
_HOST_ONLY_NAMES = frozenset(q.rsplit(".", 1)[-1] for q in HOST_ONLY_ARGUMENTS)


def _host_only_parameters(methods: dict[str, ast.FunctionDef], qualify: _Qualifier) -> tuple[HostUpdate, ...]:
    """See `ClassSummary.host_only`: the parameter itself, or a cast or reshape of it
    (`lengths.long()`), never rebound in the method."""
    found: list[HostUpdate] = []
    for name, params, nodes in _methods_after_init(methods):
        rebound: set[str] = set()
        for n in nodes:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, _REBINDING) else []
            rebound.update(t.id for target in targets for t in _descendants(target) if isinstance(t, ast.Name))
        for call in (n for n in nodes if isinstance(n, ast.Call)):
            qualified = qualify(call.func) or ""
            if qualified not in HOST_ONLY_ARGUMENTS or any(isinstance(a, ast.Starred) for a in call.args):
                continue
            position, keyword = HOST_ONLY_ARGUMENTS[qualified]
            given = next((k.value for k in call.keywords if k.arg == keyword), None)
            if given is None and position < len(call.args):
                given = call.args[position]
            while (
                isinstance(given, ast.Call)
                and isinstance(given.func, ast.Attribute)
                and given.func.attr in PRESERVING_METHODS
            ):
                given = given.func.value
            if isinstance(given, ast.Name) and given.id in params and given.id not in rebound:
                found.append((name, params, given.id, keyword, qualified.rsplit(".", 1)[-1], call.lineno))
    return tuple(found)


def _metric_feeds(methods: dict[str, ast.FunctionDef], qualify: _Qualifier) -> tuple[HostUpdate, ...]:
    """See `ClassSummary.metric_feeds`."""
    init = methods.get("__init__")
    if init is None or any(name in methods for name in ("to", "cuda", "_apply")):
        return ()
    metrics: dict[str, str] = {}  # attribute -> the torchmetrics class built there
    for node in _own_nodes(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
            attr = _self_attribute(node.targets[0])
            qualified = qualify(node.value.func) or ""
            last = qualified.rsplit(".", 1)[-1]
            if attr is not None and qualified.startswith("torchmetrics.") and last[:1].isupper():
                if not any(k.arg == "device" for k in node.value.keywords):
                    metrics[attr] = qualified
    if not metrics:
        return ()
    for method in methods.values():
        for node in _own_nodes(method):
            if isinstance(node, ast.Attribute) and node.attr in ("to", "cuda"):
                metrics.pop(_self_attribute(node.value) or "", None)  # moved somewhere
    found: list[HostUpdate] = []
    for name, params, nodes in _methods_after_init(methods) if metrics else ():
        carries = carried_parameters(nodes, params)
        for call in nodes:
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            target = func.value if isinstance(func, ast.Attribute) and func.attr in ("update", "forward") else func
            attr = _self_attribute(target)
            if attr not in metrics:
                continue
            for value in (*call.args, *(k.value for k in call.keywords)):
                for param in sorted({p for n in names_kept_on_device(value) for p in carries.get(n, ())}):
                    found.append((name, params, param, attr, metrics[attr], call.lineno))
    return tuple(dict.fromkeys(found))


def _state_loads(methods: dict[str, ast.FunctionDef], params: tuple[str, ...]) -> tuple[tuple[str, str, int], ...]:
    """See `ClassSummary.state_loads`."""
    init = methods.get("__init__")
    if init is None or not any(
        "optim" in (n.attr if isinstance(n, ast.Attribute) else n.id)
        for n in _own_nodes(init)
        if isinstance(n, (ast.Attribute, ast.Name))
    ):
        return ()
    held: dict[str, str] = {}  # attribute -> parameter (`self.model = model`)
    over: dict[str, str] = {}  # optimizer attribute -> the parameter whose parameters it steps
    for node in _own_nodes(init):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        attr = _self_attribute(node.targets[0])
        if attr is None:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in params:
            held[attr] = node.value.id
        elif isinstance(node.value, ast.Call) and "optim" in (dotted(node.value.func) or ""):
            for inner in ast.walk(node.value):
                if isinstance(inner, ast.Attribute) and inner.attr == "parameters":
                    owner = inner.value
                    name = owner.id if isinstance(owner, ast.Name) else held.get(_self_attribute(owner) or "")
                    if name in params:
                        over[attr] = name
    found = []
    for method_name, method in methods.items():
        for node in _own_nodes(method):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load_state_dict"
                and _self_attribute(node.func.value) in over
            ):
                found.append((method_name, over[_self_attribute(node.func.value) or ""], node.lineno))
    return tuple(found)


def _constructor_reads(
    methods: dict[str, ast.FunctionDef],
) -> tuple[tuple[str, ...], int, tuple[tuple[str, str, int], ...], tuple[tuple[str, int], ...]]:
    """See `ClassSummary.constructor_reads` (and `runs_unmoved`)."""
    init = methods.get("__init__")
    if init is None:
        return (), 0, (), ()
    args = init.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)][1:]
    params = (*positional, *(a.arg for a in args.kwonlyargs))
    held: dict[str, str] = {}  # attribute -> the parameter it holds, as `__init__` stores it
    keeping: set[int] = set()  # those assignments
    for node in _own_nodes(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Name):
            attr = _self_attribute(node.targets[0])
            if attr is not None and node.value.id in params:
                held[attr] = node.value.id
                keeping.add(id(node))
    if not held:
        return params, len(positional), (), ()
    first: dict[tuple[str, str], int] = {}
    written: set[tuple[str, str]] = set()
    for method in methods.values():
        for node in _own_nodes(method):
            if not isinstance(node, ast.Attribute) or node.attr.startswith("_"):
                continue
            holder = _self_attribute(node.value)
            if holder not in held:
                continue
            key = (held[holder], node.attr)
            if isinstance(node.ctx, ast.Load):
                first[key] = min(first.get(key, node.lineno), node.lineno)
            else:
                written.add(key)
    reads = tuple(sorted((p, a, line) for (p, a), line in first.items() if (p, a) not in written))
    nodes = [n for m in methods.values() for n in _own_nodes(m) if id(n) not in keeping]

    def model_of(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return node.id if node.id in params and not node.id.startswith("self") else None
        return held.get(_self_attribute(node) or "")

    return params, len(positional), reads, runs_unmoved(sorted(set(held.values())), nodes, model_of)


def _host_updates(
    node: ast.ClassDef, methods: dict[str, ast.FunctionDef], qualify: _Qualifier
) -> tuple[tuple[str, tuple[str, ...], str, str, str, int], ...]:
    """See `ClassSummary.host_updates`."""
    host, _ = _attribute_tables(node, qualify)
    if not host:
        return ()
    return tuple(
        dict.fromkeys(
            (m, ps, p, attr, *host[attr]) for m, ps, p, attr, _ in _in_place_updates(methods, host.__contains__)
        )
    )


def _open_updates(
    node: ast.ClassDef, methods: dict[str, ast.FunctionDef], qualify: _Qualifier
) -> tuple[tuple[str, tuple[str, ...], str, str, str, int], ...]:
    """See `ClassSummary.open_updates`."""
    _, touched = _attribute_tables(node, qualify)
    return tuple(
        dict.fromkeys(
            (m, ps, p, attr, "", line)
            for m, ps, p, attr, line in _in_place_updates(methods, lambda a: a not in touched)
        )
    )


def _in_place_updates(
    methods: dict[str, ast.FunctionDef], wanted: Callable[[str], bool]
) -> Iterator[tuple[str, tuple[str, ...], str, str, int]]:
    """(method, its parameters, parameter, attribute, line) for each parameter a method (not
    `__init__`) adds in place into `self.<attribute>` (`self.correct += (preds == target).sum()`,
    or as an index: `self.seen[gold] += 1`), for the attributes `wanted`."""
    for name, params, nodes in _methods_after_init(methods):
        # a local computed from parameters carries them (`mask = target == c`)
        carries: dict[str, set[str]] | None = None
        for update in nodes:
            if not isinstance(update, ast.AugAssign):
                continue
            target = update.target.value if isinstance(update.target, ast.Subscript) else update.target
            attr = _self_attribute(target)
            if attr is None or not wanted(attr):
                continue
            if carries is None:
                carries = carried_parameters(nodes, params)
            read = [update.value, update.target.slice] if isinstance(update.target, ast.Subscript) else [update.value]
            names = set().union(*(names_kept_on_device(part) for part in read))
            fed = set().union(*(carries.get(name, set()) for name in names))
            for param in sorted(fed):
                yield name, params, param, attr, update.lineno


def _attribute_tables(node: ast.ClassDef, qualify: _Qualifier) -> tuple[dict[str, tuple[str, int]], set[str]]:
    """The `self` attributes the class binds only to host torch factories and never moves
    (attribute -> the first factory and its line), and every attribute it binds or moves."""
    # attribute -> (factory, line) of each host factory assigning it (None: something else)
    built: dict[str, list[tuple[str, int] | None]] = {}
    moved: set[str] = set()
    for inner in _descendants(node):
        if isinstance(inner, ast.Assign):
            for target in inner.targets:
                attr = _self_attribute(target)
                if attr is not None:
                    factory = _host_factory_call(inner.value, qualify)
                    built.setdefault(attr, []).append((factory, inner.lineno) if factory else None)
        elif isinstance(inner, ast.Attribute) and inner.attr in ("to", "cuda"):
            attr = _self_attribute(inner.value)
            if attr is not None:
                moved.add(attr)
    host = {a: made[0] for a, made in built.items() if a not in moved and made[0] is not None and None not in made}
    return host, set(built) | moved


def _methods_after_init(methods: dict[str, ast.FunctionDef]) -> Iterator[tuple[str, tuple[str, ...], list[ast.AST]]]:
    """(name, positional parameters after `self`, own nodes) of each method but `__init__`: the
    methods an instance's caller feeds what the class keeps."""
    for name, method in methods.items():
        if name != "__init__":
            yield name, tuple(a.arg for a in (*method.args.posonlyargs, *method.args.args))[1:], _own_nodes(method)


def _unmoved_inputs(methods: dict[str, ast.FunctionDef]) -> tuple[HostUpdate, ...]:
    """See `ClassSummary.unmoved_inputs` (the factory field is left empty)."""
    init = methods.get("__init__")
    if init is None:
        return ()
    placed = set()
    for node in _own_nodes(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            attr = _self_attribute(node.targets[0])
            value = node.value
            if attr is not None and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                if value.func.attr in ("to", "cuda"):
                    placed.add(attr)  # `self.model = model.to(device)`
    found: list[HostUpdate] = []
    for name, params, nodes in _methods_after_init(methods) if placed else ():
        if any(isinstance(n, ast.Attribute) and n.attr in ("to", "cuda", "device") for n in nodes):
            continue  # it moves (or looks up a device for) something itself
        carries = carried_parameters(nodes, params)
        for call in nodes:
            if not isinstance(call, ast.Call):
                continue
            attr = _self_attribute(call.func)
            if attr not in placed:
                continue
            for value in (*call.args, *(k.value for k in call.keywords)):
                root = root_name(value) if not isinstance(value, ast.Starred) else None
                for param in sorted(carries.get(root, set()) if root is not None else set()):
                    found.append((name, params, param, attr, "", call.lineno))
    return tuple(dict.fromkeys(found))


def _host_tensor(value: ast.expr, qualify: _Qualifier) -> str:
    """The torch factory that builds `value` on the host, through tensor methods that keep it
    there (`torch.tensor([...]).view(3, 1, 1)`); "" for anything else or a 0-dim number."""
    while (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in PRESERVING_METHODS
    ):
        value = value.func.value
    factory = _host_factory_call(value, qualify)
    first = value.args[0] if isinstance(value, ast.Call) and value.args else None
    if factory in ("torch.tensor", "torch.as_tensor") and isinstance(first, ast.Constant):
        return ""  # `torch.tensor(0.5)`: a 0-dim number mixes with device tensors as a scalar
    return factory


def _host_factory_call(value: ast.expr, qualify: _Qualifier) -> str:
    """`torch.zeros` for `torch.zeros(n)` (a torch factory without `device=`), else ""."""
    if not isinstance(value, ast.Call) or any(k.arg == "device" for k in value.keywords):
        return ""
    qualified = qualify(value.func) or ""
    last = qualified.rsplit(".", 1)[-1]
    return f"torch.{last}" if qualified.startswith("torch.") and last in FACTORIES else ""


def _placed_submodules(init: ast.FunctionDef | None, qualify: _Qualifier) -> tuple[tuple[str, str, bool], ...]:
    """The submodules `__init__` builds and places (`self.x = Block().to(dev)`, `self.x.cuda(1)`),
    unless it then moves the whole module (`self.to(dev)` puts everything on one device)."""
    if init is None:
        return ()
    strings = _string_names(init)
    built: set[str] = set()
    placed: dict[str, tuple[str, bool]] = {}
    statements = [n for n in _own_nodes(init) if isinstance(n, (ast.Assign, ast.Expr))]
    for node in sorted(statements, key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            attr = _self_attribute(node.targets[0])
            if attr is None:
                continue
            value, device = _moved_chain(node.value, strings)
            if isinstance(value, ast.Call) and _builds_module(value, qualify):
                built.add(attr)
                if device is not None:
                    placed[attr] = device
            elif _self_attribute(value) == attr and device is not None and attr in built:
                placed[attr] = device  # `self.x = self.x.to(dev)`
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            value, device = _moved_chain(node.value, strings)
            if device is None:
                continue
            if isinstance(value, ast.Name) and value.id == "self":
                return ()
            attr = _self_attribute(value)
            if attr in built:
                placed[attr] = device  # `self.x.to(dev)`, in place for a module
    return tuple((attr, text, stated) for attr, (text, stated) in placed.items())


def _receiver_attribute(node: ast.expr, receiver: str) -> str | None:
    """`attr` of `self.attr`, whatever the method's first parameter is called."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == receiver:
        return node.attr
    return None


def _self_attribute(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _builds_module(call: ast.Call, qualify: _Qualifier) -> bool:
    """A call that builds a module: a class (`nn.Linear`, `Block`), or a function of the project
    (`conv_block(...)`), not a torch tensor factory."""
    qualified = qualify(call.func) or ""
    last = qualified.rsplit(".", 1)[-1]
    return bool(last) and (last[:1].isupper() or not qualified.startswith("torch."))


def _string_names(function: ast.FunctionDef) -> dict[str, str]:
    """Names bound once, in `function`, to a string: its own assignments and parameter defaults."""
    found: dict[str, list[str | None]] = {}
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    for argument, default in zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults):
        found.setdefault(argument.arg, []).append(_string(default))
    for argument, kw_default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        if kw_default is not None:
            found.setdefault(argument.arg, []).append(_string(kw_default))
    for node in _own_nodes(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(_string(node.value))
    return {name: values[0] for name, values in found.items() if len(values) == 1 and values[0] is not None}


def _string(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _moved_chain(node: ast.expr, strings: dict[str, str]) -> tuple[ast.expr, tuple[str, bool] | None]:
    """What a chain of `.to(...)`/`.cuda(...)` calls starts from, and the device of its last
    move: (`cuda:1`, True) for a stated device, (`self.dev1`, False) for a named one."""
    device: tuple[str, bool] | None = None
    while (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda", "cpu")
    ):
        method = node.func.attr
        found = _device_argument(node, method, strings)
        if device is None:
            device = found
        node = node.func.value
    return node, device


def _device_argument(call: ast.Call, method: str, strings: dict[str, str]) -> tuple[str, bool] | None:
    if method == "cpu":
        return "cpu", True
    argument = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
    if argument is None:
        return ("cuda", True) if method == "cuda" and not call.keywords else None
    if isinstance(argument, ast.Constant) and type(argument.value) is int:
        return f"cuda:{argument.value}", True
    if (
        isinstance(argument, ast.Call)
        and isinstance(argument.func, ast.Attribute)
        and argument.func.attr == "device"
        and argument.args
    ):
        kind = _string(argument.args[0])
        index = argument.args[1] if len(argument.args) > 1 else None
        if kind is not None and index is None:
            argument = argument.args[0]
        elif kind is not None and isinstance(index, ast.Constant) and type(index.value) is int:
            return f"{kind}:{index.value}", True
    text = _string(argument)
    if text is None and isinstance(argument, ast.Name):
        text = strings.get(argument.id)
    if text is not None:
        return (text, True) if _DEVICE_TEXT.match(text) else None
    if isinstance(argument, (ast.Name, ast.Attribute)):
        named = ast.unparse(argument)
        return (named, False) if _DEVICE_NAME.search(named.rsplit(".", 1)[-1]) else None  # not a dtype
    return None


# a class field annotated `torch.device` (a settings dataclass an instance of which may be built at import)
_DEVICE_FIELD = re.compile(r"^[ \t]+\w+\s*:\s*(?:torch\.)?device\s*=", re.M)
_IMPORT_TIME_TENSOR = re.compile(r"^[A-Za-z_]\w*\s*(?::[^=\n]+)?=\s*(?:torch|th)\.\w", re.M)
_DEVICE_TEXT = re.compile(r"^(cuda|cpu|xpu|mps|npu|hpu)(:\d+)?$")
_DEVICE_NAME = re.compile(r"dev|gpu|cuda|rank", re.I)


def _returns_module_list(function: ast.FunctionDef, returns: list[ast.expr], qualify: _Qualifier) -> bool:
    """Every `return` hands back a plain list of `torch.nn` layers, some with parameters: a list
    literal or comprehension of them, or a local list built empty and only appended them."""
    nodes = _own_nodes(function)

    def layer(value: ast.expr) -> str:
        qualified = (qualify(value.func) or "") if isinstance(value, ast.Call) else ""
        name = qualified.rsplit(".", 1)[-1]
        return name if qualified.startswith("torch.nn.") and name[:1].isupper() else ""

    def holds_parameters(value: ast.expr) -> bool:
        name = layer(value)
        if name in ("Sequential", "ModuleList", "ModuleDict") and isinstance(value, ast.Call):
            return any(holds_parameters(a) for a in value.args)  # what the container holds
        return _parameterised(name)

    def layers(values: list[ast.expr]) -> bool:
        return all(layer(v) for v in values) and any(holds_parameters(v) for v in values)

    for value in returns:
        if isinstance(value, ast.List) and value.elts and layers(value.elts):
            continue
        if isinstance(value, ast.ListComp) and layers([value.elt]):
            continue
        if not isinstance(value, ast.Name):
            return False
        bound = [n for n in nodes if isinstance(n, ast.Assign) and any(_binds_local(t, value.id) for t in n.targets)]
        if len(bound) != 1 or not (isinstance(bound[0].value, ast.List) and not bound[0].value.elts):
            return False
        added = [
            n.args[0]
            for n in nodes
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == value.id
            and n.func.attr == "append"
            and len(n.args) == 1
        ]
        used = [n for n in nodes if isinstance(n, ast.Name) and n.id == value.id]
        # every other use of the list is one of those appends or the return itself
        if not added or len(used) != len(added) + 2 or not layers(added):
            return False
    return True


def _stateful_dict(value: ast.expr, qualify: _Qualifier) -> bool:
    """A dict literal of string keys whose every value builds a `torch.nn` layer or a
    torchmetrics metric (`{"iou": torchmetrics.JaccardIndex(...), "acc": Accuracy(...)}`), one
    at least with state `.to()` must move: a plain dict that registers none of them."""
    if not isinstance(value, ast.Dict) or not value.values:
        return False
    if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
        return False
    stateful = False
    for element in value.values:
        qualified = (qualify(element.func) or "") if isinstance(element, ast.Call) else ""
        name = qualified.rsplit(".", 1)[-1]
        if not name[:1].isupper() or not qualified.startswith(("torch.nn.", "torchmetrics.")):
            return False
        stateful = stateful or qualified.startswith("torchmetrics.") or _parameterised(name)
    return stateful


def _parameter_names(function: ast.FunctionDef) -> set[str]:
    args = function.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a is not None}


def _returned_options(
    function: ast.FunctionDef, returns: list[ast.expr], assignments: dict[str, list[ast.expr]]
) -> str:
    """ "options:<flag>:<dest>" when every `return` hands back what `parser.parse_args()` parses
    (or a name bound once to it) and the function adds an integer GPU-index option (`--gpu`,
    `type=int`) and selects no device itself (`torch.cuda.set_device`); "" otherwise."""
    params = _parameter_names(function)
    for value in returns:
        if isinstance(value, ast.Name) and value.id not in params and len(assignments.get(value.id, ())) == 1:
            value = assignments[value.id][0]
        if not (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "parse_args"
        ):
            return ""
    found = ""
    for node in _own_nodes(function):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in SELECTS_DEVICE:
            return ""
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr in ("set_device", "set_device_index", "device"):
            return ""
        if node.func.attr != "add_argument" or found or not node.args:
            continue
        flag = node.args[0]
        if not (isinstance(flag, ast.Constant) and isinstance(flag.value, str) and GPU_INDEX_OPTION.match(flag.value)):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        typed, default = keywords.get("type"), keywords.get("default")
        integer = (isinstance(typed, ast.Name) and typed.id == "int") or (
            isinstance(default, ast.Constant) and type(default.value) is int
        )
        if not integer or "nargs" in keywords or "action" in keywords:
            continue
        dest = keywords.get("dest")
        name = dest.value if isinstance(dest, ast.Constant) else flag.value[2:].replace("-", "_")
        if isinstance(name, str):
            found = f"options:{flag.value}:{name}"
    return found


_WRAPPER_CLASSES = ("DataParallel", "DistributedDataParallel")


def _names_wrapper(function: ast.FunctionDef, qualify: _Qualifier) -> bool:
    """Whether `function` spells a wrapper class, by name or by an alias its module imports it
    as (`DDP`): a cheap test before `_returns` reads its returns."""
    names = {*_WRAPPER_CLASSES, *(a for a, q in qualify.imports.items() if q.rsplit(".", 1)[-1] in _WRAPPER_CLASSES)}
    return any(
        (isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names)
        for n in ast.walk(function)
    )


def _returned_wrapper(
    function: ast.FunctionDef, returns: list[ast.expr], assignments: dict[str, list[ast.expr]], qualify: _Qualifier
) -> str:
    """ "wrapper:<DataParallel or DistributedDataParallel>" when every `return` hands back a
    wrapper torch's call makes right there (`return nn.DataParallel(model, device_ids=ids)`,
    also `.cuda()`/`.to()` of one, or a name bound once to one); "" otherwise (a wrapper made
    only under a condition binds the name twice, or rebinds a parameter)."""
    params = _parameter_names(function)
    kinds = set()
    for value in returns:
        if isinstance(value, ast.Name) and value.id not in params and len(assignments.get(value.id, ())) == 1:
            value = assignments[value.id][0]
        while (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("cuda", "to")
        ):
            value = value.func.value
        if not isinstance(value, ast.Call):
            return ""
        qualified = qualify(value.func) or ""
        last = qualified.rsplit(".", 1)[-1]
        if not (qualified.startswith("torch.nn.") and last in _WRAPPER_CLASSES):
            return ""
        kinds.add(last)
    return f"wrapper:{kinds.pop()}" if len(kinds) == 1 else ""


def _returned_generator(
    function: ast.FunctionDef, returns: list[ast.expr], assignments: dict[str, list[ast.expr]], qualify: _Qualifier
) -> str:
    """ "generator:<device type>" where the one `return` hands back a `torch.Generator` (directly or
    through a local bound once), "generator:@<param>#<position>=<type>" where it is built on a
    parameter with a literal default (the caller may pass another; position -1: keyword-only);
    "" otherwise."""
    if len(returns) != 1:
        return ""
    value = returns[0]
    if isinstance(value, ast.Name) and len(assignments.get(value.id, [])) == 1:
        value = assignments[value.id][0]
    if not (isinstance(value, ast.Call) and qualify(value.func) == "torch.Generator"):
        return ""
    device = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "device"), None)
    if device is None:
        return "generator:cpu"
    if isinstance(device, ast.Constant) and isinstance(device.value, str):
        return f"generator:{device.value.split(':')[0]}"
    if isinstance(device, ast.Name):
        args = function.args
        named = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in named][len(named) - len(args.defaults) :], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        default = defaults.get(device.id)
        position = next((i for i, a in enumerate(named) if a.arg == device.id), -1)
        if isinstance(default, ast.Constant) and isinstance(default.value, str):
            return f"generator:@{device.id}#{position}={default.value.split(':')[0]}"
    return ""


# torch optimizers that create per-parameter state in their constructor
_EAGER_OPTIMIZERS = frozenset({"Adagrad"})


def _returned_optimizer(
    function: ast.FunctionDef, returns: list[ast.expr], assignments: dict[str, list[ast.expr]], qualify: _Qualifier
) -> str:
    """ "optimizer:<class>@<parameter>" where every `return` builds a `torch.optim` optimizer over
    one parameter's parameters (`torch.optim.SGD(model.parameters(), ...)`, or through a local list
    of them); with several classes by branch, the one that creates its state at construction."""
    kinds: list[str] = []
    owners: set[str] = set()
    for value in returns:
        qualified = (qualify(value.func) or "") if isinstance(value, ast.Call) else ""
        if not qualified.startswith("torch.optim.") or not isinstance(value, ast.Call) or not value.args:
            return ""
        params = value.args[0]
        if isinstance(params, ast.Name) and len(assignments.get(params.id, [])) == 1:
            params = assignments[params.id][0]
        if isinstance(params, ast.ListComp) and len(params.generators) == 1:
            params = params.generators[0].iter
        if not (
            isinstance(params, ast.Call)
            and isinstance(params.func, ast.Attribute)
            and params.func.attr in ("parameters", "named_parameters")
            and isinstance(params.func.value, ast.Name)
        ):
            return ""
        kinds.append(qualified)
        owners.add(params.func.value.id)
    names = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if len(owners) != 1 or next(iter(owners)) not in names:
        return ""
    chosen = next((k for k in kinds if k.rsplit(".", 1)[-1] in _EAGER_OPTIMIZERS), kinds[0])
    return f"optimizer:{chosen}@{next(iter(owners))}#{names.index(next(iter(owners)))}"


def _returned_loss(
    function: ast.FunctionDef,
    returns: list[ast.expr],
    assignments: dict[str, list[ast.expr]],
    qualify: _Qualifier,
    first_line: int,
) -> str:
    """ "loss:<class>:<keyword>:<line>" where every `return` hands back a `torch.nn` loss it builds
    unmoved (`nn.CrossEntropyLoss(...)`, or a name bound once to one) and one of them is given a
    class weight made on the host (`weight=torch.tensor(cfg.class_weights)`, at `line`): the loss
    keeps that weight as a buffer on the CPU until the caller moves it."""
    found = ""
    for value in returns:
        if isinstance(value, ast.Name) and len(assignments.get(value.id, [])) == 1:
            value = assignments[value.id][0]
        if not isinstance(value, ast.Call):
            return ""
        qualified = qualify(value.func) or ""
        if not (qualified.startswith("torch.nn.") and qualified.count(".") == 2 and qualified.endswith("Loss")):
            return ""
        for keyword in value.keywords:
            if keyword.arg is None:
                return ""
            if keyword.arg in ("weight", "pos_weight") and not found:
                if _place(keyword.value, assignments, qualify, 0) == "cpu-tensor":
                    found = f"loss:{qualified[9:]}:{keyword.arg}:{value.lineno + first_line}"
    return found if found and _returned_untouched(function, returns, assignments) else ""


def _dotted(node: ast.expr) -> str | None:
    """`torch.optim.Adam` for that attribute chain; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _binds_local(target: ast.expr, name: str) -> bool:
    return isinstance(target, ast.Name) and target.id == name


def _parameterised(layer: str) -> bool:
    return layer[:1].isupper() and layer not in _STATELESS_LAYERS and not layer.endswith(_STATELESS_LAYERS_SUFFIXES)


def _note_submodules(assign: ast.Assign, qualify: _Qualifier, found: dict[str, str]) -> None:
    """`self.head = Detect(...)`: head -> the qualified class."""
    assert isinstance(assign.value, ast.Call)
    built = qualify(assign.value.func)
    if built is None:
        return
    for target in assign.targets:
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            found[target.attr] = built


def _movers(
    methods: dict[str, ast.FunctionDef], qualify: _Qualifier, submodules: dict[str, str]
) -> tuple[tuple[str, ...] | None, tuple[tuple[str, str], ...]]:
    """What the class's `_apply`/`to`/`cuda` (and the methods they call on `self`) move: its
    own attributes (None: every one), and attributes of other objects: of an object that an
    `isinstance` test in the same method names the class of, or of a submodule the class
    builds (`self.head.anchors = fn(self.head.anchors)` where `self.head = Detect(...)`)."""
    own: set[str] = set()
    others: set[tuple[str, str]] = set()
    todo = [m for m in _MOVERS if m in methods]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        method = methods[name]
        checked: dict[str, list[str]] = {}
        assigned: list[tuple[str, str]] = []
        for node in _descendants(method):
            if isinstance(node, ast.Name) and node.id in _GENERIC_MOVES:
                return None, ()
            if isinstance(node, ast.Attribute):
                if node.attr in _GENERIC_MOVES:
                    return None, ()
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    own.add(node.attr)
                    if node.attr in methods:
                        todo.append(node.attr)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Name)
            ):
                kinds = node.args[1]
                spelled = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
                checked.setdefault(node.args[0].id, []).extend(q for q in map(qualify, spelled) if q is not None)
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if (
                            isinstance(part, ast.Attribute)
                            and isinstance(part.value, ast.Name)
                            and part.value.id != "self"
                        ):
                            assigned.append((part.value.id, part.attr))
                        elif (
                            isinstance(part, ast.Attribute)
                            and isinstance(part.value, ast.Attribute)
                            and isinstance(part.value.value, ast.Name)
                            and part.value.value.id == "self"
                            and part.value.attr in submodules
                        ):
                            others.add((submodules[part.value.attr], part.attr))
        for holder, attr in assigned:
            others.update((cls, attr) for cls in checked.get(holder, ()))
    return tuple(sorted(own)), tuple(sorted(others))


def _returns(
    function: ast.FunctionDef | None,
    qualify: _Qualifier,
    first_line: int = 0,
    attributes: dict[str, list[ast.expr]] | None = None,
) -> str:
    """Where every `return` of `function` puts its value, when all agree and it is certain
    (`attributes`: what its class binds `self.<attr>` to, keyed `self.<attr>`)."""
    if function is None:
        return ""
    assignments: dict[str, list[ast.expr]] = dict(attributes or {})
    returns: list[ast.expr] = []
    for node in _own_nodes(function):
        if isinstance(node, ast.With):
            for item in node.items:
                if isinstance(item.context_expr, ast.Call) and (qualify(item.context_expr.func) or "").startswith(
                    "torch."
                ):
                    return ""  # `with torch.device(...)`: factories inside may be placed
        if isinstance(node, ast.Return):
            if node.value is None:
                return ""
            returns.append(node.value)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assignments.setdefault(target.id, []).append(node.value)
                elif not isinstance(target, (ast.Attribute, ast.Subscript)):  # (a part set binds no name)
                    for inner in ast.walk(target):
                        if isinstance(inner, ast.Name):
                            assignments.setdefault(inner.id, []).append(target)  # unknowable: unpacked
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            value = node.value if node.value is not None else node.target
            assignments.setdefault(node.target.id, []).append(value)
        elif isinstance(node, (ast.For, ast.comprehension)):
            for inner in ast.walk(node.target):
                if isinstance(inner, ast.Name):
                    assignments.setdefault(inner.id, []).append(node.target)
    if not returns:
        return ""
    if _returns_module_list(function, returns, qualify):
        return "module-list"
    if all(_stateful_dict(value, qualify) for value in returns):
        return "module-dict"
    if all(_unpinned_loader(value, assignments, qualify) for value in returns):
        return "unpinned-loader"
    generator = _returned_generator(function, returns, assignments, qualify)
    if generator:
        return generator
    wrapper = _returned_wrapper(function, returns, assignments, qualify)
    if wrapper:
        return wrapper
    options = _returned_options(function, returns, assignments)
    if options:
        return options
    optimizer = _returned_optimizer(function, returns, assignments, qualify)
    if optimizer:
        return optimizer
    loss = _returned_loss(function, returns, assignments, qualify, first_line)
    if loss:
        return loss
    parts = _tuple_places(returns, assignments, qualify)
    if parts:
        return parts
    place = _agreed({_place(value, assignments, qualify, 0) for value in returns})
    if not place and attributes is None:
        place = _follows(function, returns, assignments)
    if place.startswith(("call:", "callk:")) and not _returned_untouched(function, returns, assignments):
        # `model = Net(); model.to(device); return model`: a module may have been moved (a
        # tensor's `.to()` returns a copy, so the place of a returned tensor stands); what a
        # call given `**kwargs` builds is then nothing known
        place = "callt:" + place[5:] if place.startswith("call:") else ""
    if place.startswith("call:") and "," not in place and not place.endswith("[]"):
        parts = _composed_of(function, returns, assignments, qualify)
        if parts is not None:
            place = f"callp:{place[5:]}|{';'.join(parts)}"
    return place


def _composed_of(
    function: ast.FunctionDef, returns: list[ast.expr], assignments: dict[str, list[ast.expr]], qualify: _Qualifier
) -> list[str] | None:
    """The modules a returned construction is handed, when it is handed some and each argument
    is built right here, unmoved (`backbone = build_backbone(cfg)`, `head = nn.Linear(c, n)`,
    then `return ImageClassifier(backbone, head)`): "torch.nn" for a `torch.nn` layer, the
    qualified callee for a project call (the index asks whether that builds on the CPU). None
    where an argument is a parameter, moved, or anything but a constant or such a call."""
    params = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    value = returns[0] if len(returns) == 1 else None
    if isinstance(value, ast.Name) and len(assignments.get(value.id, ())) == 1:
        value = assignments[value.id][0]
    if not isinstance(value, ast.Call) or not (value.args or value.keywords):
        return None
    parts: list[str] = []
    for arg in (*value.args, *(k.value for k in value.keywords)):
        if isinstance(arg, ast.Starred) or (isinstance(arg, ast.Name) and arg.id in params):
            return None
        if isinstance(arg, ast.Constant):
            continue
        built = arg
        if isinstance(arg, ast.Name):
            bound = assignments.get(arg.id, [])
            if len(bound) != 1:
                return None
            built = bound[0]
        if not isinstance(built, ast.Call) or not isinstance(built.func, (ast.Name, ast.Attribute)):
            return None
        if any(k.arg in ("device", "device_map") or k.arg is None for k in built.keywords):
            return None
        qualified = qualify(built.func) or ""
        last = qualified.rsplit(".", 1)[-1]
        if qualified.startswith("torch.nn.") and qualified.count(".") == 2 and _parameterised(last):
            parts.append("torch.nn")
        elif qualify.known(built.func) is not None and not qualified.startswith(("torch.", "numpy.", "np.")):
            parts.append(qualified)
        else:
            return None
    return parts or None


# tensor methods that keep the values where they are and return one tensor
_KEEPING_METHODS = PRESERVING_METHODS - {"type", "type_as", "max", "min", "sort", "topk", "split", "chunk", "unbind"}


def _follows(function: ast.FunctionDef, returns: list[ast.expr], assignments: dict[str, list[ast.expr]]) -> str:
    """ "follows:<parameter>#<position>" when every `return` is a tensor computed from that
    parameter by arithmetic, indexing and tensor methods that keep it where it is (`pred = x *
    alpha - v * sigma`, `return pred`): the result lives where the argument does, or the call
    fails (position -1: keyword-only); "" otherwise."""
    args = function.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    params = [*positional, *(a.arg for a in args.kwonlyargs)]
    followed: set[str] = set()
    for value in returns:
        found = _followed_parameters(value, assignments, frozenset(params), frozenset(), 0)
        if not found:
            return ""
        followed |= found
    first = next(p for p in params if p in followed)
    return f"follows:{first}#{positional.index(first) if first in positional else -1}"


def _followed_parameters(
    value: ast.expr, assignments: dict[str, list[ast.expr]], params: frozenset[str], seen: frozenset[str], depth: int
) -> set[str] | None:
    """The parameters whose device a tensor expression certainly has (empty: a number, which
    follows nothing); None when it is not known to be such a tensor."""
    if depth > 12:
        return None
    if isinstance(value, ast.Constant):
        return set() if isinstance(value.value, (int, float)) and not isinstance(value.value, bool) else None
    if isinstance(value, ast.Name):
        if value.id in seen:  # (a loop's rebinding of what it follows)
            return {value.id} if value.id in params else set()
        bound = assignments.get(value.id, [])
        found = {value.id} if value.id in params else set()
        if not bound and not found:
            return None
        for each in bound:
            more = _followed_parameters(each, assignments, params, seen | {value.id}, depth + 1)
            if more is None:
                return None
            found |= more
        return found
    if isinstance(value, ast.UnaryOp) and not isinstance(value.op, ast.Not):
        return _followed_parameters(value.operand, assignments, params, seen, depth + 1)
    if isinstance(value, ast.BinOp):
        sides = [_followed_parameters(v, assignments, params, seen, depth + 1) for v in (value.left, value.right)]
        known = [s for s in sides if s is not None]
        # a tensor that follows a parameter meets anything: the result is where that tensor is
        return set().union(*known) if any(known) or len(known) == 2 else None
    if isinstance(value, ast.Subscript):
        return _followed_parameters(value.value, assignments, params, seen, depth + 1)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _KEEPING_METHODS:
        return _followed_parameters(value.func.value, assignments, params, seen, depth + 1)
    return None


def _device_fields(tree: ast.Module, qualify: _Qualifier) -> dict[str, tuple[str, ...]]:
    """Top-level classes -> their annotated fields whose default is a `torch.device(...)`
    (`device: torch.device = field(default_factory=lambda: torch.device("cuda"))`)."""
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        names = []
        for statement in node.body:
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            value = statement.value
            if isinstance(value, ast.Call) and any(k.arg == "default_factory" for k in value.keywords):
                factory = next(k.value for k in value.keywords if k.arg == "default_factory")
                value = factory.body if isinstance(factory, ast.Lambda) else None
            if isinstance(value, ast.Call) and qualify(value.func) == "torch.device":
                names.append(statement.target.id)
        if names:
            found[node.name] = tuple(names)
    return found


def _unpinned_loader(value: ast.expr, assignments: dict[str, list[ast.expr]], qualify: _Qualifier) -> bool:
    """`DataLoader(...)` (or a name bound only to one) that does not pin memory: no `pin_memory`
    or a literal False, and no `*args`/`**kwargs` that might carry it."""
    if isinstance(value, ast.Name) and len(assignments.get(value.id, [])) == 1:
        value = assignments[value.id][0]
    if not isinstance(value, ast.Call) or qualify(value.func) != "torch.utils.data.DataLoader":
        return False
    if len(value.args) >= 8 or any(isinstance(a, ast.Starred) for a in value.args):
        return False
    for keyword in value.keywords:
        if keyword.arg is None:
            return False
        if keyword.arg == "pin_memory":
            return isinstance(keyword.value, ast.Constant) and keyword.value.value is False
    return True


def _tuple_places(returns: list[ast.expr], assignments: dict[str, list[ast.expr]], qualify: _Qualifier) -> str:
    """`tuple:<place>|<place>...` where every `return` is a tuple of one length and some position
    has a place all of them agree on (`return loss, to_host(parts)`); "" otherwise."""
    if not all(isinstance(value, ast.Tuple) for value in returns):
        return ""
    tuples = [value.elts for value in returns if isinstance(value, ast.Tuple)]
    if len({len(elts) for elts in tuples}) != 1 or any(isinstance(e, ast.Starred) for elts in tuples for e in elts):
        return ""
    positions = []
    for column in zip(*tuples):
        found = {_place(e, assignments, qualify, 0) for e in column}
        positions.append(found.pop() if len(found) == 1 else "")
    return "tuple:" + "|".join(positions) if any(positions) else ""


# What a builder may do with the module it returns without moving it.
_KEEPING_METHODS = frozenset(
    {"eval", "train", "load_state_dict", "parameters", "named_parameters", "state_dict", "requires_grad_"}
)


def _returned_untouched(
    function: ast.FunctionDef, returns: list[ast.expr], assigned: dict[str, list[ast.expr]]
) -> bool:
    """Whether every returned value is a call, or a name bound only to calls (one per branch)
    and otherwise only returned or used through `_KEEPING_METHODS` (never passed on, never
    `.to()`-ed)."""
    names = set()
    for value in returns:
        if isinstance(value, ast.Name):
            bound = assigned.get(value.id, [])
            if not bound or not all(_built_by_call(b) for b in bound):
                return False
            names.add(value.id)
        elif not _built_by_call(value):
            return False
    if not names:
        return True
    loads = dict.fromkeys(names, 0)
    kept = dict.fromkeys(names, 0)
    nodes = _own_nodes(function)
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    for node in nodes:
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
            loads[node.id] += 1
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            # a method called on it keeps it only when it cannot place it; reading or setting
            # an attribute (`model.fc = nn.Linear(model.fc.in_features, n)`) keeps it where it is
            kept[node.value.id] += node.attr in _KEEPING_METHODS if id(node) in called else 1
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id in names:
            kept[node.value.id] += 1
        elif isinstance(node, ast.Call) and _moves_part_of(node, names):
            return False  # `model.head.cuda()`
        elif isinstance(node, ast.Assign) and _placed_part(node, names):
            return False  # `model.fc = nn.Linear(...).to(device)`
    return all(loads[n] <= kept[n] for n in names)


def _built_by_call(value: ast.expr) -> bool:
    """A call, or a conditional between calls (`resnet50() if deep else resnet18()`)."""
    if isinstance(value, ast.IfExp):
        return _built_by_call(value.body) and _built_by_call(value.orelse)
    return isinstance(value, ast.Call)


def _moves_part_of(call: ast.Call, names: set[str]) -> bool:
    """`model.head.cuda()`, `model.fc.to(device)`: a move of a part of a returned module."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _PART_MOVES:
        return False
    root = func.value
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    return isinstance(root, ast.Name) and root.id in names and func.value is not root


def _placed_part(assign: ast.Assign, names: set[str]) -> bool:
    """`model.fc = nn.Linear(...).to(device)`: a part set from a value that something placed."""
    if not any(
        isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in names for t in assign.targets
    ):
        return False
    return any(
        isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Attribute) and n.func.attr in _PART_MOVES)
            or any(k.arg in ("device", None) for k in n.keywords)
        )
        for n in _descendants(assign.value)
    )


_PART_MOVES = frozenset({"to", "cuda", "xpu", "npu", "mps"})


def _own_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of `function`'s body, not those of functions or classes defined inside it."""
    return _descendants(function, _NESTED_SCOPES)[1:]


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _descendants(root: ast.AST, stop_at: tuple[type, ...] = ()) -> list[ast.AST]:
    """`root` and the nodes below it (not below a node of a `stop_at` type, other than the root),
    in no set order. `ast.walk` costs twice as much: nested generators, and it yields every
    `Load`/`Store` context node. The list is kept on the root and shared (callers only read it):
    a class's summaries walk the class and each of its methods several times, and the tree lives
    as long as its module's summary."""
    walks: dict[tuple[type, ...], list[ast.AST]] = root.__dict__.setdefault("_devicelint_walks", {})
    known = walks.get(stop_at)
    if known is not None:
        return known
    out: list[ast.AST] = []
    todo: list[ast.AST] = [root]
    while todo:
        node = todo.pop()
        out.append(node)
        if stop_at and node is not root and isinstance(node, stop_at):
            continue
        for field in node._fields:
            if field == "ctx":
                continue
            value = getattr(node, field, None)
            if type(value) is list:
                todo.extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                todo.append(value)
    walks[stop_at] = out
    return out


def _agreed(places: set[str]) -> str:
    """The one place of several values; calls of different project callables agree as their
    list (`call:models.ResNet,models.VGG`: a builder that picks the class by name)."""
    if len(places) == 1:
        return places.pop()
    if places and all(p.startswith("call:") and "," not in p for p in places):
        return "call:" + ",".join(sorted(p[5:] for p in places))
    return ""


def _place(value: ast.expr, assignments: dict[str, list[ast.expr]], qualify: _Qualifier, depth: int) -> str:
    if depth > 8:
        return ""
    if isinstance(value, ast.Name):
        values = assignments.get(value.id)
        if not values:
            return ""  # a parameter or a global: unknown
        return _agreed({_place(v, assignments, qualify, depth + 1) for v in values})
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        # `self.labels`, where the class binds it only to host tensors (`_host_attributes`)
        values = assignments.get(f"{value.value.id}.{value.attr}")
        return _agreed({_place(v, assignments, qualify, depth + 1) for v in values}) if values else ""
    if isinstance(value, ast.BinOp):
        # `w.sum() / w`, `1.0 / w`, `len(w) * w`: a number keeps the tensor where it is
        sides = [s for s in (value.left, value.right) if not _number(s)]
        places = {_place(s, assignments, qualify, depth + 1) for s in sides}
        return places.pop() if len(places) == 1 and sides else ""
    if isinstance(value, ast.IfExp):  # `resnet50() if deep else resnet18()`
        return _agreed({_place(v, assignments, qualify, depth + 1) for v in (value.body, value.orelse)})
    if isinstance(value, ast.Compare):  # `mask == 0`, `tokens != pad`: where the tensors are
        return _tensor_place([value.left, *value.comparators], assignments, qualify, depth)
    if isinstance(value, ast.UnaryOp) and not isinstance(value.op, ast.Not):  # `~mask`, `-x`
        return _tensor_place([value.operand], assignments, qualify, depth)
    if isinstance(value, ast.Subscript):  # `table[:n]`, `x[0]`: rows of a tensor stay where it is
        return _tensor_place([value.value], assignments, qualify, depth)
    if not isinstance(value, ast.Call):
        return ""
    func = value.func
    if (
        isinstance(func, ast.Call)
        and isinstance(func.func, ast.Name)
        and func.func.id == "getattr"
        and len(func.args) == 2
        and isinstance(func.args[0], (ast.Name, ast.Attribute))
    ):
        # `getattr(models, arch)(...)`: a name picked from a module, as `models.__dict__[arch]`
        func = ast.Subscript(value=ast.Attribute(value=func.args[0], attr="__dict__"), slice=func.args[1])
    elif (
        isinstance(func, ast.Call)
        and isinstance(func.func, ast.Attribute)
        and func.func.attr == "get"
        and len(func.args) == 1
        and not func.keywords
    ):
        func = ast.Subscript(value=func.func.value, slice=func.args[0])  # `MODELS.get(name)(...)`
    if isinstance(func, ast.Subscript) and isinstance(func.value, (ast.Name, ast.Attribute)):
        # `MODELS[name](...)`: one of the classes a module-level dict maps names to
        registry = qualify(func.value)
        if isinstance(func.value, ast.Name) and (func.value.id in assignments or func.value.id not in qualify.imports):
            registry = None if func.value.id in assignments else f"{qualify.module}.{func.value.id}".lstrip(".")
        if registry is None or any(k.arg in ("device", "device_map") for k in value.keywords):
            return ""
        return f"callk:{registry}[]" if any(k.arg is None for k in value.keywords) else f"call:{registry}[]"
    if isinstance(func, ast.Attribute) and func.attr in ("cuda", "to", "cpu"):
        return _moved(value, func.attr)
    if isinstance(func, ast.Attribute) and func.attr in PRESERVING_METHODS and qualify(func.value) is None:
        # `mask.tril()`, `t.float()`: a tensor method keeps its result where the receiver is
        return _place(func.value, assignments, qualify, depth + 1)
    if isinstance(func, ast.Attribute) and func.attr in PRESERVING_METHODS and isinstance(func.value, ast.Name):
        if func.value.id in assignments:
            return _place(func.value, assignments, qualify, depth + 1)
    qualified = qualify(func)
    if qualified is None:
        return ""
    if qualified == "torch.device" and value.args and _names_an_accelerator(value.args[0]):
        return "device-value"  # `torch.device("cuda" if torch.cuda.is_available() else "cpu")`
    if qualified.startswith("torch.") and qualified.count(".") == 1:
        # (`torch.normal(mean, std)` draws where its tensor arguments are; `torch.tensor(x)` of
        # a helper's data is taken for host data, as `x` is rarely a device tensor there)
        if qualified[6:] in FACTORIES and qualified[6:] != "normal":
            device = next((k.value for k in value.keywords if k.arg == "device"), None)
            if device is not None and _names_an_accelerator(device):
                return "device-tensor"  # `torch.tensor(ys, device="cuda")`
            return "" if any(k.arg in ("device", None) for k in value.keywords) else "cpu-tensor"
        if qualified[6:] in _COMBINING and not any(k.arg is None for k in value.keywords):
            # `torch.stack([xs, ys])`: where every tensor it is given lives
            parts = [e for a in value.args for e in (a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a])]
            places = {_place(p, assignments, qualify, depth + 1) for p in parts}
            return places.pop() if len(places) == 1 and parts else ""
        following = qualified[6:] in PRESERVING_METHODS or qualified[6:] in _COUNTING
        if following and not any(k.arg is None or k.arg == "out" for k in value.keywords):
            # `torch.triu(ones, diagonal=1)`: a tensor method's function form, where its tensors are
            return _tensor_place(list(value.args), assignments, qualify, depth)
        return ""
    if isinstance(func, (ast.Name, ast.Attribute)) and not qualified.startswith(("torch.", "numpy.", "np.")):
        if any(k.arg in ("device", "device_map") for k in value.keywords):
            return ""  # what it builds or returns may be placed by the caller's argument
        if any(k.arg is None for k in value.keywords):
            # `Net(**cfg)`: a project class that never places itself stays where it is built;
            # any other callable may be handed a device (the index tells them apart)
            return f"callk:{qualified}"
        return f"call:{qualified}"
    return ""


# torch functions whose result lives where the tensor they read is (`torch.bincount(labels)`)
_COUNTING = frozenset({"bincount", "histc", "unique", "argsort", "bucketize", "nan_to_num", "cumsum"})
_NUMBER_BUILTINS = frozenset({"len", "int", "float", "round"})
_NUMBER_METHODS = frozenset({"item", "numel", "dim", "size"})


def _number(value: ast.expr) -> bool:
    """A Python number: a literal, `len(x)`, `float(n)`, `t.numel()`, `x.size(0)`."""
    if isinstance(value, ast.Constant):
        return True
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Name):
        return func.id in _NUMBER_BUILTINS
    return (
        isinstance(func, ast.Attribute) and func.attr in _NUMBER_METHODS and (func.attr != "size" or bool(value.args))
    )


def _host_attributes(
    attributes: dict[str, list[ast.expr]],
    moved: set[str],
    methods: dict[str, ast.FunctionDef],
    qualify: _Qualifier,
) -> dict[str, list[ast.expr]]:
    """`self.<attr>` -> the values the class binds it to (`attributes`), for each attribute that
    every binding makes a host tensor (`self.labels = torch.as_tensor(labels)`) and nothing moves
    (`moved`: `self.labels.cuda()`; or a mover of the class's own): what a method computes from
    it stays there."""
    if _MOVERS & set(methods):
        return {}
    return {
        f"self.{attr}": values
        for attr, values in attributes.items()
        if attr not in moved and all(_place(v, {}, qualify, 0) == "cpu-tensor" for v in values)
    }


def _tensor_place(
    values: list[ast.expr], assignments: dict[str, list[ast.expr]], qualify: _Qualifier, depth: int
) -> str:
    """The one tensor place of the values that are not numbers ("" when they disagree or are
    not tensors known to be on the CPU or the device)."""
    parts = [v for v in values if not isinstance(v, ast.Constant) and not isinstance(v, ast.Starred)]
    places = {_place(v, assignments, qualify, depth + 1) for v in parts}
    place = places.pop() if len(places) == 1 else ""
    return place if place in ("cpu-tensor", "device-tensor") else ""


def _names_an_accelerator(value: ast.expr) -> bool:
    """`"cuda"`, `"cuda:0"`, or a conditional with one such branch (the device the author means)."""
    if isinstance(value, ast.IfExp):
        return _names_an_accelerator(value.body) or _names_an_accelerator(value.orelse)
    text = value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else ""
    return _DEVICE_TEXT.match(text) is not None and not text.startswith("cpu")


def _moved(call: ast.Call, method: str) -> str:
    if method == "cpu":
        return "cpu-tensor"
    if method == "cuda":
        return "device-tensor"
    target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return "cpu-tensor" if target.value == "cpu" else "device-tensor" if "cuda" in target.value else ""
    return ""
