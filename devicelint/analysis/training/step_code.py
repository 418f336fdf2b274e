"""Code that runs on every training step because step code calls it: device code is wherever the
step's device tensors flow, not a list of method names.

From each step region (`loops.step_regions`), the calls it makes on every step (outside logging
conditions) are followed into the functions of the file they run (`helpers.callee`): a
top-level helper, a `self` method, a method of an object the file builds from one of its classes
(`metric.update(...)`, `opt.step()` of a local `Optimizer` subclass, `schedule.step(x)`), and the
`forward` of a local module it calls (`loss_fn(out, y)`). Each callee is a region too, seeded with
the parameters its callers pass device tensors, a few levels deep. An `Optimizer` subclass's
`step()` is step code by itself, with the parameters it iterates (`for p in group["params"]`) as
its device tensors.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import MODEL_WORDS, move_call, moves_to_accelerator
from devicelint.analysis.training.helpers import (
    callee,
    function_referred,
    looped_methods,
    method_of,
    optimizer_classes,
    parameter_names,
)
from devicelint.analysis.training.hot_values import HotValues, hot_values, on_device, placement_says
from devicelint.analysis.training.loops import (
    StepRegion,
    evaluates,
    in_logging_condition,
    in_unset_branch,
    step_regions,
)
from devicelint.analysis.training.reads import bound_only_later
from devicelint.analysis.training.step import Scope
from devicelint.analysis.training.syntax import assigned_names, body_nodes, receiver, scope_of
from devicelint.analysis.training.values import values_of
from devicelint.context import FileContext

_MAX_DEPTH = 3


def step_code(ctx: FileContext) -> list[StepRegion]:
    """Every step region, the optimizer steps of the file's `Optimizer` subclasses, and the
    functions of the file they call on every step."""

    def build(c: FileContext) -> list[StepRegion]:
        found: dict[int, StepRegion] = {}
        regions = step_regions(c)
        for region in [*regions, *_optimizer_steps(c), *(_hooks(c) if regions else ())]:
            found.setdefault(id(region.owner), region)
        frontier = list(found.values())
        for _ in range(_MAX_DEPTH):
            reached: dict[int, tuple[cst.FunctionDef, set[str], set[str]]] = {}
            for region in frontier:
                _follow(c, region, found, reached)
            frontier = [
                StepRegion(func, func.body, Scope(node=func), (), frozenset(seeds), frozenset(unset))
                for func, seeds, unset in reached.values()
            ]
            for region in frontier:
                found[id(region.owner)] = region
        return list(found.values())

    return ctx.shared("training.step_code", build)


def _follow(
    ctx: FileContext,
    region: StepRegion,
    found: dict[int, StepRegion],
    reached: dict[int, tuple[cst.FunctionDef, set[str], set[str]]],
) -> None:
    """Add to `reached` the functions `region` calls on every step, with the parameters each call
    passes device tensors and the flags that every such call leaves unset."""
    hot = hot_values(ctx, region)
    for node in body_nodes(region.body):
        if (
            type(node) is not cst.Call
            or in_logging_condition(ctx, node, region.owner)
            or in_unset_branch(ctx, node, region)
        ):
            continue
        single = callee(ctx, node)
        # `for metric in metrics.values(): metric.update(out)`: each element's method
        for func in [single] if single is not None else looped_methods(ctx, node):
            if id(func) in found or func is region.owner:
                continue
            if func.name.value.startswith("__") and func.name.value != "__call__":
                continue
            if evaluates(ctx, func) and not _optimizer_method(ctx, func) and not _feeds_loss(ctx, node, hot):
                continue  # an evaluation helper: reading its results is what it is for
            unset = _unset_flags(ctx, node, func)
            entry = reached.setdefault(id(func), (func, set(), set(unset)))
            entry[1].update(_device_parameters(ctx, node, func, hot))
            entry[2].intersection_update(unset)


def _unset_flags(ctx: FileContext, call: cst.Call, func: cst.FunctionDef) -> set[str]:
    """Parameters of `func` with a false default (`calc_acc=False`, `debug=None`) that `call`
    leaves out or sets to a false literal: a branch under one of them is not taken on this call."""
    if any(arg.star for arg in call.args):
        return set()
    params = [*func.params.posonly_params, *func.params.params]
    if params and _takes_self(ctx, func, call):
        params = params[1:]
    given: dict[str, cst.BaseExpression] = {}
    positional = [arg.value for arg in call.args if arg.keyword is None]
    for param, value in zip(params, positional):
        given[param.name.value] = value
    for arg in call.args:
        if arg.keyword is not None:
            given[arg.keyword.value] = arg.value
    out = set()
    for param in (*params, *func.params.kwonly_params):
        if param.default is None or not _false_literal(param.default):
            continue
        value = given.get(param.name.value)
        if value is None or _false_literal(value):
            out.add(param.name.value)
    return out


def _false_literal(node: cst.BaseExpression) -> bool:
    if type(node) is cst.Name:
        return node.value in ("False", "None")
    return type(node) is cst.Integer and node.value == "0"


def _feeds_loss(ctx: FileContext, call: cst.Call, hot: HotValues) -> bool:
    """`out = loss_module(batch)` where the step backpropagates what is computed from `out`: the
    callee computes the loss, whatever `no_grad` blocks it has for its diagnostics."""
    parent = ctx.index.parent(call)
    if type(parent) is not cst.Assign:
        return False
    return any(n in hot.inputs for t in parent.targets for n in assigned_names(t.target))


def _device_parameters(ctx: FileContext, call: cst.Call, func: cst.FunctionDef, hot: HotValues) -> set[str]:
    """The parameters of `func` that `call` passes a device tensor: a value placement puts on the
    accelerator, the loss or a model output (or one computed from them), or a tensor moved there
    (`x.to(device)`)."""
    params = [p.name.value for p in (*func.params.posonly_params, *func.params.params)]
    if params and _takes_self(ctx, func, call):
        params = params[1:]
    named = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
    out: set[str] = set()
    index = 0
    for arg in call.args:
        if arg.star:
            break
        name = None
        if arg.keyword is None:
            name = params[index] if index < len(params) else None
            index += 1
        elif arg.keyword.value in named:
            name = arg.keyword.value
        if name is not None and _device_argument(ctx, arg.value, hot):
            out.add(name)
    return out


def _takes_self(ctx: FileContext, func: cst.FunctionDef, call: cst.Call) -> bool:
    """A method called on an instance: its first parameter is the instance."""
    if ctx.index.enclosing_class(func) is None:
        return False
    decorators = {dotted_name(d.decorator) for d in func.decorators}
    return "staticmethod" not in decorators


def _device_argument(ctx: FileContext, value: cst.BaseExpression, hot: HotValues) -> bool:
    if isinstance(value, (cst.Tuple, cst.List)):
        return any(_device_argument(ctx, e.value, hot) for e in value.elements)
    known = placement_says(ctx, value)
    if known is not None:
        return known
    if _moved_tensors(value, hot):
        return True
    scope = scope_of(ctx, value)
    if type(value) is cst.Name and value.value not in hot.modules:
        # `batch = {k: v.to(device) for k, v in batch.items()}` then `loss_fn(batch)`, not a call
        # made before the move (`sampler.sample(batch)`, then `batch = batch.to(device)`)
        if not bound_only_later(ctx, scope, value.value, value) and any(
            v is not None and _moved_tensors(v, hot) for v in values_of(ctx, value.value, scope) or ()
        ):
            return True
    return on_device(ctx, value, hot)


def _moved_tensors(value: cst.BaseExpression, hot: HotValues) -> bool:
    """`x.to(device)`, `x.cuda()`, `{k: v.to(device) for ...}`, `[t.cuda() for t in batch]`: tensors
    moved towards the accelerator (not a model: `model.to(device)` is a module)."""
    if isinstance(value, (cst.DictComp, cst.ListComp, cst.GeneratorExp)):
        return _moved_tensors(value.value if isinstance(value, cst.DictComp) else value.elt, hot)
    if not (type(value) is cst.Call and move_call(value) in ("to", "cuda") and moves_to_accelerator(value)):
        return False
    moved = dotted_name(receiver(value)) if receiver(value) is not None else None
    return moved is not None and moved not in hot.modules and not any(w in moved.lower() for w in MODEL_WORDS)


# ----------------------------------------------------------------------------- optimizers


def _optimizer_method(ctx: FileContext, func: cst.FunctionDef) -> bool:
    cls = ctx.index.enclosing_class(func)
    return cls is not None and any(cls is o for o in optimizer_classes(ctx))


def _optimizer_steps(ctx: FileContext) -> list[StepRegion]:
    """`step()` of each optimizer class of the file: it runs once per training step, with the
    parameters (`p` in `for p in group["params"]`, and what is computed from them) on the device
    the model trains on."""
    found = []
    for cls in optimizer_classes(ctx):
        step = method_of(ctx, cls, "step")
        if step is None or ctx.index.enclosing_class(step) is not cls:
            continue
        seeds = frozenset(parameter_names(ctx, step))
        if seeds:
            found.append(StepRegion(step, step.body, Scope(node=step), (), seeds))
    return found


# Hooks torch runs on every forward or backward pass of the module (or tensor) they are put on.
_MODULE_HOOKS = frozenset(
    {"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook", "register_backward_hook"}
)


def _hooks(ctx: FileContext) -> list[StepRegion]:
    """The functions of the file registered as module or tensor hooks in a file that trains: they
    run on every step, with what torch hands them (the outputs, the gradients) on the device."""
    found = []
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        if type(func) is not cst.Attribute or not call.args or call.args[0].keyword is not None:
            continue
        name = func.attr.value
        if name not in _MODULE_HOOKS and name != "register_hook":
            continue
        hook = function_referred(ctx, call.args[0].value, call)
        if hook is None:
            continue
        params = [p.name.value for p in (*hook.params.posonly_params, *hook.params.params)]
        if params and params[0] == "self" and ctx.index.enclosing_class(hook) is not None:
            params = params[1:]
        # a module hook gets the module first; a tensor hook only the gradient
        seeds = frozenset(params[1:] if name in _MODULE_HOOKS else params)
        if seeds:
            found.append(StepRegion(hook, hook.body, Scope(node=hook), (), seeds))
    return found
