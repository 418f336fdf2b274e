"""A device that the program's own switch sets to the CPU (`if args.force_cpu: device = "cpu"`).

A CPU chosen because no GPU is there (`else: device = "cpu"` after `if torch.cuda.is_available():`)
is harmless to GPU-only code such as `nn.DataParallel`, which does nothing without CUDA. A CPU
chosen by a flag is not: the GPUs are still visible, and DataParallel still scatters to them.
"""

from __future__ import annotations

import re

import libcst as cst

from devicelint.analysis.model_events.devices import resolver_for
from devicelint.analysis.model_events.scopes import scope_of
from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.syntax import enclosing_ifs, test_words
from devicelint.context import FileContext

# Tests about what the machine has: their CPU branch runs only where no GPU would be used anyway.
AVAILABILITY_WORDS = ("cuda", "gpu", "is_available", "device_count", "mps", "accelerator", "xpu")


def forced_cpu_branch(ctx: FileContext, name: cst.Name) -> cst.If | None:
    """The `if` whose branch binds `name` (in the function that reads it) to a literal CPU
    device on a test that is not about the machine's GPUs: a user's switch."""
    scope = scope_of(ctx, name)
    for assign in ctx.index.within(scope, cst.Assign):
        if not any(type(t.target) is cst.Name and t.target.value == name.value for t in assign.targets):
            continue
        device = resolver_for(ctx, assign).device(assign.value)
        if not (device.literal and device.type == "cpu"):
            continue
        branch = next((b for b, _ in enclosing_ifs(ctx, assign, scope)), None)
        if branch is not None and not any(w in test_words(ctx, branch.test) for w in AVAILABILITY_WORDS):
            return branch
    return None


def guarded_against(ctx: FileContext, node: cst.CSTNode, branch: cst.If, device: cst.Name) -> bool:
    """Whether `node` sits under an `if` that tests the switch, the device, or the machine's GPUs
    (`if not args.force_cpu:`, `if device.type == "cuda":`, `if torch.cuda.device_count() > 1:`)."""
    switch = {
        n.value.value for n in ctx.index.walk(branch.test) if type(n) is cst.Attribute and type(n.value) is cst.Name
    }
    names = {
        dotted.lower()
        for sub in ctx.index.walk(branch.test)
        if isinstance(sub, (cst.Name, cst.Attribute))
        and (dotted := dotted_name(sub)) is not None
        and dotted not in switch  # `args` of `args.force_cpu` says nothing alone
    }
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in (*names, device.value.lower())) + r")\b")
    for test, _ in enclosing_ifs(ctx, node, scope_of(ctx, node)):
        words = test_words(ctx, test.test)
        if any(w in words for w in (*AVAILABILITY_WORDS, "cpu")) or pattern.search(words):
            return True
    return False
