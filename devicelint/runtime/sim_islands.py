"""Whole recurrent layers run as one CPU op on the simulated device.

On a GPU, `nn.LSTM` and `nn.GRU` are one cuDNN call. On the simulated device torch takes its
generic path instead: a fused cell kernel per time step and layer (`sim_kernels`), each a trip
through Python, which made a small LSTM language model 30 times slower than on the CPU. Here
the whole layer runs on the CPU tensors behind its arguments, as one autograd node whose
backward is the CPU graph's: the same numbers, a few Python calls instead of thousands.

Only when every tensor argument is already on the simulated device (a packed sequence's batch
sizes stay on the CPU, as on a GPU): a CPU hidden state meeting device weights is a bug, and
that call takes the ordinary path, where torch raises as CUDA does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils._python_dispatch import _disable_current_modes

if TYPE_CHECKING:
    from devicelint.runtime.simulate import SimTensor

RECURRENT = frozenset({torch._VF.lstm, torch._VF.gru, torch._VF.rnn_tanh, torch._VF.rnn_relu})


def run_on_cpu(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], sim_tensor: type, sim_type: str) -> Any:
    """`func(*args, **kwargs)` as one CPU op, or NotImplemented when it must take the usual path."""
    tensors: list[torch.Tensor] = []
    structure = _flatten(args, tensors)
    if kwargs or not tensors or not all(type(t) is sim_tensor or _host_sizes(t) for t in tensors):
        return NotImplemented
    if torch.is_autocast_enabled(sim_type):
        return NotImplemented  # the per-step path casts as autocast does
    outputs = _OnCpu.apply(func, structure, sim_tensor, *tensors)  # type: ignore[no-untyped-call]  # torch's Function.apply is unannotated
    return outputs if len(outputs) > 1 else outputs[0]


class _OnCpu(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, func: Any, structure: Any, sim_tensor: type, *tensors: torch.Tensor) -> tuple[Any, ...]:
        inner = [
            cast("SimTensor", t).inner.detach().requires_grad_(t.requires_grad) if type(t) is sim_tensor else t
            for t in tensors
        ]
        with _disable_current_modes(), torch.enable_grad():
            out = func(*_rebuild(structure, iter(inner)))
        outputs = out if isinstance(out, tuple) else (out,)
        ctx.inner_inputs = inner
        ctx.inner_outputs = outputs
        ctx.sim_tensor = sim_tensor
        return tuple(sim_tensor(o.detach()) for o in outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        wanted = [i for i, t in enumerate(ctx.inner_inputs) if t.requires_grad]
        pairs = [
            (out, grad.inner if isinstance(grad, ctx.sim_tensor) else grad)
            for out, grad in zip(ctx.inner_outputs, grads)
            if grad is not None and out.requires_grad
        ]
        found: tuple[torch.Tensor | None, ...] = ()
        if wanted and pairs:
            with _disable_current_modes():
                found = torch.autograd.grad(
                    [o for o, _ in pairs],
                    [ctx.inner_inputs[i] for i in wanted],
                    [g for _, g in pairs],
                    allow_unused=True,
                )
        result: list[Any] = [None] * len(ctx.inner_inputs)
        for index, grad in zip(wanted, found):
            result[index] = ctx.sim_tensor(grad) if grad is not None else None
        return (None, None, None, *result)


def _host_sizes(tensor: torch.Tensor) -> bool:
    """A packed sequence's batch sizes: integers that stay on the CPU on a GPU too."""
    return tensor.device.type == "cpu" and not tensor.is_floating_point() and tensor.dim() == 1


def _flatten(value: Any, tensors: list[torch.Tensor]) -> Any:
    """`value` with each tensor replaced by its index in `tensors` (one level into lists/tuples)."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _Slot(len(tensors) - 1)
    if isinstance(value, (list, tuple)):
        return type(value)(_flatten(v, tensors) for v in value)
    return value


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _rebuild(structure: Any, tensors: Any) -> Any:
    if isinstance(structure, _Slot):
        return next(tensors)
    if isinstance(structure, (list, tuple)):
        return type(structure)(_rebuild(v, tensors) for v in structure)
    return structure
