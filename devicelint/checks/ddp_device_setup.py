from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.argument_places import left_out_everywhere
from devicelint.analysis.default_device import CPU_DEFAULT, default_device_at
from devicelint.analysis.devices import device_argument
from devicelint.analysis.facts import file_facts
from devicelint.analysis.model_events import (
    APEX_DISTRIBUTED_DATA_PARALLEL,
    INIT_PROCESS_GROUP,
    Device,
    History,
    WrapperSite,
    built_on_cpu,
    built_where,
    chain_base,
    class_history,
    device_ids_first,
    history,
    module_functions,
    process_group_initialised,
    resolver_for,
    scope_facts,
    set_device_called,
    short,
    string_constants,
    strip_self_returning,
    usage_after,
    wrapper_chain_moves,
    wrapper_sites,
)
from devicelint.analysis.model_events.ranks import global_rank_indices
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_facts import DEVICE
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.training.torch_support import torch_support
from devicelint.analysis.vocabulary import DIST_COLLECTIVES
from devicelint.checks.removed_parallel_api import torch_in as _applies
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# A launcher or the script itself gives each process its own GPU through the environment.
_PER_PROCESS_VISIBILITY = ("CUDA_VISIBLE_DEVICES",)


@register
class DdpDeviceSetup(Rule):
    """
    ## What it does
    Flags `DistributedDataParallel` (under any alias, apex's `apex.parallel` one and
    OpenMMLab's `MMDistributedDataParallel` included) set up so that ranks do not each get
    their own GPU (`torch.compile(model)` and apex's `amp.initialize(model, optimizer)` return
    the model where it was):

    - `device_ids=[...]` given for a model built in the same function and never moved off the
      CPU (also without `device_ids` when the file uses the `nccl` backend);
    - `device_ids=[...]` given for a model that a builder returns (`model = build_model()`)
      and nothing moves, in a function that moves its other tensors to the GPU by hand
      (`x.to(device)`);
    - `device_ids=[...]` given for a model whose only move is `.to(p)` with `p` a parameter
      that defaults to `None`, is never rebound and that every call of the function in the file
      leaves out (`module.to(device)` in a constructor built without `device=`): it moves nothing;
    - a model moved to one fixed device in every process (`model.to("cuda:0")`,
      `model.cuda()` or `.to("cuda")` with no `torch.cuda.set_device(...)` on the way to the
      wrapper), so every rank runs on the same GPU, or sits on another GPU than its
      `device_ids=[local_rank]`;
    - a GPU model wrapped without `device_ids` when the project may run torch before 1.9
      (no `torch-version` configured and no torch floor of 1.9 or later in the project's
      pyproject.toml, setup.cfg, setup.py or requirements.txt, or a `torch-version` below 1.9);
    - `init_process_group("nccl")` in a file that passes per-rank `device_ids` but never calls
      `torch.cuda.set_device` (reported at `init_process_group`).
    - the global rank (`dist.get_rank()`, `int(os.environ["RANK"])`, or a name or `self.`
      attribute bound only to one of those) used as a GPU index: `torch.cuda.set_device(rank)`,
      `f"cuda:{rank}"`, `torch.device("cuda", rank)`, `device_ids=[rank]`, `.cuda(rank)`
      (reported once per function). This case needs no DDP in the file: FSDP, tensor-parallel
      inference over raw collectives and any other program with one process per GPU bind
      their GPU the same way (test files aside: their workers run on one machine).
    - a multi-process program without DDP (raw collectives, a benchmark, tensor-parallel
      code) whose `torch.distributed` collectives run on tensors of the index-less current
      device (`device="cuda"`, `.cuda()`) while nothing calls `torch.cuda.set_device` and
      `init_process_group` (NCCL, or a backend chosen at run time in a file that names
      `"nccl"`) gets no `device_id=` (reported at `init_process_group`).

    DDP over a CPU model without `device_ids` (the `gloo` backend) is not reported.

    ## Why it is a bug on a GPU
    With `device_ids`, DDP refuses a CPU module (`ValueError: DistributedDataParallel
    device_ids and output_device arguments only work with single-device/multiple-device GPU
    modules or CPU modules`), and NCCL cannot all-reduce CPU tensors. When every rank uses
    cuda:0, all processes crowd one GPU: it runs out of memory, NCCL fails or hangs with
    "Duplicate GPU detected", and the other GPUs idle. Before torch 1.9 a DDP without
    `device_ids` replicated its module over every visible GPU inside each process, which
    fails with "all tensors must be on devices[0]" for a model on the rank's GPU. Without
    `set_device`, a rank whose model sits on its own GPU still has cuda:0 as its current
    device, so NCCL barriers, `.cuda()`, `torch.cuda.*` calls and `torch.load` without
    `map_location` create a context and allocate memory on GPU 0 in every process (the DDP
    documentation asks each process to call `torch.cuda.set_device(i)`).

    ## Example
    ```python
    dist.init_process_group("nccl")
    model = Net().cuda()
    model = DDP(model)
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = Net().to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    No fix: the rank variable to use depends on the launcher.

    ## Known limits
    Launchers that give each process a single visible GPU (one GPU per SLURM task, or
    `CUDA_VISIBLE_DEVICES` set per process outside the file) make `.cuda()` right; files that
    set `CUDA_VISIBLE_DEVICES` in a string are not reported for it. "Never moved" needs the
    model to be built in the same function, from a class of the file or of
    `torch.nn`/`torchvision.models`, or by a builder function of the file (also `self.build()`)
    whose every `return` hands back such a model unmoved, or from any builder called without a
    device-like argument when the function moves other tensors to a GPU itself; and not handed
    to other code before wrapping. `self.model` built in `__init__` and wrapped in another method
    counts when no other method of the class (which has no base class) moves or hands it on. A `set_device` in another function counts when it is not under an `if` or a loop
    (an `if` whose other arms all raise, `else: raise ValueError(launcher)`, is the only way on);
    one in the wrapping function counts only on the way to the wrapper (also under an `if` with
    the same test as one around the wrapper: `if args.distributed:` twice). A model on the current
    device (`.cuda()`, `"cuda"`) wrapped with per-rank `device_ids` is judged only in a file that
    calls `init_process_group` itself: otherwise the distributed set-up, and the `set_device`
    it usually makes, lives in another module. The missing-`device_ids`
    case depends on `torch-version`, else on the torch floor the project declares (DL305 reads
    the same): set either to 1.9 or later to silence it; a file that itself
    uses an API of torch 1.9+ (`torch.compile`, `torch.amp`, `torch.accelerator`, FSDP...) is
    taken to need a newer torch. `init_process_group`
    with `device_id=` (torch 2.3+) is taken as binding the device. A global rank is recognised
    only through bindings in the same function (also of an attribute of an object there:
    `args.rank = int(os.environ["RANK"])`), or the class, for `self.rank`; one passed in
    as a parameter (`mp.spawn`'s rank, one node) is not reported.
    """

    code = "DL205"
    name = "ddp-device-setup"
    summary = "DistributedDataParallel needs each rank's model on that rank's own GPU."
    message = "`{call}` {problem}; {advice}"
    # The global-rank case runs in any multi-process program, with or without DDP.
    tokens = ("DistributedDataParallel", "get_rank", "RANK", "init_process_group")

    _ADVICE = (
        "call `torch.cuda.set_device(local_rank)`, move the model with `.to(local_rank)` and pass "
        "`device_ids=[local_rank]`"
    )

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        reported = False
        for site in wrapper_sites(ctx):
            if site.kind == "DistributedDataParallel" and site.wrapped is not None:
                violation = self._check_site(ctx, site)
                if violation is not None:
                    reported = True
                    yield violation
        if not reported:
            found = list(self._current_device_never_set(ctx))
            yield from found
            if not found and not any(site.kind == "DistributedDataParallel" for site in wrapper_sites(ctx)):
                yield from self._collectives_on_current_device(ctx)
        if "DistributedDataParallel" in ctx.source or not is_test_path(ctx.path):
            # without DDP, a test's workers are spawned on one machine, where the rank is the index
            yield from self._global_rank_as_index(ctx)

    def _global_rank_as_index(self, ctx: FileContext) -> Iterator[Violation]:
        """`set_device(rank)`, `f"cuda:{dist.get_rank()}"`, `device_ids=[rank]` with the global
        rank: one finding per function, at its first such use."""
        seen: set[int] = set()
        for use in global_rank_indices(ctx):
            scope = id(ctx.index.enclosing_function(use.where) or ctx.module)
            if scope in seen:
                continue
            seen.add(scope)
            rank = short(ctx, use.rank)
            yield self.violation(
                use.where,
                call=short(ctx, use.where),
                problem=(
                    f"uses the global rank `{rank}` as the GPU index on this node: ranks count the processes of every "
                    "node, so on every node but the first it names a GPU that does not exist (invalid device ordinal)"
                ),
                advice='index the GPU with `LOCAL_RANK` (`int(os.environ["LOCAL_RANK"])`) or `rank % torch.cuda.device_count()`',
            )

    def _current_device_never_set(self, ctx: FileContext) -> Iterator[Violation]:
        """`init_process_group("nccl")` in a file that gives DDP per-rank `device_ids` but never
        makes the rank's GPU the current device."""
        if set_device_called(ctx) or _visibility_per_process(ctx):  # file-wide: the set-up may be split
            return
        per_rank = [
            site
            for site in wrapper_sites(ctx)
            if site.kind == "DistributedDataParallel"
            and site.device_ids is not None
            and not _literal_list(site.device_ids)
            and not _is_none(site.device_ids)
        ]
        if not per_rank:
            return
        for call in ctx.index.of_type(cst.Call):
            if ctx.qualified_name(call.func) not in INIT_PROCESS_GROUP or not _nccl_call(ctx, call):
                continue
            if any(arg.keyword is not None and arg.keyword.value == "device_id" for arg in call.args):
                continue  # torch 2.3+: binds the process to its device
            yield self.violation(
                call,
                call=short(ctx, call),
                problem=(
                    f"sets up DDP (`{short(ctx, per_rank[0].call)}` passes per-rank `device_ids`), but nothing calls `torch.cuda.set_device`, so every rank's current device stays cuda:0: NCCL's "
                    "barriers and any `.cuda()`, `torch.cuda.*` call or map-location-free `torch.load` put a CUDA "
                    "context and memory on GPU 0 in every process"
                ),
                advice="call `torch.cuda.set_device(local_rank)` right after `init_process_group`",
            )

    def _collectives_on_current_device(self, ctx: FileContext) -> Iterator[Violation]:
        """A multi-process program without DDP (raw collectives, a benchmark, tensor-parallel
        code) that runs NCCL collectives on tensors of the index-less current device (`"cuda"`,
        `.cuda()`) and never makes the rank's GPU current: every rank works on cuda:0."""
        if set_device_called(ctx) or _visibility_per_process(ctx) or is_test_path(ctx.path):
            return
        inits = [
            call
            for call in ctx.index.of_type(cst.Call)
            if ctx.qualified_name(call.func) in INIT_PROCESS_GROUP
            and _may_use_nccl(ctx, call)
            and not any(arg.keyword is not None and arg.keyword.value == "device_id" for arg in call.args)
        ]
        if not inits:
            return
        facts = file_facts(ctx)
        for call in ctx.index.of_type(cst.Call):
            qualified = ctx.qualified_name(call.func) or ""
            if not qualified.startswith("torch.distributed.") or qualified.rsplit(".", 1)[-1] not in DIST_COLLECTIVES:
                continue
            current = [
                fact.device
                for fact in (facts.value(arg.value) for arg in call.args if not arg.star)
                if fact.kind == DEVICE and fact.device is not None and fact.device.is_current
            ]
            if not current:
                continue
            yield self.violation(
                inits[0],
                call=short(ctx, inits[0]),
                problem=(
                    f"starts a multi-process group whose collectives (`{short(ctx, call)}`) run on tensors of the current "
                    f"device `{current[0].text}`, but nothing calls `torch.cuda.set_device`, so that is cuda:0 in every "
                    'process: NCCL finds the same GPU in every rank and fails ("Duplicate GPU detected") or hangs, '
                    "and the other GPUs idle"
                ),
                advice=(
                    "call `torch.cuda.set_device(local_rank)` before allocating (or pass "
                    '`device_id=torch.device("cuda", local_rank)` to `init_process_group`) and allocate on '
                    '`f"cuda:{local_rank}"`'
                ),
            )
            return

    def _check_site(self, ctx: FileContext, site: WrapperSite) -> Violation | None:
        resolver = resolver_for(ctx, site.call)
        base, inline = chain_base(resolver, site.wrapped)  # type: ignore[arg-type]  # None (a returned wrapper) comes back as (None, None)
        var = dotted_name(base)
        moves: list[Device] = [inline] if inline is not None else []
        facts = None
        if var is not None:
            facts = history(ctx, var, site.call)
            if facts.bind is None:  # `self.model` built in `__init__`, wrapped in `setup()`
                facts = class_history(ctx, var, site.call) or facts
            if facts.escaped or facts.sub_moves:
                return None
            moves = [device for device, _ in facts.moves] + moves
        elif type(base) is not cst.Call:
            return None
        model = var or short(ctx, base)
        has_ids = site.device_ids is not None and not (
            type(site.device_ids) is cst.Name and site.device_ids.value == "None"
        )
        if not moves:
            if wrapper_chain_moves(ctx, site):
                return None
            dropped = _move_to_none(ctx, site, var) if has_ids else None
            if dropped is not None:
                move, device = dropped
                return self.violation(
                    site.call,
                    call=short(ctx, site.call),
                    problem=(
                        f"wraps `{model}`, which `{short(ctx, move)}` leaves where it came from (`{device}` is None there: "
                        "its default, which every call leaves out), while `device_ids` asks for a GPU module"
                    ),
                    advice="move it to the device `device_ids` names before wrapping",
                )
            if not built_on_cpu(ctx, base, facts):
                if has_ids and _left_unplaced(ctx, site, var, facts):
                    return self.violation(
                        site.call,
                        call=short(ctx, site.call),
                        problem=(
                            f"wraps `{model}`, which is never moved although this function moves its other tensors to the GPU by hand, "
                            "while `device_ids` asks for a GPU module"
                        ),
                        advice=f"move it first with `{model}.to(device)`",
                    )
                return None
            if has_ids:
                return self.violation(
                    site.call,
                    call=short(ctx, site.call),
                    problem=f"wraps `{model}`, which is still on the CPU{built_where(ctx, base, facts, site.call)}, while `device_ids` asks for a GPU module",
                    advice=f"move it first with `{model}.to(local_rank)`",
                )
            if _uses_nccl(ctx):
                return self.violation(
                    site.call,
                    call=short(ctx, site.call),
                    problem=f"wraps `{model}`, which is still on the CPU{built_where(ctx, base, facts, site.call)}, while the file's `nccl` backend only reduces CUDA tensors",
                    advice=f"move it with `{model}.to(local_rank)` and pass `device_ids=[local_rank]` (or use `gloo` for CPU training)",
                )
            return None
        last = moves[-1]
        if (
            site.device_ids is None
            and ctx.qualified_name(site.call.func) not in APEX_DISTRIBUTED_DATA_PARALLEL  # one GPU per process, always
            and (last.type == "cuda" or _RANK_NAME.search(last.text))
            and not (last.is_current and not set_device_called(ctx, site.call))
            and _may_run_before_1_9(ctx)
            and not _needs_torch_1_9(ctx)
        ):
            return self.violation(
                site.call,
                call=short(ctx, site.call),
                problem=(
                    f"wraps `{model}`, which is on a GPU, without `device_ids`: before torch {_IMPLICIT_IDS_FIXED[1:]} DDP then replicates "
                    'it over every visible GPU in each process ("all tensors must be on devices[0]")'
                ),
                advice="pass `device_ids=[local_rank], output_device=local_rank` (or set `torch-version` to the 1.9+ release the project requires)",
            )
        if not last.literal or last.type != "cuda" or any(not d.literal for d in moves):
            return None
        if _visibility_per_process(ctx):
            return None
        if site.target is not None:
            later = usage_after(ctx, site.target, site.call)
            if any(not device.literal for device, _ in later.moves):
                return None  # moved again after wrapping, to a device the code computes
        per_rank_ids = (
            has_ids and device_ids_first(resolver, site.device_ids) is None and not _literal_list(site.device_ids)
        )
        if per_rank_ids:
            if last.is_current and (set_device_called(ctx, site.call) or not process_group_initialised(ctx)):
                return None  # per-rank ids, and `set_device` here or in the module that sets up the group
            ids = short(ctx, site.device_ids)  # type: ignore[arg-type]  # explicit `device_ids`, checked above
            where = (
                "cuda:0 in every process (the current device, and nothing calls `torch.cuda.set_device`)"
                if last.is_current
                else f"{last.text} in every process"
            )
            return self.violation(
                site.call,
                call=short(ctx, site.call),
                problem=f"wraps `{model}`, which is on {where}, while `device_ids={ids}` names each rank's own GPU",
                advice=f"move the model to the same device as `device_ids` (`{model}.to(local_rank)`)",
            )
        if last.is_current:
            if set_device_called(ctx, site.call):
                return None
            problem = f'wraps `{model}`, which every rank moves to the current device with `.cuda()`/`"cuda"`, cuda:0 in every process since nothing calls `torch.cuda.set_device`'
        else:
            problem = f"wraps `{model}`, which every rank moves to the same {last.text}"
        apex = ctx.qualified_name(site.call.func) in APEX_DISTRIBUTED_DATA_PARALLEL
        return self.violation(
            site.call,
            call=short(ctx, site.call),
            problem=problem + ", so all processes share one GPU",
            # apex's wrapper takes no `device_ids`: it runs on the current device
            advice="call `torch.cuda.set_device(local_rank)` before moving the model" if apex else self._ADVICE,
        )


