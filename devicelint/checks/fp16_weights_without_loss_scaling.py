from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

_HALF_DTYPES = frozenset({"torch.float16", "torch.half"})
# Code that keeps float32 master weights or scales the loss itself: nothing to report.
_SCALING_WORDS = (
    "GradScaler",
    "scaler",
    "loss_scale",
    "master_param",
    "master_weight",
    "fp32_params",
    "deepspeed",
    "apex",
)


def _scoped(ctx: FileContext, name: str, at: cst.CSTNode) -> tuple[int, str]:
    """A name with where it is bound: `self.x` by its class, any other by its function."""
    owner = ctx.index.enclosing_class(at) if name.startswith("self.") else ctx.index.enclosing_function(at)
    return id(owner), name


@dataclass(frozen=True)
class _Cast:
    call: cst.Call  # `model.half()`, `net.to(torch.float16)`
    models: tuple[str, ...]  # what holds the cast module: `model`, and `net` of `net = Net().half()`


@register
class Fp16WeightsWithoutLossScaling(Rule):
    """
    ## What it does
    Flags a model cast to float16 as a whole (`model.half()`, `model.to(torch.float16)`,
    `model.to(dtype=torch.half)`, also chained on its construction: `Net().cuda().half()`)
    whose parameters a `torch.optim` optimizer of the same file trains (`Adam(model.parameters())`,
    `self.opt = AdamW(self.net.parameters())` with the cast in another method), in a file that
    calls `backward()` and that optimizer's `step()`, and scales no loss. The finding is on the
    cast.

    ## Why it is a bug on a GPU
    With float16 weights there is no float32 copy anywhere: gradients below float16's smallest
    normal value (6e-5) flush to zero, the optimizer's moments (`exp_avg_sq` squares the
    gradients) underflow or overflow, Adam's `eps=1e-8` rounds to zero, and small updates vanish
    when added to the weights. Training runs without an error and the loss turns to `nan` or
    stops falling. A `GradScaler` cannot rescue it: it refuses to unscale float16 gradients
    (`ValueError: Attempting to unscale FP16 gradients`).

    ## Example
    ```python
    model = UNet().cuda().half()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for images, masks in loader:
        loss = criterion(model(images.cuda().half()), masks.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    model = UNet().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    for images, masks in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(images.cuda()), masks.cuda())
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```
    or keep the float32 weights and autocast to `torch.bfloat16`.

    ## Fix safety
    No fix: autocast regions, the scaler and the casts of the inputs all change.

    ## Known limits
    The optimizer must be built in the file from the cast model's own `parameters()` (or
    `named_parameters()`), named as the cast names it. Files that mention a `GradScaler`, a
    loss scale, master weights, apex or DeepSpeed are taken to handle float16 training
    themselves; a model cast back with `.float()` in the file is not reported.
    """

    code = "DL309"
    name = "fp16-weights-without-loss-scaling"
    summary = "A model cast to float16 (`model.half()`) is trained by an optimizer with no loss scaling."
    message = (
        "`{cast}` casts `{model}` to float16 and `{optimizer}` trains its float16 weights with no loss scaling: "
        "small gradients flush to zero and the optimizer's float16 state underflows or overflows (`nan` losses); "
        'keep the weights in float32 and run the forward under `torch.autocast("cuda", dtype=torch.float16)` '
        "with a `GradScaler`, or autocast to `torch.bfloat16`"
    )
    tokens = ("half", "float16")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if any(word in ctx.source for word in _SCALING_WORDS) or "backward" not in ctx.source:
            return
        casts = [cast for call in ctx.index.of_type(cst.Call) if (cast := _half_cast(ctx, call)) is not None]
        if not casts:
            return
        optimizers = _optimizers(ctx)
        stepped = _stepped(ctx)
        for cast in casts:
            if any(_cast_back(ctx, model) for model in cast.models):
                continue
            models = {_scoped(ctx, model, cast.call) for model in cast.models}
            trained = next(((params, name) for name, params in optimizers if params in models), None)
            if trained is None or trained[1] not in stepped:
                continue
            yield self.violation(
                cast.call, cast=ctx.code_for(cast.call).strip(), model=trained[0][1], optimizer=trained[1][1]
            )


def _half_cast(ctx: FileContext, call: cst.Call) -> _Cast | None:
    """`m.half()`, `m.to(torch.float16)`, `m.to(dtype=torch.half)`, `m.type(torch.float16)`."""
    func = call.func
    if type(func) is not cst.Attribute:
        return None
    if func.attr.value == "half":
        if call.args:
            return None
    elif func.attr.value in ("to", "type"):
        dtypes = [
            ctx.qualified_name(arg.value) for arg in call.args if arg.keyword is None or arg.keyword.value == "dtype"
        ]
        if len(call.args) != 1 or not dtypes or dtypes[0] not in _HALF_DTYPES:
            return None
    else:
        return None
    models = [name for name in (dotted_name(func.value), _assigned_name(ctx, call)) if name is not None]
    return _Cast(call, tuple(dict.fromkeys(models))) if models else None


def _assigned_name(ctx: FileContext, call: cst.Call) -> str | None:
    """`net` in `net = Net().cuda().half()` (the cast may sit inside a chain of moves)."""
    node: cst.CSTNode = call
    for parent in ctx.index.ancestors(call):
        if type(parent) is cst.Attribute and parent.value is node:
            node = parent
            continue
        if type(parent) is cst.Call and parent.func is node:
            node = parent
            continue
        if type(parent) is cst.Assign and parent.value is node and len(parent.targets) == 1:
            return dotted_name(parent.targets[0].target)
        return None
    return None


def _optimizers(ctx: FileContext) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    """(optimizer, model whose parameters it trains) for `opt = torch.optim.X(m.parameters(), ...)`."""
    found: list[tuple[tuple[int, str], tuple[int, str]]] = []
    for assign in ctx.index.of_type(cst.Assign):
        value = assign.value
        if type(value) is not cst.Call or len(assign.targets) != 1 or not value.args:
            continue
        qualified = ctx.qualified_name(value.func) or ""
        if not qualified.startswith("torch.optim.") or "lr_scheduler" in qualified:
            continue
        params = value.args[0].value
        if not (
            type(params) is cst.Call
            and type(params.func) is cst.Attribute
            and params.func.attr.value in ("parameters", "named_parameters")
        ):
            continue
        name, model = dotted_name(assign.targets[0].target), dotted_name(params.func.value)
        if name is not None and model is not None:
            found.append((_scoped(ctx, name, assign), _scoped(ctx, model, assign)))
    return found


def _stepped(ctx: FileContext) -> set[tuple[int, str]]:
    """Names whose `step()` the file calls."""
    return {
        _scoped(ctx, name, call)
        for call in ctx.index.of_type(cst.Call)
        if type(call.func) is cst.Attribute
        and call.func.attr.value == "step"
        and (name := dotted_name(call.func.value)) is not None
    }


def _cast_back(ctx: FileContext, model: str) -> bool:
    """`model.float()` / `model.to(torch.float32)` somewhere in the file."""
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        if type(func) is not cst.Attribute or dotted_name(func.value) != model:
            continue
        if func.attr.value == "float" and not call.args:
            return True
        if func.attr.value == "to" and any(
            ctx.qualified_name(a.value) in ("torch.float32", "torch.float") for a in call.args
        ):
            return True
    return False
