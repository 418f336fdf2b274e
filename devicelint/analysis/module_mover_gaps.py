"""Plain attributes that an `nn.Module`'s own move leaves behind.

`nn.Module.to()` moves parameters, buffers and submodules through `_apply`; a module that keeps
tensors in plain attributes (training inputs, a cache) moves them by hand in its own `_apply`,
`to` or `cuda` (`self.train_x = fn(self.train_x)`). A plain attribute that such a mover neither
moves nor resets, but that some method fills with an instance of a class of the file that keeps
tensors (a prediction cache solved on the old device), stays where it was built (DL112; a plain
tensor attribute left so is DL102's).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.custom_movers import moved_attributes
from devicelint.analysis.facts import file_facts
from devicelint.analysis.modules import methods
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import move_call
from devicelint.context import FileContext

# The module's own moves, in the order they are looked at.
MODULE_MOVES = ("_apply", "to", "cuda")
# torch packages whose calls build objects that are no tensors (modules, optimizers, loaders).
_NOT_TENSOR_PACKAGES = ("torch.nn.", "torch.optim.", "torch.utils.", "torch.distributions.", "torch.cuda.")


@dataclass(frozen=True)
class ModuleMoverGap:
    """`self.<attr>` (set at `node`) that the module's own `mover` leaves where it was."""

    cls_name: str
    mover: str
    attr: str
    moved: str
    node: cst.CSTNode


def module_mover_gaps(
    ctx: FileContext, cls: cst.ClassDef, own: Mapping[str, cst.FunctionDef]
) -> Iterator[ModuleMoverGap]:
    """The gaps of the first own mover of the module class `cls` that moves a plain attribute by
    hand; nothing when no mover does, or when it reaches attributes generically."""
    model = file_facts(ctx).class_model(cls.name.value)
    registered = set(model.registered) | set(model.submodules) if model is not None else set()
    for name in MODULE_MOVES:
        mover = own.get(name)
        if mover is None:
            continue
        by_hand = _moved_by_hand(ctx, mover)
        if not by_hand:
            continue
        handled = moved_attributes(ctx, cls, own, [name])
        if handled is None:
            return
        for attr, node in _tensor_holders(ctx, cls, own).items():
            if attr not in handled and attr not in registered:
                yield ModuleMoverGap(cls.name.value, name, attr, sorted(by_hand)[0], node)
        return


def _moved_by_hand(ctx: FileContext, mover: cst.FunctionDef) -> set[str]:
    """`self.<attr>` that the mover rebinds to a moved copy of itself: `fn(self.x)` in `_apply`
    (its first parameter after `self` is the function applied to every tensor), or
    `self.x.to(...)` / `.cuda(...)`."""
    params = mover.params.params
    fn = params[1].name.value if mover.name.value == "_apply" and len(params) > 1 else None
    moved: set[str] = set()
    for node in ctx.index.walk(mover.body):
        if type(node) is not cst.Assign:
            continue
        for target in node.targets:
            attr = self_attribute(target.target)
            if attr is not None and _mentions_moved(ctx, node.value, attr, fn):
                moved.add(attr)
    return moved


def _mentions_moved(ctx: FileContext, value: cst.BaseExpression, attr: str, fn: str | None) -> bool:
    for node in ctx.index.walk(value):
        if type(node) is not cst.Call:
            continue
        if fn is not None and type(node.func) is cst.Name and node.func.value == fn:
            return True
        if move_call(node) is not None and any(
            self_attribute(part) == attr
            for part in ctx.index.walk(node.func.value)  # type: ignore[attr-defined]  # move_call() matched `x.<method>(...)`
        ):
            return True
    return False


def _tensor_holders(ctx: FileContext, cls: cst.ClassDef, own: Mapping[str, cst.FunctionDef]) -> dict[str, cst.CSTNode]:
    """Plain attributes that some method of the class sets to an instance of a class of the
    file that keeps tensors -> the first such assignment's value. (A plain tensor attribute that
    the mover forgets is DL102's.)"""
    found: dict[str, cst.CSTNode] = {}
    for method in own.values():
        for node in ctx.index.walk(method.body):
            if type(node) is not cst.Assign or len(node.targets) != 1:
                continue
            attr = self_attribute(node.targets[0].target)
            if attr is None or attr in found:
                continue
            if _tensor_keeper(ctx, node.value):
                found[attr] = node.value
    return found


def _tensor_keeper(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`PredictionCache(...)`: a class of the file (not a module) whose `__init__` sets a
    `self.<attr>` to a tensor."""
    if type(value) is not cst.Call or type(value.func) is not cst.Name:
        return False
    facts = file_facts(ctx)
    for cls in ctx.index.of_type(cst.ClassDef):
        if cls.name.value != value.func.value or facts.class_model(cls.name.value) is not None:
            continue
        init = methods(cls).get("__init__")
        if init is None:
            return False
        return any(
            type(node) is cst.Assign
            and any(self_attribute(t.target) is not None for t in node.targets)
            and (facts.value(node.value).is_tensor or _torch_result(ctx, node.value))
            for node in ctx.index.walk(init.body)
        )
    return False


def _torch_result(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """A call of a torch function that returns a tensor (`torch.zeros(n)`, `torch.cov(x)`,
    `torch.linalg.cholesky(a)`), not a constructor of another object (`torch.device`,
    `torch.Generator`, `torch.nn.Linear`)."""
    qualified = ctx.qualified_name(value.func) if type(value) is cst.Call else None
    if qualified is None or not qualified.startswith("torch.") or qualified.startswith(_NOT_TENSOR_PACKAGES):
        return False
    last = qualified.rsplit(".", 1)[-1]
    return last[:1].islower() and last not in ("device", "dtype")
