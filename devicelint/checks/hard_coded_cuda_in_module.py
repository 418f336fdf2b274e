from __future__ import annotations

from typing import Iterator

import libcst as cst

from devicelint.analysis.module_placement import class_placements
from devicelint.analysis.placement import is_device_guard, placement_of_function
from devicelint.analysis.placement_classes import class_facts
from devicelint.analysis.placement_scope import is_script, is_test_path
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register


# Methods whose job is to manage devices (`enable_cpu_offload`, `to_gpu`, `parallelize`).
DEVICE_MANAGEMENT = ("offload", "device", "cuda", "gpu", "accelerat", "parallel", "shard", "distribut")


def hard_coded_cuda(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """The spelling of a hard-coded CUDA placement (`.cuda()`, `"cuda:0"` as a device), else None."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "cuda":
        if (ctx.qualified_name(node.func) or "").startswith("torch."):
            return None  # `torch.cuda(...)` is the module, not a move
        return ".cuda()" if not node.args else None
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        if not isinstance(value, str) or not (value == "cuda" or value.startswith("cuda:")):
            return None
        parent = ctx.index.parent(node)
        if isinstance(parent, cst.Arg):
            call = ctx.index.parent(parent)
            if parent.keyword is not None and parent.keyword.value == "device":
                return f'device="{value}"'
            if isinstance(call, cst.Call) and parent.keyword is None:
                if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
                    return f'.to("{value}")'
                if ctx.qualified_name(call.func) == "torch.device":
                    return f'torch.device("{value}")'
    return None


def under_device_guard(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    for ancestor in ctx.index.ancestors(node):
        if ancestor is scope:
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and is_device_guard(ancestor.test, ctx):
            return True
    return False


@register
class HardCodedCudaInModule(Rule):
    """
    ## What it does
    Flags `.cuda()`, `device="cuda"`, `.to("cuda:0")` and `torch.device("cuda")` inside the
    methods of an `nn.Module` or inside a library function that takes tensors, unless the
    code sits under a device check (`if torch.cuda.is_available():`, `if x.is_cuda:`).

    ## Why it is a bug on a GPU
    A module cannot know where its caller put it. Hard-coding CUDA breaks CPU-only runs
    (`Torch not compiled with CUDA enabled`), sends tensors to GPU 0 when the model is on
    `cuda:1` or on another DDP rank (`Expected all tensors to be on the same device, but found
    cuda:1 and cuda:0`), and excludes MPS and other accelerators.

    ## Example
    ```python
    class Decoder(nn.Module):
        def forward(self, x):
            steps = torch.arange(x.size(1)).cuda()
            return self.proj(x) + steps
    ```

    ## Use instead
    ```python
    class Decoder(nn.Module):
        def forward(self, x):
            steps = torch.arange(x.size(1), device=x.device)
            return self.proj(x) + steps
    ```

    ## Fix safety
    No automatic fix: the right device expression (an input's `.device`, a parameter's) depends
    on the code.

    ## Known limits
    Scripts (files with a `__main__` block) and test files are not checked: choosing the GPU is
    their job. `.cuda(rank)` with an explicit device and code under a device check are not
    reported. Library functions are those whose parameters the placement analysis sees as
    tensors.
    """

    code = "DL107"
    name = "hard-coded-cuda-in-module"
    summary = "`.cuda()` or `device=\"cuda\"` inside a module or library function."
    message = "`{what}` hard-codes CUDA in `{function}`: it breaks CPU-only runs, other GPUs (`cuda:1`, DDP ranks) and MPS; use the input's device (`{device}`)"
    tokens = ("cuda",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if is_test_path(ctx.path) or is_script(ctx.source):
            return
        classes = class_facts(ctx)
        # Manual model parallelism places stages on fixed devices on purpose.
        split_classes = {name for name, placed in class_placements(ctx).items() if placed.split() is not None}
        module_methods = {id(m): c for c in classes.values() for m in c.methods.values()}
        candidates = [n for n in ctx.index.of_type(cst.Call) if isinstance(n.func, cst.Attribute) and n.func.attr.value == "cuda"]
        candidates += [n for n in ctx.index.of_type(cst.SimpleString) if "cuda" in n.value]
        for node in candidates:
            what = hard_coded_cuda(ctx, node)
            if what is None:
                continue
            function = ctx.index.enclosing_function(node)
            if function is None:
                continue
            cls = module_methods.get(id(function))
            enclosing = ctx.index.enclosing_class(function)
            if enclosing is not None and enclosing.name.value in split_classes:
                continue
            placement = placement_of_function(ctx, function)
            if cls is None and not placement.device_params:
                continue
            if under_device_guard(ctx, node, function) or any(w in function.name.value.lower() for w in DEVICE_MANAGEMENT):
                continue
            if placement.device_params:
                device = f"{placement.device_params[0]}.device"
            elif cls is not None:
                device = "self.device" if cls.has_device else "next(self.parameters()).device"
            else:
                device = "x.device"
            yield self.violation(node, what=what, function=function.name.value, device=device)
