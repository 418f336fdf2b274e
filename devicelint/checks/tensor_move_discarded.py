from __future__ import annotations

from typing import Iterator

import libcst as cst

from devicelint.analysis.placement import value_kind
from devicelint.context import FileContext
from devicelint.registry import FixProposal, Rule, Violation, register

MOVES = frozenset({"to", "cuda", "cpu", "xpu", "mps"})
CASTS = frozenset({"half", "float", "double", "bfloat16", "long", "int", "bool", "byte", "short", "char", "type", "contiguous", "pin_memory"})


@register
class TensorMoveDiscarded(Rule):
    """
    ## What it does
    Flags `x.to(device)`, `x.cuda()`, `x.cpu()`, `x.half()`-style calls written as statements
    on their own, when the receiver is a tensor: the call returns a new tensor and the
    statement throws it away.

    ## Why it is a bug on a GPU
    `nn.Module.to()` moves a module in place, so `model.to(device)` alone is right; a tensor is
    never moved in place. `x.to(device)` leaves `x` where it was, and the next operation with a
    device tensor fails with `Expected all tensors to be on the same device` (or, for `.half()`,
    the dtype silently stays the same).

    ## Example
    ```python
    for images, labels in loader:
        images.to(device)
        labels.to(device)
        loss = criterion(model(images), labels)
    ```

    ## Use instead
    ```python
    for images, labels in loader:
        images = images.to(device)
        labels = labels.to(device)
        loss = criterion(model(images), labels)
    ```

    ## Fix safety
    When the receiver is a plain name, the fix assigns the result back (`x = x.to(device)`). It
    is unsafe: code that relied on `x` staying where it was now sees the moved tensor.

    ## Known limits
    Only receivers the placement analysis proves to be tensors are reported (factory results,
    DataLoader batch elements, parameters annotated `Tensor` or used as tensors, results of
    tensor operations). A receiver that may be a module, a `BatchEncoding` or any object with
    its own in-place `.to()` is never reported.
    """

    code = "DL104"
    name = "tensor-move-discarded"
    summary = "`x.to(device)` on a tensor, as a statement, moves nothing."
    message = "`{call}` returns a new tensor that is thrown away, so `{receiver}` is not {done}; assign it: `{receiver} = {call}`"
    fix_availability = "sometimes"
    tokens = (".to", ".cuda", ".cpu", ".half", ".float", ".double", ".bfloat16", ".long", ".int", ".bool",
              ".byte", ".short", ".char", ".type", ".contiguous", ".pin_memory", ".xpu", ".mps")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for statement in ctx.index.of_type(cst.Expr):
            call = statement.value
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
                continue
            method = call.func.attr.value
            if method not in MOVES and method not in CASTS:
                continue
            if method == "type" and not call.args:
                continue  # `x.type()` returns the type name
            receiver = call.func.value
            if not value_kind(ctx, receiver).is_tensor:
                continue
            receiver_text = ctx.code_for(receiver)
            call_text = ctx.code_for(call)
            fix = None
            if isinstance(receiver, (cst.Name, cst.Attribute, cst.Subscript)):
                fix = FixProposal(
                    description=f"Assign the result: `{receiver_text} = {call_text}`", safe=False,
                    replacements=((call, f"{receiver_text} = {call_text}"),),
                )
            yield self.violation(
                call, fix=fix, call=call_text, receiver=receiver_text,
                done="moved" if method in MOVES else "converted",
            )
