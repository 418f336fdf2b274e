from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.branches import never_together
from devicelint.analysis.class_tables import table_choices
from devicelint.analysis.execution_order import calls_by_scope, init_of
from devicelint.analysis.imported_helpers import (
    argument_for,
    argument_named_in_place,
    imported_call,
    imported_construction,
)
from devicelint.analysis.launchers import fabric_placed_module, prepared_modules
from devicelint.analysis.local_bindings import bindings
from devicelint.analysis.model_events.wrappers import WrapperSite, wrapper_sites
from devicelint.analysis.names import dotted_name, is_staticmethod, literal_value
from devicelint.analysis.parameter_shadows import copied_from, parameter_shadow_classes
from devicelint.analysis.placement_facts import MODEL_WORDS, move_call, moves_to_accelerator
from devicelint.analysis.training.helpers import (
    bound_arguments,
    callee,
    calls_through_instances,
    method_of,
    optimizer_classes,
    parameter_names,
    returned_call,
    returned_calls,
)
from devicelint.analysis.training.reads import read_names
from devicelint.analysis.training.syntax import short
from devicelint.analysis.training.values import passed_arguments
from devicelint.analysis.uncast_optimizer_state import uncast_state_classes
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


def _cpu_load_of(ctx: FileContext, value: cst.BaseExpression, use: cst.CSTNode) -> cst.Call | None:
    """The `torch.load(..., map_location="cpu")` that `value` (`ckpt["optim"]`, `ckpt`) reads, if any."""
    while type(value) is cst.Subscript:
        value = value.value
    if type(value) is cst.Name:
        # an empty placeholder (`states = {}` before a conditional load) holds no entry to read
        bound = [b for b in bindings(ctx, value.value, use) or [] if not _empty_mapping(b)]
        if len(bound) != 1:
            return None
        value = bound[0]
        while type(value) is cst.Subscript:
            value = value.value
    if type(value) is not cst.Call or ctx.qualified_name(value.func) != "torch.load":
        return None
    place = next((a.value for a in value.args if a.keyword is not None and a.keyword.value == "map_location"), None)
    if place is None and len(value.args) > 1 and value.args[1].keyword is None:
        place = value.args[1].value
    if type(place) is cst.Call and ctx.qualified_name(place.func) == "torch.device" and place.args:
        place = place.args[0].value
    if type(place) is cst.Lambda and place.params.params and type(place.body) is cst.Name:
        return value if place.body.value == place.params.params[0].name.value else None  # `lambda s, loc: s`
    return value if type(place) is cst.SimpleString and literal_value(place) == "cpu" else None


def _empty_mapping(value: cst.BaseExpression) -> bool:
    """`{}` or `dict()`."""
    if type(value) is cst.Dict:
        return not value.elements
    return type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "dict" and not value.args


def _receiver_values(ctx: FileContext, receiver: cst.BaseExpression, use: cst.CSTNode) -> list[cst.BaseExpression]:
    """What `receiver` (a name, or `self.<attr>` set by the methods of the enclosing class) is
    bound to where `use` reads it."""
    if type(receiver) is cst.Name:
        return list(bindings(ctx, receiver.value, use) or [])
    name = dotted_name(receiver) or ""
    cls = ctx.index.enclosing_class(use)
    if cls is None or not name.startswith("self.") or name.count(".") != 1:
        return []
    return [
        node.value
        for node in ctx.index.walk(cls)
        if type(node) is cst.Assign and any(dotted_name(t.target) == name for t in node.targets)
    ]


def _optimizer_class(ctx: FileContext, call: cst.Call) -> str | None:
    """What `call` builds, when it builds an optimizer: `torch.optim.Adagrad`, a class of the file
    that subclasses one (`MADGRAD`), or what a factory parameter holds (`create(params)` where
    every call of the function passes `functools.partial(torch.optim.Adagrad, lr=0.1)`)."""
    name = _optimizer_type(ctx, call.func) or _table_optimizer(ctx, call.func)
    if name is not None or type(call.func) is not cst.Name:
        return name
    func = ctx.index.enclosing_function(call)
    if func is None or not any(
        p.name.value == call.func.value for p in (*func.params.params, *func.params.kwonly_params)
    ):
        return None
    passed = {
        _optimizer_type(ctx, _partial_of(ctx, v)) if v is not None else None
        for v in passed_arguments(ctx, func, call.func.value)
    }
    return passed.pop() if len(passed) == 1 else None


def _table_optimizer(ctx: FileContext, callee: cst.BaseExpression) -> str | None:
    """The optimizer class a table of the file hands out (`OPTIMIZERS[cfg.name]`), when every
    entry is one: the entry that creates its state at construction (Adagrad), since that is the
    choice that fails when the model moves later, else the first."""
    choices = table_choices(ctx, callee)
    kinds = [_optimizer_type(ctx, _partial_of(ctx, c)) for c in choices or ()]
    if not kinds or None in kinds:
        return None
    return next((k for k in kinds if k and _state_at_construction(ctx, k) is not None), kinds[0])


