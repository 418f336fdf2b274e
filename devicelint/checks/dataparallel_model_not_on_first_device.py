from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import libcst as cst

from devicelint.analysis.argument_places import arguments_passed, calls_of, passed_for
from devicelint.analysis.devices import device_argument, indexed, int_value
from devicelint.analysis.model_events import (
    Device,
    WrapperSite,
    built_on_cpu,
    chain_base,
    class_history,
    device_ids_first,
    history,
    resolver_for,
    returned_device,
    returned_wrapper_sites,
    scope_facts,
    scope_of,
    set_device_called,
    short,
    usage_after,
    wrapper_chain_moves,
    wrapper_sites,
)
from devicelint.analysis.model_events.forced_cpu import forced_cpu_branch, guarded_against
from devicelint.analysis.model_events.scopes import REBOUND, set_device_calls
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class DataParallelModelNotOnFirstDevice(Rule):
    """
    ## What it does
    Flags `nn.DataParallel(model, device_ids=[...])` whose model is not on `device_ids[0]`:
    a model built in the same scope and never moved to a GPU, a model moved to another GPU
    (`model.cuda(1)` with `device_ids=[0, 1]`), or `model.cuda()` / `model.to("cuda")`, which
    lands on the current device (cuda:0 unless `torch.cuda.set_device` changed it) while
    `device_ids` starts elsewhere. Without `device_ids`, DataParallel uses every GPU starting
    at cuda:0, so a model moved to another GPU is flagged too, and one moved to a GPU whose
    index is chosen at run time (`model.cuda(args.gpu)`, `.to(f"cuda:{ids[0]}")`). Also flags `device_ids` taken
    from the command line or a config (`device_ids=args.gpus`) for a model moved with `.cuda()`
    in a file that never sets the current device, and `device_ids` parsed from the same value
    the code writes to `CUDA_VISIBLE_DEVICES` (physical ids, while the visible GPUs are
    renumbered from 0). Where every `torch.cuda.set_device(...)` of the file names one literal
    GPU, `.cuda()`/`"cuda"` is that GPU (`set_device("cuda:1")`, then a builder moving the model to
    the `"cuda"` its caller passes and wrapping it without `device_ids`), as long as the wrapper is
    run where the function leaves it (every caller of a builder that returns it keeps it unmoved).

    ## Why it is a bug on a GPU
    DataParallel keeps the master copy of the model on `device_ids[0]` and broadcasts it from
    there on each forward pass. The first forward raises `RuntimeError: module must have its
    parameters and buffers on device cuda:1 (device_ids[0]) but found one of them on device:
    cuda:0`, typically minutes into a job, after data loading and set-up.

    ## Example
    ```python
    model = Net()
    model.cuda()
    model = nn.DataParallel(model, device_ids=[1, 2])
    ```

    ## Use instead
    ```python
    model = Net().to("cuda:1")
    model = nn.DataParallel(model, device_ids=[1, 2])
    ```

    ## Fix safety
    No fix: the right device may be `device_ids[0]`, or `device_ids` may be what is wrong.

    ## Known limits
    Only literal devices and `device_ids` are compared (`[1, 2]`, `range(2)`, a name bound
    once to one of those); `device_ids=[args.gpu]` is checked only for a model never moved
    or moved with `.cuda()` when no `torch.cuda.set_device` appears in the file; run-time ids
    are recognised by their root name (`args`, `opt`, `cfg`, `config`, ...), and ids counted
    with `range(...)` are taken to start at 0.
    "Never moved" is reported only for a model built in the same function from a class of the
    same file or from `torch.nn`/`torchvision.models`, never passed to other code, and whose
    wrapper is called in that function or in a plain function of the file that it is handed to
    (`run(net, args)` calling `net(inputs)`, followed two calls deep). Moves made through aliases are not followed. A model
    returned by a builder function of the file counts with the device the builder moved it to
    (`model.to("cuda:1"); return model`), and `self.model` moved in `__init__` and wrapped in
    `setup()` with the moves of `__init__`. A builder of the file that wraps a CPU model it
    built in `DataParallel` without `device_ids` and returns it unmoved is reported when its
    caller calls the wrapper without moving it, in a function that moves its inputs to a GPU.
    A model moved to a device name that the program's own switch sets to the CPU (`if
    args.force_cpu: device = torch.device("cpu")`, in the wrapping function) is reported when no
    `if` around the wrapper tests that switch, the device or the GPUs (`torch.cuda`, `n_gpu`,
    `device_count`): DataParallel does nothing on a machine without CUDA, but with GPUs visible it
    still scatters to them; a CPU chosen because no GPU is available is not reported.
    """

    code = "DL202"
    name = "dataparallel-model-not-on-first-device"
    summary = "DataParallel needs the model on `device_ids[0]` before the first forward pass."
    message = "`{call}` needs the model on {first} (`device_ids[0]`), but `{model}` {where}; {advice}"
    tokens = ("DataParallel",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for site in wrapper_sites(ctx):
            if site.kind != "DataParallel" or site.wrapped is None:
                continue
            if site.device_ids is not None and type(site.device_ids) is cst.Name and site.device_ids.value == "None":
                continue
            violation = self._check_site(ctx, site)
            if violation is not None:
                yield violation
        for site in returned_wrapper_sites(ctx):
            violation = self._returned_unplaced(ctx, site)
            if violation is not None:
                yield violation

    def _returned_unplaced(self, ctx: FileContext, site: WrapperSite) -> Violation | None:
        """`model = load_network(path)` where the builder wraps a model it built on the CPU in
        `DataParallel` (every GPU from cuda:0) and returns it unmoved, and the caller, which moves
        its inputs to a GPU by hand, calls the wrapper without moving it."""
        inner = site.returned
        if inner is None or inner.kind != "DataParallel" or inner.wrapped is None or not _is_none(inner.device_ids):
            return None
        base, inline = chain_base(resolver_for(ctx, inner.call), inner.wrapped)
        var = dotted_name(base)
        if var is None or "." in var or inline is not None or wrapper_chain_moves(ctx, inner):
            return None
        facts = history(ctx, var, inner.call)
        if facts.escaped or facts.sub_moves or facts.moves or not built_on_cpu(ctx, base, facts):
            return None
        if inner.target is not None and usage_after(ctx, inner.target, inner.call).moves:
            return None
        if site.target is None:
            return None
        usage = usage_after(ctx, site.target, site.call)
        if usage.escaped or usage.moves or not usage.called or not _moves_to_gpu(ctx, site.call):
            return None
        return self.violation(
            inner.call,
            call=short(ctx, inner.call),
            first="cuda:0",
            model=var,
            where=(
                f"is built on the CPU and never moved: `{short(ctx, site.call)}` returns the wrapper unmoved and "
                "its caller runs it on inputs it moved to the GPU"
            ),
            advice=f'move it with `{var}.to("cuda:0")` before wrapping it',
        )

    def _check_site(self, ctx: FileContext, site: WrapperSite) -> Violation | None:
        resolver = resolver_for(ctx, site.call)
        explicit = site.device_ids is not None
        if explicit:
            hidden = _ids_from_visibility(ctx, site)
            if hidden is not None:
                return self.violation(
                    site.call,
                    call=short(ctx, site.call),
                    first="the first visible GPU",
                    model=short(ctx, site.wrapped) if site.wrapped is not None else "the model",
                    where=(
                        f"sits on GPUs that `CUDA_VISIBLE_DEVICES = {hidden}` renumbers from 0, while `device_ids` are the "
                        f"physical ids parsed from the same `{hidden}`: they name the wrong (or no) GPU"
                    ),
                    advice="pass the renumbered ids `list(range(len(...)))` (or `None` for every visible GPU)",
                )
        first = device_ids_first(resolver, site.device_ids) if explicit else Device("cuda:0", True, "cuda")
        base, inline = chain_base(resolver, site.wrapped)  # type: ignore[arg-type]  # None (a returned wrapper) comes back as (None, None)
        var = dotted_name(base)
        moves = [(inline, site.wrapped)] if inline is not None else []
        facts = None
        built = base if type(base) is cst.Call else None
        if var is not None:
            facts = history(ctx, var, site.call)
            if facts.bind is None:  # `self.model` built in `__init__`, wrapped in `setup()`
                facts = class_history(ctx, var, site.call) or facts
            if facts.escaped or facts.sub_moves:
                return None
            moves = facts.moves + moves
            if facts.bind is not None:
                bound = chain_base(resolver, facts.bind)[0]
                built = bound if type(bound) is cst.Call else None
        placed = returned_device(ctx, built) if built is not None else None
        if placed is not None:  # `model = build()` where `build` returns `Net().to("cuda:1")`
            moves = [placed] + moves
        moves += wrapper_chain_moves(ctx, site)
        usage = usage_after(ctx, site.target, site.call) if site.target else None
        model = var or short(ctx, base)
        if usage is not None and not usage.called_first:  # (moves after the first call come too late)
            if usage.escaped and not (usage.only_returned and moves and _callers_keep(ctx, site.call)):
                # handed on: only a move made before that counts
                return (
                    self._current_device_vs_chosen_ids(ctx, site, moves, model) if explicit and first is None else None
                )
            moves += usage.moves
        forced = self._forced_cpu(ctx, site, moves, model)
        if forced is not None:
            return forced
        if moves:
            returned = (usage is not None and usage.only_returned) or _returns(site.statement)
            callers_keep = not returned or _callers_keep(ctx, site.call)
            return self._wrong_device(ctx, site, first, moves, model, explicit, callers_keep)
        if not explicit or usage is None or not usage.called:
            return None
        if not built_on_cpu(ctx, base, facts):
            return None
        label = first.label() if first is not None else f"`{ctx.code_for(_first_element(site.device_ids))}`"
        return self.violation(
            site.call,
            call=short(ctx, site.call),
            first=label,
            model=model,
            where="is never moved off the CPU",
            advice=f"call `{model}.to({_device_code(first)})` before wrapping it",
        )

    def _forced_cpu(
        self, ctx: FileContext, site: WrapperSite, moves: Sequence[tuple[Device, cst.CSTNode | None]], model: str
    ) -> Violation | None:
        """`model.to(device)` (or `DP(model).to(device)`) where the program's own switch sets
        `device` to the CPU (`if args.force_cpu:`) and nothing keeps that path from wrapping:
        DataParallel still scatters to the visible GPUs."""
        for device, node in moves:
            call = node.value if type(node) is cst.Assign else node
            if device.literal or type(call) is not cst.Call:
                continue
            arg = device_argument(call)
            branch = forced_cpu_branch(ctx, arg) if type(arg) is cst.Name else None
            if branch is None or guarded_against(ctx, site.call, branch, arg):  # type: ignore[arg-type]  # a Name when branch is set
                continue
            ids = site.device_ids
            if _is_none(ids):
                first = "cuda:0"
            elif type(ids) in (cst.List, cst.Tuple):
                first = f"`{short(ctx, _first_element(ids))}`"
            else:
                first = f"`{short(ctx, ids)}[0]`"  # type: ignore[arg-type]  # not None here
            test = short(ctx, branch.test)
            return self.violation(
                site.call,
                call=short(ctx, site.call),
                first=first,
                model=model,
                where=f"is on the CPU when `{test}` sets `{ctx.code_for(arg)}` to it, and the GPUs stay visible to DataParallel",  # type: ignore[arg-type]
                advice=f"wrap it only on the GPU path (not when `{test}`)",
            )
        return None

    def _wrong_device(
        self,
        ctx: FileContext,
        site: WrapperSite,
        first: Device | None,
        moves: Sequence[tuple[Device, cst.CSTNode | None]],
        model: str,
        explicit: bool,
        callers_keep: bool = True,
    ) -> Violation | None:
        """`callers_keep`: the wrapper is run where this function leaves it (not returned, or every
        caller keeps it unmoved); only then do a device a caller passes and the current device a
        literal `set_device` chose count."""
        if first is None:
            return self._current_device_vs_chosen_ids(ctx, site, moves, model) if explicit else None
        shifted = set_device_called(ctx)
        current = _set_current_device(ctx) if shifted and callers_keep else None
        wrong = None
        for device, node in moves:
            if callers_keep:
                device = _through_callers(ctx, node, device)
            if device.is_current and current is not None and current.type == device.type:
                # every `set_device` of the file names one GPU, so the current device is that one
                if current.index == first.index:
                    return None
                wrong = wrong or (
                    current,
                    f'is moved with `"{device.text}"` to the current device, which `torch.cuda.set_device` makes '
                    f"{current.text},",
                )
                continue
            if not device.literal:
                if explicit or device.type != "cuda":
                    return None
                # `model.cuda(args.gpu)`, `.to(f"cuda:{ids[0]}")`: a GPU picked at run time, while
                # DataParallel without `device_ids` starts at cuda:0 whatever was picked
                wrong = wrong or (device, f"is moved to `{device.text}`, a GPU chosen at run time,")
                continue
            if device.is_current:
                if shifted:
                    return None
                if first.index == 0:
                    return None
                wrong = wrong or (device, 'is moved with `.cuda()`/`"cuda"` to the current device, cuda:0')
                continue
            if device.type == first.type and device.index == first.index:
                return None
            if not explicit and device.type != "cuda":
                return None
            wrong = wrong or (device, f"is moved to {device.text}")
        if wrong is None:
            return None
        where = wrong[1] if explicit else wrong[1] + " and `device_ids` defaults to every GPU from cuda:0"
        return self.violation(
            site.call,
            call=short(ctx, site.call),
            first=first.label(),
            model=model,
            where=where,
            advice=(
                f"move it with `{model}.to({_device_code(first)})` before wrapping it"
                if wrong[0].literal
                else f"pass `device_ids` that start with `{wrong[0].text}` (or move it to cuda:0)"
            ),
        )

    def _current_device_vs_chosen_ids(
        self,
        ctx: FileContext,
        site: WrapperSite,
        moves: Sequence[tuple[Device, cst.CSTNode | None]],
        model: str,
    ) -> Violation | None:
        """`DataParallel(model, device_ids=args.gpus).cuda()`: the model goes to the current device
        (cuda:0, nothing sets it) while the ids are chosen at run time and need not start at 0."""
        if not moves or not all(device.literal and device.is_current and device.type == "cuda" for device, _ in moves):
            return None
        ids = site.device_ids
        if (
            ids is None or _is_none(ids) or set_device_called(ctx) or not _chosen_at_run_time(ctx, site)
        ):  # any set-up, even under `if args.gpus:`
            return None
        return self.violation(
            site.call,
            call=short(ctx, site.call),
            first=f"`{short(ctx, _first_element(ids))}`"
            if type(ids) in (cst.List, cst.Tuple)
            else f"`{short(ctx, ids)}[0]`",
            model=model,
            where=(
                'is moved with `.cuda()`/`"cuda"` to the current device, cuda:0 (nothing calls `torch.cuda.set_device`), '
                f"while `device_ids={short(ctx, ids)}` is chosen at run time and need not start at GPU 0"
            ),
            advice="call `torch.cuda.set_device(device_ids[0])` before moving it, or move it to `device_ids[0]`",
        )


def _returns(statement: cst.CSTNode) -> bool:
    """`return nn.DataParallel(net)`: the wrapper goes straight back to the caller."""
    return type(statement) is cst.SimpleStatementLine and any(type(s) is cst.Return for s in statement.body)


def _callers_keep(ctx: FileContext, at: cst.CSTNode) -> bool:
    """The function holding `at` returns the wrapper, and every call of it in the file binds the
    result to a name or `self.<attr>` that nothing in the file moves afterwards (the wrapper is run
    where the function left it)."""
    function = ctx.index.enclosing_function(at)
    found = calls_of(ctx, function) if function is not None else None
    if not found or not found[0]:
        return False
    for call in found[0]:
        assign = ctx.index.parent(call)
        if type(assign) is not cst.Assign or len(assign.targets) != 1 or assign.value is not call:
            return False
        target = dotted_name(assign.targets[0].target)
        if target is None:
            return False
        if target.startswith("self."):
            attr = target.split(".", 1)[1]
            if "." in attr or re.search(
                r"\bself\." + re.escape(attr) + r"\s*(=|\.\s*(to|cuda|cpu)\s*\()",
                ctx.source.replace(ctx.code_for(assign), ""),
            ):
                return False
            continue
        later = usage_after(ctx, target, call)
        if later.moves or later.escaped:
            return False
    return True


def _through_callers(ctx: FileContext, node: cst.CSTNode | None, device: Device) -> Device:
    """The device a move names, where it is a parameter of the moving function that the body
    never rebinds (`net.to(device)` in `load_network(path, device)`): what every call of that
    function in the file passes, when that is one literal device (`load_network(w, self.device)`
    with `self.device = "cuda"`)."""
    if device.literal or node is None:
        return device
    call = node.value if type(node) is cst.Assign else node
    while type(call) is cst.Call and type(call.func) is cst.Attribute:
        if resolver_for(ctx, call).move(call) is not None:
            break
        call = call.func.value
    if type(call) is not cst.Call:
        return device
    arg = device_argument(call)
    if type(arg) is not cst.Name:
        return device
    passed = passed_for(ctx, arg)
    if not passed:
        return device
    found = {resolver_for(ctx, value).device(value) for value in passed}
    only = found.pop() if len(found) == 1 else None
    return only if only is not None and only.literal else device


def _set_current_device(ctx: FileContext) -> Device | None:
    """The GPU the file makes current, when every `torch.cuda.set_device(...)` of the file names
    the same literal one (`set_device("cuda:1")`, `set_device(1)`); None otherwise."""
    found: set[Device] = set()
    for call in set_device_calls(ctx):
        if ctx.qualified_name(call.func) != "torch.cuda.set_device" or len(call.args) != 1:
            return None
        value = call.args[0].value
        number = int_value(value)
        device = indexed("cuda", number) if number is not None else resolver_for(ctx, call).device(value)
        if not device.literal or device.index is None:
            return None
        found.add(device)
    return found.pop() if len(found) == 1 else None


def _moves_to_gpu(ctx: FileContext, at: cst.CSTNode) -> bool:
    """The function of `at` moves some tensor to a CUDA device by hand (`x.to(device)` with a
    CUDA device, `x.cuda()`)."""
    resolver = resolver_for(ctx, at)
    for node in scope_facts(ctx, scope_of(ctx, at)).nodes:
        if type(node) is cst.Call:
            moved = resolver.move(node)
            if moved is not None and moved[1].type == "cuda":
                return True
    return False


def _is_none(node: cst.BaseExpression | None) -> bool:
    return node is None or (type(node) is cst.Name and node.value == "None")


def _chosen_at_run_time(ctx: FileContext, site: WrapperSite) -> bool:
    """`device_ids` comes from the command line or a config (`args.gpus`, `[args.gpu]`,
    `list(cfg.GPUS)`), not from a count of the visible GPUs (`range(n)`)."""
    values = _expanded(ctx, site.device_ids, site.call)  # type: ignore[arg-type]  # callers checked device_ids is set
    if any("range(" in ctx.code_for(v) or "device_count" in ctx.code_for(v) for v in values):
        return False
    for value in values:
        for node in ctx.index.walk(value):
            if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "parse_args":
                return True
            if type(node) is cst.Attribute and type(node.value) is cst.Name:
                root = node.value.value
                if root in _CONFIG_ROOTS or _is_parameter(ctx, node.value):
                    return True  # `args.gpus`, or `cfg.gpu_ids` with `cfg` a parameter however named
    return False


def _is_parameter(ctx: FileContext, name: cst.Name) -> bool:
    function = ctx.index.enclosing_function(name)
    return function is not None and scope_facts(ctx, function).assigned.get(name.value) == [REBOUND]


# Where command-line options and configs live in training scripts.
_CONFIG_ROOTS = frozenset({"args", "opt", "opts", "cfg", "config", "conf", "hparams", "flags", "FLAGS", "options"})
_VISIBILITY = "CUDA_VISIBLE_DEVICES"


def _expanded(
    ctx: FileContext, node: cst.BaseExpression, at: cst.CSTNode, callers: bool = True
) -> list[cst.BaseExpression]:
    """The expression, what a name in it is bound to once in its function (one level), and, for
    a parameter, what the file's calls of the function pass for it (with their own bindings)."""
    found = [node]
    root = scope_of(ctx, at)
    assigned = scope_facts(ctx, root).assigned
    for sub in ctx.index.walk(node):
        if type(sub) is not cst.Name:
            continue
        values = assigned.get(sub.value)
        if values is not None and len(values) == 1 and values[0] is not REBOUND:
            found.append(values[0])
        elif callers and values == [REBOUND] and type(root) is cst.FunctionDef:
            for argument in arguments_passed(ctx, root, sub.value):
                found.extend(_expanded(ctx, argument, argument, callers=False))
    return found


def _ids_from_visibility(ctx: FileContext, site: WrapperSite) -> str | None:
    """The expression that both `device_ids` is parsed from and `CUDA_VISIBLE_DEVICES` is set
    to (`os.environ["CUDA_VISIBLE_DEVICES"] = args.device` with `device_ids=[int(i) for i in
    args.device.split(",")]`), unless the ids are renumbered (`range(len(...))`)."""
    if _VISIBILITY not in ctx.source:
        return None
    written = set()
    for node in ctx.index.of_type(cst.Assign):
        for target in node.targets:
            t = target.target
            if (
                type(t) is cst.Subscript
                and dotted_name(t.value) == "os.environ"
                and _VISIBILITY in ctx.code_for(t.slice[0])
            ):
                for value in _expanded(ctx, node.value, node):
                    key = dotted_name(value)
                    if key is not None and key not in ("None",):
                        written.add(key)
    if not written:
        return None
    values = _expanded(ctx, site.device_ids, site.call)  # type: ignore[arg-type]  # callers checked device_ids is set
    if any("range(" in ctx.code_for(v) for v in values):
        return None
    for value in values:
        for sub in ctx.index.walk(value):
            key = dotted_name(sub) if isinstance(sub, (cst.Name, cst.Attribute)) else None
            if key in written:
                return key
    return None


def _first_element(device_ids: cst.BaseExpression | None) -> cst.BaseExpression:
    if isinstance(device_ids, (cst.List, cst.Tuple)) and device_ids.elements:
        element = device_ids.elements[0]
        if type(element) is cst.Element:
            return element.value
    return device_ids  # type: ignore[return-value]  # the caller passes a `device_ids` value


def _device_code(first: Device | None) -> str:
    if first is None:
        return "device_ids[0]"
    return f'"{first.text}"'
