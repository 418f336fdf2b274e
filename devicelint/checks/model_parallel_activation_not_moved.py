from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.devices import DeviceId, distinct
from devicelint.analysis.facts import Crossing, FileFacts, file_facts
from devicelint.analysis.model_events import short
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import ClassFacts, class_facts, module_constructor
from devicelint.analysis.placement_facts import MOVE_METHODS, PARAMETER_FREE_MODULES
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class ModelParallelActivationNotMoved(Rule):
    """
    ## What it does
    Flags a value on one stated GPU meeting a module or tensor on another: in a module whose
    `__init__` places submodules on different devices (`self.enc = Enc().to("cuda:0")`,
    `self.dec = Dec().to("cuda:1")`), `forward` passing the output of a stage on one device
    straight into a stage on another (`self.dec(h)` where `h = self.enc(x)`) without
    `h.to("cuda:1")`; targets on one device given to a loss together with the output of such a
    model, whose last stage sits on another (`criterion(model(x), y.to("cuda:0"))` when the
    last stage is on cuda:1); and any other op between tensors on two different stated
    devices. In such a class, also flags a stage with weights that `__init__` never places
    (`self.norm = nn.LayerNorm(256)` between stages on cuda:0 and cuda:1) when `forward` feeds
    it a GPU activation.

    ## Why it is a bug on a GPU
    Manual model parallelism is only correct if every activation crosses to the next stage's
    device explicitly. Otherwise the first forward fails with `RuntimeError: Expected all
    tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1`. The
    model's output lives on the last stage's device, so labels moved to the first device fail
    in the loss the same way. A stage left out of the placement stays on the CPU, and the first
    GPU activation it receives fails the same way.

    ## Example
    ```python
    def forward(self, x):
        h = self.enc(x.to("cuda:0"))
        return self.dec(h)          # dec is on cuda:1
    ...
    loss = criterion(model(x), y.to("cuda:0"))
    ```

    ## Use instead
    ```python
    def forward(self, x):
        h = self.enc(x.to("cuda:0"))
        return self.dec(h.to("cuda:1"))
    ...
    loss = criterion(model(x), y.to("cuda:1"))
    ```

    ## Fix safety
    No fix: the stage devices may be what is wrong.

    ## Known limits
    Devices come from the placement engine and are compared only where the code states them
    (`"cuda:1"`, `.cuda(1)`, `torch.device("cuda", 1)`, a name, `self.<attr>`, module constant
    or `__init__` default bound to one) or indexes one list (`devs[0]` vs `devs[1]`); a device a
    caller passes in is never judged. The engine follows values through names, branches,
    torch functions, tensor methods, parameterless `torch.nn` layers and the `forward` of the
    file's module classes. An unplaced stage is one built from a `torch.nn` layer or a module
    class of the file with no `device=`, and moved nowhere in the file (`model.norm.to(...)`
    counts as placing it); parameterless layers are exempt. The builtin `sum` over a list or
    tuple display (or a local bound once to one) of values on two stated GPUs counts as a
    crossing; `torch.stack`/`torch.cat` are the engine's.
    """

    code = "DL208"
    name = "model-parallel-activation-not-moved"
    summary = "Manual model parallelism must move each activation to the next stage's device."
    message = "`{value}` is on {have} but {consumer} is on {want}; move it with `{moved}` first"
    tokens = (".to", ".cuda", "device")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        facts = file_facts(ctx)
        crossed: set[int] = set()
        for crossing in facts.crossings:
            crossed.add(id(crossing.node))
            yield self._crossing(ctx, facts, crossing)
        if "sum(" in ctx.source:
            yield from self._summed_across_devices(ctx, facts, crossed)
        for cls in class_facts(ctx).values():
            yield from self._unplaced_stages(ctx, facts, cls)

    def _crossing(self, ctx: FileContext, facts: FileFacts, crossing: Crossing) -> Violation:
        have, want = crossing.value.device, crossing.other.device
        assert have is not None and want is not None
        source = _output_of(ctx, facts, crossing.value_node)
        where = have.label() + (f" (the output of `{source}`)" if source else "")
        return self.violation(
            crossing.value_node,
            value=short(ctx, crossing.value_node, 40),
            have=where,
            consumer=f"`{short(ctx, crossing.other_node, 40)}`",
            want=want.label(),
            moved=_moved(ctx, crossing.value_node, want),
        )

    def _summed_across_devices(self, ctx: FileContext, facts: FileFacts, crossed: set[int]) -> Iterator[Violation]:
        """The builtin `sum([a, b])` (or over a list bound once to a literal) adds the outputs
        of stages on two stated devices: `a + b` across GPUs, hidden in the reduction."""
        if any(node.name.value == "sum" for node in ctx.index.of_type(cst.FunctionDef)) or _sum_imported(ctx):
            return
        for call in ctx.index.of_type(cst.Call):
            if not (type(call.func) is cst.Name and call.func.value == "sum" and call.args) or id(call) in crossed:
                continue
            first = call.args[0]
            if first.star or first.keyword is not None:
                continue
            elements = _literal_elements(ctx, first.value)
            seen: list[tuple[cst.BaseExpression, DeviceId]] = []
            for element in elements:
                device = facts.value(element).device
                if device is None or not device.literal or not device.is_accelerator:
                    continue
                other = next(((node, d) for node, d in seen if distinct(d, device)), None)
                if other is not None:
                    yield self.violation(
                        element,
                        value=short(ctx, element, 40),
                        have=device.label(),
                        consumer=f"`{short(ctx, other[0], 40)}`, which `{short(ctx, call, 40)}` adds it to,",
                        want=other[1].label(),
                        moved=_moved(ctx, element, other[1]),
                    )
                    break
                seen.append((element, device))

    def _unplaced_stages(self, ctx: FileContext, facts: FileFacts, cls: ClassFacts) -> Iterator[Violation]:
        """A stage with weights that `__init__` leaves on the CPU between placed ones, fed a GPU
        activation by `forward`: reported once, at its construction."""
        placed = facts.placed_submodules(cls)
        devices = list(placed.values())
        if not any(distinct(a, b) for i, a in enumerate(devices) for b in devices[i + 1 :]):
            return
        forward = cls.methods.get("forward")
        if forward is None:
            return
        reported: set[str] = set()
        for attr, value, method in cls.assignments:
            if attr in placed or attr in reported or method is not cls.methods.get("__init__"):
                continue
            if not _unplaced_stage(ctx, facts, value, attr):
                continue
            fed = _gpu_input(ctx, facts, forward, attr)
            if fed is None:
                continue
            reported.add(attr)
            argument, device = fed
            statement = ctx.index.parent(value) or value
            yield self.violation(
                statement,
                value=f"self.{attr}",
                have="the CPU (`__init__` never places it)",
                consumer=f"its input `{short(ctx, argument, 30)}` in `forward`",
                want=device.label(),
                moved=f"{short(ctx, value, 40)}.to({_spelled(device)})",
            )


