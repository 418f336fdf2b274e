"""What a project function does to the arguments it is handed, read with Python's own parser.

A file that imports `to_device`, `to_image` or `evaluate` from `utils.py` cannot follow them
the way the engine follows a function of its own file, so the index keeps, per function, what
its callers need at the call site:

- the attributes it reads on each parameter (`model.predict(...)`: a `DataParallel` wrapper
  handed in does not answer them, DL203);
- the parameters it turns into NumPy without a `.cpu()` first (`t.detach().numpy()`: a device
  tensor handed in raises, DL108);
- the parameter whose moved copy it returns and nothing else (`return x.to(device)`,
  `{k: v.to(device) for k, v in batch.items()}`: a call whose result is dropped moves nothing,
  DL104);
- the parameter it calls as a model on the batches of another parameter it loops over, or on
  a tensor it builds with a torch factory, when it moves nothing anywhere (`for x, y in loader:
  out = model(x)`, `model(torch.from_numpy(batch))`: a model the caller moved gets host
  tensors, DL105 and DL101).

A parameter the function tests (`isinstance`, `hasattr`, `getattr`, `type`), rebinds or moves
to the CPU itself is one it may unwrap or convert: nothing is recorded for it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from devicelint.analysis.vocabulary import DIST_COLLECTIVES, FACTORIES, PRESERVING_METHODS

_GUARDS = frozenset({"isinstance", "hasattr", "getattr", "type", "setattr"})
_MOVES = frozenset({"to", "cuda"})
# `type(batch)(...)`, `tuple(...)`: a container rebuilt from the moved elements
_REBUILDERS = frozenset({"type", "tuple", "list", "dict"})
_CONTAINER_VIEWS = frozenset({"items", "values"})
_IN_PLACE = frozenset({"update", "setdefault", "pop", "__setitem__", "to_", "copy_"})


@dataclass(frozen=True)
class ParameterUses:
    """One function's parameters (positional order, then keyword-only) and what it does to them."""

    params: tuple[str, ...] = ()
    # how many leading parameters are positional (the rest are keyword-only)
    positional: int = 0
    # (parameter, attribute, line): the first read of each attribute on a parameter
    reads: tuple[tuple[str, str, int], ...] = ()
    # (parameter, line): `.numpy()` on the parameter (through views and casts), no `.cpu()` first
    to_numpy: tuple[tuple[str, int], ...] = ()
    # the parameter whose moved copy every `return` hands back, changed nowhere in place
    returns_moved: str | None = None
    # (model parameter, loader parameter, batch name, line): the function calls the first on
    # what a loop over the second yields (the batch name), and moves nothing anywhere
    unmoved_batches: tuple[tuple[str, str, str, int], ...] = ()
    # (model parameter, torch factory, argument, line): the function calls the model on a tensor
    # it builds on the host (`torch.from_numpy(...)`, `torch.zeros(...)` without `device=`), and
    # moves nothing anywhere
    host_inputs: tuple[tuple[str, str, str, int], ...] = ()
    # (parameter, name, line): the function combines what the parameter carries with a name it
    # neither takes nor binds (a module constant, `(images - MEAN) / STD`): where the name is a
    # host tensor the module builds, a device argument meets it (`ImportedHelper.host_mixes`)
    mixes: tuple[tuple[str, str, int], ...] = ()
    # the parameters whose `load_state_dict` the function calls, under any condition
    # (`if optimizer is not None: optimizer.load_state_dict(...)`)
    loads_state: tuple[str, ...] = ()
    # the distributed set-up it makes, under any condition: "init_process_group", "set_device"
    # (`torch.cuda.set_device(...)`, `with torch.cuda.device(...)`)
    distributed_setup: tuple[str, ...] = ()
    # the accelerator ("cuda", "mps"...) that its last default-device setter, under any condition,
    # makes the default (`torch.set_default_tensor_type("torch.cuda.FloatTensor")`), "" for none or
    # the CPU: a caller's samplers built after the call draw under that default (DL114)
    default_device: str = ""
    # (parameter, default, line): a parameter it reads whose default names an accelerator
    # (`def grid_anchors(self, size, stride, device="cuda")`): a caller that leaves it out
    # places there whatever device its own tensors are on (DL107 in a module's code)
    accelerator_defaults: tuple[tuple[str, str, int], ...] = ()
    # (parameter, table, line): it indexes a tensor it builds on the host (`palette =
    # torch.tensor(colors)`, never moved) with what the parameter carries, kept where it is
    # (`palette[pred.argmax(0)]`): a device tensor handed in indexes a CPU table (DL116)
    host_indexed: tuple[tuple[str, str, int], ...] = ()
    # (kind, name, line): samplers it builds that draw with a CPU generator when given none, or
    # that it hands a CPU generator it makes (kind ending in `GIVEN_CPU_GENERATOR`)
    # ("loader": a shuffling `DataLoader`, "sampler": `RandomSampler`, "split": `random_split`,
    # "distributed": a shuffling `DistributedSampler`), wrong under a CUDA default device
    implicit_draws: tuple[tuple[str, str, int], ...] = ()
    # (parameter, line): the function calls the parameter on inputs it moved to a device
    # (`x = x.to(device); model(x)`) and never moves, rebinds or hands on the parameter itself
    runs_unmoved: tuple[tuple[str, int], ...] = ()
    # (parameter, device parameter, line): as `runs_unmoved`, but the inputs go to a device
    # parameter whose default is the CPU (`evaluate(net, loader, device="cpu")`): the model runs
    # on moved inputs only where a caller passes that parameter (read at direct calls only)
    runs_unmoved_if_passed: tuple[tuple[str, str, int], ...] = ()
    # (parameter, read, line): the function reads on the host a value computed from the
    # parameter (`(logits.argmax(1) == y).float().mean().item()`, `float(loss)`, `.tolist()`)
    host_syncs: tuple[tuple[str, str, int], ...] = ()
    # the parameters of `host_syncs` whose every host read goes through a part unpacked from a
    # call's result (`pads = pad(img)[2]`... `pads[0].item()`): which part carries the parameter
    # is unknown, so a caller's helper does not count the read as its own (`ProjectIndex._uses`)
    loose_syncs: tuple[str, ...] = ()
    # (kind, parameter, guard): the training-step calls it makes on its parameters, in source
    # order — "backward" (`loss.backward()`), "scaled_backward" (`scaler.scale(loss).backward()`),
    # "scaler_step", "unscale", "update", "optimizer_step" — with the parameter it makes them on
    # (the loss, the optimizer) and the branch they run on: "" always, "+p" when the caller hands
    # `p`, "-p" when it leaves `p` out or hands None (`if scaler is not None: ... else: ...`)
    step_effects: tuple[tuple[str, str, str], ...] = ()
    # (parameter, collective, line): the function hands the parameter, or a copy of it that
    # stays where it is (`total = value.clone()`), to a `torch.distributed` collective
    # (`dist.all_reduce(total)`): a CPU tensor handed in fails under NCCL
    collectives: tuple[tuple[str, str, int], ...] = ()
    # (how, line) for the first tensor it certainly puts on the accelerator, under any condition
    # (`.cuda()`, `.to("cuda")`, `device="cuda:0"`): called in a `DataLoader` worker (a
    # dataset's `__getitem__`), it initialises CUDA in a forked process
    accelerator_tensor: tuple[tuple[str, int], ...] = ()
    # (parameter, callee, position, keyword, as_is, always, line): a call of another function of
    # the project (`callee` qualified; found only where the module imports or defines it) that is
    # handed what the parameter carries, at `position` (-1 for a keyword) or as `keyword` ("" for
    # a position); `as_is`: the parameter itself, never moved here; `always`: not under a branch.
    # Nothing for callers by itself: the index reads the callee's uses through it, so a helper's
    # helper in a third module counts as the helper's own (`ProjectIndex._uses`)
    forwards: tuple[tuple[str, str, int, str, bool, bool, int], ...] = ()
    # (scaler parameter, optimizer parameter) for each `scaler.unscale_(optimizer)` it makes on
    # two of its parameters: a caller that unscales the same optimizer again before `update()`
    # raises (DL308), the call naming both in the caller's words
    unscales: tuple[tuple[str, str], ...] = ()
    # (model parameter, checkpoint key, path parameter, line) for each `torch.save` of a
    # parameter's state dict (key "" for the state dict itself, `{"model": model.state_dict()}`
    # for "model", also through a name bound once) to a path parameter
    # (`def save_checkpoint(model, optimizer, epoch, path)`): a caller that hands a
    # `DataParallel`/DDP wrapper saves `module.`-prefixed keys to the path it hands (DL204)
    state_saves: tuple[tuple[str, str, str, int], ...] = ()
    # (parameter, line) for each `torch.load` handed as `map_location` a parameter that defaults
    # to `None` and that the function never rebinds (`def load_checkpoint(path, map_location=None):
    # return torch.load(path, map_location=map_location)`): a caller that leaves it out, or hands
    # None, restores the tensors to the device they were saved on (DL501)
    unmapped_loads: tuple[tuple[str, int], ...] = ()
    # the name of its `**kwargs` parameter ("" for none): a keyword argument no other parameter
    # takes binds there; only `host_syncs` speak of it (`update(self, **kwargs)` reading
    # `v.item()` for each `k, v in kwargs.items()`: `logger.update(loss=loss)` reads `loss`)
    var_keyword: str = ""

    def __bool__(self) -> bool:
        return bool(
            self.reads
            or self.to_numpy
            or self.returns_moved
            or self.unmoved_batches
            or self.host_inputs
            or self.mixes
            or self.loads_state
            or self.distributed_setup
            or self.default_device
            or self.accelerator_defaults
            or self.host_indexed
            or self.implicit_draws
            or self.runs_unmoved
            or self.runs_unmoved_if_passed
            or self.host_syncs
            or self.step_effects
            or self.collectives
            or self.accelerator_tensor
            or self.state_saves
            or self.unmapped_loads
        )

    def parameter_at(self, position: int | None, keyword: str | None) -> str | None:
        """The parameter an argument binds (by position or keyword), or None."""
        if keyword is not None:
            return keyword if keyword in self.params else (self.var_keyword or None)
        if position is not None and position < self.positional:
            return self.params[position]
        return None


