"""Device tests and device rebuilds that lose information.

Two syntactic shapes that rules in the device-comparison family report:

- a legacy type string or class used as a CUDA test (`t.type() == "torch.cuda.FloatTensor"`,
  `isinstance(t, torch.cuda.FloatTensor)`): it also tests the dtype, so a CUDA tensor of any
  other dtype fails it;
- a device rebuilt from a tensor's CUDA flag (`"cuda" if t.is_cuda else "cpu"`): it drops the
  tensor's index and sends every non-CUDA accelerator to the CPU, where `t.device` is exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.names import dotted_name, literal_value
from devicelint.context import FileContext

# The default dtype's CUDA type: what code means when it writes it to ask "is this on the GPU".
CUDA_DEFAULT_TYPE = "torch.cuda.FloatTensor"
_CUDA_TYPE = re.compile(r"^torch\.cuda\.[A-Za-z]+Tensor$")
_LEGACY_TYPE = re.compile(r"^torch\.(cuda\.)?[A-Z][A-Za-z]*[A-Za-z]Tensor$")


@dataclass(frozen=True)
class TypeStringTest:
    """`t.type() == "torch.cuda.FloatTensor"` or `isinstance(t, torch.cuda.FloatTensor)`."""

    node: cst.CSTNode  # the comparison or the isinstance call
    tensor: cst.BaseExpression  # `t`
    negated: bool  # `!=`


@dataclass(frozen=True)
class FlagRebuiltDevice:
    """A device spelled `"cuda"`/`"cpu"` chosen by a tensor's CUDA flag."""

    node: cst.CSTNode  # the conditional expression, or the assignment of `"cuda"` under the `if`
    tensor: cst.BaseExpression  # the tensor whose flag is tested


def _string(node: cst.BaseExpression) -> str | None:
    if type(node) is cst.SimpleString and "b" not in node.prefix.lower():
        value = literal_value(node)
        return value if isinstance(value, str) else None
    return None