def _unplaced_stage(ctx: FileContext, facts: FileFacts, value: cst.BaseExpression, attr: str) -> bool:
    """Built from a `torch.nn` layer with weights, or a module class of this file that places
    nothing itself, without `device=`, and moved nowhere in the file (also read back from a
    container it was put in: `self.stage = parts[0]`)."""
    value = through_containers(ctx, value)
    built = module_constructor(ctx, value)
    if built is None or built in PARAMETER_FREE_MODULES or type(value) is not cst.Call:
        return False
    own = class_facts(ctx).get(built)
    if own is not None and (facts.placed_submodules(own) or _moves_itself(facts, own)):
        return False
    if any(arg.keyword is not None and arg.keyword.value == "device" for arg in value.args):
        return False
    # placed elsewhere: `self.head.to(dev)`, `model.head.cuda(1)`
    return not re.search(r"\." + re.escape(attr) + r"\s*\.\s*(to|cuda)\(", ctx.source)


def _moves_itself(facts: FileFacts, cls: ClassFacts) -> bool:
    """`self.to(device)` / `self.cuda()` in `__init__`."""
    init = cls.methods.get("__init__")
    scope = facts.placement.scopes.get(id(init)) if init is not None else None
    moved = scope.facts.get("self") if scope is not None else None
    return moved is not None and moved.where is not None