def parameter_uses_from(data: dict[str, Any]) -> ParameterUses:
    """`ParameterUses` from its `asdict` form (a damaged entry raises; the index catches it)."""
    return ParameterUses(
        params=tuple(str(p) for p in data["params"]),
        positional=int(data["positional"]),
        reads=tuple((str(p), str(a), int(n)) for p, a, n in data["reads"]),
        to_numpy=tuple((str(p), int(n)) for p, n in data["to_numpy"]),
        returns_moved=None if data["returns_moved"] is None else str(data["returns_moved"]),
        unmoved_batches=tuple((str(m), str(b), str(x), int(n)) for m, b, x, n in data.get("unmoved_batches", ())),
        host_inputs=tuple((str(m), str(f), str(x), int(n)) for m, f, x, n in data.get("host_inputs", ())),
        mixes=tuple((str(p), str(x), int(n)) for p, x, n in data.get("mixes", ())),
        loads_state=tuple(str(p) for p in data.get("loads_state", ())),
        distributed_setup=tuple(str(c) for c in data.get("distributed_setup", ())),
        default_device=str(data.get("default_device", "")),
        accelerator_defaults=tuple((str(p), str(d), int(n)) for p, d, n in data.get("accelerator_defaults", ())),
        host_indexed=tuple((str(p), str(t), int(n)) for p, t, n in data.get("host_indexed", ())),
        implicit_draws=tuple((str(k), str(n), int(line)) for k, n, line in data.get("implicit_draws", ())),
        runs_unmoved=tuple((str(p), int(line)) for p, line in data.get("runs_unmoved", ())),
        runs_unmoved_if_passed=tuple(
            (str(p), str(d), int(line)) for p, d, line in data.get("runs_unmoved_if_passed", ())
        ),
        host_syncs=tuple((str(p), str(r), int(line)) for p, r, line in data.get("host_syncs", ())),
        loose_syncs=tuple(str(p) for p in data.get("loose_syncs", ())),
        step_effects=tuple((str(k), str(p), str(g)) for k, p, g in data.get("step_effects", ())),
        collectives=tuple((str(p), str(c), int(line)) for p, c, line in data.get("collectives", ())),
        accelerator_tensor=tuple((str(h), int(line)) for h, line in data.get("accelerator_tensor", ())),
        forwards=tuple(
            (str(p), str(c), int(i), str(k), bool(a), bool(w), int(line))
            for p, c, i, k, a, w, line in data.get("forwards", ())
        ),
        unscales=tuple((str(s), str(o)) for s, o in data.get("unscales", ())),
        state_saves=tuple((str(m), str(k), str(p), int(n)) for m, k, p, n in data.get("state_saves", ())),
        unmapped_loads=tuple((str(p), int(line)) for p, line in data.get("unmapped_loads", ())),
        var_keyword=str(data.get("var_keyword", "")),
    )


