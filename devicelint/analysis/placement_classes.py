"""What a module class holds: submodules, parameters and buffers, and plain attributes.

`class_facts(ctx)` reads every `self.<name> = ...` in the methods of each `nn.Module`
subclass of a file, so the placement analysis knows that `self.embed(...)` calls a module
and `self.weight` is a registered (moved) tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.attribute_aliases import returned_as_is, stored_as_is
from devicelint.analysis.container_reads import through_containers, unpacked_part
from devicelint.analysis.devices import is_dtype
from devicelint.analysis.modules import (
    NOT_MODULES,
    imported_module_class,
    is_library_module_class,
    methods,
    module_classes,
)
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_facts import (
    MODULE_SELF_METHODS,
    MOVE_METHODS,
    NN_NON_MODULES,
    PARAMETER_FREE_MODULES,
)
from devicelint.context import FileContext

CONTAINER_MODULES = frozenset({"ModuleList", "ModuleDict", "Sequential"})
KNOWN_DEVICE_BASES = ("LightningModule", "PreTrainedModel")


@dataclass
class ClassFacts:
    """The attributes of one `nn.Module` subclass, as its methods assign them."""

    node: cst.ClassDef
    methods: dict[str, cst.FunctionDef]
    # attribute -> the module class's short name (`Linear`, `Block`), for `self.x = nn.Linear(...)`
    submodules: dict[str, str] = field(default_factory=dict)
    # attributes holding registered tensors (nn.Parameter, register_buffer, register_parameter)
    registered: set[str] = field(default_factory=set)
    # the class has a `device` attribute or property (Lightning, transformers, or its own)
    has_device: bool = False
    # every `self.<attr> = <value>` statement: (attr, value, enclosing method); an attribute
    # bound by unpacking a container the file shows (`self.a, self.b = x, y`, `self.pe, _ = box`)
    # has the part it receives as its value
    assignments: list[tuple[str, cst.BaseExpression, cst.FunctionDef]] = field(default_factory=list)
    # every `self.<attr>` expression in the class's methods: (attr, node, enclosing method)
    references: list[tuple[str, cst.Attribute, cst.FunctionDef]] = field(default_factory=list)
    # attributes registered with `register_buffer` (a subset of `registered`): `.to()` replaces
    # these tensors, so any other reference to the old tensor goes stale
    buffers: set[str] = field(default_factory=set)
    # a `register_buffer` whose name is computed (`f"anchor_{i}"`): `getattr(self, ...)` may be one
    dynamic_buffers: bool = False
    # buffer name -> the tensor `register_buffer` is handed, and the method that registers it
    buffer_values: dict[str, tuple[cst.BaseExpression, cst.FunctionDef]] = field(default_factory=dict)
    # the part an unpacked attribute received (by `id`) -> its target `self.<attr>`
    unpacked_targets: dict[int, cst.Attribute] = field(default_factory=dict)


def module_constructor(ctx: FileContext, call: cst.BaseExpression) -> str | None:
    """The short class name when `call` constructs an `nn.Module` (`nn.Linear(...)`, `Block(...)`)."""
    if type(call) is not cst.Call:
        return None
    qualified = ctx.qualified_name(call.func)
    if qualified is not None and qualified.startswith("torch.nn.") and qualified.count(".") == 2:
        last = qualified.rsplit(".", 1)[-1]
        if last[:1].isupper() and last not in NN_NON_MODULES:
            return last
        return None
    if type(call.func) is cst.Name and call.func.value in module_classes(ctx):
        return call.func.value
    imported = imported_module_class(ctx, call.func)
    if imported is not None and not imported.places_itself:
        # (a class that places its own layers, `.to("cuda:1")`, gives outputs wherever its
        # `forward` puts them: left unknown, as any callable from elsewhere)
        return imported.qualified.rsplit(".", 1)[-1]
    return None


def is_parameter_call(ctx: FileContext, node: cst.BaseExpression) -> bool:
    return type(node) is cst.Call and ctx.qualified_name(node.func) in (
        "torch.nn.Parameter",
        "torch.nn.parameter.Parameter",
        "torch.nn.Buffer",
    )


_FLOAT32 = frozenset({"torch.float32", "torch.float"})
# torch factories whose result is floating point with no `dtype` (`full` and `arange` follow
# their fill value, the `_like` ones their input)
FLOAT_FACTORIES = frozenset({"ones", "zeros", "empty", "rand", "randn", "eye", "linspace", "logspace"})


def same_dtype_cast_of_parameter(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`nn.Parameter(torch.ones(n)).float()` (or `.to(torch.float32)`): a cast to the dtype the
    tensor already has returns the tensor itself, so the attribute still holds the Parameter.
    The data is a torch factory given no `dtype`, which makes float32 unless the file changes
    the default dtype."""
    if type(value) is not cst.Call or type(value.func) is not cst.Attribute:
        return False
    cast, inner = value.func.attr.value, value.func.value
    if cast == "float":
        to_float32 = not value.args
    elif cast in ("to", "type"):
        to_float32 = len(value.args) == 1 and ctx.qualified_name(value.args[0].value) in _FLOAT32
    else:
        return False
    if not to_float32 or type(inner) is not cst.Call or not is_parameter_call(ctx, inner) or not inner.args:
        return False
    data = inner.args[0].value
    return (
        type(data) is cst.Call
        and (ctx.qualified_name(data.func) or "").rsplit(".", 1)[-1] in FLOAT_FACTORIES
        and (ctx.qualified_name(data.func) or "").startswith("torch.")
        and not any(a.keyword is not None and a.keyword.value == "dtype" for a in data.args)
        and "set_default_dtype" not in ctx.source
    )


