"""Modules that are certainly on the host: built by this program on the CPU and, so far, neither
moved nor handed to anything that might move them.

The placement interpreter gives such a module the fact `Fact(MODULE, where="cpu", origin=<the
call that built it>)`. This module says which constructions qualify (`built_on_host`) and which
uses leave a module where it is (`keeps_module_in_place`, `keeps_arguments_in_place`); every other
use *releases* it: the interpreter then forgets that it is on the host (its place becomes unknown),
because an unknown function, a launcher (`accelerator.prepare`), a Lightning `Trainer`, a
`DataParallel`/DDP wrapper or a helper may move it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import libcst as cst

from devicelint.analysis.modules import imported_module_class, module_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import MODULE, MOVE_METHODS, Fact
from devicelint.analysis.placement_values import DEFAULT_DEVICE_SETTERS, Env
from devicelint.analysis.vocabulary import is_cpu_model_builder
from devicelint.context import FileContext

# Module methods that never move the module (and return it, a tensor, or nothing).
_IN_PLACE_METHODS = frozenset(
    {
        "eval",
        "train",
        "requires_grad_",
        "zero_grad",
        "half",
        "float",
        "double",
        "bfloat16",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "children",
        "named_children",
        "modules",
        "named_modules",
        "state_dict",
        "load_state_dict",
        "forward",
        "extra_repr",
        "num_parameters",
        "get_input_embeddings",
        "get_output_embeddings",
        "resize_token_embeddings",
        "tie_weights",
        "save_pretrained",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_buffer",
        "register_parameter",
        "get_submodule",
        "get_parameter",
        "share_memory",
        "gradient_checkpointing_enable",
        "print_trainable_parameters",
    }
)
# Builtins that read a module without keeping it anywhere.
_READING_BUILTINS = frozenset(
    {"print", "len", "isinstance", "type", "id", "str", "repr", "hasattr", "format", "vars", "dir"}
)
_READING_TORCH = frozenset({"torch.save", "torch.numel"})
# `with` items under which a module is built where it would be built anyway.
_NEUTRAL_CONTEXTS = frozenset(
    {
        "torch.no_grad",
        "torch.enable_grad",
        "torch.inference_mode",
        "torch.set_grad_enabled",
        "torch.autocast",
        "torch.cuda.amp.autocast",
        "torch.amp.autocast",
        "torch.cpu.amp.autocast",
        "open",
        "warnings.catch_warnings",
        "contextlib.suppress",
        "contextlib.nullcontext",
    }
)
# Keywords with which a builder places the module itself (`device_map="auto"`, 8-bit loading).
_PLACING_KEYWORDS = frozenset(
    {"device", "device_map", "load_in_8bit", "load_in_4bit", "quantization_config", "tp_plan", "map_location"}
)
# Builders that construct from a settings object and never place what they build (detectron2's
# `build_model` moves the model to `cfg.MODEL.DEVICE`; its part builders do not).
_CPU_PART_BUILDERS = frozenset(
    {
        "detectron2.modeling.build_backbone",
        "detectron2.modeling.backbone.build_backbone",
        "detectron2.modeling.backbone.build.build_backbone",
        "detectron2.modeling.build_resnet_backbone",
        "detectron2.modeling.backbone.build_resnet_backbone",
        "detectron2.modeling.backbone.resnet.build_resnet_backbone",
    }
)
# torchaudio transforms that hold buffers of their own (a resampling kernel, a window, a mel
# filter bank), built on the CPU like any layer; the stateless ones (`AmplitudeToDB`, the
# maskings, `Vol`) run on whatever they are given, so they are not listed.
_BUFFERED_AUDIO_TRANSFORMS = frozenset(
    f"torchaudio.transforms.{name}"
    for name in (
        "Resample",
        "Spectrogram",
        "InverseSpectrogram",
        "MelSpectrogram",
        "MelScale",
        "InverseMelScale",
        "MFCC",
        "LFCC",
        "GriffinLim",
        "TimeStretch",
        "SpectralCentroid",
        "PitchShift",
    )
)
# Known base classes whose constructors leave the module on the CPU.
_CPU_BASES = frozenset(
    {
        "torch.nn.Module",
        "torch.nn.modules.module.Module",
        "pytorch_lightning.LightningModule",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "transformers.PreTrainedModel",
        "transformers.modeling_utils.PreTrainedModel",
    }
)
# `torch.nn` layers that have parameters or buffers as built by default.
_PARAMETERISED_LAYERS = frozenset(
    {
        "Linear",
        "Bilinear",
        "LayerNorm",
        "GroupNorm",
        "RMSNorm",
        "Embedding",
        "EmbeddingBag",
        "RNN",
        "LSTM",
        "GRU",
        "RNNCell",
        "LSTMCell",
        "GRUCell",
        "MultiheadAttention",
        "Transformer",
        "TransformerEncoder",
        "TransformerDecoder",
        "TransformerEncoderLayer",
        "TransformerDecoderLayer",
        "PReLU",
        "SyncBatchNorm",
    }
)
_PARAMETERISED_PREFIXES = ("Conv", "BatchNorm", "Lazy")
# The `where` of a module certainly on the CPU.
HOST = "cpu"


@dataclass(frozen=True)
class HostModuleCall:
    """A module certainly on the CPU is called at `node` with an input certainly on the
    accelerator. `module.origin` is the call that built it."""

    module: Fact
    module_node: cst.CSTNode
    argument: Fact
    argument_node: cst.CSTNode
    node: cst.Call
    scope: cst.CSTNode


def library_model(ctx: FileContext, call: cst.Call) -> str | None:
    """The short name when `call` builds a model with parameters from a library, on the CPU:
    `torchvision.models.resnet50(...)`, `timm.create_model(...)`, a torchaudio transform with
    buffers (`Resample`, `MelSpectrogram`), a transformers
    `Auto*.from_pretrained(...)` without `device_map` or quantisation."""
    qualified = ctx.qualified_name(call.func) or ""
    last = qualified.rsplit(".", 1)[-1]
    if is_cpu_model_builder(qualified):
        return last
    if qualified in _CPU_PART_BUILDERS or qualified in _BUFFERED_AUDIO_TRANSFORMS:
        return last
    if qualified.startswith("transformers.") and last in ("from_pretrained", "from_config"):
        owner = qualified.rsplit(".", 2)[-2]
        return owner if "Model" in owner and "Tokenizer" not in owner and "Processor" not in owner else None
    return None


def built_on_host(ctx: FileContext, call: cst.Call, constructed: str, scope: cst.CSTNode) -> bool:
    """Whether `call` (building `constructed`) certainly leaves a module with parameters on the
    CPU: nothing in the call places it (`device=`, `device_map=`, `**kwargs`), it is not built
    under a `with` that may place it (`torch.device`, `init_empty_weights`, DeepSpeed's
    `zero.Init`), the file sets no default device, and a class of this file neither moves itself
    nor takes its parameters from the caller's modules."""
    if any(arg.star or (arg.keyword is not None and arg.keyword.value in _PLACING_KEYWORDS) for arg in call.args):
        return False
    if "Parallel" in constructed or _sets_default_device(ctx) or under_placing_context(ctx, call, scope):
        return False
    qualified = ctx.qualified_name(call.func) or ""
    if qualified.startswith("torch.nn."):
        return has_parameters(constructed, call)
    if library_model(ctx, call) is not None:
        return True
    imported = imported_module_class(ctx, call.func)
    if imported is not None:
        return imported.owns_cpu_parameters
    return type(call.func) is cst.Name and _owns_cpu_parameters(ctx, constructed)


