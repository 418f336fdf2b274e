"""What the rewrites share: one parse with positions, scopes and parents, finding a tagged target,
free names of an expression, tagged statements."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst import matchers as m
from libcst.metadata import (
    BuiltinAssignment,
    GlobalScope,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    ScopeProvider,
)

from .tags import TAG


class NotApplicable(Exception):
    """The rewrite does not apply to this case; the message says why."""


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from walk(child)


class Analysis:
    """A parsed, tagged text with the metadata the rewrites read."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
        self.module = self.wrapper.module
        self.positions = self.wrapper.resolve(PositionProvider)
        self.scopes = self.wrapper.resolve(ScopeProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)

    def line_of_tag(self, tag: int) -> int:
        for number, line in enumerate(self.text.splitlines(), start=1):
            if f"@@T{tag}@@" in line:
                return number
        raise NotApplicable("the expected line was lost by an earlier rewrite")

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def top_statement(self, node: cst.CSTNode) -> cst.CSTNode:
        last = node
        for parent in self.ancestors(node):
            if isinstance(parent, cst.Module):
                return last
            last = parent
        return last

    def enclosing(self, node: cst.CSTNode, kind: type) -> cst.CSTNode | None:
        return next((a for a in self.ancestors(node) if isinstance(a, kind)), None)

    def enclosing_method(self, node: cst.CSTNode) -> tuple[cst.ClassDef, cst.FunctionDef] | None:
        """The class and method directly holding `node` (through any nesting inside the method)."""
        chain = list(self.ancestors(node))
        for i, parent in enumerate(chain):
            if isinstance(parent, cst.FunctionDef) and i + 2 < len(chain) and isinstance(chain[i + 2], cst.ClassDef):
                return chain[i + 2], parent  # FunctionDef -> IndentedBlock -> ClassDef
        return None

    def header_end(self, node: cst.CSTNode) -> int:
        part = {cst.For: "iter", cst.If: "test", cst.While: "test"}.get(type(node))
        if part:
            return self.positions[getattr(node, part)].end.line
        if isinstance(node, cst.With):
            return self.positions[node.items[-1]].end.line
        return self.positions[node].start.line

    def target(self, tag: int) -> tuple[cst.CSTNode, cst.BaseExpression]:
        """(statement, offending expression) on the tagged line."""
        line = self.line_of_tag(tag)
        best: cst.CSTNode | None = None
        for node in walk(self.module):
            if isinstance(node, cst.SimpleStatementLine):
                pos = self.positions[node]
                if pos.start.line <= line <= pos.end.line:
                    best = node
                    break
            elif isinstance(node, (cst.For, cst.If, cst.While, cst.With)):
                if self.positions[node].start.line <= line <= self.header_end(node):
                    best = node  # keep looking: an inner statement wins
        if best is None:
            raise NotApplicable(
                "the expected line is not a statement that makes a value (a def/class header, decorator or comment)"
            )
        return best, self.expression_of(best, line)

    def expression_of(self, stmt: cst.CSTNode, line: int) -> cst.BaseExpression:
        if isinstance(stmt, cst.SimpleStatementLine):
            if len(stmt.body) != 1:
                raise NotApplicable("several statements share the expected line")
            small = stmt.body[0]
            value = (
                getattr(small, "value", None)
                if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Expr, cst.Return))
                else None
            )
            if value is None:
                raise NotApplicable(f"the expected line is a {type(small).__name__} statement, which makes no value")
            return value
        if isinstance(stmt, (cst.If, cst.While)):
            return stmt.test
        if isinstance(stmt, cst.For):
            return stmt.iter
        if isinstance(stmt, cst.With):
            for item in stmt.items:
                pos = self.positions[item]
                if pos.start.line <= line <= pos.end.line:
                    return item.item
            return stmt.items[0].item
        raise NotApplicable("no value on the expected line")

    def free_names(self, expr: cst.BaseExpression) -> list[str]:
        """Names the expression reads from its function (or module variables): they become parameters."""
        inside = {id(n) for n in walk(expr)}
        names: list[str] = []
        for node in walk(expr):
            if isinstance(node, (cst.Await, cst.Yield, cst.NamedExpr)):
                raise NotApplicable(f"the value holds {type(node).__name__}, which cannot move into a function")
            if m.matches(node, m.Call(func=m.Name("super"))) or m.matches(node, m.Name("locals")):
                raise NotApplicable("the value calls super() or locals(), which depend on where they run")
            if (
                isinstance(node, cst.Attribute)
                and node.attr.value.startswith("__")
                and not node.attr.value.endswith("__")
            ):
                raise NotApplicable("the value reads a name-mangled attribute")
            if not isinstance(node, cst.Name) or node not in self.scopes:
                continue
            scope = self.scopes[node]
            if scope is None:
                continue
            accesses = scope.accesses[node]
            if not accesses:
                continue  # an attribute name, a keyword, or a name being assigned
            for access in accesses:
                for ref in access.referents:
                    if isinstance(ref, BuiltinAssignment):
                        continue
                    if getattr(ref.scope, "node", None) is not None and id(ref.scope.node) in inside:
                        continue
                    if isinstance(ref.scope, GlobalScope) and isinstance(
                        ref.node, (cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef)
                    ):
                        continue
                    if node.value not in names:
                        names.append(node.value)
        return names


