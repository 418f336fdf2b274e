"""A device a class keeps from its constructor in a plain attribute, read after construction.

`self.device = torch.device(device)` in `__init__` is a snapshot: `module.to("cuda")` moves the
parameters and buffers but never rewrites that attribute. A method that later makes tensors with
`device=self.device` (a `forward`, a helper it calls) keeps making them where the constructor was
told, the CPU when every construction of the class in the file leaves `device` at a CPU default,
while the module's own tensors and its inputs are on the GPU.

Read here (the placement engine asks it about a factory's `device=` outside `__init__`):
`self.<attr>` written exactly once in the class, by a statement of `__init__`, in a class that
overrides none of `to`/`cuda`/`cpu`/`_apply`; its value a CPU literal (`"cpu"`,
`torch.device("cpu")`), or a parameter of `__init__` (alone, inside `torch.device(...)`, or as
`p or D`), which every construction of the class in the file (at least one) leaves at a CPU
default or passes the CPU literally, in a class the file moves after building it (or a
LightningModule). Anything else is not claimed.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_classes import self_attribute
from devicelint.context import FileContext

_MOVERS = frozenset({"to", "cuda", "cpu", "_apply"})
_CPU = "cpu"
_OTHER = "other"


def _literal(ctx: FileContext, expr: cst.BaseExpression | None) -> str:
    if expr is None or (type(expr) is cst.Name and expr.value == "None"):
        return _CPU  # no device: the factory uses the (CPU) default
    if type(expr) is cst.SimpleString:
        value = literal_value(expr)
        return _CPU if isinstance(value, str) and value.split(":", 1)[0] == "cpu" else _OTHER
    if type(expr) is cst.Call and ctx.qualified_name(expr.func) == "torch.device" and len(expr.args) == 1:
        inner = expr.args[0].value
        return _OTHER if type(inner) is cst.Name and inner.value == "None" else _literal(ctx, inner)
    return _OTHER


def _init_of(cls: cst.ClassDef) -> cst.FunctionDef | None:
    body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
    return next((s for s in body if type(s) is cst.FunctionDef and s.name.value == "__init__"), None)


def _writes(ctx: FileContext, cls: cst.ClassDef, attr: str) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []
    for node in ctx.index.walk(cls):
        targets: list[cst.BaseExpression] = []
        if type(node) is cst.Assign:
            targets = [t.target for t in node.targets]
        elif type(node) in (cst.AugAssign, cst.AnnAssign):
            targets = [node.target]  # type: ignore[attr-defined]  # both have `.target`
        if any(self_attribute(t) == attr for t in targets):
            found.append(node)
    return found


def _argument_for(call: cst.Call, init: cst.FunctionDef, name: str) -> tuple[bool, cst.BaseExpression | None]:
    """(whether `call` can be read, the argument it passes for `name` or None where it passes none)."""
    params = [p.name.value for p in (*init.params.posonly_params, *init.params.params)][1:]
    for position, arg in enumerate(call.args):
        if arg.star:
            return False, None
        if arg.keyword is None and position < len(params) and params[position] == name:
            return True, arg.value
        if arg.keyword is not None and arg.keyword.value == name:
            return True, arg.value
    return True, None


def _parameter_outcomes(ctx: FileContext, cls: cst.ClassDef, init: cst.FunctionDef, name: str) -> set[str]:
    param = next((p for p in (*init.params.posonly_params, *init.params.params) if p.name.value == name), None)
    if param is None:
        return {_OTHER}
    outcomes: set[str] = set()
    for call in ctx.index.of_type(cst.Call):
        if dotted_name(call.func) != cls.name.value:
            continue
        readable, passed = _argument_for(call, init, name)
        if not readable:
            return {_OTHER}
        outcomes.add(_literal(ctx, passed if passed is not None else param.default))
    return outcomes


def _value_outcomes(ctx: FileContext, cls: cst.ClassDef, init: cst.FunctionDef, value: cst.BaseExpression) -> set[str]:
    if type(value) is cst.Call and ctx.qualified_name(value.func) == "torch.device" and len(value.args) == 1:
        value = value.args[0].value
    if type(value) is cst.BooleanOperation and type(value.operator) is cst.Or and type(value.left) is cst.Name:
        left = _parameter_outcomes(ctx, cls, init, value.left.value)
        return left | {_literal(ctx, value.right)} if left <= {_CPU} else {_OTHER}
    if type(value) is cst.Name and value.value != "None":
        rebound = any(
            type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)
            and any(
                type(t) is cst.Name and t.value == value.value
                for t in ([x.target for x in n.targets] if type(n) is cst.Assign else [n.target])  # type: ignore[attr-defined]
            )
            for n in ctx.index.walk(init.body)
        )
        return {_OTHER} if rebound else _parameter_outcomes(ctx, cls, init, value.value)
    return {_literal(ctx, value)}


def moved_after_built(ctx: FileContext, cls: cst.ClassDef, module_level: bool = True) -> bool:
    """The file moves an instance: `Cls(...).to(...)`, or `m = Cls(...)` then `m.to(...)`/`m.cuda()`
    in the same function, or at the module's top level unless `module_level` is off (a
    LightningModule counts: its trainer moves it)."""
    if any((dotted_name(b.value) or "").rsplit(".", 1)[-1] == "LightningModule" for b in cls.bases):
        return True
    for call in ctx.index.of_type(cst.Call):
        if dotted_name(call.func) != cls.name.value:
            continue
        parent = ctx.index.parent(call)
        if type(parent) is cst.Attribute and parent.attr.value in ("to", "cuda"):
            return True
        target = parent.targets[0].target if type(parent) is cst.Assign and len(parent.targets) == 1 else None
        scope = ctx.index.enclosing_function(call) or (ctx.module if module_level else None)
        if type(target) is not cst.Name or scope is None:
            continue
        for node in ctx.index.walk(scope):
            if (
                type(node) is cst.Call
                and type(node.func) is cst.Attribute
                and node.func.attr.value in ("to", "cuda")
                and dotted_name(node.func.value) == target.value
            ):
                return True
    return False


def kept_cpu_device(ctx: FileContext, expr: cst.BaseExpression, method: cst.FunctionDef) -> bool:
    """Whether `expr` (a factory's `device=` in `method`, not the constructor) is `self.<attr>`,
    the device the constructor kept, which is the CPU at every construction of the class in the
    file and which nothing after the constructor rewrites."""
    attr = self_attribute(expr)
    if attr is None or method.name.value == "__init__":
        return False
    cls = ctx.index.enclosing_class(method)
    init = _init_of(cls) if cls is not None else None
    if cls is None or init is None:
        return False
    body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
    if any(type(s) is cst.FunctionDef and (s.name.value in _MOVERS or s.name.value == attr) for s in body):
        return False  # the class moves itself, or `device` is a property
    writes = _writes(ctx, cls, attr)
    if len(writes) != 1 or type(writes[0]) is not cst.Assign or ctx.index.enclosing_function(writes[0]) is not init:
        return False
    outcomes = _value_outcomes(ctx, cls, init, writes[0].value)
    return bool(outcomes) and outcomes <= {_CPU} and moved_after_built(ctx, cls)
