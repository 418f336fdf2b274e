"""The code that runs once per training step, and the conditions that make it run less often.

A *step region* is either the innermost loop around a backward call (its body runs once per
step, or once per micro-batch) or a *step function*: a function that backpropagates and steps an
optimizer outside any loop of its own, so each call is one training step (`train_step(batch)`,
`model.optimize_parameters()`). A host read there happens on every step unless it sits under a
logging condition (`if step % log_every == 0:`) or an exception handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.optimizer_loops import loops_over_optimizers
from devicelint.analysis.training.step import Scope, backpropagated, looks_like_optimizer, training_scopes
from devicelint.analysis.training.syntax import enclosing_ifs, test_words
from devicelint.context import FileContext

PROCESS_WORDS = ("rank", "main", "master", "process", "local", "world", "device")
# Words in an `if` test that make its branch a logging, evaluation or checkpoint branch: it does
# not run on every step. Wide on purpose: a missed logging branch is a false alarm.
LOGGING_WORDS = (
    "log",
    "print",
    "verbose",
    "display",
    "report",
    "interval",
    "every",
    "freq",
    "debug",
    "monitor",
    "eval",
    "valid",
    "save",
    "ckpt",
    "checkpoint",
    "summary",
    "writer",
    "wandb",
    "tensorboard",
    "show",
    "vis",
    "profil",
    "trace",
    "period",
)


@dataclass(frozen=True)
class StepRegion:
    """Code that runs once per training step."""

    owner: cst.For | cst.While | cst.FunctionDef  # the step loop, or the step function
    body: cst.BaseSuite
    scope: Scope  # the step facts of the function the region is in
    losses: tuple[cst.BaseExpression, ...]  # what the region backpropagates
    # Names that hold device tensors when the region starts: a helper's parameters that its
    # caller passes device tensors, an optimizer's parameters (`p` in `for p in group["params"]`).
    seeds: frozenset[str] = frozenset()
    # A helper's flag parameters with a false default (`calc_acc=False`) that every step call
    # leaves unset: what runs only under one of them does not run on the step.
    unset_flags: frozenset[str] = frozenset()

    @property
    def is_function(self) -> bool:
        return type(self.owner) is cst.FunctionDef


def innermost_loop(ctx: FileContext, node: cst.CSTNode) -> cst.For | cst.While | None:
    """The nearest loop around `node` inside its own function."""
    return ctx.index.innermost_loop(node)


def step_regions(ctx: FileContext) -> list[StepRegion]:
    """Every step loop and step function of the file, in source order of their first backward,
    then the loops that step an optimizer whose backward runs in code they call. The code these
    regions call on every step is `step_code.step_code`."""

    def build(c: FileContext) -> list[StepRegion]:
        regions: dict[int, tuple[cst.For | cst.While | cst.FunctionDef, Scope, list[cst.BaseExpression]]] = {}
        for scope in training_scopes(c):
            backwards = (*scope.backwards, *scope.delegated_backwards)
            for call in backwards:
                loop = innermost_loop(c, call)
                if loop is not None:
                    _add(c, regions, loop, scope, call)
            if _is_step_function(c, scope):
                for call in backwards:
                    _add(c, regions, scope.node, scope, call)
        for scope in training_scopes(c):
            func = scope.node
            if (
                type(func) is cst.FunctionDef
                and id(func) not in regions
                and scope.backwards
                and all(innermost_loop(c, b) is None for b in scope.backwards)
                and _called_in_a_loop(c, func)
            ):
                for call in scope.backwards:
                    _add(c, regions, func, scope, call)  # a step's backward in a helper the loop calls
        for step in _lightning_steps(c):
            if id(step) not in regions:
                returned = [r.value for r in c.index.walk(step.body) if type(r) is cst.Return and r.value is not None]
                regions[id(step)] = (step, Scope(node=step), returned)
        for scope in training_scopes(c):
            if scope.backwards or scope.delegated_backwards:
                continue
            for call in scope.optimizer_steps:
                # `opt.zero_grad(); schedule.step(x); opt.step()`: the backward runs in a callee,
                # and the loop around the optimizer's step is the step loop.
                loop = innermost_loop(c, call)
                if loop is not None and not _loops_over_optimizers(c, call) and id(loop) not in regions:
                    regions[id(loop)] = (loop, scope, [])
        return [StepRegion(owner, owner.body, scope, tuple(losses)) for owner, scope, losses in regions.values()]

    return ctx.shared("training.loops.step_regions", build)


def evaluates(ctx: FileContext, func: cst.FunctionDef) -> bool:
    """An evaluation helper (`model.eval()`, `torch.no_grad()`): reading its results is what it is
    for, even where a full-batch loop calls it every epoch."""
    for node in ctx.index.walk(func.body):
        if type(node) is cst.Call and (
            (type(node.func) is cst.Attribute and node.func.attr.value == "eval" and not node.args)
            or ctx.qualified_name(node.func) in ("torch.no_grad", "torch.inference_mode")
        ):
            return True
    return any(
        ctx.qualified_name(d.decorator.func if type(d.decorator) is cst.Call else d.decorator)
        in ("torch.no_grad", "torch.inference_mode")
        for d in func.decorators
    )


def _called_in_a_loop(ctx: FileContext, func: cst.FunctionDef) -> bool:
    """Whether the file calls `func` (by its name, or as `self.<name>`) inside a loop."""
    name = func.name.value
    for call in ctx.index.of_type(cst.Call):
        callee = call.func
        named = (
            callee.value
            if type(callee) is cst.Name
            else (
                callee.attr.value
                if type(callee) is cst.Attribute and type(callee.value) is cst.Name and callee.value.value == "self"
                else None
            )
        )
        if named == name and innermost_loop(ctx, call) is not None:
            return True
    return False


LIGHTNING_BASES = ("LightningModule",)


def _lightning_steps(ctx: FileContext) -> list[cst.FunctionDef]:
    """`training_step` of a LightningModule: Lightning calls it once per step."""
    found: list[cst.FunctionDef] = []
    for cls in ctx.index.of_type(cst.ClassDef):
        bases = [(dotted_name(b.value) or "").rsplit(".", 1)[-1] for b in cls.bases]
        if any(b in LIGHTNING_BASES for b in bases) and type(cls.body) is cst.IndentedBlock:
            found.extend(f for f in cls.body.body if type(f) is cst.FunctionDef and f.name.value == "training_step")
    return found


def _add(
    ctx: FileContext,
    regions: dict[int, tuple[Any, Scope, list[cst.BaseExpression]]],
    owner: cst.CSTNode,
    scope: Scope,
    call: cst.Call,
) -> None:
    entry = regions.setdefault(id(owner), (owner, scope, []))
    loss = backpropagated(ctx, call)
    if loss is not None:
        entry[2].append(loss)


def _is_step_function(ctx: FileContext, scope: Scope) -> bool:
    """A function that backpropagates and steps an optimizer (or a GradScaler) outside any loop of
    its own: one call is one training step. Tests are left out: they call such a function once."""
    func = scope.node
    if type(func) is not cst.FunctionDef or func.name.value.startswith("test"):
        return False
    steps = [*scope.optimizer_steps, *scope.scaler_calls.get("step", [])]
    return any(innermost_loop(ctx, s) is None or _loops_over_optimizers(ctx, s) for s in steps)


def _loops_over_optimizers(ctx: FileContext, step: cst.Call) -> bool:
    """`for opt in self.optimizers: opt.step()`: a loop over optimizers, still one training step."""
    loop = innermost_loop(ctx, step)
    if type(loop) is not cst.For:
        return False
    return loops_over_optimizers(ctx, loop) and innermost_loop(ctx, loop) is None


def is_logging_test(ctx: FileContext, test: cst.BaseExpression) -> bool:
    """`step % log_every == 0`, `i == 0`, `args.verbose`: a branch that does not run every step."""
    for node in ctx.index.walk(test):
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo:
            return True
        if type(node) is cst.Comparison and any(type(c.operator) is cst.Equal for c in node.comparisons):
            # `if rank == 0:` runs on every step of the main process: not a logging interval.
            if not any(w in test_words(ctx, node) for w in PROCESS_WORDS):
                return True
    if _counter_in_schedule(ctx, test):
        return True
    words = test_words(ctx, test)
    return any(w in words for w in LOGGING_WORDS)


def _counter_in_schedule(ctx: FileContext, test: cst.BaseExpression) -> bool:
    """`i in np.linspace(0, n, 10, dtype=int)`, `step in save_steps`: the counter of an enclosing
    `for i in range(...)` (or the index of `enumerate(...)`) tested for membership in a set of
    chosen steps runs on those steps only."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    if type(test.comparisons[0].operator) is not cst.In or type(test.left) is not cst.Name:
        return False
    counter = test.left.value
    for ancestor in ctx.index.ancestors(test):
        if type(ancestor) is not cst.For or type(ancestor.iter) is not cst.Call:
            continue
        called = ancestor.iter.func
        name = called.value if type(called) is cst.Name else None
        target = ancestor.target
        if name == "range" and type(target) is cst.Name and target.value == counter:
            return True
        if name == "enumerate" and type(target) is cst.Tuple and target.elements:
            first = target.elements[0].value
            if type(first) is cst.Name and first.value == counter:
                return True
    return False


