"""A class is one unit: `self.a = self.b` keeps what the class's methods put on `self.b`.

One method leaves a value on `self.b` (`self._store(x)` running `self.b = torch.tensor(x)`, a
`setup()` building it) and another keeps it under another name (`self.a = self.b`). For every
rule that asks what *built* `self.a`, the answer is the values the class assigns to `self.b`,
followed through chains of such names (`aliased_values`). The attribute that only hands its
value on that way (every read is `self.a = self.b`) is no use of its own (`only_handed_on`): the
rule reads it where it is kept.

Only whole-value assignments of the class's own methods count (`self.b = value`, `self.b: T =
value`); an attribute that is also rebound otherwise (`self.b += 1`, unpacked, deleted, set
through `setattr`) is not followed, and `None` placeholders (`self.b = None` in `__init__`,
filled later) are left out.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.modules import methods
from devicelint.context import FileContext

Assigned = tuple[cst.BaseExpression, cst.FunctionDef]

# How many `self.a = self.b` links are followed: chains in real classes are one or two long.
MAX_CHAIN = 3


class _ClassAttributes:
    """The whole-value assignments and reads of each `self.<attr>` in one class's methods."""

    def __init__(self) -> None:
        self.values: dict[str, list[Assigned]] = {}
        self.rebound: set[str] = set()  # also bound otherwise: never followed
        self.reads: dict[str, list[cst.Attribute]] = {}


def _receiver(node: cst.CSTNode) -> str | None:
    """`b` for `self.b`."""
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
        return node.attr.value
    return None


def _attributes(ctx: FileContext, cls: cst.ClassDef) -> _ClassAttributes:
    def build(c: FileContext) -> _ClassAttributes:
        found = _ClassAttributes()
        own = methods(cls)
        for method in own.values():
            for node in c.index.walk(method.body):
                attr = _receiver(node)
                if attr is None or c.index.enclosing_function(node) is not method:
                    continue
                parent = c.index.parent(node)
                if type(parent) is cst.AssignTarget:
                    assign = c.index.parent(parent)
                    if type(assign) is cst.Assign:
                        if not (type(assign.value) is cst.Name and assign.value.value == "None"):
                            found.values.setdefault(attr, []).append((assign.value, method))
                        continue
                    found.rebound.add(attr)
                elif type(parent) is cst.AnnAssign and parent.target is node:
                    if parent.value is not None and not (
                        type(parent.value) is cst.Name and parent.value.value == "None"
                    ):
                        found.values.setdefault(attr, []).append((parent.value, method))
                elif (type(parent) is cst.AugAssign and parent.target is node) or c.index.in_binding_target(node):
                    found.rebound.add(attr)
                elif type(parent) is cst.Del:
                    found.rebound.add(attr)
                elif type(node) is cst.Attribute:  # (always: `_receiver` takes only attributes)
                    found.reads.setdefault(attr, []).append(node)
        for call in c.index.within(cls, cst.Call):
            # `setattr(self, name, value)`: any attribute may be rebound; keep to literal names
            if type(call.func) is cst.Name and call.func.value == "setattr" and len(call.args) >= 2:
                name = call.args[1].value
                if type(name) is cst.SimpleString:
                    found.rebound.add(name.raw_value)
                else:
                    found.rebound.add("*")
        return found

    return ctx.shared(("attribute_aliases", id(cls)), build)


def _owner(ctx: FileContext, node: cst.CSTNode) -> cst.ClassDef | None:
    """The class whose own method holds `node`."""
    method = ctx.index.enclosing_function(node)
    cls = ctx.index.enclosing_class(method) if method is not None else None
    if cls is None or methods(cls).get(method.name.value) is not method:  # type: ignore[union-attr]  # checked
        return None
    return cls


