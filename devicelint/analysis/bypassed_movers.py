"""A module's own `cuda()`/`cpu()` that does more than hand on to `nn.Module`'s: work that
`model.to(device)`, and a parent module's `.cuda()`, never run. Both move a module (and every
submodule) through `_apply`; only a call of `.cuda()` on the instance itself reaches its override.
"""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext

# The movers a module may override that `nn.Module.to()` and a parent's move skip.
DIRECT_MOVERS = ("cuda", "cpu")
# Overrides that `nn.Module.to()` runs (`_apply`) or that replace it (`to`): a class that has one
# is taken to handle its own move there.
APPLIED_MOVERS = ("_apply", "to")


def bypassed_overrides(ctx: FileContext, own: dict[str, cst.FunctionDef]) -> list[cst.FunctionDef]:
    """The module class's `cuda`/`cpu` overrides (from `own`, its methods by name) that do work
    of their own, when the class overrides neither `_apply` nor `to`."""
    if any(name in own for name in APPLIED_MOVERS):
        return []
    return [own[name] for name in DIRECT_MOVERS if name in own and _does_own_work(own[name])]


def _does_own_work(method: cst.FunctionDef) -> bool:
    """A statement other than a docstring, `pass`, a `raise`, and handing on to the base class's
    mover (`return super().cuda(device)`, also as a statement before `return self`) or to the
    module's own `to`/`_apply` (`return self.to("cuda")`)."""
    if any(d for d in method.decorators):
        return False
    body = method.body.body if type(method.body) is cst.IndentedBlock else (method.body,)
    for statement in body:
        if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return True  # an `if`, a loop, a `with`: work of its own
        for small in statement.body:
            if not _hands_on(small, method.name.value):
                return True
    return False


def _hands_on(small: cst.BaseSmallStatement, name: str) -> bool:
    if type(small) in (cst.Pass, cst.Raise):
        return True
    value = small.value if type(small) in (cst.Expr, cst.Return) else None  # type: ignore[attr-defined]
    if value is None:
        return type(small) is cst.Return
    if type(value) in (cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis):
        return True
    if type(value) is cst.Name and value.value == "self":
        return True
    if type(value) is not cst.Call or type(value.func) is not cst.Attribute:
        return False
    receiver, method = value.func.value, value.func.attr.value
    if type(receiver) is cst.Name and receiver.value == "self":
        return method in APPLIED_MOVERS  # `return self.to("cuda")`: the move `to()` makes anyway
    return (
        method == name
        and type(receiver) is cst.Call
        and type(receiver.func) is cst.Name
        and receiver.func.value == "super"
    )
