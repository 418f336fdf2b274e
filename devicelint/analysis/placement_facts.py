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

from devicelint.analysis.devices import DTYPE_NAMES, DeviceId
from devicelint.analysis.names import literal_value
from devicelint.analysis.vocabulary import DATA_FACTORIES as DATA_FACTORIES
from devicelint.analysis.vocabulary import FACTORIES as FACTORIES
from devicelint.analysis.vocabulary import LEGACY_CONSTRUCTORS as LEGACY_CONSTRUCTORS
from devicelint.analysis.vocabulary import PRESERVING_METHODS as PRESERVING_METHODS

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
    # What a tokenizer or processor returns with `return_tensors="pt"` (a `BatchEncoding` of CPU
    # tensors), never moved.
    encoded: bool = False
    # Source text of an expression naming the device this value lives on (`x.device`, `device`).
    device_expr: str | None = None
    # Element facts of a tuple/list literal.
    elements: tuple[Fact, ...] | None = None
    # Named parts of a dict with string keys or of a dataclass/NamedTuple instance of the file:
    # `batch["mask"]` and `cfg.mask` read them.
    fields: tuple[tuple[str, Fact], ...] | None = None
    # An instance of a plain (not `nn.Module`) class of the file, by class name: calls of its
    # methods are followed with their arguments (`bank.update(preds, y)`).
    instance: str | None = None
    # For such an instance: what its constructor left on it from the arguments this
    # construction gave (`RandInt(lo=limit)` with `limit` on the device: `self.lo` there), by
    # attribute; only attributes no other method rebinds. Its methods start with them.
    state: tuple[tuple[str, Fact], ...] | None = None
    # A CPU tensor that another path (an `if` branch, a conditional expression) replaces with a
    # device tensor: its device depends on the path, so even a 0-dim one is worth reporting.
    conflict: bool = False
    # A boolean mask (a comparison's result): indexing a device tensor with it on the CPU fails.
    mask: bool = False
    # Which device, when the code states it (`"cuda:1"`, `.cuda(1)`): for device values, tensors
    # and modules alike. `where` says whether it is an accelerator; this says which one.
    device: DeviceId | None = None
    # A host copy the code makes on purpose (`x.cpu()`, `x.to("cpu")` of a tensor): certainly
    # on the CPU, wherever the tensor it copies was. `origin` is the copying call.
    copied: bool = False
    # For device values: "object" (a `torch.device`: built with `torch.device(...)`, a tensor's
    # or module's `.device`) or "string" (`"cuda:0"`, `f"cuda:{rank}"`); None when not shown.
    spelled: str | None = None
    # A list whose elements are all alike (a comprehension, `list(t)` of a tensor's rows): the
    # one element fact answers every index, even one past what the code shows.
    alike: bool = False
    # A part of the tuple a call returns that the engine cannot see into (a module handed in, of
    # no class the file shows): placed where the call's inputs are by a guess, which a rule that
    # needs the part to be a tensor (`pack_padded_sequence`'s lengths) does not take.
    guessed: bool = False
    # A value a name kept from before the code moved it (`prompt = x` before `x = x.to(device)`,
    # `analysis/stale_aliases.py`): the unmoved tensor, taken for a CPU one. `origin` is the
    # statement that bound the name.
    left_behind: bool = False

    def __eq__(self, other: object) -> bool:
        # The engine compares facts (mostly with UNKNOWN_FACT) hundreds of thousands of times
        # per corpus; the generated method builds two tuples of every field each time. This is
        # the same equality, field by field, stopping at the first difference.
        if self is other:
            return True
        if not isinstance(other, Fact):
            return NotImplemented
        o = other
        return (
            self.kind == o.kind
            and self.where == o.where
            and self.origin == o.origin
            and self.factory == o.factory
            and self.scalar == o.scalar
            and self.batch == o.batch
            and self.encoded == o.encoded
            and self.device_expr == o.device_expr
            and self.elements == o.elements
            and self.fields == o.fields
            and self.instance == o.instance
            and self.state == o.state
            and self.conflict == o.conflict
            and self.mask == o.mask
            and self.device == o.device
            and self.copied == o.copied
            and self.spelled == o.spelled
            and self.alike == o.alike
            and self.guessed == o.guessed
            and self.left_behind == o.left_behind
        )

    @property
    def is_tensor(self) -> bool:
        return self.kind in (CPU, DEVICE)

    def field(self, key: str) -> Fact:
        """The fact of one named part (unknown when it was never stated)."""
        return next((fact for name, fact in self.fields or () if name == key), UNKNOWN_FACT)

    def with_field(self, key: str, fact: Fact) -> Fact:
        kept = tuple((name, old) for name, old in self.fields or () if name != key)
        return Fact(UNKNOWN, fields=kept + ((key, fact),))

    @property
    def from_factory(self) -> bool:
        return self.kind == CPU and self.factory is not None and not self.batch