# Before torch 1.9 (pytorch/pytorch#54454) DDP without `device_ids` used every visible GPU.
_IMPLICIT_IDS_FIXED = "<1.9"


def _may_run_before_1_9(ctx: FileContext) -> bool:
    """Whether the project may run a torch before 1.9: the `torch-version` setting where one is
    given, else the floor the project's own metadata declares (`torch>=2.1` in pyproject.toml),
    the same floor DL305 reads; no word on torch at all: it may."""
    if ctx.torch_version:
        return _applies(ctx.torch_version, _IMPLICIT_IDS_FIXED)
    support = torch_support(ctx)
    return support is None or support.older_than(_IMPLICIT_IDS_FIXED[1:])


# `model.to(local_rank)`: an integer device is a CUDA index; these names hold one.
_RANK_NAME = re.compile(r"^(args\.|self\.|cfg\.|config\.)?(local_rank|rank|gpu|gpu_id|device_id|local_gpu)$")
# APIs added in torch 1.9 or later: a file that uses one cannot run on the old DDP default.
_NEWER_APIS = (
    "torch.accelerator",
    "torch.compile",
    "torch.amp",
    "torch.func",
    "torch.export",
    "torch.inference_mode",
    "torch.distributed.device_mesh",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "torch.distributed.checkpoint",
    "torch.distributed.elastic",
    "torch.nn.attention",
)


