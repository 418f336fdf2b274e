"""Attributes a class stores once while it is built and never writes again.

The placement engine answers "where does this value live?" inside one function; a tensor that
`__init__` stores on `self` as a plain attribute (not a parameter or buffer) and another method
reads is `unknown` there. This module reads the class itself: which `self.<attr>` are assigned
exactly once, in `__init__`, and never written, mutated in place or moved afterwards, and what
they hold (a CPU tensor, or plain Python data such as a list of numbers). It works for any
class, `nn.Module` or not (a diffusion sampler keeps its noise schedule on a plain object).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.container_reads import through_containers, unpacked_part
from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_classes import is_parameter_call, self_attribute
from devicelint.analysis.placement_facts import FACTORIES, PRESERVING_METHODS, move_call
from devicelint.analysis.placement_values import is_device_guard, is_empty_placeholder, is_literal_data
from devicelint.context import FileContext

# Methods through which a class moves or casts its own tensors: what they touch is not constant.
CUSTOM_MOVERS = frozenset({"to", "cuda", "cpu", "_apply", "half", "float", "double"})
# Python calls whose result is plain data, never a tensor.
PLAIN_DATA_CALLS = frozenset({"list", "tuple", "sorted", "range"})
# torch factories that copy Python data (or a numpy array) into a new CPU tensor.
DATA_CONSTRUCTORS = frozenset({"tensor", "as_tensor", "from_numpy", "Tensor", "FloatTensor", "LongTensor"})


@dataclass(frozen=True)
class StoredOnce:
    """`self.<attr> = value`, the only write of `attr` in its class, made in `__init__`."""

    attr: str
    value: cst.BaseExpression
    cls: cst.ClassDef
    # the class is an `nn.Module` (a buffer would move with it)
    is_module: bool
    # a tensor made on the CPU (by a torch factory without `device=`, or `.cpu()`)
    cpu_tensor: bool
    # a 0-dim CPU tensor (`torch.tensor(2.0)`)
    scalar: bool
    # plain Python data: numbers, lists or tuples of numbers, `list(...)`
    plain_data: bool


def stored_once(ctx: FileContext, cls: cst.ClassDef) -> dict[str, StoredOnce]:
    """The attributes of `cls` written exactly once, by a plain assignment in `__init__`."""
    cache: dict[int, dict[str, StoredOnce]] = ctx.shared("constant_attributes", lambda c: {})
    found = cache.get(id(cls))
    if found is None:
        found = cache[id(cls)] = _stored_once(ctx, cls)
    return found


def _stored_once(ctx: FileContext, cls: cst.ClassDef) -> dict[str, StoredOnce]:
    own = methods(cls)
    init = own.get("__init__")
    body = class_body_values(cls)
    if init is None and not body:
        return {}
    building = set() if init is None else {id(init)} | {id(own[n]) for n in _init_only_helpers(ctx, cls, own, init)}
    assigned: dict[str, list[cst.BaseExpression]] = {}
    written: set[str] = set()
    for name, method in own.items():
        for node in ctx.index.walk(method):
            if type(node) is cst.Call:
                _note_registration(node, written)
                family = _dynamic_setattr(ctx, node)
                if family is not None and ctx.index.enclosing_class(node) is cls:
                    if id(method) in building and name not in CUSTOM_MOVERS:
                        assigned.setdefault(family[0], []).append(family[1])
                    else:
                        written.add(family[0])
            attr = self_attribute(node) if type(node) is cst.Attribute else None
            if attr is None or ctx.index.enclosing_class(node) is not cls:
                continue
            if name in CUSTOM_MOVERS:
                written.add(attr)  # the class moves or casts it by hand
                continue
            value = _assigned_value(ctx, node)
            if value is not None and id(method) in building:
                assigned.setdefault(attr, []).append(value)
            elif value is not None or _mutated(ctx, node):
                written.add(attr)
    written |= _written_by_subclasses(ctx, cls)
    for attr, value in body.items():
        # a class attribute (`zero_points = torch.tensor([...])` in the class body) that no method
        # writes through `self`: every instance reads that one object
        if attr not in assigned:
            assigned[attr] = [value]
    is_module = cls.name.value in module_classes(ctx) and module_classes(ctx)[cls.name.value] is cls
    facts = file_facts(ctx)
    out: dict[str, StoredOnce] = {}
    for attr, values in assigned.items():
        if attr in written or len(values) != 1 or values[0] is _UNPACKED:
            continue
        value = values[0]
        if is_parameter_call(ctx, value) or _optional_parameter(ctx, value):
            continue
        fact = facts.value(value)
        cpu = facts.place_of(value) is Place.HOST and not fact.batch
        scalar = cpu and fact.scalar
        built = through_containers(ctx, value)  # `self.t = parts[0]`: what was put in
        if not cpu:
            cpu, scalar = made_on_cpu(ctx, built)
        plain = not cpu and _plain_data(ctx, built)
        if cpu or plain:
            out[attr] = StoredOnce(attr, value, cls, is_module, cpu, scalar, plain)
    return out


def class_body_values(cls: cst.ClassDef) -> dict[str, cst.BaseExpression]:
    """Names the body of `cls` binds exactly once, by a plain `name = value` (or `name: T =
    value`) statement of the body itself: class attributes, which every instance reads through
    `self.name` while no method rebinds it on the instance."""
    found: dict[str, list[cst.BaseExpression]] = {}
    if type(cls.body) is not cst.IndentedBlock:
        return {}
    for statement in cls.body.body:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
                found.setdefault(small.targets[0].target.value, []).append(small.value)
            elif type(small) is cst.AnnAssign and small.value is not None and type(small.target) is cst.Name:
                found.setdefault(small.target.value, []).append(small.value)
    return {name: values[0] for name, values in found.items() if len(values) == 1}


def is_class_body_value(ctx: FileContext, value: cst.CSTNode) -> bool:
    """`value` is bound in a class body, outside every method (a class attribute)."""
    return ctx.index.enclosing_function(value) is None and ctx.index.enclosing_class(value) is not None


def _optional_parameter(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`nn.Parameter(...) if bias else None`: a parameter (moved and saved with the module)
    where the class has one."""
    if type(value) is not cst.IfExp:
        return False
    sides = (value.body, value.orelse)
    return any(is_parameter_call(ctx, side) for side in sides) and all(
        is_parameter_call(ctx, side) or (type(side) is cst.Name and side.value == "None") for side in sides
    )


