"""The torch-function layer of the checker: sends `cuda` to the simulated device, and moves
CPU tensors that require grad onto the device of the op that mixes them (after reporting it)
so the autograd graph stays consistent and one run reports every bug.

Mixes of tensors that need no grad are handled below autograd, by the dispatch detector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map
from torch.utils.weak import WeakIdKeyDictionary

from devicelint.runtime import backward_errors
from devicelint.runtime.detector import Detector, tensor_args
from devicelint.runtime.sim_islands import RECURRENT, run_on_cpu

_Tensor = torch.Tensor
_is_grad_enabled = torch.is_grad_enabled
# Build tensors from Python data in C++, straight on the device, past the dispatcher.
_FROM_DATA = frozenset({torch.tensor, torch.as_tensor, torch.asarray, _Tensor.new_tensor})
_HOST_VIEWS = frozenset({_Tensor.tolist})
_NUMPY_VIEWS: frozenset[Callable[..., Any]] = frozenset((_Tensor.numpy, _Tensor.__array__))
_INDEXING = frozenset({_Tensor.__getitem__, _Tensor.__setitem__})
_PINNED = WeakIdKeyDictionary()  # tensors `pin_memory()` made in a simulated region


def _pin(sim: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    # Page-locked host memory only speeds up copies; a plain copy stands for it.
    pinned: torch.Tensor = args[0].clone()
    _PINNED[pinned] = True
    return pinned


# Calls the simulated device answers itself (NotImplemented: the ordinary path after all).
_SIMULATED_CALLS: dict[Any, Any] = {
    **dict.fromkeys(
        (_Tensor.backward, torch.autograd.backward, torch.autograd.grad),
        lambda sim, func, args, kwargs: backward_errors.run_backward(func, args, kwargs),
    ),
    **dict.fromkeys(
        RECURRENT, lambda sim, func, args, kwargs: run_on_cpu(func, args, kwargs, sim.SimTensor, sim.SIM_TYPE)
    ),
    _Tensor.pin_memory: _pin,
    _Tensor.is_pinned: lambda sim, func, args, kwargs: args[0] in _PINNED,
}
# Functions that take tensors on two devices on purpose (moving, swapping, metadata).
_EXEMPT_NAMES = frozenset(
    {
        "__get__",
        "__set__",
        "__delete__",
        "to",
        "copy_",
        "set_",
        "type_as",
        "swap_tensors",
        "_has_compatible_shallow_copy_type",
        "__setstate__",
        "__reduce_ex__",
        "__deepcopy__",
        "is_same_size",
        "_is_same_size",
        "__eq__",
        "__ne__",
        "__hash__",
        "__bool__",
        "__len__",
        "__repr__",
        "__format__",
        "__iter__",
        "__contains__",
    }
)


class FunctionMode(TorchFunctionMode):
    """Sees every torch function call (above autograd) while a check runs."""

    def __init__(self, detector: Detector, simulate: bool) -> None:
        super().__init__()
        self.detector = detector
        self.sim = None
        if simulate:
            from devicelint.runtime import simulate as sim

            self.sim = sim

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        sim = self.sim
        if func is F.ctc_loss:
            args, kwargs = _lengths_as_lists(args, kwargs)
        if sim is not None:
            if func is _Tensor.cuda:
                return args[0].to(sim.SIM_DEVICE, non_blocking=kwargs.get("non_blocking", False))
            device = kwargs.get("device")
            if device is not None:
                kwargs = dict(kwargs, device=sim.rewrite_cuda(device))
            if func is not torch.device:
                # A `torch.device("cuda")` stays a name (frameworks check `device.type`); what
                # allocates or moves tensors there is sent to the simulated device instead.
                for arg in args:
                    if isinstance(arg, (str, torch.device)):
                        args = tuple(sim.rewrite_cuda(a) for a in args)
                        break
            handler = _SIMULATED_CALLS.get(func)
            if handler is not None:
                out = handler(sim, func, args, kwargs)
                if out is not NotImplemented:
                    return out
            if func in _FROM_DATA:
                # The copy this makes is what `torch.tensor(data, device="cuda")` does on a
                # GPU too: not a finding.
                self.detector.repairing += 1
                try:
                    made = _from_data_on_sim(func, args, kwargs, sim.SIM_DEVICE)
                finally:
                    self.detector.repairing -= 1
                if made is not None:
                    return made
            elif func in _NUMPY_VIEWS and args and isinstance(args[0], sim.SimTensor):
                # What a GPU does: NumPy cannot see device memory (DL108's bug, caught here too).
                raise TypeError(
                    "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
                    "the tensor to host memory first."
                )
            elif func in _HOST_VIEWS and args and isinstance(args[0], sim.SimTensor):
                # Not supported on tensor subclasses: copy to the host (a sync the detector
                # sees, as on a GPU) and read it there.
                return func(args[0].cpu(), *args[1:], **kwargs)
            elif func in _INDEXING and args and isinstance(args[0], sim.SimTensor) and len(args) > 1:
                # `x[:, [4, 0]]`: torch builds the index tensor on the indexed tensor's device
                # below Python, where the simulated device has no allocator: build it here.
                args = (args[0], _lists_as_tensors(args[1], sim.to_sim), *args[2:])
        if _is_grad_enabled():
            tensors = tensor_args(args, kwargs)
            if len(tensors) > 1 and _repairable(func):
                args, kwargs = self._repair(func, tensors, args, kwargs)
        if sim is None:
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except NotImplementedError as exc:
            if f"'{sim.SIM_TYPE}' backend" not in str(exc):
                raise
            raise sim.unsupported(func, exc) from None

    def _repair(
        self, func: Any, tensors: list[torch.Tensor], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        target = None
        grad_cpu = False
        for t in tensors:
            device = t.device
            if device.type == "cpu":
                if t.requires_grad and t.dim() > 0:
                    grad_cpu = True
            elif target is None:
                target = device
        if target is None or not grad_cpu:
            return args, kwargs
        detector = self.detector
        detector.report_function_mix(func, tensors, target)
        detector.repairing += 1
        try:
            moved: tuple[tuple[Any, ...], dict[str, Any]] = tree_map(
                lambda v: v.to(target) if isinstance(v, _Tensor) and v.device.type == "cpu" and v.dim() > 0 else v,
                (args, kwargs),
            )
        finally:
            detector.repairing -= 1
        return moved


_REPAIRABLE: dict[Any, bool] = {}


def _repairable(func: Any) -> bool:
    known = _REPAIRABLE.get(func)
    if known is None:
        name = getattr(func, "__name__", "")
        known = _REPAIRABLE[func] = name not in _EXEMPT_NAMES and not (
            name.startswith("_") and not name.startswith("__")
        )
    return known


def _lists_as_tensors(index: Any, on_device: Any, top: bool = True) -> Any:
    """Python lists (and tuples inside an index tuple) of ints or bools as index tensors on the
    indexed tensor's (simulated) device, as torch itself builds them."""
    if isinstance(index, tuple) and top:
        # `x[1, 0]` is basic indexing; `x[(1, 0), :]` indexes with the inner tuple.
        return tuple(_lists_as_tensors(part, on_device, False) for part in index)
    if isinstance(index, (list, tuple)) and index and _all_ints(index):
        return on_device(torch.tensor(index))
    return index


