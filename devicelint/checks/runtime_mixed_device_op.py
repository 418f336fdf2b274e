from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class MixedDeviceOp(ReportedElsewhere):
    """
    ## What it does
    Reported by the runtime checker (`devicelint.runtime`), never by the static linter: an aten
    op whose tensor arguments were on two devices while the model really ran, in the forward
    pass, the backward pass or the optimizer step. Also the mixes torch accepts silently: a
    0-dim CPU tensor in an elementwise op with accelerator tensors, and a CPU index tensor
    used to index an accelerator tensor. The finding names the module that ran the op (`blocks.0.attn`) and
    the line that made the CPU tensor (`torch.arange(T)`), or the line of the op when the
    tensor came from elsewhere; backward ops are reported at the forward line that recorded them.

    ## Why it is a bug on a GPU
    For most ops CUDA raises `Expected all tensors to be on the same device, but found at
    least two devices, cuda:0 and cpu!`, often only on the GPU machine, after the CPU-only
    tests passed. The silent cases are worse: the 0-dim or index tensor is copied from the
    host on every call, with a synchronisation, in every step.

    ## Example
    ```python
    def forward(self, x):
        pos = torch.arange(x.shape[1])      # on the CPU
        return x + self.pos_emb(pos)        # cuda:0 and cpu in one op
    ```

    ## Use instead
    ```python
    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device)
        return x + self.pos_emb(pos)
    ```

    ## Fix safety
    No automatic fix: the runtime checker reports, it does not rewrite code. The static rule
    DL101 (tensor created off device) offers fixes for the lines it can see.

    ## Known limits
    In simulation (no GPU) the "accelerator" is the simulated `vgpu:0`; mixes between two
    GPUs (`cuda:0` and `cuda:1`) need real hardware. Torch functions called with a CPU
    tensor that requires grad are moved to the op's device after reporting, and other mixes
    are computed as if the tensor had been on the device, so one run reports every bug
    instead of stopping at the first. CPU scalars passed by torch's own code (optimizer step
    counters) are not reported.
    """

    code = "DL601"
    name = "mixed-device-op"
    summary = "An op ran with tensors on two devices (runtime check)."
    message = (
        "{ops} mixed the cpu tensor made here by `{made_by}` with tensors on {device} ({times}); "
        "create it on the input's device (`device=x.device`) or register it as a buffer"
    )
