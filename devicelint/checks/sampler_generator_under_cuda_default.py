from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.default_device import (
    ACCELERATOR_DEFAULT,
    DefaultDevice,
    calls_under_accelerator_blocks,
    default_device_at,
)
from devicelint.analysis.imported_helpers import imported_calls
from devicelint.analysis.placement_values import DEFAULT_DEVICE_SETTERS
from devicelint.analysis.random_draws import (
    DISTRIBUTED,
    LOADER,
    SAMPLER,
    SPLIT,
    RandomDraw,
    draws_cpu_generator_by_default,
    random_draws,
)
from devicelint.context import FileContext
from devicelint.project.helpers import GIVEN_CPU_GENERATOR
from devicelint.rule_base import Rule, Violation, register

# What draws with a CPU generator when the call is given none.
_IMPLICIT_GENERATOR = {
    LOADER: "the CPU generator of its shuffling `RandomSampler`",
    SAMPLER: "a CPU generator (none given)",
    SPLIT: "the CPU `torch.default_generator` (none given)",
    DISTRIBUTED: "a CPU generator (`DistributedSampler` always makes one when it shuffles)",
}


def _in_force(ctx: FileContext, default: DefaultDevice) -> str:
    setter = default.setter
    text = ctx.code_for(setter) if setter is not None else "the default device"
    parent = ctx.index.parent(setter) if setter is not None else None
    if type(parent) is cst.WithItem:
        return f"inside `with {text}:`"
    if type(setter) is cst.Call and ctx.qualified_name(setter.func) not in DEFAULT_DEVICE_SETTERS:
        # an imported function that sets it: say what the call does
        return f"after `{text}`, which makes `{default.device}` the default device"
    return f"after `{text}`"


