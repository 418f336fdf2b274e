from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.names import literal_value
from devicelint.analysis.training.syntax import keyword, method_name, receiver, short
from devicelint.analysis.vocabulary import SIZED_FACTORIES
from devicelint.context import FileContext
from devicelint.fix_text import keyword_argument, with_argument
from devicelint.rule_base import FixProposal, Rule, Violation, register

FACTORIES = frozenset(f"torch.{name}" for name in (*SIZED_FACTORIES, "tensor"))
RANDOM_FACTORIES = frozenset({"torch.rand", "torch.randn", "torch.randint", "torch.randperm"})
DEVICE_WORDS = ("device", "dev", "cuda", "gpu", "rank")


def _device_argument(ctx: FileContext, call: cst.Call) -> str | None:
    """The device a `.to(...)`/`.cuda()` moves to, as source text, when it is only a device move."""
    name = method_name(call)
    if name == "cuda":
        if call.args:
            return None
        return '"cuda"'
    if name != "to" or len(call.args) != 1:
        return None
    arg = call.args[0]
    if arg.star:
        return None
    value = arg.value
    if arg.keyword is not None:
        return ctx.code_for(value) if arg.keyword.value == "device" else None
    if type(value) is cst.SimpleString:
        text = literal_value(value)
        return (
            ctx.code_for(value)
            if isinstance(text, str) and text.split(":")[0] in ("cuda", "mps", "xpu", "cpu")
            else None
        )
    if type(value) is cst.Call and ctx.qualified_name(value.func) == "torch.device":
        return ctx.code_for(value)
    spelled = ctx.code_for(value).lower()
    if type(value) in (cst.Name, cst.Attribute) and any(w in spelled.rsplit(".", 1)[-1] for w in DEVICE_WORDS):
        if "dtype" in spelled:
            return None
        return ctx.code_for(value)
    return None


@register
class CreateThenMove(Rule):
    """
    ## What it does
    Flags a tensor created on the CPU by a factory (`torch.zeros`, `torch.ones`, `torch.empty`,
    `torch.full`, `torch.rand*`, `torch.arange`, `torch.linspace`, `torch.eye`, `torch.tensor`...)
    and moved at once with `.to(device)` or `.cuda()`. Off by default.

    ## Why it is a bug on a GPU
    The tensor is allocated and filled in host memory, then copied over PCIe, and the copy
    synchronises with the host. Passing `device=` allocates and fills it on the device directly.
    In a training step or a `forward` this costs a transfer on every call.

    ## Example
    ```python
    mask = torch.ones(seq_len, seq_len).to(device)
    ```

    ## Use instead
    ```python
    mask = torch.ones(seq_len, seq_len, device=device)
    ```

    ## Fix safety
    The fix moves the device into the factory call, keeping the call's layout (a multi-line call
    gets the argument on a line of its own). It is safe for deterministic factories (`zeros`,
    `arange`, `tensor`...). For random draws (`rand`, `randn`, `randint`, `randperm`) it is
    unsafe: the numbers then come from the device's generator instead of the CPU one, so seeded
    results change. It is not offered when the factory has a `generator=` (a CPU generator
    cannot draw on the device), `device=` or `requires_grad=` (the moved tensor would become a
    leaf), or when the move passes other arguments (`non_blocking=`, a dtype).

    ## Known limits
    A factory that already names a device (`torch.randn(..., device="cpu").to(device)`, often
    to draw from the CPU generator) is not reported. `.to(x)` with an argument that does not look like a device (a name without `device`, `dev`,
    `cuda` or `gpu` in it, a dtype, another tensor) is not reported.
    """

    code = "DL403"
    name = "create-then-move"
    summary = "A tensor created on the CPU and moved at once; pass `device=` to the factory."
    message = (
        "`{expr}` allocates the tensor on the CPU and then copies it to the device; create it there "
        "with `{factory}(..., device={device})`"
    )
    severity = "warning"
    default_enabled = False
    fix_availability = "sometimes"
    tokens = ("torch",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for call in ctx.index.of_type(cst.Call):
            inner = receiver(call)
            if type(inner) is not cst.Call:
                continue
            factory = ctx.qualified_name(inner.func)
            if factory not in FACTORIES or keyword(inner, "device") is not None:
                continue  # `device="cpu"` then `.to(...)` is deliberate (CPU RNG, pinned staging)
            device = _device_argument(ctx, call)
            if device is None:
                continue
            yield self.violation(
                call,
                fix=_fix(ctx, call, inner, device),
                expr=short(ctx, call),
                factory=ctx.code_for(inner.func),
                device=device,
            )


def _fix(ctx: FileContext, call: cst.Call, inner: cst.Call, device: str) -> FixProposal | None:
    factory = ctx.qualified_name(inner.func)
    if keyword(inner, "device") is not None or keyword(inner, "requires_grad") is not None:
        return None
    if keyword(inner, "generator") is not None:
        return None  # a CPU generator cannot draw on the device: the fix would raise
    if any(a.star for a in inner.args) or not inner.args:
        return None
    # A random draw moves from the CPU generator to the device's: seeded results change.
    safe = factory not in RANDOM_FACTORIES
    new = with_argument(inner, keyword_argument("device", device))
    if new is None:
        return None
    description = "Pass `device=` to the factory" + (
        "" if safe else " (the draw then uses the device's random generator)"
    )
    return FixProposal(description, safe=safe, replacements=((call, new),))
