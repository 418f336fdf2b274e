from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.model_events import short, wrapper_sites
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

FUNCTIONAL = frozenset({"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"})


@register
class DataParallelPreferDdp(Rule):
    """
    ## What it does
    Flags every `nn.DataParallel(...)` (under any alias) and every call of the functional
    `torch.nn.parallel.data_parallel(...)`. Off by default; a warning.

    ## Why it is a bug on a GPU
    PyTorch's documentation recommends `DistributedDataParallel` over `DataParallel` even on a
    single machine: DataParallel runs one Python thread per GPU in a single process (GIL
    contention), copies the whole model from `device_ids[0]` to every GPU on each forward pass,
    gathers all outputs on one GPU (which runs out of memory first), loses attribute writes
    made in `forward`, and does not work with many newer features (FSDP, `torch.compile`
    guarantees, some AMP set-ups). The same GPUs usually train markedly faster with DDP.

    DataParallel is still acceptable for quick experiments and notebooks on one machine, for
    inference where set-up time matters more than throughput, and where launching one process
    per GPU (`torchrun`) is impossible.

    ## Example
    ```python
    model = nn.DataParallel(Net().cuda())
    ```

    ## Use instead
    ```python
    # launched with: torchrun --nproc-per-node=4 train.py
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(Net().to(local_rank), device_ids=[local_rank])
    ```

    ## Fix safety
    No fix: moving to DDP changes how the program is launched and how data is sampled
    (`DistributedSampler`).

    ## Known limits
    Every use is reported, including ones guarded by `torch.cuda.device_count() > 1`.
    """

    code = "DL207"
    name = "dataparallel-prefer-ddp"
    summary = "`nn.DataParallel` is slower and more fragile than `DistributedDataParallel`, even on one machine."
    message = "`{call}` uses DataParallel, which PyTorch recommends replacing with `DistributedDataParallel` even on one machine; {advice}"
    severity = "warning"
    default_enabled = False
    tokens = ("DataParallel", "data_parallel")

    _ADVICE = "launch one process per GPU with `torchrun` and wrap the model in `DistributedDataParallel(model, device_ids=[local_rank])`"

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for site in wrapper_sites(ctx):
            if site.kind == "DataParallel":
                yield self.violation(site.call, call=short(ctx, site.call), advice=self._ADVICE)
        for call in ctx.index.of_type(cst.Call):
            if ctx.qualified_name(call.func) in FUNCTIONAL:
                yield self.violation(call, call=short(ctx, call), advice=self._ADVICE)
