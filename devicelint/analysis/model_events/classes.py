"""Which submodule a module class places on which device in `__init__`, and which classes
move themselves or are certainly built on the CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.default_device import CPU_DEFAULT, default_device_at
from devicelint.analysis.devices import DeviceId, distinct, parse_device
from devicelint.analysis.facts import FileFacts, file_facts
from devicelint.analysis.model_events.devices import (
    Device,
    Placement,
    chain_base,
    resolver_for,
    trusted_constructor,
)
from devicelint.analysis.model_events.scopes import module_functions, only_return, scope_facts
from devicelint.analysis.model_events.variables import History, history
from devicelint.analysis.modules import builds_cpu_project_module, imported_module_class, methods, module_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import ClassFacts, class_facts
from devicelint.analysis.placement_facts import is_legacy_cuda_constructor
from devicelint.analysis.training.helpers import callee, local_classes
from devicelint.context import FileContext


@dataclass(frozen=True)
class ClassPlacement:
    """Where `__init__` puts the submodules of one module class."""

    cls: cst.ClassDef
    placements: dict[str, Placement]
    # submodules moved in `__init__` to a device the code names but does not state
    # (`.to(self.dev1)` with `self.dev1 = torch.device(cfg.dev1)`)
    named: dict[str, Placement] = field(default_factory=dict)

    def split(self) -> tuple[Placement, Placement] | None:
        """Two submodules certainly placed on different devices, else None."""
        return split_of(list(self.placements.values()))

    def named_split(self) -> tuple[Placement, Placement] | None:
        """Two submodules placed on devices that are certainly different, or that the code names
        as numbered stages (`self.dev0` and `self.dev1`, `cfg.gpu_0` and `cfg.gpu_1`)."""
        placements = list(self.placements.values()) + list(self.named.values())
        return split_of(placements) or numbered_split(placements)


def split_of(placements: list[Placement]) -> tuple[Placement, Placement] | None:
    for i, first in enumerate(placements):
        for second in placements[i + 1 :]:
            if distinct(first.device, second.device):
                return first, second
    return None


_NUMBERED = re.compile(r"^(.*?[A-Za-z_])(\d+)$")


def numbered_split(placements: list[Placement]) -> tuple[Placement, Placement] | None:
    """Two placements on devices named alike but for their stage number (`dev0`/`dev1`)."""
    for i, first in enumerate(placements):
        one = _NUMBERED.match(first.device.text) if not first.device.literal else None
        if one is None:
            continue
        for second in placements[i + 1 :]:
            two = _NUMBERED.match(second.device.text) if not second.device.literal else None
            if two is not None and one.group(1) == two.group(1) and int(one.group(2)) != int(two.group(2)):
                return first, second
    return None


def imported_placements(ctx: FileContext, call: cst.BaseExpression) -> list[Placement]:
    """The submodules placed by the `__init__` of the class of another project module that `call`
    builds (`SplitNet()` after `from models import SplitNet`), each reported at `call`."""
    imported = imported_module_class(ctx, call.func) if type(call) is cst.Call else None
    if imported is None:
        return []
    return [
        Placement(attr, parse_device(text) or DeviceId(text, False) if stated else DeviceId(text, False), call)
        for attr, text, stated in imported.placed
    ]


def class_placements(ctx: FileContext) -> dict[str, ClassPlacement]:
    """Module classes of this file whose `__init__` places at least one submodule."""
    return ctx.shared("model_events.classes", _build_class_placements)


def _build_class_placements(ctx: FileContext) -> dict[str, ClassPlacement]:
    """From the placement engine: the submodules whose device `__init__` states, unless
    `__init__` then moves the whole module (`self.to(dev)` puts everything on one device)."""
    out: dict[str, ClassPlacement] = {}
    facts = file_facts(ctx)
    for name, cls in class_facts(ctx).items():
        init = cls.methods.get("__init__")
        if init is None or _moves_whole_module(facts, cls):
            continue
        placed = facts.placed_submodules(cls)
        where = {attr: value for attr, value, method in cls.assignments if method is init}
        named = {}
        resolver = resolver_for(ctx, init.body)
        for attr, value in where.items():
            device = chain_base(resolver, value)[1]
            if attr not in placed and device is not None and not device.literal and attr in cls.submodules:
                named[attr] = Placement(attr, device, value)
        if not placed and not named:
            continue
        out[name] = ClassPlacement(
            cls.node, {attr: Placement(attr, device, where.get(attr, init)) for attr, device in placed.items()}, named
        )
    return out


def _moves_whole_module(facts: FileFacts, cls: ClassFacts) -> bool:
    init = cls.methods.get("__init__")
    scope = facts.placement.scopes.get(id(init)) if init is not None else None
    moved = scope.facts.get("self") if scope is not None else None
    return moved is not None and moved.where is not None


def _self_attr(node: cst.BaseExpression) -> str | None:
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
        return node.attr.value
    return None


def moves_itself(ctx: FileContext, class_name: str) -> bool:
    """Whether the class's `__init__` moves the whole module (`self.to(device)`, `self.cuda()`),
    to a device the engine knows or to one it does not (`self.to(device)` with `device` picked at
    run time), or makes its tensors with a legacy CUDA constructor (`torch.cuda.FloatTensor(n)`):
    either way the instance is not certainly on the CPU."""
    cls = class_facts(ctx).get(class_name)
    if cls is None:
        return False
    if _moves_whole_module(file_facts(ctx), cls):
        return True
    init = cls.methods.get("__init__")
    if init is None:
        return False
    resolver = resolver_for(ctx, init.body)
    for node in scope_facts(ctx, init).nodes:
        if type(node) is not cst.Call:
            continue
        moved = resolver.move(node)
        if moved is not None and dotted_name(moved[0]) == "self" and moved[1].type != "cpu":
            return True
        if is_legacy_cuda_constructor(ctx.qualified_name(node.func)):
            return True  # `Parameter(torch.cuda.FloatTensor(n))`: its own tensors are made on the GPU
    return False


def built_on_cpu(ctx: FileContext, base: cst.BaseExpression, facts: History | None) -> bool:
    """Whether the wrapped model is certainly on the CPU when built: a call of a class of this file
    (that places nothing itself) or of `torch.nn`/`torchvision.models`, with no device argument,
    or of a builder function of this file that returns such a model unmoved (`build_model(cfg)`)."""
    return _built_on_cpu(ctx, base, facts, ())


def _built_on_cpu(ctx: FileContext, base: cst.BaseExpression, facts: History | None, visiting: tuple[int, ...]) -> bool:
    if type(base) is cst.Call:
        call = base
    elif facts is not None and facts.bind is not None and not facts.escaped and not facts.sub_moves:
        call = chain_base(resolver_for(ctx, base), facts.bind)[0]
        if type(call) is not cst.Call or not (facts.trusted or builder_of(ctx, call) is not None):
            return False
    else:
        return False
    if default_device_at(ctx, call).state != CPU_DEFAULT:
        return False  # built under `set_default_device("cuda")` or inside `with torch.device(...)`
    callee = dotted_name(call.func) or ""
    qualified = ctx.qualified_name(call.func) or ""
    builder = builder_of(ctx, call)
    if builder is not None:
        if id(builder) in visiting or len(visiting) > 3 or not _device_free(call):
            return False
        return _returns_cpu_model(ctx, builder, (*visiting, id(builder)))
    if callee in module_classes(ctx):
        if callee in class_placements(ctx) or moves_itself(ctx, callee):
            return False
    elif not trusted_constructor(qualified) and not builds_cpu_project_module(ctx, call):
        return False
    return _device_free(call)


def _device_free(call: cst.Call) -> bool:
    """No argument of the call names a device (`device=`, `gpu`, `rank`) or is unpacked."""
    for arg in call.args:
        if arg.star:
            return False
        words = (arg.keyword.value if arg.keyword else "") + " " + (dotted_name(arg.value) or "")
        if any(w in words.lower() for w in ("device", "gpu", "cuda", "rank")):
            return False
    return True


def built_where(ctx: FileContext, base: cst.BaseExpression, facts: History | None, site: cst.CSTNode) -> str:
    """` (`build_model(cfg)` returns it unmoved)` or ` (built in `__init__`)`: where a model that
    `built_on_cpu` judged comes from, when that is not the statement before `site`."""
    call = base if type(base) is cst.Call else None
    if call is None and facts is not None and facts.bind is not None:
        bound = chain_base(resolver_for(ctx, facts.bind), facts.bind)[0]
        call = bound if type(bound) is cst.Call else None
    if call is not None and builder_of(ctx, call) is not None:
        return f" (`{ctx.code_for(call.func).strip()}(...)` returns it unmoved)"
    if facts is not None and facts.bind is not None:
        where = ctx.index.enclosing_function(facts.bind)
        if where is not None and where is not ctx.index.enclosing_function(site):
            return f" (built in `{where.name.value}`)"
    return ""


def returned_device(ctx: FileContext, call: cst.Call) -> tuple[Device, cst.CSTNode] | None:
    """(device, the move) for a builder of the file whose one `return` hands back a model it
    moved (`return Net().to("cuda:1")`, or `model.cuda(1); return model`); else None."""
    builder = builder_of(ctx, call)
    if builder is None:
        return None
    node = only_return(ctx, builder)
    if node is None:
        return None
    base, moved = chain_base(resolver_for(ctx, node), node.value)  # type: ignore[arg-type]  # only_return() gives a `return <value>`
    if moved is not None:
        return moved, node
    var = dotted_name(base)
    if var is None or "." in var:
        return None
    facts = history(ctx, var, node)
    if facts.escaped or facts.sub_moves or not facts.moves:
        return None
    return facts.moves[-1]


def builder_of(ctx: FileContext, call: cst.Call) -> cst.FunctionDef | None:
    """The function of this file a call runs: `build_model(...)`, or `self.build_model(...)`
    inside a class that defines it (the summary of a builder is its returns)."""
    func = call.func
    if type(func) is cst.Name:
        if func.value in module_classes(ctx):
            return None
        return module_functions(ctx).get(func.value)
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
        cls = ctx.index.enclosing_class(call)
        if cls is not None:
            return methods(cls).get(func.attr.value)
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value != "self":
        # `Builder.make(net)`, `cls.make(net)`: a static or class method of a class of the file
        # (the engine's callee; an instance's own call, `net(x)`, is never a builder)
        return callee(ctx, call) if func.value.value == "cls" or func.value.value in local_classes(ctx) else None
    return None


def _returns_cpu_model(ctx: FileContext, function: cst.FunctionDef, visiting: tuple[int, ...]) -> bool:
    """Every `return` of the builder hands back a model built on the CPU and not moved since:
    a constructor call, or a local bound to one that nothing moved or handed on."""
    returns = [node for node in scope_facts(ctx, function).nodes if type(node) is cst.Return or type(node) is cst.Yield]
    if not returns or any(type(node) is cst.Yield or node.value is None for node in returns):
        return False
    for node in returns:
        value = node.value
        base, moved = chain_base(resolver_for(ctx, node), value)  # type: ignore[arg-type]  # `returns` holds `return <value>` only
        if moved is not None:
            return False
        var = dotted_name(base)
        facts = history(ctx, var, node) if var is not None and "." not in var else None
        if var is not None and (facts is None or facts.moves or facts.escaped):
            return False
        if not _built_on_cpu(ctx, base, facts, visiting):
            return False
    return True
