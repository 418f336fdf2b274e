"""`DataParallel`/`DistributedDataParallel` call sites: what each wraps, where it is assigned,
which wrapper a name holds at a point, and whether the wrapped model is split over devices.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, replace

import libcst as cst

from devicelint.analysis.argument_places import passed_for
from devicelint.analysis.container_reads import holders
from devicelint.analysis.devices import string_value
from devicelint.analysis.imported_helpers import imported_instance
from devicelint.analysis.model_events.classes import (
    builder_of,
    class_placements,
    imported_placements,
    numbered_split,
    split_of,
)
from devicelint.analysis.model_events.devices import (
    APEX_DISTRIBUTED_DATA_PARALLEL,
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    KEEPS_MODULE,
    Device,
    Placement,
    Resolver,
    chain_base,
    rebinds,
    resolver_for,
    strip_self_returning,
)
from devicelint.analysis.model_events.scopes import Scope, only_return, scope_facts, scope_of, short, statement_of
from devicelint.analysis.model_events.variables import history
from devicelint.analysis.modules import module_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import ClassFacts, class_facts
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.training.helpers import bound_arguments
from devicelint.context import FileContext


@dataclass(frozen=True)
class WrapperSite:
    call: cst.Call
    kind: str  # "DataParallel" or "DistributedDataParallel"
    spelled: str  # the callee as written: `nn.DataParallel`, `DP`
    wrapped: cst.BaseExpression | None
    target: str | None  # `model`, `self.model`: what the wrapper is assigned to
    device_ids: cst.BaseExpression | None
    statement: cst.CSTNode
    scope: cst.FunctionDef | cst.Module
    # for `model = build()`: the wrapper call inside `build` whose result it returns
    returned: WrapperSite | None = None
    # the wrapper class, qualified (`mmcv.parallel.MMDistributedDataParallel`), when known
    qualified: str | None = None
    # `call` is of a function of another project module that returns the wrapper it makes
    imported: bool = False

    def origin(self, ctx: FileContext) -> str:
        """` (returned by `build(...)`, which wraps only under an `if`)` for a returned wrapper."""
        if self.returned is None:
            if self.imported:
                return f" (returned by `{short(ctx, self.call, 40)}`, which wraps it in `{self.kind}`)"
            if self.spelled.endswith(".prepare"):
                return f" (from `{short(ctx, self.call, 40)}`, which wraps models in DDP on a multi-GPU run)"
            return ""
        inner = self.returned
        conditional = any(
            type(a) in (cst.If, cst.IfExp, cst.Try)
            for a in ctx.index.ancestors(inner.call)
            if scope_of(ctx, a) is inner.scope and a is not inner.scope
        )
        return f" (returned by `{short(ctx, self.call, 40)}`" + (
            ", which wraps only under a condition)" if conditional else ")"
        )


def wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    return ctx.shared("model_events.wrappers", _build_wrapper_sites)


def _build_wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    sites = []
    for call in ctx.index.of_type(cst.Call):
        qualified = ctx.qualified_name(call.func)
        if qualified in DATA_PARALLEL:
            kind = "DataParallel"
        elif qualified in DISTRIBUTED_DATA_PARALLEL:
            kind = "DistributedDataParallel"
        else:
            continue
        wrapped = device_ids = None
        apex = qualified in APEX_DISTRIBUTED_DATA_PARALLEL  # apex's second parameter is message_size
        for position, arg in enumerate(call.args):
            if arg.star:
                continue
            name = (
                arg.keyword.value
                if arg.keyword
                else ("module" if position == 0 else "device_ids" if position == 1 and not apex else "")
            )
            if name == "module":
                wrapped = arg.value
            elif name == "device_ids":
                device_ids = arg.value
        sites.append(
            WrapperSite(
                call=call,
                kind=kind,
                spelled=ctx.code_for(call.func),
                wrapped=wrapped,
                target=assigned_target(ctx, call),
                device_ids=device_ids,
                statement=statement_of(ctx, call),
                scope=scope_of(ctx, call),
                qualified=qualified,
            )
        )
    return sites


def assigned_target(ctx: FileContext, call: cst.Call) -> str | None:
    """`model` in `model = DP(m)` or `model = DP(m).cuda()`; None when not assigned."""
    node: cst.CSTNode = call
    for parent in ctx.index.ancestors(call):
        if type(parent) is cst.Attribute and parent.value is node and parent.attr.value in KEEPS_MODULE:
            node = parent  # `DP(m).cuda()` is still the wrapper; `DP(m).module` is not
            continue
        if type(parent) is cst.Call and parent.func is node:
            node = parent
            continue
        if type(parent) is cst.Assign and parent.value is node and len(parent.targets) == 1:
            return dotted_name(parent.targets[0].target)
        if type(parent) is cst.AnnAssign and parent.value is node:
            return dotted_name(parent.target)
        # put in a container and read back into a name (`model, _ = (DP(m), None)`)
        held = holders(ctx, node)
        return dotted_name(held[0]) if held else None
    return None


def wrapper_chain_moves(ctx: FileContext, site: WrapperSite) -> list[tuple[Device, cst.CSTNode]]:
    """Moves chained on the wrapper call itself: `DP(model).cuda()`."""
    resolver = resolver_for(ctx, site.call)
    moves: list[tuple[Device, cst.CSTNode]] = []
    node: cst.CSTNode = site.call
    for parent in ctx.index.ancestors(site.call):
        if type(parent) is cst.Attribute and parent.value is node and parent.attr.value in KEEPS_MODULE:
            node = parent
            continue
        if type(parent) is cst.Call and parent.func is node:
            moved = resolver.move(parent)
            if moved is not None:
                moves.append((moved[1], parent))
            node = parent
            continue
        break
    return moves


def wrapper_at(ctx: FileContext, var: str, node: cst.CSTNode) -> WrapperSite | None:
    """The wrapper site that `var` holds at `node`: wrapped earlier in the same scope (or bound
    to the result of a function of the file that returns a wrapper), not rebound since."""
    return _wrapper_at(ctx, var, node, wrapper_sites(ctx) + returned_wrapper_sites(ctx))


def _wrapper_at(ctx: FileContext, var: str, node: cst.CSTNode, sites: list[WrapperSite]) -> WrapperSite | None:
    root = scope_of(ctx, node)
    scope = scope_facts(ctx, root)
    position = scope.order.get(id(statement_of(ctx, node)))
    if position is None:
        return None
    best: tuple[int, WrapperSite] | None = None
    for site in sites:
        if site.target != var or site.scope is not root:
            continue
        start = scope.order.get(id(site.statement))
        if start is not None and start < position and (best is None or start > best[0]):
            best = (start, site)
    if best is None:
        return None
    resolver = resolver_for(ctx, node)
    inside = {id(n) for n in ctx.index.walk(best[1].statement)}
    for held in holders(ctx, best[1].call):  # `net = out.net`: takes the wrapper back out of its container
        inside |= {id(n) for n in ctx.index.walk(statement_of(ctx, held))}
    for between in scope.nodes[best[0] + 1 : position]:
        if id(between) in inside:
            continue
        if rebinds(resolver, between, var):
            return None
    return best[1]


def returned_wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    """`model = build(...)` where `build` is a function of this file (or `self.build(...)`, a
    method of the class) that returns a wrapper it made (`return nn.DataParallel(net)`, or
    `return model` after `model = DDP(model)`): a site with the builder's kind, at the call."""
    return ctx.shared("model_events.returned_wrappers", _build_returned_wrapper_sites)


