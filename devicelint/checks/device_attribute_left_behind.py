from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.left_device_attributes import left_device_uses
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class DeviceAttributeLeftBehind(Rule):
    """
    ## What it does
    Flags a module method that moves data or makes tensors on the module's own device attribute
    (`x.to(self.device)`, `device=self._device`, a `device` property returning it, a submodule
    built on it that moves its inputs there) when the constructor fixes that attribute to the CPU
    (a `"cpu"` literal, `None`, a default every construction leaves out) and the file then moves
    the module off the CPU with `.to(...)`/`.cuda()`, directly or as a child of a moved module.

    ## Why it is a bug on a GPU
    `nn.Module.to()` and `.cuda()` move parameters, buffers and submodules through `_apply`; they
    never rewrite a plain attribute, and a parent's move never calls a child's own `to()`/`cuda()`
    overrides. After the move the weights are on the GPU and the attribute still says CPU, so
    every call copies its GPU inputs back to the host (a silent slowdown) or makes its state
    there, where it meets the GPU weights ("Input type (torch.FloatTensor) and weight type
    (torch.cuda.FloatTensor) should be the same").

    ## Example
    ```python
    class Metric(nn.Module):
        def __init__(self, device=None):
            super().__init__()
            self.device = device or torch.device("cpu")
            self.net = nn.Linear(8, 1)

        def forward(self, x):
            return self.net(x.to(self.device))

    metric = Metric().to("cuda")
    ```

    ## Use instead
    ```python
    class Metric(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 1)

        def forward(self, x):
            return self.net(x.to(next(self.net.parameters()).device))
    ```

    ## Fix safety
    No automatic fix: the device may come from a parameter, a buffer or an `_apply` override that
    refreshes the attribute, and which one fits is the author's choice.

    ## Known limits
    Only attributes named `device` or `dev` (leading underscores aside) are read, and only a
    constructor value that is the CPU at every construction the file shows: a GPU fixed at
    construction and a move to another GPU is not claimed. A class that overrides `_apply`, or
    writes the attribute anywhere but its constructor and its own movers (a property setter the
    file assigns), is trusted to refresh it. A parent is a module class that builds the child in
    its `__init__` or whose construction is handed it inline; an instance handed around through
    other names or other files is not followed, nor a move the file does not show (a Lightning
    trainer moving its module).
    """

    code = "DL120"
    name = "device-attribute-left-behind"
    summary = "A module moves data to a device attribute fixed to the CPU in `__init__`, which `.to()`/`.cuda()` never update."
    message = (
        "`{use}` sends data to `self.{attr}`, which `{owner}` fixes to the CPU when it is built; "
        "`{move}` {where} {what}, which never updates that attribute; read the device "
        "from a parameter or buffer (`next(self.parameters()).device`) or refresh it in `_apply`"
    )
    tokens = ("device", "dev")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for left in left_device_uses(ctx):
            function = ctx.index.enclosing_function(left.move)
            where = f"in `{function.name.value}`" if function is not None else "at the module's top level"
            what = (
                f"moves it inside `{left.parent}` through `_apply` (never its own `to()`/`cuda()`)"
                if left.parent is not None
                else "moves its parameters and buffers"
            )
            yield self.violation(
                left.use,
                use=_short(ctx.code_for(_enclosing_call(ctx, left.use))),
                attr=left.attr,
                owner=left.cls_name,
                move=_short(ctx.code_for(left.move)),
                where=where,
                what=what,
            )


def _enclosing_call(ctx: FileContext, use: cst.CSTNode) -> cst.CSTNode:
    """The call `use` is an argument of (`x.to(self.device)`), or `use` itself (a call)."""
    if type(use) is cst.Call:
        return use
    arg = ctx.index.parent(use)
    call = ctx.index.parent(arg) if type(arg) is cst.Arg else None
    return call if call is not None else use


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
