from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from devicelint.context import FileContext
from devicelint.registry import FixProposal, Rule, Violation, register

LOADERS = frozenset({"torch.load", "torch.serialization.load"})


@register
class TorchLoadWithoutMapLocation(Rule):
    """
    ## What it does
    Flags `torch.load(...)` calls that pass no `map_location`, by keyword or as the second
    positional argument.

    ## Why it is a bug on a GPU
    `torch.load` puts every tensor back on the device it was saved from. A checkpoint written
    on `cuda:0` fails to load on a CPU-only machine (`Attempting to deserialize object on a
    CUDA device but torch.cuda.is_available() is False`), and on a multi-GPU machine every
    rank loads its copy onto GPU 0, which can run that GPU out of memory.

    ## Example
    ```python
    state = torch.load("checkpoint.pt")
    model.load_state_dict(state)
    ```

    ## Use instead
    ```python
    state = torch.load("checkpoint.pt", map_location=device)
    model.load_state_dict(state)
    ```

    ## Fix safety
    The fix adds `map_location="cpu"` and is unsafe: tensors that used to land on the GPU they
    were saved from now land on the CPU, so code that relied on that must move them.

    ## Known limits
    A call that forwards `**kwargs` is not reported, since `map_location` may be among them.
    Neither is a load from an in-memory `io.BytesIO` buffer (directly, or a name assigned from
    one in the same function) or from a temporary file (an argument spelled with `tmp` or
    `temp`): such round trips stay in one process or machine, and library code (unpickling a
    storage) relies on tensors returning to their own device.
    """

    code = "DL501"
    name = "torch-load-without-map-location"
    summary = "`torch.load` without `map_location` restores tensors to the device they were saved on."
    message = (
        "`{call}` has no `map_location`: a checkpoint saved on a GPU fails on a CPU-only machine "
        "or lands on the saving GPU; pass `map_location=device` (or \"cpu\")"
    )
    fix_availability = "unsafe"

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for call in ctx.index.of_type(cst.Call):
            if ctx.qualified_name(call.func) not in LOADERS:
                continue
            if _has_map_location(call.args) or _loads_in_memory_buffer(ctx, call):
                continue
            yield self.violation(call, fix=_add_map_location(call), call=_short(ctx, call))


BUFFERS = frozenset({"io.BytesIO", "_io.BytesIO"})


_TEMPORARY = re.compile(r"(?i)\b\w*(tmp|temp)\w*\b")


def _loads_in_memory_buffer(ctx: FileContext, call: cst.Call) -> bool:
    """`torch.load(io.BytesIO(data))` or `torch.load(tmp.name)`: an in-process round trip
    (pickling a storage, a test that saves and reloads) where restoring the original device
    is what the code wants."""
    if not call.args:
        return False
    source = call.args[0].value
    if _TEMPORARY.search(ctx.code_for(source)):
        return True
    if isinstance(source, cst.Call):
        return ctx.qualified_name(source.func) in BUFFERS
    if not isinstance(source, cst.Name):
        return False
    function = ctx.index.enclosing_function(call) or ctx.module
    for assign in ctx.index.walk(function):
        if isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call):
            targets = [t.target for t in assign.targets]
            if any(isinstance(t, cst.Name) and t.value == source.value for t in targets):
                if ctx.qualified_name(assign.value.func) in BUFFERS:
                    return True
    return False


def _has_map_location(args: tuple[cst.Arg, ...]) -> bool:
    positional = 0
    for arg in args:
        if arg.star:  # *args or **kwargs may carry it
            return True
        if arg.keyword is None:
            positional += 1
        elif arg.keyword.value == "map_location":
            return True
    return positional >= 2


def _add_map_location(call: cst.Call) -> FixProposal:
    new_arg = cst.Arg(
        keyword=cst.Name("map_location"),
        value=cst.SimpleString('"cpu"'),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    if args:
        last = args[-1]
        if last.comma is cst.MaybeSentinel.DEFAULT:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(new_arg)
    return FixProposal(
        description='Add `map_location="cpu"`',
        safe=False,
        replacements=((call, call.with_changes(args=args)),),
    )


def _short(ctx: FileContext, call: cst.Call) -> str:
    return f"{ctx.code_for(call.func)}(...)"
