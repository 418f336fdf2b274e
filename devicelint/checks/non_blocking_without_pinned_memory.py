from __future__ import annotations

from typing import Iterator

import libcst as cst

from devicelint.analysis.training_step import (
    assignments, derived_names, has_star, is_false, is_true, keyword, mentioned_names, method_name, positional,
    receiver, scope_of, short, text_of, values_of,
)
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register

LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "tqdm.tqdm", "tqdm.auto.tqdm", "trange"})


@register
class NonBlockingWithoutPinnedMemory(Rule):
    """
    ## What it does
    Flags `.to(device, non_blocking=True)` and `.cuda(non_blocking=True)` on batches drawn from
    a `DataLoader` created in the same file without `pin_memory=True`.

    ## Why it is a bug on a GPU
    An asynchronous host-to-device copy needs page-locked (pinned) host memory. From ordinary
    pageable memory CUDA first copies into a pinned staging buffer, and the call returns only
    when that is done: `non_blocking=True` is silently synchronous, so data loading and compute
    do not overlap as the code intends.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
    for x, y in loader:
        x = x.to(device, non_blocking=True)
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
    for x, y in loader:
        x = x.to(device, non_blocking=True)
    ```

    ## Fix safety
    No fix: pinning memory costs host RAM, a choice for the author.

    ## Known limits
    The loader must be assigned only `DataLoader(...)` calls, in the loop's function or at
    module level (`loader = DataLoader(...)`), or on `self` anywhere in the file
    (`self.loader = DataLoader(...)`), and be iterated directly (or through `enumerate`/`tqdm`).
    A loader received as a parameter is unknown.
    A `pin_memory` given by a variable, `**kwargs`, or a `.pin_memory()` call in the loop
    silences the rule.
    """

    code = "DL402"
    name = "non-blocking-without-pinned-memory"
    summary = "`non_blocking=True` copies from a `DataLoader` without `pin_memory=True` are synchronous."
    message = (
        "`{copy}` asks for an asynchronous copy, but `{loader}` is a `DataLoader` without `pin_memory=True`, "
        "so the copy from pageable memory is synchronous anyway; pass `pin_memory=True` to the `DataLoader`"
    )
    severity = "warning"
    tokens = ("non_blocking",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for loop in ctx.index.of_type(cst.For):
            loader = _iterated(ctx, loop.iter)
            if loader is None or not _unpinned_loader(ctx, loader, scope_of(ctx, loop)):
                continue
            if any(isinstance(n, cst.Call) and method_name(n) == "pin_memory" for n in ctx.index.walk(loop)):
                continue
            batch = derived_names(ctx, loop.body, mentioned_names(ctx, loop.target))
            for node in ctx.index.walk(loop.body):
                if isinstance(node, cst.CompFor) and mentioned_names(ctx, node.iter) & batch:
                    batch |= mentioned_names(ctx, node.target)
            for node in ctx.index.walk(loop.body):
                if isinstance(node, cst.Call) and _non_blocking_copy(node):
                    owner = receiver(node)
                    if owner is not None and mentioned_names(ctx, owner) & batch:
                        yield self.violation(node, copy=short(ctx, node), loader=short(ctx, loader))


def _non_blocking_copy(call: cst.Call) -> bool:
    return method_name(call) in ("to", "cuda") and is_true(keyword(call, "non_blocking"))


def _iterated(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    while isinstance(node, cst.Call):
        name = ctx.qualified_name(node.func) or (node.func.value if isinstance(node.func, cst.Name) else None)
        args = positional(node)
        if name is None or (name not in WRAPPERS and name.rsplit(".", 1)[-1] not in WRAPPERS) or not args:
            return None
        node = args[0]
    return node


def _unpinned_loader(ctx: FileContext, loader: cst.BaseExpression, scope: cst.CSTNode) -> bool:
    """Every value the loop's loader can hold is a `DataLoader(...)` that does not pin memory.

    A name is looked up in the loop's own function (a parameter is unknown), else at module
    level; `self.loader` in every method of the file.
    """
    if isinstance(loader, cst.Name):
        values = values_of(ctx, loader.value, scope)
    else:
        text = text_of(loader) if not isinstance(loader, cst.Subscript) else None
        if text is None or not text.startswith("self."):
            return False
        values = [v for table in assignments(ctx).values() for v in table.get(text, [])]
    if not values:
        return False
    for value in values:
        if not isinstance(value, cst.Call) or ctx.qualified_name(value.func) not in LOADERS:
            return False
        if has_star(value) or not _pin_off(value):
            return False
    return True


def _pin_off(call: cst.Call) -> bool:
    pin = keyword(call, "pin_memory")
    if pin is None:
        return len(positional(call)) < 8  # pin_memory is the 8th positional parameter
    return is_false(pin)