def parameter_uses(
    function: ast.FunctionDef | None,
    own_nodes: list[ast.AST],
    first_line: int = 0,
    module_tensors: bool = True,
    project_name: Callable[[ast.expr], str | None] | None = None,
) -> ParameterUses:
    """What `function` (a module-level function; `own_nodes`: its body without nested scopes)
    does to its parameters; `first_line`: how many lines of the file come before the text it
    was parsed from; `module_tensors`: whether its module builds tensors at import at all (else
    what it mixes with free names is not looked for); `project_name`: the qualified name of a
    callee the module imports or defines, None for any other (without it, no `forwards`)."""
    if function is None:
        return ParameterUses()
    args = function.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    params = (*positional, *(a.arg for a in args.kwonlyargs))
    opaque = _opaque_parameters(set(params), own_nodes)
    kept = [p for p in params if p not in opaque]
    # a host read under a test that the argument is a tensor (`if isinstance(value,
    # torch.Tensor): return value.item()`) still runs on every tensor handed in
    synced = [p for p in params if p not in _opaque_parameters(set(params), own_nodes, tensor_tests=False)]
    # what runs on every call: a read under an `if` may belong to the other kind of object
    # (`if scaler is not None: ... else: model.save_checkpoint(...)`, a DeepSpeed engine)
    sure = _unconditional(own_nodes)
    syncs = _host_syncs(tuple(synced), own_nodes)
    var_keyword = args.kwarg.arg if args.kwarg is not None else ""
    if var_keyword and var_keyword not in _opaque_parameters({var_keyword}, own_nodes, tensor_tests=False):
        syncs = tuple(sorted((*syncs, *_keyword_value_syncs(var_keyword, own_nodes))))
    host_devices = _host_defaults(function)
    unmoved = runs_unmoved(kept, own_nodes, host_devices=host_devices)
    return ParameterUses(
        params=params,
        positional=len(positional),
        reads=tuple(
            (p, a, line + first_line)
            for p, a, line in sorted(
                (
                    *_reads(kept, sure, _unpacked_parts(kept, own_nodes)),
                    *_unwrapping_reads(params, opaque, own_nodes, sure),
                )
            )
        ),
        to_numpy=tuple((p, line + first_line) for p, line in _to_numpy(kept, sure)),
        returns_moved=_returns_moved(function, params, own_nodes),
        unmoved_batches=tuple(
            (m, b, x, line + first_line) for m, b, x, line in _unmoved_batches(kept, own_nodes, sure)
        ),
        host_inputs=tuple((m, f, x, line + first_line) for m, f, x, line in _host_inputs(kept, own_nodes, sure)),
        mixes=tuple((p, x, line + first_line) for p, x, line in _mixes(tuple(kept), own_nodes))
        if module_tensors
        else (),
        loads_state=tuple(
            sorted(
                {
                    n.func.value.id
                    for n in own_nodes
                    if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "load_state_dict"
                    and isinstance(n.func.value, ast.Name)
                    and n.func.value.id in kept
                }
            )
        ),
        distributed_setup=_distributed_setup(own_nodes),
        default_device=_default_device(own_nodes),
        accelerator_defaults=tuple(
            (p, d, line + first_line) for p, d, line in _accelerator_defaults(function, own_nodes)
        ),
        host_indexed=tuple((p, t, line + first_line) for p, t, line in _host_indexed(kept, own_nodes)),
        implicit_draws=tuple((k, n, line + first_line) for k, n, line in _implicit_draws(own_nodes)),
        runs_unmoved=tuple((p, line + first_line) for p, line in unmoved),
        runs_unmoved_if_passed=tuple(
            (p, d, line + first_line) for p, d, line in _unmoved_if_passed(kept, own_nodes, host_devices, unmoved)
        ),
        host_syncs=tuple((p, r, line + first_line) for p, r, line in syncs),
        loose_syncs=_loose_syncs(tuple(synced), own_nodes, tuple(e for e in syncs if e[0] != var_keyword)),
        step_effects=_step_effects(function.body, set(params), ""),
        collectives=tuple((p, c, line + first_line) for p, c, line in _collectives(kept, own_nodes)),
        accelerator_tensor=tuple((how, line + first_line) for how, line in _accelerator_tensor(own_nodes)),
        forwards=tuple(
            (p, c, i, k, a, w, line + first_line)
            for p, c, i, k, a, w, line in _forwards(tuple(kept), own_nodes, sure, project_name)
        )
        if project_name is not None
        else (),
        unscales=_unscales(params, own_nodes),
        state_saves=tuple((m, k, p, line + first_line) for m, k, p, line in _state_saves(kept, own_nodes)),
        unmapped_loads=tuple((p, line + first_line) for p, line in _unmapped_loads(function, own_nodes)),
        var_keyword=var_keyword,
    )


def _keyword_value_syncs(var: str, nodes: list[ast.AST]) -> tuple[tuple[str, str, int], ...]:
    """`host_syncs` of the values of the `**kwargs` parameter `var`: what a loop over
    `var.items()` (its second part) or `var.values()` binds, and `var[key]`, read on the host
    (`for k, v in kwargs.items(): v = v.item()`), as reads of `var` (the first one)."""
    values: set[str] = set()
    for node in nodes:
        if not (isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Call)):
            continue
        func = node.iter.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == var):
            continue
        target = node.target
        if func.attr == "items" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            target = target.elts[1]
        elif func.attr != "values":
            continue
        if isinstance(target, ast.Name) and target.id != var:
            values.add(target.id)
    carriers = (var, *sorted(values))
    found = _host_syncs(carriers, nodes, carried_parameters(nodes, carriers))
    first = min(found, key=lambda e: e[2], default=None)
    return ((var, first[1], first[2]),) if first is not None else ()


# `torch.load` under the spellings a module uses for it, with `map_location`'s position.
_TORCH_LOADS = frozenset({"torch.load", "torch.serialization.load"})


def _unmapped_loads(function: ast.FunctionDef, nodes: list[ast.AST]) -> list[tuple[str, int]]:
    """See `ParameterUses.unmapped_loads`."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip((a.arg for a in positional[len(positional) - len(args.defaults) :]), args.defaults))
    defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
    none = {p for p, d in defaults.items() if isinstance(d, ast.Constant) and d.value is None}
    rebound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    found = []
    for node in nodes:
        if not (isinstance(node, ast.Call) and dotted(node.func) in _TORCH_LOADS):
            continue
        given = next((k.value for k in node.keywords if k.arg == "map_location"), None)
        if given is None and len(node.args) > 1:
            given = node.args[1]
        if isinstance(given, ast.Name) and given.id in none - rebound:
            found.append((given.id, node.lineno))
    return found


def _state_saves(params: list[str], nodes: list[ast.AST]) -> list[tuple[str, str, str, int]]:
    """See `ParameterUses.state_saves`."""
    saves = [
        n for n in nodes if isinstance(n, ast.Call) and dotted(n.func) in ("torch.save", "torch.serialization.save")
    ]
    if not saves:
        return []
    values: dict[str, list[ast.expr]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    values.setdefault(target.id, []).append(node.value)

    def state_of(value: ast.expr) -> str | None:
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "state_dict"
            and isinstance(value.func.value, ast.Name)
            and value.func.value.id in params
        ):
            return value.func.value.id
        return None

    found: list[tuple[str, str, str, int]] = []
    for call in saves:
        payload = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "obj"), None)
        place = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "f"), None)
        if payload is None or not isinstance(place, ast.Name) or place.id not in params:
            continue
        if isinstance(payload, ast.Name) and len(values.get(payload.id, ())) == 1:
            payload = values[payload.id][0]
        model = state_of(payload)
        if model is not None:
            found.append((model, "", place.id, call.lineno))
        elif isinstance(payload, ast.Dict):
            for key, value in zip(payload.keys, payload.values):
                model = state_of(value)
                if model is not None and isinstance(key, ast.Constant) and isinstance(key.value, str):
                    found.append((model, key.value, place.id, call.lineno))
    return found


def _unscales(params: tuple[str, ...], nodes: list[ast.AST]) -> tuple[tuple[str, str], ...]:
    """See `ParameterUses.unscales`."""
    found: list[tuple[str, str]] = []
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "unscale_"
            and len(node.args) == 1
            and isinstance(node.func.value, ast.Name)
            and isinstance(node.args[0], ast.Name)
            and node.func.value.id in params
            and node.args[0].id in params
        ):
            pair = (node.func.value.id, node.args[0].id)
            if pair not in found:
                found.append(pair)
    return tuple(found)


def _forwards(
    params: tuple[str, ...],
    nodes: list[ast.AST],
    sure: list[ast.AST],
    project_name: Callable[[ast.expr], str | None],
) -> list[tuple[str, str, int, str, bool, bool, int]]:
    """See `ParameterUses.forwards`."""
    calls = [n for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))]
    if not calls:
        return []
    carries = carried_parameters(nodes, params)
    moved = {
        n.value.id
        for n in nodes
        if isinstance(n, ast.Attribute)
        and n.attr in _DEVICE_MOVES | {"half", "float", "to_empty"}
        and isinstance(n.value, ast.Name)
    }
    always = {id(n) for n in sure}
    found: dict[tuple[str, str, int, str], tuple[bool, bool, int]] = {}
    for call in calls:
        slots: list[tuple[int, str, ast.expr]] = []
        for position, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            slots.append((position, "", arg))
        slots.extend((-1, k.arg, k.value) for k in call.keywords if k.arg is not None)
        handed = [(i, k, v, {p for n in names_kept_on_device(v) for p in carries.get(n, ())}) for i, k, v in slots]
        if not any(carried for *_, carried in handed):
            # a call on every path that is handed no parameter: ("", callee, -1, "") says what the
            # callee does by itself counts as this function's own (a GPU tensor it makes)
            callee = project_name(call.func) if id(call) in always and isinstance(call.func, ast.Name) else None
            key = ("", callee or "", -1, "")
            if callee is not None and key not in found:
                found[key] = (False, True, call.lineno)
            continue
        callee = project_name(call.func)
        if callee is None:
            continue
        for position, keyword, value, carried in handed:
            for param in sorted(carried):
                as_is = isinstance(value, ast.Name) and value.id == param and param not in moved
                key = (param, callee, position, keyword)
                if key not in found or call.lineno < found[key][2]:
                    found[key] = (as_is, id(call) in always, call.lineno)
    return [(p, c, i, k, *rest) for (p, c, i, k), rest in sorted(found.items())]


def _collectives(params: list[str], nodes: Sequence[ast.AST]) -> list[tuple[str, str, int]]:
    """See `ParameterUses.collectives`."""
    assigns = [node for node in nodes if isinstance(node, ast.Assign)]
    # names bound somewhere to anything but a kept copy of a name: no longer what was handed in
    rebound = {
        n.id
        for node in assigns
        for target in node.targets
        if not isinstance(target, ast.Name) or _kept_root(node.value) is None
        for n in ast.walk(target)
        if isinstance(n, ast.Name)
    }
    copies = {p: p for p in params if p not in rebound}  # local name -> the parameter it copies
    for node in assigns:
        root = _kept_root(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and root in copies and target.id not in rebound:
                copies[target.id] = copies[root]
    found: list[tuple[str, str, int]] = []
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in DIST_COLLECTIVES or dotted(node.func.value) not in ("dist", "torch.distributed"):
            continue
        handed = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "tensor")]
        for value in handed:
            root = _kept_root(value)
            if root in copies:
                found.append((copies[root], f"dist.{node.func.attr}", node.lineno))
    return found


def _kept_root(node: ast.expr) -> str | None:
    """The name under calls of methods that keep a tensor where it is (`value.clone().float()`)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PRESERVING_METHODS:
        node = node.func.value
    return node.id if isinstance(node, ast.Name) else None