def aliased_values(ctx: FileContext, value: cst.BaseExpression) -> list[Assigned]:
    """The values, with the methods that assign them, that `value`, a `self.b` read in a method,
    stands for: what the class assigns to `self.b` (and, where that is `self.c`, to `self.c`).
    Empty when `value` is no such read, or the class rebinds the attribute other than whole."""
    attr = _receiver(value)
    cls = _owner(ctx, value) if attr is not None else None
    if cls is None or attr is None:
        return []
    found = _attributes(ctx, cls)
    out: list[Assigned] = []
    todo, seen = [attr], set[str]()
    while todo:
        name = todo.pop()
        if name in seen or len(seen) >= MAX_CHAIN:
            return []
        seen.add(name)
        if name in found.rebound or "*" in found.rebound or name not in found.values:
            return []
        for assigned, method in found.values[name]:
            inner = _receiver(assigned)
            if inner is not None:
                todo.append(inner)
            else:
                out.extend(_in_callers_words(ctx, cls, assigned, method))
    return out


def _in_callers_words(
    ctx: FileContext, cls: cst.ClassDef, value: cst.BaseExpression, method: cst.FunctionDef
) -> list[Assigned]:
    """`self.b = layers` in `_keep(self, layers)`: what the class's calls `self._keep(x)` hand
    that parameter, in the calling method (the value itself where the method is called nowhere in
    the class, rebinds the parameter, or a call does not show the argument)."""
    if type(value) is not cst.Name or value.value not in _parameters(method)[1:] or _rebinds(ctx, method, value.value):
        return [(value, method)]
    given: list[Assigned] = []
    for call in _calls_of(ctx, cls, method):
        argument = argument_for(call, method, value.value)
        caller = ctx.index.enclosing_function(call)
        if argument is None or caller is None:
            return [(value, method)]
        given.append((argument, caller))
    return given or [(value, method)]


def _parameters(method: cst.FunctionDef) -> list[str]:
    return [p.name.value for p in (*method.params.posonly_params, *method.params.params)]


def _rebinds(ctx: FileContext, method: cst.FunctionDef, name: str) -> bool:
    return any(
        type(n) is cst.Name and n.value == name and ctx.index.in_binding_target(n) for n in ctx.index.walk(method.body)
    )