def _all_ints(values: Any) -> bool:
    return all(_all_ints(v) if isinstance(v, (list, tuple)) and v else isinstance(v, (bool, int)) for v in values)


def _lengths_as_lists(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """CPU length tensors for `ctc_loss` as lists, as ATen's own fast path reads them: under a
    dispatch mode or with tensor subclasses it takes another path, which hands the CPU lengths
    to the CUDA kernel and divides by them, and a real GPU then raises where the unchecked run
    does not (seen on an H200)."""

    def as_list(value: Any) -> Any:
        if isinstance(value, _Tensor) and value.device.type == "cpu":
            return value.tolist()
        return value

    args = tuple(as_list(a) if i in (2, 3) else a for i, a in enumerate(args))
    kwargs = {k: as_list(v) if k in ("input_lengths", "target_lengths") else v for k, v in kwargs.items()}
    return args, kwargs


def _from_data_on_sim(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], sim_device: torch.device) -> Any:
    """`torch.tensor(data, device=<simulated>)`: build on the CPU, then move (as a GPU copy would)."""
    device = kwargs.get("device")
    if device is None and func is _Tensor.new_tensor and args:
        device = args[0].device
    if device is None or torch.device(device) != sim_device:
        return None
    requires_grad = kwargs.get("requires_grad", False)
    kwargs = (
        dict(kwargs, device="cpu", requires_grad=False) if "requires_grad" in kwargs else dict(kwargs, device="cpu")
    )
    made = func(*args, **kwargs).to(sim_device)
    return made.requires_grad_(True) if requires_grad else made
