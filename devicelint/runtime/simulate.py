"""Simulated accelerator for CPU-only machines.

PrivateUse1 is renamed to `vgpu` and `SimTensor`, a wrapper subclass labelled `vgpu:0`,
holds a real CPU tensor: ops run on the CPU with real numbers while every tensor reports
the device it would have on `cuda:0`. The checker's function mode (`function_mode.py`) turns
`"cuda"` in device arguments, `.cuda()` and `torch.device("cuda")` values into `vgpu:0`, so
unchanged user code runs "as if on cuda:0". The CUDA-only fused RNN cell kernels run as the
CPU versions in `sim_kernels.py`. This leans on private, experimental torch APIs: it is feature-detected and
`install()` explains what is missing when it cannot work.
"""

from __future__ import annotations

import atexit
import ctypes
import re
from typing import Any

import torch
from torch.utils._pytree import tree_map

from devicelint.runtime import backward_errors, sim_autocast
from devicelint.runtime.sim_backend import SimBackendModule
from devicelint.runtime.sim_kernels import KERNELS

_KERNELS_BY_ID = {id(op): kernel for op, kernel in KERNELS.items()}

SIM_TYPE = "vgpu"
SIM_DEVICE: torch.device | None = None  # set by install()
_CPU = torch.device("cpu")


class SimulationUnavailable(RuntimeError):
    """This torch cannot host the simulated device (or a backward ran before it was set up)."""


_installed: bool | None = None
_failure: str = ""


def install() -> torch.device:
    """Register the simulated device once per process and check that it works end to end.

    Must run before the process's first backward pass: the autograd engine sizes its
    per-device queues then. The pytest plugin calls it at collection time.
    """
    global _installed, _failure, SIM_DEVICE
    if _installed and SIM_DEVICE is not None:
        return SIM_DEVICE
    if _installed is False:
        raise SimulationUnavailable(_failure)
    if torch.cuda.is_available():
        # The renamed PrivateUse1 backend would become torch's accelerator for the whole process
        # (PrivateUse1 is asked first), and CUDA's autograd then finds no stream for CUDA
        # gradients: every later backward fails, checked or not (seen on an H200, torch 2.11).
        raise SimulationUnavailable(
            "devicelint does not simulate an accelerator where CUDA is present: torch would take "
            "the simulated device for this process's accelerator and every later CUDA backward "
            "pass would fail (`opt_ready_stream && opt_parent_stream INTERNAL ASSERT`); check on "
            'the real GPU with simulate="auto" (the default)'
        )
    try:
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    except ImportError as exc:
        _fail(f"torch {torch.__version__} lacks the private backend registration API ({exc})")
    current = torch._C._get_privateuse1_backend_name()
    if current == SIM_TYPE:
        pass  # already renamed by an earlier install in this process (a reloaded module)
    elif current != "privateuseone":
        _fail(f"PrivateUse1 is already taken by the backend {current!r}")
    else:
        try:
            _setup_privateuseone_for_python_backend(SIM_TYPE, backend_module=SimBackendModule())
        except (RuntimeError, AttributeError, TypeError) as exc:
            _fail(f"cannot register the simulated device on torch {torch.__version__}: {exc}")
    SIM_DEVICE = torch.device(SIM_TYPE, 0)
    sim_autocast.register(SIM_TYPE, lambda t: isinstance(t, SimTensor))
    _allow_foreach_optimizers()
    _probe()
    atexit.register(_settle_backward_thread)
    _installed = True
    return SIM_DEVICE


def _allow_foreach_optimizers() -> None:
    # Optimizers on a GPU default to their foreach (or fused) kernels; they take only tensor
    # types they know, so the simulated tensor is added to them (it exists in simulation only).
    from torch.optim import optimizer

    known = getattr(optimizer, "_foreach_supported_types", None)
    if isinstance(known, list) and SimTensor not in known:
        known.append(SimTensor)


def _fail(reason: str) -> None:
    global _installed, _failure
    _installed = False
    _failure = (
        f"devicelint cannot simulate an accelerator here: {reason}. Run the runtime checks on a "
        'machine with CUDA, or pass simulate="never" to check CPU runs only.'
    )
    raise SimulationUnavailable(_failure)


def _probe() -> None:
    """Run a forward and backward on the simulated device; fail with a clear message if not."""
    try:
        weight = SimTensor(torch.ones(2, 2)).requires_grad_(True)
        (weight * 2).sum().backward()
        assert weight.grad is not None and weight.grad.device.type == SIM_TYPE
    except (RuntimeError, AssertionError) as exc:
        if "device_ready_queues_" in str(exc):
            reason = (
                "a backward pass ran in this process before the simulated device was registered "
                "(call devicelint.runtime.simulate.install() earlier, e.g. at the top of conftest.py)"
            )
        else:
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        try:
            _fail(reason)
        except SimulationUnavailable as failure:
            raise failure from None


