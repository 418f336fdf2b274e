"""Names left holding a value from before the code moved it: `prompt = x`, then `x = x.to(device)`.

Rebinding a name to its moved copy moves nothing else: another name bound to the value before
the move (the value itself, a part of it, a copy of it made with a tensor method that keeps the
place) still holds the unmoved tensor. The code moves `x` because it may come from elsewhere
(a caller's CPU tensor), so the old alias is taken for a CPU value from the move on; where it
later meets values on the device, the rules that read meetings report it.

The placement interpreter keeps the aliases a function makes (`Aliases`), in statement order,
and asks `stale_after_move` at each `x = x.to(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.placement_facts import ACCELERATOR, CPU, DEVICE, UNKNOWN, Fact, moves_to_accelerator
from devicelint.analysis.vocabulary import PRESERVING_METHODS

# Methods that copy or view a tensor where it is (`x.clone()`, `x.detach()`, `x.long()`).
_KEEPING_METHODS = PRESERVING_METHODS | {"clone", "detach", "contiguous", "view", "reshape", "squeeze", "unsqueeze"}


def alias_source(value: cst.BaseExpression) -> cst.Name | None:
    """The name whose value `value` is, or holds a part or a same-place copy of: `x`,
    `x if isinstance(x, torch.Tensor) else None`, `x[0]`, `x.clone()`, `x["input_ids"]`."""
    if type(value) is cst.Name:
        return value if value.value not in ("None", "True", "False") else None
    if type(value) is cst.IfExp:
        body, orelse = alias_source(value.body), alias_source(value.orelse)
        if body is not None and orelse is not None and body.value != orelse.value:
            return None  # two names: which one it holds depends on the path
        return body or orelse
    if type(value) is cst.Subscript:
        return value.value if type(value.value) is cst.Name else None
    if (
        type(value) is cst.Call
        and type(value.func) is cst.Attribute
        and value.func.attr.value in _KEEPING_METHODS
        and type(value.func.value) is cst.Name
    ):
        return value.func.value
    return None


def moved_in_place(assign: cst.Assign) -> tuple[str, cst.Call] | None:
    """The name and the move when `assign` rebinds a name to its own move towards an
    accelerator: `x = x.to(device)`, `x = x.cuda()`, or part by part,
    `batch = {k: v.to(device) for k, v in batch.items()}`, `xs = [t.cuda() for t in xs]`,
    `xs = tuple(t.to(device) for t in xs)`."""
    if len(assign.targets) != 1 or type(assign.targets[0].target) is not cst.Name:
        return None
    name = assign.targets[0].target.value
    value = assign.value
    move = _move_of(value)
    if move is not None:
        receiver = move.func.value  # type: ignore[attr-defined]  # a move is a method call
        return (name, move) if type(receiver) is cst.Name and receiver.value == name else None
    if (
        type(value) is cst.Call
        and type(value.func) is cst.Name
        and value.func.value in ("tuple", "list")
        and len(value.args) == 1
    ):
        value = value.args[0].value
    if not isinstance(value, (cst.DictComp, cst.ListComp, cst.GeneratorExp)):
        return None
    element = _move_of(value.value if type(value) is cst.DictComp else value.elt)  # type: ignore[union-attr]  # DictComp has `value`, the others `elt`
    loop = value.for_in
    if loop.inner_for_in is not None or element is None:
        return None
    moved = element.func.value  # type: ignore[attr-defined]  # a move is a method call
    iterated = loop.iter
    if type(value) is cst.DictComp:
        # `for k, v in batch.items()`: the move of `v`
        if not (
            type(iterated) is cst.Call
            and type(iterated.func) is cst.Attribute
            and iterated.func.attr.value == "items"
            and type(loop.target) is cst.Tuple
            and len(loop.target.elements) == 2
        ):
            return None
        iterated, part = iterated.func.value, loop.target.elements[1].value
    else:
        part = loop.target
    if not (type(iterated) is cst.Name and iterated.value == name and type(part) is cst.Name):
        return None
    if type(moved) is not cst.Name or moved.value != part.value:
        return None
    return name, element


def _move_of(node: cst.BaseExpression) -> cst.Call | None:
    """`node` when it is a move that may target an accelerator."""
    return node if type(node) is cst.Call and moves_to_accelerator(node) else None


def on_accelerator(fact: Fact) -> bool:
    """Certainly on the accelerator: a device tensor, or what a move there returns (`batch.to(device)`
    of a value the engine does not know for a tensor)."""
    return fact.where == ACCELERATOR and fact.kind in (DEVICE, UNKNOWN)


@dataclass
class _Alias:
    source: str
    statement: cst.Assign  # the statement that bound the alias
    fact: Fact  # what the alias held when it was bound


@dataclass
class Aliases:
    """The aliases of one function's names, as bound so far in statement order."""

    bound: dict[str, _Alias] = field(default_factory=dict)

    def rebound(self, name: str) -> None:
        """`name` holds something new: it aliases nothing, and nothing aliases it any more."""
        self.bound.pop(name, None)
        for alias in [a for a, entry in self.bound.items() if entry.source == name]:
            del self.bound[alias]

    def bind(self, statement: cst.Assign, name: str, fact: Fact) -> None:
        source = alias_source(statement.value)
        if source is not None and source.value != name:
            self.bound[name] = _Alias(source.value, statement, fact)

    def stale_after_move(self, name: str, before: Fact, env: dict[str, Fact]) -> dict[str, Fact]:
        """The aliases of `name` that still hold its value from before the move, each with the
        CPU fact it takes from now on (its origin: the statement that bound the alias).
        Nothing when the value was already on the accelerator."""
        if on_accelerator(before) or before.kind == CPU:
            return {}
        stale: dict[str, Fact] = {}
        for alias, entry in self.bound.items():
            held = env.get(alias)
            if entry.source == name and held == entry.fact and not on_accelerator(held) and held.kind != CPU:
                stale[alias] = Fact(CPU, where="cpu", origin=entry.statement, left_behind=True)
        return stale
