from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeGuard

import libcst as cst

from devicelint.analysis.container_reads import through_containers, unpacked_part
from devicelint.analysis.imported_helpers import imported_call
from devicelint.analysis.instance_parameters import instance_binding, instance_class
from devicelint.analysis.model_events import (
    MM_DATA_PARALLEL,
    MM_DISTRIBUTED_DATA_PARALLEL,
    MM_WRAPPER_METHODS,
    Replication,
    WrapperSite,
    data_parallel_classes,
    imported_wrapper_sites,
    module_functions,
    prepared_sites,
    rebinds,
    resolver_for,
    returned_wrapper_sites,
    scope_facts,
    short,
    statement_of,
    wrapped_class,
    wrapper_sites,
)
from devicelint.analysis.model_events.instance_callables import kept_callables
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_classes import class_facts, self_attribute
from devicelint.analysis.training.helpers import callee as callee_of
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place
from devicelint.project.view import ImportedHelper
from devicelint.rule_base import FixProposal, Rule, Violation, register

# Everything an `nn.Module` and both `DataParallel` and `DistributedDataParallel` answer themselves.
WRAPPER_ATTRIBUTES = frozenset(
    {
        "T_destination",
        "add_module",
        "apply",
        "bfloat16",
        "buffers",
        "call_super_init",
        "children",
        "compile",
        "cpu",
        "cuda",
        "double",
        "dump_patches",
        "eval",
        "extra_repr",
        "float",
        "forward",
        "get_buffer",
        "get_extra_state",
        "get_parameter",
        "get_submodule",
        "half",
        "ipu",
        "load_state_dict",
        "modules",
        "mtia",
        "named_buffers",
        "named_children",
        "named_modules",
        "named_parameters",
        "parameters",
        "register_backward_hook",
        "register_buffer",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
        "register_load_state_dict_post_hook",
        "register_load_state_dict_pre_hook",
        "register_module",
        "register_parameter",
        "register_state_dict_post_hook",
        "register_state_dict_pre_hook",
        "requires_grad_",
        "set_extra_state",
        "set_submodule",
        "share_memory",
        "state_dict",
        "to",
        "to_empty",
        "train",
        "training",
        "type",
        "xpu",
        "zero_grad",
        # DataParallel / DistributedDataParallel methods and instance attributes
        "module",
        "gather",
        "scatter",
        "replicate",
        "parallel_apply",
        "device_ids",
        "output_device",
        "dim",
        "src_device_obj",
        # DeepSpeed's engine (a wrapper too) answers these: code that calls them expects an
        # engine there (MAE's `save_model` calls `model.save_checkpoint` on its DeepSpeed path)
        "save_checkpoint",
        "load_checkpoint",
    }
)
# What only `DistributedDataParallel` (and wrappers built on it) answers: `DataParallel` keeps no
# `device`, process group or reducer, so `dp_model.device` raises like any model attribute.
DDP_ONLY_ATTRIBUTES = frozenset(
    {
        "join",
        "join_device",
        "join_hook",
        "join_process_group",
        "no_sync",
        "register_comm_hook",
        "to_kwargs",
        "will_sync_module_buffers",
        "broadcast_buffers",
        "broadcast_bucket_size",
        "bucket_bytes_cap",
        "find_unused_parameters",
        "gradient_as_bucket_view",
        "is_multi_device_module",
        "logger",
        "mixed_precision",
        "process_group",
        "reducer",
        "require_backward_grad_sync",
        "require_forward_param_sync",
        "static_graph",
        "device_type",
        "device_mesh",
        "parameters_to_ignore",
        "modules_buffers",
        "named_module_buffers",
        "use_side_stream_for_tensor_copies",
        "device",
        "batched_grad_copy",
        "bucket_bytes_cap_default",
        "bucket_bytes_cap_list",
        "buffer_hook",
        "ddp",
        "forward_sync_buffers",
        "skip_all_reduce_unused_params",
    }
)


def answers(attr: str, site: WrapperSite) -> bool:
    """Whether the wrapper made at `site` answers `attr` itself: what every module and wrapper
    has, what only DDP keeps (on a DDP), and the steps OpenMMLab's wrappers add (on those)."""
    if attr in WRAPPER_ATTRIBUTES:
        return True
    if site.kind != "DataParallel" and attr in DDP_ONLY_ATTRIBUTES:
        return True
    return site.qualified in MM_DATA_PARALLEL | MM_DISTRIBUTED_DATA_PARALLEL and attr in MM_WRAPPER_METHODS


_FROM_FORWARD = " (called from `forward`)"
_LIST_WRITES = frozenset({"append", "extend", "insert", "appendleft"})
_GUARDS = frozenset({"hasattr", "isinstance", "getattr", "type", "setattr"})


