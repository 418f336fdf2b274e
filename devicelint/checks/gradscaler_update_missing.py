from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.branches import branch_tests
from devicelint.analysis.container_reads import holders
from devicelint.analysis.training.effects import SCALER_STEP, UPDATE
from devicelint.analysis.training.helpers import bound_arguments, callee, in_callers_words
from devicelint.analysis.training.loaders import ends_iteration
from devicelint.analysis.training.loops import innermost_loop
from devicelint.analysis.training.step import (
    AMP_WORDS,
    Scope,
    is_scaler,
    names_assigned_in,
    proven_scaler,
    training_scopes,
)
from devicelint.analysis.training.step_parts import assigned_scalers, built_scaler, optimizer_names
from devicelint.analysis.training.syntax import (
    enclosing_ifs,
    inside,
    is_false,
    keyword,
    method_name,
    receiver,
    scope_of,
    short,
    test_words,
    text_of,
)
from devicelint.analysis.training.values import assignments, attribute_values, values_of
from devicelint.context import FileContext
from devicelint.fix_text import adding_lines, line_after, own_line_statement
from devicelint.rule_base import FixProposal, Rule, Violation, register


@register
class GradscalerUpdateMissing(Rule):
    """
    ## What it does
    Flags `scaler.step(optimizer)` with no `scaler.update()` anywhere in the file, and a
    `scaler.update()` that runs only on some iterations (under an `if` that the `scaler.step`
    is not under, such as `if step % 100 == 0:`), including the case where it runs only when the
    step really happened (`if not found_inf:`, `if math.isfinite(loss_value):`,
    `if scaler.get_scale() >= scale_before:`). A trainer class is one unit: an update in
    `on_step_end` under such an `if` is compared with the `scaler.step` of `optimizer_step`.
    Also flags an `update()` that a test after `scaler.unscale_(...)` can skip together with the
    step (`if grad_norm > limit: skip` / `else: scaler.step(opt); scaler.update()`, or
    `if not isfinite(norm): continue` before them): the next `unscale_` raises. Likewise an
    `update()` that a `continue` after `scaler.step(...)` skips (`scaler.step(opt)`, then
    `if not math.isfinite(loss_value): continue`, then `scaler.update()`): the next
    `scaler.step` raises.
    Also flags a `GradScaler(...)` built inside the epoch or step loop that steps with it, or
    inside a function of the file that such a loop calls on every pass (`train_one_epoch()` that
    builds its own scaler), or kept on `self` by the loop and stepped by a method the loop calls
    (`self.scaler = GradScaler()` in `fit()`, `self.scaler.step(...)` in `_update()`): every pass
    starts from a fresh scaler, so the scale that `update()` learned is lost.

    ## Why it is a bug on a GPU
    `update()` is what adapts the loss scale: it lowers it after an inf/NaN step and grows it
    after a run of good ones, and it resets the per-optimizer state. Without it the scale never
    adapts (a too-large scale skips every step; a too-small one underflows), and the next
    `scaler.step` raises "step() has already been called since the last update()", possibly
    only after hours of training when a rarely taken branch is skipped.

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    if step % 100 == 0:
        scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    When no `update()` exists at all, the fix adds `scaler.update()` on its own line right after
    the statement that calls `scaler.step(...)`, at its indent: what the AMP recipe does. It is
    safe when that statement is the bare call `scaler.step(optimizer)`, and unsafe when the call
    sits inside a larger statement (`stepped = scaler.step(opt)`), where a reviewer should
    confirm the place. An `update()` that runs only under a condition gets no fix: whether to
    move it out of the branch, or the step into it, depends on what the branch is for.

    ## Known limits
    An `update()` anywhere in the file counts for the first case (a trainer may update in
    another method), and that case needs a scaler built with `GradScaler(...)` in the file or
    used with `scale`/`unscale_` there (a `warmup_scaler.step()` of some other kind is left
    alone). An `if` that tests an amp, fp16 or scaler flag is not taken for a partial update,
    unless it tests how the step went: a finiteness check (`isfinite`, `isnan`, `isinf`), a query
    of the scaler other than `step`/`update`, a flag named for the outcome (`found_inf`,
    `overflow`, `skipped`, `optimizer_was_run`), or a name assigned from one of these in the
    same function. A scaler built in a loop is reported only when the loop also steps or
    scales with it and is not a loop over separate runs: one that builds its own model or
    optimizer, whose header names folds, trials, seeds, configurations or learning rates, or
    that catches exceptions (a retry loop); nor when the scaler is built under an `if` there,
    unless the `if` tests a precision setting that is the same on every pass
    (`if cfg.mixed_precision and cfg.dtype == "float16":`). An update skipped after `unscale_` is
    not reported when the loop builds a new scaler on every pass: nothing stale reaches the next
    pass, and the rebuilt scaler is the finding. A `scaler.step` on a scaler the function is
    handed, in a file that builds no `GradScaler`, is its caller's to update: with the project
    index the caller's call of that function (`backward_and_step(loss, opt, scaler)` of another
    module, stepping and never updating) is reported instead, where the file that calls it
    updates the scaler nowhere and does not receive it from its own caller.
    """

    code = "DL303"
    name = "gradscaler-update-missing"
    summary = "`scaler.step()` without `scaler.update()` on every step."
    message = "{what}; {remedy}"
    fix_availability = "sometimes"
    tokens = ("scale",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        scopes = training_scopes(ctx)
        file_updates = any(s.scaler_calls.get("update") for s in scopes)
        for scope in scopes:
            steps = scope.scaler_calls.get("step", [])
            updates = [*scope.scaler_calls.get("update", []), *_helper_updates(ctx, scope)]
            if not steps:
                # A helper of the class steps (`self.optimizer_step()`), or another method does.
                steps = _helper_steps(ctx, scope) or (_steps_elsewhere(ctx, scope, scopes) if updates else [])
                if steps:
                    yield from self._partial_updates(ctx, scope, steps, updates)
                if not updates and not file_updates:
                    yield from self._imported_steps_never_updated(ctx, scope)
                continue
            if not updates:
                proven = [s for s in steps if proven_scaler(ctx, receiver(s)) and not _handed_in(ctx, scope, s)]
                if not file_updates and proven:
                    step = proven[0]
                    yield self.violation(
                        step,
                        fix=_add_update(ctx, step),
                        remedy=UPDATE_REMEDY,
                        what=f"`{short(ctx, step)}` is never followed by `{short(ctx, step.func.value)}.update()`: "  # type: ignore[attr-defined]  # `scaler.step`
                        "the loss scale never adapts and the next `scaler.step` raises",
                    )
                continue
            reported = set()
            for v in self._partial_updates(ctx, scope, steps, updates):
                reported.add(id(v.node))
                yield v
            for update, branch in _updates_skipped_after_unscale(ctx, scope, updates):
                v = self.violation(
                    update,
                    remedy="call `scaler.update()` on every iteration that calls `scaler.unscale_`, "
                    "also when the step is skipped",
                    what=f"`{short(ctx, update)}` is skipped when {branch}, but "
                    f"`{short(ctx, scope.scaler_calls['unscale_'][0])}` has already run by then: the "
                    'next `unscale_` raises "unscale_() has already been called on this optimizer since the '
                    'last update()"',
                )
                if id(v.node) not in reported:
                    reported.add(id(v.node))
                    yield v
            for update, step, branch in _updates_skipped_after_step(ctx, scope, steps, updates):
                v = self.violation(
                    update,
                    remedy="call `scaler.update()` right after `scaler.step(...)`, before anything can leave the "
                    "iteration",
                    what=f"`{short(ctx, update)}` is skipped when `{short(ctx, branch.test)}` leaves the iteration "
                    f'after `{short(ctx, step)}` has run: the next `scaler.step` raises "step() has already been '
                    'called since the last update()", and the scale is not lowered after the bad step',
                )
                if id(v.node) not in reported:
                    yield v
        for call, loop in _scalers_made_per_pass(ctx, scopes):
            yield self.violation(
                call,
                remedy="create the scaler once, before the training loop",
                what=f"`{short(ctx, call)}` builds a new scaler on every pass of `{_header(ctx, loop)}`, so what "
                "`update()` learned about the loss scale is thrown away: each pass starts again from the "
                "initial scale and skips steps with inf gradients until it has lowered it again",
            )

    def _imported_steps_never_updated(self, ctx: FileContext, scope: Scope) -> Iterator[Violation]:
        """`backward_and_step(loss, opt, scaler)` of another module's function that steps the
        scaler it is handed and never updates it, where this file never updates it either: the
        file that owns the scaler misses the update (the helper's own file stays silent,
        `_handed_in`)."""
        params = _parameter_names(scope.node)
        for site, found in scope.helper_calls:
            effect = next((e for e in found if e.node is site and e.kind == SCALER_STEP and not e.conditional), None)
            if effect is None or effect.scaler is None or effect.scaler.split(".", 1)[0] in params:
                continue
            if any(e.node is site and e.kind == UPDATE for e in found):
                continue
            yield self.violation(
                site,
                remedy=f"call `{effect.scaler}.update()` after it on every step",
                what=f"`{short(ctx, site)}` steps `{effect.scaler}` through a function of another module that "
                f"never updates it, and nothing here does: the loss scale never adapts and the next "
                "`scaler.step` raises",
            )
            return

    def _partial_updates(
        self, ctx: FileContext, scope: Scope, steps: list[cst.Call], updates: list[cst.Call]
    ) -> Iterator[Violation]:
        """Updates of `scope` that run under a condition the steps (of this scope, or of other
        methods of its class) do not run under."""
        # `if (i + 1) % accum == 0:` repeated around the step and around the update is fine.
        step_tests = {
            test_words(ctx, branch.test)
            for step in steps
            for branch, _ in enclosing_ifs(ctx, step, ctx.index.enclosing_function(step) or ctx.module)
        }
        for update in updates:
            for branch, _ in enclosing_ifs(ctx, update, scope.node):
                if any(inside(ctx, step, branch) for step in steps):
                    break
                if _leaves(branch) and any(not inside(ctx, other, branch) for other in updates):
                    break  # `if skip: scaler.update(); continue` with the stepping path's own update
                words = test_words(ctx, branch.test)
                if words in step_tests:
                    break
                if _step_outcome(ctx, branch.test, scope.node):
                    yield self.violation(
                        update,
                        remedy=UPDATE_REMEDY,
                        what=f"`{short(ctx, update)}` runs only when `{short(ctx, branch.test)}`, that is only "
                        f"when `{short(ctx, steps[0])}` really stepped: after an inf/NaN step the loss scale "
                        "is never lowered and the next `scaler.step` raises",
                    )
                    break
                if any(w in words for w in AMP_WORDS) or _scaler_switch(ctx, update, branch.test):
                    break
                yield self.violation(
                    update,
                    remedy=UPDATE_REMEDY,
                    what=f"`{short(ctx, update)}` runs only when `{short(ctx, branch.test)}` but "
                    f"`{short(ctx, steps[0])}` runs on every step: the next step raises and the scale "
                    "does not adapt",
                )
                break


UPDATE_REMEDY = "call `scaler.update()` right after `scaler.step(...)` on every step that steps"
# Words of a loop header that make each pass a separate run (a fold, a trial, a sweep point), where
# a fresh scaler is right.
RUN_WORDS = ("fold", "run", "trial", "seed", "sweep", "config", "cfg", "task", "experiment", "exp", "lr", "model")


def _updates_skipped_after_unscale(
    ctx: FileContext, scope: Scope, updates: list[cst.Call]
) -> Iterator[tuple[cst.Call, str]]:
    """Updates that a test after the scaler's `unscale_` can skip: the update sits in a branch the
    unscale is not in (`if norm > limit: skip` / `else: step; update`), or an earlier branch leaves
    the iteration (`if not isfinite(norm): continue`). The unscale then runs twice without an
    update in between."""
    for update in updates:
        if _rebuilt_in_loop(ctx, update):
            continue
        name = _updated_scaler(ctx, update)
        unscales = [
            u
            for u in scope.scaler_calls.get("unscale_", [])
            if text_of(receiver(u)) == name and _before(ctx, u, update)
        ]
        if not unscales:
            continue
        unscale = unscales[-1]
        unscale_tests = branch_tests(ctx, unscale)
        for branch, in_body in enclosing_ifs(ctx, update, scope.node):
            if inside(ctx, unscale, branch):
                break
            if (
                _before(ctx, branch, unscale)
                or any(w in test_words(ctx, branch.test) for w in AMP_WORDS)
                or _scaler_switch(ctx, update, branch.test)
            ):
                continue  # `if use_amp:` around both, or a branch the unscale is also in
            if (ctx.code_for(branch.test), in_body) in unscale_tests:
                continue  # `if flag: unscale_` ... `if flag: update()`: the same test, whatever its name
            if _leaves(branch) and any(not inside(ctx, other, branch) for other in updates):
                break  # `if skip: scaler.update(); continue`, and the stepping path updates too
            if _other_arm_updates(ctx, branch, in_body, update, updates):
                break  # `if bad_norm: ...; scaler.update()` / `else: scaler.step(opt); scaler.update()`
            yield update, f"`{short(ctx, branch.test)}` is {'false' if in_body else 'true'}"
            break
        else:
            exit_branch = _leaving_branch_between(ctx, unscale, update, scope.node)
            if exit_branch is not None:
                yield update, f"`{short(ctx, exit_branch.test)}` leaves the iteration before it"


def _updates_skipped_after_step(
    ctx: FileContext, scope: Scope, steps: list[cst.Call], updates: list[cst.Call]
) -> Iterator[tuple[cst.Call, cst.Call, cst.If]]:
    """Updates that a `continue` after the scaler's `step` can skip: an `if` between the last
    `scaler.step` before the update and the update, in the same loop body, that ends with
    `continue` and updates nothing (`scaler.step(opt)`, then `if not isfinite(loss): continue`,
    then `scaler.update()`). The next pass steps again without an update in between. Only
    `continue` counts: a `break` or `return` there may end the training for good."""
    for update in updates:
        if _rebuilt_in_loop(ctx, update):
            continue
        name = _updated_scaler(ctx, update)
        before = [s for s in steps if text_of(receiver(s)) == name and _before(ctx, s, update)]
        if not before:
            continue
        step = before[-1]
        branch = _leaving_branch_between(ctx, step, update, scope.node, jumps=(cst.Continue,))
        if branch is not None:
            yield update, step, branch


def _scaler_switch(ctx: FileContext, update: cst.Call, test: cst.BaseExpression) -> bool:
    """`if flag:` around an update of a scaler built with `enabled=flag`: where the test is false
    the scaler is off and its `step` a plain optimizer step, whatever the flag is called."""
    name = _updated_scaler(ctx, update)
    if name is None:
        return False
    scope = scope_of(ctx, update)
    values = values_of(ctx, name, scope) if "." not in name else attribute_values(ctx, cst.parse_expression(name))
    switches = set()
    for value in values or ():
        built = built_scaler(ctx, value) if type(value) is cst.Call else None
        if built is None:
            return False
        flag = keyword(built, "enabled")
        if flag is None:
            return False
        switches.add(" ".join(ctx.code_for(flag).split()))
    return bool(switches) and switches == {" ".join(ctx.code_for(test).split())}


def _parameter_names(node: cst.CSTNode) -> set[str]:
    if type(node) is not cst.FunctionDef:
        return set()
    params = node.params
    return {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}


def _handed_in(ctx: FileContext, scope: Scope, step: cst.Call) -> bool:
    """`scaler.step(opt)` on a scaler the function is handed, in a file that builds no
    `GradScaler`: the scaler belongs to a caller in another module, whose update this file
    cannot see (the caller's file is judged at its call, `_imported_steps_never_updated`)."""
    owner = receiver(step)
    name = text_of(owner) if owner is not None else None
    return name is not None and name in _parameter_names(scope.node) and name != "self" and not assigned_scalers(ctx)


def _helper_updates(ctx: FileContext, scope: Scope) -> list[cst.Call]:
    """Calls in `scope` of helpers of the file that update a scaler on every call."""
    sites = _helper_update_sites(ctx)
    return [site for site, _ in scope.helper_calls if id(site) in sites]


def _helper_update_sites(ctx: FileContext) -> dict[int, str]:
    """id(call) -> the scaler it updates, as the caller spells it, for each call of a helper of
    the file whose own body updates a scaler on every call (`self._finish()`, `finish(self)`,
    `Trainer._finish(self)` running `owner.scaler.update()`): the helper's parameter bound to
    the caller's argument (`helpers.in_callers_words`)."""

    def build(c: FileContext) -> dict[int, str]:
        out: dict[int, str] = {}
        for scope in training_scopes(c):
            for site, found in scope.helper_calls:
                helper = callee(c, site)
                for effect in found:
                    if effect.kind != UPDATE or effect.conditional or effect.scaler is None or helper is None:
                        continue
                    if scope_of(c, effect.node) is not helper:
                        continue  # a helper's helper: its words are not the helper's
                    name = in_callers_words(c, helper, site, effect.scaler)
                    if name is not None:
                        out[id(site)] = name
                        break
        return out

    return ctx.shared("DL303.helper_updates", build)


def _updated_scaler(ctx: FileContext, update: cst.Call) -> str | None:
    """The scaler an update (`scaler.update()`, or a helper call that updates one) updates."""
    return _helper_update_sites(ctx).get(id(update)) or text_of(receiver(update))


def _other_arm_updates(
    ctx: FileContext, branch: cst.If, in_body: bool, update: cst.Call, updates: list[cst.Call]
) -> bool:
    """The arm of `branch` that `update` is not in updates the same scaler too, so the `if` as a
    whole updates on both paths (`if not finite: skip; scaler.update()` / `else: step; update`).
    An update there under a further condition is judged on its own, where that condition is the
    branch that skips."""
    arm: cst.CSTNode | None = branch.orelse if in_body else branch.body
    if arm is None:
        return False
    name = _updated_scaler(ctx, update)
    return any(
        other is not update and _updated_scaler(ctx, other) == name and inside(ctx, other, arm) for other in updates
    )


_JUMPS: tuple[type[cst.BaseSmallStatement], ...] = (cst.Continue, cst.Break, cst.Return)


def _leaves(branch: cst.If, jumps: tuple[type[cst.BaseSmallStatement], ...] = _JUMPS) -> bool:
    """The `if` body ends with one of `jumps` (`continue`, `break` or `return`)."""
    body = branch.body.body if type(branch.body) is cst.IndentedBlock else ()
    return bool(body) and type(body[-1]) is cst.SimpleStatementLine and type(body[-1].body[-1]) in jumps


def _before(ctx: FileContext, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """`a` starts before `b` in the source (pre-order: a statement before what it holds)."""
    rank = ctx.shared("DL303.preorder", lambda c: {id(n): i for i, n in enumerate(c.index.walk(c.module))})
    return rank[id(a)] < rank[id(b)]


def _leaving_branch_between(
    ctx: FileContext,
    first: cst.CSTNode,
    last: cst.CSTNode,
    scope: cst.CSTNode,
    jumps: tuple[type[cst.BaseSmallStatement], ...] = _JUMPS,
) -> cst.If | None:
    """An `if` after `first` and before `last`, around neither, in the same loop body, whose body
    ends with one of `jumps` (`continue`, `break` or `return`) and holds no update."""
    loop = innermost_loop(ctx, last)
    if loop is None or innermost_loop(ctx, first) is not loop:
        return None
    for node in ctx.index.walk(loop.body):
        if type(node) is not cst.If or innermost_loop(ctx, node) is not loop:
            continue
        if (
            not (_before(ctx, first, node) and _before(ctx, node, last))
            or inside(ctx, last, node)
            or inside(ctx, first, node)
        ):
            continue
        if any(w in test_words(ctx, node.test) for w in AMP_WORDS):
            continue
        if not _leaves(node, jumps):
            continue
        if any(type(n) is cst.Call and method_name(n) == "update" for n in ctx.index.walk(node.body)):
            continue
        return node
    return None


def _scalers_made_per_pass(ctx: FileContext, scopes: list[Scope]) -> Iterator[tuple[cst.Call, cst.For | cst.While]]:
    """`scaler = GradScaler(...)` inside a loop (of its function) that also steps or scales with
    that scaler: an epoch or step loop, not a loop over separate runs (one that builds its own
    model or optimizer, or whose header names folds, trials, seeds, learning rates)."""
    for call in ctx.index.of_type(cst.Call):
        built = built_scaler(ctx, call)  # `GradScaler(...)`, or a helper of the file that returns one
        if built is None or is_false(keyword(built, "enabled")):
            continue
        assign = ctx.index.parent(call)
        if type(assign) is cst.Assign and len(assign.targets) == 1:
            holder: cst.BaseExpression | None = assign.targets[0].target
        else:
            # put in a container and read back into a name (`s = box.value`, `s, _ = pair`)
            holder = next(iter(holders(ctx, call)), None)
        target = text_of(holder) if holder is not None else None
        loop = innermost_loop(ctx, call)
        if target is None or holder is None:
            continue
        if loop is None:
            outer = _loop_calling(ctx, call, holder, target, scopes)
            if outer is not None:
                yield call, outer
            continue
        owner = scope_of(ctx, call)
        used = [
            c
            for scope in scopes
            if scope.node is owner
            for c in (*scope.scaler_calls.get("step", []), *scope.scaler_calls.get("scale", []))
            if text_of(receiver(c)) == target and inside(ctx, c, loop)
        ]
        if not used and not _stepped_by_a_method_the_loop_calls(ctx, loop, target, scopes):
            continue
        if _per_run(ctx, loop):
            continue
        if any(not _configuration_test(ctx, branch.test) for branch, _ in enclosing_ifs(ctx, call, loop)):
            continue  # `if epoch == warmup_epochs: scaler = GradScaler()` runs once
        yield call, loop


def _stepped_by_a_method_the_loop_calls(
    ctx: FileContext, loop: cst.For | cst.While, target: str, scopes: list[Scope]
) -> bool:
    """`self.scaler = GradScaler()` in a trainer's loop that calls `self._backward(loss)`, which
    steps or scales with `self.scaler`: the scaler is used on every pass, from another method."""
    if not target.startswith("self."):
        return False
    helpers = {id(h) for site in ctx.index.within(loop.body, cst.Call) if (h := callee(ctx, site)) is not None}
    return any(
        text_of(receiver(c)) == target
        for scope in scopes
        if id(scope.node) in helpers
        for c in (*scope.scaler_calls.get("step", []), *scope.scaler_calls.get("scale", []))
    )


def _configuration_test(ctx: FileContext, test: cst.BaseExpression) -> bool:
    """`if cfg.mixed_precision and cfg.dtype == "float16":`: a setting that is the same on every
    pass, not a test of the pass (`if epoch == warmup_epochs:`, `if scaler is None:`)."""
    words = test_words(ctx, test)
    if "none" in words or any(
        type(n) is cst.BinaryOperation and type(n.operator) is cst.Modulo for n in ctx.index.walk(test)
    ):
        return False
    return any(w in words for w in AMP_WORDS) and not any(w in words for w in ("epoch", "step", "iter", "batch_idx"))


def _rebuilt_in_loop(ctx: FileContext, update: cst.Call) -> bool:
    """The updated scaler is assigned a new `GradScaler(...)` in the loop around the update: a
    pass that skips the update leaves nothing stale for the next, which has a new scaler
    (DL303 reports the rebuilt scaler itself)."""
    loop = innermost_loop(ctx, update)
    name = _updated_scaler(ctx, update)
    if loop is None or name is None:
        return False
    return any(
        type(node) is cst.Assign
        and len(node.targets) == 1
        and text_of(node.targets[0].target) == name
        and type(node.value) is cst.Call
        and built_scaler(ctx, node.value) is not None
        and innermost_loop(ctx, node) is loop
        for node in ctx.index.walk(loop.body)
    )


def _loop_calling(
    ctx: FileContext, call: cst.Call, holder: cst.BaseExpression, target: str, scopes: list[Scope]
) -> cst.For | cst.While | None:
    """For `scaler = GradScaler(...)` kept in a local (`holder`) of a function that steps or
    scales with it (and neither receives, returns nor stores it): an epoch loop of another
    function of the file that calls that function on every pass (`for epoch ...: train_one_epoch(...)`)."""
    func = ctx.index.enclosing_function(call)
    if func is None:
        return None
    if type(holder) is not cst.Name:
        return None  # `self.scaler = GradScaler()` outlives the call
    params = {p.name.value for p in (*func.params.params, *func.params.kwonly_params, *func.params.posonly_params)}
    if target in params:
        return None  # `if scaler is None: scaler = GradScaler()`: the caller may pass one
    kept = {target}
    built = ctx.index.enclosing(call, cst.Assign)
    if built is not None and built is not ctx.index.parent(call):
        # the container the scaler was put in (`box = Box(GradScaler())`) may be handed back too
        kept |= {t.target.value for t in built.targets if type(t.target) is cst.Name}
    for node in ctx.index.walk(func.body):
        if (
            isinstance(node, (cst.Return, cst.Yield))
            and node.value is not None
            and kept & {n.value for n in ctx.index.walk(node.value) if type(n) is cst.Name}
        ):
            return None  # the caller may keep the scaler it gets back
        if type(node) in (cst.Global, cst.Nonlocal):
            return None
    used = [
        c
        for scope in scopes
        if scope.node is func
        for c in (*scope.scaler_calls.get("step", []), *scope.scaler_calls.get("scale", []))
        if text_of(receiver(c)) == target
    ]
    if not used and not _handed_to_a_stepping_helper(ctx, func, target, scopes):
        return None
    if _builds_run(ctx, func):
        return None  # `train(hyp)` builds its own model and optimizer: each call is a run
    for site in ctx.index.of_type(cst.Call):
        if site is call or callee(ctx, site) is not func:
            continue
        loop = innermost_loop(ctx, site)
        if loop is None or inside(ctx, site, func) or _per_run(ctx, loop):
            continue
        return loop
    return None


def _handed_to_a_stepping_helper(ctx: FileContext, func: cst.FunctionDef, target: str, scopes: list[Scope]) -> bool:
    """`func` hands its scaler to a function or method of the file that steps or scales with it
    (`Trainer().train_epoch(loader, scaler)`): the scaler is used on each call of `func`."""
    for site in ctx.index.within(func.body, cst.Call):
        if not any(type(a.value) is cst.Name and a.value.value == target for a in site.args):
            continue
        helper = callee(ctx, site)
        bound = bound_arguments(ctx, helper, site) if helper is not None else None
        if not bound:
            continue
        params = {param for param, value in bound.items() if type(value) is cst.Name and value.value == target}
        if any(
            text_of(receiver(c)) in params
            for scope in scopes
            if scope.node is helper
            for c in (*scope.scaler_calls.get("step", []), *scope.scaler_calls.get("scale", []))
        ):
            return True
    return False


def _builds_run(ctx: FileContext, func: cst.FunctionDef) -> bool:
    """`func` assigns a model or optimizer of its own (`model = Model(cfg)`, `optimizer = SGD(...)`),
    not just a moved one (`model = model.to(device)`)."""
    for node in ctx.index.walk(func.body):
        if not (type(node) is cst.Assign and len(node.targets) == 1):
            continue
        target = text_of(node.targets[0].target) or ""
        name = target.rsplit(".", 1)[-1].lower()
        named = _optimizer_word(name) or "model" in name or name == "net"
        if not named and target not in optimizer_names(ctx):  # an optimizer by what it is built from
            continue
        value = node.value
        while type(value) is cst.Call and type(value.func) is cst.Attribute:
            value = value.func.value  # `model.to(device).train()` -> `model`
        if not (type(value) in (cst.Name, cst.Attribute) and text_of(value) == text_of(node.targets[0].target)):
            return True
    return False


def _per_run(ctx: FileContext, loop: cst.For | cst.While) -> bool:
    header = test_words(ctx, loop.target) + " " + test_words(ctx, loop.iter) if type(loop) is cst.For else ""
    # `for epoch in range(1, cfg["num_epochs"] + 1)`, `for ep in range(cfg.max_epochs)`: an epoch
    # loop, unless its variable names a run (`for fold in range(cfg.epochs_per_fold)`).
    target = test_words(ctx, loop.target) if type(loop) is cst.For else ""
    epochs = "epoch" in header and not any(word in target for word in RUN_WORDS)
    if not epochs and any(word in header for word in RUN_WORDS):
        return True
    if any(type(node) is cst.ExceptHandler and not ends_iteration(node) for node in ctx.index.walk(loop.body)):
        return True  # a retry loop (`except OutOfMemoryError: batch_size //= 2`) starts a new run
    # A counter (`optim_steps += 1`) builds nothing: names only ever incremented are left out.
    counted = {text_of(n.target) for n in ctx.index.walk(loop.body) if type(n) is cst.AugAssign}
    rebound = {text_of(t.target) for n in ctx.index.walk(loop.body) if type(n) is cst.Assign for t in n.targets}
    assigned = names_assigned_in(ctx, loop.body) - (counted - rebound)
    if any(name in optimizer_names(ctx) for name in assigned):
        return True  # a loop that builds its own optimizer (`torch.optim.AdamW(...)`), whatever its name
    built = {name.rsplit(".", 1)[-1].lower() for name in assigned}
    return any(_optimizer_word(name) or "model" in name or name == "net" for name in built)


def _optimizer_word(name: str) -> bool:
    """`optimizer`, `opt_g`, `d_optim`: a name for an optimizer, not for a count or a flag about
    its steps (`optim_steps`, `did_optim_step`)."""
    if any(w in name for w in ("step", "count", "num", "iter")):
        return False
    return "optim" in name or name.startswith("opt")


def _header(ctx: FileContext, loop: cst.For | cst.While) -> str:
    if isinstance(loop, cst.For):
        return f"for {short(ctx, loop.target, 30)} in {short(ctx, loop.iter, 40)}"
    return f"while {short(ctx, loop.test, 40)}"


def _helper_steps(ctx: FileContext, scope: Scope) -> list[cst.Call]:
    """Calls in `scope` of helpers that step a scaler on every call (`self.optimizer_step()`)."""
    return [
        call for call, found in scope.helper_calls if any(e.kind == SCALER_STEP and not e.conditional for e in found)
    ]


def _steps_elsewhere(ctx: FileContext, scope: Scope, scopes: list[Scope]) -> list[cst.Call]:
    """`scaler.step(...)` of the scaler `scope` updates, in other methods of the same class: a
    trainer that steps in `optimizer_step` and updates in `on_step_end` is one unit."""
    cls = ctx.index.enclosing_class(scope.node)
    if cls is None:
        return []
    names = {text_of(receiver(u)) for u in scope.scaler_calls.get("update", [])}
    return [
        step
        for other in scopes
        if other is not scope and ctx.index.enclosing_class(other.node) is cls
        for step in other.scaler_calls.get("step", [])
        # a step on every call of its method: a conditional one may pair with the conditional update
        if text_of(receiver(step)) in names and not any(enclosing_ifs(ctx, step, other.node))
    ]


# torch, math and numpy checks of a value's finiteness.
FINITE_CHECKS = frozenset({"isfinite", "isnan", "isinf"})
# Words of a flag that records whether the step ran (`found_inf`, `optimizer_was_run`).
OUTCOME_WORDS = frozenset(
    {"inf", "nan", "finite", "isfinite", "isnan", "isinf", "overflow", "overflowed", "skipped", "stepped"}
)


def _step_outcome(ctx: FileContext, test: cst.BaseExpression, scope: cst.CSTNode, depth: int = 0) -> bool:
    """Whether an `if` test depends on how the step went: a finiteness check, a scaler query
    (`scaler.get_scale()`, `scaler._found_inf_per_device(opt)`), a flag named for it
    (`found_inf`, `optimizer_was_run`), or a name assigned from one of these in the function."""
    tokens = set(re.findall(r"[a-z]+", test_words(ctx, test).replace("_", " ")))
    if tokens & OUTCOME_WORDS or {"was", "run"} <= tokens:
        return True
    names = set()
    for node in ctx.index.walk(test):
        if type(node) is cst.Call:
            if method_name(node) in FINITE_CHECKS or (
                type(node.func) is cst.Attribute and node.func.attr.value in FINITE_CHECKS
            ):
                return True
            if method_name(node) not in ("step", "update") and is_scaler(ctx, receiver(node)):
                return True
        if type(node) is cst.Name:
            names.add(node.value)
    if depth > 2:
        return False
    table = assignments(ctx).get(id(scope), {})
    return any(
        value is not None and _step_outcome(ctx, value, scope, depth + 1)
        for name in names
        for value in table.get(name, [])
    )


def _add_update(ctx: FileContext, step: cst.Call) -> FixProposal | None:
    statement = own_line_statement(ctx, step)
    if statement is None or type(statement) is not cst.SimpleStatementLine:
        return None
    scaler = ctx.code_for(step.func.value)  # type: ignore[attr-defined]  # `scaler.step(...)`: func is an Attribute
    bare = type(statement.body[0]) is cst.Expr and statement.body[0].value is step
    return adding_lines(
        f"Call `{scaler}.update()` after the step", bare, line_after(ctx, statement, f"{scaler}.update()")
    )
