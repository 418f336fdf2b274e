"""Device literals, the move/cast vocabulary and the resolver of device expressions.

Devices are resolved statically only when the code says them literally (`"cuda:1"`, `1`,
`torch.device("cuda", 1)`, a name or `self.attr` bound once to one of those); anything else is
kept as its source text and never judged equal or different, except `devs[0]` vs `devs[1]`.
`Resolver.move` is the one place in this package that recognises `.to(...)`/`.cuda(...)`/`.cpu()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.module_placement.scopes import Scope, REBOUND, scope_facts, scope_of
from devicelint.analysis.modules import methods
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import MOVE_METHODS
from devicelint.context import FileContext

DATA_PARALLEL = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
)
DISTRIBUTED_DATA_PARALLEL = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.nn.DistributedDataParallel",
    }
)
# Casts and mode switches that return the module (or tensor) they are called on, unmoved.
CASTS = frozenset({"half", "float", "double", "bfloat16", "train", "eval", "requires_grad_"})
_DEVICE_STRING = re.compile(r"^(cpu|cuda|mps|xpu|npu|hpu|mtia|xla|meta)(?::(\d+))?$")
_SUBSCRIPTED = re.compile(r"^(.+)\[(\d+)\]$")
_DTYPES = frozenset(
    {"float", "float16", "float32", "float64", "half", "bfloat16", "double", "int8", "int16", "int32",
     "int64", "long", "int", "uint8", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"}
)
# Methods that return the module they are called on.
KEEPS_MODULE = MOVE_METHODS | CASTS | {"share_memory", "apply"}
# Trusted constructors: an instance made by one of these starts on the CPU.
TRUSTED_PREFIXES = ("torch.nn.", "torchvision.models.")


@dataclass(frozen=True)
class Device:
    """A device as the code states it: `cuda:1`, `cuda` (the current device), `cpu`, or source text."""

    text: str
    literal: bool
    # "cuda", "cpu"... when known even though the index is not (`torch.device("cuda", rank)`).
    type: str | None = None

    @property
    def index(self) -> int | None:
        match = _DEVICE_STRING.match(self.text) if self.literal else None
        return int(match.group(2)) if match and match.group(2) is not None else None

    @property
    def is_current(self) -> bool:
        """`"cuda"` or `.cuda()`: whichever device is current when it runs."""
        return self.literal and self.type not in (None, "cpu", "meta") and self.index is None

    def label(self) -> str:
        return self.text if self.literal else f"`{self.text}`"


def distinct(a: Device, b: Device) -> bool:
    """Whether two devices are certainly different (unknowns never are)."""
    if a.literal and b.literal:
        if a.type != b.type:
            return True
        return a.index is not None and b.index is not None and a.index != b.index
    if not a.literal and not b.literal:
        ma, mb = _SUBSCRIPTED.match(a.text), _SUBSCRIPTED.match(b.text)
        return bool(ma and mb and ma.group(1) == mb.group(1) and ma.group(2) != mb.group(2))
    return False


def _literal(text: str) -> Device | None:
    match = _DEVICE_STRING.match(text)
    if not match:
        return None
    return Device(text, True, match.group(1))


def string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def int_value(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        try:
            return int(node.value, 0)
        except ValueError:
            return None
    return None


@dataclass
class Resolver:
    """Resolves device expressions with the constants of one scope, its class and the module."""

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
                self._class_env = {k: v for k, v in scope_facts(self.ctx, init).assigned.items() if k.startswith("self.")}
        return self._class_env

    def device(self, node: cst.BaseExpression, depth: int = 0) -> Device:
        text = string_value(node)
        if text is not None:
            return _literal(text) or Device(text, False)
        number = int_value(node)
        if number is not None:
            return Device(f"cuda:{number}", True, "cuda")
        if isinstance(node, cst.FormattedString):
            code = self.ctx.code_for(node)
            match = re.match(r"^[fF]['\"](cuda|xpu|npu|hpu|mps):", code)
            return Device(code, False, match.group(1) if match else None)
        if isinstance(node, cst.Call) and self.ctx.qualified_name(node.func) == "torch.device":
            return self._torch_device(node, depth)
        if isinstance(node, cst.IfExp) and depth < 4:
            # `"cuda:0" if torch.cuda.is_available() else "cpu"`: the CPU branch only runs where
            # no GPU exists, so on a GPU machine the device is the first branch.
            chosen = self._gpu_or_cpu(self.device(node.body, depth + 1), self.device(node.orelse, depth + 1))
            if chosen is not None:
                return chosen
        key = dotted_name(node)
        if key is not None and depth < 4:
            value = self.constant(key)
            if value is not None:
                resolved = self.device(value, depth + 1)
                if resolved.literal or resolved.type is not None:
                    return resolved
        return Device(self.ctx.code_for(node), False)

    @staticmethod
    def _gpu_or_cpu(first: Device, second: Device) -> Device | None:
        if first.literal and second.literal:
            if first.text == second.text:
                return first
            if second.type == "cpu" and first.type not in ("cpu", "meta"):
                return first
            if first.type == "cpu" and second.type not in ("cpu", "meta"):
                return second
        return None

    def constant(self, key: str) -> cst.BaseExpression | None:
        for env in (self.scope.assigned, self.class_env, self._module_env()):
            values = env.get(key)
            if values is not None:
                return values[0] if len(values) == 1 and values[0] is not REBOUND else None
        return None

    def _module_env(self) -> dict[str, list[cst.BaseExpression]]:
        if isinstance(self.scope.root, cst.Module):
            return {}
        return scope_facts(self.ctx, self.ctx.module).assigned

    def _torch_device(self, call: cst.Call, depth: int) -> Device:
        kind: cst.BaseExpression | None = None
        index: cst.BaseExpression | None = None
        for position, arg in enumerate(call.args):
            if arg.star:
                return Device(self.ctx.code_for(call), False)
            name = arg.keyword.value if arg.keyword else ("type" if position == 0 else "index")
            if name == "type":
                kind = arg.value
            elif name == "index":
                index = arg.value
        if kind is None:
            return Device(self.ctx.code_for(call), False)
        base = self.device(kind, depth + 1) if int_value(kind) is None else None
        if base is None or not base.literal:
            return Device(self.ctx.code_for(call), False, base.type if base else None)
        if index is None:
            return base
        number = int_value(index)
        if number is not None and base.index is None:
            return Device(f"{base.type}:{number}", True, base.type)
        return Device(self.ctx.code_for(call), False, base.type)

    def move(self, call: cst.Call) -> tuple[cst.BaseExpression, Device] | None:
        """(receiver, device) for `x.to(dev)`, `x.cuda(i)`, `x.cpu()`; None for other calls."""
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in MOVE_METHODS:
            return None
        method = func.attr.value
        if method == "cpu":
            return func.value, Device("cpu", True, "cpu")
        arg = _device_arg(call)
        if method != "to":  # `.cuda()`, `.xpu(1)`, `.mps()`: that accelerator, the current one without an index
            if arg is None:
                if any(a.star for a in call.args):
                    return None
                return func.value, Device(method, True, method)
            number = int_value(arg)
            if number is not None:
                return func.value, Device(f"{method}:{number}", True, method)
            device = self.device(arg)
            return func.value, device if device.literal else Device(device.text, False, method)
        if arg is None or _is_dtype(self.ctx, arg):
            return None
        return func.value, self.device(arg)


def _device_arg(call: cst.Call) -> cst.BaseExpression | None:
    for position, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is None and position == 0:
            return arg.value
        if arg.keyword is not None and arg.keyword.value == "device":
            return arg.value
    return None


def _is_dtype(ctx: FileContext, node: cst.BaseExpression) -> bool:
    qualified = ctx.qualified_name(node) or ""
    if qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in _DTYPES:
        return True
    text = dotted_name(node) or ""
    last = text.rsplit(".", 1)[-1].lower()
    return "dtype" in last or "precision" in last or last in _DTYPES


def resolver_for(ctx: FileContext, node: cst.CSTNode) -> Resolver:
    root = scope_of(ctx, node)
    cache: dict[int, Resolver] = ctx.shared("module_placement.resolvers", lambda c: {})  # type: ignore[assignment]
    resolver = cache.get(id(root))
    if resolver is None:
        resolver = cache[id(root)] = _new_resolver(ctx, root)
    return resolver


def _new_resolver(ctx: FileContext, node: cst.CSTNode) -> Resolver:
    return Resolver(ctx, scope_facts(ctx, node), ctx.index.enclosing_class(node))  # type: ignore[arg-type]


def strip_self_returning(node: cst.BaseExpression) -> cst.BaseExpression:
    """`model` for `model.apply(init).half()`: methods that return the module they are called on."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in KEEPS_MODULE:
        node = node.func.value
    return node


def rebinds(resolver: Resolver, node: cst.CSTNode, var: str) -> bool:
    """`node` binds `var` to something else: `var = other`, not `var = var.cuda()`."""
    return (
        isinstance(node, cst.Assign) and any(dotted_name(t.target) == var for t in node.targets)
        and dotted_name(chain_base(resolver, node.value)[0]) != var
    )


def chain_base(resolver: Resolver, value: cst.BaseExpression) -> tuple[cst.BaseExpression, Device | None]:
    """Strip `.to(...)`/`.cuda()` and dtype casts: (the expression moved, the last device)."""
    device = None
    node = value
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
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
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("list", "tuple") and len(node.args) == 1:
        node = node.args[0].value
    if isinstance(node, (cst.List, cst.Tuple)) and node.elements:
        first = node.elements[0]
        if isinstance(first, cst.Element):
            device = resolver.device(first.value)
            return device if device.literal and device.index is not None else None
        return None
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "range" and node.args:
        if len(node.args) == 1:
            return Device("cuda:0", True, "cuda")
        start = int_value(node.args[0].value)
        return Device(f"cuda:{start}", True, "cuda") if start is not None else None
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
