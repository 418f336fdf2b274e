from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.argument_places import passed_for
from devicelint.analysis.constant_attributes import (
    attribute_key,
    made_on_cpu,
    module_constant,
    module_level_values,
    stored_once,
)
from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.model_events import statement_of
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.negation import through_not
from devicelint.analysis.placement import LIGHTNING_STEPS
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import MEETING_METHODS, MODEL_WORDS, PRESERVING_METHODS, moves_to_accelerator
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.placement_values import moves_what_it_yields
from devicelint.analysis.training.helpers import calls_of
from devicelint.analysis.training.syntax import keyword, short
from devicelint.checks.tensor_attribute_not_registered import TensorAttributeNotRegistered
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# torch constructors that copy Python data from the host.
COPYING_CONSTRUCTORS = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray"})
# Methods that run once per step in any class: a trainer's step, an optimizer's step.
STEP_METHODS = frozenset(
    {"forward", "step", "train_step", "training_step", "validation_step", "test_step", "predict_step", "eval_step"}
)


@register
class PerStepConstantCopy(Rule):
    """
    ## What it does
    Flags, in code that runs once per step (a module's `forward` and the methods it calls,
    Lightning's `*_step` hooks, a trainer's `step`, a function called inside a loop, the body
    of a loop over data batches, `for x, y in loader:`):

    - `self.table.to(x.device)` / `self.table.cuda()` of a tensor attribute that `__init__`
      (or a method that only `__init__` calls) made on the CPU once and nothing ever reassigns
      or changes, also one of a family stored with `setattr(self, f"pos{i}", ...)` and read
      with `getattr(self, f"pos{i}")`, or `TABLE.to(x.device)` of a
      CPU tensor bound once at module level, here or in another module of the project
      (`from stats import PIXEL_MEAN`, `T.MEAN` after `import transforms as T`);
    - `torch.tensor(CONSTANT, device=x.device)` of a literal list of numbers, a module-level
      constant, or a constant list attribute, also inside a helper (a static method called as
      `Class.helper(...)`) whose parameter every call of the file hands such a constant.

    The runtime checker reports the same copies as DL603 when it watches the model run.

    ## Why it is a bug on a GPU
    Each call copies the same values from host memory to the device again, usually a small
    synchronous copy from pageable memory, on every step. Nothing fails and nothing is
    wrong in the numbers; the step is just slower, and under CUDA graphs or `torch.compile`
    the copy breaks the graph. A registered buffer is moved once, with the model.

    ## Example
    ```python
    class Normalize(nn.Module):
        def __init__(self):
            super().__init__()
            self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)

        def forward(self, x):
            return x - self.mean.to(x.device)
    ```

    ## Use instead
    ```python
    class Normalize(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), persistent=False)

        def forward(self, x):
            return x - self.mean
    ```

    ## Fix safety
    No automatic fix: registering a buffer changes `state_dict()` unless `persistent=False`,
    and outside a module the place to keep the moved copy is the author's choice.

    ## Known limits
    A performance warning (on by default: on real code every finding was a per-step copy
    worth a buffer, most of them small). An attribute that some method also uses
    without moving it is DL102's finding (not moved with the model) and is not reported here.
    Scalars (`torch.tensor(0.5, device=...)`, `torch.tensor([0], device=...)`) are not reported,
    nor are copies in functions cached per device (`@lru_cache`) or in code that only TorchScript,
    tracing or export runs (`if torch.jit.is_scripting():`, the `else` of its negation, and a
    helper of the file that only such branches call), and `torch.tensor(CONSTANT).to(device)`
    is left to DL403 (create it on the device), after which this rule asks for a buffer. A function counts as per step
    only when the file shows it: a step method, a module's `forward` path, or a call inside
    a loop of the same file, in a file that runs a network (defines, builds or calls a module,
    or backpropagates) or in a loop over data batches (`for batch in loader`): a viewer or
    simulator demo that drives scripted macros in a loop is not stepping anything on a device
    between the calls.
    """

    code = "DL405"
    name = "per-step-constant-copy"
    summary = "A constant tensor is copied from the host to the device on every step instead of once as a buffer."
    message = "{what} on every {when}; {advice}"
    severity = "warning"
    tokens = (".to(", ".cuda(", "tensor(")  # a copy or a constant made on the device

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if is_test_path(ctx.path):
            return
        per_step = _per_step_functions(ctx)
        if not per_step and not ctx.index.of_type(cst.For):
            return
        reported: set[int] = set()  # one statement, one finding
        for call in ctx.index.of_type(cst.Call):
            function = ctx.index.enclosing_function(call)
            if function is None:
                continue
            when = f"call of `{function.name.value}`"
            if id(function) not in per_step:
                if not _in_batch_loop(ctx, call):
                    continue
                when = "batch of its loop"
            if _compiled_only(ctx, call):
                continue
            found = _attribute_moved(ctx, call) or _constant_built_on_device(ctx, call)
            statement = id(statement_of(ctx, call))
            if found is not None and statement not in reported:
                reported.add(statement)
                yield self.violation(call, fix=None, when=when, **found)


