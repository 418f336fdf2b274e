from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.argument_places import ArgumentPlace, place_of_argument
from devicelint.analysis.facts import Meeting, Place, file_facts
from devicelint.analysis.imported_helpers import imported_calls
from devicelint.analysis.instance_parameters import instance_binding
from devicelint.analysis.modules import module_classes
from devicelint.analysis.placement_facts import ACCELERATOR, FOLLOWS
from devicelint.analysis.placement_values import cpu_only_script, on_a_device_path
from devicelint.analysis.stale_aliases import alias_source
from devicelint.analysis.training.syntax import short
from devicelint.analysis.vocabulary import names_a_loss
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@dataclass(frozen=True)
class OpArguments:
    """Which arguments of one op must share a device. Positions count the tensor the op works
    on first: the receiver of a method, the first argument of a `torch.` function."""

    # positions and keywords of arguments that are not tensors to match (a fill value, a dim)
    ignored_positions: tuple[int, ...] = ()
    ignored_keywords: tuple[str, ...] = ("dim", "value", "out", "reduce", "side", "sorter")


# Ops that need every tensor argument on one device. Binary operators and the engine's
# meeting methods are not listed for CPU tensors the engine records itself (see `_met`).
_INDEXING = OpArguments()
OPS: dict[str, OpArguments] = {
    # indexing a table by an index tensor: CUDA kernels want both on the table's device
    "index_select": _INDEXING,
    "gather": _INDEXING,
    "take": _INDEXING,
    "take_along_dim": _INDEXING,
    "index_add": _INDEXING,
    "index_add_": _INDEXING,
    "index_copy": _INDEXING,
    "index_copy_": _INDEXING,
    "index_fill": OpArguments(ignored_positions=(3,)),
    "index_fill_": OpArguments(ignored_positions=(3,)),
    "scatter": _INDEXING,
    "scatter_": _INDEXING,
    "scatter_add": _INDEXING,
    "scatter_add_": _INDEXING,
    "scatter_reduce": _INDEXING,
    "scatter_reduce_": _INDEXING,
    "searchsorted": _INDEXING,
    "bucketize": _INDEXING,
    # tensor bounds and operands
    "clamp": OpArguments(),
    "clamp_": OpArguments(),
    "clip": OpArguments(),
    "clip_": OpArguments(),
    "where": OpArguments(),
    "maximum": OpArguments(),
    "minimum": OpArguments(),
    "fmax": OpArguments(),
    "fmin": OpArguments(),
    "lerp": OpArguments(),
    "lerp_": OpArguments(),
    # the mask must sit with the tensor; the fill value may be a 0-dim CPU tensor
    "masked_fill": OpArguments(ignored_positions=(2,)),
    "masked_fill_": OpArguments(ignored_positions=(2,)),
    "masked_scatter": OpArguments(),
    "masked_scatter_": OpArguments(),
}


