from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class PerStepHostToDeviceCopy(ReportedElsewhere):
    """
    ## What it does
    Reported by the runtime checker (`devicelint.runtime`): a tensor made on the CPU inside a
    module's `forward` (by `torch.arange`, `torch.zeros`, `torch.tensor`, ...) and then copied
    to the accelerator, by the same line, at least twice (`min_copies`) in the checked region.

    ## Why it is a bug on a GPU
    Each call allocates on the host and copies to the device, usually with a synchronisation,
    in every step, for a value that could be made on the device directly or made once and
    registered as a buffer. It is correct, so nothing fails; it is only slow.

    ## Example
    ```python
    def forward(self, x):
        scale = torch.tensor([0.5, 2.0]).to(x.device)    # host allocation and copy per call
        return x * scale
    ```

    ## Use instead
    ```python
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.5, 2.0]))

    def forward(self, x):
        return x * self.scale
    ```

    ## Fix safety
    No automatic fix: the runtime checker reports, it does not rewrite code.

    ## Known limits
    Only tensors made inside a module's `forward` are followed: batches made on the CPU by
    a `Dataset` or `collate_fn` and copied each step are the normal way to feed a GPU and are
    not reported. Tensors made outside the checked region are not followed.
    """

    code = "DL603"
    name = "per-step-host-to-device-copy"
    summary = "A tensor made on the CPU in `forward` is copied to the accelerator every step (runtime check)."
    message = (
        "a tensor made on the CPU by `{made_by}` inside `forward` is copied to {device} ({times}); "
        "create it there directly (`device=x.device`) or register it once as a buffer"
    )
