"""Branches taken together or never together: two `if` statements with the same test.

`if args.distributed: set_device(...)` ... `if args.distributed: DDP(...)` run together; a loss
computed under autocast in `if use_amp:` never meets the backward in the `else:` of another
`if use_amp:`. Tests are compared as source text (the name is not re-bound in between in the
code this looks at, which sets a flag once and reads it)."""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext


def branch_tests(ctx: FileContext, node: cst.CSTNode) -> list[tuple[str, bool]]:
    """For each `if` around `node`: its test's source and whether `node` is in its body (True)
    or in its `else:` (False). An `elif` is an `if` in the `else:` of the one before it."""
    found: list[tuple[str, bool]] = []
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) is cst.If:
            if ancestor.body is child:
                found.append((ctx.code_for(ancestor.test), True))
            elif ancestor.orelse is child:
                found.append((ctx.code_for(ancestor.test), False))
        elif type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            break
        child = ancestor
    return found


def taken_together(ctx: FileContext, block_owner: cst.If, node: cst.CSTNode) -> bool:
    """`node` sits in the body of an `if` with the same test as `block_owner`."""
    test = ctx.code_for(block_owner.test)
    return (test, True) in branch_tests(ctx, node)


def never_together(ctx: FileContext, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """One node is in the body and the other in the `else:` of `if` statements with the same test."""
    second_tests = set(branch_tests(ctx, second))
    return any((test, not in_body) in second_tests for test, in_body in branch_tests(ctx, first))