UNKNOWN_FACT = Fact()


def is_legacy_cuda_constructor(qualified: str | None) -> bool:
    """`torch.cuda.FloatTensor`, `torch.cuda.LongTensor`...: legacy constructors that build a
    tensor on the current CUDA device."""
    return (
        qualified is not None
        and qualified.startswith("torch.cuda.")
        and qualified[len("torch.cuda.") :] in LEGACY_CONSTRUCTORS
    )


LIKE_FACTORIES = frozenset(
    {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
)
NEW_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# Methods of which every tensor argument must be on the receiver's device.
MEETING_METHODS = frozenset(
    {
        "add",
        "sub",
        "mul",
        "div",
        "matmul",
        "mm",
        "bmm",
        "masked_fill",
        "masked_fill_",
        "masked_scatter",
        "masked_select",
        "where",
        "gather",
        "scatter",
        "scatter_",
        "scatter_add",
        "scatter_add_",
        "index_select",
        "index_add",
        "index_add_",
        "index_fill",
        "index_copy",
        "add_",
        "sub_",
        "mul_",
        "div_",
        "eq",
        "ne",
        "lt",
        "gt",
        "le",
        "ge",
        "maximum",
        "minimum",
        "pow",
        "dot",
        "logical_and",
        "logical_or",
        "lerp",
        "outer",
        "addmm",
        "baddbmm",
    }
)
# Tensor methods whose result is not a tensor (or not where the receiver is); every other tensor
# method keeps its result on the receiver's device.
NON_TENSOR_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "size",
        "numel",
        "nelement",
        "dim",
        "ndimension",
        "data_ptr",
        "element_size",
        "stride",
        "storage",
        "untyped_storage",
        "storage_offset",
        "get_device",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "is_pinned",
        "is_shared",
        "equal",
        "allclose",
        "backward",
        "register_hook",
        "tobytes",
        "__len__",
        "__repr__",
        "__format__",
        "share_memory_",
        "record_stream",
        "is_set_to",
        "has_names",
        "retain_grad",
    }
)
# Tensor methods whose result may have more elements than a 0-dim receiver.
SHAPE_GROWING_METHODS = frozenset(
    {
        "expand",
        "expand_as",
        "repeat",
        "repeat_interleave",
        "view",
        "reshape",
        "reshape_as",
        "unsqueeze",
        "broadcast_to",
        "tile",
        "new_zeros",
        "new_ones",
        "new_full",
        "new_empty",
        "new_tensor",
    }
)
# Module methods that return the module itself (`model.cuda().eval()`).
MODULE_SELF_METHODS = frozenset(
    {"eval", "train", "requires_grad_", "half", "float", "double", "bfloat16", "to_empty", "share_memory", "zero_grad"}
)
# Module methods whose result is not a device tensor computed by the model.
MODULE_NON_TENSOR_METHODS = frozenset(
    {
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "children",
        "named_children",
        "modules",
        "named_modules",
        "state_dict",
        "load_state_dict",
        "apply",
        "register_buffer",
        "register_parameter",
        "register_module",
        "add_module",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "get_submodule",
        "get_parameter",
        "extra_repr",
        "save_pretrained",
        "num_parameters",
        "get_input_embeddings",
        "get_output_embeddings",
    }
)
# In-place methods: the receiver is the destination.
INPLACE_METHODS = frozenset({"add_", "sub_", "mul_", "div_", "masked_fill_", "index_add_", "scatter_", "scatter_add_"})
# Module methods that move a module in place (and a tensor out of place).
MOVE_METHODS = frozenset({"to", "cuda", "cpu", "xpu", "mps"})


