"""Fixes proven by running: the bad fixture fails under the runtime checker, the fixed one passes.

A fix case (`fixtures/DLxxx/fix_*.in.py`) that defines `run(device)` and names the runtime
finding its bug causes (`# proof: DL605`) is run twice under the simulated GPU: as written it
must produce that finding, and after `--fix --unsafe-fixes` for its rule it must produce no
runtime error at all.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import FIXTURES  # noqa: E402

import devicelint.runtime as rt  # noqa: E402
from devicelint.engine import EngineOptions, lint_source  # noqa: E402
from devicelint.registry import find_rule  # noqa: E402

if not torch.cuda.is_available():
    from devicelint.runtime import simulate

    simulate.install()

_PROOF = re.compile(r"^# proof: (DL6\d\d)\s*$", re.MULTILINE)
PROVEN = sorted(p for p in FIXTURES.glob("DL*/fix_*.in.py") if _PROOF.search(p.read_text()))


def _run(path: Path) -> rt.Report:
    spec = importlib.util.spec_from_file_location(f"proof_{path.parent.name}_{path.stem.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with rt.check(syncs="ignore") as report:
        try:
            module.run("cuda")
        except RuntimeError as err:  # a real device mismatch raises; the report has already named it
            report.failure = err
    return report


def test_rules_with_runtime_proofs() -> None:
    # The rules whose bug the runtime checker can see each prove at least one fix by running it.
    proven_rules = {path.parent.name for path in PROVEN}
    assert {"DL101", "DL102", "DL103", "DL104", "DL105", "DL106"} <= proven_rules


@pytest.mark.parametrize("path", PROVEN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fix_removes_the_runtime_failure(path: Path, tmp_path: Path) -> None:
    source = path.read_text()
    expected_code = _PROOF.search(source).group(1)  # type: ignore[union-attr]
    before = _run(path)
    assert expected_code in {f.code for f in before.errors}, rt.format_findings(before.findings)

    rule = find_rule(path.parent.name)
    fixed = lint_source(source, str(path), EngineOptions(rules=(rule,), fix_mode="unsafe")).fixed_source
    assert fixed is not None
    fixed_path = tmp_path / path.name.replace(".in.py", "_fixed.py")
    fixed_path.write_text(fixed)
    after = _run(fixed_path)
    assert after.errors == [], rt.format_findings(after.errors)
