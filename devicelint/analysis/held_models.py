"""Models a plain class keeps on the host: `self.model = resnet18()` in `__init__` of a predictor,
a wrapper or a trainer that no code of the file ever moves or hands on.

`__init__` leaves `self.<attr>` a module certainly on the CPU (the interpreter releases it there
when it is handed to anything); the class's other methods read that fact only where the whole
file keeps the model in place: every use of `self.<attr>` calls it, reads a part of it or calls a
method that leaves it where it is (`eval`, `load_state_dict`), nothing outside the class reaches
an attribute of that name, `self` is handed to nothing, and no class of the file derives from
it. A method that calls it with inputs moved to the device then calls a CPU model (DL117).
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.host_modules import keeps_arguments_in_place, keeps_module_in_place
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import MOVE_METHODS
from devicelint.context import FileContext

# Methods that move a module, or a part of one, wherever they are called on it.
_PLACING_METHODS = MOVE_METHODS | {"to_empty", "apply", "share_memory"}


def kept_on_host(ctx: FileContext, cls: cst.ClassDef, attr: str) -> bool:
    """Whether the file keeps the module held in `self.<attr>` of the plain class `cls` where
    `__init__` left it."""
    return ctx.shared("held_models.kept", _kept).get((id(cls), attr), False)


def _kept(ctx: FileContext) -> dict[tuple[int, str], bool]:
    index = ctx.index
    bases = {dotted_name(b.value) or "" for node in index.of_type(cst.ClassDef) for b in node.bases}
    found: dict[tuple[int, str], bool] = {}
    for cls in index.of_type(cst.ClassDef):
        if cls.name.value in bases or any(
            b.keyword is not None or (dotted_name(b.value) or "") != "object" for b in cls.bases
        ):
            continue  # a subclass or a base class elsewhere may move it in methods not seen here
        if _hands_on_self(ctx, cls):
            continue
        uses: dict[str, bool] = {}
        for node in index.walk(cls):
            attr = self_attribute(node)
            if attr is not None:
                uses[attr] = uses.get(attr, True) and _in_place_use(ctx, node)
        for attr, kept in uses.items():
            found[(id(cls), attr)] = kept and not _reached_from_outside(ctx, attr)
    return found


def _in_place_use(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`self.model(x)`, `self.model.eval()`, `self.model.fc.out_features`, `print(self.model)`,
    or the assignment that stores it."""
    index = ctx.index
    parent = index.parent(node)
    if type(parent) is cst.AssignTarget:
        return True
    if type(parent) is cst.Call and parent.func is node:
        return True
    if type(parent) is cst.Arg:
        call = index.parent(parent)
        return type(call) is cst.Call and keeps_arguments_in_place(ctx, call)
    if type(parent) is not cst.Attribute or parent.value is not node:
        return False  # returned, stored elsewhere, handed to a function: it may be moved there
    top: cst.CSTNode = parent
    while True:
        above = index.parent(top)
        if type(above) is cst.Call and above.func is top:
            method = top.attr.value if type(top) is cst.Attribute else ""
            if top is parent:
                return keeps_module_in_place(method)
            return method not in _PLACING_METHODS  # `self.model.fc(x)`, not `self.model.fc.cuda()`
        if type(above) is cst.Attribute and above.value is top or type(above) is cst.Subscript and above.value is top:
            top = above
            continue
        return True  # a part read (`self.model.fc.out_features`) or replaced (`self.model.fc = nn.Identity()`)


def _hands_on_self(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """`register(self)`, `helper(self.__dict__)`: code elsewhere may reach the model."""
    for call in ctx.index.within(cls, cst.Call):
        if keeps_arguments_in_place(ctx, call) or (type(call.func) is cst.Name and call.func.value == "super"):
            continue
        for arg in call.args:
            value = arg.value
            while type(value) is cst.Attribute:
                value = value.value
            if type(value) is cst.Name and value.value == "self" and self_attribute(arg.value) is None:
                return True
    return False


def _reached_from_outside(ctx: FileContext, attr: str) -> bool:
    """An `<instance>.<attr>` anywhere (`predictor.model.cuda()`, `trainer.model = ...`) used
    otherwise than in place."""
    for node in ctx.index.of_type(cst.Attribute):
        if node.attr.value != attr or self_attribute(node) is not None:
            continue
        if type(ctx.index.parent(node)) is cst.AssignTarget or not _in_place_use(ctx, node):
            return True
    return False
