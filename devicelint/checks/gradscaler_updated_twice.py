from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.training.effects import SCALER_STEP, UPDATE, Effect
from devicelint.analysis.training.helpers import callee as callee_of
from devicelint.analysis.training.helpers import calls_of, in_callers_words
from devicelint.analysis.training.loops import innermost_loop
from devicelint.analysis.training.optimizer_loops import loops_over_optimizers
from devicelint.analysis.training.step import Scope, order, training_scopes
from devicelint.analysis.training.syntax import (
    assigned_names,
    enclosing_ifs,
    exclusive,
    inside,
    positional,
    receiver,
    scope_of,
    short,
    test_words,
)
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class GradscalerUpdatedTwice(Rule):
    """
    ## What it does
    Flags a `scaler.update()` that runs more than once per training iteration on one
    `GradScaler`:

    - after each of two optimizers' `scaler.step(...)` in one loop body or step function (a GAN
      stepping its generator and its discriminator with one scaler), reported at the first update;
    - inside a loop over the optimizers (`for opt in optimizers: scaler.step(opt); scaler.update()`);
    - in methods of one class: `self.discriminator_step(real)` steps and updates `self.scaler`,
      then `self.generator_step(real)` steps it and `self.on_step_end()` updates it again,
      reported at the first call that updates;
    - in a helper that steps and updates a scaler kept on `self` or at module level, called once
      per optimizer (`self.backward_step(loss_g, opt_g)`, then `self.backward_step(loss_d, opt_d)`
      in the same iteration, or in a loop over the optimizers), reported at the helper's update;
      this includes an optimizer wrapper class whose `step()` steps and updates the scaler its
      constructor was given, when two wrappers built with the same scaler
      (`ScaledOptimizer(opt_g, scaler)`, `ScaledOptimizer(opt_d, scaler)`) both step in one
      iteration;
    - again right after an update with no `step(...)` between (a trainer's method, here or in
      another module of the project, steps and updates `trainer.scaler`, then the loop calls
      `trainer.scaler.update()`): `update()` then finds no inf checks and raises; reported at
      the second update;
    - per micro-batch while the optimizer steps less often: in an inner loop whose enclosing loop
      (or function) holds the `scaler.step(...)`, or next to a step that runs only under an
      accumulation condition (`if (i + 1) % accum == 0:`) that the update is not under.

    ## Why it is a bug on a GPU
    `update()` closes one iteration of the loss scale: it lowers the scale if any optimizer
    stepped this iteration found an inf/NaN, grows it after `growth_interval` clean iterations,
    and forgets the per-optimizer records. Called after each optimizer, the scale moves twice per
    iteration (it grows twice as fast, and a skipped generator step lowers the scale that the
    discriminator's gradients may already have been scaled with, so they are unscaled with the
    wrong factor); the PyTorch AMP guide says to call it once, after all optimizers stepped.
    Called per micro-batch, the first `update()` with no `step()` since the last one raises
    `No inf checks were recorded prior to update`, and a scale that changed between micro-batches
    would mix gradients scaled by different factors.

    ## Example
    ```python
    scaler.scale(loss_g).backward()
    scaler.step(opt_g)
    scaler.update()
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss_g).backward()
    scaler.step(opt_g)
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    scaler.update()
    ```

    ## Fix safety
    No fix: deleting the first update is right for the two-optimizer case only when both steps
    run on every iteration (a discriminator trained every `n_critic` steps needs the update moved
    under both branches), and the per-micro-batch case needs the update moved next to the step;
    which edit is right depends on code the rule does not model.

    ## Known limits
    Calls are compared inside one function, plus the helpers it calls that the file defines
    (followed a few levels deep): a helper counts only where it steps or updates on every call
    (not under an `if` or a loop) a scaler it does not receive as a parameter (`self.x` of the
    caller's own class, or a module-level name).
    An update in a function called once per iteration counts once. Scalers are told apart by how the code
    writes them (`scaler_g` and `scaler_d`, `self.scalers[name]` with a loop variable), so two
    names for one scaler look like two scalers. Two updates in mutually exclusive branches, or
    separated by a `return`, `continue`, `break` or `raise` that always follows the first, are
    fine. An accumulation condition is a test with `%` or a word like `accum`, `sync` or
    `micro`.
    """

    code = "DL307"
    name = "gradscaler-updated-twice"
    summary = "One `GradScaler` is updated more than once per training iteration."
    message = (
        "{what}; call `{scaler}.update()` once per iteration, after the last `{scaler}.step(...)` of the iteration"
    )
    tokens = ("update",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for scope in training_scopes(ctx):
            for calls in _per_scaler(ctx, scope):
                yield from self._check_scaler(ctx, scope, calls)
                yield from self._check_helper(ctx, scope, calls)

    def _check_helper(self, ctx: FileContext, scope: Scope, calls: ScalerCalls) -> Iterator[Violation]:
        """A helper that steps and updates one shared scaler, called for each optimizer of an iteration."""
        helper = scope.node
        if type(helper) is not cst.FunctionDef or not _kept_outside(helper, calls.name):
            return
        every_call = [
            u for u in calls.updates if innermost_loop(ctx, u) is None and not any(enclosing_ifs(ctx, u, helper))
        ]
        if not every_call:
            return
        sites = calls_of(ctx, helper)
        for first, second in zip(sites, sites[1:]):
            caller = Scope(scope_of(ctx, first))
            if not _one_scaler(ctx, helper, calls.name, first, second):
                continue
            if scope_of(ctx, second) is caller.node and _same_pass(ctx, caller, first, second):
                yield self.violation(
                    every_call[0],
                    scaler=calls.name,
                    what=f"`{short(ctx, every_call[0])}` in `{helper.name.value}` runs on each of `{short(ctx, first)}` "
                    f"and `{short(ctx, second)}` in the same iteration, so one scaler's loss scale moves twice per "
                    "iteration",
                )
                return
        for site in sites:
            loop = innermost_loop(ctx, site)
            if loop is not None and _over_optimizers(ctx, loop, None, calls.name):
                yield self.violation(
                    every_call[0],
                    scaler=calls.name,
                    what=f"`{short(ctx, every_call[0])}` in `{helper.name.value}` runs once per optimizer of "
                    f"`{_loop_header(ctx, loop)}`, so the loss scale is updated once per optimizer instead of once "
                    "per iteration",
                )
                return

    def _check_scaler(self, ctx: FileContext, scope: Scope, calls: ScalerCalls) -> Iterator[Violation]:
        reported: set[int] = set()
        for first, second in zip(calls.updates, calls.updates[1:]):
            if _same_helper(calls, first, second) and not _handed_in(ctx, calls.helpers[id(first)]):
                continue  # one helper called twice: `_check_helper` reports it at the helper's update
            low, high = calls.update_keys[id(first)], calls.update_keys[id(second)]
            between = [s for s in calls.steps if low < calls.step_keys[id(s)] < high]
            before = [s for s in calls.steps if calls.step_keys[id(s)] < low]
            if not between and before and _same_pass(ctx, scope, first, second):
                # `trainer.step(loss)` steps and updates the scaler, then the loop updates it again:
                # with no step since the last update, `update()` finds no inf checks and raises
                reported |= {id(first), id(second)}
                what = (
                    f"`{short(ctx, second)}` runs right after `{short(ctx, first)}`{_through(ctx, calls, first)} "
                    f"updated `{calls.name}`, with no `step(...)` between: `update()` raises (no inf checks "
                    "were recorded since the last update)"
                )
                yield self.violation(second, scaler=calls.name, what=what)
                continue
            if not between or not _same_pass(ctx, scope, first, second):
                continue
            reported |= {id(first), id(second)}  # one finding for the pair
            if id(first) in calls.helpers:
                does = "steps and updates" if any(step is first for step in calls.steps) else "updates"
                what = (
                    f"`{short(ctx, first)}`{_through(ctx, calls, first)} {does} `{calls.name}`, and it is "
                    f"updated again after `{short(ctx, between[-1])}` in the same iteration, so one scaler's loss "
                    "scale moves twice per iteration"
                )
            else:
                earlier = f" after `{short(ctx, before[-1])}`" if before else ""
                what = (
                    f"`{short(ctx, first)}` runs{earlier} and again after `{short(ctx, between[-1])}` in the same "
                    "iteration, so one scaler's loss scale moves twice per iteration"
                )
            yield self.violation(first, scaler=calls.name, what=what)
        for update in calls.updates:
            if id(update) in reported or (id(update) in calls.helpers and any(s is update for s in calls.steps)):
                continue  # a helper that steps and updates keeps the two together
            what = _more_often_than_step(ctx, scope, update, calls)
            if what is not None:
                spelled = f"`{short(ctx, update)}`"  # a helper's call site says which update it runs
                what = what.replace(spelled, spelled + _through(ctx, calls, update), 1)
                yield self.violation(update, scaler=calls.name, what=what)


@dataclass(frozen=True)
class ScalerCalls:
    """The `step` and `update` calls of one scaler (as the code writes it) in one function: its
    own calls, and calls of helpers that step or update the same scaler on every call
    (`self.optimizer_step()`), each keyed by where it happens (the call's rank, then the order
    inside the helper)."""

    name: str
    steps: tuple[cst.Call, ...]
    updates: tuple[cst.Call, ...]
    step_keys: dict[int, tuple[int, int]] = field(default_factory=dict)
    update_keys: dict[int, tuple[int, int]] = field(default_factory=dict)
    # id(helper call site) -> the helper's own `update()` call.
    helpers: dict[int, cst.Call] = field(default_factory=dict)


def _per_scaler(ctx: FileContext, scope: Scope) -> list[ScalerCalls]:
    rank = order(ctx)
    # scaler -> (steps, updates) as id -> (key, call), and helper sites -> their update
    keyed = dict[int, tuple[tuple[int, int], cst.Call]]  # id(call) -> (where it happens, call)
    grouped: dict[str, tuple[keyed, keyed, dict[int, cst.Call]]] = {}
    for index, method in enumerate(("step", "update")):
        for call in scope.scaler_calls.get(method, []):
            owner = receiver(call)
            if owner is None:
                continue
            entry = grouped.setdefault(" ".join(ctx.code_for(owner).split()), ({}, {}, {}))
            entry[index][id(call)] = ((rank[id(call)], 0), call)  # type: ignore[assignment]  # index 0 or 1: the steps or the updates
    cls = ctx.index.enclosing_class(scope.node)
    for site, found in scope.helper_calls:
        for position, effect in enumerate(found):
            if effect.kind not in (SCALER_STEP, UPDATE) or effect.conditional:
                continue
            if effect.node is site:
                scaler = effect.scaler  # a method of another module's class: in the caller's words already
            else:
                scaler = effect.scaler if _same_object(ctx, effect, cls) else _handed_scaler(ctx, effect, site)
            if scaler is None:
                continue
            entry = grouped.setdefault(scaler, ({}, {}, {}))
            index = 0 if effect.kind == SCALER_STEP else 1
            entry[index].setdefault(id(site), ((rank[id(site)], position + 1), site))  # type: ignore[arg-type]  # index 0 or 1, as above
            if effect.kind == UPDATE and effect.node is not site:
                entry[2].setdefault(id(site), effect.node)
    out = []
    for name, (steps, updates, helpers) in grouped.items():
        if not steps or not updates:
            continue
        ordered_steps = sorted(steps.values(), key=lambda item: item[0])
        ordered_updates = sorted(updates.values(), key=lambda item: item[0])
        out.append(
            ScalerCalls(
                name,
                tuple(c for _, c in ordered_steps),
                tuple(c for _, c in ordered_updates),
                {id(c): k for k, c in ordered_steps},
                {id(c): k for k, c in ordered_updates},
                helpers,
            )
        )
    return out


def _same_object(ctx: FileContext, effect: Effect, cls: cst.ClassDef | None) -> bool:
    """The helper's scaler is the caller's: `self.x` in a method of the caller's own class, or a
    module-level name the helper does not receive as a parameter."""
    if effect.scaler is None:
        return False
    if effect.scaler.startswith("self."):
        return cls is not None and ctx.index.enclosing_class(effect.node) is cls
    helper = scope_of(ctx, effect.node)
    return effect.scaler.isidentifier() and type(helper) is cst.FunctionDef and _kept_outside(helper, effect.scaler)


def _handed_scaler(ctx: FileContext, effect: Effect, site: cst.Call) -> str | None:
    """The caller's scaler, as the caller spells it, when the helper `site` calls steps or
    updates the scaler it is handed (`def finish(scaler): scaler.update()`, `finish(scaler)`), or
    one held by an object it is handed (`def finish(owner): owner.scaler.update()`,
    `finish(self)`, also as a static or class method): the helper's parameter bound to the
    caller's argument (`helpers.bound_arguments`)."""
    helper = callee_of(ctx, site)
    if effect.scaler is None or helper is None or scope_of(ctx, effect.node) is not helper:
        return None
    if effect.scaler.partition(".")[0] not in _parameters(helper):
        return None  # `self.scaler` of its own class, or a module-level one: `_same_object`'s
    return in_callers_words(ctx, helper, site, effect.scaler)


def _parameters(helper: cst.FunctionDef) -> set[str]:
    return {p.name.value for p in (*helper.params.posonly_params, *helper.params.params, *helper.params.kwonly_params)}


def _handed_in(ctx: FileContext, update: cst.Call) -> bool:
    """A helper's `scaler.update()` on a scaler that is one of the helper's parameters: each call
    updates what its caller hands in, so the caller's calls are compared there."""
    helper = scope_of(ctx, update)
    owner = receiver(update)
    return type(helper) is cst.FunctionDef and type(owner) is cst.Name and not _kept_outside(helper, owner.value)


def _same_helper(calls: ScalerCalls, first: cst.Call, second: cst.Call) -> bool:
    a, b = calls.helpers.get(id(first)), calls.helpers.get(id(second))
    return a is not None and a is b


def _through(ctx: FileContext, calls: ScalerCalls, site: cst.Call) -> str:
    """` (which calls `self.scaler.update()` in `discriminator_step`)` for a helper's call site."""
    inner = calls.helpers.get(id(site))
    if inner is None:
        return ""
    helper = scope_of(ctx, inner)
    name = helper.name.value if type(helper) is cst.FunctionDef else "a helper"
    return f" (which calls `{short(ctx, inner)}` in `{name}`)"


def _kept_outside(helper: cst.FunctionDef, scaler: str) -> bool:
    """The scaler is `self.x` or a module-level name, not a parameter: every call of the helper
    updates the same scaler."""
    if scaler.startswith("self.") and scaler.count(".") == 1:
        return True
    params = (*helper.params.posonly_params, *helper.params.params, *helper.params.kwonly_params)
    return scaler.isidentifier() and all(p.name.value != scaler for p in params)


def _one_scaler(ctx: FileContext, helper: cst.FunctionDef, scaler: str, first: cst.Call, second: cst.Call) -> bool:
    """Whether two calls of a method update the same scaler: the same object (`self.step()`,
    `wrapper.step()` twice), or two instances of the helper's class whose constructors were given
    the same scaler (`A(opt_a, scaler)`, `A(opt_b, scaler)` with `self.scaler = scaler`)."""
    a, b = (receiver(c) for c in (first, second))
    if a is None or b is None or ctx.code_for(a) == ctx.code_for(b):
        return True
    cls = ctx.index.enclosing_class(helper)
    if cls is None or not (scaler.startswith("self.") and scaler.count(".") == 1):
        return True  # a module-level scaler
    given = [
        _constructor_argument(ctx, cls, scaler[len("self.") :], obj, site) for obj, site in ((a, first), (b, second))
    ]
    return given[0] is not None and given[0] == given[1]


def _constructor_argument(
    ctx: FileContext, cls: cst.ClassDef, attr: str, obj: cst.BaseExpression, at: cst.CSTNode
) -> str | None:
    """The source of what `obj`'s constructor call passed for the `__init__` parameter stored in
    `self.<attr>`, when `obj` is a name assigned once, in `at`'s function, from `Class(...)`."""
    init = next((f for f in cls.body.body if type(f) is cst.FunctionDef and f.name.value == "__init__"), None)
    if init is None or type(obj) is not cst.Name:
        return None
    param = None
    for node in ctx.index.walk(init.body):
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.value) is cst.Name:
            target = node.targets[0].target
            if type(target) is cst.Attribute and ctx.code_for(target) == f"self.{attr}":
                param = node.value.value
    params = list(init.params.params)
    names = [p.name.value for p in params]
    if param is None or param not in names:
        return None  # `self.scaler = GradScaler()`: each instance has its own
    index = names.index(param) - 1  # after `self`
    built = [
        node.value
        for node in ctx.index.walk(scope_of(ctx, at))
        if type(node) is cst.Assign
        and len(node.targets) == 1
        and type(node.targets[0].target) is cst.Name
        and node.targets[0].target.value == obj.value
    ]
    if len(built) != 1 or not (
        type(built[0]) is cst.Call and type(built[0].func) is cst.Name and built[0].func.value == cls.name.value
    ):
        return None
    call = built[0]
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == param:
            return ctx.code_for(arg.value)
    plain = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return ctx.code_for(plain[index].value) if 0 <= index < len(plain) else None


