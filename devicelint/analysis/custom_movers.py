"""A class's own device moves: which methods move the object's tensors by hand, and which
`self.<attr>` they move.

A class that is not an `nn.Module` (a batch, a masked container, a simulator's state) moves its
tensors itself: in `to()`/`cuda()`, or in a method of any name that moves several of its
attributes in place (`self.src = self.src.to(self.device)` in `_make_cuda()`). An attribute such
a method does not mention stays where it was; one it only hands on as it is to a new instance
of the class (`return Masked(self.data.to(d), self.mask)`) stays there too. DL102 and DL112 read
the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import move_call
from devicelint.context import FileContext

# The moves every tensor-holding class may override by these names.
NAMED_MOVERS = ("to", "cuda")
# In a mover, these reach every attribute by name: it moves the whole object, not a list.
GENERIC_ACCESS = frozenset(
    {
        "__dict__",
        "vars",
        "getattr",
        "setattr",
        "fields",
        "asdict",
        "astuple",
        "__slots__",
        "__annotations__",
        "_fields",
        "_asdict",
        "_replace",
        "apply_to_collection",
        "named_buffers",
        "buffers",
    }
)
# A method of another name is a mover when it moves at least this many attributes in place.
_IN_PLACE_MOVES = 2


def own_movers(ctx: FileContext, own: Mapping[str, cst.FunctionDef]) -> list[str]:
    """The class's own movers by name: `to`/`cuda` where defined, and every other method that
    moves two or more of its attributes in place (`self.x = self.x.to(device)`)."""
    found = [name for name in NAMED_MOVERS if name in own]
    for name, method in own.items():
        if name in NAMED_MOVERS or name.startswith("__") or name == "_apply":
            continue
        if len(in_place_moves(ctx, method)) >= _IN_PLACE_MOVES:
            found.append(name)
    return found


def in_place_moves(ctx: FileContext, method: cst.FunctionDef) -> set[str]:
    """The attributes `method` replaces by their own moved copy (`self.x = self.x.cuda()`)."""
    moved: set[str] = set()
    for node in ctx.index.walk(method.body):
        if type(node) is not cst.Assign or len(node.targets) != 1:
            continue
        attr = self_attribute(node.targets[0].target)
        value = node.value
        if attr is None or type(value) is not cst.Call or move_call(value) is None:
            continue
        receiver = value.func.value  # type: ignore[attr-defined]  # move_call() matched `x.<method>(...)`
        if self_attribute(receiver) == attr:
            moved.add(attr)
    return moved


def moved_attributes(
    ctx: FileContext, cls: cst.ClassDef, own: Mapping[str, cst.FunctionDef], movers: list[str]
) -> set[str] | None:
    """The `self.<attr>` names the movers (and the methods of the class they call) handle; None
    when they reach attributes generically (`vars(self)`, `getattr`, `dataclasses.fields`). An
    attribute that a mover only hands on unchanged to a new instance of the class is not
    handled: the copy holds the same tensor where it was."""
    handled: set[str] = set()
    todo = [own[name] for name in movers if name in own]
    seen: set[int] = set()
    while todo:
        method = todo.pop()
        if id(method) in seen:
            continue
        seen.add(id(method))
        for node in ctx.index.walk(method.body):
            if type(node) is cst.Name and node.value in GENERIC_ACCESS:
                return None
            if type(node) is cst.Attribute and node.attr.value in GENERIC_ACCESS:
                return None
            attr = self_attribute(node) if type(node) is cst.Attribute else None
            if attr is None or type(node) is not cst.Attribute:
                continue
            if attr in own:
                todo.append(own[attr])
            if not _copied_as_is(ctx, cls, node):
                handled.add(attr)
    return handled


def copied_as_is(
    ctx: FileContext, cls: cst.ClassDef, own: Mapping[str, cst.FunctionDef], mover: str
) -> dict[str, cst.Attribute]:
    """`self.<attr>` that the mover hands unchanged to the new instance it builds, by name (the
    first such place)."""
    found: dict[str, cst.Attribute] = {}
    method = own.get(mover)
    for node in ctx.index.walk(method.body) if method is not None else ():
        attr = self_attribute(node) if type(node) is cst.Attribute else None
        if attr is not None and type(node) is cst.Attribute and _copied_as_is(ctx, cls, node):
            found.setdefault(attr, node)
    return found


def _copied_as_is(ctx: FileContext, cls: cst.ClassDef, node: cst.Attribute) -> bool:
    """`self.mask` as a whole argument of `Cls(...)`, `type(self)(...)` or
    `self.__class__(...)`: the new instance gets the very same tensor."""
    arg = ctx.index.parent(node)
    call = ctx.index.parent(arg) if type(arg) is cst.Arg else None
    if type(call) is not cst.Call or arg.value is not node:  # type: ignore[union-attr]  # an Arg here
        return False
    func = call.func
    if type(func) is cst.Name:
        return func.value == cls.name.value
    if type(func) is cst.Call and type(func.func) is cst.Name and func.func.value == "type":
        return True
    return type(func) is cst.Attribute and func.attr.value == "__class__"
