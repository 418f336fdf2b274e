"""LibCST's parser, without the checks every node runs on itself as the parser makes it.

LibCST validates each node in `CSTNode.__post_init__` (an `Index` needs a value, a `Name` a
valid identifier, whitespace the right characters, ...). Those checks guard trees written by
hand; a tree that comes out of LibCST's own parser passes them by construction, and running
them is about 14% of the parse (timm: 7.6 -> 6.7 CPU s). LibCST's own comment on
`__post_init__` says as much. Nodes built any other way (fixes, tests) are still checked:
the check is skipped only while `parse_module` below runs.
"""

from __future__ import annotations

import libcst as cst
from libcst._nodes.base import CSTNode

_checked_post_init = CSTNode.__post_init__


def _unchecked_post_init(self: CSTNode) -> None:
    return None


def parse_module(text: str | bytes) -> cst.Module:
    """`libcst.parse_module(text)`, the same tree, minus the per-node checks.

    Not locked: two threads parsing at once may end with one parse checked, never with the
    checks left off, since each parse restores them when it ends."""
    CSTNode.__post_init__ = _unchecked_post_init  # type: ignore[method-assign]  # the point of this module
    try:
        return cst.parse_module(text)
    finally:
        CSTNode.__post_init__ = _checked_post_init  # type: ignore[method-assign]  # restored, even on a syntax error