def _settle_backward_thread() -> None:
    """Let autograd's thread for the simulated device drop the last backward's graph while
    Python is whole (run at exit).

    That thread may still hold the graph for a moment after `backward()` returns, and freeing it
    frees Python objects (the graph's tensors, and the `contextvars` context torch hands every
    backward), which takes the GIL; once the interpreter is finalizing, taking the GIL ends the
    thread inside a C++ destructor and the process aborts ("terminate called without an active
    exception") after the program has finished. The thread takes its tasks in order, so when one
    more backward has run there, everything before it is gone. That backward is asked of the
    engine itself, without the context, and its tensors are kept for good, so that what it
    leaves to the thread frees nothing of Python's.
    """
    try:
        leaf = SimTensor(torch.ones(1)).requires_grad_(True)
        grad = SimTensor(torch.ones(1))
        out = leaf.clone()
        engine = torch.autograd.Variable._execution_engine
        engine.run_backward((out,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)
    except Exception:  # noqa: BLE001 -- at exit, a failure here must not mask the program's own result
        return
    for kept in (leaf, grad, out):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))


def unsupported(func: Any, exc: BaseException, why: str | None = None) -> SimulationUnavailable:
    """The error for an op the simulated device cannot run, naming the op and why."""
    packet = getattr(func, "overloadpacket", None)
    name = f"aten.{packet.__name__}" if packet is not None else getattr(func, "__qualname__", str(func))
    if why is None:
        why = _why_unsupported(str(exc))
    return SimulationUnavailable(
        f"devicelint's simulated GPU cannot run `{name}`: {why} (torch said: {str(exc).splitlines()[0][:160]}). "
        'Check this code with simulate="never" or on a machine with CUDA.'
    )


def _why_unsupported(error: str) -> str:
    missing = re.search(r"Could not run '(aten::[\w.]+)'", error)
    if missing:
        op = missing.group(1)
        if not torch._C._dispatch_has_kernel_for_dispatch_key(
            op, "CPU"
        ) and not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeExplicitAutograd"):
            return f"`{op}` exists for CUDA only, and there is no CPU version to run in its place"
        return (
            f"torch's C++ called `{op}` on the simulated device directly, below the Python layer where "
            "devicelint swaps in the CPU tensors that compute for it"
        )
    return "torch needs a service the simulated device does not provide"


def is_sim(device: torch.device) -> bool:
    return device.type == SIM_TYPE


# An empty tensor is often made only to be resized by an `out=` op: its wrapper gets room to grow.
_EMPTY_HEADROOM = 1 << 30


def _storage_bytes(inner: torch.Tensor) -> int | None:
    if inner.layout is not torch.strided:
        return None
    size = inner.untyped_storage().nbytes()
    return size if size else _EMPTY_HEADROOM


class SimTensor(torch.Tensor):
    """A tensor that reports `vgpu:0` and computes on the CPU tensor it holds."""

    inner: torch.Tensor  # type: ignore[assignment]  # shadows Tensor.inner (the inner product) on purpose

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> SimTensor:
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.size(),
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=SIM_DEVICE,
            requires_grad=inner.requires_grad,
            # Sizes and strides live on the wrapper, answered without a call into Python (autograd
            # asks several times per op); ops that change them in place re-sync it
            # (`_sync_metadata`), within a storage as large as the inner one.
            storage_size=_storage_bytes(inner),
        )
        out.inner = inner
        return out

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Saved as the CPU tensor it holds: a plain file that any torch can load.
        return self.inner.__reduce_ex__(protocol)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # noqa: D105  # torch's own is unannotated; same keyword
        return f"SimTensor(device='{SIM_DEVICE}', {self.inner!r})"

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch declares it as a plain function; subclasses define a classmethod
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        try:
            return run_simulated(func, args, kwargs or {})
        except BaseException as exc:  # noqa: BLE001
            if not backward_errors.hold_in_backward(exc):
                raise
            return None


_aten = torch.ops.aten


def _unwrap(value: Any) -> Any:
    return value.inner if isinstance(value, SimTensor) else value


