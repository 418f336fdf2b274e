"""What an earlier `if` with the same test left on each of its paths.

`cls = torch.tensor(0)`; `if self.has_cls: cls, x = x[:, :1], x[:, 1:]`; ...;
`if self.has_cls: x = torch.cat((cls, x), 1)`: the join after the first `if` keeps the CPU
placeholder (its device depends on the path), but the second `if` runs exactly when the first
one's body ran, so there `cls` is the device slice. The interpreter records, at each join, the
facts each path left for the names the paths disagree on (a `Split`), and refines them where a
later `if` with the same test is entered, or where the rest of a block runs only when the test
failed (`if not self.has_cls: return x`). The refinement holds only while the name still has
the joined fact and the test's own names are not re-bound; splits made inside one path of an
outer `if` or inside a loop do not outlive it.

Tests are compared by their text, `not` stripped (`if not t:` is `if t:` with its paths
swapped), spelled from names, attributes, literals, comparisons, `and`/`or`/`not` and calls of
a few pure builtins; any other test (`random.random() < p`, `self.pick()`) may change between
reads and is never recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.placement_facts import UNKNOWN_FACT, Fact
from devicelint.context import FileContext

# Calls that answer the same for the same arguments: a test using only these may be re-read.
_PURE_CALLS = frozenset({"isinstance", "hasattr", "getattr", "len", "callable", "issubclass"})


@dataclass(frozen=True)
class Split:
    """The facts an `if` with this test left, for the names its paths disagree on."""

    reads: frozenset[str]  # the names and `self.<attr>`s the test reads
    joined: Mapping[str, Fact]  # each name's fact after the join
    held: Mapping[str, Fact]  # ... where the test held
    failed: Mapping[str, Fact]  # ... where it failed


Splits = dict[str, Split]


def test_key(ctx: FileContext, test: cst.BaseExpression) -> tuple[str, bool] | None:
    """The test's source with `not` and parentheses stripped, and whether it is the test
    itself (True) or its negation; None where the test may give another answer when read again."""
    memo: dict[int, tuple[str, bool] | None] = ctx.shared(("branch_splits", "test_key"), lambda _: {})
    if id(test) not in memo:
        memo[id(test)] = _key(ctx, test)
    return memo[id(test)]


def _key(ctx: FileContext, test: cst.BaseExpression) -> tuple[str, bool] | None:
    holds = True
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test = test.expression
        holds = not holds
    text = _spelled(test, 0)
    return (text, holds) if text is not None else None


# Comparison operators spelled in a test's key.
_OPERATORS: dict[type[cst.CSTNode], str] = {
    cst.Equal: "==",
    cst.NotEqual: "!=",
    cst.Is: "is",
    cst.IsNot: "is not",
    cst.In: "in",
    cst.NotIn: "not in",
    cst.LessThan: "<",
    cst.LessThanEqual: "<=",
    cst.GreaterThan: ">",
    cst.GreaterThanEqual: ">=",
}


def _spelled(node: cst.BaseExpression, depth: int) -> str | None:
    """A test's text without parentheses or spacing, built from its parts (much cheaper than
    generating its code): names, attributes, literals, comparisons, `and`/`or`/`not` and calls
    of pure builtins. None for anything else, whose answer may change between reads."""
    if depth > 8:
        return None
    if type(node) is cst.Name or type(node) is cst.Integer or type(node) is cst.Float or type(node) is cst.SimpleString:
        return node.value
    if type(node) is cst.Attribute:
        owner = _spelled(node.value, depth + 1)
        return None if owner is None else f"{owner}.{node.attr.value}"
    if type(node) is cst.UnaryOperation:
        inner = _spelled(node.expression, depth + 1)
        sign = "not " if type(node.operator) is cst.Not else "-" if type(node.operator) is cst.Minus else None
        return None if inner is None or sign is None else f"({sign}{inner})"
    if type(node) is cst.BooleanOperation:
        left, right = _spelled(node.left, depth + 1), _spelled(node.right, depth + 1)
        operator = "and" if type(node.operator) is cst.And else "or"
        return None if left is None or right is None else f"({left} {operator} {right})"
    if type(node) is cst.Comparison:
        parts = [_spelled(node.left, depth + 1)]
        for target in node.comparisons:
            parts += [_OPERATORS.get(type(target.operator)), _spelled(target.comparator, depth + 1)]
        return None if None in parts else "(" + " ".join(p for p in parts if p is not None) + ")"
    if type(node) is cst.Call:
        func = node.func
        if type(func) is not cst.Name or func.value not in _PURE_CALLS:
            return None
        args = [_spelled(a.value, depth + 1) if a.keyword is None and not a.star else None for a in node.args]
        return None if None in args else f"{func.value}({', '.join(a for a in args if a is not None)})"
    if type(node) is cst.Tuple:
        items = [_spelled(e.value, depth + 1) for e in node.elements]
        return None if None in items else "(" + ", ".join(i for i in items if i is not None) + ",)"
    return None


def reads_of(ctx: FileContext, test: cst.BaseExpression) -> frozenset[str]:
    """Names and `self.<attr>`s read by the test: binding one of them ends its splits."""
    found: set[str] = set()
    for node in ctx.index.walk(test):
        if type(node) is cst.Name:
            found.add(node.value)
        elif type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
            found.add(f"self.{node.attr.value}")
    return frozenset(found)


def record(
    splits: Splits,
    key: str,
    reads: frozenset[str],
    when_held: Mapping[str, Fact],
    when_failed: Mapping[str, Fact],
    joined: Mapping[str, Fact],
) -> None:
    """Record the paths of an `if` (or drop an older split of its test if they agree)."""
    names = [n for n in joined if when_held.get(n, UNKNOWN_FACT) != when_failed.get(n, UNKNOWN_FACT)]
    if not names:
        splits.pop(key, None)
        return
    splits[key] = Split(
        reads=reads,
        joined={n: joined[n] for n in names},
        held={n: when_held.get(n, UNKNOWN_FACT) for n in names},
        failed={n: when_failed.get(n, UNKNOWN_FACT) for n in names},
    )


def assume(splits: Splits, key: str, holds: bool, env: dict[str, Fact]) -> None:
    """Where the test of `key` is known to hold (or fail): each name that still has the joined
    fact of an earlier `if` with that test has the fact of the path taken."""
    split = splits.get(key)
    if split is None:
        return
    for name, joined in split.joined.items():
        if env.get(name) == joined:
            env[name] = (split.held if holds else split.failed)[name]


def common(a: Splits, b: Splits) -> Splits:
    """The splits both paths still know, made before they parted."""
    return {key: split for key, split in a.items() if b.get(key) is split}


def forget_reads_of(splits: Splits, bound: str) -> None:
    """`bound` was assigned: the tests that read it may now answer otherwise."""
    for key in [k for k, split in splits.items() if bound in split.reads]:
        del splits[key]


def always_leaves(body: cst.BaseSuite) -> bool:
    """Whether the block always leaves what follows it (it ends with `return`, `raise`,
    `continue` or `break`): the statements after the `if` then run only where its test failed."""
    if type(body) is cst.SimpleStatementSuite:
        last: cst.CSTNode | None = body.body[-1] if body.body else None
    elif type(body) is cst.IndentedBlock and body.body:
        statement = body.body[-1]
        if type(statement) is not cst.SimpleStatementLine or not statement.body:
            return False
        last = statement.body[-1]
    else:
        return False
    return type(last) in (cst.Return, cst.Raise, cst.Continue, cst.Break)
