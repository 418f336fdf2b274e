"""Torch entry points that take `"cuda"` by name read it as the simulated device in a region.

The checker's function mode rewrites `device="cuda"` in torch functions; these entry points
are not torch functions, so they are swapped for the region (`patching.RegionPatches`):
- `torch.autocast("cuda")` and `GradScaler("cuda")` would find no GPU and quietly disable
  themselves (AMP code would run in float32, unscaled). Given the simulated device, autocast
  casts as CUDA's does (`sim_autocast`) and the scaler scales, unscales and skips steps on inf.
- `torch.is_autocast_enabled()` and friends answer for the simulated device.
- `torch.Generator(device="cuda")` gives a CPU generator, which the simulated device draws from.
- `torch.load(..., map_location="cuda")` (or a file saved on a GPU, loaded with no
  `map_location`) loads on the CPU and puts every tensor on the simulated device.
- `torch.cuda` answers as one GPU would (`is_available()`, `device_count()`, memory figures of
  zero, no-op `synchronize()` and `empty_cache()`), so code and frameworks that choose their
  device by asking it (Accelerate, Lightning, `"cuda" if torch.cuda.is_available() else "cpu"`)
  choose the simulated GPU.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import torch

from devicelint.runtime.patching import Patch


def cuda_name_patches(sim_type: str, to_sim: Callable[[Any], Any]) -> list[Patch]:
    from torch.amp.autocast_mode import autocast
    from torch.amp.grad_scaler import GradScaler

    def as_sim(device: Any) -> Any:
        if isinstance(device, torch.device):
            device = device.type
        return sim_type if device == "cuda" else device

    def autocast_init(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def __init__(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
            original(self, as_sim(device_type), *args, **kwargs)

        return __init__

    def scaler_init(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def __init__(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
            original(self, as_sim(device), *args, **kwargs)

        return __init__

    def query(original: Callable[..., Any]) -> Callable[..., Any]:
        # `torch.is_autocast_enabled()` with no device asks about CUDA.
        @functools.wraps(original)
        def ask(device_type: Any = "cuda") -> Any:
            return original(as_sim(device_type))

        return ask

    def gpu_dtype(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def ask() -> torch.dtype:
            return torch.get_autocast_dtype(sim_type)

        return ask

    return [
        *_cuda_module_patches(),
        (torch, "Generator", _generator_factory),
        (torch, "load", lambda original: _load_onto_sim(original, as_sim, sim_type, to_sim)),
        (autocast, "__init__", autocast_init),
        (GradScaler, "__init__", scaler_init),
        (torch, "is_autocast_enabled", query),
        (torch, "get_autocast_dtype", query),
        (torch, "get_autocast_gpu_dtype", gpu_dtype),
    ]


def _generator_factory(original: type) -> type:
    class GeneratorMeta(type):
        def __call__(cls, device: Any = "cpu") -> Any:
            named = device.type if isinstance(device, torch.device) else str(device)
            # The simulated device computes on the CPU, so its random numbers come from there.
            return original("cpu") if named.split(":")[0] in ("cuda", "vgpu") else original(device)

        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, original)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, original)

    return GeneratorMeta("Generator", (), {"__doc__": original.__doc__, "__module__": "torch"})


_CUDA_ON_CPU = "Attempting to deserialize object on a CUDA device"


def _load_onto_sim(
    original: Callable[..., Any], as_sim: Callable[[str], str], sim_type: str, to_sim: Callable[[Any], Any]
) -> Callable[..., Any]:
    def wants_sim(location: Any) -> bool:
        if isinstance(location, (str, torch.device)):
            return as_sim(torch.device(location).type) == sim_type
        if isinstance(location, dict):
            return any(wants_sim(v) for v in location.values())
        return False

    @functools.wraps(original)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if map_location is not None and not wants_sim(map_location):
            return original(f, map_location, *args, **kwargs)
        if map_location is None:
            position = f.tell() if hasattr(f, "tell") and hasattr(f, "seek") else None
            try:
                return original(f, None, *args, **kwargs)
            except RuntimeError as exc:
                if _CUDA_ON_CPU not in str(exc):
                    raise
            if position is not None:
                f.seek(position)
        # What a GPU does with this file: every tensor on the device.
        return _onto(original(f, "cpu", *args, **kwargs), to_sim, sim_type)

    return load


def _onto(value: Any, to_sim: Callable[[Any], Any], sim_type: str) -> Any:
    if isinstance(value, torch.Tensor):
        moved = to_sim(value)
        return torch.nn.Parameter(moved, value.requires_grad) if isinstance(value, torch.nn.Parameter) else moved
    if isinstance(value, torch.nn.Module):
        return value.to(sim_type)
    if isinstance(value, dict):
        for key in list(value):
            value[key] = _onto(value[key], to_sim, sim_type)
        return value
    if isinstance(value, list):
        return [_onto(v, to_sim, sim_type) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_onto(v, to_sim, sim_type) for v in value)
    return value


_GIB = 1 << 30
SIMULATED_GPU_NAME = "devicelint simulated GPU"


def _cuda_module_patches() -> list[Patch]:
    """`torch.cuda` as it answers on a machine with one GPU."""
    properties = SimpleNamespace(
        name=SIMULATED_GPU_NAME,
        major=8,
        minor=0,
        total_memory=80 * _GIB,
        multi_processor_count=108,
        is_integrated=False,
        is_multi_gpu_board=False,
    )

    def answer(value: Any) -> Callable[[Any], Callable[..., Any]]:
        return lambda original: functools.wraps(original)(lambda *args, **kwargs: value)

    @contextlib.contextmanager
    def no_op_context(*args: Any, **kwargs: Any) -> Iterator[None]:
        yield

    cuda = torch.cuda
    answers: dict[str, Any] = {
        "is_available": True,
        "is_initialized": True,
        "device_count": 1,
        "current_device": 0,
        "set_device": None,
        "init": None,
        "synchronize": None,
        "empty_cache": None,
        "ipc_collect": None,
        "reset_peak_memory_stats": None,
        "reset_max_memory_allocated": None,
        "reset_accumulated_memory_stats": None,
        "manual_seed": None,
        "manual_seed_all": None,
        "seed": None,
        "seed_all": None,
        "get_device_name": SIMULATED_GPU_NAME,
        "get_device_capability": (8, 0),
        "get_device_properties": properties,
        "is_bf16_supported": True,
        "memory_allocated": 0,
        "max_memory_allocated": 0,
        "memory_reserved": 0,
        "max_memory_reserved": 0,
        "memory_stats": {},
        "mem_get_info": (80 * _GIB, 80 * _GIB),
        "get_arch_list": ["sm_80"],
    }
    patches: list[Patch] = [(cuda, name, answer(value)) for name, value in answers.items() if hasattr(cuda, name)]
    patches.append((cuda, "get_rng_state", lambda original: lambda device="cuda": torch.get_rng_state()))
    patches.append((cuda, "set_rng_state", lambda original: lambda state, device="cuda": torch.set_rng_state(state)))
    patches.append((cuda, "device", lambda original: no_op_context))
    return patches
