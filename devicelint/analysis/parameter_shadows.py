"""Classes of the file that copy the parameters they are built from: an exponential moving
average of the weights (`EMAModel(unet.parameters())` keeping `[p.clone().detach() for p in
parameters]`), a stochastic weight average, a lookahead's slow weights kept outside an optimizer.

Their copies are made where the parameters are when the object is built; moving the model later
does not move them, as it does not move an optimizer's eagerly made state (DL111 reads both).
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.training.helpers import optimizer_classes
from devicelint.analysis.training.reads import read_names
from devicelint.analysis.training.syntax import assigned_names
from devicelint.context import FileContext


def parameter_shadow_classes(ctx: FileContext) -> dict[str, cst.Call]:
    """Class name -> the copy its `__init__` stores on `self` from the parameters it is handed,
    for the classes of the file that are neither modules nor optimizers."""

    def build(c: FileContext) -> dict[str, cst.Call]:
        skipped = set(module_classes(c)) | {cls.name.value for cls in optimizer_classes(c)}
        found: dict[str, cst.Call] = {}
        for cls in c.index.of_type(cst.ClassDef):
            init = methods(cls).get("__init__")
            if cls.name.value in skipped or init is None:
                continue
            copy = _stored_copy(c, init)
            if copy is not None:
                found[cls.name.value] = copy
        return found

    return ctx.shared("parameter_shadows.classes", build)


def _stored_copy(ctx: FileContext, init: cst.FunctionDef) -> cst.Call | None:
    """A `.clone()` / `torch.clone` / `torch.*_like` of an element of a parameter of `__init__`
    whose name says it holds parameters (`parameters`, `params`, `model_params`), in the value
    of a `self.<attr> = ...` assignment."""
    held = {p.name.value for p in init.params.params[1:] if "param" in p.name.value.lower()}
    if not held:
        return None
    derived = set(held)
    for node in ctx.index.walk(init.body):
        if isinstance(node, (cst.For, cst.CompFor)) and read_names(ctx, node.iter) & derived:
            derived.update(assigned_names(node.target))
        elif type(node) is cst.Assign and read_names(ctx, node.value) & derived:
            for target in node.targets:
                derived.update(assigned_names(target.target))
    for node in ctx.index.walk(init.body):
        if type(node) is not cst.Assign or not any(self_attribute(t.target) is not None for t in node.targets):
            continue
        for call in ctx.index.walk(node.value):
            if type(call) is cst.Call and copied_from(ctx, call) & derived:
                return call
    return None


def copied_from(ctx: FileContext, call: cst.Call) -> set[str]:
    """The names a call makes a new tensor from: `p` in `torch.zeros_like(p.data)`,
    `torch.clone(p)`, `p.clone()`."""
    qualified = ctx.qualified_name(call.func) or ""
    if (qualified.startswith("torch.") and qualified.endswith("_like")) or qualified == "torch.clone":
        return read_names(ctx, call.args[0].value, skip_index=True) if call.args else set()
    if type(call.func) is cst.Attribute and call.func.attr.value == "clone":
        return read_names(ctx, call.func.value, skip_index=True)
    return set()
