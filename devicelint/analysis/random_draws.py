"""Random draws and their generators: on which device a sampler or random factory draws its
numbers, and on which device the generator it uses lives.

PyTorch requires the two to match (`Expected a 'cuda' device type for generator but found
'cpu'`). DL114 reports the mismatches that a CUDA default device causes, DL115 those of a
generator created on the wrong device; both read `random_draws(ctx)`, so a draw is judged once
and the rules cannot disagree (a CUDA generator handed to a `DataLoader` is right exactly when a
CUDA default is in force).

What torch does when no generator is given (torch/utils/data): `RandomSampler`, a shuffling
`DataLoader`, `random_split` (`torch.default_generator`) and `DistributedSampler` draw with a CPU
generator; `SubsetRandomSampler` and the factories use the default generator of the device they
draw on, which always matches. A `DataLoader` draws its base seed with `loader.generator` on the
default device whether or not it shuffles.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.argument_places import passed_for, place_of_argument
from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.default_device import (
    ACCELERATOR_DEFAULT,
    CPU_DEFAULT,
    NO_DEFAULT,
    DefaultDevice,
    default_device_at,
)
from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.imported_helpers import argument_named_in_place
from devicelint.analysis.instance_attributes import judged_for_instances
from devicelint.analysis.local_bindings import (
    attribute_bindings,
    bindings,
    device_type_of,
    mapping_values,
    record_field,
)
from devicelint.analysis.model_events.scopes import module_functions, only_return
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import ACCELERATOR, ACCELERATOR_STRINGS, DEVICE_VALUE
from devicelint.analysis.training.helpers import returned_in_callers_words
from devicelint.context import FileContext

LOADER = "loader"  # DataLoader: base seed always, RandomSampler when shuffling
SAMPLER = "sampler"  # RandomSampler: a CPU generator unless given one
SUBSET_SAMPLER = "subset-sampler"  # SubsetRandomSampler: the default device's generator unless given one
SPLIT = "split"  # random_split: torch.default_generator (CPU) unless given one
DISTRIBUTED = "distributed"  # DistributedSampler: always a CPU generator when shuffling
FACTORY = "factory"  # torch.randperm/rand/randn/randint: the draw device's generator unless given one
TENSOR_DRAW = "tensor"  # x.normal_(...), torch.multinomial(x, ...): draws where the tensor lives

# Qualified name -> (kind, position of `generator` among positional arguments, position of `shuffle`).
_DATA_UTILITIES: dict[str, tuple[str, int | None, int | None]] = {
    "torch.utils.data.DataLoader": (LOADER, 12, 2),
    "torch.utils.data.dataloader.DataLoader": (LOADER, 12, 2),
    "torch.utils.data.RandomSampler": (SAMPLER, 3, None),
    "torch.utils.data.sampler.RandomSampler": (SAMPLER, 3, None),
    "torch.utils.data.SubsetRandomSampler": (SUBSET_SAMPLER, 1, None),
    "torch.utils.data.sampler.SubsetRandomSampler": (SUBSET_SAMPLER, 1, None),
    "torch.utils.data.random_split": (SPLIT, 2, None),
    "torch.utils.data.dataset.random_split": (SPLIT, 2, None),
    "torch.utils.data.DistributedSampler": (DISTRIBUTED, None, 3),
    "torch.utils.data.distributed.DistributedSampler": (DISTRIBUTED, None, 3),
}
# Factories that create a fresh random tensor on `device=` or the default device.
_RANDOM_FACTORIES = frozenset({"torch.randperm", "torch.rand", "torch.randn", "torch.randint"})
# Draws on the device of a tensor: in-place sampling methods (on the receiver) and functions
# sampling from a tensor of probabilities or rates (on their first argument).
_TENSOR_METHODS = frozenset(
    {"normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_", "cauchy_"}
)
_TENSOR_FUNCTIONS = frozenset({"torch.multinomial", "torch.bernoulli", "torch.poisson"})
# `torch.nn.init` fills its `tensor` in place, drawing where it lives, with `generator=` (torch 2.2+).
_INIT_FUNCTIONS = frozenset(
    f"torch.nn.init.{name}"
    for name in (
        "uniform_",
        "normal_",
        "trunc_normal_",
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "orthogonal_",
        "sparse_",
    )
)
# torch's own CPU generator (the CUDA ones are `torch.cuda.default_generators[i]`).
_CPU_DEFAULT_GENERATOR = "torch.default_generator"
# Seeding functions that return `torch.default_generator` (the CPU one), so
# `gen = torch.manual_seed(0)` is a CPU generator (`torch.cuda.manual_seed` returns None).
_SEEDS_RETURNING_CPU_GENERATOR = frozenset({"torch.manual_seed", "torch.random.manual_seed"})

CPU = "cpu"


@dataclass(frozen=True)
class RandomDraw:
    """One call that draws random numbers, with where it draws and with which generator."""

    call: cst.Call
    kind: str
    # The `generator=` expression, or None when torch picks one.
    generator: cst.BaseExpression | None
    # Device type of the generator ("cpu", "cuda", ...), or None when the file does not show it.
    generator_device: str | None
    # Device type the numbers are drawn on, or None when the file does not show it.
    draws_on: str | None
    # The default device in force at the call (its setter explains a CUDA `draws_on`).
    default: DefaultDevice
    # Whether `draws_on` comes from the default device rather than an explicit `device=`.
    by_default: bool


def _argument(call: cst.Call, keyword: str, position: int | None) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and a.star != "**"]
    if position is None or any(a.star for a in positional[: position + 1]) or len(positional) <= position:
        return None
    return positional[position].value


def generator_device(ctx: FileContext, expr: cst.BaseExpression, depth: int = 0) -> str | None:
    """Device type of a generator expression: `torch.Generator(device="cuda")` (also seeded with
    `.manual_seed(...)`), a name or `self.` attribute bound only to such values (a helper's
    parameter: what the file's calls pass), torch's default generators. None when the file
    does not show it."""
    if depth > 6:
        return None
    if type(expr) is cst.Call:
        qualified = ctx.qualified_name(expr.func)
        if qualified == "torch.Generator":
            device = _argument(expr, "device", 0)
            if device is None:
                return None if any(a.star for a in expr.args) else CPU
            return device_type_of(ctx, device) or _passed_device_type(ctx, device, 0)
        if qualified in _SEEDS_RETURNING_CPU_GENERATOR:
            return CPU
        if type(expr.func) is cst.Attribute and expr.func.attr.value == "manual_seed":
            return generator_device(ctx, expr.func.value, depth + 1)
        if type(expr.func) is cst.Name:
            function = module_functions(ctx).get(expr.func.value)
            returned = only_return(ctx, function) if function is not None else None
            if returned is not None:  # `make_generator(seed)` of the file: what its `return` hands back
                return generator_device(ctx, returned.value, depth + 1)  # type: ignore[arg-type]  # only_return's value is set
            return _imported_generator(ctx, expr)
        return None
    if type(expr) is cst.Subscript and ctx.qualified_name(expr.value) == "torch.cuda.default_generators":
        return "cuda"
    read = through_containers(ctx, expr)  # `gen, _ = box` of `box = (torch.Generator(...), None)`
    if read is not expr:
        return generator_device(ctx, read, depth + 1)
    if ctx.qualified_name(expr) == _CPU_DEFAULT_GENERATOR:
        return CPU
    if type(expr) is cst.Name:
        values = bindings(ctx, expr.value, expr)
        if values is None:  # a helper's parameter: what its callers in the file hand in
            values = passed_for(ctx, expr)
    elif type(expr) is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self":
        values = attribute_bindings(ctx, expr.attr.value, expr)
        if not values:  # set by a base class's constructor: what this class's instances hand it
            return judged_for_instances(ctx, expr, lambda value: generator_device(ctx, value, depth + 1))
    else:
        return None
    devices = {generator_device(ctx, v, depth + 1) for v in values or ()}
    return devices.pop() if len(devices) == 1 else None


def _imported_generator(ctx: FileContext, call: cst.Call) -> str | None:
    """The device type of the `torch.Generator` a function of another project module returns
    (`ProjectView.functions`: "generator:cuda", or "generator:@device#1=cuda" for one built on
    its `device` parameter, second positional, whose default the call may override)."""
    place = ctx.project.functions.get(dotted_name(call.func) or "", "")
    if not place.startswith("generator:"):
        return None
    device = place[len("generator:") :]
    if not device.startswith("@"):
        return device
    named, _, default = device[1:].partition("=")
    if any(a.star for a in call.args):
        return None
    passed = argument_named_in_place(call, named)
    return device_type_of(ctx, passed) if passed is not None else default or None


def _passed_device_type(ctx: FileContext, expr: cst.BaseExpression, depth: int) -> str | None:
    """The device type a helper's `device` parameter gets (`torch.Generator(device=device)`):
    what every call of the file passes (also through `torch.device(device)`), or, for a
    function the file never calls, its default."""
    if depth > 3:
        return None
    if type(expr) is cst.Call and ctx.qualified_name(expr.func) == "torch.device" and len(expr.args) == 1:
        return device_type_of(ctx, expr.args[0].value) or _passed_device_type(ctx, expr.args[0].value, depth + 1)
    if type(expr) is cst.Attribute and type(expr.value) is cst.Name:
        if expr.value.value == "self":  # `self.device = torch.device(device)` kept by the constructor
            kept = attribute_bindings(ctx, expr.attr.value, expr)
            return _one_type({_device_type_at(ctx, value, depth + 1) for value in kept}) if kept else None
        # `config.device` of a parameter that the file's calls hand a record (dataclass) instance
        handed = passed_for(ctx, expr.value)
        if not handed:
            return None
        fields = [record_field(ctx, value, expr.attr.value) for value in handed]
        if any(field is None for field in fields):
            return None
        return _one_type({_device_type_at(ctx, field, depth + 1) for field in fields if field is not None})
    if type(expr) is not cst.Name:
        return None
    passed = passed_for(ctx, expr)
    if passed is None:
        return None
    if not passed:
        function = ctx.index.enclosing_function(expr)
        params = function.params if function is not None else None
        param = (
            next((p for p in (*params.params, *params.kwonly_params) if p.name.value == expr.value), None)
            if params
            else None
        )
        passed = [param.default] if param is not None and param.default is not None else []
    types = {_named_type(ctx, value) or _passed_device_type(ctx, value, depth + 1) for value in passed}
    return types.pop() if len(types) == 1 else None


def _device_type_at(ctx: FileContext, expr: cst.BaseExpression, depth: int) -> str | None:
    return device_type_of(ctx, expr) or _passed_device_type(ctx, expr, depth)


def _one_type(types: set[str | None]) -> str | None:
    return types.pop() if len(types) == 1 else None


def _device_type(ctx: FileContext, expr: cst.BaseExpression) -> str | None:
    return device_type_of(ctx, expr) or _passed_device_type(ctx, expr, 0)


def _reads_device_of(ctx: FileContext, expr: cst.BaseExpression, owner: str, depth: int = 0) -> bool:
    """Whether the device expression reads `<owner>.device` (`generator.device if generator
    else device`), directly or through the names it is assigned from: a draw on the
    generator's own device."""
    for node in ctx.index.walk(expr):
        if type(node) is cst.Attribute and node.attr.value == "device" and ctx.code_for(node.value) == owner:
            return True
        if type(node) is cst.Name and depth < 2:
            values = bindings(ctx, node.value, node) or []
            if any(_reads_device_of(ctx, value, owner, depth + 1) for value in values):
                return True
        if type(node) is cst.Call and depth < 2:
            # `self.draw_device(generator, device)`: what the helper returns, in these words
            returned = returned_in_callers_words(ctx, node)
            if returned is not None and _reads_device_of(ctx, returned, owner, depth + 1):
                return True
    return False


def _named_type(ctx: FileContext, expr: cst.BaseExpression) -> str | None:
    """`device_type_of`, and "cuda" for a device the placement engine knows is the one the
    models run on (`self.device` of a pipeline or module, `next(model.parameters()).device` of a
    moved model), though not which accelerator it names: a generator on the CPU fails there
    whenever the program runs on a GPU, which is where this linter's findings matter."""
    found = device_type_of(ctx, expr)
    if found is not None:
        return found
    fact = file_facts(ctx).value(expr)
    if fact.kind == DEVICE_VALUE and fact.where == ACCELERATOR and not fact.guessed:
        return "cuda"
    return None


def _value_in_mappings(ctx: FileContext, call: cst.Call, key: str) -> cst.BaseExpression | None:
    """A literal `True` that a `**` mapping of the call gives `key` on some path (the path that
    shuffles fails)."""
    for arg in call.args:
        if arg.star != "**":
            continue
        for value in mapping_values(ctx, arg.value, key, arg) or ():
            if value is not None and _is_true(value):
                return value
    return None


def _keys_exclude(ctx: FileContext, expr: cst.BaseExpression, key: str, use: cst.CSTNode) -> bool:
    """Whether a `**` mapping is known to leave `key` out on every path."""
    values = mapping_values(ctx, expr, key, use)
    return values is not None and all(v is None for v in values)


def _is_false(expr: cst.BaseExpression | None) -> bool:
    return type(expr) is cst.Name and expr.value in ("False", "None")


def _is_true(expr: cst.BaseExpression | None) -> bool:
    return type(expr) is cst.Name and expr.value == "True"


def _implicit_generator(
    ctx: FileContext, kind: str, call: cst.Call, shuffle: cst.BaseExpression | None, draws_on: str | None
) -> str | None:
    """The device of the generator torch uses when the call gets none; None when it draws
    nothing (a loader that does not shuffle) or always matches."""
    if kind == LOADER:
        shuffles = (
            _is_true(shuffle) and _argument(call, "sampler", 3) is None and _argument(call, "batch_sampler", 4) is None
        )
        return CPU if shuffles else None
    if kind == DISTRIBUTED:
        return None if _is_false(shuffle) else CPU
    if kind in (SAMPLER, SPLIT):
        return CPU
    return draws_on  # SubsetRandomSampler and factories use the draw device's default generator


def _draw(ctx: FileContext, call: cst.Call) -> RandomDraw | None:
    qualified = ctx.qualified_name(call.func) or ""
    if qualified in _DATA_UTILITIES:
        kind, generator_position, shuffle_position = _DATA_UTILITIES[qualified]
        explicit_device = None
    elif qualified in _RANDOM_FACTORIES:
        if _argument(call, "generator", None) is None:
            return None  # without a generator a factory uses its own device's default one
        kind, generator_position, shuffle_position = FACTORY, None, None
        explicit_device = _argument(call, "device", None)
    else:
        return _tensor_draw(ctx, call, qualified)
    default = default_device_at(ctx, call)
    if explicit_device is not None:
        # a helper's `device` parameter: what every call of the file passes (or its default)
        generator_text = ctx.code_for(_argument(call, "generator", None))  # type: ignore[arg-type]  # checked above
        if _reads_device_of(ctx, explicit_device, generator_text):
            draws_on = None  # `device=generator.device if generator else device`: its own device
        else:
            draws_on = device_type_of(ctx, explicit_device) or _passed_device_type(ctx, explicit_device, 0)
        if draws_on is None and type(explicit_device) is cst.Attribute:
            # `device=self.device` set from a constructor parameter: what this class's instances get
            draws_on = judged_for_instances(ctx, explicit_device, lambda value: _device_type(ctx, value))
        if draws_on is None and not _reads_device_of(ctx, explicit_device, generator_text):
            draws_on = _named_type(ctx, explicit_device)
        by_default = False
    else:
        by_default = True
        draws_on = default.device if default.state in (ACCELERATOR_DEFAULT, CPU_DEFAULT) else None
    generator = _argument(call, "generator", generator_position) if kind != DISTRIBUTED else None
    if generator is not None and not _is_false(generator):
        device = generator_device(ctx, generator)
    elif any(a.star == "*" for a in call.args) or not all(
        _keys_exclude(ctx, a.value, "generator", a) for a in call.args if a.star == "**"
    ):
        device = None  # `*args` or `**kwargs` may carry the generator
    else:
        generator = None
        shuffle = _argument(call, "shuffle", shuffle_position) if shuffle_position is not None else None
        if shuffle is None and shuffle_position is not None:
            shuffle = _value_in_mappings(ctx, call, "shuffle")
        device = _implicit_generator(ctx, kind, call, shuffle, draws_on)
    return RandomDraw(call, kind, generator, device, draws_on, default, by_default)


def _tensor_draw(ctx: FileContext, call: cst.Call, qualified: str) -> RandomDraw | None:
    """`x.normal_(generator=g)` or `torch.multinomial(p, n, generator=g)`: the draw happens where
    the tensor lives, as the placement engine knows it (only a certain place counts)."""
    generator = _argument(call, "generator", None)
    if generator is None:
        return None
    if qualified in _TENSOR_FUNCTIONS:
        tensor = _argument(call, "input", 0)
    elif qualified in _INIT_FUNCTIONS:
        tensor = _argument(call, "tensor", 0)
    elif (
        type(call.func) is cst.Attribute
        and call.func.attr.value in _TENSOR_METHODS
        and not qualified.startswith("torch.")
    ):
        tensor = call.func.value
    else:
        return None
    if tensor is None:
        return None
    facts = file_facts(ctx)
    place = place_of_argument(ctx, tensor).place
    stated = facts.value(tensor).device
    if place is Place.HOST:
        draws_on: str | None = CPU
    elif place is Place.DEVICE:
        text = (facts.value(tensor).device_expr or "").strip("\"'").split(":", 1)[0]
        draws_on = text if text in ACCELERATOR_STRINGS else "cuda"
    elif place is Place.FOLLOWS and stated is not None and stated.literal and stated.type in ACCELERATOR_STRINGS:
        # wherever a module is, where every call of the method hands it an instance moved to a
        # stated accelerator (`head = Head().to("cuda"); head.sample(h)`)
        draws_on = stated.type
    else:
        return None
    return RandomDraw(call, TENSOR_DRAW, generator, generator_device(ctx, generator), draws_on, NO_DEFAULT, False)


def random_draws(ctx: FileContext) -> list[RandomDraw]:
    """Every sampler, split and random factory of the file, in source order (memoised)."""

    def build(c: FileContext) -> list[RandomDraw]:
        draws = (_draw(c, call) for call in c.index.of_type(cst.Call))
        return [d for d in draws if d is not None]

    return ctx.shared("random_draws", build)


def draws_cpu_generator_by_default(draw: RandomDraw) -> bool:
    """Whether the draw uses a CPU generator on the default device: it fails wherever an
    accelerator default is in force (the implicit generator of a `SubsetRandomSampler` or a
    factory follows the default, so those only with an explicit CPU generator)."""
    if not draw.by_default or draw.generator_device != CPU:
        return False
    return draw.generator is not None or draw.kind not in (SUBSET_SAMPLER, FACTORY, TENSOR_DRAW)


def mismatched(draw: RandomDraw) -> bool:
    """Whether the draw's generator is known to be on another device than the numbers."""
    return draw.generator_device is not None and draw.draws_on is not None and draw.generator_device != draw.draws_on