@register
class DataParallelAttributeWithoutModule(Rule):
    """
    ## What it does
    After `model = nn.DataParallel(model)` (or `DistributedDataParallel`, under any alias,
    assigned to a name or to `self.model`), flags reads of the wrapped model's own attributes
    and methods through the wrapper: `model.encoder`, `model.config`, `model.generate(...)`,
    where `model.module.encoder` was meant. Reads are followed in the wrapping function, in the
    other methods of a class that wraps `self.model`, and in a function of the same file that
    the wrapper is passed to (`train(model, loader)` reading `model.init_hidden(...)`, or
    `self.plot(model)`), in a class of the file that keeps it (`Report(model)` with
    `self.net = net` in `__init__`, then `self.net.head` in a method), and after
    `model = load()` where `load` is a function of the file that returns the wrapper it made
    (or, with the project index, a function of another module whose every `return` is one it
    makes: `model = parallelize(model, gpus)`).
    Attributes that
    `nn.Module` and the wrappers answer themselves (`model.train()`, `model.parameters()`,
    `model.state_dict()`, `model.to()`, `model.module`) are not reported; what only
    `DistributedDataParallel` keeps (`model.device`, `model.process_group`, `model.no_sync()`)
    is reported on a `DataParallel` wrapper, which has none of it.

    It also flags, in the `forward` of a module class that the same file (or, with the project
    index, another module of the project) wraps in `nn.DataParallel` (also as a parameter of the
    wrapping function, `self.model = model.to(device)`, when every call of it in the file hands in
    an instance of that class) or of a module class of
    the file it holds as a submodule, at any depth
    (`self.attn = Attention(dim)`, or built inside a module container it holds:
    `nn.ModuleList([Block(c) for _ in range(n)])`), and in the methods `forward` calls as `self.method(...)`, writes to
    attributes of `self` (`self.last_attn = attn`,
    `self.calls += 1`) and appends to lists on `self`; and forward hooks registered on a model
    that the same function wraps in `nn.DataParallel` that store what they see outside the
    hook (`self.activation = output`, `features[name] = output`, `outputs.append(output)`).
    In the same classes it flags a callable kept on the instance outside `forward` that
    `forward` (or a method it runs) calls and that reaches the instance's layers or registered
    tensors: a bound method (`self.op = self._gaussian`, `self.forward = self._forward_fused`,
    a submodule's `self.lookup = self.embed.forward`), `functools.partial(self._attend, ...)` or
    `functools.partial(self.decoder, ...)`, or a lambda that reads `self` or a local name the
    method bound once to one of its layers (`m = self.mlp; self.mlpf = lambda x: m.fc(x)`).

    ## Why it is a bug on a GPU
    The wrapper is a new `nn.Module` holding the model as `.module`; it does not forward
    attribute lookups, so `model.encoder` raises `AttributeError: 'DataParallel' object has no
    attribute 'encoder'`, often only on the multi-GPU machine where the wrapping branch runs.
    DataParallel also runs `forward` on throw-away replicas, one per GPU, rebuilt every step:
    what `forward` assigns to `self` is set on a replica and lost, and a list on `self` gets one
    entry per GPU per step, appended from several threads in no fixed order. Forward hooks run
    on every replica too: a hook that stores its output keeps the slice of one GPU, whichever
    thread finished last. A replica is a copy of the module's `__dict__`, so a bound method kept
    there still belongs to the original module: the replica on the second GPU runs the
    original's layers, on the first GPU, with its own inputs ("Expected all tensors to be on
    the same device", or "device 1 does not equal 0").

    ## Example
    ```python
    model = nn.DataParallel(model)
    tokens = model.generate(prompt)

    class Net(nn.Module):
        def forward(self, x):
            self.last_hidden = self.body(x)
            return self.head(self.last_hidden)
    ```

    ## Use instead
    ```python
    model = nn.DataParallel(model)
    tokens = model.module.generate(prompt)

    class Net(nn.Module):
        def forward(self, x):
            hidden = self.body(x)
            return self.head(hidden), hidden
    ```

    ## Fix safety
    For a read of the model's attribute through the wrapper, the fix reads it through the
    wrapped model: `model.module.attr` where the function always wraps it, and
    `getattr(model, "module", model).attr` where the same code may also hold the bare model (a
    wrap under an `if`, a helper that receives the model). It is unsafe: the attribute is then
    the model's own, which is the point, but code that once caught the AttributeError changes
    path. Writes that DataParallel replicas lose (in `forward` or a forward hook) get no fix:
    the value has to travel back another way (returned from `forward`, or gathered per device).

    ## Known limits
    In the wrapping function, reads count after the wrapping statement and until the name is
    bound again (its right-hand side included: `model = Evaluator(model)` hands the wrapper
    on), and not in the other branch of the `if` that wraps. A wrapper returned by a
    function of the file (`model = parallelize(net)`, `self.model = self.load_model()`, or
    unpacked from a returned tuple: `ddp_model, rank = setup(net)`) counts as wrapped at that
    call. Other methods count only when the class binds `self.model` nowhere
    else (`self.model = self.model.cuda()` and the bare model built in `__init__` aside), and
    not the methods the wrapping method calls before it wraps; the functions they hand
    `self.model` to are read too. A wrapper handed to a function is followed one call further
    (`train(model)` handing it to `evaluate(model)`). Each attribute is reported once per function. Code that tests
    `hasattr(model, ...)` or `isinstance(model, ...)` is trusted to unwrap it, and so is a read
    in one branch of an `if` whose other branch reads the model through `.module` (a flag of the
    code's own, `if self.parallel:`, tells the two apart). Attributes the
    code sets on the wrapper itself are reported only when read before that write (also in its
    right-hand side: `net.pca = f(net.pca)`). A wrapper handed to a function imported from another module of the project is reported
    at the call when that function reads attributes on the parameter it binds (and never tests
    or rebinds it); other wrappers that cross files are not seen. A model
    returned by `accelerator.prepare(...)` (an `accelerate.Accelerator` of the file; a model is
    an argument the function calls `.parameters()`, `.train()` or `.eval()` on) counts as a DDP
    wrapper, except in test files, in files that mention DeepSpeed, FSDP or Megatron (their
    engines forward attributes), and for reads under an `if` on the process count.
    Replica writes and kept callables are found where the `DataParallel` call and the class are
    in the same file, or the call builds the class another module defines (`DataParallel(Net())`,
    or a name bound to `Net(...)` in the same scope; a builder's result is not followed), and
    only in `forward` and the methods it calls directly; a kept
    callable is followed three `self.method(...)` calls deep to the layers it runs, and one
    that reaches none (`self.act = self._swish` over plain tensor maths) is not reported. A write that only moves the
    attribute itself (`self.renderer = self.renderer.to(x.device)`, `.cuda(...)`, `.type_as(x)`)
    is not reported when no other method but `__init__` reads it: every call moves it again
    before using it, so the lost write loses nothing; nor is a constant set only where the
    attribute is missing (`if not hasattr(self, "traced"): self.traced = False`), which every
    replica sets again, nor scratch space of one call (`self.outputs = []` at the top of
    `forward`, filled, then returned) that nothing else in the file but `__init__` names. Hooks count when registered in the wrapping function on
    the wrapped name (or its `.module`), as a def of that function or of the module, a lambda,
    `self.method`, or a def returned by a factory of the module; also hooks registered in the
    wrapped class's `__init__` on its own submodules (a hook object `self.save = SaveOutput()`
    runs its `__call__`), and hook objects of a plain class of the file whose `__init__`
    registers its own method, built in the wrapping function over the model's modules
    (`[StatHook(m) for m in model.modules()]`).
    """

    code = "DL203"
    name = "dataparallel-attribute-without-module"
    summary = (
        "A DataParallel/DDP wrapper hides the model's attributes, and DataParallel replicas lose writes to `self`."
    )
    message = "{problem}; {advice}"
    fix_availability = "unsafe"
    tokens = ("DataParallel", "Accelerator")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for site in wrapper_sites(ctx):
            if site.target is not None:
                yield from self._reads_through(ctx, site)
        for site in returned_wrapper_sites(ctx) + prepared_sites(ctx) + imported_wrapper_sites(ctx):
            yield from self._reads_through(ctx, site)
        for name, replication in data_parallel_classes(ctx).items():
            yield from self._replica_writes(ctx, name, replication)
            yield from self._kept_callables(ctx, name, replication)
        yield from self._hook_writes(ctx)
        yield from self._reads_of_base_wrappers(ctx)

    def _reads_of_base_wrappers(self, ctx: FileContext) -> Iterator[Violation]:
        """`self.net.destseg` in a class whose base class, in another module, keeps `self.net` as
        a wrapper (`ProjectView.base_wrappers`), unless the class itself sets or tests it."""
        for cls in ctx.module.body:
            if type(cls) is not cst.ClassDef or cls.name.value not in ctx.project.base_wrappers:
                continue
            for attr, base, where in ctx.project.base_wrappers[cls.name.value]:
                held = f"self.{attr}"
                reads = _reads_of_kept_wrapper(ctx, cls, held)
                for node in _first_of_each(ctx, reads):
                    name = node.attr.value
                    yield self.violation(
                        node,
                        fix=_through_module(ctx, node, certain=True),
                        problem=(
                            f"`{held}.{name}` reads `{name}` from the `DataParallel`/DDP wrapper that the base class "
                            f"`{base}` ({where}) keeps in `{held}`, which does not forward its model's attributes "
                            "(AttributeError)"
                        ),
                        advice=f"use `{held}.module.{name}`",
                    )

    def _hook_writes(self, ctx: FileContext) -> Iterator[Violation]:
        """Forward hooks on a model that the same function wraps in `nn.DataParallel` that store
        what they see outside the hook (`self.features = output`, `acts[name] = output`)."""
        if "register_forward" not in ctx.source:
            return
        seen: set[int] = set()
        for site in wrapper_sites(ctx) + returned_wrapper_sites(ctx):
            if site.kind != "DataParallel":
                continue
            names = {n for n in (site.target, dotted_name(site.wrapped) if site.wrapped is not None else None) if n}
            for _node, owner, hooks in _registrations(ctx, site, names):
                for hook in hooks:
                    for write in _outside_writes(ctx, hook):
                        if id(write) in seen:
                            continue
                        seen.add(id(write))
                        yield self.violation(
                            write,
                            problem=(
                                f"`{short(ctx, write)}` in the forward hook `{_hook_name(hook)}` on `{owner}` runs once per GPU "
                                f"replica under `{site.spelled}`, from several threads, and keeps only one replica's slice of the batch"
                            ),
                            advice="return what the hook needs from `forward`, or gather it per device (`output.device`) and concatenate after the step",
                        )

    def _reads_through(self, ctx: FileContext, site: WrapperSite) -> Iterator[Violation]:
        wrapper = site.target
        assert wrapper is not None
        scope = scope_facts(ctx, site.scope)
        statement = statement_of(ctx, site.call)
        start = scope.order.get(id(statement), -1)
        inside = {id(n) for n in ctx.index.walk(statement)}
        branches = _branches(ctx, statement)
        written: dict[str, int] = {}  # attribute -> the first statement that sets it on the wrapper
        reads: list[cst.Attribute] = []
        callees: list[tuple[cst.FunctionDef, str]] = []
        imported: list[tuple[cst.BaseExpression, ImportedHelper, str, list[tuple[str, int]], str]] = []
        resolver = resolver_for(ctx, site.call)
        caller = site.scope.name.value if type(site.scope) is cst.FunctionDef else "the module"
        for node in scope.nodes:
            if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in _GUARDS:
                if node.args and dotted_name(node.args[0].value) == wrapper:
                    return  # the function checks what it holds
            if type(node) is cst.Attribute and dotted_name(node.value) == wrapper and _is_target(ctx, node):
                written.setdefault(node.attr.value, scope.order.get(id(statement_of(ctx, node)), -1))

        def visit(node: cst.CSTNode) -> None:
            if type(node) is cst.Call and not _other_branch(ctx, node, branches):
                callees.extend(_callee_params(ctx, node, wrapper))
                imported.extend((*found, caller) for found in _imported_reads(ctx, node, wrapper, site))
            if type(node) is not cst.Attribute or dotted_name(node.value) != wrapper:
                return
            attr = node.attr.value
            if attr.startswith("_") or answers(attr, site) or _is_target(ctx, node):
                return
            if written.get(attr, len(scope.nodes)) < scope.order.get(id(statement_of(ctx, node)), -1):
                return  # set on the wrapper first (`net.pca = ...`), read back later: it works
            if _other_branch(ctx, node, branches):
                return
            if site.spelled.endswith(".prepare") and _under_process_count_test(ctx, node, site.scope):
                return  # `if accelerator.num_processes > 1: m.module.x else: m.x`
            reads.append(node)

        for node in scope.nodes[start + 1 :]:
            if id(node) in inside:
                continue
            if rebinds(resolver, node, wrapper):
                # Its right-hand side still runs with the wrapper: `model = Evaluator(model)`,
                # `net = net.backbone` read it before the name is rebound.
                assert isinstance(node, cst.Assign)
                for part in ctx.index.walk(node.value):
                    visit(part)
                break
            visit(node)
        other_reads, other_calls = _reads_in_other_methods(ctx, site, wrapper)
        reads += other_reads
        reads = [n for n in reads if not _unwrapped_in_other_branch(ctx, n, wrapper)]
        handed = [(function, param, caller) for function, param in callees]
        for call in other_calls:
            method = ctx.index.enclosing_function(call)
            runner = method.name.value if method else caller
            handed += [(function, param, runner) for function, param in _callee_params(ctx, call, wrapper)]
            # `with ddp_forward_ctx(self.model):` in another method, the helper of another module
            imported += [(*found, runner) for found in _imported_reads(ctx, call, wrapper, site)]
        reads = _first_of_each(ctx, reads)
        for function, param, caller in handed:
            callee = function.name.value
            if callee == "__init__":
                owner = ctx.index.enclosing_class(function)
                callee = owner.name.value if owner is not None else callee
                reads_of = _kept_reads(ctx, function, param, site)
            else:
                reads_of = _param_reads(ctx, function, param, site)
            # `net.module.head if parallel else net.head` in the callee tells the two apart too
            reads_of = [n for n in reads_of if not _unwrapped_in_other_branch(ctx, n, dotted_name(n.value) or "")]
            for node in _first_of_each(ctx, reads_of):
                attr, held = node.attr.value, dotted_name(node.value)
                reader = ctx.index.enclosing_function(node)
                reader_class = ctx.index.enclosing_class(node)
                onward = (
                    f" (which hands it on to `{reader.name.value}` as `{held}`)"
                    if reader is not None and reader is not function and reader_class is None
                    else f" (which hands it on to `{reader_class.name.value}`)"
                    if reader is not None
                    and reader is not function
                    and reader_class is not None
                    and reader.name.value == "__init__"
                    and callee != reader_class.name.value
                    else ""
                )
                yield self.violation(
                    node,
                    fix=_through_module(ctx, node, certain=False),
                    problem=(
                        f"`{held}.{attr}` reads `{attr}` from the `{site.kind}` wrapper{site.origin(ctx)} that {_code(caller)} passes "
                        f"to `{callee}` as `{param}`{onward}, which does not forward its model's attributes (AttributeError)"
                    ),
                    advice=f"use `{held}.module.{attr}`, or pass `{wrapper}.module`",
                )
        for arg, helper, param, attributes, runner in imported:
            attr, line = attributes[0]
            more = f" (and {len(attributes) - 1} more)" if len(attributes) > 1 else ""
            yield self.violation(
                arg,
                problem=(
                    f"`{helper.qualified}` reads `{param}.{attr}` ({helper.path}:{line}){more} from the `{site.kind}` "
                    f"wrapper{site.origin(ctx)} that {_code(runner)} passes to it as `{param}`, which does not forward "
                    "its model's attributes (AttributeError)"
                ),
                advice=f"pass `{wrapper}.module`, or read `{param}.module.{attr}` there",
            )
        prepared = site.spelled.endswith(".prepare")  # `accelerator.prepare`: unwrapped on one GPU
        accelerator = site.spelled[: -len(".prepare")]
        for node in reads:
            attr = node.attr.value
            yield self.violation(
                node,
                fix=None if prepared else _through_module(ctx, node, certain=not branches),
                problem=(
                    f"`{wrapper}.{attr}` reads `{attr}` from the `{site.kind}` wrapper `{wrapper}`{site.origin(ctx)}, "
                    f"which does not forward its model's attributes (AttributeError)"
                ),
                advice=f"use `{accelerator}.unwrap_model({wrapper}).{attr}`"
                if prepared
                else f"use `{wrapper}.module.{attr}`",
            )

    def _replica_writes(self, ctx: FileContext, name: str, replication: Replication) -> Iterator[Violation]:
        cls = module_classes(ctx)[name]
        forward = methods(cls).get("forward")
        if forward is None:
            return
        registered = _registered_names(ctx, cls)
        for method, where, receiver in _run_by_forward(ctx, cls, forward):
            yield from self._writes_in(ctx, name, replication, method, where, registered, receiver)

    def _kept_callables(self, ctx: FileContext, name: str, replication: Replication) -> Iterator[Violation]:
        """A bound method (or a lambda over `self`) kept on the instance outside `forward`: each
        replica's copy of `__dict__` still calls the original instance on the first GPU."""
        facts = class_facts(ctx).get(name)
        forward = facts.methods.get("forward") if facts is not None else None
        if facts is None or forward is None:
            return
        running = [method for method, _, receiver in _run_by_forward(ctx, facts.node, forward) if receiver == "self"]
        called = {"forward"}
        for method in running:
            for node in scope_facts(ctx, method).nodes:
                if type(node) is cst.Call and (attr := self_attribute(node.func)) is not None:
                    called.add(attr)
        for kept in kept_callables(ctx, facts, called, running):
            yield self.violation(
                kept.value,
                problem=(
                    f"`self.{kept.attr}` keeps {kept.runs} bound to this `{name}` instance; "
                    f"`{replication.spelled}`{replication.where} copies it into every GPU replica still bound to the "
                    "original, so each "
                    f"replica runs the original's `self.{kept.state}` on the first GPU with its own slice of the batch"
                ),
                advice="call the method through `self` inside `forward` (or keep its name and call `getattr(self, name)(...)`), so each replica runs its own layers",
            )

    def _writes_in(
        self,
        ctx: FileContext,
        name: str,
        replication: Replication,
        method: cst.FunctionDef,
        where: str,
        registered: set[str],
        receiver: str = "self",
    ) -> Iterator[Violation]:
        """Writes to the instance's attributes in `method`, which reaches the instance as `receiver`
        (`self`, or a helper's parameter every call hands it)."""
        place = f"{name}.{where}" if ctx.index.enclosing_class(method) is not None else where
        if replication.whole is not None:
            place += f"` of a submodule of `{replication.whole}"  # the message closes the quote
        wrapper = f"`{replication.spelled}`{replication.where}"
        scratch = _scratch_attributes(ctx, method, receiver)
        for node in scope_facts(ctx, method).nodes:
            if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                for target in _unpacked(ctx, targets):
                    attr = _self_attr(target, receiver)
                    if attr is None or (type(node) is cst.AugAssign and attr in registered) or attr in scratch:
                        continue
                    if type(node) is cst.Assign:
                        # the value this target gets: the assigned one, or its part of an unpacked container
                        if len(node.targets) == 1 and target is node.targets[0].target:
                            written: cst.BaseExpression | None = through_containers(ctx, node.value)
                        else:
                            written = unpacked_part(ctx, target)
                        if written is not None and _per_call_placement(ctx, written, attr, method, receiver):
                            continue
                        if written is not None and _lazy_default(ctx, node, written, attr, receiver):
                            continue
                    yield self.violation(
                        target,
                        problem=(
                            f"`{receiver}.{attr}` is assigned in `{place}`{_FROM_FORWARD if where != 'forward' else ''}, which {wrapper} runs on "
                            "per-GPU replicas rebuilt every step, so the write is lost"
                        ),
                        advice="return the value from `forward` (or keep it in a buffer updated in place)",
                    )
            elif type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _LIST_WRITES:
                attr = _self_attr(node.func.value, receiver)
                if attr is None or attr in registered or attr in scratch:
                    continue
                yield self.violation(
                    node,
                    problem=(
                        f"`{receiver}.{attr}.{node.func.attr.value}(...)` in `{place}`{_FROM_FORWARD if where != 'forward' else ''} runs once per GPU replica "
                        f"under {wrapper}, from several threads in no fixed order, with tensors on different GPUs"
                    ),
                    advice="return the value from `forward` and collect it outside the model",
                )


