from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.argument_places import passed_for
from devicelint.analysis.facts import file_facts
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import CPU
from devicelint.analysis.placement_values import cpu_only_script
from devicelint.analysis.training.helpers import bound_arguments, callee
from devicelint.analysis.training.syntax import short
from devicelint.analysis.vocabulary import DIST_COLLECTIVES, PRESERVING_METHODS
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# Accelerate's gathers and reductions, as `accelerator.<method>(t)` or `accelerate.utils.<name>(t)`.
ACCELERATE_COLLECTIVES = frozenset({"gather", "gather_for_metrics", "reduce", "pad_across_processes"})
_TENSOR_KEYWORDS = frozenset({"tensor", "input", "output", "input_tensor", "output_tensor", "tensor_list"})


@register
class CollectiveTensorOnCpu(Rule):
    """
    ## What it does
    Flags a tensor made on the CPU in the file (a factory without `device=`, `torch.tensor(n)`
    of a count, a `.cpu()` copy) that is handed to a collective: `torch.distributed.all_reduce`,
    `all_gather`, `broadcast`, `reduce`, `send`... or Accelerate's `accelerator.gather`,
    `gather_for_metrics`, `reduce` and `pad_across_processes`.

    ## Why it is a bug on a GPU
    NCCL, the backend of every multi-GPU job, only communicates tensors on the rank's GPU. A
    CPU tensor fails with `No backend type associated with device type cpu` (or, on older
    releases, `Tensors must be CUDA and dense`). Single-process runs and CPU tests, where the
    collective is skipped or runs on gloo, pass; the job dies on its first multi-GPU step, often
    in a metric that only a few code paths compute.

    ## Example
    ```python
    count = torch.tensor(batch["input_ids"].size(1))
    total = accelerator.gather_for_metrics(count).sum()

    loss_sum = torch.zeros(1)
    dist.all_reduce(loss_sum)
    ```

    ## Use instead
    ```python
    count = torch.tensor(batch["input_ids"].size(1), device=accelerator.device)
    total = accelerator.gather_for_metrics(count).sum()

    loss_sum = torch.zeros(1, device=device)
    dist.all_reduce(loss_sum)
    ```

    ## Fix safety
    No automatic fix: the device to create the tensor on (`accelerator.device`, the rank's
    `cuda:<local_rank>`) is the author's to name.

    ## Known limits
    A file that names the `gloo` backend anywhere, and a call given a `group=` (which may be a
    gloo group), are left alone: gloo runs collectives on CPU tensors on purpose. For
    `torch.distributed` calls the file must name `nccl` or CUDA. Only tensors whose CPU origin
    the file shows are reported; a tensor handed in by a caller is not judged. A CPU tensor
    handed to a function that passes it on to a collective (itself or a copy that stays where
    it is: `total = value.clone(); dist.all_reduce(total)`), a function of the file or of another
    module of the project, is reported at the call.
    """

    code = "DL209"
    name = "collective-tensor-on-cpu"
    summary = "A CPU tensor handed to a collective (all_reduce, gather_for_metrics) that NCCL runs only on GPU tensors."
    message = "`{value}` is a tensor made on the CPU, handed to {callee}: NCCL only communicates GPU tensors; {advice}"
    tokens = ("all_reduce", "all_gather", "broadcast", "reduce", "gather", "send", "recv", "scatter", "all_to_all")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        source = ctx.source.lower()
        if "gloo" in source or cpu_only_script(ctx):
            return
        facts = file_facts(ctx)
        nccl = "nccl" in source or "cuda" in source
        # accelerate's collectives run over NCCL on GPUs whatever the file says
        through_helpers = nccl or "accelerate" in source
        for call in ctx.index.of_type(cst.Call):
            collective = _collective(ctx, call)
            if collective is not None:
                callee, device_hint, from_dist = collective
                if from_dist and not nccl:
                    continue
                if any(arg.keyword is not None and arg.keyword.value == "group" for arg in call.args):
                    continue
                handed = [v for v in _tensor_arguments(call) if not _handed_in(ctx, call, v)]
            elif through_helpers:
                # a helper (of the file or of the project) that hands its argument to a collective
                device_hint = None
                callee, handed = _through_helper(ctx, call)
            else:
                continue
            for value in handed:
                fact = facts.value(value)
                if fact.kind != CPU or not (fact.from_factory or fact.copied):
                    continue
                advice = (
                    f"create it with `device={device_hint}`"
                    if device_hint is not None
                    else "create it on the rank's GPU (`device=`) or move it there first"
                )
                yield self.violation(value, value=short(ctx, value, 40), callee=f"`{callee}`", advice=advice)
                break