def _attribute_moved(ctx: FileContext, call: cst.Call) -> dict[str, str] | None:
    """`self.mean.to(x.device)`, `self.table[:n].cuda()` of a constant CPU tensor attribute, or
    `TABLE.to(x.device)` of a module-level CPU tensor constant."""
    if not moves_to_accelerator(call):
        return None
    root = _host_side_root(call.func.value)  # type: ignore[attr-defined]  # a move: `x.to(...)`, func is an Attribute
    if type(root) is cst.Name:
        return _module_tensor_moved(ctx, call, root)
    if type(root) is cst.Attribute and ctx.project.host_constants:
        return _imported_tensor_moved(ctx, call, root)  # `T.MEAN.to(device)` after `import transforms as T`
    attr = attribute_key(root) if root is not None else None
    cls = ctx.index.enclosing_class(call)
    stored = stored_once(ctx, cls).get(attr) if attr is not None and cls is not None else None
    if stored is None or not stored.cpu_tensor:
        return None
    if (id(stored.cls), stored.attr) in _reported_by_dl102(ctx):
        return None  # DL102 says it is never moved with the model: one finding per attribute
    dynamic = root if type(root) is cst.Call else None  # `getattr(self, f"pos{i}")`: one of a family
    shown = f"`{short(ctx, dynamic)}`" if dynamic is not None else f"`self.{stored.attr}`"
    if stored.is_module and dynamic is not None:
        name = ctx.code_for(dynamic.args[1].value)
        advice = (
            f"register them once in `__init__` (`self.register_buffer({name}, ..., persistent=False)`) "
            "and read them without the move: `model.to(device)` then moves them once"
        )
    elif stored.is_module:
        advice = (
            f'register it once in `__init__` (`self.register_buffer("{stored.attr}", ..., persistent=False)`) '
            "and use `self." + stored.attr + "`: `model.to(device)` then moves it once"
        )
    else:
        advice = "move it once where the device is chosen and keep the moved copy"
    what = f"`{short(ctx, call)}` copies {shown}, a constant CPU tensor set once in `__init__`, to the device"
    return {"what": what, "advice": advice}


def _module_tensor_moved(ctx: FileContext, call: cst.Call, name: cst.Name) -> dict[str, str] | None:
    function = ctx.index.enclosing_function(call)
    value = module_constant(ctx, name.value)
    if value is None and name.value in ctx.project.host_constants and function is not None:
        if _bound_in(ctx, function, name.value) or module_level_values(ctx).get(name.value):
            return None
        return _imported_tensor_moved(ctx, call, name)  # `from transforms import MEAN`
    if value is None or function is None or _bound_in(ctx, function, name.value):
        return None
    facts = file_facts(ctx)
    fact = facts.value(value)
    cpu = facts.place_of(value) is Place.HOST and not fact.batch and not fact.scalar
    if not cpu:
        made, scalar = made_on_cpu(ctx, value)
        cpu = made and not scalar
    if not cpu:
        return None
    advice = _move_once(ctx, call)
    return {
        "what": f"`{short(ctx, call)}` copies `{name.value}`, a module-level CPU tensor constant, to the device",
        "advice": advice,
    }


def _move_once(ctx: FileContext, call: cst.Call) -> str:
    """The advice for a constant copied on every call: a buffer in a module, else one copy."""
    if _in_module_class(ctx, call):
        return (
            "register it once in `__init__` as a buffer (`persistent=False`) so that `model.to(device)` moves it once"
        )
    return "move it once where the device is chosen and reuse the moved copy"


