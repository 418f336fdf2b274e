from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from devicelint.context import FileContext
from devicelint.registry import FixProposal, Rule, Violation, register

DEVICE_STRING = re.compile(r"^(cpu|cuda|mps|xpu|hip|npu|hpu|xla|meta|mtia|ipu|vulkan|lazy)(:\d+)?$")
# `args.device == "cuda"` compares two strings: right. Receivers that usually hold a
# configuration rather than a tensor or module are left alone.
CONFIG_NAMES = frozenset(
    {"args", "opt", "opts", "cfg", "config", "conf", "hparams", "hp", "params", "settings",
     "options", "flags", "training_args", "train_args", "trainer_args", "kwargs", "os", "env"}
)


def _string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _device_attribute(node: cst.BaseExpression) -> cst.Attribute | None:
    if isinstance(node, cst.Attribute) and node.attr.value == "device":
        return node
    return None


def _looks_like_config(receiver: cst.BaseExpression) -> bool:
    names = []
    while isinstance(receiver, cst.Attribute):
        names.append(receiver.attr.value)
        receiver = receiver.value
    if isinstance(receiver, cst.Name):
        names.append(receiver.value)
    if not names:
        return False
    # `self.device` is often a config string in trainers; `self.args.device` certainly is.
    return names[-1] == "self" and len(names) == 1 or any(n.lower() in CONFIG_NAMES for n in names)


def _bare_device_call(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """The device type of `torch.device("cuda")` (no index, not cpu/meta), else None."""
    if not isinstance(node, cst.Call) or ctx.qualified_name(node.func) != "torch.device":
        return None
    if len(node.args) != 1 or node.args[0].keyword is not None:
        return None
    value = _string_value(node.args[0].value)
    if value is None or ":" in value or value in ("cpu", "meta") or not DEVICE_STRING.match(value):
        return None
    return value


def _str_of_device(ctx: FileContext, node: cst.BaseExpression) -> cst.Attribute | None:
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "str"
        and len(node.args) == 1
    ):
        return _device_attribute(node.args[0].value)
    return None


@register
class DeviceComparedToStringOrBareType(Rule):
    """
    ## What it does
    Flags comparisons that can never be true the way they are written:
    `x.device == "cuda"` (a `torch.device` is never equal to a string, not even `"cpu"`),
    `x.device == torch.device("cuda")` (false for `cuda:0`, because the index differs), and
    `str(x.device) == "cuda"` (the string is `"cuda:0"`).

    ## Why it is a bug on a GPU
    On a CUDA machine tensors live on `cuda:0`, `cuda:1`..., never on an index-less `cuda`.
    The comparison is silently false, so the GPU branch never runs (or the CPU fallback always
    does): code that was meant to move, pin or skip work for the GPU does nothing.

    ## Example
    ```python
    if logits.device == "cuda":
        torch.cuda.synchronize()
    if str(x.device) == "cuda":
        x = x.half()
    ```

    ## Use instead
    ```python
    if logits.device.type == "cuda":
        torch.cuda.synchronize()
    if x.is_cuda:
        x = x.half()
    ```

    ## Fix safety
    The fix rewrites the comparison to `x.device.type == "cuda"`. It is safe for
    `torch.device("cuda")` and `str(x.device)` comparisons, where the receiver must be a
    `torch.device`. For `x.device == "cuda"` it is unsafe: if `x.device` is really a string
    (a config field), the original comparison was right.

    ## Known limits
    `x.device == "cuda"` is not reported when the receiver looks like a configuration object
    (`args`, `cfg`, `config`, `hparams`, `self`...), where `device` is commonly a string.
    Devices held in variables (`dev == "cuda"`) are not reported, nor is a comparison in a
    condition that also tests an indexed form (`str(d) == "cuda:0" or str(d) == "cuda"`),
    where index-less devices are handled on purpose.
    """

    code = "DL502"
    name = "device-compared-to-string-or-bare-type"
    summary = "A `torch.device` compared with a string or an index-less device is never equal."
    message = "`{expr}` is always {result}: {why}; compare `{fixed}` instead"
    fix_availability = "sometimes"
    tokens = (".device",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for comparison in ctx.index.of_type(cst.Comparison):
            if len(comparison.comparisons) != 1:
                continue
            target = comparison.comparisons[0]
            if not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
                continue
            result = "False" if isinstance(target.operator, cst.Equal) else "True"
            sides = (comparison.left, target.comparator)
            if _indexed_form_also_tested(ctx, comparison):
                continue
            for this, other in (sides, sides[::-1]):
                violation = self._check_pair(ctx, comparison, this, other, result)
                if violation is not None:
                    yield violation
                    break

    def _check_pair(self, ctx, comparison, this, other, result):  # type: ignore[no-untyped-def]
        op = "==" if result == "False" else "!="
        attribute = _device_attribute(this)
        if attribute is not None:
            bare = _bare_device_call(ctx, other)
            if bare is not None:
                fixed = f'{ctx.code_for(attribute)}.type {op} "{bare}"'
                return self.violation(
                    comparison, fix=_rewrite(comparison, fixed, safe=True),
                    expr=ctx.code_for(comparison), result=result, fixed=fixed,
                    why=f'`torch.device("{bare}")` has no index and devices on a GPU are `{bare}:0`, `{bare}:1`...',
                )
            text = _string_value(other)
            if text is not None and DEVICE_STRING.match(text) and not _looks_like_config(attribute.value):
                if ":" in text:
                    fixed = f'{ctx.code_for(attribute)} {op} torch.device("{text}")'
                    fix = None
                else:
                    fixed = f'{ctx.code_for(attribute)}.type {op} "{text}"'
                    fix = _rewrite(comparison, fixed, safe=False)
                return self.violation(
                    comparison, fix=fix, expr=ctx.code_for(comparison), result=result,
                    fixed=fixed, why="a `torch.device` never equals a string",
                )
        inner = _str_of_device(ctx, this)
        text = _string_value(other)
        if inner is not None and text is not None and text not in ("cpu", "meta") and ":" not in text and DEVICE_STRING.match(text):
            fixed = f'{ctx.code_for(inner)}.type {op} "{text}"'
            return self.violation(
                comparison, fix=_rewrite(comparison, fixed, safe=True),
                expr=ctx.code_for(comparison), result=result, fixed=fixed,
                why=f'`str()` of a {text} device includes its index (`"{text}:0"`)',
            )
        return None


def _indexed_form_also_tested(ctx: FileContext, comparison: cst.Comparison) -> bool:
    """`str(d) == "cuda:0" or str(d) == "cuda"`: the author knows devices carry an index and
    is handling index-less ones (fake and meta tensors have them) on purpose."""
    outer = None
    for ancestor in ctx.index.ancestors(comparison):
        if isinstance(ancestor, cst.BooleanOperation):
            outer = ancestor
        elif not isinstance(ancestor, (cst.Comparison,)) and outer is not None:
            break
    if outer is None:
        return False
    for node in ctx.index.walk(outer):
        value = _string_value(node) if isinstance(node, cst.SimpleString) else None
        if value is not None and ":" in value and DEVICE_STRING.match(value):
            return True
    return False


def _rewrite(comparison: cst.Comparison, fixed: str, safe: bool) -> FixProposal:
    # A node's reported span excludes its own parentheses, so they stay in place.
    return FixProposal(description=f"Compare `{fixed}`", safe=safe, replacements=((comparison, fixed),))
