"""Which submodule a module class places on which device in `__init__`, and which classes
move themselves or are certainly built on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.model_events.devices import (
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    TRUSTED_PREFIXES,
    Placement,
    chain_base,
    resolver_for,
)
from devicelint.analysis.devices import distinct
from devicelint.analysis.facts import FileFacts, file_facts
from devicelint.analysis.placement_classes import ClassFacts, class_facts
from devicelint.analysis.model_events.variables import History
from devicelint.analysis.modules import module_classes
from devicelint.analysis.names import dotted_name
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
    return ctx.shared("model_events.classes", _build_class_placements)


def _build_class_placements(ctx: FileContext) -> dict[str, ClassPlacement]:
    """From the placement engine: the submodules whose device `__init__` states, unless
    `__init__` then moves the whole module (`self.to(dev)` puts everything on one device)."""
    out: dict[str, ClassPlacement] = {}
    facts = file_facts(ctx)
    for name, cls in class_facts(ctx).items():
        placed = facts.placed_submodules(cls)
        if not placed or _moves_whole_module(facts, cls):
            continue
        init = cls.methods["__init__"]
        where = {attr: value for attr, value, method in cls.assignments if method is init}
        out[name] = ClassPlacement(cls.node, {
            attr: Placement(attr, device, where.get(attr, init)) for attr, device in placed.items()
        })
    return out


def _moves_whole_module(facts: FileFacts, cls: ClassFacts) -> bool:
    init = cls.methods.get("__init__")
    scope = facts.placement.scopes.get(id(init)) if init is not None else None
    moved = scope.facts.get("self") if scope is not None else None
    return moved is not None and moved.where is not None


def _self_attr(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def moves_itself(ctx: FileContext, class_name: str) -> bool:
    """Whether the class's `__init__` moves the whole module (`self.to(device)`, `self.cuda()`)."""
    cls = class_facts(ctx).get(class_name)
    return cls is not None and _moves_whole_module(file_facts(ctx), cls)


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
