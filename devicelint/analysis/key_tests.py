"""Tests whose answer the code's own loop decides: a dict's key is never a tensor.

`for k in batch: if isinstance(k, torch.Tensor): batch[k] = batch[k].cuda()` tests the key, a
string, not the value: the move never runs, and a helper written so returns the batch as it
came. The same holds for `torch.is_tensor(k)` and for the key of `for k, v in d.items()` or
`for k in d.keys()`. A name counts as a key where the loop iterates `d.items()`/`d.keys()`, or
iterates `d` itself and its body reads `d[k]` (so `d` is a mapping, not a list of tensors).
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.negation import through_not
from devicelint.context import FileContext

_TENSOR_TYPES = frozenset({"torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.nn.Parameter"})


def constant_test(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    """The value an `if` test always has (False for `isinstance(key, torch.Tensor)`, True for
    its `not`), or None when the code does not decide it."""
    return through_not(test, lambda plain: _constant_test(ctx, plain))


def _constant_test(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    tested = _tensor_type_test(ctx, test)
    if tested is None:
        return None
    subject = tested[0]
    return False if type(subject) is cst.Name and _is_key(ctx, subject) else None


def any_tensor_test(ctx: FileContext, test: cst.BaseExpression) -> str | None:
    """`x` for `torch.is_tensor(x)` and `isinstance(x, torch.Tensor)`, tests that hold for every
    tensor whatever its dtype (not `isinstance(x, torch.LongTensor)`); None for any other test."""
    tested = _tensor_type_test(ctx, test)
    if tested is None or type(tested[0]) is not cst.Name or tested[1] not in ("torch.is_tensor", "torch.Tensor"):
        return None
    return tested[0].value


def _tensor_type_test(ctx: FileContext, test: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """(subject, `torch.is_tensor` or the tensor type named) for a test of whether a value is a
    tensor; None for any other test."""
    if type(test) is not cst.Call or not test.args:
        return None
    qualified = ctx.qualified_name(test.func)
    subject = test.args[0].value
    if qualified == "torch.is_tensor" and len(test.args) == 1:
        return subject, qualified
    if type(test.func) is cst.Name and test.func.value == "isinstance" and len(test.args) == 2:
        named = ctx.qualified_name(test.args[1].value)
        if "isinstance" in ctx.imports.bound or named not in _TENSOR_TYPES:
            return None
        return subject, named
    return None


def _is_key(ctx: FileContext, name: cst.Name) -> bool:
    """Whether `name` is the key of the innermost `for` around it that binds it."""
    node: cst.CSTNode | None = ctx.index.parent(name)
    while node is not None and type(node) not in (cst.FunctionDef, cst.Module):
        if type(node) is cst.For and _binds_key(ctx, node, name.value):
            return True
        if type(node) is cst.For and name.value in _names(node.target):
            return False
        node = ctx.index.parent(node)
    return False


def _binds_key(ctx: FileContext, loop: cst.For, key: str) -> bool:
    source = loop.iter
    target = loop.target
    if type(source) is cst.Call and type(source.func) is cst.Attribute and not source.args:
        method = source.func.attr.value
        if method == "keys":
            return type(target) is cst.Name and target.value == key
        if method == "items":
            return (
                type(target) is cst.Tuple
                and len(target.elements) == 2
                and type(target.elements[0].value) is cst.Name
                and target.elements[0].value.value == key
            )
        return False
    if type(target) is not cst.Name or target.value != key or type(source) not in (cst.Name, cst.Attribute):
        return False
    spelled = ctx.code_for(source)
    return any(
        type(node) is cst.Subscript
        and ctx.code_for(node.value) == spelled
        and len(node.slice) == 1
        and type(node.slice[0].slice) is cst.Index
        and type(node.slice[0].slice.value) is cst.Name
        and node.slice[0].slice.value.value == key
        for node in ctx.index.walk(loop.body)
    )


def _names(target: cst.BaseExpression) -> set[str]:
    if type(target) is cst.Name:
        return {target.value}
    if type(target) in (cst.Tuple, cst.List):
        return {n for e in target.elements for n in _names(e.value)}  # type: ignore[attr-defined]
    return set()