def _needs_torch_1_9(ctx: FileContext) -> bool:
    """The file's own code needs torch 1.9+ (`torch.accelerator`, `torch.compile`, FSDP, ...)."""
    if not any(api.rsplit(".", 1)[-1] in ctx.source for api in _NEWER_APIS):
        return False
    for node in ctx.index.of_type(cst.Attribute):
        qualified = ctx.qualified_name(node) or ""
        if any(qualified == api or qualified.startswith(api + ".") for api in _NEWER_APIS):
            return True
    return False


# Calls that load or copy a model as it was saved or built elsewhere, placement included.
_KEEPS_PLACEMENT = frozenset({"torch.load", "copy.deepcopy", "torch.jit.load"})
_DEVICE_WORDS = ("device", "gpu", "cuda", "rank", "map_location", "device_map")


def _move_to_none(ctx: FileContext, site: WrapperSite, var: str | None) -> tuple[cst.Call, str] | None:
    """The call before the wrapper that moves `var` to a parameter that holds None on every
    call of the function (`module.to(device)` with `device=None` left out), and the parameter:
    the code means to place the model there and places it nowhere."""
    if var is None:
        return None
    limit = ctx.index.position(site.call)
    for node in scope_facts(ctx, site.scope).nodes:
        if type(node) is not cst.Call or ctx.index.position(node) >= limit:
            continue
        func = node.func
        if not (
            type(func) is cst.Attribute
            and func.attr.value == "to"
            and dotted_name(strip_self_returning(func.value)) == var
        ):
            continue
        arg = device_argument(node)
        if type(arg) is cst.Name and left_out_everywhere(ctx, arg):
            return node, arg.value
    return None


