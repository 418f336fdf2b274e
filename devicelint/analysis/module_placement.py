"""Which submodule of a model is placed on which device, and which wrapper wraps which model.

Facts for the parallelism rules (DL2xx):

- class placements: `self.enc = Enc().to("cuda:0")`, `self.dec.cuda(1)` in `__init__`;
- wrapper sites: `model = nn.DataParallel(model, device_ids=[0, 1])`, DDP under any alias,
  with the wrapped expression, the assigned target (`model`, `self.model`) and `device_ids`;
- per-scope history of one variable: where it was bound, moved (`model.to(...)`), had a
  submodule moved (`model.enc.to(...)`), or escaped into unknown code (`init(model)`).

Devices are resolved statically only when the code says them literally (`"cuda:1"`, `1`,
`torch.device("cuda", 1)`, a name or `self.attr` bound once to one of those); anything else is
kept as its source text and never judged equal or different, except `devs[0]` vs `devs[1]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.index import iter_children
from devicelint.analysis.modules import methods, module_classes
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
_CASTS = frozenset({"half", "float", "double", "bfloat16", "train", "eval", "requires_grad_"})
_DEVICE_STRING = re.compile(r"^(cpu|cuda|mps|xpu|npu|hpu|mtia|xla|meta)(?::(\d+))?$")
_SUBSCRIPTED = re.compile(r"^(.+)\[(\d+)\]$")
_DTYPES = frozenset(
    {"float", "float16", "float32", "float64", "half", "bfloat16", "double", "int8", "int16", "int32",
     "int64", "long", "int", "uint8", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"}
)
# Methods that return the module they are called on.
_KEEPS_MODULE = MOVE_METHODS | _CASTS | {"share_memory", "apply"}
# Trusted constructors: an instance made by one of these starts on the CPU.
_TRUSTED_PREFIXES = ("torch.nn.", "torchvision.models.")


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


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        try:
            return int(node.value, 0)
        except ValueError:
            return None
    return None


# ---------------------------------------------------------------------------- scopes


def scope_of(ctx: FileContext, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Module)):
            return ancestor
    return ctx.module


@dataclass
class Scope:
    """The nodes of one function (or the module) in source order, nested defs left out."""

    root: cst.FunctionDef | cst.Module
    nodes: list[cst.CSTNode]
    order: dict[int, int]
    # name or `self.attr` text -> values assigned to it in this scope
    assigned: dict[str, list[cst.BaseExpression]]


def scope_facts(ctx: FileContext, root: cst.FunctionDef | cst.Module) -> Scope:
    cache: dict[int, Scope] = ctx.shared("module_placement.scopes", lambda c: {})  # type: ignore[assignment]
    scope = cache.get(id(root))
    if scope is None:
        scope = _build_scope(root)
        cache[id(root)] = scope
    return scope


_NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_REBOUND = cst.Name("__rebound__")


def _build_scope(root: cst.FunctionDef | cst.Module) -> Scope:
    nodes: list[cst.CSTNode] = []
    assigned: dict[str, list[cst.BaseExpression]] = {}
    start = root.body if isinstance(root, cst.FunctionDef) else root
    if isinstance(root, cst.FunctionDef):
        params = root.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            assigned.setdefault(param.name.value, []).append(_REBOUND)  # a caller chooses it
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                assigned.setdefault(star.name.value, []).append(_REBOUND)
    stack: list[cst.CSTNode] = [start]
    append = nodes.append
    while stack:
        node = stack.pop()
        append(node)
        kind = type(node)
        if kind in _NESTED and node is not start:
            continue
        if kind is cst.Assign:
            for target in node.targets:  # type: ignore[attr-defined]
                key = dotted_name(target.target)
                if key is not None:
                    assigned.setdefault(key, []).append(node.value)  # type: ignore[attr-defined]
        elif kind is cst.AnnAssign:
            key = dotted_name(node.target)  # type: ignore[attr-defined]
            if key is not None and node.value is not None:  # type: ignore[attr-defined]
                assigned.setdefault(key, []).append(node.value)  # type: ignore[attr-defined]
        elif kind in (cst.AugAssign, cst.For, cst.NamedExpr, cst.WithItem):
            target = node.asname.name if kind is cst.WithItem and node.asname else getattr(node, "target", None)  # type: ignore[attr-defined]
            key = dotted_name(target) if isinstance(target, cst.BaseExpression) else None
            if key is not None:  # a second binding makes the name unresolvable
                assigned.setdefault(key, []).append(_REBOUND)
        children = list(iter_children(node))
        children.reverse()
        stack.extend(children)
    return Scope(root, nodes, {id(n): i for i, n in enumerate(nodes)}, assigned)


def module_functions(ctx: FileContext) -> dict[str, cst.FunctionDef]:
    """Functions defined once at the top level of the module, by name."""
    def build(c: FileContext) -> dict[str, cst.FunctionDef]:
        seen: dict[str, list[cst.FunctionDef]] = {}
        for statement in c.module.body:
            if isinstance(statement, cst.FunctionDef):
                seen.setdefault(statement.name.value, []).append(statement)
        return {name: defs[0] for name, defs in seen.items() if len(defs) == 1}

    return ctx.shared("module_placement.functions", build)


def statement_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    """The simple statement (or compound statement header owner) holding `node`."""
    current = node
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return ancestor
        current = ancestor
    return current


# ---------------------------------------------------------------------------- devices


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
        text = _string(node)
        if text is not None:
            return _literal(text) or Device(text, False)
        number = _int(node)
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
                return values[0] if len(values) == 1 and values[0] is not _REBOUND else None
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
        base = self.device(kind, depth + 1) if _int(kind) is None else None
        if base is None or not base.literal:
            return Device(self.ctx.code_for(call), False, base.type if base else None)
        if index is None:
            return base
        number = _int(index)
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
            number = _int(arg)
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


# ---------------------------------------------------------------------------- classes


@dataclass(frozen=True)
class Placement:
    attr: str
    device: Device
    node: cst.CSTNode


@dataclass(frozen=True)
class ClassPlacement:
    """Where `__init__` puts the submodules of one module class."""

    cls: cst.ClassDef
    placements: dict[str, Placement]

    def split(self) -> tuple[Placement, Placement] | None:
        """Two submodules certainly placed on different devices, else None."""
        return split_of(list(self.placements.values()))


def split_of(placements: list[Placement]) -> tuple[Placement, Placement] | None:
    for i, first in enumerate(placements):
        for second in placements[i + 1:]:
            if distinct(first.device, second.device):
                return first, second
    return None


def class_placements(ctx: FileContext) -> dict[str, ClassPlacement]:
    """Module classes of this file whose `__init__` places at least one submodule."""
    return ctx.shared("module_placement.classes", _build_class_placements)


def _build_class_placements(ctx: FileContext) -> dict[str, ClassPlacement]:
    out: dict[str, ClassPlacement] = {}
    # Only an `__init__` that calls `.to(...)`/`.cuda(...)` can place anything: find those first.
    placing: set[int] = set()
    for call in ctx.index.of_type(cst.Call):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in MOVE_METHODS:
            function = ctx.index.enclosing_function(call)
            if function is not None and function.name.value == "__init__":
                placing.add(id(function))
    if not placing:
        return out
    for name, cls in module_classes(ctx).items():
        init = methods(cls).get("__init__")
        if init is None or id(init) not in placing:
            continue
        resolver = resolver_for(ctx, init.body)
        placements: dict[str, Placement] = {}
        for node in scope_facts(ctx, init).nodes:
            if isinstance(node, cst.Assign) and len(node.targets) == 1:
                attr = _self_attr(node.targets[0].target)
                if attr is not None:
                    device = chain_base(resolver, node.value)[1]
                    if device is not None:
                        placements[attr] = Placement(attr, device, node)
                    else:
                        placements.pop(attr, None)
            elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
                moved = resolver.move(node.value)
                if moved is None:
                    continue
                attr = _self_attr(moved[0])
                if attr is not None:
                    placements[attr] = Placement(attr, moved[1], node)
                elif isinstance(moved[0], cst.Name) and moved[0].value == "self":
                    placements.clear()  # `self.to(dev)` moves everything to one device
        if placements:
            out[name] = ClassPlacement(cls, placements)
    return out


def _self_attr(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def strip_self_returning(node: cst.BaseExpression) -> cst.BaseExpression:
    """`model` for `model.apply(init).half()`: methods that return the module they are called on."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _KEEPS_MODULE:
        node = node.func.value
    return node


