"""Optimizer classes of a file whose state `Optimizer.load_state_dict` cannot move.

`torch.optim.Optimizer.load_state_dict` casts the tensors it finds in each parameter's state
(directly, or inside dicts, lists and tuples there) to that parameter's device. Two places escape
it: a tensor an optimizer keeps in its param groups (`group["exp_avg_sq"] = torch.stack(...)`:
groups are restored as loaded), and tensors kept as attributes of objects stored in the state
(`state["precond"] = Preconditioner(p)`: the cast does not look inside objects). A state loaded
with `map_location="cpu"` then leaves those tensors on the CPU while the parameters are on the
GPU, unless the class overrides `load_state_dict` (or `__setstate__`) to move them itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.local_bindings import bindings
from devicelint.analysis.modules import methods
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.training.helpers import local_classes, optimizer_classes
from devicelint.context import FileContext

# Methods that repair the restored state themselves.
_RESTORERS = frozenset({"load_state_dict", "__setstate__"})
# Tensor methods whose result is a new tensor on the receiver's device.
_TENSOR_MAKERS = frozenset({"clone", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "detach"})


@dataclass(frozen=True)
class UncastState:
    """An optimizer class and where it keeps state that loading does not move."""

    cls: cst.ClassDef
    where: str  # `group["exp_avg_sq"]`, `Preconditioner` objects in its state
    node: cst.CSTNode  # the assignment that stores it
    # the class's own `load_state_dict` puts loaded tensors back into its state as they came
    restored_as_loaded: bool = False


def _makes_tensor(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """The expression builds a tensor: a `torch.*` call or a tensor-making method somewhere in it."""
    for node in ctx.index.walk(value):
        if type(node) is not cst.Call:
            continue
        qualified = ctx.qualified_name(node.func) or ""
        if qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1][:1].islower():
            return True
        if type(node.func) is cst.Attribute and node.func.attr.value in _TENSOR_MAKERS:
            return True
    return False


def _tensor_holder_classes(ctx: FileContext) -> set[str]:
    """Plain classes of the file (not optimizers) whose `__init__` stores a tensor on `self`."""
    optimizers = {id(c) for c in optimizer_classes(ctx)}
    found: set[str] = set()
    for name, cls in local_classes(ctx).items():
        if id(cls) in optimizers or any(dotted_name(b.value) not in (None, "object") for b in cls.bases):
            continue  # a module, a dataclass base, ...: only plain holders
        init = methods(cls).get("__init__")
        if init is None:
            continue
        for node in ctx.index.walk(init):
            if type(node) is not cst.Assign or not _makes_tensor(ctx, node.value):
                continue
            if any(type(t.target) is cst.Attribute and dotted_name(t.target.value) == "self" for t in node.targets):
                found.add(name)
                break
    return found


def _string_key(target: cst.BaseAssignTargetExpression) -> tuple[cst.BaseExpression, str] | None:
    """`holder["key"]` as `(holder, "key")`."""
    if type(target) is not cst.Subscript or len(target.slice) != 1:
        return None
    index = target.slice[0].slice
    if type(index) is not cst.Index:
        return None
    key = literal_value(index.value) if type(index.value) is cst.SimpleString else None
    return (target.value, key) if isinstance(key, str) else None


def _iterates_param_groups(ctx: FileContext, name: str, use: cst.CSTNode) -> bool:
    """`name` is the variable of an enclosing `for name in self.param_groups:`."""
    node: cst.CSTNode | None = use
    while node is not None:
        node = ctx.index.parent(node)
        if (
            type(node) is cst.For
            and type(node.target) is cst.Name
            and node.target.value == name
            and (dotted_name(node.iter) or "").endswith("param_groups")
        ):
            return True
    return False


def _state_entry(ctx: FileContext, holder: cst.BaseExpression, use: cst.CSTNode) -> bool:
    """`self.state[p]` (or the wrapped optimizer's, `self.optimizer.state[p]`), or a name bound
    to it (`state = self.state[p]`)."""
    if type(holder) is cst.Subscript and _own_state(holder.value):
        return True
    if type(holder) is cst.Name:
        values = bindings(ctx, holder.value, use) or []
        return bool(values) and all(type(v) is cst.Subscript and _own_state(v.value) for v in values)
    return False


def _own_state(node: cst.BaseExpression) -> bool:
    """`self.state`, or `self.<optimizer>.state` of the optimizer a wrapper holds."""
    name = dotted_name(node) or ""
    return name == "self.state" or (name.startswith("self.") and name.count(".") == 2 and name.endswith(".state"))


def _wrapper_classes(ctx: FileContext) -> list[cst.ClassDef]:
    """Plain classes of the file that wrap an optimizer (the fp16 and lookahead wrappers): they
    are no `torch.optim` subclass, step it and restore it through their own `load_state_dict`,
    which hands the state on to the one they hold (`self.optimizer.load_state_dict(sd)`)."""
    optimizers = {id(c) for c in optimizer_classes(ctx)}
    found = []
    for cls in local_classes(ctx).values():
        own = methods(cls)
        restorer = own.get("load_state_dict")
        if id(cls) in optimizers or restorer is None or "step" not in own:
            continue
        if any(
            type(n) is cst.Call
            and type(n.func) is cst.Attribute
            and n.func.attr.value == "load_state_dict"
            and (dotted_name(n.func.value) or "").count(".") == 1
            and (dotted_name(n.func.value) or "").startswith("self.")
            for n in ctx.index.walk(restorer)
        ):
            found.append(cls)
    return found


def uncast_state_classes(ctx: FileContext) -> dict[str, UncastState]:
    """Optimizer classes of the file (by name) that keep state `load_state_dict` cannot move and
    do not restore it themselves (memoised)."""

    def build(c: FileContext) -> dict[str, UncastState]:
        found: dict[str, UncastState] = {}
        holders: set[str] | None = None
        for cls in [*optimizer_classes(c), *_wrapper_classes(c)]:
            own = methods(cls)
            if _RESTORERS & set(own):
                restorer = own.get("load_state_dict")
                put_back = _put_back_as_loaded(c, restorer) if restorer is not None else None
                if put_back is not None:
                    node, key = put_back
                    entry = f'`state["{key}"]`' if key is not None else "each parameter's state"
                    found[cls.name.value] = UncastState(
                        cls, f"{entry}, which its own `load_state_dict` puts back as loaded", node, True
                    )
                continue
            for func in own.values():
                for node in c.index.walk(func):
                    if type(node) is not cst.Assign or len(node.targets) != 1:
                        continue
                    keyed = _string_key(node.targets[0].target)
                    if keyed is None:
                        continue
                    holder, key = keyed
                    if (
                        type(holder) is cst.Name
                        and _iterates_param_groups(c, holder.value, node)
                        and _makes_tensor(c, node.value)
                    ):
                        found.setdefault(
                            cls.name.value, UncastState(cls, f'`{holder.value}["{key}"]` of its param groups', node)
                        )
                        continue
                    value = node.value
                    if type(value) is cst.Call and type(value.func) is cst.Name and _state_entry(c, holder, node):
                        if holders is None:
                            holders = _tensor_holder_classes(c)
                        if value.func.value in holders:
                            found.setdefault(
                                cls.name.value, UncastState(cls, f"`{value.func.value}` objects in its state", node)
                            )
        return found

    return ctx.shared("uncast_optimizer_state.classes", build)


def _put_back_as_loaded(ctx: FileContext, method: cst.FunctionDef) -> tuple[cst.Assign, str | None] | None:
    """`self.state[p]["key"] = value` in an override of `load_state_dict`, where `value` comes
    from the state dict it is handed (through names bound from it: `masks = state_dict.pop(...)`,
    `for i, mask in masks.items()`) and nothing moves it (`.to(...)`, `.cuda()`, `device=`): the
    entries bypass the device cast of `Optimizer.load_state_dict`, so they stay where the
    checkpoint was loaded."""
    params = [p.name.value for p in method.params.params if p.name.value != "self"]
    if not params:
        return None
    derived = {params[0]}
    changed = True
    while changed:
        changed = False
        for node in ctx.index.walk(method.body):
            if type(node) is cst.Assign and _mentions(node.value, derived):
                bound = {n.value for t in node.targets for n in ctx.index.walk(t.target) if type(n) is cst.Name}
            elif type(node) is cst.For and _mentions(node.iter, derived):
                bound = {n.value for n in ctx.index.walk(node.target) if type(n) is cst.Name}
            else:
                continue
            if not bound <= derived:
                derived |= bound
                changed = True
    derived.discard("self")
    for node in ctx.index.walk(method.body):
        if type(node) is not cst.Assign or len(node.targets) != 1:
            continue
        target = node.targets[0].target
        keyed = _string_key(target)
        if keyed is not None and _state_entry(ctx, keyed[0], node):
            key = keyed[1]
        elif type(target) is cst.Subscript and _own_state(target.value):
            key = None  # the parameter's whole state, `self.optimizer.state[p] = v`
        else:
            continue
        if _moves(node.value) or not _loaded_value(node.value, derived):
            continue
        return node, key
    return None


def _loaded_value(value: cst.BaseExpression, derived: set[str]) -> bool:
    """The loaded tensor itself, a part of it or a method's result on it (`mask`, `masks[i]`,
    `mask.float()`), not a new tensor that only uses a loaded index (`torch.ones_like(w[i])`)."""
    while True:
        if type(value) is cst.Call and type(value.func) is cst.Attribute:
            value = value.func.value
        elif type(value) is cst.Subscript:
            value = value.value
        else:
            break
    return type(value) is cst.Name and value.value in derived


def _mentions(node: cst.CSTNode, names: set[str]) -> bool:
    return any(type(n) is cst.Name and n.value in names for n in _walk(node))


def _moves(node: cst.CSTNode) -> bool:
    """A move or a placement somewhere in the expression (`.to(p.device)`, `.cuda()`, `device=`)."""
    for n in _walk(node):
        if type(n) is cst.Call:
            if type(n.func) is cst.Attribute and n.func.attr.value in ("to", "cuda", "copy_", "type_as"):
                return True
            if any(a.keyword is not None and a.keyword.value == "device" for a in n.args):
                return True
    return False


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)