def attribute_key(node: cst.CSTNode) -> str | None:
    """The attribute of `self` a read names: `x` for `self.x` and `getattr(self, "x")`, and the
    family `pos{}` for `getattr(self, f"pos{i}")` (attributes set with `setattr(self, f"pos{i}",
    ...)`); None for anything else."""
    attr = self_attribute(node)
    if attr is not None:
        return attr
    if not (
        type(node) is cst.Call
        and type(node.func) is cst.Name
        and node.func.value == "getattr"
        and len(node.args) >= 2
        and type(node.args[0].value) is cst.Name
        and node.args[0].value.value == "self"
    ):
        return None
    name = node.args[1].value
    if type(name) is cst.SimpleString:
        text = literal_value(name)
        return text if isinstance(text, str) else None
    return _family(name)


def _family(node: cst.BaseExpression) -> str | None:
    """`pos{}` for the f-string `f"pos{i}"` (its text with each replacement field as `{}`)."""
    if type(node) is not cst.FormattedString:
        return None
    parts = [p.value if type(p) is cst.FormattedStringText else "{}" for p in node.parts]
    return "".join(parts) if any(p != "{}" for p in parts) else None


def _dynamic_setattr(ctx: FileContext, call: cst.Call) -> tuple[str, cst.BaseExpression] | None:
    """(family, value) for `setattr(self, f"pos{i}", value)`: one attribute per name the
    f-string makes, each written by this call."""
    if not (
        type(call.func) is cst.Name
        and call.func.value == "setattr"
        and len(call.args) == 3
        and not any(a.star or a.keyword is not None for a in call.args)
        and type(call.args[0].value) is cst.Name
        and call.args[0].value.value == "self"
    ):
        return None
    family = _family(call.args[1].value)
    return (family, call.args[2].value) if family is not None else None