def chain_base(resolver: Resolver, value: cst.BaseExpression) -> tuple[cst.BaseExpression, Device | None]:
    """Strip `.to(...)`/`.cuda()` and dtype casts: (the expression moved, the last device)."""
    device = None
    node = value
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        moved = resolver.move(node)
        if moved is not None:
            device = device or moved[1]
        elif node.func.attr.value not in _CASTS:
            break
        node = node.func.value
    return node, device


# ---------------------------------------------------------------------------- wrappers


@dataclass(frozen=True)
class WrapperSite:
    call: cst.Call
    kind: str  # "DataParallel" or "DistributedDataParallel"
    spelled: str  # the callee as written: `nn.DataParallel`, `DP`
    wrapped: cst.BaseExpression | None
    target: str | None  # `model`, `self.model`: what the wrapper is assigned to
    device_ids: cst.BaseExpression | None
    statement: cst.CSTNode
    scope: cst.FunctionDef | cst.Module


def wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    return ctx.shared("module_placement.wrappers", _build_wrapper_sites)


def _build_wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    sites = []
    for call in ctx.index.of_type(cst.Call):
        qualified = ctx.qualified_name(call.func)
        if qualified in DATA_PARALLEL:
            kind = "DataParallel"
        elif qualified in DISTRIBUTED_DATA_PARALLEL:
            kind = "DistributedDataParallel"
        else:
            continue
        wrapped = device_ids = None
        for position, arg in enumerate(call.args):
            if arg.star:
                continue
            name = arg.keyword.value if arg.keyword else ("module" if position == 0 else "device_ids" if position == 1 else "")
            if name == "module":
                wrapped = arg.value
            elif name == "device_ids":
                device_ids = arg.value
        sites.append(
            WrapperSite(
                call=call, kind=kind, spelled=ctx.code_for(call.func), wrapped=wrapped,
                target=assigned_target(ctx, call), device_ids=device_ids,
                statement=statement_of(ctx, call), scope=scope_of(ctx, call),
            )
        )
    return sites


