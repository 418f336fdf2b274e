"""What the file holds for the placement engine, and the driver that runs it: every scope's
interpretation, the same-file call graph questions (construction-time methods, injected
submodules, Lightning classes), and the results (`Meeting`, `ScopePlacement`,
`FilePlacement`). The interpreter itself is in `placement.py` (statements and expressions)
and `placement_calls.py` (calls), both above this module: it runs them through the
`interpreter` factory it is given, never by importing them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import libcst as cst

from devicelint.analysis.container_reads import record_classes
from devicelint.analysis.host_modules import HostModuleCall
from devicelint.analysis.index import NodeIndex
from devicelint.analysis.instance_parameters import instance_binding
from devicelint.analysis.names import dotted_name, is_staticmethod
from devicelint.analysis.placement_classes import ClassFacts, class_facts, module_constructor, self_attribute
from devicelint.analysis.placement_facts import (
    FACTORIES,
    MOVE_METHODS,
    TENSOR_ONLY_METHODS,
    UNKNOWN_FACT,
    Fact,
    is_tensor_function,
    move_call,
)
from devicelint.analysis.placement_values import DATA_WORDS, Env
from devicelint.analysis.transform_modules import transform_classes
from devicelint.context import FileContext

# Calls are followed this many levels deep: an interpreter at this depth follows none.
MAX_FOLLOW_DEPTH = 3
# A chain of helpers analysed one inside another stops here (the stack must not run out).
_MAX_NESTED_SCOPES = 6


@dataclass(frozen=True)
class Meeting:
    """A CPU tensor meets a device tensor (or a module on a device) at `node`.

    `how` is "op" (an operator, a torch function or a tensor method), "module" (passed to a
    module), "return" (returned from `forward`), "inplace" (the CPU tensor is the target of
    an in-place update with a device value) or "weight" (a loss module holding a CPU class
    weight is called on device tensors; `cpu_node` is the loss's constructor).
    """

    cpu: Fact
    cpu_node: cst.CSTNode
    device: Fact
    device_node: cst.CSTNode | None
    node: cst.CSTNode
    how: str
    scope: cst.CSTNode


@dataclass(frozen=True)
class Crossing:
    """A value on one stated device meets a tensor or module on another (`cuda:0` and
    `cuda:1`) at `node`: `how` is "module" (passed to a module placed there) or "op"."""

    value: Fact
    value_node: cst.CSTNode
    other: Fact
    other_node: cst.CSTNode
    node: cst.CSTNode
    how: str
    scope: cst.CSTNode


@dataclass
class ScopePlacement:
    """The placement facts of one function (or of a module's top-level code)."""

    node: cst.CSTNode
    name: str
    cls: ClassFacts | None
    facts: Env = field(default_factory=dict)
    returns: Fact | None = None
    meetings: list[Meeting] = field(default_factory=list)
    crossings: list[Crossing] = field(default_factory=list)
    # id(expression) -> its Fact, for expressions whose fact is not unknown
    expr_facts: dict[int, Fact] = field(default_factory=dict)
    device_params: list[str] = field(default_factory=list)
    # a run of a module's method on an instance whose place is not known (never moved, or still
    # being built): what it makes of the inputs says nothing about where the module's own
    # parameters and buffers are
    unplaced: bool = False


@dataclass
class FilePlacement:
    scopes: dict[int, ScopePlacement]
    meetings: list[Meeting]
    crossings: list[Crossing] = field(default_factory=list)
    # id(function) -> its runs with the argument facts of its callers in the file
    followed: dict[int, list[ScopePlacement]] = field(default_factory=dict)
    host_calls: list[HostModuleCall] = field(default_factory=list)


class Interpreter(Protocol):
    """What the file analysis needs of a scope's interpreter."""

    # the name holding the instance `self.<attr>` reads, and its class where the scope is a
    # helper handed it (`def _head(model, h)` called as `_head(self, h)`)
    receiver: str
    receiver_class: cst.ClassDef | None
    env: Env
    # a nested function's: what its enclosing function holds in the names it reads
    closure: Env

    def run(self) -> ScopePlacement: ...


# (ctx, analysis, scope, class, bound parameter facts, depth) -> an interpreter with `run()`
InterpreterFactory = Callable[
    [FileContext, "FileAnalysis", cst.CSTNode, "ClassFacts | None", "Env | None", int], Interpreter
]


def _tensor_argument(ctx: FileContext, call: cst.Call, node: cst.BaseExpression) -> str | None:
    """The name that a torch function's first argument shows to be a tensor: `x` in
    `F.cross_entropy(x, ...)` (functional ops take a tensor first) or in `torch.op(x.float())`
    (a Python number has no `.float()`). `torch.pow(theta, ...)` says nothing about `theta`."""
    casts = 0
    while (
        type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and node.func.attr.value in ("float", "double", "half", "long", "detach", "contiguous")
    ):
        node = node.func.value
        casts += 1
    if type(node) is not cst.Name:
        return None
    functional = (ctx.qualified_name(call.func) or "").startswith("torch.nn.functional.")
    return node.value if casts or functional else None


def _attribute_calls(ctx: FileContext) -> dict[str, list[cst.FunctionDef | None]]:
    """For every `<x>.<name>(...)` call of the file: the functions (None: module code) it is in."""

    def build(c: FileContext) -> dict[str, list[cst.FunctionDef | None]]:
        found: dict[str, list[cst.FunctionDef | None]] = {}
        for call in c.index.of_type(cst.Call):
            if type(call.func) is cst.Attribute:
                found.setdefault(call.func.attr.value, []).append(c.index.enclosing_function(call))
        return found

    return ctx.shared("placement.attribute_calls", build)


def construction_methods(ctx: FileContext, cls: ClassFacts) -> set[str]:
    """`__init__` and the methods of `cls` that run only while the model is built."""
    return _construction_methods(ctx, cls)


def _construction_methods(ctx: FileContext, cls: ClassFacts) -> set[str]:
    """`__init__` and the methods called only while models are built: from `__init__` (of this
    class or another one: `self.tokenizer.sequence_length(...)`) or from other such methods.
    Call sites are matched by method name anywhere in the file, so a name that is also called
    elsewhere never counts as construction-time."""
    calls = _attribute_calls(ctx)
    callers: dict[str, set[str]] = {}
    for name in cls.methods:
        if name == "forward":
            continue
        by: set[str] = set()
        for caller in calls.get(name, ()):
            inside = caller is not None and cls.methods.get(caller.name.value) is caller
            by.add(
                caller.name.value
                if inside and caller is not None
                else "__init__"
                if caller is not None and caller.name.value == "__init__"
                else "<elsewhere>"
            )
        callers[name] = by
    found = {"__init__"}
    changed = True
    while changed:
        changed = False
        for name, by in callers.items():
            if name not in found and by and by <= found:
                found.add(name)
                changed = True
    return found


def _device_like_default(default: cst.BaseExpression | None) -> bool:
    """No default, `None`, a string or `torch.device(...)`: what a device parameter may default to."""
    if default is None or type(default) is cst.SimpleString:
        return True
    if type(default) is cst.Name:
        return default.value == "None"
    return type(default) is cst.Call and (dotted_name(default.func) or "").endswith("device")


def _device_like_annotation(annotation: cst.Annotation | None) -> bool:
    """No annotation, or one a device may have (`str`, `torch.device`, `Optional[...]` of them)."""
    if annotation is None:
        return True
    text = (dotted_name(annotation.annotation) or "").rsplit(".", 1)[-1]
    return text in ("str", "device") or (
        type(annotation.annotation) is cst.SimpleString and "device" in annotation.annotation.value
    )


def _record_defaults(ctx: FileContext, records: dict[str, list[str]]) -> dict[str, dict[str, cst.BaseExpression]]:
    """The default of each field of the file's dataclasses and NamedTuples, by class and field:
    the value written after the annotation, `field(default=X)`, or the expression a
    `field(default_factory=lambda: X)` returns (an instance built without the field holds it)."""
    defaults: dict[str, dict[str, cst.BaseExpression]] = {}
    for stmt in ctx.module.body:
        if type(stmt) is not cst.ClassDef or stmt.name.value not in records or type(stmt.body) is not cst.IndentedBlock:
            continue
        found: dict[str, cst.BaseExpression] = {}
        for line in stmt.body.body:
            for small in line.body if type(line) is cst.SimpleStatementLine else ():
                if type(small) is cst.AnnAssign and type(small.target) is cst.Name and small.value is not None:
                    value = _field_default(ctx, small.value)
                    if value is not None:
                        found[small.target.value] = value
        defaults[stmt.name.value] = found
    return defaults


def _field_default(ctx: FileContext, value: cst.BaseExpression) -> cst.BaseExpression | None:
    if not (type(value) is cst.Call and (dotted_name(value.func) or "").rsplit(".", 1)[-1] == "field"):
        return value
    for arg in value.args:
        if arg.keyword is not None and arg.keyword.value == "default":
            return arg.value
        if arg.keyword is not None and arg.keyword.value == "default_factory" and type(arg.value) is cst.Lambda:
            return arg.value.body
    return None


class FileAnalysis:
    def __init__(self, ctx: FileContext, interpreter: InterpreterFactory) -> None:
        self.ctx = ctx
        self.interpreter = interpreter
        self.classes = class_facts(ctx)
        self.functions: dict[str, cst.FunctionDef] = {
            stmt.name.value: stmt for stmt in ctx.module.body if type(stmt) is cst.FunctionDef
        }
        # id(function) -> the functions defined in its body, by name (closures it calls)
        self.nested: dict[int, dict[str, cst.FunctionDef]] = {}
        # id(nested function) -> the function it is defined in
        self._enclosing: dict[int, cst.FunctionDef] = {}
        for func in ctx.index.of_type(cst.FunctionDef):
            outer = ctx.index.enclosing_function(func)
            if outer is not None and type(ctx.index.parent(ctx.index.parent(func) or func)) is not cst.ClassDef:
                self.nested.setdefault(id(outer), {})[func.name.value] = func
                self._enclosing[id(func)] = outer
        self._free_names: dict[int, frozenset[str]] = {}
        self.scopes: dict[int, ScopePlacement] = {}
        # (function, own place, (handed instance's parameter, its class), argument facts) -> the run
        self.followed: dict[
            tuple[int, str | None, tuple[str | None, int], tuple[tuple[object, ...], ...]], ScopePlacement
        ] = {}
        self.extra_meetings: list[Meeting] = []
        self.extra_crossings: list[Crossing] = []
        # (id(call), id(module origin)) -> a module certainly on the CPU called with device inputs
        self.host_calls: dict[tuple[int, int], HostModuleCall] = {}
        # The file defines its own loader classes (`DeviceDataLoader`): names alone say nothing.
        # Whether any module built on the host has been seen: until then nothing can release one.
        self.host_modules_made = False
        self.custom_loaders = any("loader" in c.name.value.lower() for c in ctx.index.of_type(cst.ClassDef))
        # id(function) -> (name, None, None) for `name.size(...)`-style uses, (name, attr, owner)
        # for `owner.attr(name)` (`self.embed(tokens)`, or a helper's `model.embed(tokens)`)
        self.tensor_uses: dict[int, list[tuple[str, str | None, str | None]]] = {}
        self._tensor_parameters: dict[tuple[int, int, str], frozenset[str]] = {}
        self._device_parameters: dict[int, frozenset[str]] = {}
        self._instances_moved: bool | None = None
        self._instance_names_found: frozenset[str] | None = None
        self._calls_by_function: dict[int, list[cst.Call]] | None = None
        self._transforms: frozenset[str] | None = None
        index = ctx.index
        for node in index.of_type(cst.Attribute):
            used = _viewed_name(node) if node.attr.value in TENSOR_ONLY_METHODS else None
            if type(node.value) is cst.Name and (
                node.attr.value in TENSOR_ONLY_METHODS or _places_new_tensors(index, node)
            ):
                used = node.value
            if used is not None:
                func = index.enclosing_function(node)
                if func is not None:
                    self.tensor_uses.setdefault(id(func), []).append((used.value, None, None))
        for call in index.of_type(cst.Call):
            # `F.cross_entropy(pred.float(), target)`: what a torch function takes is a tensor.
            first = call.args[0] if call.args and call.args[0].keyword is None and not call.args[0].star else None
            name = _tensor_argument(ctx, call, first.value) if first is not None else None
            if name is not None and self._takes_tensors(call):
                func = index.enclosing_function(call)
                if func is not None:
                    self.tensor_uses.setdefault(id(func), []).append((name, None, None))
        if self.classes:
            for call in index.of_type(cst.Call):
                callee = call.func
                if not (type(callee) is cst.Attribute and type(callee.value) is cst.Name):
                    continue
                names = [a.value.value for a in call.args if type(a.value) is cst.Name and not a.star]
                if names:
                    func = index.enclosing_function(call)
                    if func is not None:
                        owner, attr = callee.value.value, callee.attr.value
                        self.tensor_uses.setdefault(id(func), []).extend((n, attr, owner) for n in names)
        self.records = record_classes(ctx)
        self.record_defaults = _record_defaults(ctx, self.records)
        # plain classes of the file (trainers, metric banks, helpers), by name
        self.plain_classes: dict[str, dict[str, cst.FunctionDef]] = {
            stmt.name.value: {f.name.value: f for f in stmt.body.body if type(f) is cst.FunctionDef}
            for stmt in ctx.module.body
            if type(stmt) is cst.ClassDef
            and type(stmt.body) is cst.IndentedBlock
            and stmt.name.value not in self.classes
            and stmt.name.value not in self.records
        }
        self._class_of: dict[int, ClassFacts] = {}
        self._lightning: set[str] | None = None
        self._injected: dict[int, set[str]] = {}
        self._injected_class: dict[tuple[int, str], str | None] = {}
        self._construction: dict[int, set[str]] = {}
        self._assigned: dict[int, dict[str, list[cst.FunctionDef]]] = {}
        self._shallow_runs: dict[int, ScopePlacement] = {}
        self._locals: dict[int, set[str]] = {}
        self._module_parameters: dict[int, frozenset[str]] = {}
        self.active = 0
        self._module_run: Interpreter | None = None
        for facts in self.classes.values():
            for method in facts.methods.values():
                self._class_of[id(method)] = facts

    def _takes_tensors(self, call: cst.Call) -> bool:
        qualified = self.ctx.qualified_name(call.func)
        if qualified is None or not qualified.startswith("torch."):
            return False
        return is_tensor_function(qualified) and qualified.rsplit(".", 1)[-1] not in FACTORIES

    def tensor_parameters(
        self, func: cst.FunctionDef, cls: ClassFacts | None, depth: int = 0, receiver: str = "self"
    ) -> frozenset[str]:
        """Names the function uses the way only a tensor is used (`x.size(1)`, `F.relu(x)`), passes
        to one of the class's submodules (through `receiver`, the name holding the instance), or
        passes to a parameter of a same-file helper or method of the class that is such a name
        there (`self._pack(tokens, lengths)`, `_pack(self, tokens, lengths)`), a few calls deep."""
        key = (id(func), depth, receiver)
        found = self._tensor_parameters.get(key)
        if found is not None:
            return found
        self._tensor_parameters[key] = frozenset()  # a recursive question gets no answer
        submodules = cls.submodules if cls is not None else {}
        names = {
            name
            for name, attr, owner in self.tensor_uses.get(id(func), ())
            if attr is None or (attr in submodules and owner == receiver)
        }
        if depth < MAX_FOLLOW_DEPTH:
            for call in self._helper_calls().get(id(func), ()):
                names |= self._passed_to_tensor_parameters(call, cls, depth, receiver)
        found = self._tensor_parameters[key] = frozenset(names)
        return found

    def module_parameters(self, scope: cst.CSTNode) -> frozenset[str]:
        """Parameters of a function that it uses through a method only modules have, with no
        argument (`scorer.eval()`, `net.parameters()`): a model handed in, whatever its name."""
        found = self._module_parameters.get(id(scope))
        if found is None:
            found = frozenset()
            if type(scope) is cst.FunctionDef:
                params = scope.params
                names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
                found = frozenset(
                    call.func.value.value
                    for call in self.ctx.index.within(scope.body, cst.Call)
                    if type(call.func) is cst.Attribute
                    and type(call.func.value) is cst.Name
                    and call.func.value.value in names
                    and call.func.attr.value in _MODULE_ONLY_METHODS
                    and not call.args
                )
            self._module_parameters[id(scope)] = found
        return found

    def device_parameters(self, func: cst.FunctionDef) -> frozenset[str]:
        """Parameters the function uses only as a device, whatever they are called: every read
        is the one positional argument of a `.to(...)` (`model.to(where)`, `x.to(where)`) or a
        `device=` argument, and one at least is a `.to(...)`. A parameter with a default other
        than `None`, a string or `torch.device(...)`, or annotated (other than `str` or
        `torch.device`), is left alone: `.to(...)` also takes a dtype or a tensor."""
        found = self._device_parameters.get(id(func))
        if found is not None:
            return found
        self._device_parameters[id(func)] = frozenset()  # a recursive question gets no answer
        params = func.params
        candidates = {
            p.name.value: p
            for p in (*params.posonly_params, *params.params, *params.kwonly_params)
            if _device_like_default(p.default) and _device_like_annotation(p.annotation)
        }
        moved: set[str] = set()
        other: set[str] = set()
        index = self.ctx.index
        for node in index.within(func.body, cst.Name) if candidates else ():
            name = node.value
            if name not in candidates or name in other:
                continue
            parent = index.parent(node)
            if (type(parent) is cst.Attribute and parent.attr is node) or (
                type(parent) is cst.Arg and parent.keyword is node
            ):
                continue  # `x.where`, `f(where=...)`: another name, not a read of the parameter
            call = index.parent(parent) if type(parent) is cst.Arg and parent.value is node else None
            if type(call) is not cst.Call or parent.star:  # type: ignore[union-attr]  # parent is an Arg here
                other.add(name)
            elif self._handed_to_device_parameter(call, parent):  # type: ignore[arg-type]  # parent is an Arg here
                continue  # `pair_to_device(x, y, where)` into a helper's own device parameter
            elif parent.keyword is not None:  # type: ignore[union-attr]  # parent is an Arg here
                if parent.keyword.value != "device":  # type: ignore[union-attr]  # parent is an Arg here
                    other.add(name)
            elif move_call(call) == "to" and sum(1 for a in call.args if a.keyword is None) == 1:
                moved.add(name)
            else:
                other.add(name)
        found = self._device_parameters[id(func)] = frozenset(moved - other)
        return found

    def _handed_to_device_parameter(self, call: cst.Call, arg: cst.Arg) -> bool:
        """Whether `arg` fills a device parameter of the same-file function `call` calls."""
        callee = self.functions.get(call.func.value) if type(call.func) is cst.Name else None
        if callee is None or any(a.star for a in call.args):
            return False
        if arg.keyword is not None:
            param = arg.keyword.value
        else:
            positional = [a for a in call.args if a.keyword is None]
            params = [*callee.params.posonly_params, *callee.params.params]
            position = next(i for i, a in enumerate(positional) if a is arg)
            if position >= len(params):
                return False
            param = params[position].name.value
        return param in self.device_parameters(callee)

    def _helper_calls(self) -> dict[int, list[cst.Call]]:
        """Calls of the file's functions by name and of `self.` methods, by the function they
        are made in (built once per file)."""
        if self._calls_by_function is None:
            found: dict[int, list[cst.Call]] = {}
            for call in self.ctx.index.of_type(cst.Call):
                func = call.func
                by_name = type(func) is cst.Name and func.value in self.functions
                on_class = (
                    type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in self.classes
                )
                if by_name or on_class or self_attribute(func) is not None:
                    outer = self.ctx.index.enclosing_function(call)
                    if outer is not None:
                        found.setdefault(id(outer), []).append(call)
            self._calls_by_function = found
        return self._calls_by_function

    def _passed_to_tensor_parameters(
        self, call: cst.Call, cls: ClassFacts | None, depth: int, receiver: str = "self"
    ) -> set[str]:
        callee: cst.FunctionDef | None = None
        owner: ClassFacts | None = None
        skip_self = False
        if type(call.func) is cst.Name:
            callee = self.functions.get(call.func.value)
        elif type(call.func) is cst.Attribute and type(call.func.value) is cst.Name and cls is not None:
            attr = call.func.attr.value
            on = call.func.value.value
            if attr in cls.methods and on in (receiver, cls.node.name.value):
                callee, owner = cls.methods[attr], cls
                static = is_staticmethod(callee)
                # `self.helper(...)`, `self.from_parts(...)` of a classmethod, `Net.helper(...)`
                skip_self = not static and (
                    on == receiver or any(dotted_name(d.decorator) == "classmethod" for d in callee.decorators)
                )
        elif type(call.func) is cst.Attribute and type(call.func.value) is cst.Name and call.func.value.value == "self":
            # `self.find_positives(p, targets)` in a plain class (a loss, a trainer)
            caller = self.ctx.index.enclosing_function(call)
            callee = self.method_of_plain_class(caller, call.func.attr.value) if caller is not None else None
            skip_self = callee is not None and not is_staticmethod(callee)
        if callee is None or any(arg.star for arg in call.args):
            return set()
        params = list(callee.params.posonly_params) + list(callee.params.params)
        params = params[1:] if skip_self else params
        positional = [arg for arg in call.args if arg.keyword is None]
        # the parameter handed this code's instance (`_pack(self, tokens)`) reaches its submodules
        handed = [
            p.name.value for p, a in zip(params, positional) if type(a.value) is cst.Name and a.value.value == receiver
        ]
        inner = handed[0] if cls is not None and len(handed) == 1 else None
        if inner is not None:
            owner = cls
        wanted = self.tensor_parameters(callee, owner, depth + 1, inner or "self")
        out = set()
        for param, arg in zip(params, positional):
            if type(arg.value) is cst.Name and param.name.value in wanted:
                out.add(arg.value.value)
        for arg in call.args:
            if arg.keyword is not None and type(arg.value) is cst.Name and arg.keyword.value in wanted:
                out.add(arg.value.value)
        return out

    def instances_moved(self) -> bool:
        """Whether the file moves an instance of one of its module classes (`Net(...).cuda()`,
        `net = Net(); net.to(d)`): any of them may hold any other, so one answer serves all."""
        if self._instances_moved is None:
            self._instances_moved = any(self._moves_an_instance(call) for call in self.ctx.index.of_type(cst.Call))
        return self._instances_moved

    def _moves_an_instance(self, call: cst.Call) -> bool:
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in MOVE_METHODS:
            return False
        receiver = func.value
        if type(receiver) is cst.Call:
            return module_constructor(self.ctx, receiver) in self.classes
        return type(receiver) is cst.Name and receiver.value in self._instance_names()

    def _instance_names(self) -> frozenset[str]:
        """Names the file binds to a new instance of one of its module classes (`net = Net()`)."""
        if self._instance_names_found is None:
            self._instance_names_found = frozenset(
                target.target.value
                for assign in self.ctx.index.of_type(cst.Assign)
                if module_constructor(self.ctx, assign.value) in self.classes
                for target in assign.targets
                if type(target.target) is cst.Name
            )
        return self._instance_names_found

    def defaults_always_used(self, func: cst.FunctionDef, skip_self: bool) -> set[str]:
        """Parameters that every call of `func` in the file leaves out, so they always hold their
        default (`device=torch.device("cpu")` of a helper that `__init__` calls without it).
        Calls are matched by name (`helper(...)`, `<x>.helper(...)`); none found, or one that
        spreads `*args`/`**kwargs`, answers nothing."""
        name = func.name.value
        params = list(func.params.posonly_params) + list(func.params.params)
        params = params[1:] if skip_self else params
        kwonly = list(func.params.kwonly_params)
        left_out = {p.name.value for p in (*params, *kwonly) if p.default is not None}
        calls = 0
        for call in self.ctx.index.of_type(cst.Call):
            callee = call.func.attr.value if type(call.func) is cst.Attribute else dotted_name(call.func)
            if callee != name:
                continue
            if any(arg.star for arg in call.args):
                return set()
            calls += 1
            positional = sum(1 for arg in call.args if arg.keyword is None)
            left_out -= {p.name.value for p in params[:positional]}
            left_out -= {arg.keyword.value for arg in call.args if arg.keyword is not None}
        return left_out if calls else set()

    def construction_only(self, cls: ClassFacts, func: cst.FunctionDef) -> bool:
        """Whether a module method runs only while the model is built: `__init__` itself, or a
        helper that the class calls only from `__init__` (directly or through such helpers).
        Nothing is on the device yet there, whatever its parameters are."""
        key = id(cls)
        if key not in self._construction:
            self._construction[key] = _construction_methods(self.ctx, cls)
        return func.name.value in self._construction[key]

    def runs_as_transform(self, cls: ClassFacts) -> bool:
        """Whether the file builds the module class only as a step of a sample pipeline
        (`Compose([..., PackPathway()])`): its methods run on host tensors."""
        if self._transforms is None:
            self._transforms = transform_classes(self.ctx, set(self.classes))
        return cls.node.name.value in self._transforms

    def is_lightning(self, cls: ClassFacts) -> bool:
        """Whether a module class derives from a LightningModule (through same-file bases too)."""
        if self._lightning is None:
            self._lightning = set()
            classes = {facts.node.name.value: facts.node for facts in self.classes.values()}
            changed = True
            while changed:
                changed = False
                for name, node in classes.items():
                    bases = [(dotted_name(b.value) or "").rsplit(".", 1)[-1] for b in node.bases]
                    if name not in self._lightning and any(
                        b == "LightningModule" or b in self._lightning for b in bases
                    ):
                        self._lightning.add(name)
                        changed = True
        return cls.node.name.value in self._lightning

    def inherited_method(self, cls: ClassFacts, name: str) -> cst.FunctionDef | None:
        """The method `name` that `cls` inherits from a module class of the file it derives
        from (`forward` written once on a `Transform(nn.Module)` base, run by every subclass),
        nearest base first; None where `cls` defines it itself or no base of the file does."""
        if name in cls.methods:
            return None
        seen: set[str] = {cls.node.name.value}
        queue = [cls]
        while queue:
            current = queue.pop(0)
            for base in current.node.bases:
                if base.keyword is not None:
                    continue
                base_name = dotted_name(base.value) or ""
                parent = self.classes.get(base_name)
                if parent is None or base_name in seen:
                    continue
                seen.add(base_name)
                if name in parent.methods:
                    return parent.methods[name]
                queue.append(parent)
        return None

    def injected_modules(self, cls: ClassFacts) -> set[str]:
        """Attributes that `__init__` sets from its own parameters (`self.encoder = encoder`):
        called as `self.encoder(x)`, they are submodules handed in by the caller."""
        found = self._injected.get(id(cls))
        if found is None:
            found = set()
            init = cls.methods.get("__init__")
            if init is not None:
                params = {p.name.value for p in init.params.params} | {p.name.value for p in init.params.kwonly_params}
                for attr, value, method in cls.assignments:
                    if (
                        method is init
                        and type(value) is cst.Name
                        and value.value in params
                        and not any(word in attr.lower() for word in DATA_WORDS)
                    ):
                        found.add(attr)
            self._injected[id(cls)] = found
        return found

    def injected_class(self, cls: ClassFacts, attr: str) -> str | None:
        """The module class that every construction of `cls` in this file hands in for the
        injected attribute `attr` (`Summer(Encoding(dim))` gives `Encoding`), or None."""
        key = (id(cls), attr)
        if key not in self._injected_class:
            self._injected_class[key] = self._constructed_argument(cls, attr)
        return self._injected_class[key]

    def _constructed_argument(self, cls: ClassFacts, attr: str) -> str | None:
        init = cls.methods["__init__"]
        param = next(
            (
                value.value
                for name, value, method in cls.assignments
                if name == attr and method is init and type(value) is cst.Name
            ),
            None,
        )
        names = [p.name.value for p in init.params.params][1:]
        position = names.index(param) if param in names else None
        found: set[str | None] = set()
        for call in self.ctx.index.of_type(cst.Call):
            if not (type(call.func) is cst.Name and call.func.value == cls.node.name.value):
                continue
            positional = [a for a in call.args if a.keyword is None and not a.star]
            arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == param), None)
            if arg is None and position is not None and position < len(positional):
                arg = positional[position]
            found.add(module_constructor(self.ctx, arg.value) if arg is not None else None)
        if len(found) == 1:
            only = found.pop()
            return only if only in self.classes else None
        return None

    def scope(self, node: cst.CSTNode) -> ScopePlacement:
        found = self.scopes.get(id(node))
        if found is None:
            # Placeholder first: a recursive call reaching this scope sees an empty summary.
            self.scopes[id(node)] = ScopePlacement(node=node, name="", cls=None)
            self.active += 1
            try:
                cls = self._class_of.get(id(node))
                bound = instance_binding(self.ctx, node) if type(node) is cst.FunctionDef else None
                if bound is not None:  # a helper every call hands a method's instance
                    cls = self.classes.get(bound[1].name.value)
                interpreter = self.interpreter(self.ctx, self, node, cls, None, 0)
                outer = self._enclosing.get(id(node))
                if outer is not None and type(node) is cst.FunctionDef:
                    interpreter.closure = self.closure_of(node, self.scope(outer).facts)
                if bound is not None:
                    interpreter.receiver, interpreter.receiver_class = bound
                if node is self.ctx.module:
                    self._module_run = interpreter
                found = interpreter.run()
            finally:
                self.active -= 1
                if node is self.ctx.module:
                    self._module_run = None
            self.scopes[id(node)] = found
        return found

    def closure_of(self, func: cst.FunctionDef, outer: Env) -> Env:
        """What `outer` (the enclosing function's facts) holds in the names the nested `func`
        reads and does not take as parameters (`labels = labels.to(device)` before `def
        f(x): return eye[labels]`); names of no known place are left out."""
        free = self._free_names.get(id(func))
        if free is None:
            params = func.params
            own = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
            read = {n.value for n in self.ctx.index.walk(func.body) if type(n) is cst.Name}
            free = self._free_names[id(func)] = frozenset(read - own)
        return {name: fact for name in free if (fact := outer.get(name)) is not None and fact != UNKNOWN_FACT}

    def returns_of(self, node: cst.FunctionDef) -> Fact | None:
        """What a same-file function returns, analysing it now unless a long chain of calls is
        already being analysed (a chain of helpers must not exhaust the stack)."""
        found = self.scopes.get(id(node))
        if found is None and self.active < _MAX_NESTED_SCOPES:
            found = self.scope(node)
        return found.returns if found is not None else None

    def run(self) -> FilePlacement:
        self.scope(self.ctx.module)
        for func in self.ctx.index.of_type(cst.FunctionDef):
            self.scope(func)
        meetings = [m for s in self.scopes.values() for m in s.meetings] + self.extra_meetings
        crossings: dict[tuple[int, int], Crossing] = {}
        for crossing in [c for s in self.scopes.values() for c in s.crossings] + self.extra_crossings:
            # a helper followed with its callers' arguments meets the same devices again
            crossings.setdefault((id(crossing.node), id(crossing.value_node)), crossing)
        followed: dict[int, list[ScopePlacement]] = {}
        for run in self.followed.values():
            followed.setdefault(id(run.node), []).append(run)
        return FilePlacement(
            scopes=self.scopes,
            meetings=meetings,
            crossings=list(crossings.values()),
            followed=followed,
            host_calls=list(self.host_calls.values()),
        )

    def owner_class(self, method: cst.CSTNode) -> cst.ClassDef | None:
        """The class a function is a method of (None for a module-level function)."""
        cls = (
            self.ctx.index.parent(self.ctx.index.parent(method) or method) if type(method) is cst.FunctionDef else None
        )
        return cls if type(cls) is cst.ClassDef else None

    def init_env(self, method: cst.FunctionDef, owner: cst.ClassDef | None = None) -> Env:
        """What the `__init__` of the method's class (a module, a trainer, any class) leaves
        bound (`self.dev1`, `self.dec` with its device), for the other methods to read the
        devices it states. `owner` names the class where `method` is a helper handed one of
        its instances (`def _head(model, h)` called as `_head(self, h)`)."""
        cls = owner if owner is not None else self.owner_class(method)
        if cls is None or type(cls.body) is not cst.IndentedBlock:
            return {}
        init = next((s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"), None)
        if init is None or init is method or (id(init) not in self.scopes and self.active >= _MAX_NESTED_SCOPES):
            return {}
        return self.scope(init).facts

    def method_of_plain_class(
        self, scope: cst.CSTNode, name: str, owner: cst.ClassDef | None = None
    ) -> cst.FunctionDef | None:
        """The method `name` of the plain class whose method `scope` is (`self.helper(...)`), or
        of `owner`, the class whose instance `scope` is handed."""
        cls = owner if owner is not None else self.owner_class(scope)
        if cls is None:
            return None
        return self.plain_classes.get(cls.name.value, {}).get(name)

    def stated_attribute(self, method: cst.FunctionDef, attr: str, owner: cst.ClassDef | None = None) -> Fact | None:
        """`self.<attr>` as the class states it for `method`: as `__init__` leaves it, else as
        the one other method that assigns it leaves it (`setup()` storing the device and the
        moved model, read by `training_step`): a class is one unit over its methods. `owner`:
        the class whose instance `method` is handed, where it is no method of it."""
        stated = self.init_env(method, owner).get(f"self.{attr}")
        if stated is not None and stated != UNKNOWN_FACT:
            return stated
        # `__init__` stores it as it came (or not at all); one other method sets it up
        # (`self.model = self.model.to(self.device)` in `fit()`), the others use it after.
        cls = owner if owner is not None else self.owner_class(method)
        if cls is None:
            return stated
        others = [m for m in self._assigners(cls).get(attr, ()) if m is not method and m.name.value != "__init__"]
        if len(others) != 1:
            return stated
        return self._shallow(others[0]).facts.get(f"self.{attr}", stated)

    def _shallow(self, method: cst.FunctionDef) -> ScopePlacement:
        """A method's own facts without following its calls: what it leaves on `self`, even
        while it is itself being analysed further up the stack (a method that sets the model
        up and then calls the one that reads it)."""
        found = self._shallow_runs.get(id(method))
        if found is None:
            self._shallow_runs[id(method)] = ScopePlacement(node=method, name="", cls=None)  # recursion sees nothing
            found = self.interpreter(
                self.ctx, self, method, self._class_of.get(id(method)), None, MAX_FOLLOW_DEPTH
            ).run()
            self._shallow_runs[id(method)] = found
        return found

    def only_init_assigns(self, method: cst.FunctionDef, attr: str, filled_in_init: bool = False) -> bool:
        """Whether `__init__` is the only method of `method`'s class that assigns `self.<attr>`,
        and no method moves it or writes into it in place (`self.<attr>.cuda()`,
        `self.<attr>[i] = ...`, `for t in self.<attr>: t.data = ...`); with `filled_in_init`,
        `__init__` itself may write into it (a dict it fills entry by entry)."""
        cls = self.ctx.index.parent(self.ctx.index.parent(method) or method)
        if type(cls) is not cst.ClassDef or not self.assigned_only_in_init(method, attr):
            return False
        init = next((s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"), None)
        skipped = self.ctx.index.walk(init) if filled_in_init and init is not None else ()
        inside_init = {id(n) for n in skipped}
        for node in self.ctx.index.walk(cls):
            if id(node) in inside_init:
                continue
            if self_attribute(node) != attr:
                continue
            parent = self.ctx.index.parent(node)
            if type(parent) is cst.Attribute and parent.value is node and parent.attr.value in MOVE_METHODS:
                return False
            if type(parent) is cst.Subscript and type(self.ctx.index.parent(parent)) is cst.AssignTarget:
                return False
            if type(parent) is cst.For and parent.iter is node and type(parent.target) is cst.Name:
                loop = parent.target.value  # `for t in self.<attr>: t.data = t.data.cuda()`
                if any(
                    type(n) is cst.AssignTarget
                    and type(n.target) is cst.Attribute
                    and type(n.target.value) is cst.Name
                    and n.target.value.value == loop
                    for n in self.ctx.index.walk(parent.body)
                ):
                    return False
        return True

    def assigned_only_in_init(self, method: cst.FunctionDef, attr: str) -> bool:
        """Whether `__init__` is the only method of `method`'s class that assigns `self.<attr>`."""
        cls = self.ctx.index.parent(self.ctx.index.parent(method) or method)
        return type(cls) is cst.ClassDef and [m.name.value for m in self._assigners(cls).get(attr, ())] == ["__init__"]

    def set_up_once(self, method: cst.FunctionDef, attr: str) -> bool:
        """Whether one method of `method`'s class assigns `self.<attr>` a value, and `__init__`, if
        another, only `None` (a placeholder: `self.model = None`, then `self.model = Net()` in
        `load()`): whatever a method reads there is that value, or nothing yet."""
        cls = self.ctx.index.parent(self.ctx.index.parent(method) or method)
        if type(cls) is not cst.ClassDef:
            return False
        assigners = self._assigners(cls).get(attr, [])
        others = [m for m in assigners if m.name.value != "__init__"]
        if not others:
            return len(assigners) == 1
        init = next((m for m in assigners if m.name.value == "__init__"), None)
        return len(others) == 1 and (init is None or self._only_none(init, attr))

    def _only_none(self, init: cst.FunctionDef, attr: str) -> bool:
        """Every assignment of `self.<attr>` in `init` is `= None`."""
        index = self.ctx.index
        annotated: list[cst.AnnAssign | cst.AugAssign] = [
            *index.within(init, cst.AnnAssign),
            *index.within(init, cst.AugAssign),
        ]
        if any(self_attribute(n.target) == attr for n in annotated):
            return False
        return all(
            type(node.value) is cst.Name and node.value.value == "None"
            for node in index.within(init, cst.Assign)
            if any(self_attribute(t.target) == attr for t in node.targets)
        )

    def _assigners(self, cls: cst.ClassDef) -> dict[str, list[cst.FunctionDef]]:
        """For each `self.<attr>` of a class: the methods that assign it (any class)."""
        found = self._assigned.get(id(cls))
        if found is None:
            found = {}
            index = self.ctx.index
            for stmt in cls.body.body if type(cls.body) is cst.IndentedBlock else ():
                if type(stmt) is not cst.FunctionDef:
                    continue
                targets: list[cst.BaseExpression] = [
                    *(t.target for node in index.within(stmt, cst.Assign) for t in node.targets),
                    *(node.target for node in index.within(stmt, cst.AnnAssign)),
                    *(node.target for node in index.within(stmt, cst.AugAssign)),
                ]
                for target in targets:
                    for part in target.elements if isinstance(target, (cst.Tuple, cst.List)) else (target,):
                        attr = self_attribute(part.value if type(part) is cst.Element else part)
                        if attr is not None and stmt not in found.setdefault(attr, []):
                            found[attr].append(stmt)
            self._assigned[id(cls)] = found
        return found

    def local_names(self, func: cst.FunctionDef) -> set[str]:
        """The names a function binds itself: its parameters and every name it assigns."""
        found = self._locals.get(id(func))
        if found is None:
            params = func.params
            found = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
            for star in (params.star_arg, params.star_kwarg):
                if type(star) is cst.Param:
                    found.add(star.name.value)
            binders = (cst.AssignTarget, cst.For, cst.AsName, cst.NamedExpr, cst.AugAssign, cst.AnnAssign, cst.CompFor)
            for node in self.ctx.index.within(func.body, cst.Name):
                parent = self.ctx.index.parent(node)
                bound = getattr(parent, "name" if type(parent) is cst.AsName else "target", None)
                if (isinstance(parent, binders) and node is bound) or (
                    isinstance(parent, (cst.Element, cst.StarredElement)) and node is parent.value
                ):
                    found.add(node.value)
            self._locals[id(func)] = found
        return found

    def module_env(self) -> Env:
        """What the module's top-level code leaves bound (device constants such as `DEV = "cuda:1"`);
        for a function the top-level code calls while it runs, what it has bound so far."""
        if self._module_run is not None:
            return self._module_run.env
        return self.scope(self.ctx.module).facts


def _places_new_tensors(index: NodeIndex, node: cst.Attribute) -> bool:
    """`torch.zeros(n, device=targets.device)`: the code puts new tensors where `targets` is,
    so it expects `targets` to be a tensor (or model) on a device."""
    if node.attr.value != "device":
        return False
    arg = index.parent(node)
    return type(arg) is cst.Arg and arg.keyword is not None and arg.keyword.value == "device"


# Methods that, called with no argument, say their receiver is an `nn.Module` (a tensor has none
# of them; `train()` and `eval()` are the switches a model handed to a loop is given).
_MODULE_ONLY_METHODS = frozenset(
    {"eval", "train", "parameters", "named_parameters", "modules", "named_modules", "children", "state_dict"}
)


# Views only a tensor has (`masks.data`, `p.grad`, `w.T`): `masks.data.long()` uses `masks` as a
# tensor, as `masks.long()` does. Alone they prove nothing (`dataset.data`, a NumPy array's `.T`).
_TENSOR_VIEWS = frozenset({"data", "grad", "T", "mT", "H", "mH"})


def _viewed_name(node: cst.Attribute) -> cst.Name | None:
    """`name` in `name.data.<method>`: the name a tensor-only method reaches through a view."""
    view = node.value
    if type(view) is cst.Attribute and view.attr.value in _TENSOR_VIEWS and type(view.value) is cst.Name:
        return view.value
    return None