def _build_returned_wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    # Followed through builders of builders (`build()` returning `wrap(net)`, or `model =
    # wrap(net); return model`), a level at a time: each level's sites are the calls of the
    # functions that return the previous level's wrappers.
    known = wrapper_sites(ctx)
    returning = _returning(ctx, known, known)
    sites: list[WrapperSite] = []
    seen: set[int] = set()
    for _ in range(_BUILDER_DEPTH):
        if not returning:
            break
        level: list[WrapperSite] = []
        handed_back: dict[int, tuple[WrapperSite, int | None]] = {}
        for call in ctx.index.of_type(cst.Call):
            function = builder_of(ctx, call)
            found = returning.get(id(function)) if function is not None else None
            if found is None or id(call) in seen:
                continue
            seen.add(id(call))
            inner, position = found
            target = assigned_target(ctx, call) if position is None else _unpacked_target(ctx, call, position)
            site = WrapperSite(
                call=call,
                kind=inner.kind,
                spelled=inner.spelled,
                wrapped=_handed_in(ctx, inner, call, function),  # type: ignore[arg-type]  # found above: a builder
                target=target,
                device_ids=None,
                statement=statement_of(ctx, call),
                scope=scope_of(ctx, call),
                returned=inner,
                qualified=inner.qualified,
            )
            if target is not None:
                level.append(site)
            parent = ctx.index.parent(call)
            outer = scope_of(ctx, call)
            if type(parent) is cst.Return and parent.value is call and type(outer) is cst.FunctionDef:
                handed_back[id(outer)] = (site, position)  # `return wrap(net)`: the caller's builder
        sites.extend(level)
        known = known + level
        returning = {**_returning(ctx, level, known), **handed_back}
    return sites