def _map(fn: Any, value: Any) -> Any:
    """`fn` on every tensor in an op argument or result: a tensor or a flat list or tuple
    of them (what aten ops take); deeper nesting goes through pytree."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, (list, tuple, dict)) for v in value):
            return tree_map(fn, value)
        mapped = [fn(v) if isinstance(v, torch.Tensor) else v for v in value]
        return type(value)(mapped) if type(value) in (list, tuple) else tree_map(fn, value)
    return value


_UNWRAPPABLE_LAYOUTS = frozenset({torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc})

# Results that stay on the CPU even for CUDA inputs (the batch sizes of a packed sequence).
_CPU_RESULTS = {"_pack_padded_sequence": (1,), "_pad_packed_sequence": (1,)}


def run_simulated(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run an op on the CPU tensors behind its arguments; wrap what a GPU op would return."""
    wrap_outputs = True
    if kwargs:
        device = kwargs.get("device")
        if device is not None:
            if torch.device(device).type == SIM_TYPE:
                kwargs = dict(kwargs, device=_CPU)
            else:
                wrap_outputs = False
    # In-place and out= ops return their argument: hand back the wrapper, not its inside.
    originals: dict[int, Any] = {}
    inner_args = []
    for arg in args:
        if type(arg) is SimTensor:
            originals[id(arg.inner)] = arg
            inner_args.append(arg.inner)
        elif isinstance(arg, (list, tuple)):
            inner_args.append(_map(lambda v: _unwrap_noting(v, originals), arg))
        else:
            inner_args.append(arg)
    if kwargs:
        kwargs = {k: _map(lambda v: _unwrap_noting(v, originals), v) for k, v in kwargs.items()}
    out = _KERNELS_BY_ID.get(id(func), func)(*inner_args, **kwargs)

    if type(out) is torch.Tensor:  # the common case: one new tensor
        same = originals.get(id(out))
        if same is not None:
            return _sync_metadata(func, same)
        return (
            SimTensor(out)
            if wrap_outputs and out.layout is torch.strided and out.device.type == "cpu"
            else _wrap(func, out, wrap_outputs)
        )

    def wrap(value: torch.Tensor) -> torch.Tensor:
        same = originals.get(id(value))
        return _sync_metadata(func, same) if same is not None else _wrap(func, value, wrap_outputs)

    keep_cpu = _CPU_RESULTS.get(func.overloadpacket.__name__) if isinstance(out, tuple) else None
    if keep_cpu:
        return tuple(v if i in keep_cpu else _map(wrap, v) for i, v in enumerate(out))
    return _map(wrap, out)


def _sync_metadata(func: Any, wrapper: SimTensor) -> SimTensor:
    """After an in-place op (`transpose_`, `squeeze_`, `out=` resizing), give the wrapper the
    sizes and strides its inner tensor now has."""
    inner = wrapper.inner
    if (
        wrapper.shape == inner.shape
        and wrapper.stride() == inner.stride()
        and wrapper.storage_offset() == inner.storage_offset()
    ):
        return wrapper
    try:
        with torch._C._DisableTorchDispatch():
            _aten.as_strided_.default(wrapper, inner.size(), inner.stride(), inner.storage_offset())
    except RuntimeError as exc:
        raise unsupported(
            func,
            exc,
            "it grew a simulated tensor in place beyond the memory it was made with (`out=` into a smaller tensor)",
        ) from None
    return wrapper


def _unwrap_noting(value: torch.Tensor, originals: dict[int, Any]) -> torch.Tensor:
    if type(value) is SimTensor:
        originals[id(value.inner)] = value
        return value.inner
    return value


def _wrap(func: Any, value: torch.Tensor, wrap_outputs: bool) -> torch.Tensor:
    if wrap_outputs and value.device.type == "cpu":
        if value.layout in _UNWRAPPABLE_LAYOUTS:
            # A wrapper needs strides; compressed sparse layouts have none.
            raise unsupported(
                func,
                RuntimeError(f"it returns a {value.layout} tensor"),
                "compressed sparse tensors have no strides, which the simulated tensor needs",
            )
        return SimTensor(value)
    return value


def to_sim(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor.to("vgpu:0")` for a CPU tensor, usable inside a dispatch handler."""
    if isinstance(tensor, SimTensor):
        return tensor
    return SimTensor(tensor)


def rewrite_cuda(value: Any) -> Any:
    """`"cuda"`, `"cuda:N"` or a cuda `torch.device` becomes the simulated device."""
    if isinstance(value, str):
        if value == "cuda" or value.startswith("cuda:"):
            return SIM_DEVICE
    elif isinstance(value, torch.device):
        if value.type == "cuda":
            return SIM_DEVICE
    return value
