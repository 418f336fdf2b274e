from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.argument_places import place_of_argument
from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.local_bindings import attribute_bindings, bindings
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import MODULE
from devicelint.analysis.placement_values import cpu_only_script
from devicelint.analysis.training.syntax import short
from devicelint.analysis.vocabulary import HOST_ONLY_ARGUMENTS, PRESERVING_METHODS
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class HostArgumentOnDevice(Rule):
    """
    ## What it does
    Flags a tensor on the accelerator passed where PyTorch only takes a CPU tensor: the
    `lengths` of `torch.nn.utils.rnn.pack_padded_sequence`, and the state handed to
    `torch.set_rng_state`/`torch.cuda.set_rng_state` (a CPU `ByteTensor` for either generator).
    The value counts as on the device
    when the code moved it there (`lengths.cuda()`, a batch moved with `.to(device)` and handed
    to the model), when it travelled with a batch that Lightning moves, when a module's
    `forward` computes it from its own inputs (`lengths = (tokens != pad).sum(1)`), or when a
    factory without `device=` builds it where an accelerator is the default device
    (`torch.tensor(sizes)` after `torch.set_default_tensor_type(torch.cuda.FloatTensor)`, also
    under `if args.cuda:`, or in a helper that every call of the file runs inside a
    `with torch.device("cuda"):` block), there or in every call of the module that hands it to
    `forward`.

    ## Why it is a bug on a GPU
    Since PyTorch 1.7 packing checks its lengths on the host and fails with `'lengths' argument
    should be a 1D CPU int64 tensor, but got 1D cuda:0 Long tensor`; restoring an RNG state
    from a CUDA tensor fails the type check of `set_state` (a resume path, rarely tested). On a CPU-only machine
    every tensor is on the host, so tests pass and the job dies on its first GPU batch.

    ## Example
    ```python
    def forward(self, tokens):
        lengths = (tokens != self.pad).sum(dim=1)
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
    ```

    ## Use instead
    ```python
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
    ```

    ## Fix safety
    No automatic fix: moving the lengths back at the call is usually right, but keeping them on
    the host where the batch is made avoids a copy each step; the author chooses.

    ## Known limits
    A `lengths` parameter of `forward` is only reported when a caller in the file passes a
    device tensor: a model's input is presumed to be on the device, but callers often pass
    lengths kept on the CPU on purpose. Lengths given as a Python list are always right. A
    module class of another project module counts too: `model(tokens, lengths)` is reported
    when `lengths` is on the device and the class's `forward` (or the method called) hands that
    parameter as it is to `pack_padded_sequence`; the finding names that file and line.
    """

    code = "DL118"
    name = "host-argument-on-device"
    summary = (
        "A device tensor passed where PyTorch takes only a CPU tensor (pack_padded_sequence lengths, an RNG state)."
    )
    message = "`{callee}` needs `{keyword}` on the CPU, but `{value}` is on the device; pass `{value}.cpu()`"
    tokens = ("pack_padded_sequence", "set_rng_state")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if cpu_only_script(ctx):
            return
        imported = any(c.host_only for c in ctx.project.classes.values())
        for call in ctx.index.of_type(cst.Call):
            qualified = ctx.qualified_name(call.func) or ""
            wanted = HOST_ONLY_ARGUMENTS.get(qualified)
            if wanted is None:
                if imported:
                    yield from _imported_module_call(self, ctx, call)
                continue
            value = _argument(call, *wanted)
            if value is not None and _on_device(ctx, value):
                yield self.violation(
                    call, callee=qualified.rsplit(".", 1)[-1], keyword=wanted[1], value=short(ctx, value, 40)
                )


def _imported_module_call(rule: Rule, ctx: FileContext, call: cst.Call) -> Iterator[Violation]:
    """`model(tokens, lengths)` (or `model.encode(...)`) on an instance of another project
    module's class whose method hands that parameter to `pack_padded_sequence`'s `lengths`."""
    func = call.func
    receiver, method = (func.value, func.attr.value) if type(func) is cst.Attribute else (func, "forward")
    cls = ctx.project.classes.get(_module_factory(ctx, receiver) or "")
    if cls is None:
        return
    for name, params, param, keyword, callee, line in cls.host_only:
        if name != method or param not in params:
            continue
        value = _argument(call, params.index(param), param)
        if value is not None and _on_device(ctx, value):
            shown = short(ctx, value, 40)
            message = (
                f"`{short(ctx, call)}` hands `{shown}`, which is on the device, to `{callee}`'s `{keyword}` "
                f"({cls.path}:{line}), which needs it on the CPU; pass `{shown}.cpu()`"
            )
            yield Violation(rule=type(rule), node=call, message=message, fix=None)


def _module_factory(ctx: FileContext, receiver: cst.BaseExpression) -> str | None:
    """The constructor (as spelled) of the module `receiver` is: the engine's fact, or the one
    that every value bound to the name (or `self.` attribute) agrees on."""
    facts = file_facts(ctx)
    fact = facts.value(receiver)
    if fact.kind == MODULE:
        return fact.factory
    attr = self_attribute(receiver)
    if attr is not None:
        values: list[cst.BaseExpression] | None = attribute_bindings(ctx, attr, receiver)
    else:
        values = bindings(ctx, receiver.value, receiver) if type(receiver) is cst.Name else None
    found = {(f.kind, f.factory) for f in (facts.value(v) for v in values or ())}
    kind, factory = found.pop() if len(found) == 1 else (None, None)
    return factory if kind == MODULE else None


def _argument(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    if any(arg.star for arg in call.args):
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [arg.value for arg in call.args if arg.keyword is None]
    return positional[position] if position < len(positional) else None


def _on_device(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """Certainly on the accelerator, or wherever the module's inputs are for a reason other than
    being one of those inputs: a function's tensor parameter is presumed to follow the inputs
    (its fact names itself, `lengths.device`), which says nothing about what callers pass."""
    where = place_of_argument(ctx, value)
    if where.scalar or where.batch or file_facts(ctx).value(value).guessed:
        return False  # a part of a tuple from a call the engine cannot see into: maybe a list
    if where.place is Place.DEVICE:
        return True
    if where.place is Place.UNKNOWN:
        return _passed_on_device(ctx, value)
    if where.place is not Place.FOLLOWS:
        return False
    fact = file_facts(ctx).value(value)
    root = value
    while type(root) is cst.Call and type(root.func) is cst.Attribute and root.func.attr.value in PRESERVING_METHODS:
        root = root.func.value  # `lens.long()`: still the parameter, cast
    return not (type(root) is cst.Name and fact.device_expr == f"{root.value}.device")


def _passed_on_device(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """A parameter of a module class's `forward` that it never rebinds, which every call of an
    instance of the class in the file (`model(tokens, lengths)`, the module built here) fills
    with a value `place_of_argument` puts on the device: lengths that a factory built under an
    accelerator default device, which the engine leaves unplaced."""
    function = ctx.index.enclosing_function(value)
    cls = ctx.index.enclosing_class(function) if function is not None else None
    if type(value) is not cst.Name or function is None or cls is None or function.name.value != "forward":
        return False
    names = [p.name.value for p in function.params.params]
    if value.value not in names[1:] or bindings(ctx, value.value, value):
        return False
    index = names.index(value.value) - 1
    places = []
    for call in ctx.index.of_type(cst.Call):
        if _module_factory(ctx, call.func) != cls.name.value or any(a.star for a in call.args):
            continue
        argument = _argument(call, index, value.value)
        if argument is not None:
            places.append(place_of_argument(ctx, argument).place)
    return bool(places) and all(place is Place.DEVICE for place in places)