def dotted(node: ast.expr) -> str | None:
    """`torch.optim.Adam` for that attribute chain; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _is_torch_module(node: ast.expr) -> bool:
    """`torch` itself (`torch.cuda` is its module, not a call that moves anything)."""
    return isinstance(node, ast.Name) and node.id in ("torch", "th")


def _accelerator_tensor(nodes: list[ast.AST]) -> tuple[tuple[str, int], ...]:
    """See `ParameterUses.accelerator_tensor` (the first in the text)."""
    found: list[tuple[int, int, str]] = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and not _is_torch_module(func.value):
            found.append((node.lineno, node.col_offset, ".cuda()"))
        given = [("device={}", k.value) for k in node.keywords if k.arg == "device"]
        if isinstance(func, ast.Attribute) and func.attr == "to" and node.args:
            given.append((".to({})", node.args[0]))
        for spelling, value in given:
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("cuda"):
                found.append((node.lineno, node.col_offset, spelling.format(f'"{value.value}"')))
    return ((min(found)[2], min(found)[0]),) if found else ()


def _step_effects(body: list[ast.stmt], params: set[str], guard: str) -> tuple[tuple[str, str, str], ...]:
    """See `ParameterUses.step_effects`: statements in order, `if p is (not) None:` / `if p:`
    branches on a parameter read as guards, other branches as unguarded."""
    found: list[tuple[str, str, str]] = []
    for statement in body:
        if isinstance(statement, ast.If):
            tested = _none_test(statement.test, params)
            if tested is not None and not guard:
                name, given = tested
                found += _step_effects(statement.body, params, ("+" if given else "-") + name)
                found += _step_effects(statement.orelse, params, ("-" if given else "+") + name)
            else:
                found += _step_effects([*statement.body, *statement.orelse], params, guard)
            continue
        if isinstance(statement, (ast.For, ast.While, ast.With, ast.Try)):
            inner = [s for s in ast.iter_child_nodes(statement) if isinstance(s, ast.stmt)]
            found += _step_effects(inner, params, guard)
            continue
        for node in ast.walk(statement):
            effect = _step_effect(node, params)
            if effect is not None:
                found.append((*effect, guard))
    return tuple(found)


def _none_test(test: ast.expr, params: set[str]) -> tuple[str, bool] | None:
    """`p is not None` / `p` -> (p, True); `p is None` / `not p` -> (p, False)."""
    if isinstance(test, ast.Name) and test.id in params:
        return test.id, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return (test.operand.id, False) if test.operand.id in params else None
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id in params
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left.id, isinstance(test.ops[0], ast.IsNot)
    return None


def _step_effect(node: ast.AST, params: set[str]) -> tuple[str, str] | None:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    method, owner = node.func.attr, node.func.value
    if method == "backward" and not node.args:
        scaled = isinstance(owner, ast.Call) and isinstance(owner.func, ast.Attribute) and owner.func.attr == "scale"
        loss = owner.args[0] if scaled and isinstance(owner, ast.Call) and owner.args else owner
        root = root_name(loss)
        return ("scaled_backward" if scaled else "backward"), (root if root in params else "")
    root = root_name(owner)
    if root not in params:
        return None
    if method == "step" and node.args:
        # a scaler steps an optimizer; `sched.step(state["step"])`, `sched.step(epoch + 1)` or
        # `sched.step(0)` hand a number to a learning-rate scheduler
        return ("scaler_step", root) if _may_be_an_optimizer(node.args[0]) else None
    if method == "step" and not node.args:
        return "optimizer_step", root
    if method == "unscale_":
        return "unscale", root
    if method == "update" and not node.args:
        return "update", root
    return None


def _may_be_an_optimizer(arg: ast.expr) -> bool:
    """Not a number: a literal, arithmetic, or an entry read with a string key."""
    if isinstance(arg, (ast.Constant, ast.BinOp, ast.UnaryOp)):
        return False
    return not (
        isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str)
    )


_SYNC_METHODS = frozenset({"item", "tolist"})
_SYNC_BUILTINS = frozenset({"float", "int", "bool"})


def _loose_syncs(
    params: tuple[str, ...], nodes: list[ast.AST], syncs: tuple[tuple[str, str, int], ...]
) -> tuple[str, ...]:
    """See `ParameterUses.loose_syncs`: the parameters of `syncs` that no host read reaches
    without a part of what a call returned (`img_pad, G, pads = pad(img, p)`, then
    `pads[0].item()`)."""
    if not syncs:
        return ()
    strict = carried_parameters(nodes, params, unpacked_calls=False)
    direct = {p for p, _, _ in _host_syncs(params, nodes, strict)}
    return tuple(sorted({p for p, _, _ in syncs} - direct))


def _host_syncs(
    params: tuple[str, ...], nodes: list[ast.AST], carries: dict[str, set[str]] | None = None
) -> tuple[tuple[str, str, int], ...]:
    """See `ParameterUses.host_syncs` (the first read of each parameter)."""
    if carries is None:
        carries = carried_parameters(nodes, params)
    found: dict[str, tuple[str, int]] = {}
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _SYNC_METHODS and not node.args:
            value, read = func.value, f".{func.attr}()"
        elif isinstance(func, ast.Name) and func.id in _SYNC_BUILTINS and len(node.args) == 1:
            value, read = node.args[0], f"{func.id}()"
        else:
            continue
        for name in names_kept_on_device(value):
            for param in carries.get(name, ()):
                if param not in found or node.lineno < found[param][1]:
                    found[param] = (read, node.lineno)
    return tuple(sorted((p, read, line) for p, (read, line) in found.items()))


_DEVICE_MOVES = frozenset({"to", "cuda"})


def _unmoved_if_passed(
    models: list[str], nodes: list[ast.AST], host_devices: frozenset[str], unmoved: tuple[tuple[str, int], ...]
) -> list[tuple[str, str, int]]:
    """See `ParameterUses.runs_unmoved_if_passed`: what `runs_unmoved` finds once the moves to
    one CPU-default device parameter count as moves to the device."""
    found: list[tuple[str, str, int]] = []
    known = {p for p, _ in unmoved}
    for device in sorted(host_devices):
        for model, line in runs_unmoved(models, nodes, host_devices=host_devices - {device}):
            if model not in known:
                known.add(model)
                found.append((model, device, line))
    return found


def _host_defaults(function: ast.FunctionDef) -> frozenset[str]:
    """The parameters whose default is the CPU (`device="cpu"`, `device=torch.device("cpu")`)."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    pairs = [
        *zip(positional[len(positional) - len(args.defaults) :], args.defaults),
        *zip(args.kwonlyargs, args.kw_defaults),
    ]
    return frozenset(a.arg for a, default in pairs if default is not None and _cpu_device(default))


