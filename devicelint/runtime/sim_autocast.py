"""`torch.autocast` for the simulated device, casting as CUDA's autocast does.

torch registers autocast kernels for CUDA, CPU and a few others, but none for PrivateUse1, so
under `autocast("vgpu")` every op would fail. This module registers them: the ops that CUDA
autocast lists, with CUDA's policy for each (run in the autocast dtype, run in float32, or
promote to the widest input), and a fallthrough for every other op. The kernels sit above
autograd, as CUDA's do, so the casts are part of the graph and backward sees the same dtypes
a GPU run would.

Only tensors of the simulated device are cast (as CUDA casts only CUDA tensors), and the
kernels run only while autocast is enabled for the simulated device: nothing else changes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)  # type: ignore[attr-defined]  # torch's stubs omit this key
_to_copy = torch.ops.aten._to_copy.default

# CUDA autocast's policies, by aten op name (every overload of a name shares its policy).
LOWER_PRECISION = frozenset(
    """_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d
    conv_transpose3d convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear
    addbmm baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell
    lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention
    scaled_dot_product_attention""".split()
)
FLOAT32 = frozenset(
    """acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus
    layer_norm native_layer_norm group_norm rms_norm frobenius_norm nuclear_norm cosine_similarity
    poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss
    smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss
    triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm
    logsumexp upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d
    _upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d upsample_linear1d
    upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d upsample_bicubic2d
    _upsample_bicubic2d_aa prod softmax log_softmax cumprod cumsum linalg_vector_norm
    linalg_matrix_norm sum norm""".split()
)
PROMOTE = frozenset(
    "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add".split()
)
BANNED = frozenset({"binary_cross_entropy"})
_BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss. (raised by devicelint's simulated autocast, as CUDA's raises it)"
)

_libraries: list[torch.library.Library] = []
_noted: set[str] = set()


class SimulationNote(UserWarning):
    """Something the simulated device does differently from a GPU (said once per op)."""


def register(sim_type: str, is_sim: Callable[[torch.Tensor], bool]) -> None:
    """Register the simulated device's autocast kernels (once per process)."""
    if _libraries:
        return
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, _KEY)
    kernels = torch.library.Library("aten", "IMPL")
    for name in _ops_cuda_autocasts():
        base = name.split(".", 1)[0]
        op = _overload(name)
        if op is None:
            continue
        if base in BANNED:
            kernels.impl(name, _banned, _KEY)
        elif base in LOWER_PRECISION or base in FLOAT32 or base in PROMOTE:
            kernels.impl(name, _kernel(op, base, sim_type, is_sim), _KEY)
    _libraries.extend((fallback, kernels))


def _ops_cuda_autocasts() -> list[str]:
    """The aten ops CUDA's autocast has a kernel for (its list, read from the dispatcher)."""
    names = []
    for qualified in torch._C._dispatch_get_all_op_names():
        if qualified.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "AutocastCUDA"):
            names.append(qualified[len("aten::") :])
    return sorted(names)


def _overload(name: str) -> Any:
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def _banned(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(_BANNED_MESSAGE)


def _kernel(op: Any, base: str, sim_type: str, is_sim: Callable[[torch.Tensor], bool]) -> Callable[..., Any]:
    def eligible(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 and is_sim(t)

    def cast(value: Any, dtype: torch.dtype) -> Any:
        if eligible(value) and value.dtype != dtype:
            return _to_copy(value, dtype=dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(cast(v, dtype) for v in value)
        return value

    def run(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            dtype: torch.dtype | None
            if base in LOWER_PRECISION:
                dtype = torch.get_autocast_dtype(sim_type)
            elif base in FLOAT32:
                dtype = torch.float32
            else:
                dtype = _widest([*args, *kwargs.values()], eligible)
                if dtype is None:
                    return op(*args, **kwargs)
            cast_args = [cast(a, dtype) for a in args]
            cast_kwargs = {k: cast(v, dtype) for k, v in kwargs.items()}
            try:
                return op(*cast_args, **cast_kwargs)
            except (RuntimeError, NotImplementedError) as exc:
                if "not implemented for" not in str(exc) or dtype == torch.float32:
                    raise
            # The CPU that computes for the simulated device lacks this op in `dtype`: compute
            # in float32 and hand back `dtype`, as the GPU would.
            _note_once(op, dtype)
            out = op(*[cast(a, torch.float32) for a in args], **{k: cast(v, torch.float32) for k, v in kwargs.items()})
            return cast(out, dtype)

    return run


def _widest(values: list[Any], eligible: Callable[[Any], bool]) -> torch.dtype | None:
    found: torch.dtype | None = None
    for value in values:
        items = value if isinstance(value, (list, tuple)) else (value,)
        for t in items:
            if eligible(t):
                found = t.dtype if found is None else torch.promote_types(found, t.dtype)
    return found


def _note_once(op: Any, dtype: torch.dtype) -> None:
    name = str(op)
    if name in _noted:
        return
    _noted.add(name)
    warnings.warn(
        SimulationNote(
            f"devicelint's simulated autocast ran `{name}` in float32 and returned {dtype}: the CPU "
            f"that computes for the simulated GPU has no {dtype} kernel for it (numbers differ slightly "
            "from a GPU's; devices and dtypes are as on a GPU)"
        ),
        stacklevel=2,
    )
