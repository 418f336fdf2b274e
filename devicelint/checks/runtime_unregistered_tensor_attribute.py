from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class UnregisteredTensorAttribute(ReportedElsewhere):
    """
    ## What it does
    The runtime twin of DL102 (tensor attribute not registered), reported by the runtime
    checker's audit: a module attribute holding a plain tensor (not an `nn.Parameter`, not
    a registered buffer) that is not on the expected device when the model runs, with its
    attribute path (`blocks.0.attn.mask`) and the line of the class that assigns it. Every op
    that later mixes that tensor with device tensors is counted in this one finding.

    ## Why it is a bug on a GPU
    `model.to(device)` and `.cuda()` move parameters and buffers only: the attribute stays on
    the CPU and the first op that combines it with a GPU tensor fails (or, for a 0-dim
    tensor, copies it every step). `state_dict` does not save it either.

    ## Example
    ```python
    def __init__(self, n):
        super().__init__()
        self.mask = torch.tril(torch.ones(n, n))
    ```

    ## Use instead
    ```python
    def __init__(self, n):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(n, n)), persistent=False)
    ```

    ## Fix safety
    No automatic fix: the runtime checker reports, it does not rewrite code. The static rule
    DL102 covers the same bug from the source.

    ## Known limits
    Attributes of torch's own module classes are not audited. A tensor attribute already on
    the right device (assigned in `forward` from a device tensor) is not reported. The line is
    found by reading the class source for `self.<name> =`; without source, the class line.
    """

    code = "DL605"
    name = "unregistered-tensor-attribute"
    summary = "A module holds a plain tensor attribute that `.to()` did not move (runtime check)."
    message = (
        "`{path}` is a plain tensor attribute on {device}: `.to()`, `state_dict` and DDP ignore it, "
        'so it stays off {expected}; use `self.register_buffer("{attr}", ...)` instead'
    )
