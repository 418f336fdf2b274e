from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.context import FileContext
from devicelint.rule_base import FixProposal, Rule, Violation, register


@register
class NumpyOnDeviceTensor(Rule):
    """
    ## What it does
    Flags `.numpy()` on a tensor that the placement analysis knows is on the accelerator (the
    output of a model moved to a device, a tensor moved with `.to(device)` or `.cuda()`, or
    anything computed from them) when no `.cpu()` comes first.

    ## Why it is a bug on a GPU
    NumPy arrays live in host memory. `.numpy()` on a CUDA tensor raises `TypeError: can't
    convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host
    memory first.`: code tested on a CPU fails on the first GPU run, often in evaluation or
    logging at the end of an epoch.

    ## Example
    ```python
    model.to(device)
    preds = model(x.to(device)).argmax(1).numpy()
    ```

    ## Use instead
    ```python
    model.to(device)
    preds = model(x.to(device)).argmax(1).cpu().numpy()
    ```

    ## Fix safety
    The fix inserts `.cpu()` before `.numpy()` and is safe: on a CPU tensor `.cpu()` returns
    the tensor itself.

    ## Known limits
    Tensors whose placement the analysis cannot prove (function parameters, values from other
    files) are not reported, nor are inputs of `forward`, which live wherever the caller put
    them.
    """

    code = "DL108"
    name = "numpy-on-device-tensor"
    summary = "`.numpy()` on a tensor known to be on the GPU, without `.cpu()` first."
    message = "`{call}` converts a tensor that is on the device: it raises `TypeError: can't convert cuda:0 device type tensor to numpy`; call `.cpu()` first: `{fixed}`"
    fix_availability = "safe"
    tokens = ("numpy",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        facts = file_facts(ctx)
        for call in ctx.index.of_type(cst.Call):
            func = call.func
            if not (type(func) is cst.Attribute and func.attr.value == "numpy" and not call.args):
                continue
            if not facts.is_device_tensor(func.value, certain=True):
                continue
            receiver = ctx.code_for(func.value)
            fixed = f"{receiver}.cpu().numpy()"
            fix = FixProposal(description="Call `.cpu()` before `.numpy()`", safe=True, replacements=((call, fixed),))
            yield self.violation(call, fix=fix, call=ctx.code_for(call), fixed=fixed)