def _first_of_each(ctx: FileContext, reads: list[cst.Attribute]) -> list[cst.Attribute]:
    """The first read of each attribute in each function: one finding per mistake, not per line."""
    seen: set[tuple[int, str | None]] = set()
    kept = []
    for node in reads:
        key = (id(ctx.index.enclosing_function(node)), dotted_name(node))
        if key not in seen:
            seen.add(key)
            kept.append(node)
    return kept


def _run_by_forward(
    ctx: FileContext, cls: cst.ClassDef, forward: cst.FunctionDef
) -> list[tuple[cst.FunctionDef, str, str]]:
    """`forward`, the methods of the class it calls as `self.method(...)` (one level), and the
    helpers any of these hand the instance to (`_keep(self, h)`, `Net._keep(self, h)`, a few
    levels deep), each with the name it reaches the instance through."""
    found = [(forward, "forward", "self")]
    own = methods(cls)
    for node in scope_facts(ctx, forward).nodes:
        if type(node) is cst.Call and type(node.func) is cst.Attribute and dotted_name(node.func.value) == "self":
            method = own.get(node.func.attr.value)
            if method is not None and method is not forward and all(m is not method for m, _, _ in found):
                found.append((method, method.name.value, "self"))
    index = 0
    while index < len(found) and len(found) < 8:
        function, _, receiver = found[index]
        index += 1
        for helper in _handed_the_instance(ctx, cls, function, receiver):
            bound = instance_binding(ctx, helper)
            if bound is not None and bound[1] is cls and all(m is not helper for m, _, _ in found):
                found.append((helper, helper.name.value, bound[0]))
    return found