def assigned_target(ctx: FileContext, call: cst.Call) -> str | None:
    """`model` in `model = DP(m)` or `model = DP(m).cuda()`; None when not assigned."""
    node: cst.CSTNode = call
    for parent in ctx.index.ancestors(call):
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _KEEPS_MODULE:
            node = parent  # `DP(m).cuda()` is still the wrapper; `DP(m).module` is not
            continue
        if isinstance(parent, cst.Call) and parent.func is node:
            node = parent
            continue
        if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1:
            return dotted_name(parent.targets[0].target)
        if isinstance(parent, cst.AnnAssign) and parent.value is node:
            return dotted_name(parent.target)
        return None
    return None


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
        start = _int(node.args[0].value)
        return Device(f"cuda:{start}", True, "cuda") if start is not None else None
    key = dotted_name(node)
    if key is not None:
        value = resolver.constant(key)
        if value is not None and value is not device_ids:
            return device_ids_first(resolver, value)
    return None


# ---------------------------------------------------------------------------- one variable


@dataclass
class History:
    """What a scope does to one model variable, in source order."""

    var: str
    bind: cst.BaseExpression | None = None  # the expression last bound before the site
    origin: str | None = None  # class name when bound from an in-file module class
    trusted: bool = False  # bound from a constructor known to leave the model on the CPU
    moves: list[tuple[Device, cst.CSTNode]] = field(default_factory=list)
    sub_moves: dict[str, Placement] = field(default_factory=dict)
    escaped: bool = False


def history(ctx: FileContext, var: str, site: cst.CSTNode) -> History:
    """Binding, moves and escapes of `var` in the scope of `site`, before the statement of `site`."""
    scope = scope_facts(ctx, scope_of(ctx, site))
    resolver = resolver_for(ctx, site)
    limit = scope.order.get(id(statement_of(ctx, site)), len(scope.nodes))
    facts = History(var)
    classes = module_classes(ctx)
    for position, node in enumerate(scope.nodes):
        if position >= limit:
            break
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            key = dotted_name(node.targets[0].target)
            if key == var:
                base, device = chain_base(resolver, node.value)
                same_var = dotted_name(base) == var
                if not same_var:
                    facts.bind, facts.origin, facts.trusted = node.value, None, False
                    facts.moves, facts.sub_moves, facts.escaped = [], {}, False
                    if isinstance(base, cst.Call):
                        callee = dotted_name(base.func) or ""
                        qualified = ctx.qualified_name(base.func) or ""
                        if callee in classes:
                            facts.origin, facts.trusted = callee, True
                        elif qualified.startswith(_TRUSTED_PREFIXES) and qualified not in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL:
                            facts.trusted = True
                if device is not None:
                    facts.moves.append((device, node))
                    facts.sub_moves.clear()
                continue
            if key is not None and key.startswith(var + ".") and key.count(".") == var.count(".") + 1:
                device = chain_base(resolver, node.value)[1]
                if device is not None:
                    attr = key.rsplit(".", 1)[1]
                    facts.sub_moves[attr] = Placement(attr, device, node)
            if dotted_name(node.value) == var:
                facts.escaped = True  # `other = model`: aliases are not followed
        elif isinstance(node, cst.Call):
            moved = resolver.move(node)
            if moved is not None:
                receiver = dotted_name(strip_self_returning(moved[0]))
                if receiver == var:
                    facts.moves.append((moved[1], node))
                    facts.sub_moves.clear()
                elif receiver and receiver.startswith(var + ".") and receiver.count(".") == var.count(".") + 1:
                    attr = receiver.rsplit(".", 1)[1]
                    facts.sub_moves[attr] = Placement(attr, moved[1], node)
                continue
            if any(dotted_name(arg.value) == var for arg in node.args) and not _harmless_call(ctx, node):
                facts.escaped = True
        elif isinstance(node, (cst.Return, cst.Yield)) and node.value is not None:
            if _mentions(node.value, var):
                facts.escaped = True
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            if any(n.name.value == var for n in node.names):
                facts.escaped = True
    return facts