# Moves that copy a tensor to another device: on an `nn.Parameter` they return a plain tensor.
_COPYING_MOVES = frozenset({"cuda", "to", "xpu", "mps", "npu"})


def parameter_moved_by_hand(ctx: FileContext, value: cst.BaseExpression) -> str | None:
    """`cuda` for `nn.Parameter(t).cuda()` (also `.to(device)`): the move returns a copy, a plain
    non-leaf tensor, so the attribute it is assigned to holds no Parameter and `nn.Module` never
    registers it. None for anything else, a same-dtype cast (`.to(torch.float32)`) included."""
    if type(value) is not cst.Call or type(value.func) is not cst.Attribute:
        return None
    method, inner = value.func.attr.value, value.func.value
    if method not in _COPYING_MOVES or not is_parameter_call(ctx, inner):
        return None
    if method == "to":
        first = next((a for a in value.args if not a.star and (a.keyword is None or a.keyword.value == "device")), None)
        if first is None or (first.keyword is None and is_dtype(ctx, first.value)):
            return None  # `.to(dtype=...)`, `.to(torch.float16)`: a cast, not a move
    return method


def self_attribute(node: cst.CSTNode) -> str | None:
    """`name` for `self.name`, else None."""
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
        return node.attr.value
    return None


def _string(node: cst.BaseExpression) -> str | None:
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        return value if isinstance(value, str) else None
    return None


def _owner(
    ctx: FileContext, node: cst.CSTNode, by_class: dict[int, ClassFacts]
) -> tuple[ClassFacts, cst.FunctionDef] | None:
    """The module class and its method whose body holds `node` (None outside module methods)."""
    method = None
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) is cst.FunctionDef:
            method = ancestor
        elif type(ancestor) is cst.ClassDef:
            facts = by_class.get(id(ancestor))
            if (
                facts is None
                or method is None
                or method.name.value not in facts.methods
                or facts.methods[method.name.value] is not method
            ):
                return None
            return facts, method
    return None