def _cuda_type_named(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """The legacy CUDA type a string or a `torch.cuda.<X>Tensor` class names."""
    text = _string(node)
    if text is None and type(node) is cst.Attribute:
        text = ctx.qualified_name(node)
    return text if text is not None and _CUDA_TYPE.match(text) else None


def _type_call_receiver(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """`t` in `t.type()` (no arguments: the call that returns the type string)."""
    if type(node) is cst.Call and not node.args and type(node.func) is cst.Attribute and node.func.attr.value == "type":
        return node.func.value
    return None


def _legacy_types_named(ctx: FileContext, scope: cst.CSTNode) -> set[str]:
    """Every legacy tensor type (`torch.cuda.HalfTensor`, `torch.FloatTensor`) the scope names,
    as a string or a class, in a test, a cast or a constructor; and a mark for a cast
    (`x.type(...)` with an argument), which shows the exact type matters."""
    named: set[str] = set()
    for node in ctx.index.walk(scope):
        text = None
        if type(node) is cst.SimpleString:
            text = _string(node)
        elif type(node) is cst.Attribute and node.attr.value.endswith("Tensor"):
            text = ctx.qualified_name(node)
        if text is not None and _LEGACY_TYPE.match(text):
            named.add(text)
        elif type(node) is cst.Call and node.args and _type_call_receiver(node.with_changes(args=())) is not None:
            named.add("<a cast with .type(...)>")
    return named


def _chooses_a_path(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether the test is used to pick a code path (an `if`, a conditional expression, a flag
    tested later, a predicate's result), not to demand the exact type: an `assert`, an `if` that
    only raises, and a predicate named for the dtype (`is_cuda_float`) are left alone."""
    child = node
    parent = ctx.index.parent(child)
    while isinstance(parent, (cst.BooleanOperation, cst.UnaryOperation)):
        child, parent = parent, ctx.index.parent(parent)
    if type(parent) is cst.Assert:
        return False
    if type(parent) is cst.Return:
        # a predicate named for the dtype or the type (`is_cuda_float`) asks for the exact type
        function = ctx.index.enclosing_function(parent)
        name = function.name.value.lower() if function is not None else ""
        return not any(word in name for word in ("float", "type", "f32", "fp32", "single"))
    if type(parent) is cst.If and parent.test is child:
        body = parent.body.body if type(parent.body) is cst.IndentedBlock else ()
        return not all(
            type(line) is cst.SimpleStatementLine and all(type(s) is cst.Raise for s in line.body) for line in body
        )
    return not any(type(a) is cst.Assert for a in ctx.index.ancestors(node))


def type_string_cuda_tests(ctx: FileContext) -> Iterator[TypeStringTest]:
    """CUDA tests spelled with the default dtype's legacy type that choose a code path, in
    functions that name no other
    legacy type: one that also names `torch.cuda.HalfTensor` dispatches on the dtype on purpose,
    and one that casts with `x.type(torch.FloatTensor)` cares about the exact type."""
    tested: dict[int, set[str]] = {}

    def only_default_type(node: cst.CSTNode) -> bool:
        scope: cst.CSTNode = ctx.index.enclosing_function(node) or ctx.module
        if id(scope) not in tested:
            tested[id(scope)] = _legacy_types_named(ctx, scope)
        return tested[id(scope)] == {CUDA_DEFAULT_TYPE}

    for comparison in ctx.index.of_type(cst.Comparison):
        if len(comparison.comparisons) != 1:
            continue
        target = comparison.comparisons[0]
        if type(target.operator) not in (cst.Equal, cst.NotEqual):
            continue
        sides = (comparison.left, target.comparator)
        for this, other in (sides, sides[::-1]):
            tensor = _type_call_receiver(this)
            if (
                tensor is not None
                and _string(other) == CUDA_DEFAULT_TYPE
                and _chooses_a_path(ctx, comparison)
                and only_default_type(comparison)
            ):
                yield TypeStringTest(comparison, tensor, type(target.operator) is cst.NotEqual)
                break
    for call in ctx.index.of_type(cst.Call):
        if not (type(call.func) is cst.Name and call.func.value == "isinstance" and len(call.args) == 2):
            continue
        if ctx.imports.bound.get("isinstance") is not None:
            continue  # shadowed by an import
        if (
            _cuda_type_named(ctx, call.args[1].value) == CUDA_DEFAULT_TYPE
            and _chooses_a_path(ctx, call)
            and only_default_type(call)
        ):
            yield TypeStringTest(call, call.args[0].value, False)


# ---------------------------------------------------------------------------- rebuilt devices
def _flag_tested(ctx: FileContext, test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """(tensor, whether the test holds for CUDA) for `t.is_cuda`, `not t.is_cuda`,
    `t.device.type == "cuda"` and `t.device.type != "cuda"`."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _flag_tested(ctx, test.expression)
        return (inner[0], not inner[1]) if inner is not None else None
    if type(test) is cst.Attribute and test.attr.value == "is_cuda":
        if ctx.qualified_name(test.value) in ("torch", "torch.cuda"):
            return None
        return test.value, True
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if type(target.operator) not in (cst.Equal, cst.NotEqual):
            return None
        sides = (test.left, target.comparator)
        for this, other in (sides, sides[::-1]):
            if (
                _string(other) == "cuda"
                and type(this) is cst.Attribute
                and this.attr.value == "type"
                and type(this.value) is cst.Attribute
                and this.value.attr.value == "device"
            ):
                return this.value.value, type(target.operator) is cst.Equal
    return None


def _spelled_device(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """ "cuda"/"cpu" for those strings and for `torch.device(...)` of them."""
    if type(node) is cst.Call and ctx.qualified_name(node.func) == "torch.device" and len(node.args) == 1:
        node = node.args[0].value
    text = _string(node)
    return text if text in ("cuda", "cpu") else None


def _single_assignment(block: cst.BaseSuite) -> cst.Assign | None:
    if type(block) is not cst.IndentedBlock or len(block.body) != 1:
        return None
    line = block.body[0]
    if type(line) is cst.SimpleStatementLine and len(line.body) == 1 and type(line.body[0]) is cst.Assign:
        assign = line.body[0]
        return assign if len(assign.targets) == 1 else None
    return None


def _is_device_position(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether `node` is where a device goes: `device=`, the first argument of `.to(...)`, or
    `torch.device(...)`'s argument."""
    arg = ctx.index.parent(node)
    if type(arg) is not cst.Arg or arg.value is not node:
        return False
    call = ctx.index.parent(arg)
    if type(call) is not cst.Call:
        return False
    if arg.keyword is not None:
        return arg.keyword.value == "device"
    if call.args[0] is not arg or arg.star:
        return False
    if type(call.func) is cst.Attribute and call.func.attr.value == "to":
        return True
    return ctx.qualified_name(call.func) == "torch.device"


def _used_as_device(ctx: FileContext, value: cst.BaseExpression, bound: str | None) -> bool:
    """The rebuilt device reaches a placement: in place, or through the name it is bound to,
    read in a device position in the same function."""
    if _is_device_position(ctx, value):
        return True
    if bound is None:
        return False
    scope: cst.CSTNode = ctx.index.enclosing_function(value) or ctx.module
    for node in ctx.index.walk(scope):
        if type(node) is cst.Name and node.value == bound and _is_device_position(ctx, node):
            return True
    return False


def _bound_name(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """The plain name an expression is assigned to (`device = <node>`)."""
    parent = ctx.index.parent(node)
    if type(parent) is cst.Assign and parent.value is node and len(parent.targets) == 1:
        name = dotted_name(parent.targets[0].target)
        return name if name is not None and "." not in name else None
    return None


def flag_rebuilt_devices(ctx: FileContext) -> Iterator[FlagRebuiltDevice]:
    """`"cuda" if t.is_cuda else "cpu"` (also under `torch.device(...)`, with the test negated,
    or as an `if`/`else` that assigns the two strings to one name), when the device it builds
    is then used to place something."""
    for expression in ctx.index.of_type(cst.IfExp):
        tested = _flag_tested(ctx, expression.test)
        if tested is None:
            continue
        tensor, on_cuda = tested
        cuda, other = (expression.body, expression.orelse) if on_cuda else (expression.orelse, expression.body)
        if _spelled_device(ctx, cuda) != "cuda" or _spelled_device(ctx, other) != "cpu":
            continue
        outer: cst.BaseExpression = expression
        parent = ctx.index.parent(expression)
        if type(parent) is cst.Arg:
            call = ctx.index.parent(parent)
            if type(call) is cst.Call and ctx.qualified_name(call.func) == "torch.device":
                outer = call
        if _used_as_device(ctx, expression, None) or _used_as_device(ctx, outer, _bound_name(ctx, outer)):
            yield FlagRebuiltDevice(expression, tensor)
    for statement in ctx.index.of_type(cst.If):
        tested = _flag_tested(ctx, statement.test)
        if tested is None or type(statement.orelse) is not cst.Else:
            continue
        tensor, on_cuda = tested
        first, second = _single_assignment(statement.body), _single_assignment(statement.orelse.body)
        if first is None or second is None:
            continue
        cuda, other = (first, second) if on_cuda else (second, first)
        name = dotted_name(cuda.targets[0].target)
        if name is None or "." in name or dotted_name(other.targets[0].target) != name:
            continue
        if _spelled_device(ctx, cuda.value) != "cuda" or _spelled_device(ctx, other.value) != "cpu":
            continue
        if _used_as_device(ctx, cuda.value, name):
            yield FlagRebuiltDevice(cuda, tensor)


# ---------------------------------------------------------------------------- the machine's device
def _availability_choice(ctx: FileContext, node: cst.BaseExpression | None) -> bool:
    """`torch.device("cuda" if torch.cuda.is_available() else "cpu")` or the bare conditional:
    a device chosen by what the machine has, not by where any model or tensor is."""
    if type(node) is cst.Call and ctx.qualified_name(node.func) == "torch.device" and len(node.args) == 1:
        node = node.args[0].value
    if type(node) is not cst.IfExp:
        return False
    test = ctx.code_for(node.test)
    branches = ctx.code_for(node.body) + ctx.code_for(node.orelse)
    return "is_available" in test and "cuda" in branches


def _module_level_bindings(ctx: FileContext, name: str) -> list[cst.BaseExpression]:
    values = []
    for statement in ctx.module.body:
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                if type(small) is cst.Assign and any(dotted_name(t.target) == name for t in small.targets):
                    values.append(small.value)
    return values


def _bound_locally(ctx: FileContext, name: cst.Name) -> bool:
    """Whether a function around `name` has a parameter or binding of that name, which
    shadows the module-level one."""
    for ancestor in ctx.index.ancestors(name):
        if not isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            continue
        if any(p.name.value == name.value for p in ctx.index.walk(ancestor.params) if type(p) is cst.Param):
            return True
        for node in ctx.index.walk(ancestor):
            target = None
            if type(node) is cst.AssignTarget:
                target = node.target
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr)):
                target = node.target
            elif type(node) is cst.AsName:
                target = node.name
            if target is not None and any(
                type(n) is cst.Name and n.value == name.value for n in ctx.index.walk(target)
            ):
                return True
    return False


def machine_device(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """The spelling of a device the file chooses once for the whole machine, when `node` is one:
    a module-level name bound only to `"cuda" if torch.cuda.is_available() else "cpu"`, or a call
    of a module-level function of the file whose every return is such a choice (`get_device()`)."""
    if type(node) is cst.Name:
        if _bound_locally(ctx, node):
            return None
        bound = _module_level_bindings(ctx, node.value)
        if bound and all(_availability_choice(ctx, value) for value in bound):
            if not any(type(s) is cst.FunctionDef and s.name.value == node.value for s in ctx.module.body):
                return node.value
        return None
    if type(node) is cst.Call and not node.args and type(node.func) is cst.Name:
        function = next(
            (s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == node.func.value), None
        )
        if function is None:
            return None
        returns = [n for n in ctx.index.walk(function) if type(n) is cst.Return]
        if returns and all(_availability_choice(ctx, r.value) for r in returns):
            return f"{node.func.value}()"
    return None
