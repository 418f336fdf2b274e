"""Device identity, the engine's `DeviceId`: which device a value is on when the code says it.

The placement engine's `Fact.where` says *whether* a value is on an accelerator; `DeviceId` says
*which one*, when the file states it literally (`"cuda:1"`, `.cuda(1)`, `torch.device("cuda", 1)`,
or a name, attribute or default bound to one). Anything else keeps its source text and is never
judged equal to or different from another device, except `devs[0]` vs `devs[1]`. Every rule that
compares devices (DL2xx, DL107, DL502) reads these, from the engine (`facts.device_of`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.names import dotted_name, literal_value
from devicelint.context import FileContext

# Device types torch accepts in a device string; `hip` and friends alias CUDA builds.
DEVICE_STRING = re.compile(r"^(cpu|cuda|mps|xpu|hip|npu|hpu|xla|meta|mtia|ipu|vulkan|lazy)(?::(\d+))?$")
_SUBSCRIPTED = re.compile(r"^(.+)\[(\d+)\]$")
_INDEXED_FSTRING = re.compile(r"^[fF]['\"](cuda|xpu|npu|hpu|mps):")
DTYPE_NAMES = frozenset(
    {
        "float",
        "float16",
        "float32",
        "float64",
        "half",
        "bfloat16",
        "double",
        "int8",
        "int16",
        "int32",
        "int64",
        "long",
        "int",
        "uint8",
        "bool",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    }
)
_HOST_TYPES = ("cpu", "meta")


@dataclass(frozen=True)
class DeviceId:
    """A device as the code states it: `cuda:1`, `cuda` (the current device), `cpu`, or source text."""

    text: str
    literal: bool
    # "cuda", "cpu"... when known even though the index is not (`torch.device("cuda", rank)`).
    type: str | None = None

    @property
    def index(self) -> int | None:
        match = DEVICE_STRING.match(self.text) if self.literal else None
        return int(match.group(2)) if match and match.group(2) is not None else None

    @property
    def is_current(self) -> bool:
        """`"cuda"` or `.cuda()`: whichever device is current when it runs."""
        return self.literal and self.type not in (None, *_HOST_TYPES) and self.index is None

    @property
    def is_accelerator(self) -> bool:
        return self.type is not None and self.type not in _HOST_TYPES

    def label(self) -> str:
        return self.text if self.literal else f"`{self.text}`"


CPU_DEVICE = DeviceId("cpu", True, "cpu")


def parse_device(text: str) -> DeviceId | None:
    """The device a string names (`"cuda:1"`), or None when it names none."""
    match = DEVICE_STRING.match(text)
    return DeviceId(text, True, match.group(1)) if match else None


def indexed(kind: str, index: int) -> DeviceId:
    return DeviceId(f"{kind}:{index}", True, kind)


def distinct(a: DeviceId | None, b: DeviceId | None) -> bool:
    """Whether two devices are certainly different (unknowns never are)."""
    if a is None or b is None:
        return False
    if a.literal and b.literal:
        if a.type != b.type:
            return True
        return a.index is not None and b.index is not None and a.index != b.index
    if not a.literal and not b.literal:
        ma, mb = _SUBSCRIPTED.match(a.text), _SUBSCRIPTED.match(b.text)
        return bool(ma and mb and ma.group(1) == mb.group(1) and ma.group(2) != mb.group(2))
    return False


def join_devices(a: DeviceId | None, b: DeviceId | None, gpu_branch: bool = False) -> DeviceId | None:
    """The device after two paths meet: the same one, or (`gpu_branch`, the paths of
    `"cuda:0" if torch.cuda.is_available() else "cpu"`) the accelerator, which is the device
    on a GPU machine; else unknown."""
    if a == b:
        return a
    if gpu_branch and a is not None and b is not None and a.literal and b.literal:
        if b.type == "cpu" and a.is_accelerator:
            return a
        if a.type == "cpu" and b.is_accelerator:
            return b
    return None


def string_value(node: cst.CSTNode) -> str | None:
    if type(node) is cst.SimpleString and "b" not in node.prefix.lower():
        value = literal_value(node)
        return value if isinstance(value, str) else None
    return None


def int_value(node: cst.CSTNode) -> int | None:
    if type(node) is cst.Integer:
        try:
            return int(node.value, 0)
        except ValueError:
            return None
    return None


def literal_device(ctx: FileContext, node: cst.BaseExpression) -> DeviceId | None:
    """The device an expression spells out by itself, without following any name: a device
    string, an f-string with an accelerator prefix (type known, index not), or None."""
    text = string_value(node)
    if text is not None:
        return parse_device(text)
    if type(node) is cst.FormattedString:
        match = _INDEXED_FSTRING.match(ctx.code_for(node))
        return DeviceId(ctx.code_for(node), False, match.group(1)) if match else None
    return None


def torch_device(call: cst.Call, kind: DeviceId | None, index: cst.BaseExpression | None, text: str) -> DeviceId | None:
    """`torch.device(kind)` / `torch.device(kind, index)` from the device of its first argument."""
    if kind is None:
        return None
    if not kind.literal:
        return DeviceId(text, False, kind.type)
    if index is None:
        return kind
    number = int_value(index)
    if number is not None and kind.index is None and kind.type is not None:
        return indexed(kind.type, number)
    return DeviceId(text, False, kind.type)


def device_argument(call: cst.Call) -> cst.BaseExpression | None:
    """The device argument of `.to(...)`/`.cuda(...)`: the first positional one or `device=`."""
    for position, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is None and position == 0:
            return arg.value
        if arg.keyword is not None and arg.keyword.value == "device":
            return arg.value
    return None


def is_dtype(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`torch.float16`, `dtype`, `self.precision`: a cast, not a device."""
    qualified = ctx.qualified_name(node) or ""
    if qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in DTYPE_NAMES:
        return True
    text = dotted_name(node) or ""
    last = text.rsplit(".", 1)[-1].lower()
    return "dtype" in last or "precision" in last or last in DTYPE_NAMES
