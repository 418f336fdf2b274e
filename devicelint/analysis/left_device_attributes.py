"""A module's device attribute that a later move of the module leaves on the CPU.

`self.device = torch.device("cpu")` in a module's `__init__` is a plain attribute: `module.to(...)`
and `module.cuda()` move parameters, buffers and submodules through `_apply` and never rewrite
it, and a parent's move reaches a child only through `_apply`, so the child's own `to()`/`cuda()`
overrides that record the device never run. A method that keeps moving data or making tensors
onto that attribute after the move works on the CPU while the module's weights are on the GPU.

Claimed only when the file shows each step: the attribute (named `device`/`dev`, leading
underscores aside) is set by a constructor of the class or of a base class of the file to a value
that is the CPU at every construction (`constructor_devices`: a CPU literal, `None`, a default
left out, `p or torch.device("cpu")`, a statement `if p is None:` whose other branch keeps `p`); an
instance is then moved off the CPU directly (through a name, a helper that builds it, a parameter
annotated with the class) by a mover the class does not override, or as a child of a module class
that is moved (built in its `__init__` or in the arguments of its construction); no `_apply`
override and no write outside the constructor and the class's own movers refreshes it (a property
setter counts once the file assigns the property); and a method other than the constructor and
the movers uses it as a destination: `.to(self.device)`, `device=self.device`, a property that
returns it, or a submodule built from it whose class moves its inputs to what it was given.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.constructor_devices import cpu_at_every_construction, init_assignments
from devicelint.analysis.devices import DTYPE_NAMES
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_classes import self_attribute
from devicelint.context import FileContext

__all__ = ["LeftDevice", "left_device_uses"]

# A class's own movers: a direct move calls them, a parent's move never does.
_OWN_MOVERS = frozenset({"to", "cuda", "cpu"})
# Attribute names read as "the module's device" (leading underscores stripped); names such as
# `offload_device` or `cache_device` often hold a host device on purpose and are not claimed.
_DEVICE_NAMES = frozenset({"device", "dev"})
# How deep a chain of parents holding a child is followed.
_MAX_PARENTS = 3


@dataclass(frozen=True)
class LeftDevice:
    """`use` moves data to `self.<attr>` of `cls_name`, which `move` left on the CPU (through
    the module class `parent` where a parent's move reached it)."""

    cls_name: str
    attr: str
    use: cst.CSTNode
    move: cst.Call
    parent: str | None


def left_device_uses(ctx: FileContext) -> list[LeftDevice]:
    """Every destination use of a device attribute that a move of its module leaves behind."""
    return ctx.shared("left_device_uses", _build)


def _build(ctx: FileContext) -> list[LeftDevice]:
    classes = module_classes(ctx)
    if not classes:
        return []
    found: list[LeftDevice] = []
    seen: set[int] = set()
    for name, cls in classes.items():
        lineage = _lineage(ctx, cls)
        for attr, init in _device_attributes(ctx, lineage):
            if _refreshed(ctx, lineage, attr):
                continue
            moved = _move_leaving(ctx, name, lineage, classes, 0)
            if moved is None:
                continue
            values = init_assignments(ctx, init, attr)
            if not values or not all(
                cpu_at_every_construction(ctx, value, init) for value in _live_values(ctx, init, values)
            ):
                continue
            for use in _destination_uses(ctx, lineage, attr, classes):
                if id(use) not in seen:
                    seen.add(id(use))
                    found.append(LeftDevice(name, attr, use, moved[0], moved[1]))
    return found


def _lineage(ctx: FileContext, cls: cst.ClassDef) -> list[cst.ClassDef]:
    """`cls` and its base classes of this file, nearest first."""
    classes = {c.name.value: c for c in ctx.index.of_type(cst.ClassDef)}
    out = [cls]
    while len(out) < 8:
        bases = [dotted_name(b.value) for b in out[-1].bases if b.keyword is None]
        base = next((classes[b] for b in bases if b in classes and classes[b] not in out), None)
        if base is None:
            break
        out.append(base)
    return out


def _device_attributes(ctx: FileContext, lineage: list[cst.ClassDef]) -> Iterator[tuple[str, cst.FunctionDef]]:
    """(`attr`, the constructor that sets it) for each device-named attribute a constructor of
    the lineage assigns; the nearest constructor wins."""
    named: set[str] = set()
    for cls in lineage:
        init = methods(cls).get("__init__")
        if init is None:
            continue
        for node in ctx.index.walk(init.body):
            if type(node) is not cst.Assign or len(node.targets) != 1:
                continue
            attr = self_attribute(node.targets[0].target)
            if attr is None or attr in named or attr.lstrip("_") not in _DEVICE_NAMES:
                continue
            named.add(attr)
            yield attr, init


def _live_values(ctx: FileContext, init: cst.FunctionDef, values: list[cst.BaseExpression]) -> list[cst.BaseExpression]:
    """The values of `values` a construction can leave: of `if p is None: self.a = D` / `else:
    self.a = p`, only `p` when every construction passes `p` (the engine's outcomes of `p` hold
    no None), only `D` when every one leaves it None; all of them otherwise."""
    if len(values) == 1:
        return values
    unknown: list[cst.BaseExpression] = [cst.Name("__unknown__")]
    if len(values) != 2:
        return unknown
    branch = ctx.index.enclosing(values[0], cst.If)
    test = branch.test if branch is not None else None
    if not (
        branch is not None
        and type(test) is cst.Comparison
        and type(test.left) is cst.Name
        and len(test.comparisons) == 1
        and type(test.comparisons[0].comparator) is cst.Name
        and test.comparisons[0].comparator.value == "None"
        and type(test.comparisons[0].operator) in (cst.Is, cst.IsNot)
        and ctx.index.enclosing(values[1], cst.If) is branch
    ):
        return unknown
    none_first = type(test.comparisons[0].operator) is cst.Is
    when_none, when_given = (values[0], values[1]) if none_first else (values[1], values[0])
    parameter = test.left
    if not (type(when_given) is cst.Name and when_given.value == parameter.value):
        return unknown
    # the statement read as the expression `constructor_devices` knows: `p if p is not None else D`
    guarded = cst.IfExp(
        test=cst.Comparison(parameter, [cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))]),
        body=parameter,
        orelse=when_none,
    )
    return [guarded]