def _init_only_helpers(
    ctx: FileContext, cls: cst.ClassDef, own: dict[str, cst.FunctionDef], init: cst.FunctionDef
) -> list[str]:
    """Methods that only `__init__` calls (`self._build_tables()`), and nothing else in the file
    names: what they store is stored while the object is built."""
    found = []
    for name, method in own.items():
        if method is init or name in CUSTOM_MOVERS or name.startswith("__"):
            continue
        uses = [n for n in _attributes_named(ctx).get(name, ()) if ctx.index.enclosing_function(n) is not method]
        if uses and all(
            type(n.value) is cst.Name
            and n.value.value == "self"
            and ctx.index.enclosing_function(n) is init
            and _called(ctx, n)
            for n in uses
        ):
            found.append(name)
    return found


def _attributes_named(ctx: FileContext) -> dict[str, list[cst.Attribute]]:
    """Every `<x>.name` of the file, by name."""

    def build(c: FileContext) -> dict[str, list[cst.Attribute]]:
        found: dict[str, list[cst.Attribute]] = {}
        for node in c.index.of_type(cst.Attribute):
            found.setdefault(node.attr.value, []).append(node)
        return found

    return ctx.shared("constant_attributes.attributes_named", build)


def _called(ctx: FileContext, node: cst.Attribute) -> bool:
    """`node` is the function of a call: `self.m(...)`, not `self.m` handed on."""
    parent = ctx.index.parent(node)
    return type(parent) is cst.Call and parent.func is node


def _written_by_subclasses(ctx: FileContext, cls: cst.ClassDef) -> set[str]:
    """Attributes that a subclass in the same file assigns, mutates or moves (`self.table =
    self.table.to(device)` in a subclass's own `to()`)."""
    written: set[str] = set()
    for other in ctx.index.of_type(cst.ClassDef):
        if other is cls or not any(
            (dotted_name(b.value) or "").rsplit(".", 1)[-1] == cls.name.value for b in other.bases
        ):
            continue
        for node in ctx.index.walk(other):
            attr = self_attribute(node) if type(node) is cst.Attribute else None
            if attr is not None and (_assigned_value(ctx, node) is not None or _mutated(ctx, node)):
                written.add(attr)
            elif type(node) is cst.Call:
                _note_registration(node, written)
    return written


# Marks an attribute assigned by tuple unpacking (`self.a, self.b = ...`): its value is unknown.
_UNPACKED = cst.Name("_")


def _assigned_value(ctx: FileContext, node: cst.CSTNode) -> cst.BaseExpression | None:
    """The value written by `self.attr = value` (or `_UNPACKED`), else None."""
    parent = ctx.index.parent(node)
    if type(parent) is cst.AssignTarget:
        assign = ctx.index.parent(parent)
        if type(assign) is cst.Assign and len(assign.targets) == 1:
            return assign.value
        return _UNPACKED
    if type(parent) is cst.AnnAssign and parent.target is node:
        return parent.value if parent.value is not None else None
    if type(parent) is cst.For and parent.target is node:
        return _UNPACKED
    if type(parent) is cst.Element and ctx.index.in_binding_target(node):
        # `self.a, self.b = x, y`: its part where the file shows the container, else unknown
        return unpacked_part(ctx, node) or _UNPACKED  # type: ignore[arg-type]  # an Attribute
    return None