def _region(ctx: FileContext, scope: Scope, node: cst.CSTNode) -> cst.CSTNode:
    """What runs once per pass around `node`: its innermost loop, else its function."""
    return innermost_loop(ctx, node) or scope.node


def _same_pass(ctx: FileContext, scope: Scope, first: cst.Call, second: cst.Call) -> bool:
    """Whether `second` runs in the same pass of their loop (or call of their function) after `first`."""
    region = _region(ctx, scope, first)
    if _region(ctx, scope, second) is not region or exclusive(ctx, first, second):
        return False
    seen_first = False
    for node in ctx.index.walk(region):  # source order
        if node is first:
            seen_first = True
        elif node is second:
            return True
        elif seen_first and type(node) in (cst.Return, cst.Raise, cst.Continue, cst.Break):
            if _always_after(ctx, node, first, region):
                return False
    return True


def _always_after(ctx: FileContext, leave: cst.CSTNode, first: cst.Call, region: cst.CSTNode) -> bool:
    """`leave` sits, after `first`, in a block that also holds `first`: once `first` ran, it runs.
    `continue`/`break` count only when they leave `region` itself (not an inner loop)."""
    if type(leave) in (cst.Continue, cst.Break) and innermost_loop(ctx, leave) is not region:
        return False
    block = next(
        (a for a in ctx.index.ancestors(leave) if type(a) in (cst.IndentedBlock, cst.SimpleStatementSuite, cst.Module)),
        None,
    )
    return block is not None and inside(ctx, first, block)


