from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.training.effects import CLIP, SCALED_BACKWARD, SCALER_STEP, UNSCALE, kinds
from devicelint.analysis.training.helpers import callee
from devicelint.analysis.training.lightning_amp import float16_mixed_trainer, manual_backwards
from devicelint.analysis.training.step import Scope, order, scaled_backward, training_scopes
from devicelint.analysis.training.syntax import exclusive, positional, receiver, short
from devicelint.context import FileContext
from devicelint.fix_text import adding_lines, line_before, own_line_statement
from devicelint.rule_base import FixProposal, Rule, Violation, register


@register
class ClipBeforeUnscale(Rule):
    """
    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_(...)`/`clip_grad_value_(...)` called after a scaled
    backward (`scaler.scale(loss).backward()`) and before `scaler.step(optimizer)`, with no
    `scaler.unscale_(optimizer)` before the clip.

    ## Why it is a bug on a GPU
    Until `unscale_` runs, the gradients are multiplied by the loss scale (65536 by default).
    Clipping them to `max_norm=1.0` then clips the scaled values: after `scaler.step` divides
    by the scale, the effective norm is about 1.5e-5, so the model barely moves; with
    `clip_grad_value_` every gradient is cut. Nothing raises.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    The fix adds `scaler.unscale_(optimizer)` on its own line just above the clip, naming the
    scaler and the optimizer of the `scaler.step(optimizer)` that follows it. It is safe when
    that is the function's only step and the clip is a statement of its own; with several steps
    (several optimizers) it is unsafe, since the clipped parameters may belong to another
    optimizer. No fix when the step passes no optimizer by position, or when `unscale_` is
    called later in the function (a second `unscale_` before `update()` raises).

    ## Known limits
    The backward, the clip and the step must be in one function, or in helpers the file defines
    that it calls there: `clip_gradients(model)` or `self.clipper.clip(model)` between the
    scaled backward and the step is a clip; `unscale_grads(scaler, opt)`, `self.amp.unscale(opt)`
    or any method named for unscaling (`strategy.unscale_gradients(opt)`) before the clip is an
    unscale. `self.plugin.hook(...)` on an object the class only receives as a constructor
    parameter runs the one class of the file that defines `hook` (a precision plugin), unless
    the name is a common one (`step`, `update`, `zero_grad`, ...). If the scaled backward is in
    another function, the callers of the clipping function
    decide (`fit` calls `self.training_step(batch)`, which scales, then `self.optimizer_step()`,
    which clips, with no unscale between); with no caller in the file, the clip is reported only
    when the file never calls `unscale_`. Clipping
    through a framework (`accelerator.clip_grad_norm_`, Lightning's `self.clip_gradients`) is not
    checked: it unscales itself. In a LightningModule trained by a `Trainer` of the same file with
    `precision="16-mixed"` (or `16`), `self.manual_backward(loss)` is a scaled backward and
    `opt.step()` the scaler's step, so a plain clip between them is reported too; a precision set
    in another module or read from a config is not known.
    """

    code = "DL304"
    name = "clip-before-unscale"
    summary = "Gradient clipping between a scaled backward and `scaler.step` without `scaler.unscale_`."
    message = (
        "`{clip}` clips gradients still multiplied by the loss scale, so the clip is about 65536 times "
        "too strong; {remedy}"
    )
    fix_availability = "sometimes"
    tokens = ("clip_grad",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        scopes = training_scopes(ctx)
        file_unscales = any(s.scaler_calls.get("unscale_") or _helper_sites(s, UNSCALE) for s in scopes)
        rank = order(ctx)
        for scope in scopes:
            direct_steps = scope.scaler_calls.get("step", [])
            steps = [*direct_steps, *_helper_sites(scope, SCALER_STEP)]
            clips = [*scope.clips, *_unguarded_clips(scope)]
            if not steps or not clips:
                continue
            scaled = [b for b in scope.backwards if scaled_backward(ctx, b)] + _helper_sites(scope, SCALED_BACKWARD)
            unscales = [*scope.scaler_calls.get("unscale_", []), *_helper_sites(scope, UNSCALE)]
            for clip in clips:
                at = rank[id(clip)]
                if not any(rank[id(s)] > at and not exclusive(ctx, clip, s) for s in steps):
                    continue
                if any(rank[id(u)] < at and not exclusive(ctx, clip, u) for u in unscales):
                    continue
                before = [b for b in scaled if rank[id(b)] < at and not exclusive(ctx, clip, b)]
                verdict = None
                if not before and not unscales:
                    # The scaled backward is in the caller: `fit` calls `self.training_step(batch)`,
                    # then this `self.optimizer_step()`. Its callers in the file decide.
                    verdict = _callers_scaled_before(ctx, scope, scopes, rank)
                    if verdict is False:
                        continue
                    if verdict is None and (scaled or file_unscales):
                        continue
                elif not before:
                    continue
                if not before and clip not in scope.clips and verdict is not True:
                    # a helper that clips, with no scaled backward in sight (here or before every
                    # call of this function): too little to go on
                    continue
                later = [s for s in direct_steps if rank[id(s)] > at and not exclusive(ctx, clip, s)]
                fix = None if unscales else _unscale_first(ctx, clip, later, len(steps))
                yield self.violation(clip, fix=fix, clip=short(ctx, clip), remedy=_UNSCALE_FIRST)
        yield from self._lightning_manual_clips(ctx, scopes, rank)

    def _lightning_manual_clips(
        self, ctx: FileContext, scopes: list[Scope], rank: dict[int, int]
    ) -> Iterator[Violation]:
        """A clip between `self.manual_backward(loss)` and `opt.step()` in a LightningModule whose
        file trains it with float16 mixed precision: Lightning scales the loss and unscales only in
        `opt.step()` (or `self.clip_gradients`)."""
        if not float16_mixed_trainer(ctx):
            return
        for scope in scopes:
            backwards = manual_backwards(ctx, scope.node)
            if not backwards:
                continue
            unscales = [*scope.scaler_calls.get("unscale_", []), *_helper_sites(scope, UNSCALE)]
            for clip in [*scope.clips, *_unguarded_clips(scope)]:
                at = rank[id(clip)]
                steps = [s for s in scope.optimizer_steps if rank[id(s)] > at and not exclusive(ctx, clip, s)]
                if not steps or not any(rank[id(b)] < at and not exclusive(ctx, clip, b) for b in backwards):
                    continue
                if any(rank[id(u)] < at and not exclusive(ctx, clip, u) for u in unscales):
                    continue
                optimizer = receiver(steps[0])
                name = short(ctx, optimizer) if optimizer is not None else "optimizer"
                remedy = (
                    f'under `precision="16-mixed"` `self.manual_backward` scales the loss and only '
                    f"`{short(ctx, steps[0])}` unscales; clip with `self.clip_gradients({name}, gradient_clip_val=...)`, "
                    "which unscales first"
                )
                yield self.violation(clip, clip=short(ctx, clip), remedy=remedy)


_UNSCALE_FIRST = "call `scaler.unscale_(optimizer)` before it"


def _callers_scaled_before(ctx: FileContext, scope: Scope, scopes: list[Scope], rank: dict[int, int]) -> bool | None:
    """Whether a call of `scope`'s function in the file comes after a scaled backward with no
    unscale between (True), every call comes after an unscale or with no scaled backward before
    it (False), or no call is seen (None)."""
    func = scope.node
    if type(func) is not cst.FunctionDef:
        return None
    seen = False
    for caller in scopes:
        for site, _ in caller.helper_calls:
            if callee(ctx, site) is not func:
                continue
            seen = True
            at = rank[id(site)]
            scaled = [b for b in caller.backwards if scaled_backward(ctx, b)] + _helper_sites(caller, SCALED_BACKWARD)
            unscales = [*caller.scaler_calls.get("unscale_", []), *_helper_sites(caller, UNSCALE)]
            last = max((rank[id(b)] for b in scaled if rank[id(b)] < at and b is not site), default=None)
            if last is not None and not any(last < rank[id(u)] < at for u in unscales):
                return True
    return False if seen else None


def _helper_sites(scope: Scope, kind: str) -> list[cst.Call]:
    """Calls of the file's own functions (or of another object's unscaling method) that do `kind`."""
    return [call for call, found in scope.helper_calls if kind in kinds(found)]


def _unguarded_clips(scope: Scope) -> list[cst.Call]:
    """Calls of helpers that clip with no `unscale_` before the clip and no scaler step after it
    inside the helper: the caller's order decides whether the gradients are still scaled."""
    out = []
    for call, found in scope.helper_calls:
        order_of = [effect.kind for effect in found]
        for index, kind in enumerate(order_of):
            if kind == CLIP and UNSCALE not in order_of[:index] and SCALER_STEP not in order_of[index:]:
                out.append(call)
                break
    return out


def _unscale_first(ctx: FileContext, clip: cst.Call, later_steps: list[cst.Call], steps: int) -> FixProposal | None:
    statement = own_line_statement(ctx, clip)
    if statement is None or not later_steps:
        return None
    step = later_steps[0]
    optimizer = positional(step)
    if len(optimizer) != 1 or type(step.func) is not cst.Attribute:
        return None
    call = f"{ctx.code_for(step.func.value)}.unscale_({ctx.code_for(optimizer[0])})"
    safe = steps == 1 and type(statement) is cst.SimpleStatementLine
    return adding_lines(f"Call `{call}` before clipping", safe, line_before(ctx, statement, call))
