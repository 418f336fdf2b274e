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

from devicelint.analysis.training.step import Scope, backpropagated, looks_like_optimizer, training_scopes
from devicelint.analysis.names import dotted_name
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
                    _add(c, regions, scope.node, scope, call)
        for scope in training_scopes(c):
            func = scope.node
            if (isinstance(func, cst.FunctionDef) and id(func) not in regions and scope.backwards
                    and all(innermost_loop(c, b) is None for b in scope.backwards) and _called_in_a_loop(c, func)):
                for call in scope.backwards:
                    _add(c, regions, func, scope, call)  # a step's backward in a helper the loop calls
        for step in _lightning_steps(c):
            if id(step) not in regions:
                returned = [r.value for r in c.index.walk(step.body) if isinstance(r, cst.Return) and r.value is not None]
                regions[id(step)] = (step, Scope(node=step), returned)
        found = [StepRegion(owner, owner.body, scope, tuple(losses)) for owner, scope, losses in regions.values()]
        return found + _called_helpers(c, found)

    return ctx.shared("training.loops.step_regions", build)


def _evaluates(ctx: FileContext, func: cst.FunctionDef) -> bool:
    """An evaluation helper (`model.eval()`, `torch.no_grad()`): reading its results is what it is
    for, even where a full-batch loop calls it every epoch."""
    for node in ctx.index.walk(func.body):
        if isinstance(node, cst.Call) and (
                (isinstance(node.func, cst.Attribute) and node.func.attr.value == "eval" and not node.args)
                or ctx.qualified_name(node.func) in ("torch.no_grad", "torch.inference_mode")):
            return True
    return any(ctx.qualified_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
               in ("torch.no_grad", "torch.inference_mode") for d in func.decorators)


def _called_in_a_loop(ctx: FileContext, func: cst.FunctionDef) -> bool:
    """Whether the file calls `func` (by its name, or as `self.<name>`) inside a loop."""
    name = func.name.value
    for call in ctx.index.of_type(cst.Call):
        callee = call.func
        named = callee.value if isinstance(callee, cst.Name) else (
            callee.attr.value if isinstance(callee, cst.Attribute) and isinstance(callee.value, cst.Name) and callee.value.value == "self" else None)
        if named == name and innermost_loop(ctx, call) is not None:
            return True
    return False


LIGHTNING_BASES = ("LightningModule",)


def _lightning_steps(ctx: FileContext) -> list[cst.FunctionDef]:
    """`training_step` of a LightningModule: Lightning calls it once per step."""
    found: list[cst.FunctionDef] = []
    for cls in ctx.index.of_type(cst.ClassDef):
        bases = [(dotted_name(b.value) or "").rsplit(".", 1)[-1] for b in cls.bases]
        if any(b in LIGHTNING_BASES for b in bases) and isinstance(cls.body, cst.IndentedBlock):
            found.extend(f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "training_step")
    return found


def _called_helpers(ctx: FileContext, regions: list[StepRegion]) -> list[StepRegion]:
    """The file's functions and `self` methods that a step region calls on every step (outside
    logging conditions): their bodies run once per step too. One level: a helper's own helpers
    are not followed."""
    functions = {stmt.name.value: stmt for stmt in ctx.module.body if isinstance(stmt, cst.FunctionDef)}
    owners = {id(r.owner) for r in regions}
    found: dict[int, StepRegion] = {}
    for region in regions:
        cls = ctx.index.enclosing_class(region.owner)
        methods = {f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)} if cls is not None and isinstance(cls.body, cst.IndentedBlock) else {}
        for node in ctx.index.walk(region.body):
            if not isinstance(node, cst.Call) or in_logging_condition(ctx, node, region.owner):
                continue
            func = node.func
            helper = None
            if isinstance(func, cst.Name):
                helper = functions.get(func.value)
            elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
                helper = methods.get(func.attr.value)
            if (helper is None or id(helper) in owners or id(helper) in found or helper.name.value.startswith("__")
                    or _evaluates(ctx, helper)):
                continue
            found[id(helper)] = StepRegion(helper, helper.body, Scope(node=helper), ())
    return list(found.values())


def _add(ctx: FileContext, regions: dict[int, tuple[Any, Scope, list[cst.BaseExpression]]], owner: cst.CSTNode, scope: Scope, call: cst.Call) -> None:
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
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        if ancestor is region:
            break
        if isinstance(ancestor, (cst.ExceptHandler, cst.Raise, cst.Assert)):
            return True
        if isinstance(ancestor, cst.IndentedBlock) and _after_logging_exit(ctx, ancestor, child):
            return True
        child = ancestor
    return any(
        in_body and (is_logging_test(ctx, branch.test) and not _steps_optimizer(ctx, branch.body) or _leaves(branch.body))
        for branch, in_body in enclosing_ifs(ctx, node, region)
    )


def _after_logging_exit(ctx: FileContext, block: cst.IndentedBlock, statement: cst.CSTNode) -> bool:
    """`if step % log_every != 0: return` (or `continue`) earlier in the block: what follows runs
    only on logging steps."""
    for earlier in block.body:
        if earlier is statement:
            return False
        if (isinstance(earlier, cst.If) and earlier.orelse is None and is_logging_test(ctx, earlier.test)
                and _skips(earlier.body)):
            return True
    return False


def _skips(body: cst.BaseSuite) -> bool:
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = statements[-1] if statements else None
    small = last.body[-1] if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body else None
    return isinstance(small, (cst.Return, cst.Continue))


def _steps_optimizer(ctx: FileContext, body: cst.BaseSuite) -> bool:
    """A branch that steps the optimizer (`if (i + 1) % accum == 0: opt.step()`, or a method of
    the class that does): gradient accumulation's update, which runs on every optimizer step,
    not a logging interval."""
    stepping = {id(s.node) for s in training_scopes(ctx) if s.optimizer_steps or s.scaler_calls.get("step")}
    cls = ctx.index.enclosing_class(body)
    methods = {f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)} if cls is not None and isinstance(cls.body, cst.IndentedBlock) else {}
    for node in ctx.index.walk(body):
        if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
            continue
        if node.func.attr.value == "step" and looks_like_optimizer(node.func.value):
            return True
        helper = methods.get(node.func.attr.value) if isinstance(node.func.value, cst.Name) and node.func.value.value == "self" else None
        if helper is not None and id(helper) in stepping:
            return True
    return False


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