def own_method(ctx: FileContext, call: cst.Call) -> cst.FunctionDef | None:
    """The plain method of the enclosing class that `call`, a `self.m(...)`, runs."""
    func = call.func
    if not (type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self"):
        return None
    cls = _owner(ctx, call)
    method = methods(cls).get(func.attr.value) if cls is not None else None
    return method if method is not None and not method.decorators else None


def _calls_of(ctx: FileContext, cls: cst.ClassDef, method: cst.FunctionDef) -> list[cst.Call]:
    """`self.<method>(...)` calls in the class's own methods (a plain bound method only)."""
    if method.decorators:
        return []
    name = method.name.value
    return [
        call
        for call in ctx.index.within(cls, cst.Call)
        if type(call.func) is cst.Attribute
        and call.func.attr.value == name
        and type(call.func.value) is cst.Name
        and call.func.value.value == "self"
    ]


def argument_for(call: cst.Call, method: cst.FunctionDef, name: str) -> cst.BaseExpression | None:
    """What `call` (`self.m(...)`) passes for the bound method's parameter `name`."""
    if any(a.star for a in call.args):
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    params = _parameters(method)[1:]
    positional = [a.value for a in call.args if a.keyword is None]
    position = params.index(name)
    return positional[position] if position < len(positional) else None


def stored_as_is(ctx: FileContext, arg: cst.Arg) -> bool:
    """`arg` goes to `self.m(...)`, a plain method of the class whose parameter for it is only
    stored whole on `self` (`self.b = layers`): the value is kept, not handed to anything that
    might copy or register it."""
    call = ctx.index.parent(arg)
    cls = _owner(ctx, call) if type(call) is cst.Call else None
    if type(call) is not cst.Call or cls is None or type(call.func) is not cst.Attribute:
        return False
    method = methods(cls).get(call.func.attr.value)
    if method is None or call not in _calls_of(ctx, cls, method) or arg.star:
        return False
    reads = _parameter_reads(ctx, call, arg, method, _parameters(method)[1:])
    return reads is not None and bool(reads) and all(_stored_whole(ctx, n) for n in reads)


def _is_attribute_name(ctx: FileContext, node: cst.Name) -> bool:
    parent = ctx.index.parent(node)
    return type(parent) is cst.Attribute and parent.attr is node


def _stored_whole(ctx: FileContext, node: cst.Name) -> bool:
    parent = ctx.index.parent(node)
    return (
        type(parent) is cst.Assign
        and parent.value is node
        and all(_receiver(t.target) is not None for t in parent.targets)
    )


def only_handed_on(ctx: FileContext, cls: cst.ClassDef, attr: str) -> bool:
    """Every read of `self.<attr>` in the class is the whole value of `self.a = self.<attr>`:
    the attribute only hands its value to another name (and is read there)."""
    found = _attributes(ctx, cls)
    reads = found.reads.get(attr, [])
    return bool(reads) and all(_handed_to_attribute(ctx, read) for read in reads)


def _handed_to_attribute(ctx: FileContext, read: cst.Attribute) -> bool:
    parent = ctx.index.parent(read)
    if type(parent) is cst.Assign and parent.value is read:
        return all(_receiver(t.target) is not None for t in parent.targets)
    if type(parent) is cst.AnnAssign and parent.value is read:
        return _receiver(parent.target) is not None
    return False


def returned_as_is(ctx: FileContext, arg: cst.Arg) -> bool:
    """`arg` goes to a function of the file, or a method of the enclosing class (`self.m(x)`,
    `Cls.m(x)`, `cls.m(x)`), whose one `return` hands that parameter back and which reads it
    nowhere else: a pass-through, so the caller still holds the value it passed."""
    call = ctx.index.parent(arg)
    if type(call) is not cst.Call or arg.star or any(a.star for a in call.args):
        return False
    found = _pass_through_callee(ctx, call)
    if found is None:
        return False
    function, params = found
    reads = _parameter_reads(ctx, call, arg, function, params)
    if reads is None:
        return False
    returns = ctx.index.returns_of(function)
    return len(returns) == 1 and len(reads) == 1 and returns[0].value is reads[0]


def _parameter_reads(
    ctx: FileContext, call: cst.Call, arg: cst.Arg, function: cst.FunctionDef, params: list[str]
) -> list[cst.Name] | None:
    """The reads in `function` of the parameter `arg` fills (`params`: those the call's
    arguments fill); None where it fills none, or the function rebinds it."""
    if arg.keyword is not None:
        name = arg.keyword.value
    else:
        position = [a for a in call.args if a.keyword is None].index(arg)
        name = params[position] if position < len(params) else ""
    if name not in params or _rebinds(ctx, function, name):
        return None
    return [
        n
        for n in ctx.index.walk(function.body)
        if type(n) is cst.Name and n.value == name and not _is_attribute_name(ctx, n)
    ]


def _pass_through_callee(ctx: FileContext, call: cst.Call) -> tuple[cst.FunctionDef, list[str]] | None:
    """The function `call` runs, with the parameters its arguments fill, where the file shows it."""
    func = call.func
    if type(func) is cst.Name:
        function = next((s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == func.value), None)
        return (function, _parameters(function)) if function is not None else None
    if type(func) is not cst.Attribute or type(func.value) is not cst.Name:
        return None
    cls = _owner(ctx, call)
    method = methods(cls).get(func.attr.value) if cls is not None else None
    if cls is None or method is None:
        return None
    decorators = {d.decorator.value for d in method.decorators if type(d.decorator) is cst.Name}
    if decorators - {"staticmethod", "classmethod"}:
        return None
    owner = func.value.value
    params = _parameters(method)
    if "staticmethod" in decorators:
        return (method, params) if owner in ("self", "cls", cls.name.value) else None
    if "classmethod" in decorators or owner == "self":
        return (method, params[1:]) if owner in ("self", "cls", cls.name.value) else None
    return None