def _build(ctx: FileContext) -> dict[str, ClassFacts]:
    out: dict[str, ClassFacts] = {}
    by_class: dict[int, ClassFacts] = {}
    for name, cls in module_classes(ctx).items():
        facts = ClassFacts(node=cls, methods=methods(cls))
        facts.has_device = "device" in facts.methods or any(
            (dotted_name(b.value) or "").endswith(KNOWN_DEVICE_BASES) for b in cls.bases
        )
        out[name] = facts
        by_class[id(cls)] = facts
    if not out:
        return out
    index = ctx.index
    # Every `self.<attr>` in a method of a module class, in source order.
    for node in index.of_type(cst.Attribute):
        if type(node.value) is cst.Name and node.value.value == "self":
            owner = _owner(ctx, node, by_class)
            if owner is not None:
                owner[0].references.append((node.attr.value, node, owner[1]))
    for facts in out.values():
        for attr, node, method in facts.references:
            parent = index.parent(node)
            if type(parent) is cst.AssignTarget:
                assign = index.parent(parent)
                if type(assign) is cst.Assign:
                    _record(ctx, facts, attr, assign.value, method)
            elif type(parent) is cst.AnnAssign and parent.target is node and parent.value is not None:
                _record(ctx, facts, attr, parent.value, method)
            elif type(parent) is cst.Element:
                part = unpacked_part(ctx, node)
                if part is not None:
                    facts.unpacked_targets[id(part)] = node
                    _record(ctx, facts, attr, part, method)
    for call in index.of_type(cst.Call):
        func = call.func
        if not (type(func) is cst.Attribute and func.attr.value in _REGISTERS and call.args):
            continue
        if not (type(func.value) is cst.Name and func.value.value == "self"):
            continue
        owner = _owner(ctx, call, by_class)
        key = _string(call.args[0].value)
        if owner is not None and key is None and func.attr.value == "register_buffer":
            owner[0].dynamic_buffers = True
        if owner is None or key is None:
            continue
        if func.attr.value in ("register_module", "add_module"):
            owner[0].submodules[key] = "Module"
        else:
            owner[0].registered.add(key)
            if func.attr.value == "register_buffer":
                owner[0].buffers.add(key)
                if len(call.args) > 1:
                    owner[0].buffer_values[key] = (call.args[1].value, owner[1])
    return out


_REGISTERS = frozenset({"register_buffer", "register_parameter", "register_module", "add_module"})


def _record(ctx: FileContext, facts: ClassFacts, attr: str, value: cst.BaseExpression, method: cst.FunctionDef) -> None:
    facts.assignments.append((attr, value, method))
    if attr == "device":
        facts.has_device = True
    value = base = through_containers(ctx, value)  # `self.stage = parts[0]`: what was put in
    # `nn.Linear(8, 8).to("cuda:1").eval()`: moves and mode switches return the module itself
    while (
        type(base) is cst.Call
        and type(base.func) is cst.Attribute
        and base.func.attr.value in MOVE_METHODS | MODULE_SELF_METHODS
    ):
        base = base.func.value
    constructed = module_constructor(ctx, base) or built_module(ctx, base)
    if constructed is not None:
        facts.submodules[attr] = constructed
    elif (
        is_parameter_call(ctx, value)
        or same_dtype_cast_of_parameter(ctx, value)
        or (
            # `nn.Parameter(torch.zeros(n)) if bias else None`
            type(value) is cst.IfExp and (is_parameter_call(ctx, value.body) or is_parameter_call(ctx, value.orelse))
        )
        or _returns_parameters(ctx, value, facts)
    ):
        facts.registered.add(attr)


def built_module(ctx: FileContext, value: cst.BaseExpression) -> str | None:
    """The module class that `value` builds where it is not a constructor call itself: either
    branch of `nn.BatchNorm2d(c) if identity else None`, a library layer
    (`torchvision.ops.MLP(...)`), or a call of a helper function of the file whose every
    `return` builds one (`conv_bn(...)` returning `nn.Sequential(...)`)."""
    if type(value) is cst.IfExp:
        return next(
            (found for branch in (value.body, value.orelse) if (found := module_constructor(ctx, branch))), None
        )
    if type(value) is not cst.Call:
        return None
    library = library_module(ctx, value)
    if library is not None:
        return library
    if type(value.func) is not cst.Name:
        return None
    helper = next((s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == value.func.value), None)
    if helper is None:
        return None
    built: list[str | None] = []
    for node in ctx.index.returns_of(helper):
        built.append(module_constructor(ctx, node.value) if node.value is not None else None)
    return built[0] if built and all(built) else None


def class_facts(ctx: FileContext) -> dict[str, ClassFacts]:
    """Facts about each `nn.Module` subclass of the file, by class name (memoised per file)."""
    return ctx.shared("placement_classes", _build)


