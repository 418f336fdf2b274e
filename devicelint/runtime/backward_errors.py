"""Python errors raised while autograd runs the simulated device's backward, carried out safely.

Torch runs a device's backward on its own thread under a stream guard. For the simulated
(Python-registered) device that guard calls back into Python, and when a Python error is
pending there (a hook, a saved-tensor unpack such as checkpointing's recompute, or an op that
raised), the guard's destructor cannot run and the process aborts with "terminate called
without an active exception". So inside a checked region no Python error may leave Python
code that autograd calls: the error is held here, the callback returns a value that makes torch
fail in C++ (or carry on, for hooks whose result is optional), and the held error is raised
again where the backward was asked for (`backward()`, `torch.autograd.grad`) or, failing
that, when the region ends.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from devicelint.runtime.patching import Patch

_in_backward = torch._C._current_autograd_node
_lock = threading.Lock()
_held: list[BaseException] = []

# A result torch refuses in C++ (not a tensor), so the backward stops without a Python error.
REFUSED = "devicelint: an error was raised in the backward pass"


def hold_in_backward(exc: BaseException) -> bool:
    """Hold `exc` if it was raised inside a backward pass (where raising it would abort the
    process); False, to be raised as usual, elsewhere."""
    if _in_backward() is None:
        return False
    hold(exc)
    return True


def hold(exc: BaseException) -> None:
    with _lock:
        _held.append(exc)


def take() -> BaseException | None:
    """The first error held since the last call (the rest are consequences of it), if any."""
    with _lock:
        if not _held:
            return None
        first = _held[0]
        _held.clear()
    if first.__cause__ is None:
        # Raised where torch's own "invalid gradient" error is being handled: that error is
        # only the means of stopping the backward, not news to the user.
        first.__suppress_context__ = True
    return first


def run_backward(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`backward()` or `torch.autograd.grad(...)`, raising the first error held during it."""
    try:
        result = func(*args, **kwargs)
    except BaseException:
        held = take()
        if held is None:
            raise
        raise held.with_traceback(held.__traceback__)  # noqa: B904 (context suppressed in take)
    held = take()
    if held is not None:
        raise held.with_traceback(held.__traceback__)
    return result


def clear() -> None:
    with _lock:
        _held.clear()


def guarded(hook: Callable[..., Any], failed: Any) -> Callable[..., Any]:
    """`hook` for autograd to call: an error it raises is held and `failed` returned instead."""

    @functools.wraps(hook)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return hook(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (any error would abort the process)
            hold(exc)
            return failed

    call.__devicelint_guarded__ = True  # type: ignore[attr-defined]  # a marker attribute on the function object
    return call


def _guard_once(hook: Any, failed: Any) -> Any:
    if not callable(hook) or getattr(hook, "__devicelint_guarded__", False):
        return hook
    return guarded(hook, failed)


def _patched_register_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def register_hook(self: torch.Tensor, hook: Any) -> Any:
        # A gradient hook that failed changes nothing; its error is raised after the backward.
        return original(self, _guard_once(hook, None))

    return register_hook


def _patched_saved_hooks_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, pack_hook: Any, unpack_hook: Any) -> None:
        original(self, pack_hook, _guard_once(unpack_hook, REFUSED))

    return __init__


def _patched_backward_hook_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, module: Any, user_hooks: Any, user_pre_hooks: Any) -> None:
        original(
            self,
            module,
            [_guard_once(h, None) for h in user_hooks],
            [_guard_once(h, None) for h in user_pre_hooks],
        )

    return __init__


def hook_patches() -> list[Patch]:
    """The hook registrations whose hooks must hold their errors in a simulated region."""
    from torch.autograd.graph import saved_tensors_hooks
    from torch.utils.hooks import BackwardHook

    return [
        (torch.Tensor, "register_hook", _patched_register_hook),
        (torch.Tensor, "register_post_accumulate_grad_hook", _patched_register_hook),
        (saved_tensors_hooks, "__init__", _patched_saved_hooks_init),
        (BackwardHook, "__init__", _patched_backward_hook_init),
    ]
