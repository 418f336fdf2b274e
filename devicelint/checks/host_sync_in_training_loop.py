from __future__ import annotations

from typing import Iterator

import libcst as cst

from devicelint.analysis.training_step import (
    HOST_METHODS, device_tensors, in_logging_condition, is_host_value, mentioned_names, method_name,
    receiver, runs_on_device, short, step_loops,
)
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register

TORCH_CHECKS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "torch.any", "torch.all", "torch.equal"})


@register
class HostSyncInTrainingLoop(Rule):
    """
    ## What it does
    Flags reads of a device tensor's value on every iteration of a training loop (the loop that
    runs `backward()`), outside any logging condition: `.item()`, `.cpu()`, `.tolist()`,
    `.numpy()`, `float(t)`, `bool(t)`, `print(t)` and `if` tests that compare a tensor or call
    `torch.isnan(t)`.

    ## Why it is a bug on a GPU
    CUDA runs asynchronously: the Python loop normally queues the next step's kernels while the
    GPU is still busy. Reading a value forces the host to wait until every queued kernel has
    finished, so the GPU idles while Python prepares the next batch, on every step. Training
    loops lose 5-30% of their throughput this way.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    ```

    ## Use instead
    ```python
    running_loss = torch.zeros((), device=device)
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
        if step % log_every == 0:
            print(running_loss.item() / (step + 1))
    ```

    ## Fix safety
    No fix.

    ## Known limits
    A loop counts as a training loop when its body calls `loss.backward()` (or
    `accelerator.backward(loss)`), and its values as device tensors when they derive from the
    loss or from `.to(...)`/`.cuda()` in the loop, in a function that moves data to a device
    (or hands the backward to a framework). Reads under an `if` with `%`, `==` or a logging word
    (`log`, `print`, `eval`, `verbose`, `every`...) and in exception handlers are not reported.
    Reads inside helper functions called from the loop are not seen.
    """

    code = "DL401"
    name = "host-sync-in-training-loop"
    summary = "`.item()`/`.cpu()`/`print(t)` on a device tensor on every training step stalls the GPU."
    message = (
        "`{expr}` copies a device tensor to the host on every training step, which stalls the GPU until "
        "the step's kernels finish; accumulate on the device (`total += loss.detach()`) and read it once "
        "per log interval (`if step % log_every == 0:`)"
    )
    severity = "warning"
    tokens = ("backward",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        seen: set[int] = set()
        for loop, scope in step_loops(ctx):
            if not scope.autocasts and not scope.delegated_backwards and not runs_on_device(ctx, scope.node):
                continue
            tensors, forward = device_tensors(ctx, loop, scope)
            if not tensors:
                continue
            for node in _statements_nodes(ctx, loop.body):
                target = self._sync(ctx, node, tensors, forward)
                if target is None or id(target) in seen:
                    continue
                seen.add(id(target))
                if in_logging_condition(ctx, target, loop):
                    continue
                expr = short(ctx, target)
                if not isinstance(target, cst.Call) or isinstance(ctx.index.parent(target), (cst.If, cst.While)):
                    expr = f"if {expr}:"
                yield self.violation(target, expr=expr)

    def _sync(self, ctx: FileContext, node: cst.CSTNode, tensors: set[str], forward: set[str]) -> cst.CSTNode | None:
        if isinstance(node, cst.Call):
            name = method_name(node)
            if name in HOST_METHODS:
                owner = receiver(node)
                if owner is None or node.args or _has_inner_sync(owner):
                    return None
                return node if mentioned_names(ctx, owner) & tensors else None
            if isinstance(node.func, cst.Name) and node.func.value in ("float", "bool", "print"):
                for arg in node.args:
                    if _direct_tensor(arg.value, forward):
                        return node
            return None
        if isinstance(node, (cst.If, cst.While)) and _tensor_test(ctx, node.test, forward):
            return node.test
        return None


def _statements_nodes(ctx: FileContext, body: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node of a loop body, leaving out nested function and class definitions."""
    stack = [body]
    from devicelint.analysis.index import iter_children

    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        yield node
        stack.extend(reversed(list(iter_children(node))))


def _has_inner_sync(node: cst.BaseExpression) -> bool:
    while isinstance(node, (cst.Call, cst.Attribute, cst.Subscript)):
        if isinstance(node, cst.Call):
            if is_host_value(node):
                return True
            node = node.func
        else:
            node = node.value
    return False


def _direct_tensor(node: cst.BaseExpression, forward: set[str]) -> bool:
    """`loss`, `out.loss`, `losses["total"]`: the value itself, not a formatted or converted one."""
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return isinstance(node, cst.Name) and node.value in forward


def _tensor_test(ctx: FileContext, test: cst.BaseExpression, forward: set[str]) -> bool:
    """`if loss > 10:` or `if torch.isnan(loss):` on a device tensor (not `is None`, not `.item()`)."""
    if isinstance(test, cst.UnaryOperation):
        test = test.expression
    if isinstance(test, cst.Call) and ctx.qualified_name(test.func) in TORCH_CHECKS:
        return any(_direct_tensor(a.value, forward) for a in test.args)
    if isinstance(test, cst.Call) and method_name(test) in ("any", "all") and not test.args:
        owner = receiver(test)
        return owner is not None and _direct_tensor(owner, forward)
    if isinstance(test, cst.Comparison):
        if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in test.comparisons):
            return False
        operands = [test.left, *(c.comparator for c in test.comparisons)]
        return any(_direct_tensor(o, forward) for o in operands)
    return False
