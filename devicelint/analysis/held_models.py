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

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.host_modules import keeps_arguments_in_place, keeps_module_in_place
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import MOVE_METHODS
from devicelint.context import FileContext

# Methods that move a module, or a part of one, wherever they are called on it.
_PLACING_METHODS = MOVE_METHODS | {"to_empty", "apply", "share_memory"}


@dataclass(frozen=True)
class HeldModel:
    """What the file does with one `self.<attr>` of a plain class: `kept` when every use keeps
    it in place, or only `movers` move it (`self.model.to(self.device)` as a statement in
    `fit()`); `restorer` is a class-level method that builds an instance (`cls(...)`) and returns
    it without calling any of them (`load()`)."""

    kept: bool
    movers: frozenset[str] = frozenset()
    restorer: str | None = None


def held_model(ctx: FileContext, cls: cst.ClassDef, attr: str) -> HeldModel | None:
    return ctx.shared("held_models.kept", _kept).get((id(cls), attr))


def kept_on_host(ctx: FileContext, cls: cst.ClassDef, attr: str, method: cst.FunctionDef) -> bool:
    """Whether `method` may see the module held in `self.<attr>` of the plain class `cls` where
    `__init__` left it, on the CPU: nothing in the file moves it, or only some methods do,
    `method` neither is one nor calls one through `self`, and an instance the class restores
    (`load()`) reaches `method` without any of them having run."""
    held = held_model(ctx, cls, attr)
    if held is None or not held.kept:
        return False
    if not held.movers:
        return True
    if held.restorer is None or method.name.value in held.movers:
        return False
    return not (_reached_methods(ctx, cls, method) & held.movers)


def _kept(ctx: FileContext) -> dict[tuple[int, str], HeldModel]:
    index = ctx.index
    bases = {dotted_name(b.value) or "" for node in index.of_type(cst.ClassDef) for b in node.bases}
    found: dict[tuple[int, str], HeldModel] = {}
    for cls in index.of_type(cst.ClassDef):
        if cls.name.value in bases or any(
            b.keyword is not None or (dotted_name(b.value) or "") != "object" for b in cls.bases
        ):
            continue  # a subclass or a base class elsewhere may move it in methods not seen here
        if _hands_on_self(ctx, cls):
            continue
        uses: dict[str, bool] = {}
        movers: dict[str, set[str]] = {}
        for node in index.walk(cls):
            attr = self_attribute(node)
            if attr is None:
                continue
            mover = _moved_in_place(ctx, node)
            if mover is not None:
                movers.setdefault(attr, set()).add(mover)
            else:
                uses[attr] = uses.get(attr, True) and _in_place_use(ctx, node)
        for attr, kept in uses.items():
            moved = frozenset(movers.get(attr, ()))
            found[(id(cls), attr)] = HeldModel(
                kept and not _reached_from_outside(ctx, attr) and "__init__" not in moved,
                moved,
                _restorer(ctx, cls, moved) if moved else None,
            )
    return found


