"""One iterative pass over a LibCST tree that records parents and nodes by type.

LibCST's generic visitor dispatch costs about as much as the parse itself and recurses
(deep files hit RecursionError), so rules query this index instead of visiting the tree.
Whitespace, punctuation and comment nodes are skipped: no rule needs them.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from typing import Literal, TypeVar, get_origin

import libcst as cst

N = TypeVar("N", bound=cst.CSTNode)

_SKIPPED_FIELDS = frozenset(
    {
        "lpar",
        "rpar",
        "comma",
        "semicolon",
        "colon",
        "header",
        "footer",
        "leading_lines",
        "lines_after_decorators",
        "trailing_whitespace",
        "equal",
        "dot",
        "lbracket",
        "rbracket",
        "lbrace",
        "rbrace",
        "asynchronous",
        "first_line",
        "empty_lines",
        "newline",
        "default_indent",
        "default_newline",
    }
)
_child_fields_cache: dict[type, tuple[str, ...]] = {}
_reversed_fields_cache: dict[type, tuple[str, ...]] = {}  # the same, last field first
# isinstance against LibCST's abstract base goes through ABCMeta (about 80 ns); a dict of the
# types seen is a few times cheaper, and these checks run for every field of every node.
_node_types: dict[type, bool] = {}


def is_node(value: object) -> bool:
    kind = value.__class__
    known = _node_types.get(kind)
    if known is None:
        known = _node_types[kind] = isinstance(value, cst.CSTNode)
    return known


def _holds_text(annotation: object) -> bool:
    """A field that can only hold a string or a flag (`Name.value`, `SimpleString.value`): no
    child there, and looking costs a call per node."""
    if annotation in (str, bool, str | None):
        return True
    return get_origin(annotation) is Literal


def _child_fields(node_type: type) -> tuple[str, ...]:
    names = _child_fields_cache.get(node_type)
    if names is None:
        names = tuple(
            f.name
            for f in dataclasses.fields(node_type)
            if f.name not in _SKIPPED_FIELDS and not f.name.startswith("whitespace") and not _holds_text(f.type)
        )
        _child_fields_cache[node_type] = names
    return names


def iter_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The syntactic children of `node` (no whitespace or punctuation), in source order."""
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if value.__class__ is tuple or value.__class__ is list:
            for item in value:
                if is_node(item):
                    yield item
        elif is_node(value):
            yield value


_UNSET = object()