@register
class OpArgumentsOnDifferentDevices(Rule):
    """
    ## What it does
    Flags an operation whose tensor arguments must share one device when the analysis shows a
    CPU tensor and a device tensor among them where PyTorch does not move either:

    - a CPU tensor indexed by device indices: `table[t]`, `table.index_select(0, t)`,
      `torch.gather(table, 1, t)`, `table.take(t)`, `torch.searchsorted(bins, x)`;
    - a CPU tensor as a `clamp`/`clip` bound (`x.clamp(max=limit)`), in `torch.where`,
      `maximum`, `minimum`, `lerp`, or as a `masked_fill` mask, with a device tensor;
    - a host copy of a tensor (`m = mask.cpu()`, `.to("cpu")`) that meets a device tensor in an
      operator or a tensor op (`x * m`), also inside a helper that the copy is handed to;
    - a name left holding a value from before the code moved it: `prompt = tokens` (or a part,
      `tokens[0]`, or a same-place copy, `tokens.clone()`) bound before
      `tokens = tokens.to(device)`, then meeting a device tensor in an operator, a tensor op or
      a module call (`torch.cat([prompt, new_tokens])`). The code moves `tokens` because it
      may come from the CPU; rebinding the name moves nothing else.

    The CPU side may be a tensor the function made or moved there, or one that the class stored
    once in `__init__` as a plain attribute (`self.alphas_cumprod = torch.from_numpy(...)`, in a
    module or in any other class, such as a sampler); device values are followed into helpers
    through their callers in the file (`self._extract(self.alphas_cumprod, t, x.shape)`).

    ## Why it is a bug on a GPU
    Elementwise operators let a 0-dim CPU tensor meet CUDA tensors, and indexing a CUDA
    tensor with CPU indices is allowed (PyTorch copies the indices). The reverse is not: a CPU
    tensor indexed by CUDA indices fails with `indices should be either on cpu or on the same
    device as the indexed tensor (cpu)`, and `clamp` with tensor bounds, the index ops and
    `masked_fill` fail with `Expected all tensors to be on the same device`. CPU-only tests never
    see it.

    ## Example
    ```python
    class Sampler:
        def __init__(self, steps):
            self.alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, steps), 0)

        def extract(self, t, shape):
            out = self.alphas_cumprod[t]            # t is on the GPU
            return out.to(t.device).view(-1, *[1] * (len(shape) - 1))
    ```

    ## Use instead
    ```python
        def extract(self, t, shape):
            out = self.alphas_cumprod.to(t.device)[t]
            return out.view(-1, *[1] * (len(shape) - 1))
    ```
    In an `nn.Module`, register the table as a buffer (`self.register_buffer(...)`) so that
    `model.to(device)` moves it once; use Python numbers for clamp bounds
    (`x.clamp(max=int(self.size[0]) - 1)`).

    ## Fix safety
    No automatic fix: whether to move the table once, move it at the use, or keep the
    indices on the CPU is the author's choice.

    ## Known limits
    Binary operators and the ops where the engine already sees a CPU tensor made by a factory
    meet a device tensor are reported by DL101 (at the factory) and DL105 (batches), not here.
    A 0-dim CPU tensor made directly (`torch.tensor(5.0)`) is not reported, although `clamp`
    with tensor bounds rejects it too (PyTorch accepts it in `where`, `maximum`, `minimum` and
    elementwise operators). In a plain function, tensors that are only assumed to be wherever
    the function's inputs are do not count as device tensors; devices are followed through
    the callers of a helper only within the file, up to three calls up, and only where every
    caller that shows a device agrees. A host copy of a full reduction (`x.sum().cpu()`) is 0-dim
    and not reported; a copy of a tensor the file does not show as a tensor is not a copy here.
    A name left behind is only followed within one function, from a plain alias bound before
    the move in statement order to `x = x.to(device)`/`x = x.cuda()` of the same name, or to
    a move of its parts into the same name (`batch = {k: v.to(device) for k, v in
    batch.items()}`, `xs = [t.cuda() for t in xs]`), and only when the move
    certainly goes to the accelerator or, in a module's method, to a device the module names
    (`x.to(self.weight.device)`); a value already on the device before the move is not one.
    With the project index, a device tensor handed to a function of another module that indexes
    a table it builds on the host with that argument (`palette[pred.argmax(0)]`, the palette a
    torch factory without `device=`) is reported at the argument, naming the table's line.
    """

    code = "DL116"
    name = "op-arguments-on-different-devices"
    summary = "A CPU tensor and a device tensor meet in an op that needs them on one device (CPU table, device indices; CPU clamp bound)."
    message = "{what}; {advice}"
    tokens = ("torch",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if cpu_only_script(ctx):
            return
        meetings = file_facts(ctx).meetings
        # DL101 reports a factory's CPU tensor, DL105 an unmoved batch; a host copy is this rule's
        met = {id(m.node) for m in meetings if m.cpu.from_factory or m.cpu.batch}
        reported: set[int] = set()
        for meeting in meetings:
            found = None
            if id(meeting.node) not in met:
                found = _copy_meets_device(ctx, meeting) or _left_behind_meets_device(ctx, meeting)
            if found is not None and id(meeting.node) not in reported:
                reported.add(id(meeting.node))
                yield self.violation(meeting.node, fix=None, **found)
        met |= reported
        for node in ctx.index.of_type(cst.Subscript):
            found = _indexed_on_cpu(ctx, node)
            if found is not None:
                yield self.violation(node, fix=None, **found)
        for call in ctx.index.of_type(cst.Call):
            if id(call) in met:
                continue  # the engine records this meeting: DL101/DL105 report it
            found = _mixed_op(ctx, call)
            if found is not None:
                yield self.violation(call, fix=None, **found)
        yield from self._indexed_by_imported_helpers(ctx)

    def _indexed_by_imported_helpers(self, ctx: FileContext) -> Iterator[Violation]:
        """A device tensor handed to a function of another project module that indexes a table it
        builds on the host with it (`decode_segmap(prediction)` doing `palette[pred.argmax(0)]`):
        reported at the argument."""
        if not any(helper.uses.host_indexed for helper in ctx.project.helpers.values()):
            return  # (most files: no call to resolve)
        facts = file_facts(ctx)
        for _, helper, bound in imported_calls(ctx):
            for param, table, line in helper.uses.host_indexed:
                arg = bound.get(param)
                if arg is None or not facts.is_device_tensor(arg, certain=True):
                    continue
                arg_text = short(ctx, arg, 40)
                yield self.violation(
                    arg,
                    fix=None,
                    what=(
                        f"`{helper.qualified}` indexes `{table}`, a CPU tensor it builds ({helper.path}:{line}), "
                        f"with what its `{param}` carries, and `{arg_text}` handed in here is on the device "
                        "(indices must be on the CPU or on the indexed tensor's device)"
                    ),
                    advice=f"build the table on `{param}.device` there, or hand it `{_operand(arg_text)}.cpu()`",
                )
                break


def _copy_meets_device(ctx: FileContext, meeting: Meeting) -> dict[str, str] | None:
    """A host copy (`x.cpu()`) that the engine sees meet a device tensor in an operator or a
    tensor op (`t * mask_cpu`): certainly on two devices, whatever the copy's dtype."""
    cpu, device = meeting.cpu, meeting.device
    if not cpu.copied or cpu.from_factory or cpu.batch or meeting.how != "op" or device.scalar:
        return None
    if device.where != ACCELERATOR and not (device.where == FOLLOWS and _in_module(ctx, meeting.node)):
        return None
    if device.where == FOLLOWS and on_a_device_path(ctx, meeting.node):
        # `if not x.is_cuda: side = m.type(torch.FloatTensor)`: the code copies to the host on
        # its own CPU path, so "wherever the inputs are" is the host there
        return None
    cpu_text = short(ctx, meeting.cpu_node, 40)
    device_text = short(ctx, meeting.device_node, 40) if meeting.device_node is not None else "a device tensor"
    return {
        "what": (
            f"`{short(ctx, meeting.node, 50)}` needs its tensors on one device, but `{cpu_text}` is a "
            f"copy on the host and `{device_text}` is on the device"
        ),
        "advice": f"keep it on the device or move it back first (`{_operand(cpu_text)}.to({_device_of(device_text)})`)",
    }


def _left_behind_meets_device(ctx: FileContext, meeting: Meeting) -> dict[str, str] | None:
    """A name bound to a value before the code moved that value (`prompt = x`, then
    `x = x.to(device)`) still holds the unmoved tensor where it meets a device tensor."""
    cpu, device = meeting.cpu, meeting.device
    statement = cpu.origin
    if not cpu.left_behind or type(statement) is not cst.Assign or meeting.how == "return" or device.scalar:
        return None
    if device.where != ACCELERATOR and not (device.where == FOLLOWS and _in_module(ctx, meeting.node)):
        return None
    source = alias_source(statement.value)
    alias = statement.targets[0].target
    if source is None or type(alias) is not cst.Name:
        return None
    cpu_text = short(ctx, meeting.cpu_node, 40)
    device_text = short(ctx, meeting.device_node, 40) if meeting.device_node is not None else "a device tensor"
    kept = f"`{cpu_text}`" if cpu_text == alias.value else f"`{cpu_text}` (from `{alias.value}`)"
    bound = short(ctx, statement.value, 40)
    return {
        "what": (
            f"`{short(ctx, meeting.node, 50)}` needs its tensors on one device, but {kept} is `{bound}` "
            f"from before `{source.value}` was moved, and `{device_text}` is on the device"
        ),
        "advice": f"bind `{alias.value}` after the move, or move it to the same device as well",
    }


def _indexed_on_cpu(ctx: FileContext, node: cst.Subscript) -> dict[str, str] | None:
    """`table[t]`: a CPU table indexed by a device tensor (the reverse is fine)."""
    indices = [
        e.slice.value
        for e in node.slice
        if type(e.slice) is cst.Index
        and not _literal_index(e.slice.value)
        and not _iterated_element(ctx, e.slice.value)
    ]
    if not indices or file_facts(ctx).place_of(node.value) in (Place.DEVICE, Place.FOLLOWS):
        return None
    # Most subscripts have no device index: look at the indices before resolving the table.
    in_module = _in_module(ctx, node, [node.value])
    wheres = [(index, place_of_argument(ctx, index)) for index in indices]
    if not any(_on_device(where, in_module) for _, where in wheres):
        return None
    table = place_of_argument(ctx, node.value)
    if table.place is not Place.HOST or table.scalar:
        return None
    for index, where in wheres:
        if _clashes(table, where, in_module):
            table_text, index_text = short(ctx, node.value, 40), short(ctx, index, 40)
            return {
                "what": (
                    f"`{table_text}` is a CPU tensor{_origin(table, table_text)} indexed by `{index_text}`, "
                    "which is on the device (indices must be on the CPU or on the indexed tensor's device)"
                ),
                "advice": f"move the table first: `{_operand(table_text)}.to({_device_of(index_text)})[...]`{_hint(table)}",
            }
    return None


def _iterated_element(ctx: FileContext, index: cst.BaseExpression) -> bool:
    """`perms[m]` in `for m in best_idx`: the elements of a 1-D index tensor are 0-dim, which
    PyTorch turns into a plain integer (`.item()`) whatever their device."""
    if type(index) is not cst.Name:
        return False
    for node in ctx.index.ancestors(index):
        if type(node) is cst.For:
            loops: list[cst.BaseExpression] = [node.target]
        elif isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
            loops, inner = [], node.for_in
            while inner is not None:
                loops.append(inner.target)
                inner = inner.inner_for_in
        else:
            continue
        if any(type(target) is cst.Name and target.value == index.value for target in loops):
            return True
    return False


def _literal_index(index: cst.BaseExpression) -> bool:
    """`x[0]`, `x[-1]`, `batch["mask"]`, `x[None]`, `x[...]`: never a tensor (most subscripts
    of real code, and resolving where an index lives is what costs)."""
    if type(index) is cst.UnaryOperation:
        return type(index.expression) is cst.Integer
    if type(index) in (cst.Integer, cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis):
        return True
    return type(index) is cst.Name and index.value in ("None", "True", "False")


def _mixed_op(ctx: FileContext, call: cst.Call) -> dict[str, str] | None:
    arguments = _op_arguments(ctx, call)
    if arguments is None:
        return None
    op, operands = arguments
    places = [(expr, place_of_argument(ctx, expr)) for expr in operands]
    in_module = _in_module(ctx, call, [e for e, p in places if p.place is Place.HOST])
    device = next(((e, p) for e, p in places if _on_device(p, in_module) and not p.scalar), None)
    if device is None:
        return None
    for expr, where in places:
        if where.place is Place.HOST and not where.scalar and _clashes(where, device[1], in_module):
            cpu_text, device_text = short(ctx, expr, 40), short(ctx, device[0], 40)
            return {
                "what": (
                    f"`{op}` needs its tensors on one device, but `{cpu_text}` is a CPU "
                    f"tensor{_origin(where, cpu_text)} and `{device_text}` is on the device"
                ),
                "advice": f"move it first (`{_operand(cpu_text)}.to({_device_of(device_text)})`){_hint(where)}",
            }
    return None


def _on_device(where: ArgumentPlace, in_module: bool) -> bool:
    """Certainly on the accelerator, or, in a module's methods, wherever its parameters are. In a
    plain function "wherever the inputs are" is only a guess: a CPU caller makes it the CPU."""
    return where.place is Place.DEVICE or (in_module and where.place is Place.FOLLOWS)


def _clashes(cpu: ArgumentPlace, device: ArgumentPlace, in_module: bool) -> bool:
    if not _on_device(device, in_module) or device.scalar:
        return False  # a 0-dim device index or operand: rare, and not proven to fail
    # An unmoved batch only clashes with what is certainly on the accelerator: something
    # unseen (a wrapper, a callback) may move batches.
    return not cpu.batch or device.place is Place.DEVICE


def _in_module(ctx: FileContext, node: cst.CSTNode, cpu_sides: Sequence[cst.BaseExpression] = ()) -> bool:
    """In code whose inputs are taken to be on the device: a module class's methods, a plain
    helper every call hands the module, or, for a CPU side the function itself makes with a
    factory (`torch.arange(n)`), a function that builds its other tensors on its inputs'
    device (`device = x.device; torch.zeros(n, device=device)`): a CPU value a caller hands in
    says where those inputs are instead."""
    cls = ctx.index.enclosing_class(node)
    function = ctx.index.enclosing_function(node)
    if cls is None and function is not None:
        handed = instance_binding(ctx, function)
        cls = handed[1] if handed is not None else None
        if cls is None:
            facts = file_facts(ctx)
            made_here = bool(cpu_sides) and all(facts.value(side).from_factory for side in cpu_sides)
            return made_here and _places_on_its_inputs(ctx, function)
    return cls is not None and (module_classes(ctx).get(cls.name.value) is cls or names_a_loss(cls.name.value))


def _places_on_its_inputs(ctx: FileContext, function: cst.FunctionDef) -> bool:
    memo: dict[int, bool] = ctx.shared("DL116.places_on_inputs", lambda c: {})
    if id(function) not in memo:
        params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
        from_inputs = {
            target.target.value
            for node in ctx.index.walk(function.body)
            if type(node) is cst.Assign and _input_device(node.value, params)
            for target in node.targets
            if type(target.target) is cst.Name
        }
        facts = file_facts(ctx)
        memo[id(function)] = any(
            type(node) is cst.Arg
            and node.keyword is not None
            and node.keyword.value == "device"
            and (
                _input_device(node.value, params)
                or (type(node.value) is cst.Name and node.value.value in from_inputs)
                # `device = encoded.device` of a tensor computed from the inputs
                or facts.value(node.value).where == FOLLOWS
            )
            for node in ctx.index.walk(function.body)
        )
    return memo[id(function)]


def _input_device(value: cst.BaseExpression, params: set[str]) -> bool:
    """`x.device` of a parameter `x`."""
    return (
        type(value) is cst.Attribute
        and value.attr.value == "device"
        and type(value.value) is cst.Name
        and value.value.value in params
    )


def _op_arguments(ctx: FileContext, call: cst.Call) -> tuple[str, list[cst.BaseExpression]] | None:
    """(the op as written, its tensor operands in the op's order) for a call of one of OPS."""
    if any(a.star for a in call.args):
        return None
    qualified = ctx.qualified_name(call.func) or ""
    if qualified.startswith("torch.") and qualified.count(".") == 1 and qualified[6:] in OPS:
        name, operands, first = qualified[6:], [], 0
        op = f"torch.{name}()"
    elif type(call.func) is cst.Attribute and call.func.attr.value in OPS and not qualified.startswith("torch."):
        name, operands, first = call.func.attr.value, [call.func.value], 1
        op = f".{name}()"
    else:
        return None
    spec = OPS[name]
    position = first
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value not in spec.ignored_keywords:
                operands.append(arg.value)
            continue
        if position not in spec.ignored_positions:
            operands.append(arg.value)
        position += 1
    return (op, operands) if len(operands) >= 2 else None


def _origin(where: ArgumentPlace, text: str) -> str:
    stored = where.attribute
    if stored is None:
        return ""
    if text == f"self.{stored.attr}":
        return " (a plain attribute set in `__init__`)"
    return f" (from `self.{stored.attr}`, a plain attribute set in `__init__`)"


def _hint(where: ArgumentPlace) -> str:
    stored = where.attribute
    if stored is None:
        return ""
    if stored.is_module:
        return f", or register `self.{stored.attr}` as a buffer so that `model.to(device)` moves it"
    return f", or move `self.{stored.attr}` once where the device is known"


def _operand(text: str) -> str:
    """`text` as the receiver of a method call: parenthesised unless it is a name, attribute,
    call or index."""
    simple = text.replace(".", "").replace("_", "").isalnum() or text.endswith((")", "]")) and not text.startswith("(")
    return text if simple and " " not in text else f"({text})"


def _device_of(text: str) -> str:
    return f"{text}.device" if text.replace(".", "").replace("_", "").isalnum() else "device"