def _handed_the_instance(
    ctx: FileContext, cls: cst.ClassDef, function: cst.FunctionDef, receiver: str
) -> Iterator[cst.FunctionDef]:
    """The same-file functions and the static or class methods of `cls` that `function` calls
    with its instance (`receiver`) among the arguments."""
    own = methods(cls)
    for node in scope_facts(ctx, function).nodes:
        if type(node) is not cst.Call or not any(dotted_name(a.value) == receiver for a in node.args):
            continue
        func = node.func
        if type(func) is cst.Name:
            helper = next(
                (s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == func.value), None
            )
        elif type(func) is cst.Attribute and dotted_name(func.value) in (receiver, cls.name.value):
            helper = own.get(func.attr.value)
        else:
            helper = None
        if helper is not None:
            yield helper


_FORWARD_HOOKS = frozenset({"register_forward_hook", "register_forward_pre_hook"})


def _registrations(
    ctx: FileContext, site: WrapperSite, names: set[str]
) -> Iterator[tuple[cst.Call, str, list[cst.FunctionDef | cst.Lambda]]]:
    """(registration, what it is registered on, the hooks it runs) for forward hooks on the model
    a `DataParallel` wraps: registered in the wrapping function on the model (or a submodule),
    in the wrapped class's `__init__` on its own submodules (`block.register_forward_hook(
    self.save_output)`), or in the `__init__` of a hook class the wrapping function builds over
    the model's modules (`[StatHook(m) for m in teacher.modules()]`)."""
    for node in scope_facts(ctx, site.scope).nodes:
        if _is_registration(node):
            owner = dotted_name(node.func.value) or ""  # type: ignore[attr-defined]  # _is_registration: func is an Attribute
            if any(owner == n or owner.startswith(n + ".") for n in names):
                yield node, owner, _hook_functions(ctx, node.args[0].value, site.scope)
        elif type(node) is cst.Call and type(node.func) is cst.Name:
            init = _hook_class_init(ctx, node.func.value)
            if init is not None and _built_over(ctx, node, names):
                for registration in scope_facts(ctx, init).nodes:
                    if _is_registration(registration):
                        yield registration, short(ctx, node), _hook_functions(ctx, registration.args[0].value, init)
    wrapped = wrapped_class(ctx, site)
    cls = module_classes(ctx).get(wrapped) if wrapped is not None else None
    init = methods(cls).get("__init__") if cls is not None else None
    if init is not None:
        for node in scope_facts(ctx, init).nodes:
            if _is_registration(node):
                value = node.args[0].value
                hooks = _hook_functions(ctx, value, init) or _callable_object(ctx, cls, value)  # type: ignore[arg-type]  # cls is set when init is
                yield node, f"{wrapped}.{ctx.code_for(node.func.value).strip()}", hooks  # type: ignore[attr-defined]  # _is_registration: func is an Attribute