def _gpu_input(
    ctx: FileContext, facts: FileFacts, forward: cst.FunctionDef, attr: str
) -> tuple[cst.BaseExpression, DeviceId] | None:
    """The first argument `forward` hands `self.<attr>` and the GPU it is on, if stated."""
    for call in ctx.index.walk(forward.body):
        if type(call) is cst.Call and dotted_name(call.func) == f"self.{attr}" and call.args and not call.args[0].star:
            device = facts.value(call.args[0].value).device
            if device is not None and device.literal and device.is_accelerator:
                return call.args[0].value, device
    return None


def _output_of(ctx: FileContext, facts: FileFacts, node: cst.CSTNode) -> str | None:
    """`self.enc` for `self.enc(x)`, `F.relu(self.enc(x))` or `self.enc(x).view(...)`: the placed
    module whose output the value is, where the expression shows it."""
    for _ in range(8):
        if type(node) is not cst.Call:
            return None
        callee = facts.value(node.func)
        if dotted_name(node.func) is not None and (
            callee.device is not None or _placed_self_module(ctx, facts, node.func)
        ):
            return dotted_name(node.func)
        if type(node.func) is cst.Attribute and (ctx.qualified_name(node.func) or "").startswith("torch.") is False:
            node = node.func.value  # `h.view(...)`: the receiver
        elif node.args and not node.args[0].star:
            node = node.args[0].value  # `F.relu(h)`, `torch.flatten(h, 1)`
        else:
            return None
    return None


def _placed_self_module(ctx: FileContext, facts: FileFacts, func: cst.BaseExpression) -> bool:
    name = dotted_name(func) or ""
    cls_node = ctx.index.enclosing_class(func)
    cls = class_facts(ctx).get(cls_node.name.value) if cls_node is not None else None
    return cls is not None and name.startswith("self.") and name[5:] in facts.placed_submodules(cls)


def _moved(ctx: FileContext, node: cst.CSTNode, want: DeviceId) -> str:
    """`y.to("cuda:1")` for `y.to("cuda:0")` or `y`."""
    receiver = node
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in MOVE_METHODS:
        receiver = node.func.value
    return f"{short(ctx, receiver, 40)}.to({_spelled(want)})"


def _spelled(device: DeviceId) -> str:
    return f'"{device.text}"' if device.literal else device.text


def _sum_imported(ctx: FileContext) -> bool:
    """`from x import sum` (or `as sum`): `sum` is not the builtin."""
    for alias in ctx.index.of_type(cst.ImportAlias):
        bound = alias.asname.name if alias.asname is not None else alias.name
        if type(bound) is cst.Name and bound.value == "sum":
            return True
    return False


def _literal_elements(ctx: FileContext, node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The elements of a list or tuple display, or of the one such display a local name is bound to."""
    name = dotted_name(node)
    if name is not None and "." not in name:
        function = ctx.index.enclosing_function(node)
        values = [
            a.value
            for a in (ctx.index.walk(function) if function is not None else ())
            if type(a) is cst.Assign and any(dotted_name(t.target) == name for t in a.targets)
        ]
        if len(values) != 1:
            return []
        node = values[0]
    if isinstance(node, (cst.List, cst.Tuple)):
        return [e.value for e in node.elements if type(e) is cst.Element]
    return []