def in_logging_condition(ctx: FileContext, node: cst.CSTNode, region: cst.CSTNode) -> bool:
    """Whether `node` runs only under a logging condition, in an exception handler, or in a
    branch that leaves the loop (`if not math.isfinite(loss): print(...); sys.exit(1)`) inside
    `region`: none of these runs on every step."""
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        if ancestor is region:
            break
        if type(ancestor) in (cst.ExceptHandler, cst.Raise, cst.Assert):
            return True
        if type(ancestor) is cst.IndentedBlock and (
            _after_logging_exit(ctx, ancestor, child) or _fails_after(ctx, ancestor, child)
        ):
            return True
        child = ancestor
    return any(
        in_body
        and (
            is_logging_test(ctx, branch.test)
            and not _steps_optimizer(ctx, branch.body)
            or _leaves(branch.body)
            and not _main_return(ctx, branch, region)
        )
        for branch, in_body in enclosing_ifs(ctx, node, region)
    )


def in_unset_branch(ctx: FileContext, node: cst.CSTNode, region: StepRegion) -> bool:
    """Whether `node` runs only under a flag that the step's calls of the region leave unset
    (`if calc_acc:` in a helper the training loop calls as `forward(model, batch)` and only the
    evaluation calls with `calc_acc=True`)."""
    if not region.unset_flags:
        return False
    return any(
        in_body and _needs_flag(branch.test, region.unset_flags)
        for branch, in_body in enclosing_ifs(ctx, node, region.owner)
    )