def _imported_tensor_moved(
    ctx: FileContext, call: cst.Call, spelled: cst.Name | cst.Attribute
) -> dict[str, str] | None:
    """`MEAN.to(device)` of a tensor another project module builds on the host at import
    (`ProjectView.host_constants`: `MEAN = torch.tensor([...]).view(1, 3, 1, 1)` in transforms.py)."""
    name = ctx.code_for(spelled)
    found = ctx.project.host_constants.get(name)
    if found is None:
        return None
    _, path, line = found
    advice = _move_once(ctx, call)
    return {
        "what": f"`{short(ctx, call)}` copies `{name}`, a CPU tensor constant of {path}:{line}, to the device",
        "advice": advice,
    }


def _in_batch_loop(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`node` runs once per batch in its own function: inside `for x, y in loader:` (a loop over
    data batches, `_over_data`), not in a loop of that loop's header."""
    child = node
    for ancestor in _ancestors_to_function(ctx, node):
        if type(ancestor) is cst.For and child is ancestor.body and _over_data(ctx, ancestor):
            return True
        child = ancestor
    return False


def _reported_by_dl102(ctx: FileContext) -> set[tuple[int, str]]:
    """(class, attribute) pairs that DL102 reports in this file. DL102 says an attribute is not
    moved with the model; this rule says it is moved on every step. The two never name the same
    attribute, so DL102's own answer decides (memoised per file)."""

    def build(c: FileContext) -> set[tuple[int, str]]:
        found: set[tuple[int, str]] = set()
        for violation in TensorAttributeNotRegistered().check(c):
            node = violation.node
            attr = self_attribute(node) if type(node) is cst.Attribute else None
            cls = c.index.enclosing_class(node)
            if attr is not None and cls is not None:
                found.add((id(cls), attr))
        return found

    return ctx.shared("per_step_constant_copy.dl102", build)


def _host_side_root(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The value at the root of `self.x[:n].view(...)`-style host-side reshapes (slices, integers,
    `...` and `None` in the index: `self.cos[:, :, :n, ...]`, `self.mean[None]`), or None where an
    index picks varying rows (`self.table[idx]`: DL116's case when `idx` is on the device)."""
    while True:
        if type(node) is cst.Subscript:
            if not all(type(e.slice) is cst.Slice or _fixed_index(e.slice) for e in node.slice):
                return None
            node = node.value
        elif (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value in PRESERVING_METHODS
            and node.func.attr.value not in MEETING_METHODS
        ):
            node = node.func.value
        else:
            return node


def _fixed_index(element: cst.BaseSlice) -> bool:
    """An index element that selects the same rows on every call: an integer, `...` or `None`."""
    if type(element) is not cst.Index:
        return False
    value = element.value
    return type(value) in (cst.Integer, cst.Ellipsis) or (type(value) is cst.Name and value.value == "None")


def _constant_built_on_device(ctx: FileContext, call: cst.Call) -> dict[str, str] | None:
    """`torch.tensor(CONSTANT, device=d)`. (`torch.tensor(CONSTANT).to(d)` is DL403's finding:
    create it on the device; this rule then asks for a buffer.)"""
    if not _device_keyword(call) or ctx.qualified_name(call.func) not in COPYING_CONSTRUCTORS or not call.args:
        return None
    first = call.args[0]
    if first.keyword is not None or first.star or not _constant_data(ctx, first.value):
        return None
    data = short(ctx, first.value, 30)
    if _in_module_class(ctx, call):
        advice = "make it once in `__init__` and register it (`self.register_buffer(name, ..., persistent=False)`)"
    else:
        advice = "make it once before the loop (or cache it per device) and reuse it"
    return {"what": f"`{short(ctx, call)}` copies the constant `{data}` from the host to the device", "advice": advice}


def _device_keyword(call: cst.Call) -> bool:
    device = keyword(call, "device")
    if device is None:
        return False
    return not (type(device) is cst.SimpleString and literal_value(device) == "cpu")


def _constant_data(ctx: FileContext, node: cst.BaseExpression, depth: int = 0) -> bool:
    """A literal list or tuple of numbers, a module-level name bound once to one, a constant
    list attribute of the class, or a helper's parameter that every call passes one of these."""
    if type(node) in (cst.List, cst.Tuple):
        return _numbers(node) and _several(node)
    if type(node) is cst.Name:
        function = ctx.index.enclosing_function(node)
        if function is not None and _bound_in(ctx, function, node.value):
            # a helper's parameter: constant when every call of the file passes one
            passed = passed_for(ctx, node) if depth < 3 else None
            return (
                passed is not None and bool(passed) and all(_constant_data(ctx, value, depth + 1) for value in passed)
            )
        values = module_level_values(ctx).get(node.value, [])
        return len(values) == 1 and values[0] is not None and _numbers(values[0]) and _several(values[0])
    attr = self_attribute(node)
    cls = ctx.index.enclosing_class(node)
    if attr is not None and cls is not None:
        stored = stored_once(ctx, cls).get(attr)
        return stored is not None and stored.plain_data and isinstance(stored.value, (cst.List, cst.Tuple))
    return False


def _several(node: cst.BaseExpression) -> bool:
    """More than one number: `torch.tensor([0], device=d)` is a scalar in a list."""
    if isinstance(node, (cst.List, cst.Tuple)):
        return len(node.elements) > 1 or any(_several(e.value) for e in node.elements)
    return False


def _numbers(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.List, cst.Tuple)):
        return bool(node.elements) and all(
            type(e) is not cst.StarredElement and _numbers(e.value) for e in node.elements
        )
    if type(node) is cst.UnaryOperation:
        node = node.expression
    return type(node) in (cst.Integer, cst.Float)


def _bound_in(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    params = function.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    if any(p.name.value == name for p in every):
        return True
    for node in ctx.index.walk(function.body):
        if type(node) is cst.Global:
            continue
        if type(node) is cst.AssignTarget and any(
            type(n) is cst.Name and n.value == name for n in ctx.index.walk(node.target)
        ):
            return True
        if isinstance(node, (cst.For, cst.AugAssign, cst.AnnAssign)):
            target = node.target
            if any(type(n) is cst.Name and n.value == name for n in ctx.index.walk(target)):
                return True
    return False


def _in_module_class(ctx: FileContext, node: cst.CSTNode) -> bool:
    cls = ctx.index.enclosing_class(node)
    classes = module_classes(ctx)
    return cls is not None and classes.get(cls.name.value) is cls


def _per_step_functions(ctx: FileContext) -> set[int]:
    """ids of the functions that run once per step: step methods (`forward`, Lightning hooks,
    `step`), functions and methods called inside a loop, and what those call in the file."""
    found: list[cst.FunctionDef] = []
    functions = {s.name.value: s for s in ctx.module.body if type(s) is cst.FunctionDef}
    classes = {c.name.value: methods(c) for c in ctx.index.of_type(cst.ClassDef)}
    for cls in ctx.index.of_type(cst.ClassDef):
        own = methods(cls)
        for name in STEP_METHODS | LIGHTNING_STEPS:
            if name in own:
                found.append(own[name])
    # A loop is a step loop only in a file that runs a network: a viewer or simulator loop that
    # drives macros (`while viewer.is_running(): run_macro(env, ...)`) calls its helpers once per
    # command, and nothing in the file computes on a device between the calls.
    loops_step = _runs_a_network(ctx)
    for call in ctx.index.of_type(cst.Call):
        loops = [a for a in _ancestors_to_function(ctx, call) if type(a) in (cst.For, cst.While)]
        if not loops or not (loops_step or any(_over_data(ctx, loop) for loop in loops)):
            continue
        callee = _callee(ctx, call, functions, classes)
        if callee is not None:
            found.append(callee)
    seen: set[int] = set()
    while found:
        function = found.pop()
        if id(function) in seen or function.name.value == "__init__" or _cached(function):
            continue
        seen.add(id(function))
        for node in ctx.index.walk(function.body):
            if type(node) is cst.Call:
                callee = _callee(ctx, node, functions, classes)
                if callee is not None:
                    found.append(callee)
    return seen


# Words of a loop's iterable that say it walks data batches (`for batch in val_loader`).
_DATA_WORDS = ("loader", "batch", "dataset")


def _over_data(ctx: FileContext, loop: cst.CSTNode) -> bool:
    """`for x, y in loader:` (also `enumerate(tqdm(loader))`), or a loop that moves what it
    yields to the accelerator (`for pred, target in pairs: f(pred.to(device))`, whatever the
    iterable is called): a loop over batches is per step even in a file that shows no network
    (an evaluation script scoring a model's outputs)."""
    if type(loop) is cst.For and any(w in ctx.code_for(loop.iter).lower() for w in _DATA_WORDS):
        return True
    return moves_what_it_yields(ctx, loop)


def _runs_a_network(ctx: FileContext) -> bool:
    """The file defines or builds a module, calls one (as the engine or the callee's name says:
    `model(x)`, `self.encoder(x)`), backpropagates or steps an optimizer."""
    if module_classes(ctx):
        return True
    facts = file_facts(ctx)
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        if type(func) is cst.Attribute and func.attr.value in ("backward", "zero_grad"):
            return True
        qualified = ctx.qualified_name(func) or ""
        if qualified.startswith("torch.nn.") or facts.is_module(func) or facts.is_module(call):
            return True
        name = dotted_name(func) if not qualified.startswith("torch.") else None  # not `torch.Generator`
        if name is not None and any(w in name.rsplit(".", 1)[-1].lower() for w in MODEL_WORDS):
            return True
    return False


COMPILED_TESTS = frozenset(
    {
        "torch.jit.is_scripting",
        "torch.jit.is_tracing",
        "torch.compiler.is_compiling",
        "torch._dynamo.is_compiling",
        "torch.onnx.is_in_onnx_export",
    }
)


def _compiled_test(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    """True for `torch.jit.is_scripting()` (or `... or torch.jit.is_tracing()`), False for its
    negation, None for any other test."""
    return through_not(test, lambda plain: _compiled_plain(ctx, plain))


def _compiled_plain(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.Or:
        sides = (_compiled_test(ctx, test.left), _compiled_test(ctx, test.right))
        return True if sides == (True, True) else None
    if type(test) is cst.Call and not test.args and ctx.qualified_name(test.func) in COMPILED_TESTS:
        return True
    return None


def _compiled_only(ctx: FileContext, node: cst.CSTNode, depth: int = 0) -> bool:
    """Code that runs only when TorchScript, tracing or export builds the graph
    (`if torch.jit.is_scripting(): ...`, the `else` of `if not torch.jit.is_scripting():`):
    constants are baked in once there, and eager code takes the other branch. A function of the
    file that every call of it in the file (`training.helpers.calls_of`) reaches only there counts
    too: the branch's body moved into a helper."""
    child = node
    for ancestor in _ancestors_to_function(ctx, node):
        if type(ancestor) is cst.If and child is not ancestor.test:
            taken = _compiled_test(ctx, ancestor.test)
            if taken is not None and (child is ancestor.body) == taken:
                return True
        if type(ancestor) is cst.IfExp and child is not ancestor.test:
            taken = _compiled_test(ctx, ancestor.test)
            if taken is not None and (child is ancestor.body) == taken:
                return True
        child = ancestor
    function = ctx.index.enclosing_function(node)
    if function is None or depth > 1:
        return False
    calls = calls_of(ctx, function)
    return bool(calls) and all(_compiled_only(ctx, call, depth + 1) for call in calls)


def _cached(function: cst.FunctionDef) -> bool:
    """`@lru_cache`/`@cache`-style decorators: the copy is made once per device, not per step."""
    return any(
        "cache" in (dotted_name(d.decorator.func if type(d.decorator) is cst.Call else d.decorator) or "").lower()
        for d in function.decorators
    )


def _ancestors_to_function(ctx: FileContext, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return
        yield ancestor


def _callee(
    ctx: FileContext,
    call: cst.Call,
    functions: dict[str, cst.FunctionDef],
    classes: dict[str, dict[str, cst.FunctionDef]],
) -> cst.FunctionDef | None:
    """The same-file function or method (`self.m(...)`) a call runs."""
    func = call.func
    if type(func) is cst.Name:
        return functions.get(func.value)
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
        cls = ctx.index.enclosing_class(call)
        if cls is not None:
            return classes.get(cls.name.value, {}).get(func.attr.value)
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in classes:
        return classes[func.value.value].get(func.attr.value)  # `Normalize._mean(x)`: a static method
    return None
