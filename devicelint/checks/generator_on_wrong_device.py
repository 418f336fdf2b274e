from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.default_device import ACCELERATOR_DEFAULT
from devicelint.analysis.placement_values import is_device_guard
from devicelint.analysis.random_draws import CPU, FACTORY, LOADER, TENSOR_DRAW, RandomDraw, mismatched, random_draws
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


def _may_follow_a_default_elsewhere(ctx: FileContext, draw: RandomDraw) -> bool:
    """A data sampler given an accelerator generator where the file does not itself set the
    default to the CPU, and either a `DataLoader` (a CUDA generator is the documented fix for
    DL114's error, so it usually sits in a loader module whose training script makes CUDA the
    default: in the code measured, every such loader was right at run time) or a sampler on a
    device-checked path (`if torch.cuda.is_available():`, chosen for the GPU run on purpose)."""
    if draw.kind in (FACTORY, TENSOR_DRAW) or draw.generator_device == CPU or draw.default.setter is not None:
        return False
    if draw.kind == LOADER:
        return True
    return any(type(node) is cst.If and is_device_guard(node.test, ctx) for node in ctx.index.ancestors(draw.call))


def _remedy(draw: RandomDraw) -> str:
    if draw.kind == TENSOR_DRAW:
        return f'create the generator on the tensor\'s device (`torch.Generator(device="{draw.draws_on}")`)'
    if draw.kind != FACTORY:
        return (
            "create it with `torch.Generator()` (data samplers draw their indices on the CPU), or with "
            "`torch.Generator(device=torch.get_default_device())` if another module makes the GPU the default device"
        )
    if draw.draws_on == CPU:
        return f'pass `device="{draw.generator_device}"` to draw on the generator\'s device, or use a CPU generator'
    return f'create the generator on the tensor\'s device (`torch.Generator(device="{draw.draws_on}")`)'


@register
class GeneratorOnWrongDevice(Rule):
    """
    ## What it does
    Flags a `torch.Generator` created on one device and handed to a random draw on another:
    a CUDA generator given to `random_split`, `DataLoader(generator=)`, `RandomSampler`,
    `SubsetRandomSampler` or a random factory that draws on the CPU (`torch.randn(...,
    generator=g)` without `device=`), and a CPU generator given to a factory with
    `device="cuda"`; also in-place sampling (`x.normal_(generator=g)`,
    `torch.nn.init.xavier_uniform_(w, generator=g)`) and
    `torch.multinomial`/`bernoulli`/`poisson` on a tensor that the placement engine knows is
    on the other device. The generator may be written inline or bound to a name or a `self.`
    attribute (`torch.manual_seed(seed)` returns the CPU default generator); the draw's device is
    its `device=` (a helper's `device` parameter: what the file's calls pass), its tensor's
    device (a module's `weight`/`bias` read in a helper that every call hands a module moved to
    the accelerator is there), or the default device.

    ## Why it is a bug on a GPU
    Every random kernel checks that its generator is on the device it runs on: `random_split`
    and the samplers draw their permutation with `torch.randperm(n, generator=g)` on the CPU,
    and a CUDA generator there fails with `RuntimeError: Expected a 'cpu' device type for
    generator but found 'cuda'` (a `DataLoader` also draws its base seed with it, shuffling or
    not). A CPU generator handed to a CUDA factory fails the other way round. The code usually
    seeds the generator for reproducibility, so it is written once and copied; on a CPU-only
    machine `device="cuda"` is never taken and the bug hides.

    ## Example
    ```python
    gen = torch.Generator(device="cuda").manual_seed(0)
    train, val = random_split(dataset, [0.9, 0.1], generator=gen)
    ```

    ## Use instead
    ```python
    gen = torch.Generator().manual_seed(0)
    train, val = random_split(dataset, [0.9, 0.1], generator=gen)
    ```

    ## Fix safety
    No automatic fix: the same generator is often used for device draws elsewhere, which
    then need a second generator.

    ## Known limits
    Under a CUDA default device (`torch.set_default_device("cuda")`, `with
    torch.device("cuda"):`) the samplers draw on the GPU and need a CUDA generator: that case
    is DL114's, and a CUDA generator there is not reported. A file that sets an accelerator
    default anywhere is silent where the default at the draw is not known. A default set by
    another module is not seen, and a CUDA generator is the documented fix for DL114's error,
    so a `DataLoader` given one is not reported unless the file sets the CPU default itself
    (in the code measured, every such loader ran under a CUDA default set in another module),
    nor is a sampler given one only on a device-checked path (`if torch.cuda.is_available():`).
    `random_split`, `RandomSampler`, `SubsetRandomSampler` and the factories are reported; for
    them the message also names `torch.Generator(device=torch.get_default_device())`, which
    is right either way. A generator (or the device it is built on) handed to a helper's
    parameter is followed to what every call of the file passes (`self.f(...)`, `Class.f(...)`
    for a static method, `Class(...)` for `__init__`, and a function the file never calls
    takes its parameter's default); callers that disagree, and devices held in variables that
    the analysis cannot place, are not followed. A generator or a `device=self.<attr>` that a
    constructor keeps from its parameters (a base class's, reached through the subclass's
    `super().__init__(...)`) is judged for the instances of the class that draws: what its
    constructions and its `super().__init__` call pass, or the parameter's default. The device a
    generator is built on may be one the constructor keeps (`self.device = torch.device(device)`,
    every assignment of the class agreeing) or a field of a settings dataclass of the file that
    the calls hand in (`torch.device(cfg.device)` with `Config(...)` leaving `device` at its
    default).
    """

    code = "DL115"
    name = "generator-on-wrong-device"
    summary = (
        "A torch.Generator on one device handed to a sampler, random_split or random factory that draws on another."
    )
    message = "`{draw}` draws on {draws_on} but its generator `{generator}` is a {generator_device} generator, so it fails with `Expected a '{draws_on}' device type for generator but found '{generator_device}'`; {remedy}"
    tokens = ("Generator", "default_generator", "manual_seed")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for draw in random_draws(ctx):
            if draw.generator is None or not mismatched(draw):
                continue
            if draw.by_default and draw.default.state == ACCELERATOR_DEFAULT:
                continue  # a CUDA default with a CPU generator is DL114's finding
            if _may_follow_a_default_elsewhere(ctx, draw):
                continue
            yield self.violation(
                draw.call,
                draw=f"{ctx.code_for(draw.call.func)}(...)",
                draws_on=draw.draws_on,
                generator=ctx.code_for(draw.generator),
                generator_device=draw.generator_device,
                remedy=_remedy(draw),
            )