def _needs_flag(test: cst.BaseExpression, flags: frozenset[str]) -> bool:
    """`flag`, `flag and x`, `flag is not None`: a test that is false while `flag` is unset."""
    if type(test) is cst.Name:
        return test.value in flags
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _needs_flag(test.left, flags) or _needs_flag(test.right, flags)
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        target = test.comparisons[0]
        return (
            type(test.left) is cst.Name
            and test.left.value in flags
            and type(target.operator) is cst.IsNot
            and type(target.comparator) is cst.Name
            and target.comparator.value == "None"
        )
    return False


def _main_return(ctx: FileContext, branch: cst.If, region: cst.CSTNode) -> bool:
    """In a step function, a branch that returns where the function has nothing else to do
    (`if stage.is_last: loss = ...; return loss` then `return None`): the branch is the
    function's work, not a way out of it."""
    if type(region) is not cst.FunctionDef or type(ctx.index.parent(branch)) is cst.If:
        return False
    block = ctx.index.parent(branch)
    if type(block) is not cst.IndentedBlock or ctx.index.enclosing_function(branch) is not region:
        return False
    last = branch.body.body[-1] if type(branch.body) is cst.IndentedBlock and branch.body.body else None
    if not (type(last) is cst.SimpleStatementLine and type(last.body[-1]) is cst.Return):
        return False
    after = list(block.body)[list(block.body).index(branch) + 1 :]
    return all(
        type(s) is cst.SimpleStatementLine and all(type(x) in (cst.Return, cst.Pass) for x in s.body) for s in after
    )


def _after_logging_exit(ctx: FileContext, block: cst.IndentedBlock, statement: cst.CSTNode) -> bool:
    """`if step % log_every != 0: return` (or `continue`) earlier in the block: what follows runs
    only on logging steps."""
    for earlier in block.body:
        if earlier is statement:
            return False
        if (
            type(earlier) is cst.If
            and earlier.orelse is None
            and _skips_unless_logging(ctx, earlier.test)
            and _skips(earlier.body)
        ):
            return True
    return False


