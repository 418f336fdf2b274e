from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.training.effects import BACKWARD, OPTIMIZER_STEP, SCALED_BACKWARD, SCALER_STEP, Effect, kinds
from devicelint.analysis.training.helpers import callee, instance_class, method_of
from devicelint.analysis.training.step import Scope, amp_gated, scaled_backward, scaler_names, training_scopes
from devicelint.analysis.training.syntax import exclusive, positional, receiver, short, text_of
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place, line_after, own_line_statement
from devicelint.rule_base import FixProposal, Rule, Violation, register


@register
class GradscalerBypassed(Rule):
    """
    ## What it does
    Flags a training step where a `GradScaler` is half used: the loss is scaled with
    `scaler.scale(loss).backward()` but the optimizer is stepped with a plain
    `optimizer.step()` (or stepped again after `scaler.step(optimizer)`), or `scaler.step` is
    used while the loss is backpropagated unscaled with `loss.backward()`.

    ## Why it is a bug on a GPU
    `scaler.scale(loss)` multiplies the loss, and so every gradient, by the loss scale (65536
    by default). Only `scaler.step(optimizer)` divides them back before stepping and skips steps
    with inf/NaN gradients. A plain `optimizer.step()` applies gradients thousands of times too
    large; a `scaler.step` on unscaled gradients divides them by the scale and the model barely
    moves. Neither raises.

    ## Example
    ```python
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    scaler.scale(loss_g).backward()
    opt_g.step()
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    scaler.scale(loss_g).backward()
    scaler.step(opt_g)
    scaler.update()
    ```

    ## Fix safety
    For an optimizer stepped without the scaler that scaled the loss, the fix steps it through
    the scaler: `optimizer.step()` becomes `scaler.step(optimizer)`, and `scaler.update()` is
    added after it when the step never updates the scaler. It is safe when the function uses
    one scaler, already updates it and the step is a statement of its own; otherwise unsafe. The
    other cases get no fix: a second step after `scaler.step(optimizer)` is removed by hand
    (deleting a line is left to the author), and an unscaled `loss.backward()` under
    `scaler.step` may be a deliberate bfloat16 path.

    ## Known limits
    The calls must be in one function, or in methods of one class, or behind a call whose
    function (here or a method of another project module's class: `engine.forward_backward(...)`)
    backpropagates a scaled loss on every call and steps nothing, followed by a plain
    `optimizer.step()` where nothing steps through a scaler. A class that scales the loss
    in one method (`training_step`) and steps the optimizer plainly in another
    (`optimizer_step`) is reported when it never steps through a scaler, never backpropagates
    an unscaled loss and never hands its scaler to code the file does not show. A plain step in a branch that is the alternative to the
    scaler (`if use_amp: ... else: optimizer.step()`, or under an `if` that tests an amp,
    fp16 or scaler flag) is not reported, nor is a plain step next to an unscaled
    `backward()` of another loss. Optimizers are recognised by name (`optimizer`, `opt_g`,
    `self.optim`). A `scaler.step` with an unscaled backward is reported only when no
    `scale` call exists in the file and the scaler is built with `GradScaler(...)` there; also
    across helpers: a helper's plain backward followed by a helper whose callee steps through
    such a scaler (`self.precision.optimizer_step(opt)`), reported at the backward.
    """

    code = "DL302"
    name = "gradscaler-bypassed"
    summary = "A `GradScaler` scales the loss but the optimizer steps without it (or the reverse)."
    message = "{what}; {remedy}"
    fix_availability = "sometimes"
    tokens = ("scale",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        scopes = training_scopes(ctx)
        file_scales = any(s.scaler_calls.get("scale") for s in scopes) or _scales_through_helpers(scopes)
        reported: set[int] = set()
        for scope in scopes:
            scales = scope.scaler_calls.get("scale", [])
            steps = scope.scaler_calls.get("step", [])
            if scales:
                yield from self._plain_steps(ctx, scope, scales, steps)
            elif not steps and scope.optimizer_steps and _helper_scales(scope):
                yield from self._steps_after_helper_scales(ctx, scope)
            elif scope.optimizer_steps or _plain_step_helpers(ctx, scope):
                # the step here or in a helper it calls (`_apply(self)` running `self.optimizer.step()`)
                class_scales = _scales_of_class_without_step(ctx, scope, scopes)
                if class_scales:
                    yield from self._plain_steps(ctx, scope, class_scales, [])
            elif not steps and not file_scales and scope.helper_calls:
                yield from self._unscaled_backward_through_helpers(ctx, scope, reported)
            elif steps and not file_scales:
                plain = [b for b in scope.backwards if not scaled_backward(ctx, b)]
                for step in steps:
                    if text_of(receiver(step)) not in scaler_names(ctx):
                        continue  # with no `scale` anywhere, only a scaler built here is certain
                    backward = next(
                        (b for b in plain if not exclusive(ctx, b, step) and not amp_gated(ctx, b, scope.node)), None
                    )
                    if backward is not None:
                        yield self.violation(
                            step,
                            what=f"`{short(ctx, step)}` unscales gradients that `{short(ctx, backward)}` never scaled, "
                            "so they are divided by the loss scale and the model barely learns",
                            remedy="backpropagate with `scaler.scale(loss).backward()`",
                        )

    def _steps_after_helper_scales(self, ctx: FileContext, scope: Scope) -> Iterator[Violation]:
        """`engine.forward_backward(...)` (a method, here or in another module, that backpropagates
        `self.scaler.scale(loss)`), then a plain `optimizer.step()` here, and no scaler step anywhere
        in the scope."""
        scaled = _helper_scales(scope)
        unscaled = [b for b in scope.backwards if not scaled_backward(ctx, b) and not amp_gated(ctx, b, scope.node)]
        for plain in scope.optimizer_steps:
            site, effect = next(((s, e) for s, e in scaled if not exclusive(ctx, s, plain)), (None, None))
            if site is None or effect is None or amp_gated(ctx, plain, scope.node):
                continue
            if any(not exclusive(ctx, b, plain) for b in unscaled):
                continue  # an unscaled loss of another model may feed this optimizer
            optimizer = receiver(plain)
            name = short(ctx, optimizer) if optimizer is not None else "optimizer"
            scaler = effect.scaler or "scaler"
            yield self.violation(
                plain,
                what=f"`{short(ctx, plain)}` bypasses the `GradScaler` that `{short(ctx, site)}` scaled the loss "
                "with: it applies gradients multiplied by the loss scale (65536 by default) and never skips "
                "inf/NaN steps",
                remedy=f"call `{scaler}.step({name})` and then `{scaler}.update()` instead",
            )

    def _unscaled_backward_through_helpers(
        self, ctx: FileContext, scope: Scope, reported: set[int]
    ) -> Iterator[Violation]:
        """`self.manual_backward(loss)` (a plain `loss.backward()`) then `self.step_optimizer(opt)`
        (whose callee steps through a scaler the file builds), in a file that never scales a loss."""
        backward: tuple[cst.Call, Effect] | None = None
        for site, found in scope.helper_calls:
            for effect in found:
                if effect.kind == BACKWARD and not effect.conditional:
                    backward = backward or (site, effect)
                elif effect.kind == SCALER_STEP and backward is not None and effect.scaler in scaler_names(ctx):
                    back_site, back = backward
                    if id(back.node) in reported:
                        return
                    reported.add(id(back.node))
                    yield self.violation(
                        back.node,
                        what=(
                            f"`{short(ctx, back.node)}`{_where(ctx, back.node)} backpropagates an unscaled loss (called by "
                            f"`{short(ctx, back_site)}`), but `{short(ctx, site)}` then steps through `{short(ctx, effect.node)}`, "
                            "which divides the gradients by the loss scale, so the model barely learns"
                        ),
                        remedy=f"backpropagate with `{effect.scaler}.scale(loss).backward()`",
                    )
                    return

    def _plain_steps(
        self, ctx: FileContext, scope: Scope, scales: list[cst.Call], steps: list[cst.Call]
    ) -> Iterator[Violation]:
        stepped = {text_of(positional(s)[0]) for s in steps if positional(s)}
        named = {text_of(receiver(s)) for s in scales}
        scaler = next(iter(named)) if len(named) == 1 and None not in named else "scaler"
        unscaled = [b for b in scope.backwards if not scaled_backward(ctx, b) and not amp_gated(ctx, b, scope.node)]
        # `opt_g.step()` of a wrapper class of the file whose `step()` goes through a scaler.
        through_scaler = {id(site) for site, found in scope.helper_calls if SCALER_STEP in kinds(found)}
        for plain in scope.optimizer_steps:
            if id(plain) in through_scaler:
                continue
            if any(exclusive(ctx, plain, other) for other in (*scales, *steps)):
                continue
            if amp_gated(ctx, plain, scope.node):
                continue
            optimizer = receiver(plain)
            name = short(ctx, optimizer) if optimizer is not None else "optimizer"
            if text_of(optimizer) in stepped:
                yield self.violation(
                    plain,
                    what=f"`{short(ctx, plain)}` steps `{name}` again after `scaler.step({name})`, "
                    "with gradients still multiplied by the loss scale",
                    remedy=f"remove it: `scaler.step({name})` already steps the optimizer",
                )
                continue
            if any(not exclusive(ctx, b, plain) for b in unscaled):
                continue  # an unscaled loss of another model may feed this optimizer
            yield self.violation(
                plain,
                fix=_step_through_scaler(ctx, scope, scales, plain),
                what=f"`{short(ctx, plain)}` bypasses the `GradScaler` that scaled the loss: it applies "
                "gradients multiplied by the loss scale (65536 by default) and never skips inf/NaN steps",
                remedy=f"call `{scaler}.step({name})` and then `{scaler}.update()` instead",
            )
        # `step_generator(opt_g)`: a helper of the file whose only step is a plain `opt.step()`
        for site, found in scope.helper_calls:
            if kinds(found) & {SCALER_STEP, SCALED_BACKWARD, BACKWARD} or not any(
                e.kind == OPTIMIZER_STEP and not e.conditional for e in found
            ):
                continue
            if any(exclusive(ctx, site, other) for other in (*scales, *steps)) or amp_gated(ctx, site, scope.node):
                continue
            if any(not exclusive(ctx, b, site) for b in unscaled):
                continue
            if any(_steps_itself(ctx, arg, site) for arg in positional(site)):
                continue  # `step(opt_b)` handed a wrapper of the file whose own `step()` may use a scaler
            inner = next(e.node for e in found if e.kind == OPTIMIZER_STEP)
            yield self.violation(
                site,
                what=f"`{short(ctx, site)}` (which calls `{short(ctx, inner)}`) bypasses the `GradScaler` that "
                "scaled the loss: it applies gradients multiplied by the loss scale (65536 by default) and "
                "never skips inf/NaN steps",
                remedy=f"step through the scaler: `{scaler}.step(optimizer)` and then `{scaler}.update()`",
            )


def _helper_scales(scope: Scope) -> list[tuple[cst.Call, Effect]]:
    """Calls of the scope whose callee backpropagates a scaled loss on every call and steps no
    scaler, when no call of the scope steps one: (the call, that backward)."""
    if any(SCALER_STEP in kinds(found) for _, found in scope.helper_calls):
        return []
    out = []
    for site, found in scope.helper_calls:
        effect = next((e for e in found if e.kind == SCALED_BACKWARD and not e.conditional), None)
        if effect is not None and OPTIMIZER_STEP not in kinds(found):
            out.append((site, effect))
    return out


def _plain_step_helpers(ctx: FileContext, scope: Scope) -> list[cst.Call]:
    """Calls of helpers outside the scope's class (`_apply(self)`, a module-level function handed
    the trainer) whose only step is an unconditional plain `optimizer.step()` of their own. The
    class's own methods are scopes of the class, which report their steps themselves."""
    cls = ctx.index.enclosing_class(scope.node)
    found_sites = []
    for site, found in scope.helper_calls:
        helper = callee(ctx, site)
        if helper is None or ctx.index.enclosing_class(helper) is cls:
            continue
        if kinds(found) & {SCALER_STEP, SCALED_BACKWARD, BACKWARD}:
            continue
        if any(
            e.kind == OPTIMIZER_STEP and not e.conditional and ctx.index.enclosing_function(e.node) is helper
            for e in found
        ):
            found_sites.append(site)
    return found_sites


def _steps_itself(ctx: FileContext, arg: cst.BaseExpression, site: cst.Call) -> bool:
    cls = instance_class(ctx, arg, site)
    return cls is not None and method_of(ctx, cls, "step") is not None


def _scales_through_helpers(scopes: list[Scope]) -> bool:
    return any(SCALED_BACKWARD in kinds(found) for scope in scopes for _, found in scope.helper_calls)


def _where(ctx: FileContext, node: cst.CSTNode) -> str:
    function = ctx.index.enclosing_function(node)
    return f" in `{function.name.value}`" if function is not None else ""


def _scales_of_class_without_step(ctx: FileContext, scope: Scope, scopes: list[Scope]) -> list[cst.Call]:
    """The `scaler.scale(loss)` calls of other methods of `scope`'s class, when the class is one
    mixed-precision unit that never steps through a scaler (`training_step` scales the loss,
    `optimizer_step` steps the optimizer) and never backpropagates an unscaled loss (a plain
    fp32 path next to the amp one)."""
    cls = ctx.index.enclosing_class(scope.node)
    if cls is None:
        return []
    members = [s for s in scopes if ctx.index.enclosing_class(s.node) is cls]
    scales = [c for s in members for c in s.scaler_calls.get("scale", [])]
    if not scales:
        return []
    for member in members:
        if member.scaler_calls.get("step") or any(
            kind in kinds(found) for _, found in member.helper_calls for kind in (SCALER_STEP, BACKWARD)
        ):
            return []
        if any(not scaled_backward(ctx, b) for b in member.backwards) or member.delegated_backwards:
            return []
    # A scaler handed to code the file does not show (`amp_step(self.scaler, self.optimizer)`) may step there.
    scalers = {text_of(receiver(c)) for c in scales}
    for call in ctx.index.walk(cls):
        if type(call) is cst.Call and any(text_of(arg.value) in scalers for arg in call.args):
            return []
    return scales


def _step_through_scaler(ctx: FileContext, scope: Scope, scales: list[cst.Call], plain: cst.Call) -> FixProposal | None:
    """`optimizer.step()` -> `scaler.step(optimizer)`, plus `scaler.update()` after it when the
    step never updates the scaler."""
    scalers = {text_of(receiver(s)) for s in scales}
    optimizer = receiver(plain)
    statement = own_line_statement(ctx, plain)
    if len(scalers) != 1 or None in scalers or optimizer is None or plain.args or statement is None:
        return None
    scaler = next(iter(scalers))
    replacement = ((plain, f"{scaler}.step({code_in_place(ctx, optimizer, optimizer)})"),)
    updates = scope.scaler_calls.get("update", [])
    insertions = () if updates else (line_after(ctx, statement, f"{scaler}.update()"),)
    bare = type(statement) is cst.SimpleStatementLine and type(statement.body[0]) is cst.Expr
    return FixProposal(
        f"Step through the scaler: `{scaler}.step(...)`",
        safe=bare and bool(updates),
        replacements=replacement,
        insertions=insertions,
    )