_BUILDER_DEPTH = 3


def _returning(
    ctx: FileContext, found: list[WrapperSite], known: list[WrapperSite]
) -> dict[int, tuple[WrapperSite, int | None]]:
    """function -> (the wrapper of `found` it returns, its position when it returns a tuple)."""
    returning: dict[int, tuple[WrapperSite, int | None]] = {}
    for site in found:
        function = site.scope
        if type(function) is not cst.FunctionDef:
            continue
        for node in scope_facts(ctx, function).nodes:
            if type(node) is not cst.Return or node.value is None:
                continue
            values: list[tuple[cst.BaseExpression, int | None]] = [(node.value, None)]
            if type(node.value) is cst.Tuple:  # `return ddp_model, local_rank`
                values = [(e.value, i) for i, e in enumerate(node.value.elements) if type(e) is cst.Element]
            for value, position in values:
                value = strip_self_returning(value)
                if value is site.call or (
                    site.target is not None
                    and dotted_name(value) == site.target
                    and _wrapper_at(ctx, site.target, node, known) is site
                ):
                    returning[id(function)] = (site, position)
    return returning


def _handed_in(
    ctx: FileContext, inner: WrapperSite, call: cst.Call, function: cst.FunctionDef
) -> cst.BaseExpression | None:
    """What `call` hands the builder for the model it wraps, when the builder wraps one of its own
    parameters as it came (`def wrap(net): return nn.DataParallel(net)`): the caller's argument
    bound to that parameter (`helpers.bound_arguments`, for functions, methods, static and class
    methods alike) is the wrapped model. None otherwise, or when the builder rebinds the
    parameter first."""
    wrapped = inner.wrapped
    if type(wrapped) is not cst.Name or any(arg.star for arg in call.args):
        return None
    params = (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
    if wrapped.value not in {p.name.value for p in params}:
        return None
    before = history(ctx, wrapped.value, inner.call)
    if before.bind is not None or before.moves:
        return None  # rebound or moved in the builder before it is wrapped
    bound = bound_arguments(ctx, function, call)
    return bound.get(wrapped.value) if bound is not None else None


def imported_wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    """`model = parallelize(model, gpus)` where `parallelize` is a function of another project
    module that returns a `DataParallel`/DDP wrapper it makes right there (the project index's
    place "wrapper:<kind>"), or a method of an instance of an imported plain class that does
    (`model = strategy.setup_model(model)`): a site of that kind at the call, the wrapped model
    its first argument."""
    places = [*ctx.project.functions.values()]
    places += [place for cls in ctx.project.plain_classes.values() for _, place in cls.method_places]
    if not any(place.startswith("wrapper:") for place in places):
        return []
    return ctx.shared("model_events.imported_wrappers", _build_imported_wrapper_sites)


def _imported_method_place(ctx: FileContext, call: cst.Call) -> str:
    """Where the method `obj.method(...)` of an instance of an imported plain class puts its result."""
    if type(call.func) is not cst.Attribute:
        return ""
    cls = imported_instance(ctx, call.func.value)
    return dict(cls.method_places).get(call.func.attr.value, "") if cls is not None else ""


def _build_imported_wrapper_sites(ctx: FileContext) -> list[WrapperSite]:
    sites = []
    functions = ctx.project.functions
    for call in ctx.index.of_type(cst.Call):
        spelled = dotted_name(call.func)
        place = functions.get(spelled or "", "") or _imported_method_place(ctx, call)
        if not place.startswith("wrapper:"):
            continue
        target = assigned_target(ctx, call)
        if target is None:
            continue
        first = call.args[0] if call.args else None
        sites.append(
            WrapperSite(
                call=call,
                kind=place[len("wrapper:") :],
                spelled=ctx.code_for(call.func),
                wrapped=first.value if first is not None and not first.star and first.keyword is None else None,
                target=target,
                device_ids=None,
                statement=statement_of(ctx, call),
                scope=scope_of(ctx, call),
                imported=True,
            )
        )
    return sites


def prepared_sites(ctx: FileContext) -> list[WrapperSite]:
    """`unet, opt, loader = accelerator.prepare(unet, opt, loader)`: Accelerate wraps each model it
    prepares in `DistributedDataParallel` on a multi-GPU run. A site for each model argument (a
    name the function calls `.parameters()`, `.train()`, `.eval()` or `.requires_grad_()` on)
    assigned back to a name, with `accelerator` an `accelerate.Accelerator(...)` of the file."""
    if "prepare" not in ctx.source or "Accelerator" not in ctx.source or is_test_path(ctx.path):
        return []  # unit tests of a prepared model run in one process, where nothing is wrapped
    lowered = ctx.source.lower()
    if any(engine in lowered for engine in _FORWARDING_ENGINES):
        return []
    return ctx.shared("model_events.prepared", _build_prepared_sites)


# DeepSpeed's engine, FSDP and Megatron-LM forward attribute reads to the model they wrap: a file
# that may run under one of them is not judged.
_FORWARDING_ENGINES = ("deepspeed", "fsdp", "megatron", "fully_shard")
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters", "requires_grad_"})
_MODE_METHODS = frozenset({"train", "eval"})  # schedule-free optimizers have them too


def _build_prepared_sites(ctx: FileContext) -> list[WrapperSite]:
    accelerators = {
        key
        for scope in _all_scopes(ctx)
        for key, values in scope.assigned.items()
        if values
        and all(type(v) is cst.Call and ctx.qualified_name(v.func) == "accelerate.Accelerator" for v in values)
    }
    sites = []
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        if not (
            type(func) is cst.Attribute and func.attr.value == "prepare" and dotted_name(func.value) in accelerators
        ):
            continue
        scope = scope_of(ctx, call)
        models = _used_as_models(ctx, scope)
        for position, arg in enumerate(call.args):
            if arg.star or arg.keyword is not None or dotted_name(arg.value) not in models:
                continue
            target = assigned_target(ctx, call) if len(call.args) == 1 else _unpacked_target(ctx, call, position)
            if target is not None:
                sites.append(
                    WrapperSite(
                        call=call,
                        kind="DistributedDataParallel",
                        spelled=ctx.code_for(func),
                        wrapped=arg.value,
                        target=target,
                        device_ids=None,
                        statement=statement_of(ctx, call),
                        scope=scope,
                    )
                )
    return sites


def _all_scopes(ctx: FileContext) -> list[Scope]:
    return [scope_facts(ctx, ctx.module)] + [scope_facts(ctx, f) for f in ctx.index.of_type(cst.FunctionDef)]


def _used_as_models(ctx: FileContext, scope: cst.FunctionDef | cst.Module) -> set[str]:
    found = set()
    moded = set()
    stepped = set()  # what steps or has parameter groups: an optimizer or a scheduler, whatever its name
    for node in scope_facts(ctx, scope).nodes:
        if type(node) is cst.Attribute and node.attr.value in _OPTIMIZER_MEMBERS:
            name = dotted_name(node.value)
            if name is not None:
                stepped.add(name)
        if type(node) is cst.Call and type(node.func) is cst.Attribute:
            method = node.func.attr.value
            name = dotted_name(node.func.value)
            if name is None:
                continue
            last = name.rsplit(".", 1)[-1].lower()
            if method in _PARAMETER_METHODS:
                found.add(name)
            elif method in _MODE_METHODS and "opt" not in last and "sched" not in last:
                moded.add(name)
    return found | (moded - stepped)


_OPTIMIZER_MEMBERS = frozenset({"step", "param_groups", "add_param_group"})


def _unpacked_target(ctx: FileContext, call: cst.Call, position: int) -> str | None:
    """`model` in `model, rank = setup(...)` for position 0; None when not unpacked there."""
    parent = ctx.index.parent(call)
    if type(parent) is not cst.Assign or parent.value is not call or len(parent.targets) != 1:
        return None
    target = parent.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    elements = target.elements
    if position >= len(elements) or any(type(e) is cst.StarredElement for e in elements):
        return None
    element = elements[position]
    return dotted_name(element.value) if type(element) is cst.Element else None


def _built_by(ctx: FileContext, call: cst.Call) -> cst.Call | None:
    """The call a builder of this file returns unmoved (`model = X.from_pretrained(...); return
    model`) when `call` runs that builder and it has one `return`; else None."""
    function = builder_of(ctx, call)
    if function is None:
        return None
    returned = only_return(ctx, function)
    if returned is None:
        return None
    resolver = resolver_for(ctx, returned)
    value, moved = chain_base(resolver, returned.value)  # type: ignore[arg-type]  # a `return <value>`
    var = dotted_name(value)
    if moved is not None:
        return None
    if var is not None and "." not in var:
        facts = history(ctx, var, returned)
        if facts.moves or facts.bind is None:
            return None
        value, moved = chain_base(resolver, facts.bind)
    return value if type(value) is cst.Call and moved is None else None


def wrapped_split(ctx: FileContext, site: WrapperSite) -> tuple[str, tuple[Placement, Placement]] | None:
    """(model text, two submodules on different devices) for the model a wrapper wraps."""
    if site.wrapped is None:
        return None
    resolver = resolver_for(ctx, site.call)
    base, _ = chain_base(resolver, site.wrapped)
    classes = class_placements(ctx)
    if type(base) is cst.Call:
        callee = dotted_name(base.func)
        if callee in classes:
            pair = classes[callee].named_split()
            return (short(ctx, base), pair) if pair else None
        listed = imported_placements(ctx, base)
        pair = split_of(listed) or numbered_split(listed)
        return (short(ctx, base), pair) if pair else None
    var = dotted_name(base)
    if var is None:
        return None
    # Only a class placing submodules (in `__init__`, or in a method the code calls on the
    # instance), or code moving `var.<sub>`, can split the model.
    if (
        not classes
        and not ctx.project.classes
        and not re.search(re.escape(var) + r"\.\w+\b[^\n]*\.(to|cuda)\(", ctx.source)
        and not re.search(r"self\.\w+\.(to|cuda)\(", ctx.source)
    ):
        return None
    facts = history(ctx, var, site.call)
    placements: dict[str, Placement] = {}
    if facts.origin in classes:
        placements.update(classes[facts.origin].named)
        placements.update(classes[facts.origin].placements)
    elif facts.bind is not None:
        bound = chain_base(resolver, facts.bind)[0]
        placements.update((p.attr, p) for p in imported_placements(ctx, bound))
    placements.update(facts.sub_moves)
    pair = split_of(list(placements.values())) or numbered_split(list(placements.values()))
    return (var, pair) if pair else None


_SPREADING_MAPS = frozenset({"auto", "balanced", "balanced_low_0", "sequential"})


def spread_by_loader(ctx: FileContext, site: WrapperSite) -> str | None:
    """How the wrapped model was spread over several GPUs by its loader, else None.

    `X.from_pretrained(..., device_map="auto")` (or "balanced", "sequential", or a dict naming
    several devices) and `model.parallelize()` put different layers on different GPUs.
    """
    if site.wrapped is None:
        return None
    resolver = resolver_for(ctx, site.call)
    base, moved = chain_base(resolver, site.wrapped)
    if moved is not None:
        return None
    var = dotted_name(base)
    bind: cst.BaseExpression | None = base if type(base) is cst.Call else None
    if var is not None:
        facts = history(ctx, var, site.call)
        if facts.moves:
            return None  # moved whole afterwards
        bind = facts.bind
        # `parallelize()` is trusted only on a Hugging Face model (`X.from_pretrained(...)`).
        loader = chain_base(resolver, bind)[0] if bind is not None else None
        loaded = type(loader) is cst.Call and (dotted_name(loader.func) or "").endswith("from_pretrained")
        scope = scope_facts(ctx, scope_of(ctx, site.call))
        limit = scope.order.get(id(site.statement), len(scope.nodes))
        for node in scope.nodes[:limit]:
            if (
                loaded
                and type(node) is cst.Call
                and type(node.func) is cst.Attribute
                and node.func.attr.value == "parallelize"
                and dotted_name(node.func.value) == var
            ):
                return f"`{short(ctx, node)}` spreads over several GPUs"
        if type(bind) is cst.Name:
            return _handed_spread(ctx, bind)
    return _loader_spread(ctx, resolver, bind)


def _handed_spread(ctx: FileContext, name: cst.Name) -> str | None:
    """`self.model = model` where `model` is a parameter the function never rebinds: how the
    model every call of the function in the file hands in (`Trainer(model, ...)` after
    `model = X.from_pretrained(..., device_map="auto")`) was spread by its loader."""
    passed = passed_for(ctx, name)
    if not passed:
        return None
    found: list[str] = []
    for argument in passed:
        resolver = resolver_for(ctx, argument)
        base, moved = chain_base(resolver, argument)
        var = dotted_name(base)
        if moved is not None or var is None:
            return None
        facts = history(ctx, var, argument)
        if facts.moves or facts.bind is None:
            return None
        spread = _loader_spread(ctx, resolver, facts.bind)
        if spread is None:
            return None
        found.append(spread)
    return f"{found[0]} (the model handed in as `{name.value}`)"


def _loader_spread(ctx: FileContext, resolver: Resolver, bind: cst.BaseExpression | None) -> str | None:
    """How the loader call `bind` spreads the model it loads, else None."""
    if bind is not None:
        bind = chain_base(resolver, bind)[0]
    if type(bind) is not cst.Call:
        return None
    # the loader's own call, and the call the file's helper makes with it (`load_model(path,
    # device_map="auto")` hands the map on as a parameter)
    calls = [bind] + [inner for inner in (_built_by(ctx, bind),) if inner is not None]
    for arg in (arg for call in calls for arg in call.args):
        if arg.keyword is None or arg.keyword.value != "device_map":
            continue
        value = arg.value
        text = string_value(value)
        if text in _SPREADING_MAPS:
            return f'`device_map="{text}"` spreads over the visible GPUs'
        if type(value) is cst.Dict:
            targets = {ctx.code_for(e.value).strip() for e in value.elements if type(e) is cst.DictElement}
            if len(targets) > 1:
                return f"`device_map={short(ctx, value, 40)}` spreads over several devices"
    return None


def wrapped_class(ctx: FileContext, site: WrapperSite) -> str | None:
    """The module class of the file whose instance `site` wraps (`DataParallel(Net())`,
    `net = Net(); DataParallel(net)`), else None."""
    if site.wrapped is None:
        return None
    base, _ = chain_base(resolver_for(ctx, site.call), site.wrapped)
    classes = module_classes(ctx)
    if type(base) is cst.Call:
        callee = dotted_name(base.func)
        return callee if callee in classes else None
    var = dotted_name(base)
    if var is None:
        return None
    facts = history(ctx, var, site.call)
    bound = chain_base(resolver_for(ctx, site.call), facts.bind)[0] if facts.bind is not None else None
    if facts.origin is None and type(bound) is cst.Name:
        return _handed_class(ctx, bound, classes)
    return facts.origin if facts.origin in classes else None


def _handed_class(ctx: FileContext, name: cst.Name, classes: Collection[str]) -> str | None:
    """`self.model = model.to(device)` where `model` is a parameter the function never rebinds:
    the module class of the file that every call of the function in the file hands in
    (`Trainer(GPT(config), data)`, or a name bound to `GPT(config)` there)."""
    passed = passed_for(ctx, name)
    found: set[str] = set()
    for argument in passed or ():
        base = chain_base(resolver_for(ctx, argument), argument)[0]
        if type(base) is cst.Call:
            found.add(dotted_name(base.func) or "")
            continue
        var = dotted_name(base)
        found.add((history(ctx, var, argument).origin or "") if var is not None else "")
    if len(found) != 1:
        return None
    only = found.pop()
    return only if only in classes else None


def submodule_classes(ctx: FileContext, name: str, depth: int = 4) -> list[str]:
    """The module classes of the file that `name` holds as submodules (`self.attn =
    Attention(dim)`, or inside a module container it builds there:
    `nn.ModuleList([Block(c) for _ in range(n)])`, `nn.ModuleDict(dict(h=nn.ModuleList(...)))`),
    and theirs, a few levels down."""
    classes = module_classes(ctx)
    facts = class_facts(ctx)
    found: list[str] = []
    frontier = [name]
    for _ in range(depth):
        following: list[str] = []
        for owner in frontier:
            held = facts.get(owner)
            parts = [*held.submodules.values(), *_contained_classes(ctx, held, classes)] if held is not None else []
            for part in parts:
                if part in classes and part != name and part not in found:
                    found.append(part)
                    following.append(part)
        frontier = following
    return found


_MODULE_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential"})


def _contained_classes(ctx: FileContext, held: ClassFacts, classes: Collection[str]) -> list[str]:
    """The module classes of the file built inside the value of an attribute that holds a
    module container (`self.blocks = nn.ModuleList([Block(c) for _ in range(n)])`)."""
    out: list[str] = []
    for attr, value, _ in held.assignments:
        if held.submodules.get(attr) not in _MODULE_CONTAINERS:
            continue
        for node in ctx.index.walk(value):
            callee = dotted_name(node.func) if type(node) is cst.Call else None
            if callee is not None and callee in classes and callee not in out:
                out.append(callee)
    return out


def spans_several_gpus(site: WrapperSite) -> bool:
    """The wrapper may run on several GPUs: no `device_ids` (every visible GPU) or a list of
    more than one."""
    ids = site.device_ids
    if ids is None:
        return True
    return not (isinstance(ids, (cst.List, cst.Tuple)) and len(ids.elements) < 2)


@dataclass(frozen=True)
class Replication:
    """Where `nn.DataParallel` replicates a module class of the file on every step."""

    spelled: str  # the wrapper as written there (`nn.DataParallel`)
    where: str  # "" for a call in this file; " in `train.py` (line 40)" for another module's
    several_gpus: bool  # no `device_ids`, or more than one
    whole: str | None = None  # the wrapped class, when this one is a submodule of it


def data_parallel_classes(ctx: FileContext) -> dict[str, Replication]:
    """The module classes of the file whose instances `nn.DataParallel` replicates on every
    step: each class the file wraps, each class another module of the project wraps (the
    project index's `replicated`), and the module classes of the file such a class holds as
    submodules, at any depth (`whole` names the wrapped class)."""
    return ctx.shared("model_events.data_parallel_classes", _data_parallel_classes)


def _data_parallel_classes(ctx: FileContext) -> dict[str, Replication]:
    wrapped: dict[str, Replication] = {}
    # (a site returned by a helper of the file, `net = parallel(net)`, replicates as well)
    for site in wrapper_sites(ctx) + returned_wrapper_sites(ctx):
        if site.kind == "DataParallel":
            name = wrapped_class(ctx, site)
            if name is not None:
                wrapped.setdefault(name, Replication(site.spelled, "", spans_several_gpus(site)))
    for name, (path, line, several) in ctx.project.replicated.items():
        wrapped.setdefault(name, Replication("nn.DataParallel", f" in `{path}` (line {line})", several))
    replicated: dict[str, Replication] = {}
    for name, replication in wrapped.items():
        replicated.setdefault(name, replication)
        for part in submodule_classes(ctx, name):
            replicated.setdefault(part, replace(replication, whole=name))
    return replicated
