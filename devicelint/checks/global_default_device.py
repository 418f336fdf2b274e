from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.placement_values import DEFAULT_DEVICE_SETTERS, accelerator_default, under_main_guard
from devicelint.analysis.random_draws import (
    CPU,
    DISTRIBUTED,
    LOADER,
    SAMPLER,
    SPLIT,
    SUBSET_SAMPLER,
    random_draws,
)
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class GlobalDefaultDevice(Rule):
    """
    ## What it does
    Flags module-level calls that make the GPU the global default for new tensors:
    `torch.set_default_tensor_type(torch.cuda.FloatTensor)` (or its string form) and
    `torch.set_default_device("cuda")`.

    ## Why it is a bug on a GPU
    Every tensor created anywhere afterwards lands on the GPU, including inside libraries that
    expect CPU tensors: a shuffling `DataLoader`'s `torch.randperm` with a CPU generator fails
    (`Expected a 'cuda' device type for generator`), workers cannot initialise CUDA, and
    `numpy()` calls on fresh tensors raise. The behaviour depends on import order, so it breaks
    far from the line that caused it. `set_default_tensor_type` is deprecated as well.

    ## Example
    ```python
    import torch
    torch.set_default_tensor_type(torch.cuda.FloatTensor)
    ```

    ## Use instead
    ```python
    import torch
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    ```
    For a scoped default, `with torch.device("cuda"):` limits it to one block.

    ## Fix safety
    No automatic fix: code that relied on the default must pass devices explicitly.

    ## Known limits
    Calls inside functions are not reported (they may be deliberate and scoped); the
    device must be visible as a literal or a `torch.cuda.*Tensor` type. Nor are calls in the
    file's `if __name__ == "__main__":` block: a program's entry point chooses its own default,
    no import sees it, and what fails under it (a shuffling loader, a CPU generator) is reported
    at the line that fails (DL114, DL115). A file that hands every
    loader, sampler and `random_split` it builds a generator that is not a CPU one
    (`generator=torch.Generator(device="cuda")`) keeps its default knowingly and is not
    reported.
    """

    code = "DL110"
    name = "global-default-device"
    summary = "A module-level global default CUDA device or tensor type."
    message = "`{call}` makes every new tensor a GPU tensor, which breaks shuffling DataLoaders, CPU generators and worker processes; create tensors and models on an explicit `device` instead"
    tokens = ("set_default_tensor_type", "set_default_device")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for call in ctx.index.of_type(cst.Call):
            if ctx.qualified_name(call.func) not in DEFAULT_DEVICE_SETTERS or not call.args:
                continue
            if accelerator_default(ctx, call.args[0].value) is None:
                continue
            if ctx.index.enclosing_function(call) is not None:
                continue
            if under_main_guard(ctx, call) or _loaders_follow_the_default(ctx):
                continue
            yield self.violation(call, call=ctx.code_for(call))


def _loaders_follow_the_default(ctx: FileContext) -> bool:
    """The file hands every loader, sampler and split it builds a generator that is not a CPU
    one (`generator=torch.Generator(device="cuda")`): it lives with the default it sets
    knowingly, and its samplers draw where the default puts `randperm`."""
    draws = [d for d in random_draws(ctx) if d.kind in _SAMPLING_KINDS]
    return bool(draws) and all(d.generator is not None and d.generator_device not in (None, CPU) for d in draws)


_SAMPLING_KINDS = frozenset({LOADER, SAMPLER, SUBSET_SAMPLER, SPLIT, DISTRIBUTED})
