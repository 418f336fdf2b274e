"""The `torch.vgpu` module and hooks torch asks a registered backend for.

Autocast asks it which dtypes it can cast to, activation checkpointing saves and restores its
random state, and `torch.random.fork_rng` enters its `device()` context. The simulated device
computes on the CPU, so its random state is the CPU generator's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class SimBackendModule:
    """What torch looks up as `torch.vgpu.<name>` for the simulated device."""

    # Set while a simulated `check()` region runs. Outside one, `torch.accelerator.is_available()`
    # is False again, so code outside the region (`DataLoader(pin_memory=True)`) behaves as on
    # this CPU-only machine.
    in_region = False

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return SimBackendModule.in_region

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: Any) -> None:
        pass

    def synchronize(self, device: Any = None) -> None:
        pass

    def _is_in_bad_fork(self) -> bool:
        return False

    @contextlib.contextmanager
    def device(self, device: Any) -> Iterator[None]:
        yield

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    def get_rng_state(self, device: Any = "vgpu") -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "vgpu") -> None:
        torch.set_rng_state(new_state)

    def manual_seed(self, seed: int) -> None:
        pass  # the CPU generator is seeded by `torch.manual_seed` itself

    def manual_seed_all(self, seed: int) -> None:
        pass

    def initial_seed(self) -> int:
        return torch.initial_seed()