def _is_registration(node: cst.CSTNode) -> TypeGuard[cst.Call]:
    return (
        type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and node.func.attr.value in _FORWARD_HOOKS
        and bool(node.args)
    )


def _hook_class_init(ctx: FileContext, name: str) -> cst.FunctionDef | None:
    """The `__init__` of a plain class of the file that registers a forward hook."""
    cls = next((c for c in ctx.index.of_type(cst.ClassDef) if c.name.value == name), None)
    if cls is None or name in module_classes(ctx):
        return None
    init = methods(cls).get("__init__")
    if init is None or not any(_is_registration(n) for n in scope_facts(ctx, init).nodes):
        return None
    return init


def _built_over(ctx: FileContext, call: cst.Call, names: set[str]) -> bool:
    """The call's arguments come from the model: `Hook(m)` in a comprehension over
    `model.modules()`, or `Hook(model.layer1)`."""

    def mentions(node: cst.CSTNode) -> bool:
        return any(
            type(n) in (cst.Name, cst.Attribute) and (dotted_name(n) or "").split(".", 1)[0] in names
            for n in ctx.index.walk(node)
        )

    if any(mentions(arg.value) for arg in call.args):
        return True
    for ancestor in ctx.index.ancestors(call):
        if isinstance(ancestor, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            loop: cst.CompFor | None = ancestor.for_in
            while loop is not None:
                if mentions(loop.iter):
                    return True
                loop = loop.inner_for_in
        if type(ancestor) is (cst.For) and mentions(ancestor.iter):
            return True
        if type(ancestor) in (cst.FunctionDef, cst.SimpleStatementLine):
            break
    return False


def _callable_object(
    ctx: FileContext, cls: cst.ClassDef, value: cst.BaseExpression
) -> list[cst.FunctionDef | cst.Lambda]:
    """`__call__` of the plain class of the file that `self.save_output = SaveOutput()` holds."""
    name = _self_attr(value)
    init = methods(cls).get("__init__")
    if name is None or init is None:
        return []
    for bound in scope_facts(ctx, init).assigned.get(f"self.{name}", []):
        if type(bound) is cst.Call and type(bound.func) is cst.Name:
            hook_cls = next((c for c in ctx.index.of_type(cst.ClassDef) if c.name.value == bound.func.value), None)
            call = methods(hook_cls).get("__call__") if hook_cls is not None else None
            if call is not None:
                return [call]
    return []


def _hook_functions(
    ctx: FileContext, value: cst.BaseExpression, scope: cst.FunctionDef | cst.Module
) -> list[cst.FunctionDef | cst.Lambda]:
    """The hook a registration names: a def of the scope or module, `self.method`, a lambda, or
    the defs a factory of the module returns (`register_forward_hook(save_output("fc"))`)."""
    if type(value) is cst.Lambda:
        return [value]
    if type(value) is cst.Call:
        factory = module_functions(ctx).get(dotted_name(value.func) or "")
        if factory is None:
            return []
        return [n for n in scope_facts(ctx, factory).nodes if type(n) is cst.FunctionDef and n is not factory]
    name = dotted_name(value) or ""
    if name.startswith("self.") and name.count(".") == 1:
        cls = ctx.index.enclosing_class(scope)
        method = methods(cls).get(name[5:]) if cls is not None else None
        return [method] if method is not None else []
    local = [
        n
        for n in scope_facts(ctx, scope).nodes
        if type(n) is cst.FunctionDef and n.name.value == name and n is not scope
    ]
    function = local[0] if local else module_functions(ctx).get(name)
    return [function] if function is not None else []


def _hook_name(hook: cst.FunctionDef | cst.Lambda) -> str:
    return hook.name.value if type(hook) is cst.FunctionDef else "lambda"


def _outside_writes(ctx: FileContext, hook: cst.FunctionDef | cst.Lambda) -> list[cst.CSTNode]:
    """Writes in a hook to state that outlives the call: attributes of its parameters or of
    `self`, items or appends of names it did not bind itself."""
    local: set[str] = set()
    if type(hook) is cst.FunctionDef:
        for node in scope_facts(ctx, hook).nodes:
            if type(node) is cst.AssignTarget and type(node.target) is cst.Name:
                local.add(node.target.value)
    writes: list[cst.CSTNode] = []
    for node in ctx.index.walk(hook):
        if type(node) is cst.AssignTarget:
            target = node.target
            if type(target) is cst.Attribute and type(target.value) is cst.Name:
                writes.append(node.target)
            elif type(target) is cst.Subscript:
                root = dotted_name(target.value)
                if root is not None and root.split(".", 1)[0] not in local:
                    writes.append(node.target)
        elif type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _LIST_WRITES:
            root = dotted_name(node.func.value)
            if root is not None and root.split(".", 1)[0] not in local:
                writes.append(node)
    return writes


def _code(name: str) -> str:
    return name if name == "the module" else f"`{name}`"


def _callee_params(ctx: FileContext, call: cst.Call, wrapper: str) -> list[tuple[cst.FunctionDef, str]]:
    """(function of this module, parameter name) for each argument of `call` that is the wrapper;
    for a class of this module (`Visualizer(model)`), its `__init__` and parameter; for
    `self.plot(model)`, that method of the enclosing class."""
    function, skip = _callee(ctx, call)
    if function is None:
        return []
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)][skip:]
    found = []
    for position, arg in enumerate(call.args):
        if arg.star or dotted_name(arg.value) != wrapper:
            continue
        if arg.keyword is not None:
            names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
            if arg.keyword.value in names:
                found.append((function, arg.keyword.value))
        elif position < len(positional):
            found.append((function, positional[position]))
    return found


