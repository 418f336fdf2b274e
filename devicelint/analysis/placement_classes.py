"""What a module class holds: submodules, parameters and buffers, and plain attributes.

`class_facts(ctx)` reads every `self.<name> = ...` in the methods of each `nn.Module`
subclass of a file, so the placement analysis knows that `self.embed(...)` calls a module
and `self.weight` is a registered (moved) tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import NN_NON_MODULES
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
    # every `self.<attr> = <value>` statement: (attr, value, enclosing method)
    assignments: list[tuple[str, cst.BaseExpression, cst.FunctionDef]] = field(default_factory=list)
    # every `self.<attr>` expression in the class's methods: (attr, node, enclosing method)
    references: list[tuple[str, cst.Attribute, cst.FunctionDef]] = field(default_factory=list)


def module_constructor(ctx: FileContext, call: cst.BaseExpression) -> str | None:
    """The short class name when `call` constructs an `nn.Module` (`nn.Linear(...)`, `Block(...)`)."""
    if not isinstance(call, cst.Call):
        return None
    qualified = ctx.qualified_name(call.func)
    if qualified is not None and qualified.startswith("torch.nn.") and qualified.count(".") == 2:
        last = qualified.rsplit(".", 1)[-1]
        if last[:1].isupper() and last not in NN_NON_MODULES:
            return last
        return None
    if isinstance(call.func, cst.Name) and call.func.value in module_classes(ctx):
        return call.func.value
    return None


def is_parameter_call(ctx: FileContext, node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and ctx.qualified_name(node.func) in (
        "torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer",
    )


def self_attribute(node: cst.BaseExpression) -> str | None:
    """`name` for `self.name`, else None."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _owner(ctx: FileContext, node: cst.CSTNode, by_class: dict[int, ClassFacts]) -> tuple[ClassFacts, cst.FunctionDef] | None:
    """The module class and its method whose body holds `node` (None outside module methods)."""
    method = None
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            method = ancestor
        elif isinstance(ancestor, cst.ClassDef):
            facts = by_class.get(id(ancestor))
            if facts is None or method is None or method.name.value not in facts.methods or facts.methods[method.name.value] is not method:
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
        if isinstance(node.value, cst.Name) and node.value.value == "self":
            owner = _owner(ctx, node, by_class)
            if owner is not None:
                owner[0].references.append((node.attr.value, node, owner[1]))
    for facts in out.values():
        for attr, node, method in facts.references:
            parent = index.parent(node)
            if isinstance(parent, cst.AssignTarget):
                assign = index.parent(parent)
                if isinstance(assign, cst.Assign):
                    _record(ctx, facts, attr, assign.value, method)
            elif isinstance(parent, cst.AnnAssign) and parent.target is node and parent.value is not None:
                _record(ctx, facts, attr, parent.value, method)
    for call in index.of_type(cst.Call):
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in _REGISTERS and call.args):
            continue
        if not (isinstance(func.value, cst.Name) and func.value.value == "self"):
            continue
        owner = _owner(ctx, call, by_class)
        key = _string(call.args[0].value)
        if owner is None or key is None:
            continue
        if func.attr.value in ("register_module", "add_module"):
            owner[0].submodules[key] = "Module"
        else:
            owner[0].registered.add(key)
    return out


_REGISTERS = frozenset({"register_buffer", "register_parameter", "register_module", "add_module"})


def _record(ctx: FileContext, facts: ClassFacts, attr: str, value: cst.BaseExpression, method: cst.FunctionDef) -> None:
    facts.assignments.append((attr, value, method))
    if attr == "device":
        facts.has_device = True
    constructed = module_constructor(ctx, value)
    if constructed is not None:
        facts.submodules[attr] = constructed
    elif is_parameter_call(ctx, value):
        facts.registered.add(attr)


def class_facts(ctx: FileContext) -> dict[str, ClassFacts]:
    """Facts about each `nn.Module` subclass of the file, by class name (memoised per file)."""
    return ctx.shared("placement_classes", _build)