class NodeIndex:
    """Parents and per-type node lists (in source order) for one module."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._parent: dict[int, cst.CSTNode] = {}
        self._by_type: dict[type, list[cst.CSTNode]] = defaultdict(list)
        self._enclosing_function: dict[int, object] = {}
        parent_of = self._parent
        by_type = self._by_type
        # Pre-order position of each node and where its subtree ends there: `walk` is a slice.
        position: dict[int, int] = {}
        ends: list[int] = []
        self._position = position
        self._type_positions: dict[type, list[int]] = {}
        self._ends = ends
        # Nodes to visit, and ints: the position of a node whose subtree is done when popped.
        # Children are pushed last-first, straight from the fields read backwards, so they pop
        # in source order (no list per node to build and reverse: a fifth of this loop's time).
        stack: list[cst.CSTNode | int] = [module]
        order: list[cst.CSTNode] = []
        self._order = order
        node_types = _node_types
        while stack:
            node = stack.pop()
            kind = node.__class__
            if kind is int:
                ends[node] = len(order)  # type: ignore[index]  # an int here
                continue
            position[id(node)] = len(ends)
            stack.append(len(ends))
            ends.append(0)
            order.append(node)  # type: ignore[arg-type]  # not an int: a node
            by_type[kind].append(node)  # type: ignore[arg-type]  # as above
            fields = _reversed_fields_cache.get(kind)
            if fields is None:
                fields = _reversed_fields_cache[kind] = _child_fields(kind)[::-1]
            for name in fields:
                value = getattr(node, name)
                value_kind = value.__class__
                if value_kind is tuple or value_kind is list:
                    for item in reversed(value):
                        if node_types.get(item.__class__) or is_node(item):
                            parent_of[id(item)] = node  # type: ignore[assignment]  # as above
                            stack.append(item)
                elif node_types.get(value_kind) or is_node(value):
                    parent_of[id(value)] = node  # type: ignore[assignment]  # as above
                    stack.append(value)

    def of_type(self, node_type: type[N]) -> list[N]:
        """All nodes of exactly this type, in source order."""
        return self._by_type.get(node_type, [])  # type: ignore[return-value]  # filed under its exact type

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parent.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Parents of `node`, nearest first."""
        current = self._parent.get(id(node))
        while current is not None:
            yield current
            current = self._parent.get(id(current))

    def unpacking_owner(self, node: cst.CSTNode) -> tuple[cst.CSTNode | None, cst.CSTNode]:
        """Past any tuple/list unpacking around `node` (`a, (b, *c)`): the node that holds the
        whole pattern, and the pattern itself."""
        child, parent = node, self._parent.get(id(node))
        while isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.StarredElement)):
            child, parent = parent, self._parent.get(id(parent))
        return parent, child

    def in_binding_target(self, node: cst.CSTNode) -> bool:
        """`node` is (part of) an assignment or loop target: a binding, not a use."""
        owner, pattern = self.unpacking_owner(node)
        if type(owner) is cst.AssignTarget:
            return True
        return isinstance(owner, (cst.For, cst.CompFor)) and owner.target is pattern

    def enclosing(self, node: cst.CSTNode, node_type: type[N]) -> N | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, node_type):
                return ancestor
        return None

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """Memoised along the path: every rule asks this of most expressions it reads."""
        memo = self._enclosing_function
        found = memo.get(id(node), _UNSET)
        if found is not _UNSET:
            return found  # type: ignore[return-value]  # not the _UNSET sentinel: a memoised answer
        path = []
        current = self._parent.get(id(node))
        result: cst.FunctionDef | None = None
        while current is not None:
            if type(current) is cst.FunctionDef:
                result = current
                break
            known = memo.get(id(current), _UNSET)
            if known is not _UNSET:
                result = known  # type: ignore[assignment]  # as above
                break
            path.append(current)
            current = self._parent.get(id(current))
        memo[id(node)] = result
        for step in path:
            # a node's own enclosing function is found above it, which the path walked
            memo[id(step)] = result
        return result

    def innermost_loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        """The nearest loop around `node` inside its own function (a nested function, lambda or
        class ends the search: its body does not run once per pass of an outer loop)."""
        for ancestor in self.ancestors(node):
            if type(ancestor) is cst.For or type(ancestor) is cst.While:
                return ancestor
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                return None
        return None

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        return self.enclosing(node, cst.ClassDef)

    def within(self, root: cst.CSTNode, node_type: type[N]) -> list[N]:
        """The nodes of exactly `node_type` in `root`'s subtree (root included), in source order:
        a slice of `of_type`, found by position instead of walking every node under `root`."""
        start = self._position.get(id(root))
        if start is None or self._order[start] is not root:
            return [node for node in self._walk_outside(root) if type(node) is node_type]
        nodes = self.of_type(node_type)
        positions = self._type_positions.get(node_type)
        if positions is None:
            positions = self._type_positions[node_type] = [self._position[id(node)] for node in nodes]
        return nodes[bisect_left(positions, start) : bisect_left(positions, self._ends[start])]

    def returns_of(self, function: cst.FunctionDef) -> list[cst.Return]:
        """The function's own `return` statements (not those of functions nested in it)."""
        return [r for r in self.within(function.body, cst.Return) if self.enclosing_function(r) is function]

    def position(self, node: cst.CSTNode) -> int:
        """The node's place in source (pre-)order, -1 for a node not in this index."""
        return self._position.get(id(node), -1)

    def walk(self, root: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """`root` and everything under it (no whitespace), in source order, without recursion:
        the rules walk whole functions and modules many times, and a slice costs nothing."""
        start = self._position.get(id(root))
        if start is not None and self._order[start] is root:
            return iter(self._order[start : self._ends[start]])
        return self._walk_outside(root)

    def _walk_outside(self, root: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """`walk` for a node that is not in this index (built after it)."""
        stack = [root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(list(iter_children(node))))
