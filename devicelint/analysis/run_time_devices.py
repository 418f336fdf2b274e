"""Scripts that choose their device at run time, and scripts that select the current GPU.

A GPU-only script that writes `.cuda()` everywhere is consistent with itself. One that builds
its device from a value only known when it runs (`torch.device(args.device)`,
`torch.device(f"cuda:{args.gpu}")`, `torch.device(cfg["device"])`) chooses where its models go,
and an index-less `.cuda()` elsewhere in it places on GPU 0 instead (or fails on a CPU run),
unless the script also makes the chosen GPU the current one (`torch.cuda.set_device(...)`,
`CUDA_VISIBLE_DEVICES`, `with torch.cuda.device(...):`), which a bare `.cuda()` follows.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.vocabulary import SELECTS_DEVICE
from devicelint.context import FileContext


def selects_current_gpu(ctx: FileContext) -> bool:
    """The file makes some GPU the current one (or hides the others), by any of the spellings
    an index-less `.cuda()` follows."""
    return any(word in ctx.source for word in SELECTS_DEVICE)


def builds_run_time_device(ctx: FileContext) -> bool:
    """The file builds a `torch.device` from a value only known at run time: a first argument
    that is no string literal (a name, an option, a config entry, a conditional), or an
    f-string with a replacement field (`f"cuda:{args.gpu}"`)."""
    if "device" not in ctx.source:
        return False
    for call in ctx.index.of_type(cst.Call):
        if not call.args or call.args[0].keyword is not None or call.args[0].star:
            continue
        if ctx.qualified_name(call.func) != "torch.device":
            continue
        first = call.args[0].value
        if isinstance(first, (cst.SimpleString, cst.ConcatenatedString, cst.BaseNumber)):
            continue
        if type(first) is cst.FormattedString and not any(
            type(part) is cst.FormattedStringExpression for part in first.parts
        ):
            continue
        return True
    return False
