"""Whether a device a class's constructor is given names the CPU at every construction.

Classes often take `device=None` and keep `self.device = device if device is not None else
torch.device("cpu")`, then make their tensors with `device=self.device`. When every construction
of the class that the file shows leaves the parameter out (or passes the CPU), those tensors are
made on the CPU, and moving the instance later (`model.to("cuda")`) leaves every one of them that
is not registered behind. A subclass's `super().__init__(..., device=device)` is a construction
of its base, with the subclass's own constructions behind it.

Only these forms are read: a parameter the constructor never rebinds, `self.<attr>` that a
constructor of the class (or of a base class of the file) sets once, `p if p is not None else
D`, `D if p is None else p`, `p or D`, and the literals `None`, `"cpu"`, `torch.device("cpu")`.
Anything else, or a class the file never constructs, is not claimed.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.argument_places import calls_of, extra_keywords
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_classes import self_attribute
from devicelint.context import FileContext

__all__ = ["cpu_at_every_construction"]

_CPU = "cpu"
_NONE = "none"
_OTHER = "other"
_LEFT_OUT = "left-out"  # a call that leaves the parameter to its default
_MAX_DEPTH = 4


def cpu_at_every_construction(ctx: FileContext, expr: cst.BaseExpression, method: cst.FunctionDef) -> bool:
    """Whether the device expression `expr` (a factory's `device=` in `method`, a constructor)
    is the CPU at every construction of its class in the file (None counts as the CPU: the
    factory then uses the default device)."""
    if method.name.value != "__init__":
        return False
    outcomes = _outcomes(ctx, expr, method, 0)
    return bool(outcomes) and outcomes <= {_CPU, _NONE}


def _outcomes(ctx: FileContext, expr: cst.BaseExpression, func: cst.FunctionDef, depth: int) -> set[str]:
    if depth > _MAX_DEPTH:
        return {_OTHER}
    if type(expr) is cst.Name and expr.value == "None":
        return {_NONE}
    if type(expr) is cst.SimpleString:
        value = literal_value(expr)
        return {_CPU} if isinstance(value, str) and value.split(":", 1)[0] == "cpu" else {_OTHER}
    if type(expr) is cst.Call and ctx.qualified_name(expr.func) == "torch.device" and len(expr.args) == 1:
        inner = _outcomes(ctx, expr.args[0].value, func, depth + 1)
        return {_OTHER} if _NONE in inner else inner
    if type(expr) is cst.IfExp:
        return _conditional(ctx, expr, func, depth)
    if type(expr) is cst.BooleanOperation and type(expr.operator) is cst.Or:
        left = _outcomes(ctx, expr.left, func, depth + 1)
        right = _outcomes(ctx, expr.right, func, depth + 1) if _NONE in left else set()
        return (left - {_NONE}) | right
    attr = self_attribute(expr)
    if attr is not None:
        value = _set_once_by_constructor(ctx, func, attr)
        init = ctx.index.enclosing_function(value) if value is not None else None
        return _outcomes(ctx, value, init, depth + 1) if value is not None and init is not None else {_OTHER}
    if type(expr) is cst.Name and _is_parameter(func, expr.value) and not _rebound(ctx, func, expr.value):
        return _passed(ctx, func, expr.value, depth)
    return {_OTHER}


def none_default(expr: cst.IfExp) -> tuple[cst.Name, cst.BaseExpression] | None:
    """`p if p is not None else D` / `D if p is None else p`: (`p`, `D`); None for any other
    conditional."""
    test = expr.test
    if not (
        type(test) is cst.Comparison
        and type(test.left) is cst.Name
        and len(test.comparisons) == 1
        and type(test.comparisons[0].comparator) is cst.Name
        and test.comparisons[0].comparator.value == "None"
        and type(test.comparisons[0].operator) in (cst.Is, cst.IsNot)
    ):
        return None
    kept, replaced = (
        (expr.body, expr.orelse) if type(test.comparisons[0].operator) is cst.IsNot else (expr.orelse, expr.body)
    )
    if not (type(kept) is cst.Name and kept.value == test.left.value):
        return None
    return kept, replaced


def _conditional(ctx: FileContext, expr: cst.IfExp, func: cst.FunctionDef, depth: int) -> set[str]:
    """`p if p is not None else D` / `D if p is None else p`: `D` on the path where `p` is None."""
    found = none_default(expr)
    if found is None:
        return {_OTHER}
    kept, replaced = found
    given = _outcomes(ctx, kept, func, depth + 1)
    fallback = _outcomes(ctx, replaced, func, depth + 1) if _NONE in given else set()
    return (given - {_NONE}) | fallback


def _is_parameter(func: cst.FunctionDef, name: str) -> bool:
    return any(
        p.name.value == name for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)
    )


def _rebound(ctx: FileContext, func: cst.FunctionDef, name: str) -> bool:
    return any(
        type(n) is cst.Name and n.value == name and ctx.index.in_binding_target(n) for n in ctx.index.walk(func.body)
    )


def init_assignments(ctx: FileContext, init: cst.FunctionDef | None, attr: str) -> list[cst.BaseExpression]:
    """The values `init`'s own statements assign to `self.<attr>` alone (`self.dev = d`)."""
    return [
        node.value
        for node in (ctx.index.walk(init.body) if init is not None else ())
        if type(node) is cst.Assign
        and len(node.targets) == 1
        and self_attribute(node.targets[0].target) == attr
        and ctx.index.enclosing_function(node) is init
    ]


def _set_once_by_constructor(ctx: FileContext, func: cst.FunctionDef, attr: str) -> cst.BaseExpression | None:
    """The one value a constructor of `func`'s class, or of a base class of the file, gives
    `self.<attr>` (None where none or several do)."""
    cls = ctx.index.enclosing_class(func)
    classes = {c.name.value: c for c in ctx.index.of_type(cst.ClassDef)}
    seen: set[str] = set()
    while cls is not None and cls.name.value not in seen:
        seen.add(cls.name.value)
        init = next(
            (s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"),
            None,
        )
        values = init_assignments(ctx, init, attr)
        if len(values) == 1:
            return values[0]
        if values:
            return None
        bases = [dotted_name(b.value) for b in cls.bases if b.keyword is None]
        cls = next((classes[b] for b in bases if b in classes), None)
    return None


def _passed(ctx: FileContext, init: cst.FunctionDef, name: str, depth: int) -> set[str]:
    """What the calls of `init` (the constructions of its class, or the calls of a helper that
    builds one) pass for its parameter `name`, as outcomes; the parameter's default where a
    call leaves it out."""
    params = [*init.params.posonly_params, *init.params.params]
    position = next((i for i, p in enumerate(params) if p.name.value == name), None)
    param = next(p for p in (*params, *init.params.kwonly_params) if p.name.value == name)
    sites: list[tuple[cst.Call, cst.FunctionDef | None, int]] = []
    found = calls_of(ctx, init)
    skip = 1 if found and found[1] else 0  # `Class(...)`, `self.f(...)`: `self` is not passed
    for call in found[0] if found else []:
        sites.append((call, ctx.index.enclosing_function(call), skip))
    if init.name.value == "__init__":
        sites += [(call, ctx.index.enclosing_function(call), 1) for call in _super_inits(ctx, init)]
    if not sites:
        return {_OTHER}
    out: set[str] = set()
    for call, caller, skip in sites:
        forwarded = _forwarded_keywords(call, caller)
        if any(a.star for a in call.args if a is not forwarded):
            return {_OTHER}
        given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
        if given is None and position is not None:
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            index = position - skip
            given = positional[index] if 0 <= index < len(positional) else None
        if given is None and forwarded is not None:
            through = _through_keywords(ctx, caller, forwarded, name, depth)
            if through is None:
                return {_OTHER}
            out |= through - {_LEFT_OUT}
            if _LEFT_OUT not in through:
                continue
        if given is None:
            if param.default is None:
                return {_OTHER}
            out |= _outcomes(ctx, param.default, init, depth + 1)
        elif caller is None:
            out |= _outcomes(ctx, given, init, _MAX_DEPTH) if type(given) is not cst.Name else {_OTHER}
        else:
            out |= _outcomes(ctx, given, caller, depth + 1)
    return out


def _forwarded_keywords(call: cst.Call, caller: cst.FunctionDef | None) -> cst.Arg | None:
    """The `**kwargs` argument of `call` that spreads its caller's own `**kwargs` parameter
    (`super().__init__(n, **kwargs)` in a subclass's constructor), if any."""
    star = caller.params.star_kwarg if caller is not None else None
    return next(
        (
            a
            for a in call.args
            if a.star == "**" and star is not None and type(a.value) is cst.Name and a.value.value == star.name.value
        ),
        None,
    )


def _through_keywords(
    ctx: FileContext, caller: cst.FunctionDef | None, forwarded: cst.Arg, name: str, depth: int
) -> set[str] | None:
    """What the calls of `caller` gather under `name` into the `**kwargs` it forwards: the
    outcomes of those that pass it, and `_LEFT_OUT` for those that leave it out (where the
    parameter's default holds); None when a call spreads a mapping of its own or no call is seen."""
    if caller is None or type(forwarded.value) is not cst.Name:
        return None
    gathered = extra_keywords(ctx, caller, forwarded.value.value)
    if gathered is None or any(spreads for _, _, spreads in gathered):
        return None
    out: set[str] = set()
    for call, keywords, _ in gathered:
        if name not in keywords:
            out.add(_LEFT_OUT)
            continue
        site = ctx.index.enclosing_function(call)
        out |= _outcomes(ctx, keywords[name], site, depth + 1) if site is not None else {_OTHER}
    return out


def _super_inits(ctx: FileContext, init: cst.FunctionDef) -> list[cst.Call]:
    """`super().__init__(...)` in the constructors of the file's direct subclasses of `init`'s class."""
    cls = ctx.index.enclosing_class(init)
    if cls is None:
        return []
    out = []
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        if not (
            type(func) is cst.Attribute
            and func.attr.value == "__init__"
            and type(func.value) is cst.Call
            and type(func.value.func) is cst.Name
            and func.value.func.value == "super"
        ):
            continue
        caller = ctx.index.enclosing_function(call)
        sub = ctx.index.enclosing_class(caller) if caller is not None else None
        if (
            caller is not None
            and caller.name.value == "__init__"
            and sub is not None
            and any(b.keyword is None and dotted_name(b.value) == cls.name.value for b in sub.bases)
        ):
            out.append(call)
    return out