def _imported_reads(
    ctx: FileContext, call: cst.Call, wrapper: str, site: WrapperSite
) -> list[tuple[cst.BaseExpression, ImportedHelper, str, list[tuple[str, int]]]]:
    """(argument, imported project function, parameter, model attributes it reads there) for
    each argument of `call` that is the wrapper, where that function reads attributes the
    wrapper does not answer."""
    imported = imported_call(ctx, call)
    if imported is None:
        return []
    helper, bound = imported
    found = []
    for param, arg in bound.items():
        # the wrapper itself, or an element of a list or tuple the helper unpacks (`[net_g, net_d]`
        # into `net_g, net_d = nets`: its reads are recorded on `nets[0]`)
        elements = arg.elements if isinstance(arg, (cst.List, cst.Tuple)) else ()
        handed = [(arg, param)] if dotted_name(arg) == wrapper else []
        handed += [
            (e.value, f"{param}[{i}]")
            for i, e in enumerate(elements)
            if type(e) is cst.Element and dotted_name(e.value) == wrapper
        ]
        for given, part in handed:
            attributes = [(a, line) for p, a, line in helper.uses.reads if p == part and not answers(a, site)]
            if attributes:
                found.append((given, helper, part, sorted(attributes, key=lambda item: item[1])))
    return found


def _reads_of_kept_wrapper(ctx: FileContext, cls: cst.ClassDef, held: str) -> list[cst.Attribute]:
    """Reads of `held.x` (`self.net.x`) in the methods of `cls` that are not the wrapper's own,
    or none when a method of `cls` sets `held` or tests what it holds."""
    reads: list[cst.Attribute] = []
    for method in methods(cls).values():
        for node in scope_facts(ctx, method).nodes:
            if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in _GUARDS:
                if node.args and dotted_name(node.args[0].value) == held:
                    return []
            if type(node) is not cst.Attribute:
                continue
            if dotted_name(node) == held and _is_target(ctx, node):
                return []  # the class keeps something else there
            if dotted_name(node.value) != held or _is_target(ctx, node):
                continue
            name = node.attr.value
            if not name.startswith("_") and name not in WRAPPER_ATTRIBUTES and name not in DDP_ONLY_ATTRIBUTES:
                reads.append(node)
    return reads


def _callee(ctx: FileContext, call: cst.Call) -> tuple[cst.FunctionDef | None, int]:
    """The function of this file that `call` runs, and how many leading parameters it binds itself."""
    name = dotted_name(call.func) or ""
    if name.startswith("self.") and name.count(".") == 1:
        cls = ctx.index.enclosing_class(call)
        method = methods(cls).get(name[5:]) if cls is not None else None
        return method, 1
    function = module_functions(ctx).get(name)
    if function is not None:
        return function, 0
    cls = next((c for c in ctx.module.body if type(c) is cst.ClassDef and c.name.value == name), None)
    if cls is not None:
        return methods(cls).get("__init__"), 1
    # a method of an instance of the file's classes (`Trainer().fit(model)`, `runner.fit(model)`)
    method = callee_of(ctx, call)
    if method is None or ctx.index.enclosing_class(method) is None:
        return None, 0
    kinds = {dotted_name(d.decorator) for d in method.decorators}
    return method, 0 if "staticmethod" in kinds else 1


def _param_reads(
    ctx: FileContext,
    function: cst.FunctionDef,
    param: str,
    site: WrapperSite,
    rebinding_ok: bool = False,
    depth: int = 0,
) -> list[cst.Attribute]:
    """Reads of `param.x` in `function`, unless it tests, rebinds or writes to `param`; and in the
    functions of the file it hands `param` on to (`evaluate(model)` inside `train(model)`), one
    level further."""
    nodes = scope_facts(ctx, function).nodes
    written: set[str] = set()
    reads: list[cst.Attribute] = []
    handed: list[tuple[cst.FunctionDef, str]] = []
    for node in nodes:
        if depth == 0 and type(node) is cst.Call:
            handed += [(f, p) for f, p in _callee_params(ctx, node, param) if f is not function]
        if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in _GUARDS:
            if node.args and dotted_name(node.args[0].value) == param:
                return []
        if type(node) is cst.AssignTarget and dotted_name(node.target) == param and not rebinding_ok:
            return []
        if type(node) is cst.Attribute and dotted_name(node.value) == param:
            if _is_target(ctx, node):
                written.add(node.attr.value)
            else:
                reads.append(node)
    kept = [
        node
        for node in reads
        if not node.attr.value.startswith("_") and not answers(node.attr.value, site) and node.attr.value not in written
    ]
    for callee, name in handed:
        if callee.name.value != "__init__":
            kept += _param_reads(ctx, callee, name, site, depth=depth + 1)
        else:  # `return Evaluator(model)` in a helper: what the class reads of it
            kept += _kept_reads(ctx, callee, name, site, depth=depth + 1)
    return kept


