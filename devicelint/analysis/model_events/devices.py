"""The move/cast vocabulary of module variables and the scope-level view of device expressions.

Which device an expression names comes from the placement engine (`facts.device_of`, the
engine's `DeviceId`): this module only knows which calls move a module (`Resolver.move`, over
`placement_facts.MOVE_METHODS`), how a chain of moves and casts ends (`chain_base`), and the
syntactic constants of one scope that DL2xx reads for non-device values (`device_ids` lists,
keyword dictionaries).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.argument_places import left_out_everywhere
from devicelint.analysis.devices import CPU_DEVICE, DeviceId, device_argument, indexed, int_value, is_dtype
from devicelint.analysis.facts import file_facts
from devicelint.analysis.model_events.scopes import REBOUND, Scope, scope_facts, scope_of
from devicelint.analysis.modules import methods
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import MOVE_METHODS
from devicelint.context import FileContext

# The name the parallelism rules use for a device; one type with the engine's.
Device = DeviceId

# Subclasses that keep the wrapper's contract (OpenMMLab's wrappers add only a `scatter` of
# their data containers and `train_step`/`val_step`/`test_step`, see MM_WRAPPER_METHODS).
MM_DATA_PARALLEL = frozenset({"mmcv.parallel.MMDataParallel", "mmcv.parallel.data_parallel.MMDataParallel"})
MM_DISTRIBUTED_DATA_PARALLEL = frozenset(
    {
        "mmcv.parallel.MMDistributedDataParallel",
        "mmcv.parallel.distributed.MMDistributedDataParallel",
        "mmengine.model.MMDistributedDataParallel",
        "mmengine.model.wrappers.MMDistributedDataParallel",
        "mmengine.model.wrappers.distributed.MMDistributedDataParallel",
    }
)
MM_WRAPPER_METHODS = frozenset({"train_step", "val_step", "test_step"})
APEX_DISTRIBUTED_DATA_PARALLEL = frozenset(
    {"apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel"}
)
DATA_PARALLEL = (
    frozenset(
        {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
    )
    | MM_DATA_PARALLEL
)
DISTRIBUTED_DATA_PARALLEL = (
    frozenset(
        {
            "torch.nn.parallel.DistributedDataParallel",
            "torch.nn.parallel.distributed.DistributedDataParallel",
            "torch.nn.DistributedDataParallel",
        }
    )
    # NVIDIA apex's wrapper: the same one-process-per-GPU contract (the module on the current
    # device, `.module`, `module.` state-dict keys), and no `device_ids`.
    | APEX_DISTRIBUTED_DATA_PARALLEL
    | MM_DISTRIBUTED_DATA_PARALLEL
)
# Casts and mode switches that return the module (or tensor) they are called on, unmoved.
CASTS = frozenset({"half", "float", "double", "bfloat16", "train", "eval", "requires_grad_"})
# Methods that return the module they are called on.
KEEPS_MODULE = MOVE_METHODS | CASTS | {"share_memory", "apply"}
# Trusted constructors: an instance made by one of these starts on the CPU.
TRUSTED_PREFIXES = ("torch.nn.", "torchvision.models.")


def trusted_constructor(qualified: str) -> bool:
    """A `torch.nn`/`torchvision.models` call that builds a new module on the CPU: not a wrapper,
    and not a method of a class (`nn.SyncBatchNorm.convert_sync_batchnorm(model)` returns the
    module it is given, wherever that is)."""
    if not qualified.startswith(TRUSTED_PREFIXES) or qualified in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL:
        return False
    parts = qualified.split(".")
    return not any(part[:1].isupper() for part in parts[:-1])


@dataclass
class Resolver:
    """One scope's view: devices from the engine, other constants from the scope's single
    bindings (its own, its class's `__init__`, the module's)."""

    ctx: FileContext
    scope: Scope
    cls: cst.ClassDef | None = None
    _class_env: dict[str, list[cst.BaseExpression]] | None = None

    @property
    def class_env(self) -> dict[str, list[cst.BaseExpression]]:
        """`self.x` bindings of the enclosing class's `__init__`, built on first use."""
        if self._class_env is None:
            self._class_env = {}
            init = methods(self.cls).get("__init__") if self.cls is not None else None
            if init is not None:
                self._class_env = {
                    k: v for k, v in scope_facts(self.ctx, init).assigned.items() if k.startswith("self.")
                }
        return self._class_env

    def device(self, node: cst.BaseExpression) -> Device:
        """The device an expression names, as the placement engine resolves it."""
        return file_facts(self.ctx).device_of(node)

    def constant(self, key: str) -> cst.BaseExpression | None:
        for env in (self.scope.assigned, self.class_env, self._module_env()):
            values = env.get(key)
            if values is not None:
                return values[0] if len(values) == 1 and values[0] is not REBOUND else None
        return None

    def _module_env(self) -> dict[str, list[cst.BaseExpression]]:
        if type(self.scope.root) is cst.Module:
            return {}
        return scope_facts(self.ctx, self.ctx.module).assigned

    def move(self, call: cst.Call) -> tuple[cst.BaseExpression, Device] | None:
        """(receiver, device) for `x.to(dev)`, `x.cuda(i)`, `x.cpu()`; None for other calls."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in MOVE_METHODS:
            return None
        method = func.attr.value
        if method == "cpu":
            return func.value, CPU_DEVICE
        arg = device_argument(call)
        if method != "to":  # `.cuda()`, `.xpu(1)`, `.mps()`: that accelerator, the current one without an index
            if arg is None:
                if any(a.star for a in call.args):
                    return None
                return func.value, Device(method, True, method)
            number = int_value(arg)
            if number is not None:
                return func.value, indexed(method, number)
            device = self.device(arg)
            return func.value, device if device.literal else Device(device.text, False, method)
        if arg is None or is_dtype(self.ctx, arg):
            return None
        if type(arg) is cst.Name and left_out_everywhere(self.ctx, arg):
            return None  # `.to(device)` where every call leaves `device` at its default None
        return func.value, self.device(arg)


def resolver_for(ctx: FileContext, node: cst.CSTNode) -> Resolver:
    root = scope_of(ctx, node)
    cache: dict[int, Resolver] = ctx.shared("model_events.resolvers", lambda c: {})
    resolver = cache.get(id(root))
    if resolver is None:
        resolver = cache[id(root)] = _new_resolver(ctx, root)
    return resolver


def _new_resolver(ctx: FileContext, node: cst.FunctionDef | cst.Module) -> Resolver:
    return Resolver(ctx, scope_facts(ctx, node), ctx.index.enclosing_class(node))


def strip_self_returning(node: cst.BaseExpression) -> cst.BaseExpression:
    """`model` for `model.apply(init).half()`: methods that return the module they are called on."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in KEEPS_MODULE:
        node = node.func.value
    return node