def _cpu_device(node: ast.expr) -> bool:
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "device") or (
            isinstance(func, ast.Name) and func.id == "device"
        ):
            node = node.args[0]
    return isinstance(node, ast.Constant) and node.value == "cpu"


def runs_unmoved(
    models: list[str] | tuple[str, ...],
    nodes: list[ast.AST],
    held: Callable[[ast.expr], str | None] | None = None,
    host_devices: frozenset[str] = frozenset(),
) -> tuple[tuple[str, int], ...]:
    """See `ParameterUses.runs_unmoved`; `held` names the model an expression stands for (a
    class's `self.model` kept from its constructor's `model`), by default a bare name;
    `host_devices`: parameters whose default is the CPU (`evaluate(loader, net,
    device=torch.device("cpu"))`): a move there is a move to the host unless a caller says
    otherwise, so it does not make the function run a model on the device."""
    holder = held or (lambda node: node.id if isinstance(node, ast.Name) else None)

    def _moves(value: ast.expr) -> bool:
        if not _moves_to_device(value):
            return False
        assert isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
        first = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "device"), None)
        return not (value.func.attr == "to" and isinstance(first, ast.Name) and first.id in host_devices)

    def _all_moved(value: ast.expr) -> bool:
        """A moved tensor, or a batch each entry of which is one: `(x.cuda(), y.cuda())`, `{k:
        torch.from_numpy(v).to(device) for k, v in batch.items()}`."""
        if isinstance(value, (ast.Tuple, ast.List)):
            return bool(value.elts) and all(_moves(e) for e in value.elts)
        if isinstance(value, ast.Dict):
            return bool(value.values) and all(k is not None and _moves(v) for k, v in zip(value.keys, value.values))
        if isinstance(value, ast.DictComp):
            return _moves(value.value)
        if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
            return _moves(value.elt)
        return _moves(value)

    moved_inputs: set[str] = set()
    left_alone = set(models)
    for node in nodes:
        if isinstance(node, ast.Assign) and _all_moved(node.value):
            moved_inputs.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
        if isinstance(node, ast.Attribute) and node.attr in _DEVICE_MOVES | {"half", "float", "to_empty"}:
            left_alone.discard(holder(node.value) or "")  # `model.to(device)`: moved here after all
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            left_alone.difference_update(holder(t) or "" for t in targets)  # rebound
        elif isinstance(node, ast.Call):
            for arg in (*node.args, *(k.value for k in node.keywords)):
                left_alone.discard(holder(arg) or "")  # handed on: `DDP(model)`, `prepare(model)`
    found: dict[str, int] = {}
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        target = func.value if isinstance(func, ast.Attribute) and func.attr == "forward" else func
        model = holder(target)
        if model not in left_alone:
            continue
        inputs = [*node.args, *(k.value for k in node.keywords)]
        if any(_all_moved(a) or (isinstance(a, ast.Name) and a.id in moved_inputs) for a in inputs):
            found.setdefault(model, node.lineno)
    return tuple(sorted(found.items()))


def moves_to_device(value: ast.expr) -> bool:
    """`x.to(device)`, `x.cuda()` (not `.to("cpu")`, not a dtype-only `.to(torch.float16)`)."""
    return _moves_to_device(value)


def _moves_to_device(value: ast.expr) -> bool:
    """`x.to(device)`, `x.cuda()` (not `.to("cpu")`, not a dtype-only `.to(torch.float16)`)."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    if value.func.attr == "cuda":
        return True
    if value.func.attr != "to" or _to_cpu(value) or not (value.args or value.keywords):
        return False
    first = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "device"), None)
    return first is not None and not (
        isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) and first.value.id == "torch"
    )


# sampler -> (kind, position of `shuffle` among positional arguments, shuffles by default)
_SAMPLERS = {
    "DataLoader": ("loader", 2, False),
    "RandomSampler": ("sampler", None, True),
    "random_split": ("split", None, True),
    "DistributedSampler": ("distributed", 3, True),
}


def _implicit_draws(nodes: list[ast.AST]) -> tuple[tuple[str, str, int], ...]:
    """See `ParameterUses.implicit_draws`."""
    found = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in _SAMPLERS or any(k.arg is None for k in node.keywords):
            continue
        kind, position, shuffles = _SAMPLERS[name]
        generator = next((k.value for k in node.keywords if k.arg == "generator"), None)
        if generator is not None:
            if not _cpu_generator(generator):
                continue
            kind = f"{kind}{GIVEN_CPU_GENERATOR}"
        shuffle = next((k.value for k in node.keywords if k.arg == "shuffle"), None)
        if shuffle is None and position is not None and len(node.args) > position:
            shuffle = node.args[position]
        if shuffle is not None:
            shuffles = isinstance(shuffle, ast.Constant) and shuffle.value is True
        if shuffles:
            found.append((kind, name, node.lineno))
    return tuple(found)


# suffix of an `implicit_draws` kind whose sampler is handed a CPU generator the function makes
# (`random_split(ds, sizes, generator=torch.Generator().manual_seed(0))`)
GIVEN_CPU_GENERATOR = ":given-cpu"


def _cpu_generator(value: ast.expr) -> bool:
    """`torch.Generator()`, `Generator(device="cpu")` or `torch.Generator(torch.device("cpu"))`,
    also seeded (`.manual_seed(0)`): a generator certainly on the CPU whatever the default."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "manual_seed"
        and isinstance(value.func.value, ast.Call)
    ):
        value = value.func.value
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name != "Generator":
        return False
    device = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "device"), None)
    if device is None:
        return not value.keywords
    if isinstance(device, ast.Call) and device.args and not device.keywords:  # `torch.device("cpu")`
        device = device.args[0]
    return isinstance(device, ast.Constant) and device.value == "cpu"


_SETS_DEVICE = frozenset({"set_device", "set_device_index"})


def _distributed_setup(nodes: list[ast.AST]) -> tuple[str, ...]:
    """See `ParameterUses.distributed_setup`."""
    found = set()
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = _called_name(node)
        if name == "init_process_group":
            found.add(name)
        elif name in _SETS_DEVICE or (
            name == "device"
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "cuda"
        ):
            found.add("set_device")
    return tuple(sorted(found))


_DEFAULT_SETTERS = frozenset({"set_default_device", "set_default_tensor_type"})


def _default_device(nodes: list[ast.AST]) -> str:
    """See `ParameterUses.default_device`: the setters in source order, the last one stated
    deciding; a setter whose argument the text does not state (`set_default_device(device)`)
    leaves nothing certain."""
    calls = sorted(
        (n for n in nodes if isinstance(n, ast.Call) and _called_name(n) in _DEFAULT_SETTERS and n.args),
        key=lambda n: (n.lineno, n.col_offset),
    )
    kind = ""
    for call in calls:
        kind = _stated_device_kind(call.args[0])
    return kind