def move_call(node: cst.CSTNode) -> str | None:
    """The method when `node` is a device move (`x.to(d)`, `x.cuda()`, `x.cpu()`...), else None.
    The one recogniser of moves: `x.to()` with no argument moves nothing."""
    if not (type(node) is cst.Call and type(node.func) is cst.Attribute):
        return None
    method = node.func.attr.value
    if method not in MOVE_METHODS or (method == "to" and not node.args):
        return None
    return method


def moves_to_accelerator(node: cst.CSTNode) -> bool:
    """A move that may target an accelerator: not `.cpu()`, not `.to("cpu")`, and not a cast
    that names only a dtype (`.to(x.dtype)`, `.to(torch.float16)`, `.to(dtype=...)`), which
    keeps the tensor where it is."""
    method = move_call(node)
    if method is None or method == "cpu":
        return False
    if method == "to" and _casts_only(node):  # type: ignore[arg-type]  # move_call() matched: a Call
        return False
    first = node.args[0].value if node.args else None  # type: ignore[attr-defined]  # move_call() matched: node is a Call
    return not (type(first) is cst.SimpleString and literal_value(first) == "cpu")


def _casts_only(call: cst.Call) -> bool:
    """`t.to(x.dtype)`, `t.to(torch.bfloat16)`, `t.to(dtype=torch.half)`: the arguments name a
    dtype and no device (torch's `Tensor.to(dtype, non_blocking=False, copy=False)` form)."""
    if any(arg.star or (arg.keyword is not None and arg.keyword.value == "device") for arg in call.args):
        return False
    positional = [arg.value for arg in call.args if arg.keyword is None]
    if not positional:
        return True
    first = positional[0]
    if type(first) is cst.Attribute and first.attr.value == "dtype":
        return True
    return (
        type(first) is cst.Attribute
        and type(first.value) is cst.Name
        and first.value.value == "torch"
        and first.attr.value in DTYPE_NAMES
    )


# torch functions that do not return a tensor (their result is not a placement fact).
NON_TENSOR_FUNCTIONS = frozenset(
    {
        "is_tensor",
        "numel",
        "is_floating_point",
        "is_complex",
        "is_nonzero",
        "equal",
        "allclose",
        "get_default_dtype",
        "is_grad_enabled",
        "manual_seed",
        "set_grad_enabled",
        "no_grad",
        "device",
        "dtype",
        "Size",
        "finfo",
        "iinfo",
        "is_storage",
        "typename",
        "save",
        "load",
        "compile",
        "broadcast_shapes",
        "result_type",
        "promote_types",
        "can_cast",
        "is_same_size",
        "get_device",
    }
)
TENSOR_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")


def is_tensor_function(qualified: str) -> bool:
    """A public torch function computing on tensors (`torch.cat`, `F.softmax`), not a class, a
    private helper or one of NON_TENSOR_FUNCTIONS (`torch.save`, `torch.numel`...)."""
    last = qualified.rsplit(".", 1)[-1]
    namespace = qualified[: len(qualified) - len(last)]
    return (
        namespace in TENSOR_NAMESPACES
        and last not in NON_TENSOR_FUNCTIONS
        and not last[:1].isupper()
        and not last.startswith("_")
    )


# torch functions whose tensor arguments may sit on different devices (copies, indices).
CROSS_DEVICE_FUNCTIONS = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray"})
# `torch.autograd.Variable(t)`: since torch 0.4 the legacy wrapper returns the tensor `t` itself
# (scripts written for torch 0.3 still wrap every input in it)
VARIABLE_WRAPPERS = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})

# Arguments (positions after the callee's own, and keywords) that PyTorch takes on the host
# whatever device the other tensors are on: CTC targets and lengths, packing lengths.
_CTC_HOST_ARGUMENTS = (1, 2, 3, "targets", "input_lengths", "target_lengths")
HOST_ARGUMENTS: dict[str, tuple[int | str, ...]] = {
    "torch.nn.functional.ctc_loss": _CTC_HOST_ARGUMENTS,
    "torch.ctc_loss": _CTC_HOST_ARGUMENTS,
    "CTCLoss": _CTC_HOST_ARGUMENTS,
    "torch.nn.utils.rnn.pack_padded_sequence": (1, "lengths"),
    # Sizes are Python ints: a 0-dim tensor given as a padding width or an output size is read as
    # a number (`F.pad(img, (left, right, top, bottom))` with widths computed on the CPU).
    "torch.nn.functional.pad": (1, "pad"),
    "torch.nn.functional.interpolate": (1, 2, "size", "scale_factor"),
    "torch.nn.functional.upsample": (1, 2, "size", "scale_factor"),
    **{
        f"torch.nn.functional.adaptive_{kind}_pool{n}d": (1, "output_size")
        for kind in ("avg", "max")
        for n in (1, 2, 3)
    },
}

