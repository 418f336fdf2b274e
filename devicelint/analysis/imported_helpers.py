"""Calls of functions imported from other modules of the project, bound to what they do.

The project index summarises what such a function does to the arguments it is handed
(`devicelint.project.helpers`); this binds a call's arguments to those parameters, so a rule
judges the caller's value (a device tensor, a `DataParallel` wrapper, a batch) at the call site.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.analysis.model_events.scopes import scope_facts, scope_of
from devicelint.analysis.modules import methods
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import ACCELERATOR, INPUT_MOVING_WRAPPERS, MODULE
from devicelint.context import FileContext
from devicelint.project.view import ImportedHelper, ImportedPlainClass


def imported_call(ctx: FileContext, call: cst.Call) -> tuple[ImportedHelper, dict[str, cst.BaseExpression]] | None:
    """The imported project function `call` runs (as the file spells it: `to_device`,
    `U.to_device`) and the argument each of its parameters receives; None for anything else or
    a call with `*args`/`**kwargs`."""
    helpers = ctx.project.helpers
    if not helpers:
        return None
    name = dotted_name(call.func)
    helper = helpers.get(name) if name is not None else None
    if helper is None and name is not None and name.startswith("self.") and name.count(".") == 1:
        helper = _inherited(ctx, call, name[5:])
    if helper is None and name is not None and "." in name:
        helper = _instance_method(ctx, call, name)
    if helper is None and type(call.func) is cst.Name:
        helper = _called_instance(ctx, call, call.func.value)
    if helper is None or any(arg.star for arg in call.args):
        return None
    bound: dict[str, cst.BaseExpression] = {}
    for position, arg in enumerate(call.args):
        keyword = arg.keyword.value if arg.keyword is not None else None
        param = helper.uses.parameter_at(position, keyword)
        if param is not None:
            bound[param] = arg.value
    return helper, bound


def _inherited(ctx: FileContext, call: cst.Call, method: str) -> ImportedHelper | None:
    """The method `self.<method>(...)` runs in a class of this file that does not define it
    but inherits it from an imported project class (`class EHRTrainer(BaseTrainer)` calling
    `self.to_device(batch)`), through the file's own classes between them."""
    cls = ctx.index.enclosing_class(call)
    function = ctx.index.enclosing_function(call)
    if cls is None or function is None or ctx.index.enclosing_class(function) is not cls:
        return None
    classes = {c.name.value: c for c in ctx.index.of_type(cst.ClassDef)}
    chain: list[cst.ClassDef] = [cls]
    seen: set[str] = set()
    while chain and len(seen) < 12:
        current = chain.pop(0)
        if current.name.value in seen:
            continue
        seen.add(current.name.value)
        if method in methods(current):
            return None
        for base in current.bases:
            spelled = dotted_name(base.value) if base.keyword is None else None
            if spelled is None:
                continue
            helper = ctx.project.helpers.get(f"{spelled}#{method}")
            if helper is not None:
                return helper
            if spelled in classes:
                chain.append(classes[spelled])
    return None


def _instance_method(ctx: FileContext, call: cst.Call, name: str) -> ImportedHelper | None:
    """The method `obj.<method>(...)` runs when `obj` is an instance of an imported project
    class: a name (or `self.<attr>` of the enclosing class's `__init__`) bound once to
    `Cls(...)` (`visualizer = Visualizer(opt)`, `logger = utils.MetricLogger()`), whose method,
    its own or a project base's, does something to what it is handed (`Cls#method`)."""
    owner, _, method = name.rpartition(".")
    if not owner or method.startswith("__") or not isinstance(call.func, cst.Attribute):
        return None
    if not any(key.endswith("#" + method) for key in ctx.project.helpers):
        return None
    scope: cst.FunctionDef | cst.Module = scope_of(ctx, call)
    if owner.startswith("self."):
        if owner.count(".") != 1:
            return None
        cls = ctx.index.enclosing_class(call)
        init = methods(cls).get("__init__") if cls is not None else None
        if init is None:
            return None
        scope = init
    elif "." in owner:
        return None
    values = scope_facts(ctx, scope).assigned.get(owner)
    if values is None or len(values) != 1 or type(values[0]) is not cst.Call:
        return None
    built = dotted_name(values[0].func)
    return ctx.project.helpers.get(f"{built}#{method}") if built is not None else None