def loaded_builder(ctx: FileContext, call: cst.Call, scope: cst.CSTNode) -> str | None:
    """The builder's name when `call` builds, on the CPU, a model that the code then loads
    weights into: `net = hourglass(num_stacks=args.stacks)` followed by
    `net.load_state_dict(...)` in the same function. The builder is a function imported from
    another package (its body is unknown; a class is not trusted, as its constructor may place
    the model's stages itself), and nothing handed to it could carry a device: no
    `device=`-like keyword, no `**kwargs`, no whole settings object (`build(cfg)` may place the
    model where `cfg.MODEL.DEVICE` says), no value whose name mentions a device."""
    qualified = ctx.qualified_name(call.func) or ""
    if not qualified or qualified.startswith("torch.") or "." not in qualified:
        return None
    if not qualified.rsplit(".", 1)[-1][:1].islower():
        return None  # a class of elsewhere may place its own stages in `__init__` (a split model)
    if _sets_default_device(ctx) or under_placing_context(ctx, call, scope):
        return None
    for arg in call.args:
        if arg.star or (arg.keyword is not None and arg.keyword.value in _PLACING_KEYWORDS):
            return None
        if type(arg.value) is cst.Name and arg.value.value not in ("True", "False", "None"):
            return None  # a whole object handed on: it may say where to build
        text = (dotted_name(arg.value) or "").lower()
        if any(word in text for word in _DEVICE_WORDS):
            return None
    parent = ctx.index.parent(call)
    if type(parent) is not cst.Assign or len(parent.targets) != 1:
        return None
    target = parent.targets[0].target
    if type(target) is not cst.Name:
        return None
    for node in ctx.index.walk(scope):
        if (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value == "load_state_dict"
            and type(node.func.value) is cst.Name
            and node.func.value.value == target.value
        ):
            return qualified.rsplit(".", 1)[-1]
    return None


