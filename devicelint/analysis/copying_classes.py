"""Plain classes of the file whose move methods return a copy, and the names that hold one.

A batch or step-result class often moves the way a tensor does: `Result.cpu()` builds and returns
a new `Result` of moved tensors and leaves its receiver where it was. A statement
`output.cpu()` on such an instance then moves nothing, exactly like `t.cpu()` on a tensor, while
the same statement on an `nn.Module` (whose `to()`/`cpu()` move it in place and return `self`)
is right. Only what the file itself shows counts: the class and its method are in the file, the
method returns a value on every path and never `self`, and the name is tied to the class by an
`isinstance` test that guards the statement, a construction, or an annotation.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.names import isinstance_test
from devicelint.analysis.placement_classes import class_facts
from devicelint.analysis.training.reads import reaching_assignment
from devicelint.context import FileContext


def copying_methods(ctx: FileContext) -> dict[str, frozenset[str]]:
    """Class name -> its methods that return a new object (never `self`), for the plain classes
    (not modules) of the file."""

    def build(c: FileContext) -> dict[str, frozenset[str]]:
        modules = set(class_facts(c))
        found: dict[str, frozenset[str]] = {}
        for cls in c.index.of_type(cst.ClassDef):
            if cls.name.value in modules or type(cls.body) is not cst.IndentedBlock:
                continue
            names = frozenset(
                stmt.name.value for stmt in cls.body.body if type(stmt) is cst.FunctionDef and _returns_a_copy(c, stmt)
            )
            if names:
                found[cls.name.value] = names
        return found

    return ctx.shared(("copying_classes.methods",), build)


def _returns_a_copy(ctx: FileContext, method: cst.FunctionDef) -> bool:
    """Every `return` of the method gives a value other than `self`, and the body ends in one."""
    params = method.params.params
    if not params or type(method.body) is not cst.IndentedBlock:
        return False
    own = params[0].name.value
    returns = [r for r in ctx.index.within(method.body, cst.Return) if ctx.index.enclosing_function(r) is method]
    if not returns or not method.body.body:
        return False
    last = method.body.body[-1]
    if not (type(last) is cst.SimpleStatementLine and any(type(s) is cst.Return for s in last.body)):
        return False
    return all(r.value is not None and not (type(r.value) is cst.Name and r.value.value == own) for r in returns)


def instance_class(ctx: FileContext, name: cst.Name, at: cst.CSTNode) -> str | None:
    """The plain class of the file that `name` holds an instance of where `at` reads it."""
    classes = copying_methods(ctx)
    if not classes:
        return None
    guarded = _isinstance_guard(ctx, name.value, at)
    if guarded in classes:
        return guarded
    scope = ctx.index.enclosing_function(at)
    if scope is None:
        return None
    binding = reaching_assignment(ctx, scope, name.value, at)
    if binding is not None:
        value = binding.value
        if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in classes:
            return value.func.value
        return None
    for param in (*scope.params.posonly_params, *scope.params.params, *scope.params.kwonly_params):
        if param.name.value == name.value and param.annotation is not None:
            annotation = param.annotation.annotation
            if type(annotation) is cst.Name and annotation.value in classes:
                return annotation.value
    return None


def _isinstance_guard(ctx: FileContext, name: str, at: cst.CSTNode) -> str | None:
    """`C` of an enclosing `if isinstance(name, C):` whose body holds `at`."""
    child: cst.CSTNode = at
    for ancestor in ctx.index.ancestors(at):
        if type(ancestor) is cst.If and child is ancestor.body:
            guarded = isinstance_test(ancestor.test)
            if guarded is not None and guarded[0] == name and type(guarded[1]) is cst.Name:
                return guarded[1].value
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return None
        child = ancestor
    return None
