"""Which files are tests or scripts: code whose device choices are its own business."""

from __future__ import annotations

import libcst as cst


def is_test_path(path: str) -> bool:
    """`test_x.py`, `x_test.py`, or anything under a `test`/`tests`/`testing` directory."""
    path = path.replace("\\", "/").lower()
    name = path.rsplit("/", 1)[-1]
    if name.startswith("test") or name.endswith("_test.py") or name == "conftest.py":
        return True
    parts = path.split("/")[:-1]
    return any(part in ("test", "tests", "testing") for part in parts)


def defines_tests(path: str, module: cst.Module) -> bool:
    """A test module: named as one (`test_x.py`, `x_test.py`, a `test.py` check script), or kept
    under `tests/` and defining tests (`def test_x():`, also as methods of a test class), as
    opposed to a training script kept under `tests/`: its loops run checks, not training."""
    if not is_test_path(path):
        return False
    name = path.replace("\\", "/").lower().rsplit("/", 1)[-1]
    if name.startswith("test") or name.endswith("_test.py"):
        return True  # `test_x.py`, `test.py`: a test or a one-off check, never a training script
    for statement in module.body:
        body = statement.body.body if type(statement) is cst.ClassDef else [statement]
        for node in body:
            if type(node) is cst.FunctionDef and node.name.value.startswith("test"):
                return True
    return False


def is_script(source: str) -> bool:
    """A file with a `__main__` block picks its own device."""
    return "__main__" in source
