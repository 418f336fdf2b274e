"""Module classes that only ever run as data transforms, on the host.

`class PackPathway(nn.Module)` whose one use is `Compose([..., PackPathway()])`: the instance is a
step of a sample pipeline, applied to the frames a loader or a script decodes on the CPU, before
anything is moved. Its `forward` is not device code: its tensor parameters are host tensors and
the tensors it makes meet only them. A class counts when the file builds it at least once and
every mention of it outside its own body is such a construction, inside the argument list of a
composer (`Compose`, `RandomApply`, ...) that is never moved (`.to(device)`, `.cuda()`), either
itself or through the name it is bound to; an instance bound to a name (`pack = PackPathway()`)
counts where every read of that name is such a step. A class another module imports and nests as a
submodule is not seen here (the file alone is read).
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import MOVE_METHODS
from devicelint.context import FileContext

# Callables that chain sample transforms (torchvision, pytorchvideo, albumentations-like).
COMPOSERS = frozenset({"Compose", "RandomApply", "RandomChoice", "RandomOrder", "OneOf", "SomeOf"})


def transform_classes(ctx: FileContext, module_classes: set[str]) -> frozenset[str]:
    """The module classes of `module_classes` that the file only builds as composed transforms."""
    if not module_classes:
        return frozenset()
    verdict: dict[str, bool] = {}
    moved = _moved_names(ctx)
    for node in ctx.index.of_type(cst.Name):
        name = node.value
        if name not in module_classes or _inside_class(ctx, node, name):
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.ClassDef and parent.name is node:
            continue
        composed = type(parent) is cst.Call and parent.func is node and _composed_instance(ctx, parent, moved)
        verdict[name] = verdict.get(name, True) and composed
    return frozenset(name for name, only_composed in verdict.items() if only_composed)


def _inside_class(ctx: FileContext, node: cst.CSTNode, name: str) -> bool:
    """`super(PackPathway, self).__init__()` in the class's own body."""
    cls = ctx.index.enclosing_class(node)
    while cls is not None:
        if cls.name.value == name:
            return True
        cls = ctx.index.enclosing_class(cls)
    return False


def _composed_instance(ctx: FileContext, construction: cst.Call, moved: set[str]) -> bool:
    """The instance is a composed step where it is built, or it is bound to a name (`pack =
    PackPathway()`) that its scope only reads as a composed step."""
    holder = ctx.index.parent(construction)
    if type(holder) is not cst.Assign:
        return _composed(ctx, construction, moved)
    if len(holder.targets) != 1 or type(holder.targets[0].target) is not cst.Name:
        return False
    bound = holder.targets[0].target
    scope = ctx.index.enclosing_function(holder) or ctx.module
    reads = [
        node
        for node in ctx.index.walk(scope)
        if type(node) is cst.Name and node.value == bound.value and node is not bound
    ]
    return bool(reads) and all(_composed(ctx, node, moved) for node in reads)


def _composed(ctx: FileContext, step: cst.CSTNode, moved: set[str]) -> bool:
    """The step is an element of a composer's list (`Compose([A(), B()])`) or handed to one
    directly (`RandomApply(A(), p=0.5)`), and that composer is never moved."""
    parent = ctx.index.parent(step)
    while parent is not None and type(parent) in (cst.Element, cst.List, cst.Tuple):
        parent = ctx.index.parent(parent)
    if type(parent) is not cst.Arg:
        return False
    composer = ctx.index.parent(parent)
    if type(composer) is not cst.Call:
        return False
    callee = dotted_name(composer.func) or ""
    if callee.rsplit(".", 1)[-1] not in COMPOSERS:
        return False
    holder = ctx.index.parent(composer)
    if type(holder) is cst.Attribute and holder.attr.value in MOVE_METHODS:
        return False  # `Compose([...]).to(device)`
    if type(holder) is cst.Assign:
        return not any(dotted_name(target.target) in moved for target in holder.targets)
    return True


def _moved_names(ctx: FileContext) -> set[str]:
    """Names and attributes the file moves (`pipeline.to(device)`, `self.aug.cuda()`)."""
    found: set[str] = set()
    for node in ctx.index.of_type(cst.Attribute):
        if node.attr.value in MOVE_METHODS:
            name = dotted_name(node.value)
            if name is not None:
                found.add(name)
    return found