def _accelerator_defaults(function: ast.FunctionDef, nodes: list[ast.AST]) -> list[tuple[str, str, int]]:
    """See `ParameterUses.accelerator_defaults`."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    pairs = [
        *zip(positional[len(positional) - len(args.defaults) :], args.defaults),
        *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None),
    ]
    read = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return [
        (arg.arg, ast.unparse(default), default.lineno)
        for arg, default in pairs
        if arg.arg in read and _stated_device_kind(default)
    ]


def _host_indexed(params: list[str], nodes: list[ast.AST]) -> list[tuple[str, str, int]]:
    """See `ParameterUses.host_indexed`: the first such index of each parameter."""
    if not params or not any(isinstance(n, ast.Subscript) for n in nodes):
        return []
    if not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in FACTORIES for n in nodes
    ):
        return []  # no table built here
    bound: dict[str, list[ast.expr]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(node.target)  # not followed
    found: dict[str, tuple[str, int]] = {}
    for node in nodes:
        if not (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)):
            continue
        indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        carried = [p for p in params if p not in found and any(_carries(i, p, bound, 0) for i in indices)]
        if carried and _host_table(node.value, bound, 0):
            for p in carried:
                found[p] = (ast.unparse(node.value), node.lineno)
    return [(p, table, line) for p, (table, line) in found.items()]


def _carries(value: ast.expr, name: str, bound: dict[str, list[ast.expr]], depth: int) -> bool:
    """`value` is what the parameter `name` carries, where it is: the parameter, its device-keeping
    methods (`x.squeeze(0).argmax(0)`, `torch.argmax(x, dim=0)`), or a local every binding of
    which is one (`idx = ... if target else ...`)."""
    if _derived_where_it_is(value, name):
        return True
    if isinstance(value, ast.Name) and value.id != name and depth < 3:
        values = bound.get(value.id, [])
        return bool(values) and all(_carries(v, name, bound, depth + 1) for v in values)
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return False
    method = value.func.attr
    if method not in PRESERVING_METHODS or method in _MAY_PLACE:
        return False
    rest = [*value.args, *(k.value for k in value.keywords)]
    receiver = value.func.value
    if dotted(receiver) == "torch" and rest:  # `torch.argmax(x, dim=0)`
        receiver, rest = rest[0], rest[1:]
    return _carries(receiver, name, bound, depth) and all(_number(a) for a in rest)


def _host_table(value: ast.expr, bound: dict[str, list[ast.expr]], depth: int) -> bool:
    """`value` is a tensor the function builds on the host and never moves: a torch factory
    without `device=` (`torch.tensor(colors)`), rows or columns of one (`[:, :3]`), a cast of
    one, or a local bound once to one."""
    if isinstance(value, ast.Name):
        values = bound.get(value.id, [])
        return len(values) == 1 and depth < 3 and _host_table(values[0], bound, depth + 1)
    if isinstance(value, ast.Subscript):
        return _host_table(value.value, bound, depth) and not any(
            isinstance(n, ast.Name) for n in ast.walk(value.slice)
        )
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return False
    if dotted(value.func.value) == "torch":
        return value.func.attr in FACTORIES and not any(k.arg in ("device", None) for k in value.keywords)
    return (
        value.func.attr in PRESERVING_METHODS
        and value.func.attr not in _MAY_PLACE
        and _host_table(value.func.value, bound, depth)
    )


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _stated_device_kind(node: ast.expr) -> str:
    """The accelerator a setter's argument names ("" for the CPU or anything not stated):
    `"cuda"`, `"cuda:0"`, `torch.device("mps")`, `"torch.cuda.FloatTensor"`, `torch.cuda.FloatTensor`."""
    if isinstance(node, ast.Call) and _called_name(node) == "device" and node.args:
        node = node.args[0]
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        node = node.values[0]  # `f"cuda:{rank}"`
    if isinstance(node, ast.Attribute):
        text = ast.unparse(node)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    else:
        return ""
    if text.startswith("torch.cuda."):
        return "cuda"
    kind = text.split(":", 1)[0]
    return kind if kind in ("cuda", "mps", "xpu", "hpu", "npu") else ""


# what wraps a loader in a loop header: `enumerate(loader)`, `tqdm(loader, desc=...)`
_LOOP_WRAPPERS = frozenset({"enumerate", "tqdm", "iter"})
_MOVING_WORDS = frozenset({"to", "cuda", "device"})


def _unmoved_batches(
    params: list[str], nodes: list[ast.AST], sure: list[ast.AST]
) -> tuple[tuple[str, str, str, int], ...]:
    """(model, loader, batch, line) for a model parameter called, in a loop over a loader parameter
    that every call runs, on what the loop yields; none where the function moves or names a
    device anywhere (`.to(...)`, `.cuda()`, `device`: it may move batches in ways not followed)."""
    if _moves_or_names_a_device(nodes):
        return ()
    found: dict[tuple[str, str], tuple[int, str]] = {}
    for loop in sure:
        if not isinstance(loop, ast.For):
            continue
        source = loop.iter
        while isinstance(source, ast.Call) and isinstance(source.func, ast.Name) and source.func.id in _LOOP_WRAPPERS:
            source = source.args[0] if source.args else source
            if isinstance(source, ast.Call) and not source.args:
                break
        if not (isinstance(source, ast.Name) and source.id in params):
            continue
        yielded = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        for statement in loop.body:
            for call in ast.walk(statement):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                    continue
                model = call.func.id
                if model not in params or model == source.id:
                    continue
                values = [*call.args, *(k.value for k in call.keywords)]
                batches = [root_name(v) for v in values if not isinstance(v, ast.Starred)]
                batch = next((b for b in batches if b in yielded), None)
                if batch is not None:
                    key = (model, source.id)
                    found[key] = min(found.get(key, (call.lineno, batch)), (call.lineno, batch))
    return tuple(sorted((m, b, batch, line) for (m, b), (line, batch) in found.items()))


def _moves_or_names_a_device(nodes: list[ast.AST]) -> bool:
    for node in nodes:
        if isinstance(node, ast.Attribute) and node.attr in _MOVING_WORDS:
            return True
        if isinstance(node, (ast.Name, ast.arg)) and "device" in (node.id if isinstance(node, ast.Name) else node.arg):
            return True
        if isinstance(node, ast.keyword) and node.arg == "device":
            return True
    return False


def _host_inputs(params: list[str], nodes: list[ast.AST], sure: list[ast.AST]) -> tuple[tuple[str, str, str, int], ...]:
    """(model, factory, argument, line) for a model parameter called, where every call runs, on a
    tensor the function builds with a torch factory (directly, or through a name every
    assignment of which is one); none where it moves or names a device anywhere."""
    if _moves_or_names_a_device(nodes):
        return ()
    built: dict[str, list[str | None]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                    single = isinstance(target, ast.Name)
                    built.setdefault(name.id, []).append(_host_factory(node.value, params) if single else None)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
            target = node.target if not isinstance(node, ast.With) else None
            for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)) if target is not None else ():
                built.setdefault(name.id, []).append(None)
    factories = {name: kinds[0] for name, kinds in built.items() if kinds[0] is not None and len(set(kinds)) == 1}
    found: dict[str, tuple[int, str, str]] = {}
    for call in sure:
        model = _model_called(call, params)
        if model is None or not isinstance(call, ast.Call):
            continue
        for value in (*call.args, *(k.value for k in call.keywords)):
            if isinstance(value, ast.Starred):
                continue
            root = root_name(value, views_only=True)
            factory = factories.get(root) if root is not None else _host_factory(value, params)
            if factory is not None and root not in params:
                shown = root if root is not None else factory
                found[model] = min(found.get(model, (call.lineno, factory, shown)), (call.lineno, factory, shown))
                break
    return tuple(sorted((model, factory, shown, line) for model, (line, factory, shown) in found.items()))


# methods of a model that run its forward on what they are handed
_RUNS_FORWARD = frozenset({"forward", "predict", "generate", "sample", "encode", "decode", "infer", "inference"})


def _model_called(call: ast.AST, params: list[str]) -> str | None:
    """The parameter a call runs as a model: `model(x)`, `model.predict(x)`."""
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _RUNS_FORWARD:
        func = func.value
    return func.id if isinstance(func, ast.Name) and func.id in params else None


def _host_factory(value: ast.expr, params: list[str]) -> str | None:
    """`torch.zeros(...)`, `torch.from_numpy(x).float()`: the torch factory that builds the value
    on the host (no `device=`; a data factory not handed a parameter, which may be a tensor)."""
    while (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in PRESERVING_METHODS
    ):
        value = value.func.value
    if not (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == "torch"
        and value.func.attr in FACTORIES
    ):
        return None
    first = value.args[0] if value.args else None
    if first is not None and root_name(first) in params:
        return None
    return f"torch.{value.func.attr}"


_HOST_COPIES = frozenset({"cpu", "numpy", "tolist", "item"})


def names_kept_on_device(expr: ast.AST) -> set[str]:
    """The names whose values `expr` may carry as they are: not those read only through a host
    copy (`torch.bincount(idx.cpu())`, `loss.item()`, `t.to("cpu")`)."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            to_cpu = method == "to" and any(isinstance(a, ast.Constant) and a.value == "cpu" for a in node.args)
            if method in _HOST_COPIES or to_cpu:
                continue
        if isinstance(node, ast.Name):
            found.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return found


