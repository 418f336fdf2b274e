"""Which files are tests or scripts: code whose device choices are its own business."""

from __future__ import annotations


def is_test_path(path: str) -> bool:
    """`test_x.py`, `x_test.py`, or anything under a `test`/`tests`/`testing` directory."""
    path = path.replace("\\", "/").lower()
    name = path.rsplit("/", 1)[-1]
    if name.startswith("test") or name.endswith("_test.py") or name == "conftest.py":
        return True
    parts = path.split("/")[:-1]
    return any(part in ("test", "tests", "testing") for part in parts)


def is_script(source: str) -> bool:
    """A file with a `__main__` block picks its own device."""
    return "__main__" in source
