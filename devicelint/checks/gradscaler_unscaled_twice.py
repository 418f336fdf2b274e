from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.effects import UNSCALE, UPDATE, Effect
from devicelint.analysis.training.helpers import bound_arguments, callee
from devicelint.analysis.training.step import Scope, training_scopes
from devicelint.analysis.training.step_parts import assigned_scalers
from devicelint.analysis.training.syntax import positional, receiver, scope_of, short
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class GradScalerUnscaledTwice(Rule):
    """
    ## What it does
    Flags a second `scaler.unscale_(optimizer)` for the same optimizer and scaler in one
    straight run of a step (the same block, no `scaler.update()` between), also when one of the
    two happens inside a helper the step calls: a gradient-clipping helper or a method of
    another object that unscales before it clips (`clipper.clip(optimizer, params)` running
    `self.scaler.unscale_(optimizer)`), followed by the step's own `scaler.unscale_(optimizer)`;
    likewise two methods of an instance of another module's class that both unscale the
    optimizer it keeps (`opt.prepare_grads()`, then `opt.step()` calling `prepare_grads()` again).

    ## Why it is a bug on a GPU
    `GradScaler` records per optimizer that its gradients were unscaled, and refuses to do it
    twice before `update()`: the second call raises `RuntimeError: unscale_() has already been
    called on this optimizer since the last update()`. Code tested without AMP (or with the
    scaler disabled, on the CPU) never reaches it; the first mixed-precision GPU run stops at the
    first step.

    ## Example
    ```python
    def clip(scaler, optimizer, params):
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, 1.0)

    scaler.scale(loss).backward()
    clip(scaler, optimizer, model.parameters())
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    clip(scaler, optimizer, model.parameters())
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix: which of the two calls to keep depends on whether the clip (or whatever else needs
    the true gradients) must run before it.

    ## Known limits
    The two calls must be statements of one block (a loop body, a step function), with no
    `update()` between them, or the first in an `if` (or `with`) that the block holds before the
    second (`if not check_nan: opt.prepare_grads()`, then `opt.step()`, both unscaling); a helper counts when it unscales on every call (not under an `if`
    or a loop of its own) and it is a function of the file. The optimizer must be the same
    expression at both calls, a helper's parameter standing for the argument its caller passes
    there; the scaler too, or the file builds one `GradScaler` only. Unscaling two optimizers
    (a GAN's generator and discriminator) is correct and not reported.
    """

    code = "DL308"
    name = "gradscaler-unscaled-twice"
    summary = "`scaler.unscale_(optimizer)` runs twice for one optimizer before `update()`."
    message = (
        "`{second}` unscales `{optimizer}` a second time since the last `update()`{first}: it raises "
        "`RuntimeError: unscale_() has already been called on this optimizer since the last update()`; "
        "unscale once per step"
    )
    tokens = ("unscale",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        one_scaler = len(assigned_scalers(ctx)) == 1
        for scope in training_scopes(ctx):
            yield from self._check_scope(ctx, scope, one_scaler)

    def _check_scope(self, ctx: FileContext, scope: Scope, one_scaler: bool) -> Iterator[Violation]:
        events = _events(ctx, scope)
        if sum(e.kind == UNSCALE for e in events) < 2:
            return
        # each event, in its own block and in the blocks around an `if` or `with` holding it: the
        # step goes on after the `if` (`if not check_nan: opt.prepare_grads()`, then `opt.step()`)
        by_block: dict[int, list[tuple[_Event, bool]]] = {}
        for event in events:
            statement, block = _statement_and_block(ctx, event.site)
            lifted = False
            while statement is not None and block is not None:
                by_block.setdefault(id(block), []).append((event, lifted))
                statement, block = _around(ctx, block)
                lifted = True
        for block_events in by_block.values():
            block_events.sort(key=lambda e: ctx.index.position(e[0].site))
            seen: list[_Event] = []
            for event, lifted in block_events:
                if event.kind == UPDATE:
                    seen = [e for e in seen if not _same_scaler(e, event, one_scaler)]
                    continue
                if lifted:
                    # only the first of two may come from a branch: two branches may exclude each other
                    seen.append(event)
                    continue
                first = next(
                    (e for e in seen if e.optimizer == event.optimizer and _same_scaler(e, event, one_scaler)), None
                )
                if first is not None and first.site is not event.site:
                    yield self.violation(
                        event.site,
                        second=short(ctx, event.site),
                        optimizer=event.optimizer,
                        first=_where(ctx, first),
                    )
                    return
                seen.append(event)


@dataclass(frozen=True)
class _Event:
    """An unscale or an update of one scaler, at a call of the step's own code (`site`); `inner`
    is the call inside a helper when the helper does it."""

    kind: str
    site: cst.Call
    inner: cst.Call | None
    scaler: str | None
    optimizer: str | None


def _events(ctx: FileContext, scope: Scope) -> list[_Event]:
    out: list[_Event] = []
    for method, kind in (("unscale_", UNSCALE), ("update", UPDATE)):
        for call in scope.scaler_calls.get(method, []):
            args = positional(call)
            optimizer = " ".join(ctx.code_for(args[0]).split()) if args else None
            out.append(_Event(kind, call, None, _text(ctx, receiver(call)), optimizer))
    for site, effects in scope.helper_calls:
        for effect in effects:
            if effect.kind not in (UNSCALE, UPDATE) or effect.conditional or effect.scaler is None:
                continue
            if effect.node is site:  # a function of another module: what the call hands it
                if effect.kind == UPDATE or effect.optimizer is not None:
                    out.append(_Event(effect.kind, site, None, effect.scaler, effect.optimizer))
                continue
            optimizer = None
            if effect.kind == UNSCALE:
                args = positional(effect.node)
                optimizer = _as_caller_spells(ctx, args[0], effect, site) if args else None
                if optimizer is None:
                    continue
            scaler = _as_caller_spells(ctx, receiver(effect.node), effect, site)
            out.append(_Event(effect.kind, site, effect.node, scaler, optimizer))
    return [e for e in out if e.kind == UPDATE or e.optimizer is not None]


def _as_caller_spells(ctx: FileContext, node: cst.CSTNode | None, effect: Effect, site: cst.Call) -> str | None:
    """`node` (inside the helper `site` runs) as the caller writes it: a parameter of the helper
    is the argument the call passes there, `self.x` is the caller's own `self.x` when both are
    methods of one class; None when the caller cannot name it."""
    if node is None:
        return None
    helper = callee(ctx, site)
    text = _text(ctx, node)
    if helper is None or scope_of(ctx, effect.node) is not helper or text is None:
        return None
    if text.startswith("self."):
        same_class = ctx.index.enclosing_class(helper) is ctx.index.enclosing_class(site)
        return text if same_class and ctx.index.enclosing_class(site) is not None else None
    bound = bound_arguments(ctx, helper, site)
    given = bound.get(text) if bound is not None else None
    return _text(ctx, given) if given is not None else None


def _text(ctx: FileContext, node: cst.CSTNode | None) -> str | None:
    if node is None:
        return None
    return dotted_name(node) or " ".join(ctx.code_for(node).split())


def _same_scaler(a: _Event, b: _Event, one_scaler: bool) -> bool:
    return one_scaler or (a.scaler is not None and a.scaler == b.scaler)


def _statement_and_block(ctx: FileContext, call: cst.Call) -> tuple[cst.CSTNode | None, cst.CSTNode | None]:
    """The statement line holding `call` where the call runs whenever the line does (not under a
    conditional expression, `and`/`or`, a lambda or a comprehension), and the block that line
    belongs to."""
    for ancestor in ctx.index.ancestors(call):
        if type(ancestor) is cst.SimpleStatementLine:
            return ancestor, ctx.index.parent(ancestor)
        if isinstance(ancestor, _MAYBE_SKIPPED):
            return None, None
    return None, None


def _around(ctx: FileContext, block: cst.CSTNode) -> tuple[cst.CSTNode | None, cst.CSTNode | None]:
    """The statement and block around `block` when it is the body (or `else`) of an `if`, or
    the body of a `with`: what runs in it runs before the rest of the block around."""
    index = ctx.index
    owner = index.parent(block)
    if owner is not None and type(owner) is cst.Else:
        owner = index.parent(owner)
    while owner is not None and type(owner) is cst.If and type(index.parent(owner)) is cst.If:
        owner = index.parent(owner)  # an `elif`: the statement is the first `if`
    if owner is None or type(owner) not in (cst.If, cst.With):
        return None, None
    return owner, index.parent(owner)


_MAYBE_SKIPPED = (
    cst.IfExp,
    cst.BooleanOperation,
    cst.Lambda,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)


def _where(ctx: FileContext, first: _Event) -> str:
    if first.inner is None:
        return f" (first at `{short(ctx, first.site)}`)"
    helper = scope_of(ctx, first.inner)
    name = helper.name.value if type(helper) is cst.FunctionDef else "a helper"
    return f" (first in `{short(ctx, first.site)}`, which calls `{short(ctx, first.inner)}` in `{name}`)"