def _refreshed(ctx: FileContext, lineage: list[cst.ClassDef], attr: str) -> bool:
    """Whether something after the constructor may rewrite `self.<attr>`: an `_apply` override,
    a write in any method but the constructor and the class's own movers (a property setter
    only where the file assigns the property), or a write through another name (`m._device = d`)."""
    properties: set[str] = set()
    for cls in lineage:
        own = methods(cls)
        if "_apply" in own:
            return True
        for method in _functions(cls):
            name = method.name.value
            if name == "__init__" or name in _OWN_MOVERS:
                continue
            if not _writes_attribute(ctx, method, attr):
                continue
            setter = _setter_of(method)
            if setter is None:
                return True
            properties.add(setter)
    for node in ctx.index.of_type(cst.Assign):
        for target in node.targets:
            written = target.target
            if type(written) is not cst.Attribute:
                continue
            holder = written.value
            field = written.attr.value
            if field == attr and not (type(holder) is cst.Name and holder.value == "self"):
                return True
            if field in properties:
                inside = ctx.index.enclosing_function(node)
                if inside is None or inside.name.value != "__init__":
                    return True
    return False


def _functions(cls: cst.ClassDef) -> list[cst.FunctionDef]:
    """Every function of the class body, a property's getter and setter both."""
    body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
    return [stmt for stmt in body if type(stmt) is cst.FunctionDef]


def _setter_of(method: cst.FunctionDef) -> str | None:
    """`name` for a method decorated `@name.setter`."""
    for decorator in method.decorators:
        spelled = dotted_name(decorator.decorator) or ""
        if spelled.endswith(".setter"):
            return spelled[: -len(".setter")]
    return None


def _writes_attribute(ctx: FileContext, method: cst.FunctionDef, attr: str) -> bool:
    return any(
        type(node) is cst.Attribute and self_attribute(node) == attr and ctx.index.in_binding_target(node)
        for node in ctx.index.walk(method.body)
    )


def _move_leaving(
    ctx: FileContext,
    name: str,
    lineage: list[cst.ClassDef],
    classes: dict[str, cst.ClassDef],
    depth: int,
    as_child: bool = False,
) -> tuple[cst.Call, str | None] | None:
    """(a move off the CPU that reaches instances of class `name` without running an override
    of the mover it calls, the parent class it reached them through)."""
    overridden = {m for cls in lineage for m in methods(cls) if m in _OWN_MOVERS}
    for move in _moves_of(ctx, name):
        mover = move.func.attr.value if type(move.func) is cst.Attribute else ""
        if as_child or mover not in overridden:
            return move, None
    if depth >= _MAX_PARENTS:
        return None
    for parent in _parents_of(ctx, name, classes):
        parent_lineage = _lineage(ctx, classes[parent])
        moved = _move_leaving(ctx, parent, parent_lineage, classes, depth + 1, as_child=True)
        if moved is not None:
            return moved[0], moved[1] or parent
    return None


def _constructions(ctx: FileContext, name: str) -> list[cst.Call]:
    return [call for call in ctx.index.of_type(cst.Call) if dotted_name(call.func) == name]


