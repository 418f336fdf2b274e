from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.branches import never_together
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.effects import (
    BACKWARD,
    OPTIMIZER_STEP,
    SCALED_BACKWARD,
    SCALER_STEP,
    UNSCALE,
    Effect,
    kinds,
)
from devicelint.analysis.training.helpers import bound_arguments, callee
from devicelint.analysis.training.reads import computed_from, read_names
from devicelint.analysis.training.step import (
    Autocast,
    Scope,
    decorated_autocast,
    is_disabled_scaler,
    names_assigned_in,
    order,
    returned_under_autocast,
    scaled_backward,
    training_scopes,
)
from devicelint.analysis.training.syntax import (
    assigned_names,
    body_nodes,
    inside,
    method_name,
    positional,
    receiver,
    short,
    text_of,
)
from devicelint.analysis.training.torch_support import too_new
from devicelint.analysis.training.values import UNKNOWN, attribute_values, values_of
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class Fp16AutocastWithoutGradscaler(Rule):
    """
    ## What it does
    Flags a training step whose loss is computed under a float16 CUDA `autocast`
    (`torch.autocast("cuda")`, `torch.amp.autocast(device_type="cuda", dtype=torch.float16)`,
    `torch.cuda.amp.autocast()`: float16 is the CUDA default) and then backpropagated with a
    plain `loss.backward()` and an optimizer step, with no `GradScaler` in that step. When the
    dtype comes from a variable or a config switch (`torch.float16 if cfg.fp16 else
    torch.bfloat16`), the rule reports when one of its values is float16. Autocast with no dtype
    on a device type the file computes (`torch.autocast(device_type=str(device))`,
    `device.type`) counts as float16: that is its default on the CUDA device a training script
    is written for. The dtype is followed through names, `self.x` attributes, parameter defaults
    (`amp_dtype=torch.float16`, or what the file's calls pass), fields of a configuration class of
    the file when the receiver is known to be one (built with `Config(...)`, annotated `Config`,
    or defaulting to `Config()`: the class default and the `Config(amp_dtype=...)` keywords the
    file passes) and `getattr(torch, "float16")`. A
    loss returned by a helper of the file from inside its autocast block
    (`loss = self.compute_loss(batch)`) counts as computed under that autocast, and a helper
    that backpropagates its argument plainly (`self.backward(loss)`) counts as a backward. A
    loss computed from the output of a module of the file whose `forward` is decorated with a
    float16 autocast (`@torch.autocast("cuda")`) counts as computed under it.

    ## Why it is a bug on a GPU
    float16 cannot represent magnitudes below about 6e-8. Many gradients of a real network are
    smaller than that, so without loss scaling they flush to zero in the backward pass: the
    weights they belong to stop learning. Nothing raises; the loss curve just flattens early.
    `GradScaler` multiplies the loss before `backward()` and divides the gradients again before
    the step, which keeps them in float16's range.

    ## Example
    ```python
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x.cuda()), y.cuda())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```
    or autocast to `dtype=torch.bfloat16`, which has float32's range and needs no scaler.

    ## Fix safety
    No fix: adding a scaler changes the step's code in several places.

    ## Known limits
    The loss, the backward and the optimizer step must be in one function (the step may be in
    another method of the same class); a function that reads `.grad` after its backward (a test
    or a probe that checks the gradients, `p.grad is not None`) counts as a step, since its
    gradients underflow just the same. A backward in the `else:` of an `if` whose test is the
    test of the `if` around the autocast (`if use_amp:` twice) runs only on the full-precision
    path and is not reported. A scope that calls `scaler.scale(...)` anywhere is trusted,
    unless every `GradScaler` the file assigns to that scaler is built with a literal
    `enabled=False` (then `scale()` passes the loss through). Autocast entered through a
    function of the file (a `@contextmanager`, a method returning `torch.autocast(...)`) counts,
    and a dtype from a dict look-up (`{"fp16": torch.float16, ...}.get(cfg.precision)`) may be
    any of the dict's dtypes.
    Autocast whose dtype cannot be followed (a parameter with no default, a configuration
    object from another module) is not reported. Helpers are followed when the file defines
    them (`helper(...)`, `self.method(...)`, a method of an object the file builds). With no dtype and a device type the file does not
    spell out, a run that only ever uses the CPU (bfloat16 there) is reported too. The suggested
    `torch.amp.GradScaler("cuda")` needs torch 2.3: when the project's `torch-version` setting or
    its metadata (pyproject.toml, setup.cfg, setup.py, requirements*.txt) allows an older torch,
    the message suggests `torch.cuda.amp.GradScaler()` and says why.
    """

    code = "DL301"
    name = "fp16-autocast-without-gradscaler"
    summary = "float16 autocast in a training step without a `GradScaler`: small gradients underflow to zero."
    message = (
        "`{backward}` backpropagates a loss computed under `{autocast}`{where}, which {how}, "
        "with no `GradScaler`: small gradients underflow to zero and training silently stalls; use "
        "`scaler = {scaler}`{support} with `scaler.scale(loss).backward()`, "
        "`scaler.step(optimizer)`, `scaler.update()`, or autocast to `torch.bfloat16`"
    )
    tokens = ("autocast",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        scopes = training_scopes(ctx)
        for scope in scopes:
            helper_backwards = _plain_backward_helpers(scope)
            if not (scope.backwards or helper_backwards) or scope.scaler_calls.get("scale") or _helper_scales(scope):
                continue
            if not _steps_optimizer(ctx, scope, scopes):
                continue
            rank = order(ctx)
            reported: set[int] = set()
            for autocast in scope.autocasts:
                if not autocast.may_run_float16:
                    continue
                losses = computed_from(ctx, scope.node, names_assigned_in(ctx, autocast.node.body))
                for call in (*scope.backwards, *helper_backwards):
                    if id(call) in reported or scaled_backward(ctx, call):
                        continue
                    # `loss.backward()`, or `self.backward(loss)` with a helper that calls `loss.backward()`
                    owner = receiver(call) if call in scope.backwards else next(iter(positional(call)), None)
                    under = inside(ctx, call, autocast.node)
                    if not under and (owner is None or not read_names(ctx, owner) & losses):
                        continue
                    if not under and never_together(ctx, autocast.node, call):
                        continue  # `if use_amp: with autocast(): ...` and `else: loss.backward()`
                    if not under and rank[id(call)] < _first_call_after(ctx, autocast.node, rank):
                        continue
                    reported.add(id(call))
                    yield self.violation(
                        call,
                        backward=short(ctx, call),
                        autocast=short(ctx, autocast.expr),
                        how=_how(autocast),
                        where=_disabled_note(ctx, call),
                        fix=None,
                        **_scaler_advice(ctx),
                    )
            # losses computed under float16 in a helper, or by a module whose forward is decorated
            elsewhere = [
                *(
                    (call, autocast, f" in `{helper.name.value}`")
                    for call, autocast, helper in _losses_from_helpers(ctx, scope)
                ),
                *(
                    (call, autocast, f" on `{owner}.forward`")
                    for call, autocast, owner in _losses_from_autocast_forwards(ctx, scope)
                ),
            ]
            for call, autocast, where in elsewhere:
                if id(call) in reported:
                    continue
                reported.add(id(call))
                yield self.violation(
                    call,
                    backward=short(ctx, call),
                    how=_how(autocast),
                    autocast=short(ctx, autocast.expr),
                    where=where,
                    fix=None,
                    **_scaler_advice(ctx),
                )


def _how(autocast: Autocast) -> str:
    if autocast.default_dtype and UNKNOWN in autocast.devices:
        return f"runs in float16 whenever `{autocast.device_text}` is a CUDA device (autocast's default dtype there)"
    if autocast.default_dtype:
        return "runs in float16 (autocast's default dtype on CUDA)"
    if autocast.dtypes == {"float16"}:
        return "runs in float16"
    return "can run in float16 (one of its dtypes is `torch.float16`)"


def _disabled_note(ctx: FileContext, call: cst.Call) -> str:
    """Why `scaler.scale(loss).backward()` counts as unscaled: the scaler is built disabled."""
    inner = receiver(call)
    if type(inner) is cst.Call and method_name(inner) == "scale":
        owner = text_of(receiver(inner)) if receiver(inner) is not None else None
        if owner is not None and is_disabled_scaler(ctx, owner):
            return f" (`{owner}` is a `GradScaler` built with `enabled=False`: its `scale()` returns the loss as it is)"
    return ""


def _scaler_advice(ctx: FileContext) -> dict[str, str]:
    """`torch.amp.GradScaler("cuda")`, or the spelling that older supported torch releases have."""
    problem = too_new(ctx, "torch.amp.GradScaler")
    if problem is None:
        return {"scaler": 'torch.amp.GradScaler("cuda")', "support": ""}
    return {
        "scaler": "torch.cuda.amp.GradScaler()",
        "support": f" ({problem}; the old spelling is deprecated from 2.4 on)",
    }


def _plain_losses(ctx: FileContext, scope: Scope) -> list[tuple[cst.Call, cst.BaseExpression]]:
    """`loss.backward()`, and `backward_of(loss)` running `loss.backward()` in a helper: each
    unscaled backward call with the loss as the caller spells it."""
    plain = [(b, r) for b in scope.backwards if not scaled_backward(ctx, b) and (r := receiver(b)) is not None]
    for call, found in scope.helper_calls:
        if call in _plain_backward_helpers(scope):
            loss = _backpropagated_argument(ctx, call, found)
            if loss is not None:
                plain.append((call, loss))
    return plain


def _losses_from_autocast_forwards(ctx: FileContext, scope: Scope) -> Iterator[tuple[cst.Call, Autocast, str]]:
    """Plain backward calls of `scope` on a value computed from a call of a module of the file
    whose `forward` is decorated with a float16 autocast (`@torch.autocast("cuda")`): the
    model's output, and the loss made from it, come from float16 kernels."""
    decorated: dict[str, Autocast] = {}
    for name, cls in module_classes(ctx).items():
        forward = methods(cls).get("forward")
        autocast = decorated_autocast(ctx, forward) if forward is not None else None
        if autocast is not None and autocast.may_run_float16:
            decorated[name] = autocast
    if not decorated:
        return
    plain = _plain_losses(ctx, scope)
    if not plain:
        return
    for node in ctx.index.walk(scope.node):
        if type(node) is not cst.Assign:
            continue
        for call in (n for n in ctx.index.walk(node.value) if type(n) is cst.Call):
            owner = _instance_of(ctx, call.func, scope.node, decorated)
            if owner is None:
                continue
            seeds = {n for t in node.targets for n in assigned_names(t.target)}
            losses = computed_from(ctx, scope.node, seeds)
            for backward, loss in plain:
                if read_names(ctx, loss) & losses:
                    yield backward, decorated[owner], owner
            break


def _instance_of(
    ctx: FileContext, func: cst.BaseExpression, scope: cst.CSTNode, classes: dict[str, Autocast]
) -> str | None:
    """Which of `classes` the called module `func` (`model`, `self.net`) is an instance of, by
    the values the file assigns it (`Net(...).cuda()`)."""
    if type(func) is cst.Name:
        values = values_of(ctx, func.value, scope)
    elif type(func) is cst.Attribute:
        values = attribute_values(ctx, func)
    else:
        return None
    for value in values or ():
        # `Net(cfg).cuda()`, `Net().to(device).train()`: strip the in-place module methods
        while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in _MODULE_CHAIN:
            value = value.func.value
        if type(value) is cst.Call and dotted_name(value.func) in classes:
            return dotted_name(value.func)
    return None


_MODULE_CHAIN = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "half", "requires_grad_"})