def _moved_in_place(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """The method's name when `node` is `self.<attr>` in a statement `self.<attr>.to(...)` /
    `.cuda()` of a method of the class."""
    index = ctx.index
    parent = index.parent(node)
    call = index.parent(parent) if parent is not None else None
    if not (
        type(parent) is cst.Attribute
        and parent.value is node
        and parent.attr.value in MOVE_METHODS
        and type(call) is cst.Call
        and call.func is parent
        and type(index.parent(call)) is cst.Expr
    ):
        return None
    method = index.enclosing_function(node)
    return method.name.value if method is not None else None


def _restorer(ctx: FileContext, cls: cst.ClassDef, movers: frozenset[str]) -> str | None:
    """A class-level method (`@classmethod def load(cls, path)`) that builds an instance and
    calls none of `movers` on anything."""
    name = cls.name.value
    for stmt in cls.body.body if type(cls.body) is cst.IndentedBlock else ():
        if type(stmt) is not cst.FunctionDef or not any(
            dotted_name(d.decorator) in ("classmethod", "staticmethod") for d in stmt.decorators
        ):
            continue
        calls = ctx.index.within(stmt, cst.Call)
        builds = any(type(c.func) is cst.Name and c.func.value in ("cls", name) for c in calls)
        moves = any(type(c.func) is cst.Attribute and c.func.attr.value in movers for c in calls)
        if (
            builds
            and not moves
            and any(type(r.value) is cst.Name for r in ctx.index.within(stmt, cst.Return) if r.value)
        ):
            return stmt.name.value
    return None


def _reached_methods(ctx: FileContext, cls: cst.ClassDef, method: cst.FunctionDef) -> frozenset[str]:
    """The methods `method` calls through `self`, directly or through each other."""
    methods = {
        s.name.value: s
        for s in (cls.body.body if type(cls.body) is cst.IndentedBlock else ())
        if type(s) is cst.FunctionDef
    }
    seen: set[str] = set()
    todo = [method]
    while todo:
        current = todo.pop()
        for call in ctx.index.within(current, cst.Call):
            name = self_attribute(call.func)
            if name is not None and name in methods and name not in seen:
                seen.add(name)
                todo.append(methods[name])
    return frozenset(seen)


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
        return type(call) is cst.Call and (keeps_arguments_in_place(ctx, call) or _run_unmoved(ctx, call, parent))
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
        if type(above) is cst.Arg:
            # a part handed on (`freeze(self.model.backbone)`) may be moved there
            call = index.parent(above)
            return type(call) is cst.Call and keeps_arguments_in_place(ctx, call)
        return True  # a part read (`self.model.fc.out_features`) or replaced (`self.model.fc = nn.Identity()`)


def _run_unmoved(ctx: FileContext, call: cst.Call, arg: cst.Arg) -> bool:
    """`Predictor(self.model, ...)` of a function or class of another project module that runs
    what it is handed there and never moves, rebinds or hands it on (`runs_unmoved`): the model
    stays where it is."""
    name = dotted_name(call.func)
    helper = ctx.project.helpers.get(name) if name is not None else None
    if helper is None or any(a.star for a in call.args):
        return False
    keyword = arg.keyword.value if arg.keyword is not None else None
    param = helper.uses.parameter_at(call.args.index(arg) if keyword is None else None, keyword)
    return param is not None and any(p == param for p, _ in helper.uses.runs_unmoved)


def _hands_on_self(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """`register(self)`, `helper(self.__dict__)`: code elsewhere may reach the model. A part of
    one attribute handed on (`tokenizer(text, max_length=self.config.max_len)`) reaches only
    that attribute, which `_in_place_use` answers for."""
    for call in ctx.index.within(cls, cst.Call):
        if keeps_arguments_in_place(ctx, call) or (type(call.func) is cst.Name and call.func.value == "super"):
            continue
        for arg in call.args:
            value = arg.value
            if type(value) is cst.Name and value.value == "self" or self_attribute(value) == "__dict__":
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


def kept_at_import(ctx: FileContext, name: str) -> bool:
    """Whether the module that the top-level code binds to `name` once (`new_model =
    AutoModel.from_pretrained(path)`) stays where it was built for the functions that read it:
    no function rebinds it (`global`), and every read of it in the file calls it, reads a part of
    it or calls a method that keeps it in place; a move at the top level is the interpreter's."""
    return ctx.shared("held_models.at_import", _kept_at_import).get(name, False)


def _kept_at_import(ctx: FileContext) -> dict[str, bool]:
    index = ctx.index
    bound: dict[str, int] = {}
    for stmt in ctx.module.body:
        for target in index.within(stmt, cst.AssignTarget) if type(stmt) is cst.SimpleStatementLine else ():
            if type(target.target) is cst.Name:
                bound[target.target.value] = bound.get(target.target.value, 0) + 1
    rebound = {n.value for g in index.of_type(cst.Global) for item in g.names for n in (item.name,)}
    kept: dict[str, bool] = {}
    for node in index.of_type(cst.Name):
        name = node.value
        if bound.get(name) != 1 or name in rebound:
            continue
        function = index.enclosing_function(node)
        if function is None:
            continue  # the top level is the interpreter's: it sees moves and hand-offs there in order
        parent = index.parent(node)
        if type(parent) is cst.Attribute and parent.attr is node:
            continue  # `x.name`, another object's attribute
        kept[name] = kept.get(name, True) and _in_place_use(ctx, node)
    return kept