# Loaders of pickled objects: what they return is where `map_location` puts it.
_LOADERS = frozenset({"torch.load", "torch.serialization.load", "torch.jit.load", "torch.jit._serialization.load"})


def loaded_model_on_host(ctx: FileContext, call: cst.Call, scope: cst.CSTNode) -> bool:
    """Whether `call` loads a whole model onto the CPU: `torch.load(path, map_location="cpu")`
    (or `torch.jit.load`) bound to a name or `self.<attr>` that the code calls like a module
    (`model(x)`) and never indexes like a checkpoint (`ckpt["model"]`)."""
    if ctx.qualified_name(call.func) not in _LOADERS or not _maps_to_cpu(ctx, call):
        return False
    if _sets_default_device(ctx) or under_placing_context(ctx, call, scope):
        return False
    parent = ctx.index.parent(call)
    if type(parent) is not cst.Assign or len(parent.targets) != 1:
        return False
    target = parent.targets[0].target
    attr = self_attribute(target)
    if attr is None and type(target) is not cst.Name:
        return False
    region = ctx.index.enclosing_class(call) if attr is not None else scope
    if region is None:
        return False
    called = False
    for node in ctx.index.walk(region):
        if type(node) is cst.Call and _same_binding(node.func, target):
            called = True
        elif type(node) is cst.Subscript and _same_binding(node.value, target):
            return False  # a checkpoint's entries, not a model
    return called


def _same_binding(node: cst.CSTNode, target: cst.BaseExpression) -> bool:
    """`node` reads what `target` (a name or `self.<attr>`) binds."""
    if type(target) is cst.Name:
        return type(node) is cst.Name and node.value == target.value
    return self_attribute(node) == self_attribute(target)


def _maps_to_cpu(ctx: FileContext, call: cst.Call) -> bool:
    """`map_location="cpu"` or `torch.device("cpu")`, by keyword or as the second argument."""
    place = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "map_location"), None)
    if place is None and len(call.args) > 1 and call.args[1].keyword is None:
        place = call.args[1].value
    if type(place) is cst.Call and ctx.qualified_name(place.func) == "torch.device" and len(place.args) == 1:
        place = place.args[0].value
    return type(place) is cst.SimpleString and place.value.strip("\"'") == "cpu"


# Names of values that may say where to build a model.
_DEVICE_WORDS = ("device", "cuda", "gpu", "rank", "accelerator")