def _called_instance(ctx: FileContext, call: cst.Call, name: str) -> ImportedHelper | None:
    """The `__call__` an instance of an imported project class runs when called directly
    (`inferer = LatentDiffusionInferer(...)`, then `inferer(images, autoencoder, ...)`): a name
    bound once, in the calling scope, to `Cls(...)`."""
    if not any(key.endswith("#__call__") for key in ctx.project.helpers):
        return None
    values = scope_facts(ctx, scope_of(ctx, call)).assigned.get(name)
    if values is None or len(values) != 1 or type(values[0]) is not cst.Call:
        return None
    built = dotted_name(values[0].func)
    return ctx.project.helpers.get(f"{built}#__call__") if built is not None else None


def moved_model(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """A module the file put on the accelerator, not a `DataParallel`/`DistributedDataParallel`
    wrapper (which moves, scatters, its inputs itself): what a helper handed it must feed it
    device tensors."""
    fact = file_facts(ctx).value(node)
    return fact.kind == MODULE and fact.where == ACCELERATOR and (fact.factory or "") not in INPUT_MOVING_WRAPPERS


def imported_instance(ctx: FileContext, node: cst.BaseExpression) -> ImportedPlainClass | None:
    """The imported plain class whose instance `node` is: a name (or `self.<attr>` of the
    class's `__init__`) bound once to `Cls(...)`."""
    found = imported_construction(ctx, node)
    return found[0] if found is not None else None


def imported_construction(ctx: FileContext, node: cst.BaseExpression) -> tuple[ImportedPlainClass, cst.Call] | None:
    """`imported_instance`, with the `Cls(...)` call that built it."""
    plain = ctx.project.plain_classes
    name = dotted_name(node) if plain else None
    if name is None:
        return None
    scope: cst.FunctionDef | cst.Module = scope_of(ctx, node)
    if name.startswith("self."):
        cls = ctx.index.enclosing_class(node)
        init = methods(cls).get("__init__") if cls is not None else None
        if init is None:
            return None
        scope = init
    values = scope_facts(ctx, scope).assigned.get(name)
    if values is None or len(values) != 1 or type(values[0]) is not cst.Call:
        return None
    cls = plain.get(dotted_name(values[0].func) or "")
    return (cls, values[0]) if cls is not None else None


def argument_for(call: cst.Call, params: tuple[str, ...], param: str) -> cst.BaseExpression | None:
    """The argument `call` hands to `param` of a function whose positional parameters are `params`."""
    for position, arg in enumerate(call.args):
        if (arg.keyword is not None and arg.keyword.value == param) or (
            arg.keyword is None and position < len(params) and params[position] == param
        ):
            return arg.value
    return None


def argument_named_in_place(call: cst.Call, spec: str) -> cst.BaseExpression | None:
    """What `call` hands the parameter that a summary's place names as `<param>#<position>`
    (`"device#1"` of "generator:@device#1=cuda"): by keyword, or at that position (-1: keyword
    only); None where the call hands nothing there or spreads `*args`."""
    if any(arg.star for arg in call.args):
        return None
    param, _, index = spec.partition("#")
    position = int(index) if index.lstrip("-").isdigit() else -1
    for at, arg in enumerate(call.args):
        if (arg.keyword is not None and arg.keyword.value == param) or (arg.keyword is None and at == position):
            return arg.value
    return None


def imported_calls(ctx: FileContext) -> Iterator[tuple[cst.Call, ImportedHelper, dict[str, cst.BaseExpression]]]:
    """Every call of an imported project function in the file, bound as `imported_call` binds it."""
    if not ctx.project.helpers:
        return
    for call in ctx.index.of_type(cst.Call):
        imported = imported_call(ctx, call)
        if imported is not None:
            yield call, *imported


def imported_method_calls(ctx: FileContext) -> Iterator[tuple[cst.Call, ImportedPlainClass, str]]:
    """Every `x.method(...)` call (no `*args`) on an instance of an imported plain class."""
    if not ctx.project.plain_classes:
        return
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        if type(func) is not cst.Attribute or any(arg.star for arg in call.args):
            continue
        cls = imported_instance(ctx, func.value)
        if cls is not None:
            yield call, cls, func.attr.value