def _kept_reads(
    ctx: FileContext, init: cst.FunctionDef, param: str, site: WrapperSite, depth: int = 0
) -> list[cst.Attribute]:
    """Reads of `param.x` in `__init__`, and of `self.m.x` in the class's methods when `__init__`
    keeps the wrapper as `self.m = param`, unless the class tests, unwraps or rebinds `self.m`."""
    reads = _param_reads(ctx, init, param, site, depth=depth)
    cls = ctx.index.enclosing_class(init)
    if cls is None:
        return reads
    kept = {
        name
        for node in scope_facts(ctx, init).nodes
        if type(node) is cst.Assign and dotted_name(node.value) == param
        for name in (dotted_name(t.target) for t in node.targets)
        if name and name.startswith("self.") and name.count(".") == 1
    }
    for name in kept:
        for method in methods(cls).values():
            for node in scope_facts(ctx, method).nodes:
                guarded = type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in _GUARDS
                if guarded and type(node) is cst.Call and node.args and dotted_name(node.args[0].value) == name:
                    return reads
                if method is not init and type(node) is cst.AssignTarget and dotted_name(node.target) == name:
                    return reads
        for method in methods(cls).values():
            reads.extend(_param_reads(ctx, method, name, site, rebinding_ok=True))
    return reads


def _reads_in_other_methods(
    ctx: FileContext, site: WrapperSite, wrapper: str
) -> tuple[list[cst.Attribute], list[cst.Call]]:
    """Reads of `self.model.x` in the other methods of a class whose method wraps `self.model`,
    and the calls there that hand `self.model` on (`plot(self.model, ...)`).

    Only when every assignment to `self.model` in the class is in the wrapping method, nothing in
    the class tests the wrapper (`hasattr`, `isinstance`), and skipping the methods the wrapping
    method calls before it wraps (they run on the bare model) and `__init__` when it does not wrap.
    """
    if not wrapper.startswith("self.") or wrapper.count(".") != 1 or type(site.scope) is not cst.FunctionDef:
        return [], []
    cls = ctx.index.enclosing_class(site.scope)
    if cls is None or ctx.index.enclosing_function(cls) is not None:
        return [], []
    wrapping = site.scope
    position = scope_facts(ctx, wrapping).order.get(id(site.statement), 0)
    called_before = set()
    for index, node in enumerate(scope_facts(ctx, wrapping).nodes):
        if index >= position:
            break
        if type(node) is cst.Call and type(node.func) is cst.Attribute and dotted_name(node.func.value) == "self":
            called_before.add(node.func.attr.value)
    written: set[str] = set()
    candidates: list[cst.Attribute] = []
    calls: list[cst.Call] = []
    for name, method in methods(cls).items():
        nodes = scope_facts(ctx, method).nodes
        for node in nodes:
            if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in _GUARDS:
                if node.args and dotted_name(node.args[0].value) == wrapper:
                    return [], []
            if (
                method is not wrapping
                and rebinds(resolver_for(ctx, node), node, wrapper)
                and (name != "__init__" or wrapping.name.value == "__init__")
            ):
                return [], []  # `self.model` is rebound elsewhere (`self.model = self.model.cuda()` keeps it)
            runs_wrapped = (
                method is not wrapping
                and name not in called_before
                and (name != "__init__" or wrapping.name.value == "__init__")
            )
            if type(node) is cst.Call and runs_wrapped:
                calls.append(node)
            if type(node) is cst.Attribute and dotted_name(node.value) == wrapper:
                if _is_target(ctx, node):
                    written.add(node.attr.value)
                elif runs_wrapped:
                    candidates.append(node)
    return [
        node
        for node in candidates
        if not node.attr.value.startswith("_") and not answers(node.attr.value, site) and node.attr.value not in written
    ], calls


_PLACEMENT_METHODS = frozenset({"to", "cuda", "cpu", "type_as"})


def _per_call_placement(
    ctx: FileContext, value: cst.BaseExpression, attr: str, method: cst.FunctionDef, receiver: str = "self"
) -> bool:
    """`self.renderer = self.renderer.to(x.device)` in `forward`, with `self.renderer` read by no
    other method but `__init__`: every call (on every replica) moves the attribute again before
    using it, so losing the write loses nothing. A write that builds on the old value in any
    other way (`self.calls = self.calls + 1`) is state, and stays reported."""
    if not (
        type(value) is cst.Call
        and type(value.func) is cst.Attribute
        and value.func.attr.value in _PLACEMENT_METHODS
        and _self_attr(value.func.value, receiver) == attr
    ):
        return False
    cls = _instance_class_of(ctx, method, receiver)
    if cls is None:
        return False
    for other in methods(cls).values():
        if other is method or other.name.value == "__init__":
            continue
        if any(_self_attr(n) == attr for n in ctx.index.walk(other) if type(n) is cst.Attribute):
            return False
    return True