def _losses_from_helpers(ctx: FileContext, scope: Scope) -> Iterator[tuple[cst.Call, Autocast, cst.FunctionDef]]:
    """Plain backward calls of `scope` on a value returned by a helper of the file from inside a
    float16 autocast block (`loss = self.compute_loss(batch)`, `loss, logits = forward_step(...)`)."""
    plain = _plain_losses(ctx, scope)
    if not plain:
        return
    for node in ctx.index.walk(scope.node):
        if type(node) is not cst.Assign or type(node.value) is not cst.Call:
            continue
        helper = callee(ctx, node.value)
        autocast = returned_under_autocast(ctx, helper) if helper is not None else None
        if helper is None or autocast is None or not autocast.may_run_float16:
            continue
        seeds = {n for t in node.targets for n in assigned_names(t.target)}
        losses = computed_from(ctx, scope.node, seeds)
        for call, loss in plain:
            if read_names(ctx, loss) & losses:
                yield call, autocast, helper


def _backpropagated_argument(ctx: FileContext, call: cst.Call, found: tuple[Effect, ...]) -> cst.BaseExpression | None:
    """What `call` hands the helper for the value it backpropagates (`backprop(loss)` running
    `value.backward()`: the caller's `loss`), where the helper's own `backward()` is on a parameter."""
    helper = callee(ctx, call)
    bound = bound_arguments(ctx, helper, call) if helper is not None else None
    for effect in found:
        inner = receiver(effect.node) if effect.kind == BACKWARD else None
        if bound is not None and type(inner) is cst.Name and inner.value in bound:
            return bound[inner.value]
    return None


