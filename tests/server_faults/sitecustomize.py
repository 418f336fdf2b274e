"""Faults for the language server's tests, in every Python process a test server starts (the
server, the forkserver, the lint workers), because this folder is put first on PYTHONPATH.

With DEVICELINT_TEST_FAULTS=1, rule DL108 raises on a file containing `CRASH_DEVICELINT` and
computes for a minute on one containing `SLOW_DEVICELINT` (CPU time: the per-file limit counts
the file's own work). Nothing happens without it.
"""

import os

if os.environ.get("DEVICELINT_TEST_FAULTS") == "1":
    import time

    import devicelint.checks  # noqa: F401  (registers the rules)
    from devicelint.registry import REGISTRY

    _rule = REGISTRY["DL108"]
    _check = _rule.check

    def _faulty_check(self, ctx):  # type: ignore[no-untyped-def]
        if "CRASH_DEVICELINT" in ctx.source:
            raise RuntimeError("injected by the test")
        if "SLOW_DEVICELINT" in ctx.source:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                sum(range(10_000))
        return _check(self, ctx)

    _rule.check = _faulty_check