def has_parameters(layer: str, call: cst.Call) -> bool:
    """Whether a `torch.nn` layer built by `call` has parameters or buffers (losses, activations,
    pooling and containers may have none; `affine=False` norms have none)."""
    if layer not in _PARAMETERISED_LAYERS and not layer.startswith(_PARAMETERISED_PREFIXES):
        return False
    return not any(
        arg.keyword is not None and arg.keyword.value in ("affine", "elementwise_affine", "track_running_stats")
        for arg in call.args
    )


def keeps_module_in_place(method: str) -> bool:
    """Whether calling `method` on a module leaves it where it is."""
    return method in _IN_PLACE_METHODS


def keeps_arguments_in_place(ctx: FileContext, call: cst.Call) -> bool:
    """Whether a call only reads its arguments (`print(model)`, `torch.save(model, path)`)."""
    if type(call.func) is cst.Name and call.func.value in _READING_BUILTINS:
        return True
    return ctx.qualified_name(call.func) in _READING_TORCH


def _sets_default_device(ctx: FileContext) -> bool:
    """Whether the file sets a default device or tensor type anywhere (to whatever value)."""
    return ctx.shared(
        "host_modules.default_device",
        lambda c: any(c.qualified_name(call.func) in DEFAULT_DEVICE_SETTERS for call in c.index.of_type(cst.Call)),
    )