# Words of a test that makes a step run on some micro-batches only (gradient accumulation).
ACCUMULATION_WORDS = ("accum", "accumul", "sync", "micro", "update_step", "should_step")


def _more_often_than_step(ctx: FileContext, scope: Scope, update: cst.Call, calls: ScalerCalls) -> str | None:
    """Why `update` runs more often than the scaler's step, or None."""
    loop = innermost_loop(ctx, update)
    steps_in_loop = [s for s in calls.steps if loop is not None and inside(ctx, s, loop)]
    if loop is not None and not steps_in_loop:
        # The update sits in an inner loop; a step outside it, in the loop (or function) around it.
        for step in calls.steps:
            step_region = _region(ctx, scope, step)
            if step_region is not loop and inside(ctx, loop, step_region) and not _over_optimizers(ctx, loop):
                return (
                    f"`{short(ctx, update)}` runs on every pass of the inner loop `{_loop_header(ctx, loop)}` but "
                    f"`{short(ctx, step)}` runs once after it: the first update with no step since the last one raises "
                    "'No inf checks were recorded prior to update', and the scale must not change between micro-batches"
                )
        return None
    for step in steps_in_loop or calls.steps:
        if _region(ctx, scope, step) is not _region(ctx, scope, update):
            continue
        if (
            type(loop) is cst.For
            and _region(ctx, scope, step) is loop
            and _over_optimizers(ctx, loop, step, calls.name)
        ):
            return (
                f"`{short(ctx, update)}` runs once per optimizer of `{_loop_header(ctx, loop)}`, right after "
                f"`{short(ctx, step)}`, so the loss scale is updated once per optimizer instead of once per iteration"
            )
        region = _region(ctx, scope, step)
        test = _accumulation_only(ctx, step, update, region)
        # Another step of this scaler that runs on every pass of the region makes the update right.
        if test is not None and all(
            _accumulation_only(ctx, other, update, region) is not None
            for other in calls.steps
            if _region(ctx, scope, other) is region
        ):
            return (
                f"`{short(ctx, update)}` runs on every micro-batch but `{short(ctx, step)}` only when `{short(ctx, test)}`: "
                "the first update with no step since the last one raises 'No inf checks were recorded prior to update'"
            )
    return None


