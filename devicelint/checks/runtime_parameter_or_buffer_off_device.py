from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class ParameterOrBufferOffDevice(ReportedElsewhere):
    """
    ## What it does
    Reported by the runtime checker's audit (`devicelint.runtime.audit(model, device)`, and
    automatically the first time each model runs inside a check): registered parameters and
    buffers that are not on the expected device when the model runs. One finding per model,
    listing the first few names, at the line that called the model.

    ## Why it is a bug on a GPU
    A model only partly moved (a submodule added after `.to(device)`, a parameter replaced
    by a new CPU `nn.Parameter`, a module built inside `forward`) fails with a device
    mismatch on the GPU, or silently trains a copy the optimizer does not hold.

    ## Example
    ```python
    model = Net().to(device)
    model.head = nn.Linear(512, 10)          # new head, still on the CPU
    logits = model(x)
    ```

    ## Use instead
    ```python
    model = Net()
    model.head = nn.Linear(512, 10)
    model.to(device)
    logits = model(x)
    ```

    ## Fix safety
    No automatic fix: the runtime checker reports, it does not rewrite code.

    ## Known limits
    The audit runs once per model per check, at its first forward; tensors moved later are
    not audited again. Parameters of modules held in plain lists or dicts are reported once,
    as DL606, not again here.
    """

    code = "DL604"
    name = "parameter-or-buffer-off-device"
    summary = "Registered parameters or buffers are not on the expected device when the model runs (runtime check)."
    message = (
        "{count} parameter(s)/buffer(s) of the model are on {found}, expected {expected}: {names}; "
        "move the model with `.to(device)` before running it"
    )