def tags_on(node: cst.CSTNode, module: cst.Module) -> list[int]:
    """Tags in the comments of a statement's own lines (not the comment lines above it)."""
    if isinstance(node, cst.SimpleStatementLine):
        node = node.with_changes(leading_lines=())
    elif hasattr(node, "body") and isinstance(node.body, cst.IndentedBlock):
        node = node.with_changes(
            leading_lines=(), body=node.body.with_changes(body=(cst.SimpleStatementLine([cst.Pass()]),))
        )  # type: ignore[attr-defined]
    return [int(t) for t in TAG.findall(module.code_for_node(node))]


def tag_comment(tags: Sequence[int]) -> cst.TrailingWhitespace:
    if not tags:
        return cst.TrailingWhitespace()
    return cst.TrailingWhitespace(
        whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment("# " + " ".join(f"@@T{t}@@" for t in tags))
    )


def line(stmt: cst.BaseSmallStatement, tags: Sequence[int] = ()) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(body=[stmt], trailing_whitespace=tag_comment(tags))


def parse_stmt(code: str, tags: Sequence[int] = ()) -> cst.BaseStatement:
    stmt = cst.parse_statement(code)
    if tags and isinstance(stmt, cst.SimpleStatementLine):
        stmt = stmt.with_changes(trailing_whitespace=tag_comment(tags))
    return stmt


def args_of(names: Sequence[str]) -> list[cst.Arg]:
    return [cst.Arg(cst.Name(n)) for n in names]


def params_of(names: Sequence[str]) -> cst.Parameters:
    return cst.Parameters(params=[cst.Param(cst.Name(n)) for n in names])


@dataclass
class Replace(cst.CSTTransformer):
    """Replace nodes (by identity) and insert statements before/after given statements."""

    swap: dict[int, cst.CSTNode]
    before: dict[int, list[cst.BaseStatement]]
    after: dict[int, list[cst.BaseStatement]]

    def __init__(self, swap=None, before=None, after=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.swap = swap or {}
        self.before = before or {}
        self.after = after or {}

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        key = id(original_node)
        result = self.swap.get(key, updated_node)
        if key in self.before or key in self.after:
            return cst.FlattenSentinel([*self.before.get(key, []), result, *self.after.get(key, [])])
        return result


def unused_name(module: cst.Module, stem: str) -> str:
    taken = {n.value for n in walk(module) if isinstance(n, cst.Name)}
    name, k = stem, 1
    while name in taken:
        k += 1
        name = f"{stem}{k}"
    return name


def first_param(func: cst.FunctionDef) -> str | None:
    params = func.params.posonly_params or func.params.params
    return params[0].name.value if params else None


def decorator_names(func: cst.FunctionDef) -> set[str]:
    out = set()
    for dec in func.decorators:
        d = dec.decorator
        out.add(d.value if isinstance(d, cst.Name) else d.attr.value if isinstance(d, cst.Attribute) else "")
    return out


def enclosing_function(a: Analysis, node: cst.CSTNode) -> cst.FunctionDef | None:
    found = a.enclosing(node, cst.FunctionDef)
    return found if isinstance(found, cst.FunctionDef) else None
