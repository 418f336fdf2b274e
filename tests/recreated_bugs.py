"""The shared re-created real bugs (`../shared/realbugs`), for tests that pin a rule to them."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule

# Beside the checkout (`../shared`), or where this workplace keeps it for clones made elsewhere.
_PLACES = (Path(__file__).resolve().parents[2] / "shared" / "realbugs", Path("/work/shared/realbugs"))
REALBUGS = next((p for p in _PLACES if p.is_dir()), _PLACES[0])
needs_realbugs = pytest.mark.skipif(not REALBUGS.is_dir(), reason="the shared re-created bugs are not on this machine")


def assert_pair(code: str, stem: str) -> None:
    """`code` reports the bad file at one of the lines its header names, and is silent on its fix."""
    bad = REALBUGS / f"{stem}_bad.py"
    lines = {int(n) for n in bad.read_text().splitlines()[1].split("lines=")[1].split(",")}
    options = EngineOptions(rules=(find_rule(code),))
    hits = {f.line for f in lint_source(bad.read_bytes(), str(bad), options).findings if f.code == code}
    assert hits & lines
    good = REALBUGS / f"{stem}_good.py"
    assert not lint_source(good.read_bytes(), str(good), options).findings