_HARMLESS = frozenset({"print", "len", "str", "repr", "isinstance", "hasattr", "getattr", "type", "id", "vars", "format", "count_parameters"})
_LOGGING = frozenset({"info", "debug", "warning", "warn", "error", "log", "print", "write"})


def _harmless_call(ctx: FileContext, call: cst.Call) -> bool:
    """Calls that take a model without moving it: wrappers, printing, logging."""
    if ctx.qualified_name(call.func) in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL:
        return True
    if isinstance(call.func, cst.Name):
        return call.func.value in _HARMLESS
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in _LOGGING


def _mentions(node: cst.BaseExpression, var: str) -> bool:
    if dotted_name(node) == var:
        return True
    if isinstance(node, (cst.Tuple, cst.List)):
        return any(isinstance(e, cst.Element) and _mentions(e.value, var) for e in node.elements)
    if isinstance(node, cst.Dict):
        return any(isinstance(e, cst.DictElement) and _mentions(e.value, var) for e in node.elements)
    return False


_SETS_DEVICE = frozenset({"set_device", "set_device_index", "device_index"})


def set_device_calls(ctx: FileContext) -> list[cst.Call]:
    """Calls that change the current device: `torch.cuda.set_device(...)`, any
    `*.set_device(...)`/`set_device_index(...)`, or `with torch.cuda.device(...)` (comments do not count)."""
    if "set_device" not in ctx.source and "cuda.device(" not in ctx.source:
        return []
    found = []
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if name in _SETS_DEVICE or ctx.qualified_name(func) == "torch.cuda.device":
            found.append(call)
    return found


def set_device_called(ctx: FileContext, at: cst.CSTNode | None = None) -> bool:
    """The code changes the current device; with `at`, on the way to `at`: anywhere in another
    function (a set-up helper), or before `at` in its own function and not in a branch that
    leaves `at` out (`if args.gpu is not None: set_device(...)` does not cover the `else`)."""
    calls = set_device_calls(ctx)
    if at is None or not calls:
        return bool(calls)
    root = scope_of(ctx, at)
    scope = scope_facts(ctx, root)
    position = scope.order.get(id(statement_of(ctx, at)), len(scope.nodes))
    around = {id(a) for a in ctx.index.ancestors(at)}
    for call in calls:
        if scope_of(ctx, call) is not root:
            if not _conditional(ctx, call):
                return True  # an unconditional set-up helper
            continue
        if scope.order.get(id(call), position) >= position:
            continue
        blocks = [
            a for a in ctx.index.ancestors(call)
            if isinstance(a, (cst.IndentedBlock, cst.SimpleStatementSuite)) and scope_of(ctx, a) is root and a is not getattr(root, "body", None)
        ]
        if all(id(block) in around for block in blocks):
            return True
    return False