def _first_call_after(ctx: FileContext, with_node: cst.With | cst.FunctionDef, rank: dict[int, int]) -> int:
    """The source rank of the first call inside the `with` block (its body starts after it)."""
    for node in ctx.index.walk(with_node):
        if type(node) is cst.Call:
            return rank[id(node)]
    return 0


def _plain_backward_helpers(scope: Scope) -> list[cst.Call]:
    """`self.backward(loss)`, `do_backward(loss)`: helpers of the file that backpropagate their
    argument with a plain `backward()` and never scale."""
    return [
        call
        for call, found in scope.helper_calls
        if BACKWARD in kinds(found) and not kinds(found) & {SCALED_BACKWARD, SCALER_STEP, UNSCALE} and positional(call)
    ]


def _helper_scales(scope: Scope) -> bool:
    """A helper called here scales the loss or steps through a scaler (`self.amp.backward(loss)`)."""
    return any(kinds(found) & {SCALED_BACKWARD, SCALER_STEP, UNSCALE} for _, found in scope.helper_calls)


def _steps_optimizer(ctx: FileContext, scope: Scope, scopes: list[Scope]) -> bool:
    """An optimizer step in this scope (or in a helper it calls), or in another method of the same
    class; or gradients the scope reads after its backward (a test or a probe that checks
    `p.grad`): they underflow just the same."""
    if scope.optimizer_steps or any(OPTIMIZER_STEP in kinds(found) for _, found in scope.helper_calls):
        return True
    if _reads_gradients(ctx, scope):
        return True
    cls = ctx.index.enclosing_class(scope.node)
    if cls is None:
        return False
    return any(other.optimizer_steps and ctx.index.enclosing_class(other.node) is cls for other in scopes)


# `p.grad.zero_()` and `p.grad = None` reset gradients; they do not use them.
_GRADIENT_RESETS = frozenset({"zero_", "detach_"})


def _reads_gradients(ctx: FileContext, scope: Scope) -> bool:
    """Whether the scope reads a `.grad` after its first plain backward (`w.grad.norm()`,
    `p.grad is not None`), other than to reset it."""
    backwards = {id(call) for call in scope.backwards}
    started = False
    for node in body_nodes(scope.node):
        if id(node) in backwards:
            started = True
        elif started and type(node) is cst.Attribute and node.attr.value == "grad":
            parent = next(iter(ctx.index.ancestors(node)), None)
            if type(parent) is cst.AssignTarget:
                continue
            if type(parent) is cst.Attribute and parent.attr.value in _GRADIENT_RESETS:
                continue
            return True
    return False
