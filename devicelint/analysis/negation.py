"""Tests read through `not`: one place for the idiom every test reader shares."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst


def through_not(test: cst.BaseExpression, decide: Callable[[cst.BaseExpression], bool | None]) -> bool | None:
    """What `decide` says of `test` once any `not`s around it are taken off, and then applied:
    `not x` holds where `x` does not. None where `decide` does not know."""
    negated = False
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test = test.expression
        negated = not negated
    found = decide(test)
    return None if found is None else found != negated