def _scratch_attributes(ctx: FileContext, method: cst.FunctionDef, receiver: str) -> set[str]:
    """Attributes `method` uses as scratch space for one call: it first meets `receiver.x` as the
    target of a plain assignment at the top of its body that does not read the old value
    (`self.outputs = []`), reads it back later in the same call (appends, `return self.outputs`),
    and nothing else in the file but `__init__` names `.x`. Each replica writes a fresh value into
    its own `__dict__` and the result leaves through what the call returns, so losing the write
    loses nothing; a value kept for a later reader (`self.attn = a` read by `model.module.attn`)
    is named elsewhere and stays reported."""
    first: dict[str, cst.Attribute] = {}
    read_back: set[str] = set()
    for node in ctx.index.walk(method.body):
        if type(node) is not cst.Attribute or (attr := _self_attr(node, receiver)) is None:
            continue
        if attr in first:
            if not _is_target(ctx, node):
                read_back.add(attr)
            continue
        first[attr] = node
    top_targets = {
        id(target.target): statement
        for statement in method.body.body
        if type(statement) is cst.SimpleStatementLine
        for small in statement.body
        if type(small) is cst.Assign and len(small.targets) == 1
        for target in small.targets
    }
    candidates = set()
    for attr, node in first.items():
        statement = top_targets.get(id(node))
        if statement is None or attr not in read_back:
            continue
        value = statement.body[0].value  # type: ignore[attr-defined]  # a top-level single-target Assign
        if any(type(n) is cst.Attribute and _self_attr(n, receiver) == attr for n in ctx.index.walk(value)):
            continue
        candidates.add(attr)
    if not candidates:
        return set()
    cls = ctx.index.enclosing_class(method)
    init = methods(cls).get("__init__") if cls is not None else None
    inside = {id(n) for n in ctx.index.walk(method)} | ({id(n) for n in ctx.index.walk(init)} if init else set())
    for node in ctx.index.of_type(cst.Attribute):
        if node.attr.value in candidates and id(node) not in inside:
            candidates.discard(node.attr.value)
    return candidates


def _lazy_default(ctx: FileContext, assign: cst.Assign, value: cst.BaseExpression, attr: str, receiver: str) -> bool:
    """`if not hasattr(self, "traced"): self.traced = False`: a constant set only where the
    attribute is missing. A replica that lost it sets it again, to the same value, before reading
    it, so losing the write loses nothing."""
    if type(value) not in (cst.Name, cst.Integer, cst.Float, cst.SimpleString) or (
        type(value) is cst.Name and value.value not in ("True", "False", "None")
    ):
        return False
    for ancestor in ctx.index.ancestors(assign):
        if type(ancestor) is cst.If:
            test = ancestor.test
            if (
                type(test) is cst.UnaryOperation
                and type(test.operator) is cst.Not
                and type(test.expression) is cst.Call
                and dotted_name(test.expression.func) == "hasattr"
                and len(test.expression.args) == 2
                and dotted_name(test.expression.args[0].value) == receiver
                and type(test.expression.args[1].value) is cst.SimpleString
                and literal_value(test.expression.args[1].value) == attr
            ):
                return True
        if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
            return False
    return False


def _self_attr(node: cst.BaseExpression, receiver: str = "self") -> str | None:
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == receiver:
        return node.attr.value
    return None


def _instance_class_of(ctx: FileContext, function: cst.FunctionDef, receiver: str) -> cst.ClassDef | None:
    """The class whose instance `receiver` holds in `function` (its own class for `self`)."""
    if receiver == "self":
        return ctx.index.enclosing_class(function)
    return instance_class(ctx, function, receiver)


def _registered_names(ctx: FileContext, cls: cst.ClassDef) -> set[str]:
    """Buffers and parameters registered by name: in-place updates of those survive replicas."""
    names: set[str] = set()
    for node in ctx.index.walk(cls):
        if type(node) is cst.Call and type(node.func) is cst.Attribute:
            if node.func.attr.value in ("register_buffer", "register_parameter") and node.args:
                value = node.args[0].value
                if type(value) is cst.SimpleString and isinstance(text := literal_value(value), str):
                    names.add(text)
    return names


def _under_process_count_test(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    """`node` sits in a branch of an `if` that asks whether the run is distributed."""
    for ancestor in ctx.index.ancestors(node):
        if ancestor is scope:
            return False
        if type(ancestor) is cst.If and any(w in ctx.code_for(ancestor.test) for w in _PROCESS_WORDS):
            return True
    return False


_PROCESS_WORDS = ("num_processes", "distributed", "world_size", "use_ddp", "multi_gpu")


def _is_target(ctx: FileContext, node: cst.Attribute) -> bool:
    parent = ctx.index.parent(node)
    if type(parent) is cst.AssignTarget or type(parent) is cst.Del:
        return True
    if isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is node:
        return True
    if type(parent) in (cst.Tuple, cst.List, cst.Element):
        return any(type(a) is cst.AssignTarget for a in ctx.index.ancestors(node))
    return False


def _through_module(ctx: FileContext, read: cst.Attribute, certain: bool) -> FixProposal:
    """`wrapper.attr` -> `wrapper.module.attr` where the wrapper is certain; where the same code
    may also see the bare model (a wrap under an `if`, a helper called with either),
    `getattr(wrapper, "module", wrapper).attr`, right in both cases."""
    held = code_in_place(ctx, read.value, read.value)
    owner = f"{held}.module" if certain else f'getattr({held}, "module", {held})'
    return FixProposal(
        f"Read it through the wrapped model: `{owner}.{read.attr.value}`",
        safe=False,
        replacements=((read.value, owner),),
    )


def _branches(ctx: FileContext, statement: cst.CSTNode) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """(`if` statement, the branch of it holding `statement`) for each enclosing `if`."""
    out: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    child: cst.CSTNode = statement
    for ancestor in ctx.index.ancestors(statement):
        if type(ancestor) in (cst.If, cst.Try):
            out.append((ancestor, child))
        child = ancestor
    return out


def _other_branch(ctx: FileContext, node: cst.CSTNode, branches: list[tuple[cst.CSTNode, cst.CSTNode]]) -> bool:
    """Whether `node` sits in another branch of an `if` whose one branch wraps."""
    owners = {id(owner): branch for owner, branch in branches}
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        branch = owners.get(id(ancestor))
        if branch is not None:
            return child is not branch
        child = ancestor
    return False


def _unpacked(ctx: FileContext, targets: Sequence[cst.BaseExpression]) -> list[cst.BaseExpression]:
    """The targets, with the names and attributes an unpacking pattern binds in place of the
    pattern (`self.last, _ = pair` writes `self.last`)."""
    out: list[cst.BaseExpression] = []
    for target in targets:
        if type(target) in (cst.Tuple, cst.List):
            for node in ctx.index.walk(target):
                if isinstance(node, (cst.Name, cst.Attribute)) and type(ctx.index.parent(node)) is cst.Element:
                    out.append(node)
        else:
            out.append(target)
    return out


def _unwrapped_in_other_branch(ctx: FileContext, node: cst.Attribute, wrapper: str) -> bool:
    """`if self.parallel: w.module.x` / `else: w.x`: the other branch of an `if` that holds the
    read reaches the model through `<wrapper>.module`, so the code tells the wrapped model from
    the bare one (on a flag of its own) and this branch holds the bare one."""
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            other = ancestor.orelse if child is ancestor.body else ancestor.body
            if other is not None and any(
                type(n) is cst.Attribute and n.attr.value == "module" and dotted_name(n.value) == wrapper
                for n in ctx.index.walk(other)
            ):
                return True
        child = ancestor
    return False
