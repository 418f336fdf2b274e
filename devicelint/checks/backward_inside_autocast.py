from __future__ import annotations

from typing import Iterator

from devicelint.analysis.training.step import training_scopes
from devicelint.analysis.training.syntax import inside, short
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register


@register
class BackwardInsideAutocast(Rule):
    """
    ## What it does
    Flags `loss.backward()` (or `scaler.scale(loss).backward()`) called inside the
    `with torch.autocast(...)` block that computed the loss.

    ## Why it is a bug on a GPU
    Autocast is meant to wrap the forward pass and the loss only. Backward ops already run in
    the dtype autocast chose for the matching forward ops; running them inside the region as
    well is not what PyTorch recommends ("Backward passes under autocast are not recommended")
    and can cast gradients again or trip custom autograd functions that assume they run outside
    it.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
        loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
    loss.backward()
    optimizer.step()
    ```

    ## Fix safety
    No fix: dedenting may move more than the backward call.

    ## Known limits
    Only `with` blocks in the same function as the backward call are seen, directly or through
    a name (`ctx = torch.autocast(...)`; `with ctx:`). A block with a literal `enabled=False`
    is not reported.
    """

    code = "DL306"
    name = "backward-inside-autocast"
    summary = "`backward()` called inside the autocast region; leave the region first."
    message = (
        "`{backward}` runs inside `{autocast}`: PyTorch recommends leaving the autocast region before "
        "the backward pass; dedent the backward (and the optimizer step) out of the `with` block"
    )
    severity = "warning"
    tokens = ("autocast",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for scope in training_scopes(ctx):
            for call in scope.backwards:
                for autocast in scope.autocasts:
                    if autocast.enabled is not False and inside(ctx, call, autocast.node):
                        yield self.violation(call, backward=short(ctx, call), autocast=short(ctx, autocast.expr))
                        break
