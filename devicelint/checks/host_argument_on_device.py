from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.argument_places import place_of_argument
from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.placement_values import cpu_only_script
from devicelint.analysis.training.syntax import short
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# Arguments PyTorch rejects on an accelerator whatever device the other arguments are on:
# (qualified name, position after the callee's own arguments, keyword).
HOST_ONLY_ARGUMENTS: dict[str, tuple[int, str]] = {
    "torch.nn.utils.rnn.pack_padded_sequence": (1, "lengths"),
}


@register
class HostArgumentOnDevice(Rule):
    """
    ## What it does
    Flags a tensor on the accelerator passed where PyTorch only takes a CPU tensor: the
    `lengths` of `torch.nn.utils.rnn.pack_padded_sequence`. The value counts as on the device
    when the code moved it there (`lengths.cuda()`, a batch moved with `.to(device)` and handed
    to the model), when it travelled with a batch that Lightning moves, or when a module's
    `forward` computes it from its own inputs (`lengths = (tokens != pad).sum(1)`).

    ## Why it is a bug on a GPU
    Since PyTorch 1.7 packing checks its lengths on the host and fails with `'lengths' argument
    should be a 1D CPU int64 tensor, but got 1D cuda:0 Long tensor`. On a CPU-only machine
    every tensor is on the host, so tests pass and the job dies on its first GPU batch.

    ## Example
    ```python
    def forward(self, tokens):
        lengths = (tokens != self.pad).sum(dim=1)
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
    ```

    ## Use instead
    ```python
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
    ```

    ## Fix safety
    No automatic fix: moving the lengths back at the call is usually right, but keeping them on
    the host where the batch is made avoids a copy each step; the author chooses.

    ## Known limits
    A `lengths` parameter of `forward` is only reported when a caller in the file passes a
    device tensor: a model's input is presumed to be on the device, but callers often pass
    lengths kept on the CPU on purpose. Lengths given as a Python list are always right.
    """

    code = "DL118"
    name = "host-argument-on-device"
    summary = "A device tensor passed where PyTorch takes only a CPU tensor (pack_padded_sequence lengths)."
    message = "`{callee}` needs `{keyword}` on the CPU, but `{value}` is on the device; pass `{value}.cpu()`"
    tokens = ("pack_padded_sequence",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if cpu_only_script(ctx):
            return
        for call in ctx.index.of_type(cst.Call):
            qualified = ctx.qualified_name(call.func) or ""
            wanted = HOST_ONLY_ARGUMENTS.get(qualified)
            if wanted is None:
                continue
            value = _argument(call, *wanted)
            if value is not None and _on_device(ctx, value):
                yield self.violation(
                    call, callee=qualified.rsplit(".", 1)[-1], keyword=wanted[1], value=short(ctx, value, 40)
                )


def _argument(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    if any(arg.star for arg in call.args):
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [arg.value for arg in call.args if arg.keyword is None]
    return positional[position] if position < len(positional) else None


def _on_device(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """Certainly on the accelerator, or wherever the module's inputs are for a reason other than
    being one of those inputs: a function's tensor parameter is presumed to follow the inputs
    (its fact names itself, `lengths.device`), which says nothing about what callers pass."""
    where = place_of_argument(ctx, value)
    if where.scalar or where.batch or file_facts(ctx).value(value).guessed:
        return False  # a part of a tuple from a call the engine cannot see into: maybe a list
    if where.place is Place.DEVICE:
        return True
    if where.place is not Place.FOLLOWS:
        return False
    fact = file_facts(ctx).value(value)
    return not (type(value) is cst.Name and fact.device_expr == f"{value.value}.device")