def _through_helper(ctx: FileContext, call: cst.Call) -> tuple[str, list[cst.BaseExpression]]:
    """(what to name, the arguments) where `call` runs a function that hands those arguments to
    a `torch.distributed` collective: `reduce_mean(torch.tensor(acc))`."""
    helper = callee(ctx, call)
    if helper is not None:
        reached = _collective_parameters(ctx, helper)
        bound = bound_arguments(ctx, helper, call) if reached else None
        if not bound:
            return "", []
        handed = [(bound[p], c) for p, c in reached.items() if p in bound]
        name = helper.name.value
    else:
        spelled = dotted_name(call.func)
        imported = ctx.project.helpers.get(spelled) if spelled is not None else None
        if imported is None or not imported.uses.collectives or any(a.star for a in call.args):
            return "", []
        uses = imported.uses
        handed = []
        for position, arg in enumerate(call.args):
            param = uses.parameter_at(
                position if arg.keyword is None else None, arg.keyword.value if arg.keyword else None
            )
            handed.extend((arg.value, c) for p, c, _ in uses.collectives if p == param)
        name = spelled or ""
    if not handed:
        return "", []
    return f"{name}`, which hands it to `{handed[0][1]}", [value for value, _ in handed]


def _handed_in(ctx: FileContext, call: cst.Call, value: cst.BaseExpression) -> bool:
    """`value` is what the enclosing function was handed (or a copy of it): judged where the
    function is called, with the tensor made there."""
    function = ctx.index.enclosing_function(call)
    return function is not None and _kept_root(value) in _parameter_copies(ctx, function)


def _parameter_copies(ctx: FileContext, function: cst.FunctionDef) -> dict[str, str]:
    """Name -> the parameter of `function` it is, or copies keeping it where it is."""
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    assigns = ctx.index.within(function, cst.Assign)
    # names bound somewhere to anything but a kept copy of a name: no longer what was handed in
    rebound = {
        n.value
        for assign in assigns
        for target in assign.targets
        if type(target.target) is not cst.Name or _kept_root(assign.value) is None
        for n in ctx.index.walk(target.target)
        if type(n) is cst.Name
    }
    copies = {p: p for p in params if p not in rebound}
    for assign in assigns:
        root = _kept_root(assign.value)
        for target in assign.targets:
            if type(target.target) is cst.Name and root in copies and target.target.value not in rebound:
                copies[target.target.value] = copies[root]
    return copies


def _collective_parameters(ctx: FileContext, function: cst.FunctionDef) -> dict[str, str]:
    """Parameter -> the collective `function` hands it to, itself or a copy of it that stays where
    it is (`total = value.clone(); dist.all_reduce(total)`)."""
    copies = _parameter_copies(ctx, function)
    found: dict[str, str] = {}
    for inner in ctx.index.within(function, cst.Call):
        collective = _collective(ctx, inner)
        if collective is None:
            continue
        for value in _tensor_arguments(inner):
            root = _kept_root(value)
            if root in copies:
                found.setdefault(copies[root], collective[0])
    return found


def _kept_root(node: cst.BaseExpression) -> str | None:
    """The name under calls of methods that keep a tensor where it is (`value.clone().float()`)."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in PRESERVING_METHODS:
        node = node.func.value
    return node.value if type(node) is cst.Name else None


def _collective(ctx: FileContext, call: cst.Call) -> tuple[str, str | None, bool] | None:
    """(name to show, the device to suggest, whether it is a torch.distributed call)."""
    qualified = ctx.qualified_name(call.func) or ""
    if qualified.startswith("torch.distributed.") and qualified.rsplit(".", 1)[-1] in DIST_COLLECTIVES:
        return f"dist.{qualified.rsplit('.', 1)[-1]}", None, True
    if qualified.startswith("accelerate.") and qualified.rsplit(".", 1)[-1] in ACCELERATE_COLLECTIVES:
        return qualified.rsplit(".", 1)[-1], None, False
    func = call.func
    if type(func) is cst.Attribute and func.attr.value in ACCELERATE_COLLECTIVES:
        receiver = dotted_name(func.value)
        if receiver is not None and _is_accelerator(ctx, func.value, receiver):
            return f"{receiver}.{func.attr.value}", f"{receiver}.device", False
    return None


def _is_accelerator(ctx: FileContext, node: cst.BaseExpression, receiver: str, depth: int = 0) -> bool:
    """A name that says it is one (`accelerator`), is annotated `Accelerator`, or is bound to
    `Accelerator(...)` in the file; a helper's parameter that every call of the file fills with
    one (`_gather(acc, x)` called with the caller's `acc: Accelerator`)."""
    if receiver.rsplit(".", 1)[-1].lower().endswith("accelerator"):
        return True
    function = ctx.index.enclosing_function(node)
    if function is not None:
        for param in ctx.index.walk(function.params):
            if type(param) is cst.Param and param.name.value == receiver and param.annotation is not None:
                return (ctx.qualified_name(param.annotation.annotation) or "").startswith("accelerate.")
        passed = passed_for(ctx, node) if type(node) is cst.Name and depth < 3 else None
        if passed:
            return all(
                (name := dotted_name(value)) is not None and _is_accelerator(ctx, value, name, depth + 1)
                for value in passed
            )
    for assign in ctx.index.of_type(cst.Assign):
        if (
            any(dotted_name(t.target) == receiver for t in assign.targets)
            and type(assign.value) is cst.Call
            and (ctx.qualified_name(assign.value.func) or "").startswith("accelerate.")
        ):
            return True
    return False


def _tensor_arguments(call: cst.Call) -> Iterator[cst.BaseExpression]:
    for arg in call.args:
        if arg.star:
            continue
        if arg.keyword is None or arg.keyword.value in _TENSOR_KEYWORDS:
            yield arg.value