def under_placing_context(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    """Whether `node` runs inside a `with` block of `scope` that may place what is built there."""
    for ancestor in ctx.index.ancestors(node):
        if ancestor is scope:
            return False
        if type(ancestor) is cst.With:
            for item in ancestor.items:
                spec = item.item.func if type(item.item) is cst.Call else item.item
                if ctx.qualified_name(spec) not in _NEUTRAL_CONTEXTS:
                    return True
    return False


def _owns_cpu_parameters(ctx: FileContext, name: str) -> bool:
    """A module class of this file (through same-file bases, ending at known bases) that builds
    a parameter, a buffer or a submodule with parameters itself and never moves itself or
    places anything (no `.to()`/`.cuda()`, no `device=` anywhere in its body)."""
    return ctx.shared("host_modules.owns_cpu_parameters", _classes_owning_cpu_parameters).get(name, False)


def _classes_owning_cpu_parameters(ctx: FileContext) -> dict[str, bool]:
    classes = module_classes(ctx)
    return {name: _owns(ctx, classes, name, frozenset()) is True for name in classes}


def _owns(ctx: FileContext, classes: dict[str, cst.ClassDef], name: str, seen: frozenset[str]) -> bool | None:
    """True: owns CPU parameters; False: may place itself; None: owns none, places nothing.
    (Not a closure: a recursive one is a reference cycle that keeps the file's tree alive.)"""
    cls = classes.get(name)
    if cls is None or name in seen or _places_anything(ctx, cls):
        return False
    own = False
    for node in ctx.index.walk(cls):
        if type(node) is cst.Call and not own:
            qualified = ctx.qualified_name(node.func) or ""
            short = qualified.rsplit(".", 1)[-1]
            if qualified in _PARAMETER_MAKERS or (
                type(node.func) is cst.Attribute and node.func.attr.value in _REGISTERS
            ):
                own = True
            elif qualified.startswith("torch.nn.") and qualified.count(".") == 2:
                own = has_parameters(short, node)
            elif type(node.func) is cst.Name and node.func.value in classes and node.func.value not in seen | {name}:
                own = _owns(ctx, classes, node.func.value, seen | {name}) is True
    for base in cls.bases:
        if base.keyword is not None:
            continue
        spelled = dotted_name(base.value) or ""
        if spelled in classes:
            inherited = _owns(ctx, classes, spelled, seen | {name})
            if inherited is False:
                return False
            own = own or bool(inherited)
        elif ctx.qualified_name(base.value) not in _CPU_BASES:
            return False  # a base from elsewhere may place the module in its constructor
    return own or None


_PARAMETER_MAKERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"})
_REGISTERS = frozenset({"register_buffer", "register_parameter"})


def _places_anything(ctx: FileContext, cls: cst.ClassDef) -> bool:
    for node in ctx.index.walk(cls):
        if type(node) is cst.Call:
            if type(node.func) is cst.Attribute and node.func.attr.value in MOVE_METHODS | {"to_empty"}:
                return True
            if any(arg.keyword is not None and arg.keyword.value in _PLACING_KEYWORDS for arg in node.args):
                return True
            if ctx.qualified_name(node.func) in DEFAULT_DEVICE_SETTERS:
                return True
            if not (type(node.func) is cst.Name and node.func.value in _READING_BUILTINS | {"super"}) and any(
                type(arg.value) is cst.Name and arg.value.value == "self" for arg in node.args
            ):
                return True  # `place_on_gpu(self)`: code elsewhere may move it
    return False


# -- releasing: the interpreter forgets that a module is on the host --------------------------


def is_host_module(fact: Fact) -> bool:
    """A module certainly on the CPU (built here on the CPU, or moved there)."""
    return fact.kind == MODULE and fact.where == HOST


def hosted_in(fact: Fact) -> list[Fact]:
    """The host modules a value is or holds (in a tuple, a list, a dict)."""
    if is_host_module(fact):
        return [fact]
    parts = list(fact.elements or ()) + [part for _, part in fact.fields or ()]
    return [found for part in parts for found in hosted_in(part)]


def released(env: Env, modules: list[Fact]) -> Env:
    """`env` where the given host modules, under every name and in every container that holds
    them, are no longer known to be on the host. A module is known by the call that built it;
    one that lost it (joined over paths) releases every host module."""
    if not modules:
        return env
    origins = {id(m.origin) for m in modules if m.origin is not None}
    every = any(m.origin is None for m in modules)

    def release(fact: Fact) -> Fact:
        if is_host_module(fact) and (every or fact.origin is None or id(fact.origin) in origins):
            return Fact(MODULE, factory=fact.factory)
        if fact.elements:
            return replace(fact, elements=tuple(release(e) for e in fact.elements))
        if fact.fields:
            return replace(fact, fields=tuple((k, release(v)) for k, v in fact.fields))
        return fact

    return {key: release(fact) for key, fact in env.items()}


def root_key(node: cst.BaseExpression) -> str | None:
    """The binding an expression reads through (`model` for `model.fc.weight`, `self.model` for
    `self.model.blocks[0]`), or None for a call's result or a literal."""
    while True:
        if type(node) is cst.Name:
            return node.value
        attr = self_attribute(node)
        if attr is not None:
            return f"self.{attr}"
        if isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return None


def captured_names(ctx: FileContext, scope: cst.CSTNode) -> frozenset[str]:
    """Names that code inside `scope` can reach without being handed them: free names of the
    nested functions and lambdas (of every function of the file, for module-level code). A
    call may run that code, which may move a module bound to one of these names."""

    def build(c: FileContext) -> dict[int, frozenset[str]]:
        found: dict[int, set[str]] = {}
        for inner in list(c.index.of_type(cst.FunctionDef)) + list(c.index.of_type(cst.Lambda)):
            outer = c.index.enclosing_function(inner)
            names = _free_names(c, inner)
            found.setdefault(id(outer) if outer is not None else id(c.module), set()).update(names)
            if outer is not None:  # module-level code reaches every function's globals
                found.setdefault(id(c.module), set()).update(names)
        return {key: frozenset(names) for key, names in found.items()}

    return ctx.shared("host_modules.captured", build).get(id(scope), frozenset())


def _free_names(ctx: FileContext, func: cst.FunctionDef | cst.Lambda) -> set[str]:
    params = func.params
    own = {p.name.value for p in list(params.posonly_params) + list(params.params) + list(params.kwonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if type(star) is cst.Param:
            own.add(star.name.value)
    index = ctx.index
    own.update(t.target.value for t in index.within(func, cst.AssignTarget) if type(t.target) is cst.Name)
    return {name.value for name in index.within(func, cst.Name)} - own
