"""Where an operation's argument lives, when the engine's own answer is `unknown`.

The engine (`facts.file_facts(ctx).place_of`) answers first. Where it has nothing to say, two
facts that it does not carry across functions are read here, and only these:

- `self.<attr>` that the class stored once in `__init__` as a plain CPU tensor
  (`constant_attributes.stored_once`), in a module or in any other class;
- a parameter that the function never rebinds, where every call of the function in the file
  that the engine (or this function, a few calls up) can answer passes a value on the same side.

Expressions built from those (`self.shape[1] - 1`, `table.float()`) keep the answer; a move
(`.to(...)`, `.cuda()`) ends it. Nothing here is a second model of placement: every leaf of an
answer is the engine's fact or a `StoredOnce` attribute.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.constant_attributes import StoredOnce, module_constant, stored_once
from devicelint.analysis.default_device import (
    ACCELERATOR_DEFAULT,
    default_device_at,
    only_called_under_accelerator_blocks,
)
from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.instance_parameters import instance_binding
from devicelint.analysis.placement_calls import ignores_default_device
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import (
    ACCELERATOR,
    MEETING_METHODS,
    MODULE,
    PRESERVING_METHODS,
    UNKNOWN,
    UNKNOWN_FACT,
    move_call,
)
from devicelint.analysis.placement_values import NUMBER, is_number, sets_accelerator_default
from devicelint.analysis.training.helpers import call_sites
from devicelint.analysis.vocabulary import FACTORIES, LEGACY_CONSTRUCTORS
from devicelint.context import FileContext

_MAX_CALLERS_UP = 3


@dataclass(frozen=True)
class ArgumentPlace:
    place: Place
    # a 0-dim tensor (PyTorch lets a 0-dim CPU tensor meet device tensors in most ops)
    scalar: bool = False
    # an unmoved DataLoader batch (something unseen may still move it)
    batch: bool = False
    # the plain attribute the answer comes from, when it does
    attribute: StoredOnce | None = None


UNKNOWN_PLACE = ArgumentPlace(Place.UNKNOWN)


def place_of_argument(ctx: FileContext, expr: cst.BaseExpression) -> ArgumentPlace:
    """The engine's place of `expr`, else what the class's attributes and the function's
    callers show (memoised per file)."""
    cache: dict[int, ArgumentPlace] = ctx.shared("argument_places", lambda c: {})
    return _place(ctx, expr, 0, cache)


def _place(ctx: FileContext, expr: cst.BaseExpression, depth: int, cache: dict[int, ArgumentPlace]) -> ArgumentPlace:
    found = cache.get(id(expr))
    if found is None:
        cache[id(expr)] = UNKNOWN_PLACE  # a recursive question gets no answer
        found = cache[id(expr)] = _resolve(ctx, expr, depth, cache)
    return found


def _resolve(ctx: FileContext, expr: cst.BaseExpression, depth: int, cache: dict[int, ArgumentPlace]) -> ArgumentPlace:
    facts = file_facts(ctx)
    fact = facts.value(expr)
    place = facts.place_of(expr)
    if (
        place is Place.HOST
        and type(fact.origin) is cst.Call
        and only_called_under_accelerator_blocks(ctx, fact.origin)
        and _built_on_default_accelerator(ctx, fact.origin)
    ):
        # made by a factory in a helper that every call runs inside a caller's device block
        return ArgumentPlace(Place.DEVICE)
    if place is not Place.UNKNOWN:
        return ArgumentPlace(place, fact.scalar, fact.batch)
    if fact.kind == UNKNOWN and fact.where == ACCELERATOR and not fact.batch:
        # a value moved to the accelerator (`values.to(device)`): in a tensor op's argument
        # position it is a tensor
        return ArgumentPlace(Place.DEVICE)
    if fact != UNKNOWN_FACT:
        return UNKNOWN_PLACE  # a module, a device, a number: the engine knows it is no tensor here
    if type(expr) is cst.Attribute:
        return _attribute(ctx, expr)
    if type(expr) is cst.Name:
        return _name(ctx, expr, depth, cache)
    if type(expr) is cst.Subscript:
        base = _place(ctx, expr.value, depth, cache)
        return (
            ArgumentPlace(base.place, False, base.batch, base.attribute)
            if base.place is not Place.UNKNOWN
            else UNKNOWN_PLACE
        )
    if type(expr) is cst.UnaryOperation and type(expr.operator) is not cst.Not:
        return _place(ctx, expr.expression, depth, cache)
    if type(expr) is cst.BinaryOperation:
        return _binary(ctx, expr, depth, cache)
    if type(expr) is cst.Comparison and not any(
        type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in expr.comparisons
    ):
        # `self.mask[:, :T] == 0`: a mask computed on the CPU
        return _combined(ctx, [expr.left, *(c.comparator for c in expr.comparisons)], depth, cache)
    if type(expr) is cst.Call and _built_on_default_accelerator(ctx, expr):
        return ArgumentPlace(Place.DEVICE)
    if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
        return _method(ctx, expr, depth, cache)
    return UNKNOWN_PLACE


def _built_on_default_accelerator(ctx: FileContext, call: cst.Call) -> bool:
    """`torch.tensor(sizes)` without `device=` where an accelerator is the default device when it
    runs (`torch.set_default_tensor_type(torch.cuda.FloatTensor)` earlier in the function, or for
    the whole run): the factory builds there. The engine leaves such factories unplaced; an op
    that takes only host tensors still needs to know they are not on the host. Legacy typed
    constructors (`torch.LongTensor`), `torch.Tensor` and `from_numpy` stay on the CPU."""
    if not sets_accelerator_default(ctx) and not ctx.index.of_type(cst.With):
        return False  # (cheap: nothing in the file can make an accelerator the default)
    qualified = ctx.qualified_name(call.func) or ""
    short = qualified[len("torch.") :] if qualified.startswith("torch.") and qualified.count(".") == 1 else ""
    if short not in FACTORIES or short in LEGACY_CONSTRUCTORS or short == "Tensor":
        return False
    if ignores_default_device(call, short) or any(
        a.keyword is not None and a.keyword.value == "device" for a in call.args
    ):
        return False
    return default_device_at(ctx, call).state == ACCELERATOR_DEFAULT or only_called_under_accelerator_blocks(ctx, call)


def _attribute(ctx: FileContext, expr: cst.Attribute) -> ArgumentPlace:
    attr = self_attribute(expr)
    cls = ctx.index.enclosing_class(expr)
    if cls is None:
        # a plain helper handed the instance (`_noise_scale(self, idx)` into `def _noise_scale(model, idx)`)
        cls = _handed_instance_class(ctx, expr)
        attr = expr.attr.value if cls is not None else None
    if cls is None:
        return _handed_module_tensor(ctx, expr)
    if attr is None:
        return UNKNOWN_PLACE
    stored = stored_once(ctx, cls).get(attr)
    if stored is None or not stored.cpu_tensor:
        return UNKNOWN_PLACE
    return ArgumentPlace(Place.HOST, stored.scalar, attribute=stored)


# What a module's own tensors are called; any other attribute of a module may hold anything.
_MODULE_TENSORS = ("weight", "bias")


def _handed_module_tensor(ctx: FileContext, expr: cst.Attribute) -> ArgumentPlace:
    """`model.embed.weight` in a helper (`init_embeddings(model, seed)`) whose every call hands
    `model` a module the engine knows is on the accelerator (`SkipGram(...).to(device)`): its
    weights went with it."""
    if expr.attr.value not in _MODULE_TENSORS:
        return UNKNOWN_PLACE
    root: cst.BaseExpression = expr.value
    while type(root) is cst.Attribute:
        root = root.value
    passed = passed_for(ctx, root) if type(root) is cst.Name else None
    if not passed:
        return UNKNOWN_PLACE
    facts = file_facts(ctx)
    if all(facts.value(v).kind == MODULE and facts.value(v).where == ACCELERATOR for v in passed):
        return ArgumentPlace(Place.DEVICE)
    return UNKNOWN_PLACE


def _handed_instance_class(ctx: FileContext, expr: cst.Attribute) -> cst.ClassDef | None:
    """The class whose instance the helper parameter `expr` reads is handed by every call."""
    function = ctx.index.enclosing_function(expr)
    handed = instance_binding(ctx, function) if function is not None else None
    if handed is None or type(expr.value) is not cst.Name or expr.value.value != handed[0]:
        return None
    return handed[1]


def _binary(ctx: FileContext, expr: cst.BinaryOperation, depth: int, cache: dict[int, ArgumentPlace]) -> ArgumentPlace:
    """`self.shape[1] - 1` stays on the CPU; a CPU tensor with anything else is not answered."""
    return _combined(ctx, [expr.left, expr.right], depth, cache)


def _combined(
    ctx: FileContext, operands: list[cst.BaseExpression], depth: int, cache: dict[int, ArgumentPlace]
) -> ArgumentPlace:
    """CPU tensors combined with each other or with numbers stay on the CPU."""
    sides = []
    for side in operands:
        if is_number(side) or file_facts(ctx).value(side) == NUMBER:
            continue
        sides.append(_place(ctx, side, depth, cache))
    if not sides or any(s.place is not Place.HOST for s in sides):
        return UNKNOWN_PLACE
    return ArgumentPlace(
        Place.HOST,
        all(s.scalar for s in sides),
        any(s.batch for s in sides),
        next((s.attribute for s in sides if s.attribute is not None), None),
    )


def _method(ctx: FileContext, call: cst.Call, depth: int, cache: dict[int, ArgumentPlace]) -> ArgumentPlace:
    method = move_call(call)
    if method is not None:
        return ArgumentPlace(Place.HOST) if method == "cpu" else UNKNOWN_PLACE
    name = call.func.attr.value  # type: ignore[attr-defined]  # the caller passes `x.<method>(...)` calls only
    if name not in PRESERVING_METHODS or name in MEETING_METHODS or name == "type":
        return UNKNOWN_PLACE
    receiver = _place(ctx, call.func.value, depth, cache)  # type: ignore[attr-defined]  # as above
    if receiver.place is not Place.HOST:
        return UNKNOWN_PLACE
    return ArgumentPlace(Place.HOST, False, receiver.batch, receiver.attribute)


def _name(ctx: FileContext, expr: cst.Name, depth: int, cache: dict[int, ArgumentPlace]) -> ArgumentPlace:
    function = ctx.index.enclosing_function(expr)
    if function is None or depth >= _MAX_CALLERS_UP:
        return UNKNOWN_PLACE
    name = expr.value
    constant = _module_constant_place(ctx, function, name, depth, cache)
    if constant is not None:
        return constant
    bindings = _bindings_by_name(ctx, function).get(name, [])
    position = _parameter_position(function, name)
    if position is None:
        # a local bound once by `name = value` (the engine lost `value`'s place)
        if len(bindings) == 1:
            parent = ctx.index.parent(bindings[0])
            assign = ctx.index.parent(parent) if type(parent) is cst.AssignTarget else None
            if type(assign) is cst.Assign and len(assign.targets) == 1 and assign.targets[0].target is bindings[0]:
                return _place(ctx, assign.value, depth, cache)
        return UNKNOWN_PLACE
    if bindings:
        return UNKNOWN_PLACE
    answers = [
        _place(ctx, argument, depth + 1, cache) for argument in _arguments_at_calls(ctx, function, name, position)
    ]
    known = [a for a in answers if a.place is not Place.UNKNOWN]
    if not known or len({a.place for a in known}) != 1:
        return UNKNOWN_PLACE
    return ArgumentPlace(
        known[0].place,
        all(a.scalar for a in known),
        any(a.batch for a in known),
        next((a.attribute for a in known if a.attribute is not None), None),
    )


def _module_constant_place(
    ctx: FileContext, function: cst.FunctionDef, name: str, depth: int, cache: dict[int, ArgumentPlace]
) -> ArgumentPlace | None:
    """A name the function never binds (not a parameter, no assignment, no nested scope) that the
    module binds once: `TABLE[t]` with `TABLE = torch.linspace(...)` at the top of the file."""
    if name not in file_facts(ctx).scope(ctx.module).facts:
        return None  # the module's code never binds it (a cheap test before the full scan)
    value = module_constant(ctx, name)
    if value is None or _parameter_position(function, name) is not None:
        return None
    if any(type(scope) is cst.FunctionDef for scope in ctx.index.ancestors(function)):
        return None  # a closure: the enclosing function may bind it
    if name in _bindings_by_name(ctx, function):
        return None
    return _place(ctx, value, depth, cache)


def _bindings_by_name(ctx: FileContext, function: cst.FunctionDef) -> dict[str, list[cst.Name]]:
    """Every occurrence of a name that rebinds it in the function's own body (not in a nested
    function), by name; built for a function the first time it is asked about (most never are)."""
    by_function: dict[int, dict[str, list[cst.Name]]] = ctx.shared("argument_places.bindings", lambda c: {})
    found = by_function.get(id(function))
    if found is None:
        found = by_function[id(function)] = _function_bindings(ctx, function)
    return found


_BINDING_OWNERS = (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)


def _function_bindings(ctx: FileContext, function: cst.FunctionDef) -> dict[str, list[cst.Name]]:
    index = ctx.index
    targets: list[cst.CSTNode] = [t.target for t in index.within(function, cst.AssignTarget)]
    for kind in _BINDING_OWNERS:
        targets += [n.target for n in index.within(function, kind)]  # type: ignore[attr-defined]  # each of these node types has .target
    targets += [n.name for n in index.within(function, cst.AsName)]
    found: dict[str, list[cst.Name]] = {}
    for target in targets:
        for node in index.walk(target):
            if type(node) is cst.Name and _binds(ctx, node) and index.enclosing_function(node) is function:
                found.setdefault(node.value, []).append(node)
    return found


def _binds(ctx: FileContext, name: cst.Name) -> bool:
    """Whether this occurrence of a name rebinds it (assignment, loop or `with` target...)."""
    if ctx.index.in_binding_target(name):
        return True
    owner, pattern = ctx.index.unpacking_owner(name)
    if type(owner) is cst.AsName:
        return True
    return isinstance(owner, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr)) and owner.target is pattern


def _parameter_position(function: cst.FunctionDef, name: str) -> tuple[int | None, bool] | None:
    """(position among the positional parameters, counting `self`; None if keyword-only,
    whether the function is called bound) for a parameter `name`."""
    positional = list(function.params.posonly_params) + list(function.params.params)
    for index, param in enumerate(positional):
        if param.name.value == name:
            return index, False
    if any(p.name.value == name for p in function.params.kwonly_params):
        return None, False
    return None


def arguments_passed(ctx: FileContext, function: cst.FunctionDef, name: str) -> list[cst.BaseExpression]:
    """What the file's calls of `function` pass for its parameter `name` (empty when none is seen)."""
    position = _parameter_position(function, name)
    return _arguments_at_calls(ctx, function, name, position) if position is not None else []