@register
class SamplerGeneratorUnderCudaDefault(Rule):
    """
    ## What it does
    Flags random sampling that runs while a CUDA (or other accelerator) default device is in
    force with no generator on that device: a shuffling `DataLoader`, `RandomSampler`,
    `random_split` or `DistributedSampler` without `generator=`, and any sampler or random
    factory without `device=` that is handed a CPU generator. The default is in force after
    `torch.set_default_device("cuda")` or `torch.set_default_tensor_type(torch.cuda.FloatTensor)`
    earlier in the same function (or in a helper it called earlier, in every same-file caller
    before the call, up to three calls up, a method called on an instance of a class of the file
    included: `trainer.fit()` in `main()` after the setter, reaching the sampler through
    `self._loader()`, or `opts = Options()` then `opts.initialize()` setting it; in the class's
    `__init__` or Lightning `setup`/`prepare_data`/
    `configure_model`, or at the module's top level), and inside `with torch.device("cuda"):`
    around the sampler or around a call of a same-file helper that builds it (reported at that
    call).

    ## Why it is a bug on a GPU
    The samplers draw their permutation with `torch.randperm(n, generator=g)`. Under a CUDA
    default the permutation is made on the GPU, but the generator torch picks for a shuffling
    `RandomSampler`, for `random_split` (`torch.default_generator`) and for `DistributedSampler`
    is a CPU one, so the first epoch fails with `RuntimeError: Expected a 'cuda' device type
    for generator but found 'cpu'`. A `DataLoader` also draws its base seed with its
    `generator` on the default device, so a CPU generator fails there even without shuffling.
    CPU-only runs never see it.

    ## Example
    ```python
    torch.set_default_device("cuda")
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    ```

    ## Use instead
    ```python
    torch.set_default_device("cuda")
    loader = DataLoader(dataset, batch_size=64, shuffle=True,
                        generator=torch.Generator(device="cuda"))
    ```
    Better still, keep the default on the CPU and move the model and batches explicitly.

    ## Fix safety
    No automatic fix: a CUDA generator is right only while the CUDA default is in force when
    the loader is iterated, which the file may not show.

    ## Known limits
    The sampler's construction is judged, not its iteration (a loader built outside a
    `with torch.device("cuda"):` block and iterated inside it also fails). A default set in
    another file is seen only where a function of another project module that sets it (its last
    setter naming an accelerator, `torch.set_default_tensor_type("torch.cuda.FloatTensor")` in
    `init_env(args)`) is called earlier in the same function; a module of the project that sets it
    at import is not seen. A name bound to `torch.device("cuda" if
    torch.cuda.is_available() else "cpu")` and a device read from the program's settings
    (`args.device`, `cfg["device"]`, `torch.device(cli.device)` of `cli = parser.parse_args()`,
    of the kind the file's own `--device` default names), or a name one of whose bindings is an
    accelerator (`device = idist.device()`, then `device = torch.device("mps")` on a Mac) count
    as the accelerator, the run where the sampler fails; any other device the file does not show
    (`model.device`) is not judged. A `shuffle=` that is not a literal `True` (directly or in a
    `**` mapping the file shows) is not followed. A `torch.randperm` without `generator=` is fine (it
    uses the CUDA default generator) and is not reported. See DL115 for generators created on
    the wrong device when no default is set.
    """

    code = "DL114"
    name = "sampler-generator-under-cuda-default"
    summary = "A shuffling DataLoader, RandomSampler, random_split or DistributedSampler, or a draw handed a CPU generator, under a CUDA default device."
    message = "{draw} draws with {generator} {in_force}, so it fails with `Expected a '{device}' device type for generator but found 'cpu'`; {remedy}"
    tokens = ("set_default_device", "set_default_tensor_type", "device(")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        draws = random_draws(ctx)
        for draw in draws:
            if draw.default.state == ACCELERATOR_DEFAULT and draws_cpu_generator_by_default(draw):
                yield self._report(ctx, draw.call, draw, draw.default, f"`{ctx.code_for(draw.call.func)}(...)`")
        # A helper of this file that builds the sampler, called inside `with torch.device(...)`:
        # reported at the call, where the block makes it wrong.
        blocks = calls_under_accelerator_blocks(ctx)
        for draw in draws:
            callee = ctx.index.enclosing_function(draw.call)
            if callee is None or id(callee) not in blocks or draw.default.setter is not None:
                continue
            if not draws_cpu_generator_by_default(draw):
                continue
            for call, block in blocks[id(callee)]:
                label = f"`{ctx.code_for(call.func)}(...)` (its `{ctx.code_for(draw.call.func)}(...)`)"
                yield self._report(ctx, call, draw, block, label)
        # A function of another module that builds one, called while the default is in force.
        for call, helper, _ in imported_calls(ctx):
            if not helper.uses.implicit_draws:
                continue
            default = default_device_at(ctx, call)
            if default.state != ACCELERATOR_DEFAULT:
                continue
            kind, name, line = helper.uses.implicit_draws[0]
            given = kind.endswith(GIVEN_CPU_GENERATOR)
            kind = kind.removesuffix(GIVEN_CPU_GENERATOR)
            yield self.violation(
                call,
                draw=f"`{ctx.code_for(call.func)}(...)` (its `{name}(...)` at {helper.path}:{line})",
                generator="the CPU generator it is handed there"
                if given
                else _IMPLICIT_GENERATOR.get(kind, "a CPU generator (none given)"),
                in_force=_in_force(ctx, default),
                device=default.device,
                remedy=_remedy(kind, default),
            )

    def _report(
        self, ctx: FileContext, node: cst.Call, draw: RandomDraw, default: DefaultDevice, label: str
    ) -> Violation:
        if draw.generator is not None:
            generator = f"the CPU generator `{ctx.code_for(draw.generator)}`"
        else:
            generator = _IMPLICIT_GENERATOR[draw.kind]
        return self.violation(
            node,
            draw=label,
            generator=generator,
            in_force=_in_force(ctx, default),
            device=default.device,
            remedy=_remedy(draw.kind, default),
        )


def _remedy(kind: str, default: DefaultDevice) -> str:
    if kind == DISTRIBUTED:
        return "build and iterate the sampler where the default device is the CPU"
    return f'pass `generator=torch.Generator(device="{default.device}")`'