# nn classes without parameters or buffers: a CPU input just runs on the CPU.
PARAMETER_FREE_MODULES = frozenset(
    {
        "ReLU",
        "ReLU6",
        "GELU",
        "SiLU",
        "Mish",
        "Tanh",
        "Sigmoid",
        "Softmax",
        "LogSoftmax",
        "Softmin",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "Identity",
        "Flatten",
        "Unflatten",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AvgPool1d",
        "AvgPool2d",
        "AvgPool3d",
        "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d",
        "AdaptiveAvgPool3d",
        "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d",
        "Upsample",
        "PixelShuffle",
        "PixelUnshuffle",
        "ZeroPad2d",
        "ConstantPad1d",
        "ConstantPad2d",
        "ConstantPad3d",
        "ReflectionPad1d",
        "ReflectionPad2d",
        "ReplicationPad1d",
        "ReplicationPad2d",
        "Softplus",
        "LeakyReLU",
        "ELU",
        "SELU",
        "CELU",
        "Hardtanh",
        "Hardswish",
        "Hardsigmoid",
        "Softsign",
        "Tanhshrink",
        "Threshold",
        "GLU",
        "LogSigmoid",
        "MSELoss",
        "L1Loss",
        "SmoothL1Loss",
        "HuberLoss",
        "KLDivLoss",
        "CosineSimilarity",
        "PairwiseDistance",
        "ChannelShuffle",
        "Fold",
        "Unfold",
    }
)
# Wrappers that move their inputs to the device before the wrapped module sees them.
INPUT_MOVING_WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel"})
# Classes under torch.nn that are not modules.
NN_NON_MODULES = frozenset({"Parameter", "UninitializedParameter", "Buffer", "ParameterList", "ParameterDict"})

# Attribute and method uses that only a tensor has (numpy arrays and modules lack them).
TENSOR_ONLY_METHODS = frozenset(
    {
        "size",
        "view",
        "unsqueeze",
        "permute",
        "contiguous",
        "masked_fill",
        "masked_fill_",
        "dim",
        "numel",
        "new_zeros",
        "new_ones",
        "new_full",
        "new_empty",
        "new_tensor",
        "type_as",
        "bmm",
        "matmul",
        "softmax",
        "log_softmax",
        "expand",
        "expand_as",
        "view_as",
        "transpose",
        "item",
        "long",
        "detach",
        "chunk",
        "shape",
        "sigmoid",
        "masked_select",
        "is_cuda",
        "unbind",
    }
)
TENSOR_ANNOTATIONS = frozenset(
    {
        "Tensor",
        "torch.Tensor",
        "FloatTensor",
        "LongTensor",
        "BoolTensor",
        "torch.FloatTensor",
        "torch.LongTensor",
        "torch.BoolTensor",
    }
)
# Words that, in an `if` test, make a branch device-conditional (`if x.is_cuda:`).
DEVICE_GUARD_WORDS = ("cuda", "gpu", "device", "is_available", "accelerator", "mps", "cpu", "xla", "npu", "hpu", "xpu")
LOSS_CALLABLE_NAMES = frozenset({"criterion", "loss_fn", "loss_func", "lossfn", "loss_function", "criterion_fn"})
# Callee names that hold a model (`model(x)`, `self.generator(z)`, `netD(fake)`): given a device
# input, what they return is on that device. Only the result is inferred, never a meeting.
MODEL_WORDS = (
    "model",
    "net",
    "encoder",
    "decoder",
    "generator",
    "discriminator",
    "backbone",
    "classifier",
    "critic",
    "actor",
    "policy",
)
ACCELERATOR_STRINGS = ("cuda", "mps", "xpu", "npu", "hpu", "xla")