def passed_for(ctx: FileContext, name: cst.Name) -> list[cst.BaseExpression] | None:
    """What the file's calls pass for the parameter `name` reads, when it is a parameter of
    the enclosing function that the body never rebinds (None otherwise): a value handed to a
    helper is judged where the caller made it."""
    function = ctx.index.enclosing_function(name)
    if function is None:
        return None
    position = _parameter_position(function, name.value)
    if position is None or _bindings_by_name(ctx, function).get(name.value):
        return None
    return _arguments_at_calls(ctx, function, name.value, position)


def left_out_everywhere(ctx: FileContext, name: cst.Name) -> bool:
    """Whether `name` reads a parameter defaulting to `None` that its function never rebinds
    and that every call of the function in the file (one at least) leaves out: it holds None
    (`module.to(device)` with `device=None` moves nothing)."""
    function = ctx.index.enclosing_function(name)
    if function is None:
        return False
    params = function.params
    param = next(
        (p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == name.value), None
    )
    if param is None or not (type(param.default) is cst.Name and param.default.value == "None"):
        return False
    if _bindings_by_name(ctx, function).get(name.value):
        return False
    found = calls_of(ctx, function)
    if not found or any(a.star for call in found[0] for a in call.args):
        return False
    position = _parameter_position(function, name.value)
    return position is not None and not _arguments_at_calls(ctx, function, name.value, position)