def _left_unplaced(ctx: FileContext, site: WrapperSite, var: str | None, facts: History | None) -> bool:
    """The model comes from a builder call that takes no device (`model = build_model()`), nothing
    moves it, and the same function moves other tensors to a GPU by hand (`x.to(device)`): the
    author places things explicitly and forgot the model."""
    if var is None or facts is None or facts.bind is None:
        return False
    resolver = resolver_for(ctx, site.call)
    built = chain_base(resolver, facts.bind)[0]
    if type(built) is not cst.Call or any(arg.star for arg in built.args):
        return False
    if ctx.qualified_name(built.func) in _KEEPS_PLACEMENT or "load" in (dotted_name(built.func) or "").lower():
        return False
    if default_device_at(ctx, built).state != CPU_DEFAULT:
        return False  # built inside `with torch.device(...)` or under `set_default_device`
    for arg in built.args:
        words = ((arg.keyword.value if arg.keyword else "") + " " + ctx.code_for(arg.value)).lower()
        if any(word in words for word in _DEVICE_WORDS):
            return False
    helper = module_functions(ctx).get(dotted_name(built.func) or "")
    if helper is not None and any(word in ctx.code_for(helper) for word in (".to(", ".cuda(", "device")):
        return False  # an in-file builder that places what it builds
    for node in scope_facts(ctx, site.scope).nodes:
        if type(node) is cst.Call:
            moved = resolver.move(node)
            if moved is not None and moved[1].type == "cuda" and dotted_name(strip_self_returning(moved[0])) != var:
                return True
    return False


