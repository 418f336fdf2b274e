"""Small AST helpers shared by the training-step rules (DL3xx, DL4xx).

They only read the shape of the tree: which method a call names, its arguments, which `if`
branches a node sits in. Nothing here knows about devices or dtypes.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.index import iter_children
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext


def text_of(node: cst.BaseExpression | None) -> str | None:
    """`self.scaler` for a dotted name, `optimizers[i]` reduced to `optimizers`, else None."""
    while type(node) is cst.Subscript:
        node = node.value
    return dotted_name(node)


def receiver(call: cst.Call) -> cst.BaseExpression | None:
    """`x` in `x.item()`; None for a call of a plain name."""
    return call.func.value if type(call.func) is cst.Attribute else None


def method_name(call: cst.Call) -> str | None:
    """`item` in `x.item()`; None for a call of a plain name."""
    return call.func.attr.value if type(call.func) is cst.Attribute else None


def positional(call: cst.Call) -> list[cst.BaseExpression]:
    """The positional arguments, leaving out `*args` and `**kwargs`."""
    return [a.value for a in call.args if a.keyword is None and not a.star]


def keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    """The value of keyword argument `name`, if given."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def has_star(call: cst.Call) -> bool:
    """The call passes `*args` or `**kwargs`: its arguments are not all visible."""
    return any(a.star for a in call.args)


def is_true(node: cst.BaseExpression | None) -> bool:
    return type(node) is cst.Name and node.value == "True"


def is_false(node: cst.BaseExpression | None) -> bool:
    return type(node) is cst.Name and node.value == "False"


def last_word(node: cst.BaseExpression | None) -> str:
    """`opt_g` for `self.opt_g`, lower-cased; "" when `node` is not a dotted name."""
    text = text_of(node) if node is not None else None
    return text.rsplit(".", 1)[-1].lower() if text else ""


def short(ctx: FileContext, node: cst.CSTNode, limit: int = 60) -> str:
    """Source text of a node on one line, shortened to `f(...)` when long."""
    text = " ".join(ctx.code_for(node).split())
    if len(text) <= limit:
        return text
    if type(node) is cst.Call:
        return f"{short(ctx, node.func, limit)}(...)"
    return text[: limit - 3] + "..."


def scope_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    """The function around `node`, or the module for top-level code."""
    return ctx.index.enclosing_function(node) or ctx.module


def inside(ctx: FileContext, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return any(a is container for a in ctx.index.ancestors(node))


def _branch_path(ctx: FileContext, node: cst.CSTNode) -> dict[int, cst.CSTNode]:
    """id(ancestor) -> the child of that ancestor on the way to `node`."""
    path: dict[int, cst.CSTNode] = {}
    child = node
    for ancestor in ctx.index.ancestors(node):
        path[id(ancestor)] = child
        child = ancestor
    return path


def exclusive(ctx: FileContext, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether `a` and `b` sit in different branches of one `if`/`elif`/`else` (never both run)."""
    path_a = _branch_path(ctx, a)
    child_b = b
    for ancestor in ctx.index.ancestors(b):
        if id(ancestor) in path_a:
            if type(ancestor) is cst.If:
                child_a = path_a[id(ancestor)]
                return child_a is not child_b and child_a is not ancestor.test and child_b is not ancestor.test
            return False
        child_b = ancestor
    return False


def enclosing_ifs(ctx: FileContext, node: cst.CSTNode, stop: cst.CSTNode) -> Iterator[tuple[cst.If, bool]]:
    """(if statement, whether `node` is in its body rather than its else) up to `stop`."""
    child = node
    for ancestor in ctx.index.ancestors(node):
        if ancestor is stop:
            return
        if type(ancestor) is cst.If and child is not ancestor.test:
            yield ancestor, child is ancestor.body
        child = ancestor


def test_words(ctx: FileContext, test: cst.BaseExpression) -> str:
    """An `if` test's source, lower-cased, for word checks (memoised: the rules ask about the
    same few tests of a loop again for every read in it)."""
    words: dict[int, str] = ctx.shared("test_words", lambda c: {})
    found = words.get(id(test))
    if found is None:
        found = words[id(test)] = ctx.code_for(test).lower()
    return found


def body_nodes(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node under `root` in source order, leaving out nested functions, classes and lambdas."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node is not root and type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        yield node
        stack.extend(reversed(list(iter_children(node))))


def statement_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    """The statement `node` belongs to: its simple statement line, or the compound statement
    (`if`, `while`, `for`, `with`) whose header holds it."""
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) in (cst.SimpleStatementLine, cst.SimpleStatementSuite):
            return ancestor
        if type(ancestor) in (cst.If, cst.While, cst.For, cst.With):
            return ancestor
    return node


def assigned_names(target: cst.BaseExpression) -> list[str]:
    """Dotted names bound by an assignment target (`a`, `self.b`, the names of `a, (b, c)`)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in assigned_names(e.value)]
    if type(target) is cst.StarredElement:
        return assigned_names(target.value)
    text = dotted_name(target)
    return [text] if text is not None else []
