"""Which class's instance a function's parameter holds, whatever it is called.

A method's first parameter is its class's instance. A helper that the file's methods hand their
own instance (`_head(self, h)` into `def _head(model, h)`, `Net._tail(self, h)` into a static
method's `owner`, `self._norm(self, x)` into a class method's second parameter) reads that
class's attributes through the parameter: `model.classifier` there is `self.classifier`. The
binding comes from the calls the file shows, never from the parameter's name: every call of the
helper must hand, at the same parameter, the instance of methods of one class.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.execution_order import calls_by_name
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext

__all__ = ["handed_references", "instance_binding", "instance_class"]


def _decorators(func: cst.FunctionDef) -> set[str]:
    return {(dotted_name(d.decorator) or "").rsplit(".", 1)[-1] for d in func.decorators}


def _method_class(ctx: FileContext, func: cst.FunctionDef) -> cst.ClassDef | None:
    cls = ctx.index.parent(ctx.index.parent(func) or func)
    return cls if type(cls) is cst.ClassDef else None


def _own_receiver(ctx: FileContext, func: cst.FunctionDef) -> tuple[str, cst.ClassDef] | None:
    """A plain method's first parameter and its class."""
    cls = _method_class(ctx, func)
    params = [*func.params.posonly_params, *func.params.params]
    if cls is None or not params or _decorators(func) & {"staticmethod", "classmethod"}:
        return None
    return params[0].name.value, cls


def instance_binding(ctx: FileContext, func: cst.FunctionDef) -> tuple[str, cst.ClassDef] | None:
    """(parameter, class) for a module-level function or a static or class method whose every
    call in the file (at least one) hands, at that parameter, the instance a method of `class`
    runs on. None for plain methods (their first parameter is their own instance) and where the
    calls disagree or show nothing."""
    found: dict[int, tuple[str, cst.ClassDef] | None] = ctx.shared("instance_parameters", lambda c: {})
    key = id(func)
    if key not in found:
        found[key] = None  # a recursive question gets no answer
        found[key] = _binding(ctx, func)
    return found[key]


def instance_class(ctx: FileContext, func: cst.FunctionDef, name: str) -> cst.ClassDef | None:
    """The class whose instance the parameter `name` of `func` holds: a plain method's own class
    for its first parameter, else what `instance_binding` shows."""
    own = _own_receiver(ctx, func)
    if own is not None:
        return own[1] if own[0] == name else None
    bound = instance_binding(ctx, func)
    return bound[1] if bound is not None and bound[0] == name else None


def _receiver_at(ctx: FileContext, node: cst.CSTNode) -> tuple[str, cst.ClassDef] | None:
    """The instance the code at `node` runs on: the enclosing method's first parameter and its
    class, also from a function defined inside the method that does not rebind the name."""
    function = ctx.index.enclosing_function(node)
    inner: list[cst.FunctionDef] = []
    while function is not None:
        own = _own_receiver(ctx, function)
        if own is not None:
            shadowed = any(p.name.value == own[0] for f in inner for p in (*f.params.posonly_params, *f.params.params))
            return None if shadowed else own
        inner.append(function)
        function = ctx.index.enclosing_function(function)
    return None


def _binding(ctx: FileContext, func: cst.FunctionDef) -> tuple[str, cst.ClassDef] | None:
    home = _method_class(ctx, func)
    decorators = _decorators(func) if home is not None else set()
    if home is not None and not decorators & {"staticmethod", "classmethod"}:
        return None
    if ctx.index.enclosing_function(func) is not None:
        return None  # a closure: its calls are its outer function's business
    params = [*func.params.posonly_params, *func.params.params]
    name = func.name.value
    seen: set[tuple[str, int]] = set()
    classes: dict[int, cst.ClassDef] = {}
    calls = 0
    for call in calls_by_name(ctx).get(name, ()):
        target = call.func
        if home is None:
            if type(target) is not cst.Name:
                continue
        elif not (type(target) is cst.Attribute and type(target.value) is cst.Name):
            continue
        receiver = _receiver_at(ctx, call)
        if home is not None and type(target) is cst.Attribute:
            on = target.value.value  # type: ignore[attr-defined]  # a Name, tested above
            if on != home.name.value and not (receiver is not None and receiver[1] is home and on == receiver[0]):
                continue  # another object's method of the same name
        calls += 1
        if receiver is None or any(a.star for a in call.args):
            return None
        shown = params
        if "classmethod" in decorators:
            shown = params[1:]  # `cls` is bound by the call itself
        positional = [a for a in call.args if a.keyword is None]
        handed = [
            p.name.value
            for p, a in zip(shown, positional)
            if type(a.value) is cst.Name and a.value.value == receiver[0]
        ]
        handed += [
            a.keyword.value
            for a in call.args
            if a.keyword is not None and type(a.value) is cst.Name and a.value.value == receiver[0]
        ]
        if len(handed) != 1:
            return None
        seen.add((handed[0], id(receiver[1])))
        classes[id(receiver[1])] = receiver[1]
    if calls == 0 or len(seen) != 1:
        return None
    param, cls_id = seen.pop()
    return param, classes[cls_id]


def handed_references(ctx: FileContext, cls: cst.ClassDef) -> list[tuple[str, cst.Attribute, cst.FunctionDef]]:
    """`(attr, node, function)` for each `owner.<attr>` read in a module-level function or a
    static or class method whose `owner` parameter `instance_binding` binds to instances of `cls`
    (`def _keep(model, t): model.priors.append(t)` called `_keep(self, t)`): the class's own
    `self.<attr>`, written where the class's methods hand their instance."""
    memo: dict[int, list[tuple[str, cst.Attribute, cst.FunctionDef]]] = ctx.shared(
        "instance_parameters.handed_references", lambda c: {}
    )
    key = id(cls)
    if key not in memo:
        found: list[tuple[str, cst.Attribute, cst.FunctionDef]] = []
        for func in ctx.index.of_type(cst.FunctionDef):
            bound = instance_binding(ctx, func)
            if bound is None or bound[1] is not cls:
                continue
            for node in ctx.index.within(func.body, cst.Attribute):
                if (
                    type(node.value) is cst.Name
                    and node.value.value == bound[0]
                    and ctx.index.enclosing_function(node) is func
                ):
                    found.append((node.attr.value, node, func))
        memo[key] = found
    return memo[key]