def _accumulation_only(
    ctx: FileContext, step: cst.Call, update: cst.Call, region: cst.CSTNode
) -> cst.BaseExpression | None:
    """The accumulation test that `step` runs under and `update` does not (same test repeated
    around the update counts as the same condition)."""
    update_tests = {test_words(ctx, branch.test) for branch, _ in enclosing_ifs(ctx, update, region)}
    for branch, _ in enclosing_ifs(ctx, step, region):
        if inside(ctx, update, branch) or test_words(ctx, branch.test) in update_tests:
            continue
        if _is_accumulation_test(ctx, branch.test):
            return branch.test
    return None


def _is_accumulation_test(ctx: FileContext, test: cst.BaseExpression) -> bool:
    if any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Modulo for n in ctx.index.walk(test)):
        return True
    words = test_words(ctx, test)
    return any(word in words for word in ACCUMULATION_WORDS)


def _over_optimizers(
    ctx: FileContext, loop: cst.For | cst.While, step: cst.Call | None = None, scaler: str = ""
) -> bool:
    """`for opt in optimizers:` (what the loop iterates is a collection of optimizers, or the
    loop's variable is the stepped optimizer) with one scaler for all: the scaler must not depend
    on the loop variable (`scalers[i]`)."""
    if type(loop) is not cst.For:
        return False
    targets = set(assigned_names(loop.target))
    if scaler and any(name in targets for name in _names(scaler)):
        return False
    over_optimizers = loops_over_optimizers(ctx, loop)
    if step is None or not (type(step.func) is cst.Attribute and step.func.attr.value == "step"):
        return over_optimizers  # none, or a helper's call site: its arguments name no optimizer
    # The stepped optimizer must change with the loop: one scaler stepping one and the same
    # optimizer on every pass is updated once per pass, not once per optimizer.
    args = positional(step)
    varies = bool(args) and any(type(n) is cst.Name and n.value in targets for n in ctx.index.walk(args[0]))
    return varies and (over_optimizers or not _counts(loop.iter))


def _counts(iterable: cst.BaseExpression) -> bool:
    """`range(n)`: a loop over numbers, not over the items of a collection (`range(len(opts))`
    walks a collection's indices, and a step of `opts[k]` then steps each of its items)."""
    if not (type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value == "range"):
        return False
    size = positional(iterable)[-1] if len(positional(iterable)) in (1, 2) else None
    return not (type(size) is cst.Call and type(size.func) is cst.Name and size.func.value == "len")


def _names(text: str) -> set[str]:
    import re

    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))


def _loop_header(ctx: FileContext, loop: cst.For | cst.While) -> str:
    if isinstance(loop, cst.For):
        return f"for {short(ctx, loop.target, 30)} in {short(ctx, loop.iter, 40)}"
    return f"while {short(ctx, loop.test, 40)}"
