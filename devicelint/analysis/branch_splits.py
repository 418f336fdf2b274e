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

Tests are compared as source text, `not` stripped (`if not t:` is `if t:` with its paths
swapped). A test that calls anything but a few pure builtins (`random.random() < p`) may
change between reads and is never recorded.
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
    for node in ctx.index.walk(test):
        if type(node) is cst.Call and not (type(node.func) is cst.Name and node.func.value in _PURE_CALLS):
            return None
        if type(node) in (cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda):
            return None
    return " ".join(ctx.code_for(test.with_changes(lpar=(), rpar=())).split()), holds


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