def _optimizer_type(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    name = ctx.qualified_name(node) or ""
    if name.startswith("torch.optim.") and name.rsplit(".", 1)[-1][:1].isupper():
        return name
    if type(node) is cst.Name and any(cls.name.value == node.value for cls in optimizer_classes(ctx)):
        return node.value
    if type(node) is cst.Name and node.value in parameter_shadow_classes(ctx):
        return node.value
    return None


def _partial_of(ctx: FileContext, value: cst.BaseExpression) -> cst.BaseExpression:
    """`torch.optim.Adagrad` in `functools.partial(torch.optim.Adagrad, lr=0.1)`."""
    if type(value) is cst.Call and ctx.qualified_name(value.func) == "functools.partial" and value.args:
        return value.args[0].value
    return value


def _state_at_construction(ctx: FileContext, optimizer: str) -> str | None:
    """The state an optimizer creates in its constructor, described for the message: Adagrad's
    `sum`, or the tensors a class of the file makes from its parameters in `__init__`
    (`torch.zeros_like(p)`, `p.clone()`); None for an optimizer that creates its state lazily."""
    short_name = optimizer.rsplit(".", 1)[-1]
    if optimizer.startswith("torch.optim."):
        state = STATE_AT_CONSTRUCTION.get(short_name)
        return f"{short_name}'s {state}" if state is not None else None
    shadow = parameter_shadow_classes(ctx).get(optimizer)
    if shadow is not None:
        return f"{optimizer}'s per-parameter `{short(ctx, shadow)}`"
    cls = next((c for c in optimizer_classes(ctx) if c.name.value == optimizer), None)
    init = method_of(ctx, cls, "__init__") if cls is not None else None
    if init is None:
        return None
    params = parameter_names(ctx, init)
    for node in ctx.index.walk(init.body):
        if type(node) is cst.Call and params & copied_from(ctx, node):
            return f"{optimizer}'s per-parameter `{short(ctx, node)}`"
    return None


def _params_argument(call: cst.Call) -> cst.BaseExpression | None:
    """What an optimizer is built from: its first positional argument or `params=`."""
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None or arg.keyword.value == "params":
            return arg.value
    return None


def _built(ctx: FileContext, call: cst.Call) -> tuple[str, cst.BaseExpression | None] | None:
    """(the optimizer class, what it is built from, in the caller's words) when `call` builds an
    optimizer: itself (`torch.optim.Adam(params)`), or through a function or method of the file
    whose one `return` builds one from a parameter of its own (`make_opt(params)`,
    `self._optimizer(params)`, `Prompt._adam(params)`): what the call passes for that parameter
    is what the optimizer holds. A method called on `self` may build it from `self.<attr>`."""
    own = _optimizer_class(ctx, call)
    if own is not None:
        return own, _params_argument(call)
    inner = returned_call(ctx, call)
    kind = _optimizer_class(ctx, inner) if inner is not None else None
    if inner is not None and kind is not None:
        return kind, _params_argument(inner)
    # a factory choosing by name (`make_optimizer(cfg.optimizer, model.parameters(), lr)`): every
    # branch builds an optimizer from the same parameters; the one that creates its state at
    # construction (Adagrad) is the branch that fails when the model moves later
    own = _model_method_optimizer(ctx, call)
    if own is not None:
        return own
    branches = returned_calls(ctx, call) or []
    kinds = [_optimizer_class(ctx, b) for b in branches]
    params = {ctx.code_for(p) if (p := _params_argument(b)) is not None else None for b in branches}
    if not branches or None in kinds or len(params) != 1 or None in params:
        return None
    chosen = next((i for i, k in enumerate(kinds) if _state_at_construction(ctx, k or "") is not None), 0)
    return kinds[chosen] or "", _params_argument(branches[chosen])


def _model_method_optimizer(ctx: FileContext, call: cst.Call) -> tuple[str, cst.BaseExpression] | None:
    """`model.configure_optimizers()` (`self.net.make_optimizer(lr)`) where the one method of that
    name among the file's classes builds one optimizer from its own `self.parameters()` and
    returns it, alone or in a tuple or list (`return [optimizer], [scheduler]`): the optimizer
    class, and `model.parameters()` as what it holds, in the caller's words."""
    func = call.func
    if type(func) is not cst.Attribute or (type(func.value) is cst.Name and func.value.value == "self"):
        return None
    methods = [
        d
        for cls in ctx.module.body
        if type(cls) is cst.ClassDef and type(cls.body) is cst.IndentedBlock
        for d in cls.body.body
        if type(d) is cst.FunctionDef and d.name.value == func.attr.value
    ]
    if len(methods) != 1:
        return None
    built: list[tuple[str, str | None]] = []
    for node in ctx.index.walk(methods[0].body):
        if type(node) is not cst.Call:
            continue
        kind = _optimizer_class(ctx, node)
        params = _params_argument(node) if kind is not None else None
        if kind is None or not (
            type(params) is cst.Call
            and type(params.func) is cst.Attribute
            and params.func.attr.value in ("parameters", "named_parameters")
            and type(params.func.value) is cst.Name
            and params.func.value.value == "self"
        ):
            continue
        parent = ctx.index.parent(node)
        target = parent.targets[0].target if type(parent) is cst.Assign and len(parent.targets) == 1 else None
        built.append((kind, target.value if type(target) is cst.Name else None))
    if len(built) != 1:
        return None
    kind, name = built[0]
    returned = [
        node.value for node in ctx.index.walk(methods[0].body) if type(node) is cst.Return and node.value is not None
    ]
    if not returned or not all(name is not None and name in read_names(ctx, value) for value in returned):
        return None
    held = cst.Call(func=cst.Attribute(value=func.value, attr=cst.Name("parameters")))
    return kind, held


def _imported_optimizer(ctx: FileContext, call: cst.Call) -> tuple[str, str] | None:
    """(optimizer class, model) for a call of another project module's function that builds an
    optimizer over a model it is handed (`build_optimizer(model, cfg)`: `ProjectView.functions`'
    "optimizer:torch.optim.Adagrad@model#0")."""
    place = ctx.project.functions.get(dotted_name(call.func) or "", "")
    if not place.startswith("optimizer:") or any(a.star for a in call.args):
        return None
    kind, _, owner = place[len("optimizer:") :].partition("@")
    passed = argument_named_in_place(call, owner)
    model = dotted_name(passed) if passed is not None else None
    return (kind, model) if model is not None else None


def _optimizer_of(ctx: FileContext, call: cst.Call) -> str | None:
    """The model `m` (a name or `self.m`) when `call` is `torch.optim.X(m.parameters(), ...)`."""
    imported = _imported_optimizer(ctx, call) if ctx.project.functions else None
    if imported is not None:
        return imported[1]
    built = _built(ctx, call)
    if built is None:
        return None
    first = built[1]
    if (
        type(first) is cst.Call
        and type(first.func) is cst.Attribute
        and first.func.attr.value in ("parameters", "named_parameters")
    ):
        return dotted_name(first.func.value)
    return None


def _wrapped_optimizer_model(
    ctx: FileContext, call: cst.Call, optimizers: dict[tuple[int, str], str], scope: int
) -> str | None:
    """The model of an optimizer built around another one (`Lookahead(base_optimizer)`, a class
    of the file that takes the inner optimizer's `param_groups`): the inner optimizer's model,
    when this scope built it from `model.parameters()`."""
    built = _built(ctx, call)
    if built is None or built[1] is None or _state_at_construction(ctx, built[0]) is None:
        return None  # a scheduler or a lazy wrapper (`StepLR(optimizer)`) holds no state of its own yet
    inner = dotted_name(built[1])
    return optimizers.get((scope, inner)) if inner is not None else None


def _tensor_names(ctx: FileContext, call: cst.Call) -> tuple[str, ...]:
    """The names of tensors an optimizer holds: `params` in `SGD(params)`, `self.params` in
    `SGD(self.params)`, `w, b` in `SGD([w, b])` and in `SGD([{"params": [w]}, {"params": b}])`."""
    built = _built(ctx, call)
    first = built[1] if built is not None else None
    return tuple(_names_in(first)) if first is not None else ()


def _names_in(node: cst.BaseExpression) -> list[str]:
    if type(node) in (cst.Name, cst.Attribute):
        name = dotted_name(node)
        return [name] if name is not None else []
    if isinstance(node, (cst.List, cst.Tuple)):
        return [n for e in node.elements if type(e) is not cst.StarredElement for n in _names_in(e.value)]
    if type(node) is cst.Dict:
        return [
            n
            for e in node.elements
            if type(e) is cst.DictElement and type(e.key) is cst.SimpleString and literal_value(e.key) == "params"
            for n in _names_in(e.value)
        ]
    return []


def _builds_or_loads_an_optimizer(ctx: FileContext) -> bool:
    if any(cls.state_loads for cls in ctx.project.plain_classes.values()):
        return True  # an imported trainer class that loads its optimizer's state
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "load_state_dict":
            if "optim" in (dotted_name(func.value) or "").lower():
                return True
        elif _optimizer_class(ctx, call) is not None:
            return True
        elif ctx.project.functions and _imported_optimizer(ctx, call) is not None:
            return True  # `build_optimizer(model)` of another module
    return False


def _used_as_optimizer(ctx: FileContext, root: cst.CSTNode, name: str) -> bool:
    """`name.zero_grad()` or `name.param_groups` in the same function: an optimizer, whatever it
    is called (a scheduler has `step()` but neither)."""
    memo: dict[tuple[int, str], bool] = ctx.shared("optimizer_state.used_as_optimizer", lambda c: {})
    key = (id(root), name)
    if key not in memo:
        memo[key] = any(
            node.attr.value in ("zero_grad", "param_groups") and dotted_name(node.value) == name
            for node in ctx.index.within(root, cst.Attribute)
        )
    return memo[key]


def _moved_model(ctx: FileContext, call: cst.Call) -> str | None:
    """`m` when `call` moves the name `m` (or `self.m`) towards an accelerator (`m.to(device)`,
    `m.cuda()`), also through the `DataParallel`/DDP wrapper made around it there
    (`DataParallel(m).cuda()` moves the parameters of `m`)."""
    if not (moves_to_accelerator(call) and move_call(call) in ("to", "cuda")):
        return None
    base = call.func.value  # type: ignore[attr-defined]  # move_call() matched `x.<method>(...)`
    if type(base) is cst.Call:
        site = _wrappers_by_call(ctx).get(id(base))
        return dotted_name(site.wrapped) if site is not None and site.wrapped is not None else None
    return dotted_name(base)


def _wrappers_by_call(ctx: FileContext) -> dict[int, WrapperSite]:
    return ctx.shared("optimizer_state.wrappers", lambda c: {id(site.call): site for site in wrapper_sites(c)})


def _built_after_its_model_moved(ctx: FileContext, root: cst.CSTNode, name: str) -> bool:
    """`net, opt = build(cfg)` (or `opt = make_optimizer(...)`), the one binding of `name` in
    `root`, where the file's `build` moves each model to the device before it makes an optimizer
    from its parameters: the state loaded into it later is cast to the device, as for an
    optimizer built here after the move."""
    sources = [
        assign.value
        for assign in ctx.index.of_type(cst.Assign)
        if (ctx.index.enclosing_function(assign) or ctx.module) is root
        and any(_binds(target.target, name) for target in assign.targets)
    ]
    if len(sources) != 1 or type(sources[0]) is not cst.Call:
        return False
    helper = callee(ctx, sources[0])
    if helper is None:
        return False
    moved: set[str] = set()
    built = False
    for call in calls_by_scope(ctx).get(id(helper), []):
        model = _optimizer_of(ctx, call)
        if model is not None:
            if not any(_same_model(model, m) for m in moved):
                return False
            built = True
            continue
        parent = ctx.index.parent(call)
        if type(parent) is cst.Assign and moves_to_accelerator(call):  # `net = Net().cuda()`
            moved.update(n for target in parent.targets if (n := dotted_name(target.target)) is not None)
        direct = _moved_model(ctx, call)
        if direct is not None:
            moved.add(direct)
    return built


def _binds(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds(element.value, name) for element in target.elements)
    return dotted_name(target) == name


def _moved_by_helper(ctx: FileContext, call: cst.Call, depth: int = 0) -> list[str]:
    """The arguments a call of the file's own function moves to the device: `model` in
    `set_devices(model, loss, device)` whose body runs `model.to(device)`, or hands it on to a
    helper of its own that does (`do_train(model, ...)` building a trainer that moves it)."""
    func = callee(ctx, call)
    if func is None:
        return []
    return _handed_at(ctx, call, func, _moved_parameters(ctx, func, depth))


def _moved_by_imported_class(ctx: FileContext, call: cst.Call) -> list[str]:
    """The arguments that building an imported plain class moves to the device: `model` in
    `Trainer(model, optimizer, cuda_device=0)` whose `__init__` moves what it keeps of `model`
    (`ClassSummary.moved_params`)."""
    cls = ctx.project.plain_classes.get(dotted_name(call.func) or "")
    if cls is None or not cls.moved_params:
        return []
    found = []
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        param = (
            arg.keyword.value
            if arg.keyword is not None
            else (cls.init_params[position] if position < cls.init_positional else None)
        )
        name = dotted_name(arg.value)
        if param in cls.moved_params and name is not None:
            found.append(name)
    return found


def _state_moved_by_helper(ctx: FileContext, call: cst.Call, depth: int = 0) -> list[str]:
    """The arguments whose optimizer state a call of the file's own function moves to the
    device (a loop over `optimizer.state.values()` that moves each tensor), itself or through
    its helpers."""
    func = callee(ctx, call)
    if func is None:
        return []
    return _handed_at(ctx, call, func, _state_moving_names(ctx, func, depth))


def _handed_at(ctx: FileContext, call: cst.Call, func: cst.FunctionDef, moved_params: set[str]) -> list[str]:
    """The caller's names for the arguments `call` hands to `func` at the parameters `moved_params`."""
    params = [p.name.value for p in (*func.params.posonly_params, *func.params.params)]
    if (
        params
        and ctx.index.enclosing_class(func) is not None
        and type(call.func) is cst.Attribute
        and not is_staticmethod(func)
    ):
        params = params[1:]  # `self`
    found = []
    for index, arg in enumerate(call.args):
        if arg.star:
            break
        param = arg.keyword.value if arg.keyword is not None else params[index] if index < len(params) else None
        name = dotted_name(arg.value)
        if param is None or name is None:
            continue
        # `model` moved as itself, or `owner.model` of the instance handed as `owner` (`self`)
        found += [name + moved[len(param) :] for moved in sorted(moved_params) if moved.split(".")[0] == param]
    return found


def _states_loaded_by_helper(ctx: FileContext, call: cst.Call) -> list[str]:
    """The arguments whose state a helper loads: `optimizer` in `load_checkpoint(path, model,
    optimizer)` whose body runs `optimizer.load_state_dict(...)`, in this file or imported."""
    imported = imported_call(ctx, call)
    if imported is not None:
        helper, bound = imported
        loaded = set(helper.uses.loads_state)
    else:
        func = callee(ctx, call)
        found = bound_arguments(ctx, func, call) if func is not None else None
        if func is None or found is None:
            return []
        bound = found
        loaded = {
            target.value
            for node in ctx.index.walk(func.body)
            if type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value == "load_state_dict"
            and type(target := node.func.value) is cst.Name
        }
    return [name for param in sorted(loaded) if param in bound and (name := dotted_name(bound[param])) is not None]


def _owner_of_imported_load(ctx: FileContext, call: cst.Call) -> str | None:
    """The model whose optimizer `trainer.resume(path)` loads state for, where the imported
    class's `__init__` built that optimizer over the model handed to `Trainer(model)`."""
    if type(call.func) is not cst.Attribute:
        return None
    built = imported_construction(ctx, call.func.value)
    if built is None:
        return None
    cls, construction = built
    method = call.func.attr.value
    for loader, param, _ in cls.state_loads:
        arg = argument_for(construction, cls.init_params[: cls.init_positional], param) if loader == method else None
        if arg is not None and (name := dotted_name(arg)) is not None:
            return name
    return None


def _moved_parameters(ctx: FileContext, func: cst.FunctionDef, depth: int) -> set[str]:
    """The names `func` moves to the device, itself or (two helpers deep) through the file's
    helpers it hands them to."""
    cache: dict[tuple[int, int], set[str]] = ctx.shared("optimizer_state.moved_parameters", lambda c: {})
    key = (id(func), depth)
    if key not in cache:
        cache[key] = set()  # a helper that calls itself moves nothing more through that call
        moved: set[str] = set()
        for node in ctx.index.walk(func.body):
            if type(node) is not cst.Call:
                continue
            direct = _moved_model(ctx, node)
            if direct is not None:
                moved.add(direct)
            elif fabric := _placed_by_fabric(ctx, node):
                moved.update(fabric)  # `return fabric.setup(model, optimizer)` in a helper
            elif depth < 2:
                moved.update(_moved_by_helper(ctx, node, depth + 1))
        cache[key] = moved
    return cache[key]


def _state_loop_owner(ctx: FileContext, call: cst.Call) -> str | None:
    """`opt` for `opt.state.values()` (or `.items()`) iterated by a `for` whose body moves
    tensors to the device: the optimizer's loaded state is moved after all."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value not in ("values", "items"):
        return None
    holder = func.value
    if type(holder) is not cst.Attribute or holder.attr.value != "state":
        return None
    loop = ctx.index.parent(call)
    if type(loop) is not cst.For or loop.iter is not call:
        return None
    if not any(type(n) is cst.Call and moves_to_accelerator(n) for n in ctx.index.walk(loop.body)):
        return None
    return dotted_name(holder.value)


def _state_moving_names(ctx: FileContext, func: cst.FunctionDef, depth: int) -> set[str]:
    """The optimizers whose state `func` moves to the device, itself or (two helpers deep)
    through the file's helpers it hands them to."""
    cache: dict[tuple[int, int], set[str]] = ctx.shared("optimizer_state.state_moving", lambda c: {})
    key = (id(func), depth)
    if key not in cache:
        cache[key] = set()
        moved: set[str] = set()
        for node in ctx.index.walk(func.body):
            if type(node) is not cst.Call:
                continue
            owner = _state_loop_owner(ctx, node)
            if owner is not None:
                moved.add(owner)
            elif depth < 2:
                moved.update(_state_moved_by_helper(ctx, node, depth + 1))
        cache[key] = moved
    return cache[key]


def _state_moved_in(ctx: FileContext, stream: list[cst.Call], optimizer: str) -> bool:
    """Whether the calls of a run move `optimizer`'s state to the device themselves (the fix of a
    state loaded before the model moved) or hand it to a helper that does."""
    return any(_state_loop_owner(ctx, c) == optimizer or optimizer in _state_moved_by_helper(ctx, c) for c in stream)


def _placed_by_fabric(ctx: FileContext, call: cst.Call) -> list[str]:
    """`model` in `fabric.setup(model, optimizer)`: Fabric moves the module, not the state an
    optimizer already loaded."""
    placed = fabric_placed_module(ctx, call)
    name = dotted_name(placed) if placed is not None else None
    return [name] if name is not None else []


def _moved_after(ctx: FileContext, stream: list[cst.Call], move: cst.Call, built: cst.Call) -> bool:
    """The object `built` is bound to (`ema = EMAModel(...)`) is moved itself by a call of the
    stream after `move` (`ema.to(accelerator.device)`)."""
    parent = ctx.index.parent(built)
    if type(parent) is not cst.Assign or len(parent.targets) != 1:
        return False
    name = dotted_name(parent.targets[0].target)
    after = False
    for call in stream:
        if call is move:
            after = True
        elif after and move_call(call) in ("to", "cuda") and dotted_name(call.func.value) == name:  # type: ignore[attr-defined]  # move_call() matched `x.<method>(...)`
            return True
    return False


def _replaced_by_moved_copy(ctx: FileContext, move: cst.Call, names: set[str]) -> tuple[str, cst.Assign] | None:
    """(`w`, the assignment) when the move is part of `w = w.cuda()` or `self.params = [p.cuda() for p
    in self.params]`: a name rebound to device copies of what it held (`w.data = w.data.cuda()`
    changes the tensor in place and is not a rebinding of `w`)."""
    statement = ctx.index.enclosing(move, cst.SimpleStatementLine)
    assign = next((a for a in ctx.index.ancestors(move) if type(a) is cst.Assign), None)
    if assign is None or statement is None or ctx.index.parent(assign) is not statement:
        return None
    read = {dotted_name(n) for n in ctx.index.walk(assign.value) if type(n) in (cst.Name, cst.Attribute)}
    for target in assign.targets:
        name = dotted_name(target.target)
        if name is not None and name in names and name in read:
            return name, assign
    return None


def _holder(ctx: FileContext, optimizer: cst.Call, name: str, scope: int) -> int:
    """Where a rebinding of `name` counts: anywhere in the class for `self.x` held by an optimizer
    built in `__init__` (a later `to()` method may rebind it), else in the same function."""
    func = ctx.index.enclosing_function(optimizer)
    owner = ctx.index.enclosing_class(optimizer)
    if name.startswith("self.") and func is not None and func.name.value == "__init__" and owner is not None:
        return id(owner)
    return scope


# Optimizers that create per-parameter state in `__init__` (`torch.optim.Adagrad`: `state["sum"]`),
# on the parameters' device at that moment; every other `torch.optim` optimizer creates its
# state lazily at the first `step()`, where the parameters then are.
STATE_AT_CONSTRUCTION = {"Adagrad": "`sum`"}


def _about_self(ctx: FileContext, call: cst.Call) -> bool:
    """A call on `self.x` (`self.model.cuda()`, `self.opt.load_state_dict(...)`), or one that
    assigns its result to `self.x` (`self.opt = Adagrad(...)`)."""
    func = call.func
    if type(func) is cst.Attribute and (dotted_name(func.value) or "").startswith("self."):
        return True
    parent = ctx.index.parent(call)
    return type(parent) is cst.Assign and any((dotted_name(t.target) or "").startswith("self.") for t in parent.targets)


def _same_model(held: str, moved: str) -> bool:
    """`model` and `self.model` are one model in a class whose `__init__` stores its argument."""
    return held == moved or held.removeprefix("self.") == moved.removeprefix("self.")


# The model of an optimizer that the function receives: any module moved after the load.
ANY_MODEL = "<any model>"


@register
class OptimizerStateDevice(Rule):
    """
    ## What it does
    Flags an optimizer that captures CPU state before its model (or its tensors) moves to the
    device, in the order the code runs: in one function, or across the methods of a class,
    following its own `self.method()` calls (an optimizer built in `__init__`, its state loaded
    in `resume()`, the model moved in `to_gpu()`, both called from `run()`) and the file's calls
    on an instance of it (`exp = Experiment(cfg)`, `exp.load(path)`, then `exp.to_gpu()`):

    - `optimizer.load_state_dict(...)` on an optimizer built from `model.parameters()`, before
      `model.to(device)`;
    - `torch.optim.Adagrad(model.parameters())` before `model.to(device)`: Adagrad is the
      `torch.optim` optimizer that creates its state (`sum`) in its constructor; so does an
      optimizer class of the file whose `__init__` makes tensors from its parameters
      (`torch.zeros_like(p)`, `p.clone()` for `p` in `group["params"]`), and a factory the
      function is given that every call of it fills with one of these
      (`functools.partial(torch.optim.Adagrad, lr=0.1)`), or a helper of the file that returns
      one optimizer per branch from the same parameters, one of them Adagrad
      (`make_optimizer(cfg.name, model.parameters(), lr)`: the branch that fails when the model
      moves later), or a class read from a table of optimizer classes the file writes, Adagrad
      among them (`OPTIMIZERS[cfg.name](params)`, `choices.get(name, SGD)`, a list of
      `functools.partial`s, or a name bound to such a read), or a method of the model's class that builds one from its own
      `self.parameters()` and returns it (`model.configure_optimizers()`, the one method of that
      name among the file's classes), or such a class built around another optimizer the function built from the
      model (`Lookahead(base_optimizer)` cloning `base_optimizer.param_groups` into its slow
      weights); so does an object of a class of the file that is no optimizer but copies the
      parameters it is built from onto `self` (`EMAModel(unet.parameters())` keeping
      `[p.clone().detach() for p in parameters]`, a weight average's `torch.zeros_like(w)`), for
      which a launcher's `accelerator.prepare(unet, ...)` is a move of the model too (it does not
      move such copies), unless the calls after it move the object itself (`ema.to(device)`);
    - an optimizer built from plain tensors (`SGD(params)`, `Adam([w, b])`) whose names are then
      rebound to device copies (`params = [p.cuda() for p in params]`, `w = w.to(device)`);
    - `optimizer.load_state_dict(ckpt["optim"])` with `ckpt = torch.load(..., map_location="cpu")`,
      in a function that moves things to the accelerator, into an optimizer class of the file
      that keeps state where loading does not move it: a tensor in its param groups
      (`group["exp_avg_sq"] = torch.stack(...)`) or tensors inside objects of its state
      (`state["precond"] = Preconditioner(p)`), and that does not override `load_state_dict`, or
      whose own `load_state_dict` puts entries of the loaded dict back into its state without
      moving them (`self.state[p]["lr_mask"] = mask`, past the cast `super().load_state_dict`
      made); so does a plain class of the file that wraps an optimizer (an fp16 or lookahead
      wrapper that steps it and hands `load_state_dict` on to it) and puts the loaded state back
      into the wrapped optimizer's state (`self.optimizer.state[p] = v`).

    ## Why it is a bug on a GPU
    `Module.to` moves parameters in place, so an optimizer that only holds the `Parameter`
    objects follows them, and most optimizers create their state lazily at the first `step()`,
    on the parameters' device. Three things escape that:
    `Optimizer.load_state_dict` casts the saved state (Adam's `exp_avg`, momentum buffers) to
    the device of each parameter *at load time*; Adagrad's constructor fills `state["sum"]`
    with `torch.full_like(p, ...)` on the parameters' device at that moment. Either way the state
    stays on the CPU after `model.to(device)`, and the first `optimizer.step()` fails with
    `Expected all tensors to be on the same device` (or a device-mismatch error deep inside a
    `foreach`/fused kernel). A tensor's `.cuda()` is not in place at all: it returns a new
    tensor, so an optimizer built from the CPU originals keeps stepping them while the code
    computes with the copies, and the model silently never learns.

    ## Example
    ```python
    model = Net()
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])
    model.to(device)

    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
    model.cuda()
    ```

    ## Use instead
    ```python
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])

    model.cuda()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
    ```

    ## Fix safety
    No automatic fix: the statements have to be reordered.

    ## Known limits
    One rule for the three cases because they are one bug with one fix: state the optimizer took
    from the CPU before the move, repaired by building (and loading) it after the move.
    Only optimizers of `torch.optim` built from `<model>.parameters()` (a name or `self.<name>`,
    then a move of that same model), from names of tensors (then a rebinding of those names to a
    moved copy in the same function; for `self.x` held by an optimizer built in `__init__`, in any
    method of the class that follows it), or optimizers the function receives under a name containing `optim` (then a
    move of a name whose state the function also loaded, or that names a model), in the calls a
    function makes in order with the methods it calls on `self` spliced in (three levels deep)
    and its class's `__init__` before them, are considered; a call of the file's own function that moves one of its parameters
    (`set_devices(model, device)` running `model.to(device)`, or handing it on to a helper of
    its own that does, two helpers deep) moves the argument, and so does
    Lightning Fabric's `fabric.setup(model, optimizer)` / `fabric.setup_module(model)`, which
    moves the module but not the state an optimizer already loaded (Accelerate's `prepare` moves
    that state too, so it is no such move); `model` and `self.model` are taken for one model. A
    loaded state that the same calls then move to the device themselves (a loop over
    `optimizer.state.values()` that moves each tensor, in the function or a helper it hands the
    optimizer to) is not reported, nor a state loaded after its model already moved (also in
    place through another name, `runner = model.to(device)`), or into an optimizer that a builder
    of the file returns after making it from a model it moved first (`net, optimizer =
    build(cfg)`): it is on the device, whatever moves follow. An optimizer the function receives
    is taken to be that of a model moved before its load (on the way to it, not in the `else:` of
    an `if` around it), and a move in the `else:` of the `if` that loads the state (or builds an
    Adagrad) never follows it (`if ckpt: ... load ... else: model.to(device)`). Building an ordinary optimizer (`SGD`, `Adam`, `AdamW`...) before
    `model.to(device)` without loading a state is not reported: its state is created on the
    right device at the first step. Optimizers from other packages (not classes of the file) that
    create state in their constructor, `model.configure_optimizers()` results, and moves that
    replace the `Parameter` objects (XLA devices, `torch.__future__.set_overwrite_module_params_on_conversion(True)`)
    are not seen.
    """

    code = "DL111"
    name = "optimizer-state-device"
    summary = "An optimizer captures CPU state (a loaded state, Adagrad's accumulators, CPU tensors) before its model moves to the device."
    message = "{what}; move {moved} before building the optimizer{and_load}"
    tokens = ("optim",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        # Each function's calls in the order they run (its own `self.method()` calls spliced in),
        # with the optimizers its class's `__init__` builds already known.
        if not _builds_or_loads_an_optimizer(ctx):
            return  # every finding starts at an optimizer's construction or at loading its state
        reported: set[int] = set()
        for violation in self._uncast_loads(ctx):
            reported.add(id(violation.node))
            yield violation
        for scope in (ctx.module, *ctx.index.of_type(cst.FunctionDef)):
            init = init_of(ctx, scope)
            stream = (calls_by_scope(ctx).get(id(init), []) if init is not None else []) + calls_through_instances(
                ctx, scope
            )
            for violation in self._scan(ctx, scope, stream):
                if id(violation.node) not in reported:
                    reported.add(id(violation.node))
                    yield violation

    def _uncast_loads(self, ctx: FileContext) -> Iterator[Violation]:
        """`optimizer.load_state_dict(ckpt["optim"])` with `ckpt = torch.load(..., map_location="cpu")`
        into an optimizer of a file class whose state loading cannot move (a tensor in its param
        groups, tensors inside objects of its state), in a function that moves things to the
        accelerator."""
        classes = uncast_state_classes(ctx)
        if not classes:
            return
        for call in ctx.index.of_type(cst.Call):
            func = call.func
            if type(func) is not cst.Attribute or func.attr.value != "load_state_dict" or len(call.args) != 1:
                continue
            built = [
                v
                for v in _receiver_values(ctx, func.value, call)
                if type(v) is cst.Call and type(v.func) is cst.Name and v.func.value in classes
            ]
            if not built:
                continue
            load = _cpu_load_of(ctx, call.args[0].value, call)
            scope = ctx.index.enclosing_function(call)
            if load is None or scope is None:
                continue
            if not any(type(n) is cst.Call and moves_to_accelerator(n) for n in ctx.index.walk(scope)):
                continue
            held = classes[built[0].func.value]  # type: ignore[attr-defined]  # filtered to a Name above
            if held.restored_as_loaded:
                name = held.cls.name.value
                yield Violation(
                    rule=type(self),
                    node=call,
                    message=f"`{short(ctx, call)}` restores the state of `{name}`, whose own `load_state_dict` puts "
                    f"{held.where.split(',')[0]} back as it was loaded, past the device cast of "
                    f"`Optimizer.load_state_dict`; with `{short(ctx, load)}` it stays on the CPU and `step()` mixes it "
                    f"with the parameters on the device; move it to each parameter's device in `{name}.load_state_dict` "
                    "(or load the checkpoint onto that device)",
                    fix=None,
                )
                continue
            yield Violation(
                rule=type(self),
                node=call,
                message=f"`{short(ctx, call)}` restores the state of `{held.cls.name.value}`, which keeps tensors "
                f"in {held.where}; `Optimizer.load_state_dict` moves only the tensors of each parameter's state "
                f"dict, so with `{short(ctx, load)}` they stay on the CPU and `step()` mixes them with the "
                f"parameters on the device; override `load_state_dict` in `{held.cls.name.value}` to move them to "
                "each parameter's device (or load the checkpoint onto that device)",
                fix=None,
            )

    def _scan(self, ctx: FileContext, root: cst.CSTNode, stream: list[cst.Call]) -> Iterator[Violation]:
        scope = id(root)
        optimizers: dict[tuple[int, str], str] = {}  # (scope, optimizer name) -> model name
        loads: dict[int, list[tuple[cst.Call, str]]] = {}  # scope -> (load call, model)
        loaded: dict[int, set[str]] = {}  # scope -> names whose (module) state was loaded
        eager: dict[int, list[tuple[cst.Call, str, str]]] = {}  # scope -> (Adagrad(...), model, state)
        holding: dict[int, dict[str, cst.Call]] = {}  # scope -> tensor name -> optimizer built from it
        moved_first: dict[int, set[str]] = {}  # scope -> models moved before anything was built
        model_moves: dict[int, list[cst.Call]] = {}  # scope -> the moves of a model so far
        loaded_names: dict[int, str] = {}  # load call -> the optimizer it loads, in this scope's words
        for call in stream:
            if (ctx.index.enclosing_function(call) or ctx.module) is not root and not _about_self(ctx, call):
                continue  # another method's locals are not this function's: only `self.x` is shared
            model = _optimizer_of(ctx, call) or _wrapped_optimizer_model(ctx, call, optimizers, scope)
            if model is not None:
                parent = ctx.index.parent(call)
                target = (
                    dotted_name(parent.targets[0].target)
                    if type(parent) is cst.Assign and len(parent.targets) == 1
                    else None
                )
                if target is not None:
                    optimizers[(scope, target)] = model
                imported = _imported_optimizer(ctx, call) if ctx.project.functions else None
                kind = imported[0] if imported is not None else (_built(ctx, call) or ("",))[0]
                state = _state_at_construction(ctx, kind)
                if state is not None and model not in moved_first.get(scope, set()):
                    eager.setdefault(scope, []).append((call, model, state))
                continue
            for name in _tensor_names(ctx, call):
                holding.setdefault(_holder(ctx, call, name, scope), {})[name] = call
            owner_model = _owner_of_imported_load(ctx, call) if ctx.project.plain_classes else None
            if owner_model is not None:
                loads.setdefault(scope, []).append((call, owner_model))
                continue
            func = call.func
            names = (
                [name]
                if type(func) is cst.Attribute
                and func.attr.value == "load_state_dict"
                and (name := dotted_name(func.value)) is not None
                else _states_loaded_by_helper(ctx, call)
            )
            for name in names:
                owner = optimizers.get((scope, name))
                if (
                    owner is None
                    and ("optim" in name.lower() or _used_as_optimizer(ctx, root, name))
                    and not _built_after_its_model_moved(ctx, root, name)
                ):
                    owner = ANY_MODEL  # an optimizer handed in: its model is whichever moves next
                if owner is not None:
                    # A model moved before the load (in place: `para = model.to(device)` moves
                    # `model` too) has the state cast to where its parameters already are.
                    # An optimizer handed in is taken to be the model's that moved on the way to the load.
                    before = owner is ANY_MODEL and any(
                        not never_together(ctx, move, call) for move in model_moves.get(scope, ())
                    )
                    if (owner is ANY_MODEL and not before) or (
                        owner is not ANY_MODEL and not any(_same_model(owner, m) for m in moved_first.get(scope, ()))
                    ):
                        loads.setdefault(scope, []).append((call, owner))
                        loaded_names[id(call)] = name  # `load_epoch(dir, n, model, optimizer)` loads `optimizer`
                else:
                    loaded.setdefault(scope, set()).add(name)
            if names:
                continue
            parent = ctx.index.parent(call)
            if type(parent) is cst.Assign and moves_to_accelerator(call):  # `model = Net().cuda()`: built there
                moved_first.setdefault(scope, set()).update(
                    name for target in parent.targets if (name := dotted_name(target.target)) is not None
                )
            direct = _moved_model(ctx, call)
            moves = (
                [direct]
                if direct is not None
                else _moved_by_helper(ctx, call) or _moved_by_imported_class(ctx, call) or _placed_by_fabric(ctx, call)
            )
            if not moves:
                # `accelerator.prepare(model, ...)` moves the model; it moves a loaded optimizer
                # state too, but not the copies an object that is no optimizer it prepares made
                for moved in prepared_modules(ctx, call):
                    moved_first.setdefault(scope, set()).add(moved)
                    yield from self._eager_left(ctx, call, moved, eager.get(scope, []), stream)
                continue
            owner_class = ctx.index.enclosing_class(call)
            held = {**holding.get(id(owner_class), {}), **holding.get(scope, {})}
            replaced = _replaced_by_moved_copy(ctx, call, set(held)) if direct is not None else None
            if replaced is not None:
                optimizer = held[replaced[0]]
                for table in (holding.get(scope, {}), holding.get(id(owner_class), {})):
                    table.pop(replaced[0], None)
                yield self.violation(
                    optimizer,
                    moved="the tensors",
                    and_load="",
                    what=f"`{short(ctx, optimizer)}` holds the CPU tensors of `{replaced[0]}`, which "
                    f"`{short(ctx, replaced[1])}` then replaces with device copies: the optimizer steps the CPU "
                    "originals, never the tensors the computation uses",
                )
                continue
            for moved in moves:
                moved_first.setdefault(scope, set()).add(moved)
                yield from self._eager_left(ctx, call, moved, eager.get(scope, []), stream)
                pending = loads.get(scope, [])
                is_model = moved in loaded.get(scope, set()) or any(word in moved.lower() for word in MODEL_WORDS)
                if is_model:
                    model_moves.setdefault(scope, []).append(call)
                for entry in [
                    p
                    for p in pending
                    if (_same_model(p[1], moved) or (p[1] is ANY_MODEL and is_model))
                    and not never_together(ctx, p[0], call)
                ]:
                    pending.remove(entry)
                    loaded_into = loaded_names.get(id(entry[0]))
                    if loaded_into is not None and _state_moved_in(ctx, stream, loaded_into):
                        continue  # the run moves the loaded state to the device itself
                    yield self.violation(
                        entry[0],
                        moved="the model",
                        and_load=" and loading its state",
                        what=f"`{ctx.code_for(entry[0])}` loads the optimizer state while `{moved}` is still on the CPU, "
                        f"so the state stays there after `{ctx.code_for(call)}`",
                    )

    def _eager_left(
        self,
        ctx: FileContext,
        move: cst.Call,
        moved: str,
        eager: list[tuple[cst.Call, str, str]],
        stream: list[cst.Call],
    ) -> Iterator[Violation]:
        """The optimizers (and parameter shadows) built from `moved` with state made in their
        constructor before `move`, removed from `eager` as they are reported; not one that the
        calls after `move` move themselves (`ema.to(device)`), nor one a move in the `else:` of the
        `if` that built it can never follow."""
        for entry in [e for e in eager if _same_model(e[1], moved) and not never_together(ctx, e[0], move)]:
            eager.remove(entry)
            if _moved_after(ctx, stream, move, entry[0]):
                continue
            yield self.violation(
                entry[0],
                moved="the model",
                and_load="",
                what=f"`{short(ctx, entry[0])}` creates {entry[2]} state in its constructor while `{moved}` "
                f"is still on the CPU, so the state stays there after `{ctx.code_for(move)}` and the first "
                "`step()` fails",
            )
