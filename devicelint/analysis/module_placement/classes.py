"""Which submodule a module class places on which device in `__init__`, and which classes
move themselves or are certainly built on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.module_placement.devices import (
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    TRUSTED_PREFIXES,
    Placement,
    chain_base,
    distinct,
    resolver_for,
)
from devicelint.analysis.module_placement.scopes import scope_facts
from devicelint.analysis.module_placement.variables import History
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import MOVE_METHODS
from devicelint.context import FileContext

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
    elif not qualified.startswith(TRUSTED_PREFIXES) or qualified in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL:
        return False
    for arg in call.args:
        if arg.star:
            return False
        words = (arg.keyword.value if arg.keyword else "") + " " + (dotted_name(arg.value) or "")
        if any(w in words.lower() for w in ("device", "gpu", "cuda", "rank")):
            return False
    return True
