"""The values of the placement analysis and the torch vocabulary it reads.

A `Fact` says where a value lives. Kinds:

- `cpu-tensor`: created on the CPU (a factory without `device=`, `.cpu()`, a DataLoader batch).
- `device-tensor`: on the accelerator (`where="accelerator"`: moved with `.cuda()`/`.to(device)`,
  output of a moved model) or wherever the inputs are (`where="follows"`: `forward`'s inputs,
  parameters, anything computed from them).
- `module`: an `nn.Module` instance (moves in place).
- `device`: a `torch.device`, a device string, `x.device`, `cfg.device`.
- `unknown`: anything else. Unknown never produces a finding on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

CPU = "cpu-tensor"
DEVICE = "device-tensor"
MODULE = "module"
DEVICE_VALUE = "device"
UNKNOWN = "unknown"

ACCELERATOR = "accelerator"
FOLLOWS = "follows"


@dataclass(frozen=True)
class Fact:
    """Where one value lives, and where that knowledge came from."""

    kind: str = UNKNOWN
    # "accelerator" (certainly on a GPU when one is used), "follows" (the inputs' device),
    # "cpu" (an explicit CPU device), or None.
    where: str | None = None
    # The expression that created a CPU tensor (a factory call, a DataLoader loop target).
    origin: cst.CSTNode | None = None
    # The factory's qualified name (`torch.arange`) for CPU tensors made by a factory.
    factory: str | None = None
    # A 0-dim CPU tensor (`torch.tensor(0.)`): PyTorch lets these meet device tensors as inputs.
    scalar: bool = False
    # A DataLoader batch (or part of one) that was never moved.
    batch: bool = False
    # Source text of an expression naming the device this value lives on (`x.device`, `device`).
    device_expr: str | None = None
    # Element facts of a tuple/list literal.
    elements: tuple["Fact", ...] | None = None

    @property
    def is_tensor(self) -> bool:
        return self.kind in (CPU, DEVICE)

    @property
    def from_factory(self) -> bool:
        return self.kind == CPU and self.factory is not None and not self.batch


UNKNOWN_FACT = Fact()

# torch factories that create a tensor on the default (CPU) device unless given `device=`.
FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye",
        "rand", "randn", "randint", "randperm", "empty_strided", "tril_indices", "triu_indices",
        "normal", "tensor", "as_tensor", "asarray", "from_numpy", "scalar_tensor",
        "FloatTensor", "LongTensor", "BoolTensor", "ByteTensor", "IntTensor", "DoubleTensor",
        "HalfTensor", "Tensor",
    }
)
# Factories whose first argument may itself be a tensor (then the result follows it).
DATA_FACTORIES = frozenset({"tensor", "as_tensor", "asarray", "scalar_tensor"})
LEGACY_CONSTRUCTORS = frozenset(
    {"FloatTensor", "LongTensor", "BoolTensor", "ByteTensor", "IntTensor", "DoubleTensor", "HalfTensor", "Tensor"}
)
LIKE_FACTORIES = frozenset(
    {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
)
NEW_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# Methods that return a tensor on the receiver's device.
PRESERVING_METHODS = frozenset(
    {
        "float", "double", "half", "bfloat16", "long", "int", "bool", "byte", "short", "char",
        "tril", "triu", "view", "view_as", "reshape", "reshape_as", "unsqueeze", "squeeze", "expand",
        "expand_as", "repeat", "repeat_interleave", "transpose", "permute", "t", "flip", "roll",
        "contiguous", "clone", "detach", "abs", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos",
        "sum", "mean", "cumsum", "cumprod", "max", "min", "argmax", "argmin", "softmax", "log_softmax",
        "sigmoid", "tanh", "relu", "clamp", "clamp_min", "clamp_max", "flatten", "unflatten", "narrow",
        "masked_fill", "masked_fill_", "fill_", "zero_", "normal_", "uniform_", "add", "sub", "mul",
        "div", "pow", "matmul", "mm", "bmm", "eq", "ne", "lt", "gt", "le", "ge", "logical_not",
        "logical_and", "logical_or", "type", "to_dense", "requires_grad_", "triu_", "tril_", "masked_select",
        "gather", "index_select", "where", "sort", "topk", "cat", "any", "all", "norm", "prod", "std",
        "var", "round", "floor", "ceil", "sign", "reciprocal", "square", "unbind", "split", "chunk",
        "select", "diag", "diagonal", "outer", "bitwise_not", "nonzero", "long_", "expand_dims", "type_as",
        "add_", "sub_", "mul_", "div_", "fill_diagonal_", "index_fill", "scatter", "scatter_add",
        "index_add", "index_add_", "scatter_", "scatter_add_", "copy_", "pin_memory",
    }
)
# Methods of which every tensor argument must be on the receiver's device.
MEETING_METHODS = frozenset(
    {
        "add", "sub", "mul", "div", "matmul", "mm", "bmm", "masked_fill", "masked_fill_", "masked_scatter",
        "masked_select", "where", "gather", "scatter", "scatter_", "scatter_add", "scatter_add_",
        "index_select", "index_add", "index_add_", "index_fill", "index_copy", "add_", "sub_", "mul_",
        "div_", "eq", "ne", "lt", "gt", "le", "ge", "maximum", "minimum", "pow", "dot", "logical_and",
        "logical_or", "lerp", "outer", "addmm", "baddbmm",
    }
)
# In-place methods: the receiver is the destination.
INPLACE_METHODS = frozenset({"add_", "sub_", "mul_", "div_", "masked_fill_", "index_add_", "scatter_", "scatter_add_"})
# Module methods that move a module in place (and a tensor out of place).
MOVE_METHODS = frozenset({"to", "cuda", "cpu", "xpu", "mps"})
# torch functions that do not return a tensor (their result is not a placement fact).
NON_TENSOR_FUNCTIONS = frozenset(
    {
        "is_tensor", "numel", "is_floating_point", "is_complex", "is_nonzero", "equal", "allclose",
        "get_default_dtype", "is_grad_enabled", "manual_seed", "set_grad_enabled", "no_grad", "device",
        "dtype", "Size", "finfo", "iinfo", "is_storage", "typename", "save", "load", "compile",
        "broadcast_shapes", "result_type", "promote_types", "can_cast", "is_same_size", "get_device",
    }
)
TENSOR_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
# torch functions whose tensor arguments may sit on different devices (copies, indices).
CROSS_DEVICE_FUNCTIONS = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray"})

# nn classes without parameters or buffers: a CPU input just runs on the CPU.
PARAMETER_FREE_MODULES = frozenset(
    {
        "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Softmin",
        "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "Flatten",
        "Unflatten", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
        "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Upsample", "PixelShuffle", "PixelUnshuffle",
        "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d",
        "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "Softplus", "LeakyReLU", "ELU",
        "SELU", "CELU", "Hardtanh", "Hardswish", "Hardsigmoid", "Softsign", "Tanhshrink",
        "Threshold", "GLU", "LogSigmoid", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
        "KLDivLoss", "CosineSimilarity", "PairwiseDistance", "ChannelShuffle", "Fold", "Unfold",
    }
)
# Classes under torch.nn that are not modules.
NN_NON_MODULES = frozenset({"Parameter", "UninitializedParameter", "Buffer", "ParameterList", "ParameterDict"})

FORWARD_METHODS = frozenset(
    {
        "forward", "__call__", "training_step", "validation_step", "test_step", "predict_step",
        "shared_step", "_shared_step", "_step", "step", "compute_loss", "loss",
    }
)
# Attribute and method uses that only a tensor has (numpy arrays and modules lack them).
TENSOR_ONLY_METHODS = frozenset(
    {
        "size", "view", "unsqueeze", "permute", "contiguous", "masked_fill", "masked_fill_", "dim",
        "numel", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "type_as", "bmm",
        "matmul", "softmax", "log_softmax", "expand", "expand_as", "view_as", "transpose", "item",
    }
)
TENSOR_ANNOTATIONS = frozenset(
    {"Tensor", "torch.Tensor", "FloatTensor", "LongTensor", "BoolTensor", "torch.FloatTensor", "torch.LongTensor",
     "torch.BoolTensor"}
)
# Words that, in an `if` test, make a branch device-conditional (`if x.is_cuda:`).
DEVICE_GUARD_WORDS = ("cuda", "gpu", "device", "is_available", "accelerator", "mps", "cpu", "xla", "npu", "hpu", "xpu")
LOSS_CALLABLE_NAMES = frozenset({"criterion", "loss_fn", "loss_func", "lossfn", "loss_function", "criterion_fn"})
MODEL_NAMES = frozenset({"model", "net", "network", "classifier"})
ACCELERATOR_STRINGS = ("cuda", "mps", "xpu", "npu", "hpu", "xla")