def _fails_after(ctx: FileContext, block: cst.IndentedBlock, statement: cst.CSTNode) -> bool:
    """A later statement of the block always raises or exits the process: `statement` runs only
    on the way to that failure (`if torch.isfinite(t).all(): return` then `n = bad.sum().item()`
    and `raise ValueError(n)`), once, not on every step."""
    later = list(block.body[_position_in(block, statement) + 1 :])
    failing = next((i for i, s in enumerate(later) if type(s) is cst.SimpleStatementLine and _leaves_process(s)), None)
    if failing is None:
        return False  # (most blocks: nothing raises, and nothing else needs looking at)
    # `if ok: return value` before the raise: the normal path leaves there
    return not any(_may_exit(ctx, s) for s in later[:failing])


def _position_in(block: cst.IndentedBlock, statement: cst.CSTNode) -> int:
    return next((i for i, s in enumerate(block.body) if s is statement), len(block.body))


_EXITS = (cst.Return, cst.Continue, cst.Break)
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def _may_exit(ctx: FileContext, statement: cst.CSTNode) -> bool:
    """A `return`, `continue` or `break` somewhere in `statement` (not in a function it defines)."""
    for kind in _EXITS:
        for node in ctx.index.within(statement, kind):
            nested = False
            for ancestor in ctx.index.ancestors(node):
                if ancestor is statement:
                    break
                if type(ancestor) in _SCOPES:
                    nested = True
                    break
            if not nested:
                return True
    return False


def _leaves_process(line: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> bool:
    """The line ends by raising or by exiting the process (`sys.exit(1)`)."""
    small = line.body[-1] if line.body else None
    if type(small) is cst.Raise:
        return True
    if type(small) is cst.Expr and type(small.value) is cst.Call:
        func = small.value.func
        name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
        return name in EXIT_CALLS
    return False


ORDERING = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual, cst.Equal)


def _skips_unless_logging(ctx: FileContext, test: cst.BaseExpression) -> bool:
    """The test of an early exit that lets only logging steps through: `step % log_every != 0`,
    `step % k`, `not should_log`, `not args.verbose`. An exit taken on a few steps
    (`epoch == first_epoch and step < resume_step: continue`, skipping the steps already done on a
    resume; `step < warmup`) lets every later step through, so what follows it runs every step."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return is_logging_test(ctx, test.expression)
    comparisons = [n for n in ctx.index.walk(test) if type(n) is cst.Comparison]
    if any(isinstance(c.operator, ORDERING) for n in comparisons for c in n.comparisons):
        return False
    if any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Modulo for n in ctx.index.walk(test)):
        return True  # `x % k != 0` or a bare `x % k`
    words = test_words(ctx, test)
    return any(w in words for w in LOGGING_WORDS)


def _skips(body: cst.BaseSuite) -> bool:
    statements = body.body if type(body) is cst.IndentedBlock else [body]
    last = statements[-1] if statements else None
    small = (
        last.body[-1] if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body else None
    )
    return type(small) in (cst.Return, cst.Continue)


def _steps_optimizer(ctx: FileContext, body: cst.BaseSuite) -> bool:
    """A branch that steps the optimizer (`if (i + 1) % accum == 0: opt.step()`, or a method of
    the class that does): gradient accumulation's update, which runs on every optimizer step,
    not a logging interval."""
    stepping = {id(s.node) for s in training_scopes(ctx) if s.optimizer_steps or s.scaler_calls.get("step")}
    cls = ctx.index.enclosing_class(body)
    methods = (
        {f.name.value: f for f in cls.body.body if type(f) is cst.FunctionDef}
        if cls is not None and type(cls.body) is cst.IndentedBlock
        else {}
    )
    for node in ctx.index.walk(body):
        if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
            continue
        if node.func.attr.value == "step" and looks_like_optimizer(node.func.value, ctx):
            return True
        helper = (
            methods.get(node.func.attr.value)
            if type(node.func.value) is cst.Name and node.func.value.value == "self"
            else None
        )
        if helper is not None and id(helper) in stepping:
            return True
    return False


EXIT_CALLS = frozenset({"exit", "quit", "_exit", "abort"})


def _leaves(body: cst.BaseSuite) -> bool:
    """A branch whose last statement raises, returns, breaks or exits the process."""
    statements = body.body if type(body) is cst.IndentedBlock else [body]
    last = statements[-1] if statements else None
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        small = last.body[-1] if last.body else None
        return type(small) in (cst.Return, cst.Break) or _leaves_process(last)
    return False