def carried_parameters(
    nodes: list[ast.AST], params: tuple[str, ...], unpacked_calls: bool = True
) -> dict[str, set[str]]:
    """For each name of a function, the parameters it is computed from (`images, labels =
    batch`, `x = batch["x"]`): one pass in line order; without `unpacked_calls`, the parts
    unpacked from a call's result carry nothing (which part comes from which argument is
    unknown: `img_pad, G, pads = pad(img, p)`)."""
    carries: dict[str, set[str]] = {p: {p} for p in params}
    for assign in sorted((n for n in nodes if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
        unpacked = isinstance(assign.value, ast.Call) and any(
            isinstance(t, (ast.Tuple, ast.List)) for t in assign.targets
        )
        sources = (
            set()
            if unpacked and not unpacked_calls
            else {n.id for n in ast.walk(assign.value) if isinstance(n, ast.Name)}
        )
        fed_by = set().union(*(carries.get(name, set()) for name in sources))
        for target in assign.targets:
            for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                if name.id not in params:
                    carries[name.id] = fed_by
    return carries


def _mixes(params: tuple[str, ...], nodes: list[ast.AST]) -> tuple[tuple[str, str, int], ...]:
    """See `ParameterUses.mixes`: arithmetic (and indexing) of a parameter's values with a name
    the function neither takes nor binds."""
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    carries = carried_parameters(nodes, params)
    below: dict[int, frozenset[str]] = {}  # the names under each expression, each walked once
    found: dict[tuple[str, str], int] = {}
    for node in nodes:
        if isinstance(node, ast.BinOp):
            sides = [node.left, node.right]
        elif isinstance(node, ast.Subscript):
            sides = [node.value, node.slice]
        else:
            continue
        for mine, other in ((sides[0], sides[1]), (sides[1], sides[0])):
            free = root_name(other)
            if free is None or free in bound or free in params or _moves_somewhere(other):
                continue
            carried = {p for name in _names_below(mine, below) for p in carries.get(name, ())}
            for param in carried:
                found[(param, free)] = min(found.get((param, free), node.lineno), node.lineno)
    return tuple(sorted((p, x, line) for (p, x), line in found.items()))


def _names_below(node: ast.AST, memo: dict[int, frozenset[str]]) -> frozenset[str]:
    found = memo.get(id(node))
    if found is None:
        if isinstance(node, ast.Name):
            found = frozenset((node.id,))
        else:
            found = frozenset().union(*(_names_below(child, memo) for child in ast.iter_child_nodes(node)))
        memo[id(node)] = found
    return found


def _moves_somewhere(value: ast.expr) -> bool:
    """`MEAN.to(x.device)`, `STD.cuda()`, `w.type_as(x)`: a copy put where it is used."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("to", "cuda", "type_as")
        for n in ast.walk(value)
    )


_BRANCHES = (ast.If, ast.IfExp, ast.Try, ast.TryStar, ast.BoolOp, ast.Match, ast.While)


def _unconditional(nodes: list[ast.AST]) -> list[ast.AST]:
    """The nodes not under a branch (`if`, conditional expression, `try`, `and`/`or`, `match`,
    `while`): those every call runs, as far as the text shows."""
    inside: set[int] = set()
    for node in nodes:
        if isinstance(node, _BRANCHES) and id(node) not in inside:
            inside.update(id(child) for child in ast.walk(node))
    return [node for node in nodes if id(node) not in inside]


def _opaque_parameters(params: set[str], nodes: list[ast.AST], tensor_tests: bool = True) -> set[str]:
    """Parameters the function tests, rebinds or converts itself: what happens to them after is
    the function's own business (`tensor_tests`: also a test that one is a tensor,
    `isinstance(x, torch.Tensor)`)."""
    opaque: set[str] = set()
    # `image = image.clamp(0, 1).mul(255)`: the same tensor's values, where it was
    kept_in_place = {
        id(node.targets[0])
        for node in nodes
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in params
        and _derived_where_it_is(node.value, node.targets[0].id)
    }
    for node in nodes:
        if isinstance(node, ast.Name) and node.id in params and isinstance(node.ctx, (ast.Store, ast.Del)):
            if id(node) not in kept_in_place:
                opaque.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _GUARDS:
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Name) and first.id in params and (tensor_tests or not _tensor_test(node)):
                opaque.add(first.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cpu":
            root = root_name(node.func.value)
            if root in params:
                opaque.add(root)
    return opaque


def _tensor_test(call: ast.Call) -> bool:
    """`isinstance(x, torch.Tensor)`, `isinstance(x, (Tensor, float))`: a test of a tensor type."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "isinstance" and len(call.args) == 2):
        return False
    kinds = call.args[1].elts if isinstance(call.args[1], ast.Tuple) else [call.args[1]]
    return any((dotted(k) or "").rsplit(".", 1)[-1] == "Tensor" for k in kinds)


# methods that keep a tensor's values where they are but may put them elsewhere (`x.type_as(y)`)
_MAY_PLACE = frozenset({"type", "type_as"})


def _derived_where_it_is(value: ast.expr, name: str) -> bool:
    """`value` computes only from `name`, numbers and torch's device-keeping methods
    (`name.clamp(0, 1).mul(255).round()`, `(name + 1) / 2`, `name[0].detach()`): a rebinding of a
    parameter to it leaves what the parameter carries where it was."""
    if isinstance(value, ast.Name):
        return value.id == name
    if isinstance(value, ast.Constant):
        return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    if isinstance(value, ast.UnaryOp):
        return _derived_where_it_is(value.operand, name)
    if isinstance(value, ast.BinOp):
        sides = (value.left, value.right)
        return all(_derived_where_it_is(v, name) or _number(v) for v in sides) and not all(_number(v) for v in sides)
    if isinstance(value, ast.Subscript):
        return _derived_where_it_is(value.value, name) and not any(
            isinstance(n, ast.Name) for n in ast.walk(value.slice)
        )
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        method = value.func.attr
        if method not in PRESERVING_METHODS or method in _MAY_PLACE:
            return False
        arguments = [*value.args, *(k.value for k in value.keywords)]
        return _derived_where_it_is(value.func.value, name) and all(_number(a) for a in arguments)
    return False


def _number(value: ast.expr) -> bool:
    if isinstance(value, ast.UnaryOp):
        value = value.operand
    return (
        isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    )


def _unpacked_parts(params: list[str], nodes: list[ast.AST]) -> dict[str, str]:
    """Local name -> `param[i]` for each name a parameter handed as a list or tuple is unpacked
    into (`net_g, net_d = nets`), where nothing else binds or tests that name: what is read on
    it is read on the caller's `i`-th element."""
    parts: dict[str, str] = {}
    for node in nodes:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], (ast.Tuple, ast.List))
            and isinstance(node.value, ast.Name)
            and node.value.id in params
            and all(isinstance(e, ast.Name) for e in node.targets[0].elts)
        ):
            for index, element in enumerate(node.targets[0].elts):
                assert isinstance(element, ast.Name)
                parts[element.id] = f"{node.value.id}[{index}]"
    stores = [n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))]
    tested = {
        node.args[0].id
        for node in nodes
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _GUARDS
        and node.args
        and isinstance(node.args[0], ast.Name)
    }
    return {name: part for name, part in parts.items() if stores.count(name) == 1 and name not in tested}