def rebinds(resolver: Resolver, node: cst.CSTNode, var: str) -> bool:
    """`node` binds `var` to something else: `var = other`, not `var = var.cuda()`."""
    return (
        type(node) is cst.Assign
        and any(dotted_name(t.target) == var for t in node.targets)
        and dotted_name(chain_base(resolver, node.value)[0]) != var
    )


def chain_base(resolver: Resolver, value: cst.BaseExpression) -> tuple[cst.BaseExpression, Device | None]:
    """Strip `.to(...)`/`.cuda()` and dtype casts: (the expression moved, the last device)."""
    device = None
    node = value
    while type(node) is cst.Call and type(node.func) is cst.Attribute:
        moved = resolver.move(node)
        if moved is not None:
            device = device or moved[1]
        elif node.func.attr.value not in CASTS:
            break
        node = node.func.value
    return node, device


def device_ids_first(resolver: Resolver, device_ids: cst.BaseExpression | None) -> Device | None:
    """`device_ids[0]` when the code states it: `[1, 2]`, `range(2)`, `list(range(1, 3))`."""
    if device_ids is None:
        return None
    node = device_ids
    if (
        type(node) is cst.Call
        and type(node.func) is cst.Name
        and node.func.value in ("list", "tuple")
        and len(node.args) == 1
    ):
        node = node.args[0].value
    if isinstance(node, (cst.List, cst.Tuple)) and node.elements:
        first = node.elements[0]
        if type(first) is cst.Element:
            device = resolver.device(first.value)
            return device if device.literal and device.index is not None else None
        return None
    if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "range" and node.args:
        if len(node.args) == 1:
            return indexed("cuda", 0)
        start = int_value(node.args[0].value)
        return indexed("cuda", start) if start is not None else None
    key = dotted_name(node)
    if key is not None:
        value = resolver.constant(key)
        if value is not None and value is not device_ids:
            return device_ids_first(resolver, value)
    return None


@dataclass(frozen=True)
class Placement:
    attr: str
    device: Device
    node: cst.CSTNode
