"""Runtime half of devicelint: the only package that imports torch.

`check`, `audit` and `DeviceConsistencyError` load torch on first use, so importing this
package (as the pytest plugin does at startup) costs nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DeviceConsistencyError", "Report", "audit", "check", "format_findings", "watch_this_thread"]


def __getattr__(name: str) -> Any:
    if name in ("check", "DeviceConsistencyError", "Report", "format_findings", "DeviceWarning", "watch_this_thread"):
        from devicelint.runtime import checker

        return getattr(checker, name)
    if name == "audit":
        from devicelint.runtime.auditing import audit

        return audit
    raise AttributeError(f"module 'devicelint.runtime' has no attribute {name!r}")
