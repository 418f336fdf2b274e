"""What a `self.<attr>` that a constructor sets from its parameters holds for the instances of one
class: `self.device = device` in a base class's `__init__`, which a subclass reaches through
`super().__init__(rng=rng)` (leaving `device` at its default) and the file's constructions of the
subclass.

Unlike `constructor_devices` (every construction of a class and of all its subclasses), this
follows one class's own chain of constructors, so a method of `Mixture(Base)` sees what
`Mixture`'s instances were given, not what `Blur(Base)`'s were. The caller judges each value that
reaches the attribute (a device type, a generator's device) where it is written.

Only these forms are read: the class's own `__init__` or, when it sets nothing of that name, the
first base class of the file that does (through each constructor's one `super().__init__(...)`);
a value that is one of the constructor's parameters, never rebound there; `p if p is not None
else D` and `D if p is None else p`; anything else is handed to the judge as written.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from devicelint.analysis.argument_places import calls_of
from devicelint.analysis.constructor_devices import init_assignments, none_default
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import self_attribute
from devicelint.context import FileContext

__all__ = ["judged_for_instances"]

Judge = Callable[[cst.BaseExpression], "str | None"]
_UNKNOWN = "<unknown>"
_MAX_CHAIN = 4


def judged_for_instances(ctx: FileContext, use: cst.Attribute, judge: Judge) -> str | None:
    """The one judgement (`judge` of each value that reaches `self.<attr>` for the instances of
    the class around `use`), or None when the file does not show it or the values disagree."""
    attr = self_attribute(use)
    cls = ctx.index.enclosing_class(use)
    if attr is None or cls is None:
        return None
    chain = _chain(ctx, cls)
    for level, klass in enumerate(chain):
        if _set_outside_init(ctx, klass, attr):
            return None
        init = _init_of(klass)
        values = init_assignments(ctx, init, attr)
        if len(values) > 1:
            return None
        if values and init is not None:
            outcomes = _judged(ctx, chain, level, init, values[0], judge, 0)
            found = outcomes - {None}
            return found.pop() if len(found) == 1 and None not in outcomes and _UNKNOWN not in found else None
    return None


def _chain(ctx: FileContext, cls: cst.ClassDef) -> list[cst.ClassDef]:
    """The class and its first base classes of the file, nearest first."""
    classes = {c.name.value: c for c in ctx.index.of_type(cst.ClassDef)}
    chain = [cls]
    while len(chain) < _MAX_CHAIN:
        bases = [dotted_name(b.value) for b in chain[-1].bases if b.keyword is None]
        base = next((classes[b] for b in bases if b in classes), None)
        if base is None or base in chain:
            break
        chain.append(base)
    return chain


def _init_of(cls: cst.ClassDef) -> cst.FunctionDef | None:
    return next((s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"), None)


def _set_outside_init(ctx: FileContext, cls: cst.ClassDef, attr: str) -> bool:
    """Whether a method of the class other than `__init__` assigns `self.<attr>`."""
    for node in ctx.index.walk(cls):
        if type(node) is cst.Assign and any(self_attribute(t.target) == attr for t in node.targets):
            method = ctx.index.enclosing_function(node)
            if method is None or method.name.value != "__init__" or ctx.index.enclosing_class(method) is not cls:
                return True
    return False


def _params(init: cst.FunctionDef) -> list[cst.Param]:
    return [*init.params.posonly_params, *init.params.params, *init.params.kwonly_params]


def _rebound(ctx: FileContext, init: cst.FunctionDef, name: str) -> bool:
    return any(
        type(n) is cst.Name and n.value == name and ctx.index.in_binding_target(n) for n in ctx.index.walk(init.body)
    )


def _judged(
    ctx: FileContext,
    chain: list[cst.ClassDef],
    level: int,
    init: cst.FunctionDef,
    expr: cst.BaseExpression,
    judge: Judge,
    depth: int,
) -> set[str | None]:
    """The judgements of what `expr`, written in `chain[level]`'s `__init__`, holds for the
    instances of `chain[0]`."""
    if depth > 2 * _MAX_CHAIN:
        return {None}
    if type(expr) is cst.IfExp:
        return _defaulted(ctx, chain, level, init, expr, judge, depth)
    if type(expr) is cst.Name and any(p.name.value == expr.value for p in _params(init)):
        if _rebound(ctx, init, expr.value):
            return {None}
        out: set[str | None] = set()
        for given in _arguments(ctx, chain, level, init, expr.value):
            if given is None:
                return {None}
            caller_level, caller_init, value = given
            if caller_init is None:
                out.add(judge(value))  # written by a construction of the class: the caller's words
            else:
                out |= _judged(ctx, chain, caller_level, caller_init, value, judge, depth + 1)
        return out or {None}
    return {judge(expr)}


def _defaulted(
    ctx: FileContext,
    chain: list[cst.ClassDef],
    level: int,
    init: cst.FunctionDef,
    expr: cst.IfExp,
    judge: Judge,
    depth: int,
) -> set[str | None]:
    """`p if p is not None else D` / `D if p is None else p`: what reaches `p`, or `D` where None does."""
    found = none_default(expr)
    if found is None:
        return {None}
    kept, fallback = found
    if not any(p.name.value == kept.value for p in _params(init)) or _rebound(ctx, init, kept.value):
        return {None}
    out: set[str | None] = set()
    for given in _arguments(ctx, chain, level, init, kept.value):
        if given is None:
            return {None}
        caller_level, caller_init, value = given
        if type(value) is cst.Name and value.value == "None":
            out |= _judged(ctx, chain, level, init, fallback, judge, depth + 1)
        elif caller_init is None:
            out.add(judge(value))
        else:
            out |= _judged(ctx, chain, caller_level, caller_init, value, judge, depth + 1)
    return out or {None}


def _arguments(
    ctx: FileContext, chain: list[cst.ClassDef], level: int, init: cst.FunctionDef, name: str
) -> list[tuple[int, cst.FunctionDef | None, cst.BaseExpression] | None]:
    """What reaches the parameter `name` of `chain[level]`'s `__init__` for the instances of
    `chain[0]`: at each call (the `super().__init__(...)` of the class below, or the file's
    constructions of `chain[0]`), the level and constructor the value is written in (None: a
    caller outside the chain) and the value (the parameter's default where the call leaves it
    out); a None entry where the file does not show it."""
    param = next(p for p in _params(init) if p.name.value == name)
    positional = [*init.params.posonly_params, *init.params.params]
    position = next((i - 1 for i, p in enumerate(positional) if p.name.value == name), None)  # after `self`
    if level == 0:
        found = calls_of(ctx, init)
        sites: list[tuple[int, cst.FunctionDef | None, cst.Call]] = [
            (0, None, call) for call in (found[0] if found else ())
        ]
        if not sites:
            return [None]
    else:
        below = _init_of(chain[level - 1])
        supers = [
            call
            for call in (ctx.index.walk(below.body) if below is not None else ())
            if type(call) is cst.Call
            and type(call.func) is cst.Attribute
            and call.func.attr.value == "__init__"
            and type(call.func.value) is cst.Call
            and dotted_name(call.func.value.func) == "super"
            and ctx.index.enclosing_function(call) is below
        ]
        if below is None or len(supers) != 1:
            return [None]
        sites = [(level - 1, below, supers[0])]
    out: list[tuple[int, cst.FunctionDef | None, cst.BaseExpression] | None] = []
    for caller_level, caller_init, call in sites:
        if any(a.star for a in call.args):
            return [None]
        given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
        args = [a.value for a in call.args if a.keyword is None]
        if given is None and position is not None and 0 <= position < len(args):
            given = args[position]
        if given is None:
            if param.default is None:
                return [None]
            out.append((level, init, param.default))  # the default, written in this constructor
        else:
            out.append((caller_level, caller_init, given))
    return out
