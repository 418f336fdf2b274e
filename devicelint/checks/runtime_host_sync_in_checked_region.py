from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class HostSyncInCheckedRegion(ReportedElsewhere):
    """
    ## What it does
    Reported by the runtime checker (`devicelint.runtime`): a call site that made the host
    wait for the accelerator inside the checked region, with how many times it did.
    Counted: `.item()`, `float()`, `int()`, `bool()` and `if tensor:`, device-to-host copies
    (`.cpu()`, `.tolist()`, `.numpy()`, `print(tensor)`), and ops whose output shape depends
    on the data (`nonzero`, boolean-mask indexing, `masked_select`, `unique`,
    `repeat_interleave` without `output_size`, `torch.equal`). A call site is reported when
    it synced at least twice (`min_syncs`): one final `.item()` for an assertion is fine, one
    per step is not. Warnings by default (`syncs="warn"`); `syncs="error"` makes them fail
    the check, `syncs="ignore"` drops them.

    ## Why it is a bug on a GPU
    The CPU queues GPU work asynchronously; a sync stalls it until the GPU has finished
    everything queued so far, so the next kernels cannot be queued ahead. One `.item()` per
    step in a training loop can cost a large share of the step time on a fast GPU.

    ## Example
    ```python
    for x, y in loader:
        loss = step(x, y)
        total += loss.item()                 # waits for the GPU every step
    ```

    ## Use instead
    ```python
    total = torch.zeros((), device=device)
    for x, y in loader:
        loss = step(x, y)
        total += loss.detach()
    print(total.item())                      # once, after the loop
    ```

    ## Fix safety
    No automatic fix: the runtime checker reports, it does not rewrite code.

    ## Known limits
    Syncs are counted on accelerator tensors only (the simulated `vgpu:0` when there is no
    GPU). Only syncs the user's code asks for are reported: those made inside torch's own
    modules and functions (for example `nn.TransformerEncoder` inspecting its mask, or
    `clip_grad_norm_(..., error_if_nonfinite=True)`) are not. `print(tensor)` counts one sync
    per element it reads.
    """

    code = "DL602"
    name = "host-sync-in-checked-region"
    summary = "A call site made the host wait for the accelerator, repeatedly (runtime check)."
    message = (
        "{what} waits for the device here ({times} in the checked region); keep the value on the "
        "device (accumulate tensors, log every N steps) or move it out of the step"
    )
    severity = "warning"