_REGISTERING = frozenset({"register_buffer", "register_parameter", "register_module", "add_module"})
_PLAIN_VALUES = (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def holds_no_state(ctx: FileContext, name: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether the file's module class `name` has nothing `.to()`, `state_dict()` or
    `parameters()` would reach: derived from `nn.Module` itself, it registers no parameter or
    buffer, and each of its attributes is a parameter-free layer (`nn.AvgPool1d`), another such
    class of the file, or a plain value it never calls (`self.kernel_size = kernel_size`)."""
    facts = class_facts(ctx).get(name)
    if facts is None or name in seen or facts.registered or facts.buffers or facts.dynamic_buffers:
        return False
    bases = facts.node.bases
    if len(bases) != 1 or ctx.qualified_name(bases[0].value) != "torch.nn.Module":
        return False
    for node in ctx.index.walk(facts.node):
        if type(node) is cst.Call and (
            is_parameter_call(ctx, node) or type(node.func) is cst.Attribute and node.func.attr.value in _REGISTERING
        ):
            return False
    called = {
        attr
        for attr, reference, _ in facts.references
        if type(parent := ctx.index.parent(reference)) is cst.Call and parent.func is reference
    }
    for attr, value, _ in facts.assignments:
        if type(value) is cst.Call:
            built = module_constructor(ctx, value) or library_module(ctx, value)
            if built in PARAMETER_FREE_MODULES:
                continue
            if built is None or not holds_no_state(ctx, built, seen | {name}):
                return False
        elif type(value) is cst.Name and value.value not in ("True", "False", "None"):
            if attr in called:
                return False  # `self.enc = encoder` then `self.enc(x)`: a module handed in
        elif type(value) not in _PLAIN_VALUES and type(value) is not cst.Name:
            return False
    return True


# -- plain containers ------------------------------------------------------------------------
# What a module keeps in a Python list, tuple or dict: DL103 asks whether the elements are
# modules, DL102 whether they are tensors that `model.to()` leaves behind.

CONTAINER_LITERALS = {
    cst.List: "list",
    cst.Tuple: "tuple",
    cst.Dict: "dict",
    cst.ListComp: "list",
    cst.DictComp: "dict",
}
_ADDERS = frozenset({"append", "extend", "insert", "update"})
# Builtins that only iterate over or inspect a container: handing it to them registers nothing.
ITERATION_HELPERS = frozenset(
    {"zip", "enumerate", "len", "reversed", "iter", "sorted", "print", "isinstance", "any", "all", "map", "filter"}
)


@dataclass
class ContainerFill:
    """One place where a plain container receives elements."""

    node: cst.CSTNode  # what a finding points at: the literal, the `.append(...)` call, the assigned value
    elements: list[cst.BaseExpression]
    literal: bool  # `elements` are every element of a literal (so "are all of them modules?" can be asked)


@dataclass
class LocalContainer:
    """A plain list/tuple/dict held by a local name of one function."""

    kind: str
    fills: list[ContainerFill] = field(default_factory=list)
    # handed to a call that may register or copy its elements (`nn.Sequential(*layers)`)
    handed_on: bool = False
    returned: bool = False


_CONTAINER_CALLS = {
    "list": "list",
    "tuple": "tuple",
    "dict": "dict",
    "collections.OrderedDict": "dict",
    "OrderedDict": "dict",
}


def container_kind(ctx: FileContext, value: cst.BaseExpression) -> str | None:
    """ "list", "tuple" or "dict" for a plain container: a literal, a comprehension, or `list()`,
    `dict()`, `OrderedDict()` (empty or around a literal or generator)."""
    kind = CONTAINER_LITERALS.get(type(value))
    if kind is not None or type(value) is not cst.Call:
        return kind
    name = ctx.qualified_name(value.func) or (value.func.value if type(value.func) is cst.Name else "")
    kind = _CONTAINER_CALLS.get(name)
    if kind is None or len(value.args) > 1 or any(a.keyword is not None or a.star for a in value.args):
        return None
    if (
        value.args
        and type(value.args[0].value) not in CONTAINER_LITERALS
        and type(value.args[0].value) is not cst.GeneratorExp
    ):
        return None
    return kind


def literal_elements(value: cst.CSTNode) -> list[cst.BaseExpression]:
    """The element expressions of a container literal or comprehension (values for dicts)."""
    if type(value) is cst.Call:  # `list(...)`, `OrderedDict({...})`
        return literal_elements(value.args[0].value) if value.args else []
    if type(value) is cst.GeneratorExp:
        return [value.elt]
    if isinstance(value, (cst.List, cst.Tuple)):
        return [e.value for e in value.elements if type(e) is not cst.StarredElement]
    if type(value) is cst.Dict:
        return [e.value for e in value.elements if type(e) is cst.DictElement]
    if type(value) is cst.ListComp:
        return [value.elt]
    if type(value) is cst.DictComp:
        return [value.value]
    return []


def added_elements(ctx: FileContext, holder: cst.CSTNode) -> tuple[cst.CSTNode, list[cst.BaseExpression], bool] | None:
    """When `holder` (a name or `self.x`) is being filled here: (node to report, elements, literal).

    Recognises `holder.append(x)`, `.insert(i, x)`, `.extend([...])`, `.update({...})`,
    `holder += [...]` and `holder[key] = x`.
    """
    index = ctx.index
    parent = index.parent(holder)
    if type(parent) is cst.Attribute and parent.value is holder and parent.attr.value in _ADDERS:
        call = index.parent(parent)
        if not (type(call) is cst.Call and call.func is parent and call.args):
            return None
        last = call.args[-1].value
        if parent.attr.value in ("extend", "update"):
            return (call, literal_elements(last), False) if container_kind(ctx, last) else None
        return call, [last], False
    if type(parent) is cst.AugAssign and parent.target is holder and type(parent.operator) is cst.AddAssign:
        return (parent, literal_elements(parent.value), False) if container_kind(ctx, parent.value) else None
    if type(parent) is cst.Subscript and parent.value is holder:
        target = index.parent(parent)
        if type(target) is cst.AssignTarget:
            assign = index.parent(target)
            if type(assign) is cst.Assign:
                return assign, [assign.value], False
    return None


def handed_to_call(ctx: FileContext, holder: cst.CSTNode) -> bool:
    """`holder` is an argument of a call other than an iteration helper (`nn.ModuleList(layers)`,
    `nn.Sequential(*layers)`, `torch.stack(anchors)`): its elements may be registered or copied."""
    parent = ctx.index.parent(holder)
    if type(parent) is not cst.Arg:
        return False
    if stored_as_is(ctx, parent) or returned_as_is(ctx, parent):
        # `self._keep(layers)` running `self.layers = layers`, `keep(layers)` returning it: kept,
        # not handed on
        return False
    call = ctx.index.parent(parent)
    return not (type(call) is cst.Call and type(call.func) is cst.Name and call.func.value in ITERATION_HELPERS)


def local_containers(ctx: FileContext, function: cst.FunctionDef) -> dict[str, LocalContainer]:
    """Plain containers built in local names of `function` (memoised per function)."""
    cache: dict[int, dict[str, LocalContainer]] = ctx.shared("placement_classes.locals", lambda c: {})
    found = cache.get(id(function))
    if found is None:
        found = cache[id(function)] = _local_containers(ctx, function)
    return found


def _local_containers(ctx: FileContext, function: cst.FunctionDef) -> dict[str, LocalContainer]:
    index = ctx.index
    out: dict[str, LocalContainer] = {}
    names = [n for n in index.walk(function.body) if type(n) is cst.Name]
    for node in names:  # bindings first: `layers = []`
        parent = index.parent(node)
        if type(parent) is cst.AssignTarget and parent.target is node:
            assign = index.parent(parent)
            if type(assign) is cst.Assign:
                kind = container_kind(ctx, assign.value)
                if kind is None:
                    out.pop(node.value, None)  # bound to something else too: not a plain container
                    continue
                box = out.setdefault(node.value, LocalContainer(kind))
                box.fills.append(ContainerFill(assign.value, literal_elements(assign.value), True))
    for node in names:
        box = out.get(node.value)
        if box is None:
            continue
        added = added_elements(ctx, node)
        if added is not None:
            box.fills.append(ContainerFill(*added))
        elif handed_to_call(ctx, node):
            box.handed_on = True
        elif type(index.parent(node)) is cst.Return:
            box.returned = True
    return out


def builder_called(
    ctx: FileContext, call: cst.BaseExpression, facts: ClassFacts | None, caller: cst.FunctionDef | None = None
) -> cst.FunctionDef | None:
    """The function of the file a builder call runs: a top-level function by name, a method of
    the class through `self.`, a static or class method through the class or `cls`, or, inside a
    builder (`caller`) handed the instance, a method called on that parameter."""
    if type(call) is not cst.Call:
        return None
    func = call.func
    if (
        caller is not None
        and facts is not None
        and type(func) is cst.Attribute
        and type(func.value) is cst.Name
        and func.value.value in {p.name.value for p in (*caller.params.posonly_params, *caller.params.params)}
    ):
        return facts.methods.get(func.attr.value)  # `owner._make_layers(n)`: the instance handed in
    if type(func) is cst.Name:
        return next((s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == func.value), None)
    if facts is not None and self_attribute(func) is not None:
        return facts.methods.get(self_attribute(func) or "")
    if facts is not None and type(func) is cst.Attribute and type(func.value) is cst.Name:
        method = facts.methods.get(func.attr.value)
        on_class = func.value.value in (facts.node.name.value, "cls")
        kinds = {dotted_name(d.decorator) for d in method.decorators} if method is not None else set()
        if on_class and kinds & {"staticmethod", "classmethod"}:
            return method
    return None


def _builder_returns(ctx: FileContext, value: cst.BaseExpression, facts: ClassFacts | None) -> list[cst.BaseExpression]:
    """What the builder a call runs (`builder_called`) can return; empty when unknown or bare."""
    builder = builder_called(ctx, value, facts)
    if builder is None:
        return []
    returned = [node.value for node in ctx.index.returns_of(builder)]
    return [] if any(v is None for v in returned) else returned  # type: ignore[return-value]  # None ruled out


def _returns_parameters(ctx: FileContext, value: cst.BaseExpression, facts: ClassFacts) -> bool:
    """`self.offset = self._init_offset(n)` whose every `return` is `nn.Parameter(...)`."""
    returned = _builder_returns(ctx, value, facts)
    return bool(returned) and all(is_parameter_call(ctx, v) for v in returned)


def parameter_moved_by_builder(ctx: FileContext, value: cst.BaseExpression, facts: ClassFacts) -> str | None:
    """`parameter_moved_by_hand` for a builder of the class or file that returns
    `nn.Parameter(t).cuda()` on every path (`self.offset = self._fresh(n)`)."""
    moves = {parameter_moved_by_hand(ctx, v) for v in _builder_returns(ctx, value, facts)}
    return moves.pop() if len(moves) == 1 else None


def returned_container(
    ctx: FileContext,
    call: cst.BaseExpression,
    facts: ClassFacts | None,
    caller: cst.FunctionDef | None = None,
    depth: int = 0,
) -> LocalContainer | None:
    """The plain container a same-file builder returns: `make_layers(cfg)`, `self._build(n)` or
    a static or class method called on the class (`Net._heads(n)`, `cls._heads(n)`) whose body
    ends in `return layers` (a local list it filled) or `return [Block() ...]`, or hands back
    what another such builder returns (`return owner._make_layers(n)` in a static method handed
    the instance), a few levels deep."""
    builder = builder_called(ctx, call, facts, caller)
    if builder is None:
        return None
    locals_ = local_containers(ctx, builder)
    for node in ctx.index.walk(builder.body):
        if type(node) is not cst.Return or node.value is None:
            continue
        if ctx.index.enclosing_function(node) is not builder:
            continue
        value = node.value
        if type(value) is cst.Name and value.value in locals_:
            box = locals_[value.value]
            return None if box.handed_on else box
        kind = container_kind(ctx, value)
        if kind is not None:
            return LocalContainer(kind, [ContainerFill(value, literal_elements(value), True)])
        if type(value) is cst.Call and depth < 3:
            return returned_container(ctx, value, facts, builder, depth + 1)
        return None
    return None


# Functions that return a model (`timm.create_model(...)`, `torchvision.models.resnet50(...)`).
_MODEL_FACTORY_PREFIXES = ("timm.create_model", "torchvision.models.")


def library_module(ctx: FileContext, call: cst.BaseExpression) -> str | None:
    """The short name when `call` builds an `nn.Module` from a library outside `torch.nn`:
    torchmetrics metrics, torchvision/timm/torchaudio layers and models, `from_pretrained` models."""
    if type(call) is not cst.Call:
        return None
    qualified = ctx.qualified_name(call.func) or ""
    if not qualified or any(word in qualified for word in NOT_MODULES):
        return None
    last = qualified.rsplit(".", 1)[-1]
    if is_library_module_class(qualified):
        return last
    if (
        qualified.startswith(_MODEL_FACTORY_PREFIXES)
        and last[:1].islower()
        and not last.startswith(("get_weight", "list_", "get_model_"))
    ):
        return last
    if qualified.startswith("transformers.") and last == "from_pretrained":
        owner = qualified.rsplit(".", 2)[-2]
        return owner if "Model" in owner or "For" in owner else None
    return None
