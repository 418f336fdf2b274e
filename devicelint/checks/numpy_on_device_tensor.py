from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.analysis.imported_helpers import imported_calls
from devicelint.analysis.numpy_bound import numpy_consumer
from devicelint.analysis.placement_values import cpu_only_script
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
    the tensor itself. For a device tensor handed to a function of another project module that
    calls `.numpy()` on it, the fix hands it `.cpu()` of the tensor instead; it is unsafe, since
    that function may use the tensor on the device too.

    Also flags a tensor known to be on the accelerator handed to a SciPy or scikit-learn
    function (`stats.pearsonr(preds, y)`, `f1_score(labels, preds)`), which converts its
    arguments with `numpy.asarray` and fails the same way (NumPy's own functions are not
    checked: they take the arrays other libraries return as often).

    ## Known limits
    Tensors whose placement the analysis cannot prove (function parameters, values from other
    files) are not reported, nor are inputs of `forward`, which live wherever the caller put
    them. A function imported from another module of the project counts when it calls
    `.numpy()` on a parameter (through `.data`, indexing, `detach()`, casts and reshapes) that
    it never tests, rebinds or moves to the CPU itself; so does a method of an imported class
    called on an instance the file builds (`visualizer = Visualizer(opt)`, then
    `visualizer.save_masks(epoch, logits)`). A whole program in one file that never names an
    accelerator (a CPU-only notebook or script, its comments aside) has nothing on a device,
    whatever it reads a parameter of (`next(client.net.parameters()).numpy()`).
    """

    code = "DL108"
    name = "numpy-on-device-tensor"
    summary = "`.numpy()` on a tensor known to be on the GPU, without `.cpu()` first."
    message = "`{call}` converts a tensor that is on the device{where}: it raises `TypeError: can't convert cuda:0 device type tensor to numpy`; call `.cpu()` first: `{fixed}`"
    fix_availability = "sometimes"
    tokens = ("numpy", "sklearn", "scipy")
    reads_helpers = True

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if cpu_only_script(ctx):
            return
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
            yield self.violation(call, fix=fix, call=ctx.code_for(call), fixed=fixed, where="")
        yield from self._handed_to_helpers(ctx)
        yield from self._handed_to_numpy_libraries(ctx)

    def _handed_to_numpy_libraries(self, ctx: FileContext) -> Iterator[Violation]:
        """A device tensor handed to a SciPy or scikit-learn function (`stats.pearsonr(p, y)`,
        `f1_score(labels, preds)`), which turns its arguments into NumPy arrays."""
        facts = file_facts(ctx)
        for call in ctx.index.of_type(cst.Call):
            library = numpy_consumer(ctx, call)
            if library is None:
                continue
            for arg in call.args:  # one finding per call: its first device argument
                if arg.star or not facts.is_device_tensor(arg.value, certain=True):
                    continue
                moved = ctx.code_for(arg.value) + ".cpu()"
                fixed = ctx.code_for(call.deep_replace(arg.value, cst.parse_expression(moved)))
                fix = FixProposal(
                    description=f"Hand `{moved}` to `{library}`", safe=False, replacements=((arg.value, moved),)
                )
                where = f" (`{library}` turns its arguments into NumPy arrays)"
                yield self.violation(arg.value, fix=fix, call=ctx.code_for(call), fixed=fixed, where=where)
                break

    def _handed_to_helpers(self, ctx: FileContext) -> Iterator[Violation]:
        """A device tensor handed to a function of another project module that calls `.numpy()`
        on it: reported at the call, the only place this file can fix."""
        facts = file_facts(ctx)
        for call, helper, bound in imported_calls(ctx):
            for param, line in helper.uses.to_numpy:
                arg = bound.get(param)
                if arg is None or not facts.is_device_tensor(arg, certain=True):
                    continue
                moved = ctx.code_for(arg) + ".cpu()"
                fixed = ctx.code_for(call.deep_replace(arg, cst.parse_expression(moved)))
                # unsafe: the helper may also use the tensor where the device is needed
                fix = FixProposal(
                    description=f"Hand `{moved}` to `{helper.qualified}`", safe=False, replacements=((arg, moved),)
                )
                where = f" (`{helper.qualified}` calls `.numpy()` on its `{param}` at {helper.path}:{line})"
                yield self.violation(arg, fix=fix, call=ctx.code_for(call), fixed=fixed, where=where)