def _arguments_at_calls(
    ctx: FileContext, function: cst.FunctionDef, name: str, position: tuple[int | None, bool]
) -> list[cst.BaseExpression]:
    """The expression passed for parameter `name` at each call of `function` in the file."""
    found = calls_of(ctx, function)
    if not found:
        return []
    calls, bound = found
    index = position[0]
    if index is not None and bound:
        index -= 1  # `self` is passed by the call's receiver
    out: list[cst.BaseExpression] = []
    for call in calls:
        if any(a.star for a in call.args):
            continue
        chosen = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
        if chosen is None and index is not None:
            positional = [a.value for a in call.args if a.keyword is None]
            if 0 <= index < len(positional):
                chosen = positional[index]
        if chosen is not None:
            out.append(chosen)
    return out


def calls_of(ctx: FileContext, function: cst.FunctionDef) -> tuple[list[cst.Call], bool] | None:
    """The file's calls of `function` (`training.helpers.call_sites`), and whether they bind
    `self` through the receiver (`Class(...)` for `__init__`, `runner.f(...)`); None when the file
    shows none."""
    found = call_sites(ctx, function)
    return (list(found.calls), found.binds_receiver) if found.calls else None


def extra_keywords(
    ctx: FileContext, function: cst.FunctionDef, name: str
) -> list[tuple[cst.Call, dict[str, cst.BaseExpression], list[cst.BaseExpression]]] | None:
    """What the file's calls of `function` gather into its `**name` parameter: at each call, the
    keywords that name none of its parameters and the `**mapping`s it spreads. None when `name`
    is not the function's `**` parameter, when no call is seen, or when a call spreads `*args`
    (whose parts may fill any parameter)."""
    star = function.params.star_kwarg
    if star is None or star.name.value != name:
        return None
    found = calls_of(ctx, function)
    if not found or not found[0]:
        return None
    named = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    named |= {p.name.value for p in function.params.kwonly_params}
    out = []
    for call in found[0]:
        if any(a.star == "*" for a in call.args):
            return None
        keywords = {
            a.keyword.value: a.value for a in call.args if a.keyword is not None and a.keyword.value not in named
        }
        spread = [a.value for a in call.args if a.star == "**"]
        out.append((call, keywords, spread))
    return out
