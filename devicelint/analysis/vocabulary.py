"""Words of the torch vocabulary that code outside the LibCST analysis needs too (the project
index reads modules with `ast`, and a fully cached run must not import LibCST): plain constants."""

import re

MODULE_BASES = frozenset(
    {
        "torch.nn.Module",
        "torch.nn.modules.module.Module",
        "torch.nn.Sequential",
        "torch.nn.ModuleList",
        "torch.nn.ModuleDict",
        "pytorch_lightning.LightningModule",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "pytorch_lightning.core.LightningModule",
        "lightning.pytorch.core.LightningModule",
        "transformers.PreTrainedModel",
        "transformers.modeling_utils.PreTrainedModel",
    }
)
# Bases recognised by their last name when the import is not visible (a project's own
# `from .base import BaseModel` is unknowable, but `LightningModule` is not ambiguous).
MODULE_BASE_SUFFIXES = frozenset({"Module", "LightningModule", "PreTrainedModel"})
# Library builders that return a model with parameters on the CPU, by qualified-name prefix
# (`torchvision.models.resnet50(...)`, `timm.create_model(...)`; not `get_weights`/`list_models`).
CPU_MODEL_BUILDERS = ("torchvision.models.", "timm.create_model", "timm.models.create_model")


def is_cpu_model_builder(qualified: str) -> bool:
    """`torchvision.models.resnet50`, `timm.create_model`: a call of it builds a model on the CPU."""
    last = qualified.rsplit(".", 1)[-1]
    return qualified.startswith(CPU_MODEL_BUILDERS) and last[:1].islower() and not last.startswith(("get_", "list_"))


# Tensor methods known to return a tensor on the receiver's device. The engine keeps any tensor
# method's result where its receiver is (see NON_TENSOR_METHODS); rules read this list as
# evidence that a receiver is a tensor at all.
PRESERVING_METHODS = frozenset(
    {
        "float",
        "double",
        "half",
        "bfloat16",
        "long",
        "int",
        "bool",
        "byte",
        "short",
        "char",
        "tril",
        "triu",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "unsqueeze",
        "squeeze",
        "expand",
        "expand_as",
        "repeat",
        "repeat_interleave",
        "transpose",
        "permute",
        "t",
        "flip",
        "roll",
        "contiguous",
        "clone",
        "detach",
        "abs",
        "neg",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "sin",
        "cos",
        "sum",
        "mean",
        "cumsum",
        "cumprod",
        "max",
        "min",
        "argmax",
        "argmin",
        "softmax",
        "log_softmax",
        "sigmoid",
        "tanh",
        "relu",
        "clamp",
        "clamp_min",
        "clamp_max",
        "flatten",
        "unflatten",
        "narrow",
        "masked_fill",
        "masked_fill_",
        "fill_",
        "zero_",
        "normal_",
        "uniform_",
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "matmul",
        "mm",
        "bmm",
        "eq",
        "ne",
        "lt",
        "gt",
        "le",
        "ge",
        "logical_not",
        "logical_and",
        "logical_or",
        "type",
        "to_dense",
        "requires_grad_",
        "triu_",
        "tril_",
        "masked_select",
        "gather",
        "index_select",
        "where",
        "sort",
        "topk",
        "cat",
        "any",
        "all",
        "norm",
        "prod",
        "std",
        "var",
        "round",
        "floor",
        "ceil",
        "sign",
        "reciprocal",
        "square",
        "unbind",
        "split",
        "chunk",
        "select",
        "diag",
        "diagonal",
        "outer",
        "bitwise_not",
        "nonzero",
        "long_",
        "expand_dims",
        "type_as",
        "add_",
        "sub_",
        "mul_",
        "div_",
        "fill_diagonal_",
        "index_fill",
        "scatter",
        "scatter_add",
        "index_add",
        "index_add_",
        "scatter_",
        "scatter_add_",
        "copy_",
        "pin_memory",
    }
)

# torch factories that create a tensor on the default (CPU) device unless given `device=`.
WINDOW_FACTORIES = frozenset({"hann_window", "hamming_window", "bartlett_window", "blackman_window", "kaiser_window"})
FACTORIES = frozenset(
    {
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "range",
        "linspace",
        "logspace",
        "eye",
        "rand",
        "randn",
        "randint",
        "randperm",
        "empty_strided",
        "tril_indices",
        "triu_indices",
        "normal",
        "tensor",
        "as_tensor",
        "asarray",
        "from_numpy",
        "scalar_tensor",
        "FloatTensor",
        "LongTensor",
        "BoolTensor",
        "ByteTensor",
        "IntTensor",
        "DoubleTensor",
        "HalfTensor",
        "Tensor",
        # the STFT windows, built on the CPU like any factory (`torch.hann_window(win_length)`)
        *WINDOW_FACTORIES,
    }
)
# Factories whose first argument may itself be a tensor (then the result follows it).
DATA_FACTORIES = frozenset({"tensor", "as_tensor", "asarray", "scalar_tensor"})
LEGACY_CONSTRUCTORS = frozenset(
    {"FloatTensor", "LongTensor", "BoolTensor", "ByteTensor", "IntTensor", "DoubleTensor", "HalfTensor", "Tensor"}
)
# Factories that take `device=` in every torch devicelint supports and whose result does not
# depend on where an argument is: `torch.zeros(n).to(device)` can become one call (DL403).
SIZED_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace", "eye"}
)


# torch.distributed collectives and point-to-point calls that NCCL runs on GPU tensors only.
DIST_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "reduce",
        "broadcast",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "gather",
        "scatter",
        "all_to_all",
        "all_to_all_single",
        "send",
        "recv",
        "isend",
        "irecv",
    }
)
# Arguments PyTorch rejects on an accelerator whatever device the other arguments are on:
# (qualified name, position after the callee's own arguments, keyword).
HOST_ONLY_ARGUMENTS: dict[str, tuple[int, str]] = {
    "torch.nn.utils.rnn.pack_padded_sequence": (1, "lengths"),
    # a generator's state is a CPU ByteTensor, whichever device the generator draws on
    "torch.set_rng_state": (0, "new_state"),
    "torch.random.set_rng_state": (0, "new_state"),
    "torch.cuda.set_rng_state": (0, "new_state"),
    "torch.cuda.random.set_rng_state": (0, "new_state"),
}


# Command-line options that name a GPU index (`--device`, `--gpu-id`; DL119's).
GPU_INDEX_OPTION = re.compile(r"^--(device|gpu|gpu[-_]id|device[-_]id|cuda[-_]device|gpu[-_]index|device[-_]index)$")
# What makes an index-less `.cuda()` follow the chosen GPU after all.
SELECTS_DEVICE = ("set_device", "CUDA_VISIBLE_DEVICES", "torch.cuda.device(", "set_device_index")


def names_a_loss(class_name: str) -> bool:
    """`ComputeLossOTA`, `YoloLoss`, `SetCriterion`: a class named for computing a loss, which is
    handed the model's outputs and the batch's targets, so device code even when it is no module."""
    return "Loss" in class_name or "Criterion" in class_name