def _unwrapping_reads(
    params: tuple[str, ...], opaque: set[str], nodes: list[ast.AST], sure: list[ast.AST]
) -> list[tuple[str, str, int]]:
    """(parameter, attribute, line) for a parameter whose first binding in the function, on every
    call, is an attribute chain of itself (`model = model.model.module`): the chain's first
    attribute is read on what the caller handed in, though the parameter is rebound (unless the
    function also tests the parameter: it deals with what it is given)."""
    candidates = []
    for node in sure if opaque else ():
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        chain = node.value
        while isinstance(chain, ast.Attribute) and isinstance(chain.value, ast.Attribute):
            chain = chain.value
        name = node.targets[0].id
        if name in opaque and isinstance(chain, ast.Attribute) and isinstance(chain.value, ast.Name):
            if chain.value.id == name and not chain.attr.startswith("_"):
                candidates.append((node, name, chain.attr))
    if not candidates:
        return []
    stores = [n for n in nodes if isinstance(n, ast.Name) and n.id in opaque and isinstance(n.ctx, ast.Store)]
    tested = _opaque_parameters(
        set(params), [n for n in nodes if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))]
    )
    return [
        (name, attr, node.lineno)
        for node, name, attr in candidates
        if name not in tested
        and (node.lineno, node.col_offset) == min((n.lineno, n.col_offset) for n in stores if n.id == name)
    ]


def _reads(
    params: list[str], nodes: list[ast.AST], parts: dict[str, str] | None = None
) -> tuple[tuple[str, str, int], ...]:
    """The first read of each public attribute on each parameter (or on a part unpacked from
    one, `parts`: recorded as `nets[0]`), unless the function also sets that attribute on it.
    `model.steps += 1` reads the attribute before it sets it, so it is a read and no setting."""
    parts = parts or {}
    updated = {id(node.target) for node in nodes if isinstance(node, ast.AugAssign)}
    written = {
        (parts.get(node.value.id, node.value.id), node.attr)
        for node in nodes
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and isinstance(node.ctx, ast.Store)
        and id(node) not in updated
    }
    first: dict[tuple[str, str], int] = {}
    for node in nodes:
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if not isinstance(node.ctx, ast.Load) and id(node) not in updated:
            continue
        key = (parts.get(node.value.id, node.value.id), node.attr)
        if (node.value.id in params or node.value.id in parts) and not key[1].startswith("_") and key not in written:
            first[key] = min(first.get(key, node.lineno), node.lineno)
    return tuple(sorted((p, a, line) for (p, a), line in first.items()))


def _to_numpy(params: list[str], nodes: list[ast.AST]) -> tuple[tuple[str, int], ...]:
    found: dict[str, int] = {}
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "numpy"
            and not node.args
            and not node.keywords
        ):
            root = root_name(node.func.value, views_only=True)
            if root in params:
                found[root] = min(found.get(root, node.lineno), node.lineno)
    return tuple(sorted(found.items()))


def root_name(node: ast.expr, views_only: bool = False) -> str | None:
    """The name under a chain of attributes, subscripts and method calls (`t[0].detach()` ->
    `t`); with `views_only`, only through what keeps the tensor where it is (`.data`, indexing,
    `detach`, casts, reshapes)."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Attribute):
            if views_only and node.attr != "data":
                return None
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if views_only and node.func.attr not in PRESERVING_METHODS:
                return None
            node = node.func.value
        else:
            return None


def _returns_moved(function: ast.FunctionDef, params: tuple[str, ...], nodes: list[ast.AST]) -> str | None:
    """The parameter every `return` hands back as a moved copy (or unchanged), when the function
    changes it nowhere in place and never ends without a `return`."""
    returns = [node.value for node in nodes if isinstance(node, ast.Return)]
    last = function.body[-1] if function.body else None
    if not returns or any(value is None for value in returns) or not isinstance(last, (ast.Return, ast.Raise)):
        return None
    for param in params:
        copies = [value for value in returns if value is not None and _moved_copy(value, param)]
        unchanged = [value for value in returns if isinstance(value, ast.Name) and value.id == param]
        if copies and len(copies) + len(unchanged) == len(returns) and not _changed_in_place(param, nodes):
            return param
    return None


def _moved_copy(value: ast.expr, param: str) -> bool:
    """`param.to(...)`/`param.cuda()`, or a comprehension over `param` (its items or values)
    whose every element is moved: a new object, the caller's `param` left where it was."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _MOVES:
        return isinstance(value.func.value, ast.Name) and value.func.value.id == param and not _to_cpu(value)
    if isinstance(value, ast.Call) and _rebuilder(value.func) and len(value.args) == 1:
        value = value.args[0]
    if isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) and len(value.generators) == 1:
        source = value.generators[0].iter
        if isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute):
            if source.func.attr not in _CONTAINER_VIEWS or source.args:
                return False
            source = source.func.value
        element = value.value if isinstance(value, ast.DictComp) else value.elt
        return isinstance(source, ast.Name) and source.id == param and _moved_element(element)
    return False


def _moved_element(element: ast.expr) -> bool:
    """`v.to(device)`, or `v.to(device) if torch.is_tensor(v) else v` (what is not moved passes
    through unchanged)."""
    if isinstance(element, ast.IfExp):
        branches = (element.body, element.orelse)
        return any(_moved_element(b) for b in branches) and all(
            _moved_element(b) or isinstance(b, ast.Name) for b in branches
        )
    return (
        isinstance(element, ast.Call)
        and isinstance(element.func, ast.Attribute)
        and element.func.attr in _MOVES
        and not _to_cpu(element)
    )


def _rebuilder(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in _REBUILDERS
    return isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "type"


def _to_cpu(call: ast.Call) -> bool:
    first = call.args[0] if call.args else None
    return isinstance(first, ast.Constant) and first.value == "cpu"


def _changed_in_place(param: str, nodes: list[ast.AST]) -> bool:
    for node in nodes:
        if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            if root_name(node) == param:
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _IN_PLACE:
            if root_name(node.func.value) == param:
                return True
    return False
