from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class ModuleInPlainContainer(ReportedElsewhere):
    """
    ## What it does
    The runtime twin of DL103 (submodules in plain container), reported by the runtime
    checker's audit: a plain `list`, `tuple` or `dict` attribute of a module that holds
    modules or parameters not registered anywhere else in the model (or tensors off the
    expected device), with its attribute path (`blocks.0.mlp.layers`). Every op that later
    mixes their CPU parameters with device tensors is counted in this one finding.

    ## Why it is a bug on a GPU
    Modules in a plain list are invisible to `nn.Module`: `.to(device)` leaves them on the
    CPU (the GPU run fails with a device mismatch), `.parameters()` skips them (the
    optimizer never trains them) and `state_dict` does not save them.

    ## Example
    ```python
    self.layers = [nn.Linear(d, d) for _ in range(n)]
    ```

    ## Use instead
    ```python
    self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
    ```

    ## Fix safety
    No automatic fix: the runtime checker reports, it does not rewrite code. The static rule
    DL103 covers the same bug from the source.

    ## Known limits
    Lists that only alias modules registered elsewhere (`self.heads = [self.a, self.b]`) are
    fine and not reported. Attributes of torch's own module classes are not audited. Lists of
    plain tensors are reported only when a tensor is off the expected device.
    """

    code = "DL606"
    name = "module-in-plain-container"
    summary = "A plain list or dict holds modules or parameters that `nn.Module` cannot see (runtime check)."
    message = (
        "`{path}` is a plain {kind} holding {what}: `.to()`, `.parameters()` and `state_dict` do not "
        "see them (they stay off {expected}); use {use}"
    )
