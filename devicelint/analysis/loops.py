"""Find training and evaluation loops: the hot code where device bugs and host syncs cost most."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.context import FileContext

STEP_METHODS = frozenset({"backward", "step"})


@dataclass(frozen=True)
class Loop:
    node: cst.For | cst.While
    # The loop calls `.backward()` or `<optimizer>.step()`: it trains, not only evaluates.
    trains: bool


def _method_calls(ctx: FileContext, root: cst.CSTNode) -> set[str]:
    names = set()
    for node in ctx.index.walk(root):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            names.add(node.func.attr.value)
    return names


def training_loops(ctx: FileContext) -> list[Loop]:
    """Innermost-or-outer `for`/`while` loops whose body runs a backward pass or an optimizer step.

    Every loop that contains such a call is returned (nested loops too), in source order.
    """

    def build(c: FileContext) -> list[Loop]:
        loops = []
        for loop_type in (cst.For, cst.While):
            for loop in c.index.of_type(loop_type):
                calls = _method_calls(c, loop.body)
                if calls & STEP_METHODS:
                    loops.append(Loop(loop, trains=True))
        return loops

    return ctx.shared("training_loops", build)
