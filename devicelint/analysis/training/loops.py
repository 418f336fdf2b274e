"""The code that runs once per training step, and the conditions that make it run less often.

A *step region* is either the innermost loop around a backward call (its body runs once per
step, or once per micro-batch) or a *step function*: a function that backpropagates and steps an
optimizer outside any loop of its own, so each call is one training step (`train_step(batch)`,
`model.optimize_parameters()`). A host read there happens on every step unless it sits under a
logging condition (`if step % log_every == 0:`) or an exception handler.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.training.step import Scope, backpropagated, training_scopes
from devicelint.analysis.training.syntax import enclosing_ifs, test_words
from devicelint.context import FileContext

PROCESS_WORDS = ("rank", "main", "master", "process", "local", "world", "device")
# Words in an `if` test that make its branch a logging, evaluation or checkpoint branch: it does
# not run on every step. Wide on purpose: a missed logging branch is a false alarm.
LOGGING_WORDS = (
    "log", "print", "verbose", "display", "report", "interval", "every", "freq", "debug",
    "monitor", "eval", "valid", "save", "ckpt", "checkpoint", "summary", "writer", "wandb",
    "tensorboard", "show", "vis", "profil", "trace", "period",
)


@dataclass(frozen=True)
class StepRegion:
    """Code that runs once per training step."""

    owner: cst.For | cst.While | cst.FunctionDef  # the step loop, or the step function
    body: cst.BaseSuite
    scope: Scope  # the step facts of the function the region is in
    losses: tuple[cst.BaseExpression, ...]  # what the region backpropagates

    @property
    def is_function(self) -> bool:
        return isinstance(self.owner, cst.FunctionDef)


def innermost_loop(ctx: FileContext, node: cst.CSTNode) -> cst.For | cst.While | None:
    """The nearest loop around `node` inside its own function."""
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.For, cst.While)):
            return ancestor
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
    return None


def step_regions(ctx: FileContext) -> list[StepRegion]:
    """Every step loop and step function of the file, in source order of their first backward."""

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
                    _add(c, regions, scope.node, scope, call)  # type: ignore[arg-type]
        return [StepRegion(owner, owner.body, scope, tuple(losses)) for owner, scope, losses in regions.values()]

    return ctx.shared("training.loops.step_regions", build)


def _add(ctx: FileContext, regions: dict, owner: cst.CSTNode, scope: Scope, call: cst.Call) -> None:
    entry = regions.setdefault(id(owner), (owner, scope, []))
    loss = backpropagated(ctx, call)
    if loss is not None:
        entry[2].append(loss)


def _is_step_function(ctx: FileContext, scope: Scope) -> bool:
    """A function that backpropagates and steps an optimizer (or a GradScaler) outside any loop of
    its own: one call is one training step. Tests are left out: they call such a function once."""
    func = scope.node
    if not isinstance(func, cst.FunctionDef) or func.name.value.startswith("test"):
        return False
    steps = [*scope.optimizer_steps, *scope.scaler_calls.get("step", [])]
    return any(innermost_loop(ctx, s) is None or _loops_over_optimizers(ctx, s) for s in steps)


def _loops_over_optimizers(ctx: FileContext, step: cst.Call) -> bool:
    """`for opt in self.optimizers: opt.step()`: a loop over optimizers, still one training step."""
    loop = innermost_loop(ctx, step)
    if not isinstance(loop, cst.For):
        return False
    words = test_words(ctx, loop.iter)
    return "optim" in words and innermost_loop(ctx, loop) is None


def is_logging_test(ctx: FileContext, test: cst.BaseExpression) -> bool:
    """`step % log_every == 0`, `i == 0`, `args.verbose`: a branch that does not run every step."""
    for node in ctx.index.walk(test):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        if isinstance(node, cst.Comparison) and any(isinstance(c.operator, cst.Equal) for c in node.comparisons):
            # `if rank == 0:` runs on every step of the main process: not a logging interval.
            if not any(w in test_words(ctx, node) for w in PROCESS_WORDS):
                return True
    words = test_words(ctx, test)
    return any(w in words for w in LOGGING_WORDS)


def in_logging_condition(ctx: FileContext, node: cst.CSTNode, region: cst.CSTNode) -> bool:
    """Whether `node` runs only under a logging condition, in an exception handler, or in a
    branch that leaves the loop (`if not math.isfinite(loss): print(...); sys.exit(1)`) inside
    `region`: none of these runs on every step."""
    for ancestor in ctx.index.ancestors(node):
        if ancestor is region:
            break
        if isinstance(ancestor, (cst.ExceptHandler, cst.Raise, cst.Assert)):
            return True
    return any(
        in_body and (is_logging_test(ctx, branch.test) or _leaves(branch.body))
        for branch, in_body in enclosing_ifs(ctx, node, region)
    )


EXIT_CALLS = frozenset({"exit", "quit", "_exit", "abort"})


def _leaves(body: cst.BaseSuite) -> bool:
    """A branch whose last statement raises, returns, breaks or exits the process."""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = statements[-1] if statements else None
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        small = last.body[-1] if last.body else None
        if isinstance(small, (cst.Raise, cst.Return, cst.Break)):
            return True
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            func = small.value.func
            name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
            return name in EXIT_CALLS
    return False
