"""Cheap attribution of a torch op to the user's source line.

`traceback.extract_stack` costs tens of microseconds per call; this walk costs about a
microsecond because it decides once per code object whether the code is library code.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import CodeType, FrameType

# (path, line), or (path, line, (package path, line)) when the op ran inside an installed package.
Site = tuple[str, int] | tuple[str, int, tuple[str, int]]


def _library_roots() -> tuple[str, ...]:
    roots = []
    for name in ("torch", "devicelint", "_pytest", "pytest", "pluggy", "functorch"):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            roots.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(roots)


def _stdlib_root() -> str:
    return os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep


_ROOTS: tuple[str, ...] = _library_roots()
_STDLIB = _stdlib_root()


def _is_library(filename: str) -> bool:
    if filename.startswith("<frozen") or filename.startswith("<__array_function__"):
        return True
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if path.startswith(_ROOTS):
        return True
    # The standard library is library code; site-packages under it is not (third-party
    # model code there is what the user runs).
    if path.startswith(_STDLIB):
        return "site-packages" not in path and "dist-packages" not in path
    return False


def refresh_roots() -> None:
    """Recompute the library roots (call after torch is imported)."""
    global _ROOTS
    _ROOTS = _library_roots()
    _KIND_CACHE.clear()


def in_installed_package(filename: str) -> bool:
    return "site-packages" in filename or "dist-packages" in filename


_USER, _INTERNAL, _PACKAGE = 0, 1, 2
_KIND_CACHE: dict[CodeType, int] = {}


def _kind(code: CodeType) -> int:
    kind = _KIND_CACHE.get(code)
    if kind is None:
        name = code.co_filename
        if _is_library(name):
            kind = _INTERNAL
        elif in_installed_package(name):
            kind = _PACKAGE
        else:
            kind = _USER
        _KIND_CACHE[code] = kind
    return kind


def user_site(depth: int = 2) -> Site | None:
    """The innermost stack frame of the user's own code: outside torch, devicelint, pytest,
    the standard library and installed packages.

    When the stack passed through an installed package (transformers, timm) on its way down,
    the site carries that package's innermost line too: `(path, line, (package_path, line))`.
    """
    try:
        frame: FrameType | None = sys._getframe(depth)
    except ValueError:  # a shallow stack (an autograd worker thread)
        return None
    via: tuple[str, int] | None = None
    kinds = _KIND_CACHE
    while frame is not None:
        code = frame.f_code
        kind = kinds.get(code)
        if kind is None:
            kind = _kind(code)
        if kind == _USER:
            if via is None:
                return (code.co_filename, frame.f_lineno)
            return (code.co_filename, frame.f_lineno, via)
        if kind == _PACKAGE and via is None:
            via = (code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return via  # only library code ran (a model driven from an installed package's script)


def library_line(site: Site | None) -> tuple[str, int] | None:
    """The installed package's line a user site led to, if the op ran in one."""
    return site[2] if site is not None and len(site) > 2 else None


_TRANSPARENT: dict[CodeType, bool] = {}
# torch's own plumbing between the caller and a mode's handler (not the code that asked).
_PLUMBING = (
    os.sep + "_dynamo" + os.sep,
    os.sep + "torch" + os.sep + "_compile.py",
    os.sep + "torch" + os.sep + "overrides.py",
    os.sep + "torch" + os.sep + "_ops.py",
    os.sep + "utils" + os.sep + "_python_dispatch.py",
)


def _caller(depth: int) -> FrameType | None:
    """The innermost frame that is neither devicelint nor torch's dispatch plumbing."""
    try:
        frame: FrameType | None = sys._getframe(depth + 1)
    except ValueError:
        return None
    while frame is not None:
        code = frame.f_code
        transparent = _TRANSPARENT.get(code)
        if transparent is None:
            name = code.co_filename
            transparent = _TRANSPARENT[code] = name.startswith(_DEVICELINT_ROOT) or any(
                part in name for part in _PLUMBING
            )
        if not transparent:
            return frame
        frame = frame.f_back
    return None


def innermost_is_library(depth: int = 1) -> bool:
    """Whether the code that called into torch for this op is library code."""
    frame = _caller(depth)
    if frame is None:
        return False
    return _kind(frame.f_code) == _INTERNAL


_DEVICELINT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TENSOR_METHODS: dict[CodeType, bool] = {}


def sync_asked_by_user(depth: int = 1) -> bool:
    """Whether the code that called into torch for a sync is the user's (or a tensor method
    such as `print(t)`'s formatting), rather than torch's own internals (a module's checks)."""
    frame = _caller(depth)
    if frame is None:
        return True
    code = frame.f_code
    if _kind(code) != _INTERNAL:
        return True
    tensor_method = _TENSOR_METHODS.get(code)
    if tensor_method is None:
        name = os.path.basename(code.co_filename)
        tensor_method = _TENSOR_METHODS[code] = name in ("_tensor.py", "_tensor_str.py") or not _in_torch(
            code.co_filename
        )
    return tensor_method


def _in_torch(filename: str) -> bool:
    return any(filename.startswith(root) and "torch" in root for root in _ROOTS)


def display_path(path: str) -> str:
    """A path relative to the working directory when it lies below it; inside an installed
    package, the path from the package (`transformers/models/...`)."""
    for marker in ("site-packages", "dist-packages"):
        at = path.rfind(marker + os.sep)
        if at != -1:
            return path[at + len(marker) + 1 :]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def package_of(path: str) -> str:
    """The top-level package an installed file belongs to (`transformers`)."""
    return display_path(path).split(os.sep, 1)[0].removesuffix(".py")