def _parents_of(ctx: FileContext, name: str, classes: dict[str, cst.ClassDef]) -> list[str]:
    """Module classes that hold an instance of `name`: built in their `__init__`, or in the
    arguments of their construction (`Seq([Layer(1), Layer(2)])`)."""
    parents: list[str] = []
    for call in _constructions(ctx, name):
        function = ctx.index.enclosing_function(call)
        holder = ctx.index.enclosing_class(function) if function is not None else None
        if function is not None and function.name.value == "__init__" and holder is not None:
            if holder.name.value in classes and holder.name.value != name:
                parents.append(holder.name.value)
            continue
        for ancestor in ctx.index.ancestors(call):
            if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
                break
            outer = dotted_name(ancestor.func) if type(ancestor) is cst.Call else None
            if outer in classes and outer != name:
                parents.append(outer)
                break
    return list(dict.fromkeys(parents))


def _moves_of(ctx: FileContext, name: str) -> Iterator[cst.Call]:
    """Moves off the CPU of an instance of class `name` built by the file: on the construction
    itself, on a name bound to it (or to a helper of the file that returns one) in the same
    function, on a `self.<attr>` a class keeps it in, or on a parameter annotated with the class."""
    builders = {name} | _builders_of(ctx, name)
    for call in ctx.index.of_type(cst.Call):
        if not _device_move(ctx, call):
            continue
        assert type(call.func) is cst.Attribute
        receiver = call.func.value
        if type(receiver) is cst.Call and dotted_name(receiver.func) in builders:
            yield call
        elif _bound_to(ctx, call, receiver, builders):
            yield call


def _builders_of(ctx: FileContext, name: str) -> set[str]:
    """Functions of the file whose every `return` builds `name` (`create_metric(...)`)."""
    out: set[str] = set()
    for function in ctx.index.of_type(cst.FunctionDef):
        if ctx.index.enclosing_class(function) is not None:
            continue
        returns = ctx.index.returns_of(function)
        if returns and all(type(r.value) is cst.Call and dotted_name(r.value.func) == name for r in returns):
            out.add(function.name.value)
    return out


def _bound_to(ctx: FileContext, move: cst.Call, receiver: cst.BaseExpression, builders: set[str]) -> bool:
    """Whether `receiver` (a name or `self.<attr>`) holds an instance built by `builders`."""
    function = ctx.index.enclosing_function(move)
    if type(receiver) is cst.Name:
        if function is not None:
            for param in (*function.params.params, *function.params.kwonly_params):
                annotation = param.annotation.annotation if param.annotation is not None else None
                if param.name.value == receiver.value and dotted_name(annotation) in builders:
                    return True
        scope: cst.CSTNode = function if function is not None else ctx.module
        return any(
            _builds(node.value, builders)
            and any(type(t.target) is cst.Name and t.target.value == receiver.value for t in node.targets)
            and ctx.index.position(node) < ctx.index.position(move)
            for node in ctx.index.walk(scope)
            if type(node) is cst.Assign
        )
    attr = self_attribute(receiver)
    cls = ctx.index.enclosing_class(move)
    if attr is None or cls is None:
        return False
    return any(
        _builds(node.value, builders) and any(self_attribute(t.target) == attr for t in node.targets)
        for node in ctx.index.walk(cls)
        if type(node) is cst.Assign
    )


def _builds(value: cst.BaseExpression, builders: set[str]) -> bool:
    return type(value) is cst.Call and dotted_name(value.func) in builders


