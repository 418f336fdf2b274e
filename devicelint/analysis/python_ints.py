"""Expressions that are plain Python integers: an index that picks one element of a tensor.

`3`, `-1`, `len(xs)`, `i + 1`, and names whose every binding in their function is one of
those, a loop over `range(...)` (or the counter of `enumerate(...)`), or a parameter annotated
`int`. Anything else (a tensor, a name bound by a call the file does not show) is not known
to be an integer.
"""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext

_INT_CALLS = frozenset({"len", "int"})
_INT_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)


def is_python_int(ctx: FileContext, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether `expr` certainly holds a Python `int`."""
    if depth > 4:
        return False
    if type(expr) is cst.Integer:
        return True
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus:
        return is_python_int(ctx, expr.expression, depth + 1)
    if type(expr) is cst.BinaryOperation and isinstance(expr.operator, _INT_OPERATORS):
        return is_python_int(ctx, expr.left, depth + 1) and is_python_int(ctx, expr.right, depth + 1)
    if type(expr) is cst.Call:
        return type(expr.func) is cst.Name and expr.func.value in _INT_CALLS
    if type(expr) is cst.Name:
        return _int_name(ctx, expr, depth)
    return False


def _int_name(ctx: FileContext, name: cst.Name, depth: int) -> bool:
    function = ctx.index.enclosing_function(name)
    if function is None:
        return False
    found = False
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.name.value == name.value:
            annotation = param.annotation.annotation if param.annotation is not None else None
            if not (_is_int(annotation) or _optional_int(annotation) and _tested_not_none(ctx, name)):
                return False
            found = True
    for node in ctx.index.walk(function.body):
        binds = _binding(ctx, node, name.value, depth)
        if binds is False:
            return False
        found = found or binds is True
    return found


def _is_int(annotation: cst.BaseExpression | None) -> bool:
    return type(annotation) is cst.Name and annotation.value == "int"


def _optional_int(annotation: cst.BaseExpression | None) -> bool:
    """`int | None`, `None | int` or `Optional[int]`."""
    if type(annotation) is cst.BinaryOperation and type(annotation.operator) is cst.BitOr:
        sides = (annotation.left, annotation.right)
        return any(_is_int(side) for side in sides) and any(
            type(side) is cst.Name and side.value == "None" for side in sides
        )
    if type(annotation) is cst.Subscript and len(annotation.slice) == 1:
        head = annotation.value
        spelled = head.attr.value if type(head) is cst.Attribute else head.value if type(head) is cst.Name else ""
        inner = annotation.slice[0].slice
        return spelled == "Optional" and type(inner) is cst.Index and _is_int(inner.value)
    return False


def _tested_not_none(ctx: FileContext, name: cst.Name) -> bool:
    """The read sits in the body of an `if <name> is not None:` (or `elif`): not None there."""
    child: cst.CSTNode = name
    for ancestor in ctx.index.ancestors(name):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return False
        if type(ancestor) is cst.If and child is ancestor.body:
            test = ancestor.test
            if (
                type(test) is cst.Comparison
                and type(test.left) is cst.Name
                and test.left.value == name.value
                and len(test.comparisons) == 1
                and type(test.comparisons[0].operator) is cst.IsNot
                and type(test.comparisons[0].comparator) is cst.Name
                and test.comparisons[0].comparator.value == "None"
            ):
                return True
        child = ancestor
    return False


def _binding(ctx: FileContext, node: cst.CSTNode, name: str, depth: int) -> bool | None:
    """Whether this statement binds `name` to an int (True), to something else (False), or
    does not bind it (None)."""
    if type(node) is cst.For or type(node) is cst.CompFor:
        target, iterable = node.target, node.iter
        if type(target) is cst.Name and target.value == name:
            return _counts(iterable, "range")
        if type(target) is cst.Tuple and _binds(target, name):
            first = target.elements[0].value if target.elements else None
            return type(first) is cst.Name and first.value == name and _counts(iterable, "enumerate")
        return False if _binds(target, name) else None
    if type(node) is cst.Assign:
        if any(_binds(t.target, name) for t in node.targets):
            simple = all(type(t.target) is cst.Name for t in node.targets)
            return simple and is_python_int(ctx, node.value, depth + 1)
        return None
    if type(node) is cst.AugAssign or type(node) is cst.AnnAssign:
        if not _binds(node.target, name):
            return None
        return node.value is not None and is_python_int(ctx, node.value, depth + 1)
    if type(node) is cst.AsName:
        return False if _binds(node.name, name) else None
    if type(node) is cst.NamedExpr:
        return False if _binds(node.target, name) else None
    return None


def _binds(target: cst.CSTNode, name: str) -> bool:
    if type(target) is cst.Name:
        return target.value == name
    if type(target) is cst.Tuple or type(target) is cst.List:
        return any(_binds(e.value, name) for e in target.elements)
    if type(target) is cst.StarredElement:
        return _binds(target.value, name)
    return False


def _counts(iterable: cst.BaseExpression, builtin: str) -> bool:
    return type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value == builtin
