"""Attributes of torch swapped for the length of a checked region, then put back."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

# (owner, attribute name, a function from the original to its replacement)
Patch = tuple[Any, str, Callable[[Any], Any]]


class RegionPatches:
    """While entered, each attribute is its replacement; on exit, the original again.

    Only the region's own calls see the replacements: nothing outside `check()` changes.
    """

    def __init__(self, patches: Iterable[Patch]) -> None:
        self._patches = list(patches)
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> RegionPatches:
        for owner, name, replace in self._patches:
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, replace(original))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()