def _mutated(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`self.t += 1`, `self.t[i] = v`, `self.t.mul_(2)`, `self.t.append(x)`, `del self.t`."""
    parent = ctx.index.parent(node)
    if type(parent) in (cst.AugAssign, cst.Del):
        return True
    if type(parent) is cst.Subscript and parent.value is node:
        holder = ctx.index.parent(parent)
        return type(holder) in (cst.AssignTarget, cst.AugAssign, cst.Del)
    if type(parent) is cst.Attribute and parent.value is node:
        method = parent.attr.value
        call = ctx.index.parent(parent)
        if type(call) is cst.Call and call.func is parent:
            return (method.endswith("_") and not method.startswith("_")) or method in (
                "append",
                "extend",
                "insert",
                "update",
                "pop",
                "clear",
                "setdefault",
                "copy_",
                "data",
            )
        return method == "data" and type(ctx.index.parent(parent)) is cst.AssignTarget
    return False


def _note_registration(call: cst.Call, written: set[str]) -> None:
    """`self.register_buffer("t", ...)` or `setattr(self, "t", ...)`: `t` is not a plain attribute."""
    func = call.func
    name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
    if name not in ("register_buffer", "register_parameter", "setattr"):
        return
    for arg in call.args[:2]:
        if type(arg.value) is cst.SimpleString:
            text = literal_value(arg.value)
            if isinstance(text, str):
                written.add(text)
        elif name != "setattr":
            family = _family(arg.value)  # `self.register_buffer(f"pos{i}", ...)`
            if family is not None:
                written.add(family)


def made_on_cpu(ctx: FileContext, value: cst.BaseExpression) -> tuple[bool, bool]:
    """(made on the CPU, 0-dim) for a torch factory call the engine left unknown (its data is a
    parameter): `torch.tensor(res)`, `torch.from_numpy(table).float()`."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in PRESERVING_METHODS:
        if move_call(value) is not None:
            return False, False
        value = value.func.value
    if type(value) is not cst.Call or not value.args:
        return False, False
    qualified = ctx.qualified_name(value.func) or ""
    short = qualified[len("torch.") :] if qualified.startswith("torch.") else ""
    if short not in FACTORIES or is_empty_placeholder(value, short):
        return False, False
    if any(a.star or (a.keyword is not None and a.keyword.value in ("device", "out")) for a in value.args):
        return False, False
    if _under_device_test(ctx, value):
        return False, False
    first = value.args[0].value
    if short in DATA_CONSTRUCTORS and type(first) not in (
        cst.Name,
        cst.Attribute,
        cst.List,
        cst.Tuple,
        cst.Call,
        cst.Subscript,
    ):
        return short != "from_numpy" and type(first) in (cst.Integer, cst.Float, cst.UnaryOperation), True
    return True, False


def _under_device_test(ctx: FileContext, node: cst.CSTNode) -> bool:
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and is_device_guard(ancestor.test, ctx):
            return True
        if type(ancestor) is cst.FunctionDef:
            return False
    return False


def _plain_data(ctx: FileContext, value: cst.BaseExpression) -> bool:
    if isinstance(value, (cst.List, cst.Tuple)):
        return is_literal_data(value) and all(
            type(e.value) is not cst.Name or e.value.value in ("True", "False") for e in value.elements
        )
    if type(value) is cst.Call and type(value.func) is cst.Name:
        return value.func.value in PLAIN_DATA_CALLS
    return False


def module_constant(ctx: FileContext, name: str) -> cst.BaseExpression | None:
    """The value of a module-level name bound exactly once (`SCHEDULE = torch.linspace(...)`)."""
    values = module_level_values(ctx).get(name, [])
    return values[0] if len(values) == 1 else None


def _at_module_level(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Outside every function and class body (a top-level `def`/`class` itself counts)."""
    return not any(type(a) in (cst.FunctionDef, cst.ClassDef, cst.Lambda) for a in ctx.index.ancestors(node))


def module_level_values(ctx: FileContext) -> dict[str, list[cst.BaseExpression | None]]:
    """Every top-level binding of each name: the value for `NAME = value`, None for any
    other binding (`def`, `class`, `+=`, unpacking). A name bound once is a module constant."""

    def build(c: FileContext) -> dict[str, list[cst.BaseExpression | None]]:
        found: dict[str, list[cst.BaseExpression | None]] = {}

        def rebound(target: cst.CSTNode) -> None:
            for name in c.index.walk(target):
                if type(name) is cst.Name:
                    found.setdefault(name.value, []).append(None)

        kinds = (cst.FunctionDef, cst.ClassDef, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For)
        # only how many times a name is bound matters here, not in which order
        for node in (n for kind in kinds for n in c.index.of_type(kind) if _at_module_level(c, n)):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                found.setdefault(node.name.value, []).append(None)
            elif type(node) is cst.Assign:
                for target in node.targets:
                    if type(target.target) is cst.Name:
                        found.setdefault(target.target.value, []).append(node.value if len(node.targets) == 1 else None)
                    else:
                        rebound(target.target)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)):
                rebound(node.target)
        for node in c.index.of_type(cst.Global):
            for item in node.names:  # rebound inside a function
                found.setdefault(item.name.value, []).append(None)
        return found

    return ctx.shared("constant_attributes.module_level", build)