def _nccl_call(ctx: FileContext, call: cst.Call) -> bool:
    """The process group uses NCCL: `backend="nccl"` (literal or a constant), or the file's only backend."""
    for position, arg in enumerate(call.args):
        if (arg.keyword is None and position == 0) or (arg.keyword is not None and arg.keyword.value == "backend"):
            value = arg.value
            key = dotted_name(value)
            if key is not None:
                value = resolver_for(ctx, call).constant(key) or value
            return (
                type(value) is cst.SimpleString
                and literal_value(value) == "nccl"
                or (type(value) is not cst.SimpleString and _uses_nccl(ctx))
            )
    return _uses_nccl(ctx)


def _may_use_nccl(ctx: FileContext, call: cst.Call) -> bool:
    """The process group uses NCCL, or its backend is chosen at run time in a file that names
    `"nccl"` as one of the choices."""
    if _nccl_call(ctx, call):
        return True
    for position, arg in enumerate(call.args):
        if (arg.keyword is None and position == 0) or (arg.keyword is not None and arg.keyword.value == "backend"):
            return type(arg.value) is not cst.SimpleString and "nccl" in string_constants(ctx)
    return False


def _is_none(node: cst.BaseExpression) -> bool:
    return type(node) is cst.Name and node.value == "None"


def _uses_nccl(ctx: FileContext) -> bool:
    strings = string_constants(ctx)
    return "nccl" in strings and "gloo" not in strings


def _visibility_per_process(ctx: FileContext) -> bool:
    return any(token in text for text in string_constants(ctx) for token in _PER_PROCESS_VISIBILITY)


def _literal_list(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, (cst.List, cst.Tuple)) and all(
        type(e) is cst.Element and type(e.value) is cst.Integer for e in node.elements
    )