def _conditional(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`node` runs only under an `if` or a loop of its own function."""
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Module)):
            return False
        if isinstance(ancestor, (cst.If, cst.For, cst.While)):
            return True
    return False


def string_constants(ctx: FileContext) -> frozenset[str]:
    """Every string literal of the code (comments left out), for "does the code say X" tests."""
    def build(c: FileContext) -> frozenset[str]:
        found = set()
        for node in c.index.of_type(cst.SimpleString):
            value = node.evaluated_value
            if isinstance(value, str):
                found.add(value)
        return frozenset(found)

    return ctx.shared("module_placement.strings", build)


# ---------------------------------------------------------------------------- shared by the rules


def short(ctx: FileContext, node: cst.CSTNode, limit: int = 60) -> str:
    """Source of `node` for a message, or `callee(...)` when it is long or spans lines."""
    code = ctx.code_for(node).strip()
    if len(code) <= limit and "\n" not in code:
        return code
    if isinstance(node, cst.Call):
        return f"{ctx.code_for(node.func).strip()}(...)"
    return code.split("\n", 1)[0][:limit] + "..."


def wrapped_split(ctx: FileContext, site: WrapperSite) -> tuple[str, tuple[Placement, Placement]] | None:
    """(model text, two submodules on different devices) for the model a wrapper wraps."""
    if site.wrapped is None:
        return None
    resolver = resolver_for(ctx, site.call)
    base, _ = chain_base(resolver, site.wrapped)
    classes = class_placements(ctx)
    if isinstance(base, cst.Call):
        callee = dotted_name(base.func)
        if callee in classes:
            pair = classes[callee].split()
            return (short(ctx, base), pair) if pair else None
        return None
    var = dotted_name(base)
    if var is None:
        return None
    # Only a class placing submodules, or code moving `var.<sub>`, can split the model.
    if not classes and not re.search(re.escape(var) + r"\.\w+\b[^\n]*\.(to|cuda)\(", ctx.source):
        return None
    facts = history(ctx, var, site.call)
    placements: dict[str, Placement] = {}
    if facts.origin in classes:
        placements.update(classes[facts.origin].placements)
    placements.update(facts.sub_moves)
    pair = split_of(list(placements.values()))
    return (var, pair) if pair else None


@dataclass
class Usage:
    """What a scope does with a variable after one statement."""

    moves: list[tuple[Device, cst.CSTNode]] = field(default_factory=list)
    escaped: bool = False
    called: bool = False


def usage_after(ctx: FileContext, var: str, site: cst.CSTNode) -> Usage:
    """Moves, calls and escapes of `var` after the statement of `site`, until `var` is rebound."""
    scope = scope_facts(ctx, scope_of(ctx, site))
    resolver = resolver_for(ctx, site)
    statement = statement_of(ctx, site)
    start = scope.order.get(id(statement), -1)
    inside = {id(n) for n in ctx.index.walk(statement)}
    usage = Usage()
    for node in scope.nodes[start + 1:]:
        if id(node) in inside:
            continue
        if isinstance(node, cst.Assign) and any(dotted_name(t.target) == var for t in node.targets):
            base, device = chain_base(resolver, node.value)
            if dotted_name(base) != var:
                break
        if isinstance(node, cst.Call):
            moved = resolver.move(node)
            if moved is not None and dotted_name(strip_self_returning(moved[0])) == var:
                usage.moves.append((moved[1], node))
            elif dotted_name(node.func) == var:
                usage.called = True
            elif any(dotted_name(arg.value) == var for arg in node.args) and not _harmless_call(ctx, node):
                usage.escaped = True
        elif isinstance(node, (cst.Return, cst.Yield)) and node.value is not None and _mentions(node.value, var):
            usage.escaped = True
    return usage


def moves_itself(ctx: FileContext, class_name: str) -> bool:
    """Whether the class's `__init__` moves the whole module (`self.to(device)`, `self.cuda()`)."""
    cls = module_classes(ctx).get(class_name)
    init = methods(cls).get("__init__") if cls is not None else None
    if init is None:
        return False
    resolver = resolver_for(ctx, init.body)
    for node in scope_facts(ctx, init).nodes:
        if isinstance(node, cst.Call):
            moved = resolver.move(node)
            if moved is not None and isinstance(moved[0], cst.Name) and moved[0].value == "self":
                return True
    return False


def wrapper_chain_moves(ctx: FileContext, site: WrapperSite) -> list[tuple[Device, cst.CSTNode]]:
    """Moves chained on the wrapper call itself: `DP(model).cuda()`."""
    resolver = resolver_for(ctx, site.call)
    moves = []
    node: cst.CSTNode = site.call
    for parent in ctx.index.ancestors(site.call):
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _KEEPS_MODULE:
            node = parent
            continue
        if isinstance(parent, cst.Call) and parent.func is node:
            moved = resolver.move(parent)
            if moved is not None:
                moves.append((moved[1], parent))
            node = parent
            continue
        break
    return moves


def wrapper_at(ctx: FileContext, var: str, node: cst.CSTNode) -> WrapperSite | None:
    """The wrapper site that `var` holds at `node`: wrapped earlier in the same scope, not rebound since."""
    root = scope_of(ctx, node)
    scope = scope_facts(ctx, root)
    position = scope.order.get(id(statement_of(ctx, node)))
    if position is None:
        return None
    best: tuple[int, WrapperSite] | None = None
    for site in wrapper_sites(ctx):
        if site.target != var or site.scope is not root:
            continue
        start = scope.order.get(id(site.statement))
        if start is not None and start < position and (best is None or start > best[0]):
            best = (start, site)
    if best is None:
        return None
    resolver = resolver_for(ctx, node)
    inside = {id(n) for n in ctx.index.walk(best[1].statement)}
    for between in scope.nodes[best[0] + 1:position]:
        if id(between) in inside:
            continue
        if isinstance(between, cst.Assign) and any(dotted_name(t.target) == var for t in between.targets):
            if dotted_name(chain_base(resolver, between.value)[0]) != var:
                return None
    return best[1]


def built_on_cpu(ctx: FileContext, base: cst.BaseExpression, facts: History | None) -> bool:
    """Whether the wrapped model is certainly on the CPU when built: a call of a class of this file
    (that places nothing itself) or of `torch.nn`/`torchvision.models`, with no device argument."""
    if isinstance(base, cst.Call):
        call = base
    elif facts is not None and facts.bind is not None and facts.trusted:
        call = chain_base(resolver_for(ctx, base), facts.bind)[0]
        if not isinstance(call, cst.Call):
            return False
    else:
        return False
    callee = dotted_name(call.func) or ""
    qualified = ctx.qualified_name(call.func) or ""
    if callee in module_classes(ctx):
        if callee in class_placements(ctx) or moves_itself(ctx, callee):
            return False
    elif not qualified.startswith(_TRUSTED_PREFIXES) or qualified in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL:
        return False
    for arg in call.args:
        if arg.star:
            return False
        words = (arg.keyword.value if arg.keyword else "") + " " + (dotted_name(arg.value) or "")
        if any(w in words.lower() for w in ("device", "gpu", "cuda", "rank")):
            return False
    return True


_SPREADING_MAPS = frozenset({"auto", "balanced", "balanced_low_0", "sequential"})


def spread_by_loader(ctx: FileContext, site: WrapperSite) -> str | None:
    """How the wrapped model was spread over several GPUs by its loader, else None.

    `X.from_pretrained(..., device_map="auto")` (or "balanced", "sequential", or a dict naming
    several devices) and `model.parallelize()` put different layers on different GPUs.
    """
    if site.wrapped is None:
        return None
    resolver = resolver_for(ctx, site.call)
    base, moved = chain_base(resolver, site.wrapped)
    if moved is not None:
        return None
    var = dotted_name(base)
    bind: cst.BaseExpression | None = base if isinstance(base, cst.Call) else None
    if var is not None:
        facts = history(ctx, var, site.call)
        if facts.moves:
            return None  # moved whole afterwards
        bind = facts.bind
        # `parallelize()` is trusted only on a Hugging Face model (`X.from_pretrained(...)`).
        loader = chain_base(resolver, bind)[0] if bind is not None else None
        loaded = isinstance(loader, cst.Call) and (dotted_name(loader.func) or "").endswith("from_pretrained")
        scope = scope_facts(ctx, scope_of(ctx, site.call))
        limit = scope.order.get(id(site.statement), len(scope.nodes))
        for node in scope.nodes[:limit]:
            if (
                loaded and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                and node.func.attr.value == "parallelize" and dotted_name(node.func.value) == var
            ):
                return f"`{short(ctx, node)}` spreads over several GPUs"
    if bind is not None:
        bind = chain_base(resolver, bind)[0]
    if not isinstance(bind, cst.Call):
        return None
    for arg in bind.args:
        if arg.keyword is None or arg.keyword.value != "device_map":
            continue
        value = arg.value
        text = _string(value)
        if text in _SPREADING_MAPS:
            return f'`device_map="{text}"` spreads over the visible GPUs'
        if isinstance(value, cst.Dict):
            targets = {ctx.code_for(e.value).strip() for e in value.elements if isinstance(e, cst.DictElement)}
            if len(targets) > 1:
                return f"`device_map={short(ctx, value, 40)}` spreads over several devices"
    return None
