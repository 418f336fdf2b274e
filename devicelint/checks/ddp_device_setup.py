from __future__ import annotations

from typing import Iterator

import libcst as cst

from devicelint.analysis.module_placement import (
    Device,
    WrapperSite,
    built_on_cpu,
    chain_base,
    device_ids_first,
    history,
    resolver_for,
    set_device_called,
    short,
    usage_after,
    wrapper_chain_moves,
    wrapper_sites,
)
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register

# A launcher or the script itself gives each process its own GPU through the environment.
_PER_PROCESS_VISIBILITY = ("CUDA_VISIBLE_DEVICES",)


@register
class DdpDeviceSetup(Rule):
    """
    ## What it does
    Flags `DistributedDataParallel` (under any alias) set up so that ranks do not each get
    their own GPU:

    - `device_ids=[...]` given for a model built in the same function and never moved off the
      CPU (also without `device_ids` when the file uses the `nccl` backend);
    - a model moved to one fixed device in every process (`model.to("cuda:0")`,
      `model.cuda()` or `.to("cuda")` with no `torch.cuda.set_device(...)` in the file), so
      every rank runs on the same GPU, or sits on another GPU than its `device_ids=[local_rank]`.

    DDP over a CPU model without `device_ids` (the `gloo` backend) is not reported.

    ## Why it is a bug on a GPU
    With `device_ids`, DDP refuses a CPU module (`ValueError: DistributedDataParallel
    device_ids and output_device arguments only work with single-device/multiple-device GPU
    modules or CPU modules`), and NCCL cannot all-reduce CPU tensors. When every rank uses
    cuda:0, all processes crowd one GPU: it runs out of memory, NCCL fails or hangs with
    "Duplicate GPU detected", and the other GPUs idle.

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
    mention `CUDA_VISIBLE_DEVICES` are not reported for it. "Never moved" needs the model to be
    built in the same function from a class of the file or of `torch.nn`/`torchvision.models`,
    and not handed to other code before wrapping.
    """

    code = "DL205"
    name = "ddp-device-setup"
    summary = "DistributedDataParallel needs each rank's model on that rank's own GPU."
    message = "`{call}` wraps `{model}`, {problem}; {advice}"
    tokens = ("DistributedDataParallel",)

    _ADVICE = (
        "call `torch.cuda.set_device(local_rank)`, move the model with `.to(local_rank)` and pass "
        "`device_ids=[local_rank]`"
    )

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for site in wrapper_sites(ctx):
            if site.kind == "DistributedDataParallel" and site.wrapped is not None:
                violation = self._check_site(ctx, site)
                if violation is not None:
                    yield violation

    def _check_site(self, ctx: FileContext, site: WrapperSite) -> Violation | None:
        resolver = resolver_for(ctx, site.call)
        base, inline = chain_base(resolver, site.wrapped)  # type: ignore[arg-type]
        var = dotted_name(base)
        moves: list[Device] = [inline] if inline is not None else []
        facts = None
        if var is not None:
            facts = history(ctx, var, site.call)
            if facts.escaped or facts.sub_moves:
                return None
            moves = [device for device, _ in facts.moves] + moves
        elif not isinstance(base, cst.Call):
            return None
        model = var or short(ctx, base)
        has_ids = site.device_ids is not None and not (isinstance(site.device_ids, cst.Name) and site.device_ids.value == "None")
        if not moves:
            if wrapper_chain_moves(ctx, site) or not built_on_cpu(ctx, base, facts):
                return None
            if has_ids:
                return self.violation(
                    site.call, call=short(ctx, site.call), model=model,
                    problem="which is still on the CPU, while `device_ids` asks for a GPU module",
                    advice=f"move it first with `{model}.to(local_rank)`",
                )
            if _uses_nccl(ctx):
                return self.violation(
                    site.call, call=short(ctx, site.call), model=model,
                    problem="which is still on the CPU, while the file's `nccl` backend only reduces CUDA tensors",
                    advice=f"move it with `{model}.to(local_rank)` and pass `device_ids=[local_rank]` (or use `gloo` for CPU training)",
                )
            return None
        last = moves[-1]
        if not last.literal or last.type != "cuda" or any(not d.literal for d in moves):
            return None
        if any(token in ctx.source for token in _PER_PROCESS_VISIBILITY):
            return None
        if site.target is not None:
            later = usage_after(ctx, site.target, site.call)
            if any(not device.literal for device, _ in later.moves):
                return None  # moved again after wrapping, to a device the code computes
        per_rank_ids = has_ids and device_ids_first(resolver, site.device_ids) is None and not _literal_list(site.device_ids)
        if per_rank_ids:
            if last.is_current and set_device_called(ctx):
                return None
            ids = short(ctx, site.device_ids)  # type: ignore[arg-type]
            where = "cuda:0 in every process (the current device, and nothing calls `torch.cuda.set_device`)" if last.is_current else f"{last.text} in every process"
            return self.violation(
                site.call, call=short(ctx, site.call), model=model,
                problem=f"which is on {where}, while `device_ids={ids}` names each rank's own GPU",
                advice=f"move the model to the same device as `device_ids` (`{model}.to(local_rank)`)",
            )
        if last.is_current:
            if set_device_called(ctx):
                return None
            problem = "which every rank moves to the current device with `.cuda()`/`\"cuda\"`, cuda:0 in every process since nothing calls `torch.cuda.set_device`"
        else:
            problem = f"which every rank moves to the same {last.text}"
        return self.violation(
            site.call, call=short(ctx, site.call), model=model,
            problem=problem + ", so all processes share one GPU", advice=self._ADVICE,
        )



def _uses_nccl(ctx: FileContext) -> bool:
    return ('"nccl"' in ctx.source or "'nccl'" in ctx.source) and "gloo" not in ctx.source


def _literal_list(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, (cst.List, cst.Tuple)) and all(
        isinstance(e, cst.Element) and isinstance(e.value, cst.Integer) for e in node.elements
    )