def _device_move(ctx: FileContext, call: cst.Call) -> bool:
    """`x.cuda(...)` or `x.to(d)` with `d` not the CPU and not a dtype."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value not in ("to", "cuda"):
        return False
    if func.attr.value == "cuda":
        return not (ctx.qualified_name(func) or "").startswith("torch.")
    target = next(
        (
            a.value
            for a in call.args
            if (a.keyword is None and not a.star) or (a.keyword and a.keyword.value == "device")
        ),
        None,
    )
    if target is None:
        return False
    if type(target) is cst.Call and ctx.qualified_name(target.func) == "torch.device" and target.args:
        target = target.args[0].value
    if type(target) is cst.SimpleString:
        value = literal_value(target)
        return isinstance(value, str) and not value.startswith(("cpu", "meta"))
    spelled = dotted_name(target) or ""
    if spelled.rsplit(".", 1)[-1] in DTYPE_NAMES or "dtype" in spelled.lower():
        return False
    return type(target) in (cst.Name, cst.Attribute, cst.Subscript, cst.Integer, cst.IfExp, cst.Call)


def _destination_uses(
    ctx: FileContext, lineage: list[cst.ClassDef], attr: str, classes: dict[str, cst.ClassDef]
) -> list[cst.CSTNode]:
    """Where a method of the lineage (not a constructor, mover or property of the attribute)
    sends data to `self.<attr>`: the argument of a move or a `device=`, or the call of a
    submodule built on it that moves its inputs there."""
    names = {attr} | _properties_returning(ctx, lineage, attr)
    transforms = _device_transforms(ctx, lineage, names, classes)
    uses: list[cst.CSTNode] = []
    for cls in reversed(lineage):
        for method in _functions(cls):
            name = method.name.value
            if name in _OWN_MOVERS or name in names or name == "_apply" or _builds_only(ctx, lineage, name):
                continue
            for node in ctx.index.walk(method.body):
                if type(node) is cst.Attribute and self_attribute(node) in names and _is_destination(ctx, node):
                    if not _registered_state(ctx, node):
                        uses.append(node)
                elif type(node) is cst.Call and self_attribute(node.func) in transforms:
                    uses.append(node)
    return sorted(uses, key=ctx.index.position)


def _builds_only(ctx: FileContext, lineage: list[cst.ClassDef], name: str) -> bool:
    """`__init__`, or a method only constructors call (`self._reset()`): it runs before any move."""
    if name == "__init__":
        return True
    calls = [
        node
        for cls in lineage
        for node in ctx.index.walk(cls)
        if type(node) is cst.Call and self_attribute(node.func) == name
    ]
    return bool(calls) and all(
        (caller := ctx.index.enclosing_function(call)) is not None and caller.name.value == "__init__" for call in calls
    )


def _registered_state(ctx: FileContext, use: cst.CSTNode) -> bool:
    """`use` builds a buffer or parameter (`register_buffer(...)`, `nn.Parameter(...)`): the
    module's move takes that along."""
    for ancestor in ctx.index.ancestors(use):
        if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
            return False
        if type(ancestor) is cst.Call:
            spelled = dotted_name(ancestor.func) or ""
            if spelled.endswith(("register_buffer", "register_parameter", "Parameter")):
                return True
    return False


def _properties_returning(ctx: FileContext, lineage: list[cst.ClassDef], attr: str) -> set[str]:
    """Properties of the lineage whose getter only returns `self.<attr>`."""
    out: set[str] = set()
    for cls in lineage:
        for method in _functions(cls):
            name = method.name.value
            if not any(dotted_name(d.decorator) == "property" for d in method.decorators):
                continue
            returns = ctx.index.returns_of(method)
            if len(returns) == 1 and returns[0].value is not None and self_attribute(returns[0].value) == attr:
                out.add(name)
    return out


def _is_destination(ctx: FileContext, node: cst.Attribute) -> bool:
    """`node` is the device of a move (`.to(node)`, `.to(device=node)`, `.cuda(node)`) or the
    `device=` of a call."""
    arg = ctx.index.parent(node)
    call = ctx.index.parent(arg) if type(arg) is cst.Arg else None
    if type(arg) is not cst.Arg or type(call) is not cst.Call:
        return False
    if arg.keyword is not None:
        return arg.keyword.value == "device"
    func = call.func
    return (
        type(func) is cst.Attribute
        and func.attr.value in ("to", "cuda")
        and call.args[0] is arg
        and not (ctx.qualified_name(func) or "").startswith("torch.")
    )


def _device_transforms(
    ctx: FileContext, lineage: list[cst.ClassDef], names: set[str], classes: dict[str, cst.ClassDef]
) -> set[str]:
    """Submodules (`self.<t>`) a constructor of the lineage builds as `K(self.<attr>)` where the
    module class `K` keeps the parameter it fills as its own device attribute and moves data to it."""
    out: set[str] = set()
    for cls in lineage:
        init = methods(cls).get("__init__")
        for node in ctx.index.walk(init.body) if init is not None else ():
            if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.value) is not cst.Call:
                continue
            target = self_attribute(node.targets[0].target)
            kind = dotted_name(node.value.func)
            if target is None or kind not in classes:
                continue
            handed = [a for a in node.value.args if self_attribute(a.value) in names]
            if len(handed) == 1 and _moves_to_given(ctx, classes[kind], handed[0], node.value):
                out.add(target)
    return out


def _moves_to_given(ctx: FileContext, cls: cst.ClassDef, arg: cst.Arg, call: cst.Call) -> bool:
    """Whether `cls`, built by `call` with `arg`, stores that argument as a device attribute its
    methods move data to."""
    init = methods(cls).get("__init__")
    if init is None:
        return False
    params = [p.name.value for p in init.params.params][1:]
    if arg.keyword is not None:
        param = arg.keyword.value
    else:
        position = call.args.index(arg)
        param = params[position] if position < len(params) else ""
    for node in ctx.index.walk(init.body):
        if (
            type(node) is cst.Assign
            and len(node.targets) == 1
            and type(node.value) is cst.Name
            and node.value.value == param
        ):
            attr = self_attribute(node.targets[0].target)
            if attr is not None and _destination_uses(ctx, [cls], attr, {}):
                return True
    return False
