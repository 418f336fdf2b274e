"""Metamorphic variants of the bug cases (tests/metamorphic): a refactoring that keeps a bug must
keep its finding, and the same refactoring of the fixed twin must stay clean.

A deterministic sample of the variants runs here. Variants listed in
`tests/metamorphic/known_failures.txt` fail today: they are strict xfails, so a listed one that
starts passing fails the run until it is removed from the list (regenerate it with
`python -m tests.metamorphic.report --write-known-failures`). Any other failing variant is a
regression. The full table: `python -m tests.metamorphic.report -j 2`.
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from metamorphic.cases import all_cases
from metamorphic.report import read_known_failures, sampled, variant_id
from metamorphic.scoring import score
from metamorphic.variants import BY_NAME, Variant, build_spec, specs

# One variant in SAMPLE runs (chosen by a hash of its id), to stay well under a minute on one core.
SAMPLE = 128
CASES = {case.name: case for case in all_cases()}
KNOWN = read_known_failures()


def _rows() -> list[tuple[str, str, tuple[str, ...], int | None]]:
    rows = []
    for case in CASES.values():
        for chain, target in specs(case):
            vid = variant_id(case, chain, target)
            if not sampled(vid, SAMPLE):
                continue
            if case.bad and not case.grouped and target is None and not any(BY_NAME[n].targeted for n in chain):
                rows += [(f"{vid}::L{case.origin[tag]}", case.name, chain, target) for tag in case.expected]
            else:
                rows.append((vid, case.name, chain, target))
    return rows


@lru_cache(maxsize=64)
def _variant(name: str, chain: tuple[str, ...], target: int | None) -> Variant:
    return build_spec(CASES[name], chain, target)


def _param(row: tuple[str, str, tuple[str, ...], int | None]):  # type: ignore[no-untyped-def]
    marks = [pytest.mark.xfail(strict=True, reason="a known failure")] if row[0] in KNOWN else []
    return pytest.param(*row, id=row[0], marks=marks)


@pytest.mark.parametrize(("row_id", "name", "chain", "target"), [_param(r) for r in _rows()])
def test_variant(row_id: str, name: str, chain: tuple[str, ...], target: int | None) -> None:
    variant = _variant(name, chain, target)
    assert not variant.error.startswith("generator error"), variant.error
    if variant.error:
        if row_id in KNOWN:
            pytest.fail("listed as a known failure but not applicable: regenerate the list")
        pytest.skip(variant.error)
    row = next(r for r in score(variant) if r.id == row_id)
    assert row.passed, row.reason
