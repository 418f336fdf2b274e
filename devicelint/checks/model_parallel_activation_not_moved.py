from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from devicelint.analysis.index import iter_children
from devicelint.analysis.module_placement import (
    ClassPlacement,
    Device,
    Resolver,
    class_placements,
    distinct,
    moves_itself,
    resolver_for,
    scope_facts,
    short,
)
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register

# torch.nn modules without parameters or buffers: their output stays on the input's device.
_PASS_THROUGH = re.compile(
    r"^(ReLU6?|GELU|SiLU|ELU|SELU|CELU|LeakyReLU|PReLU_|Sigmoid|Tanh|Softmax|LogSoftmax|Softplus|Mish|"
    r"Hardswish|Hardsigmoid|Hardtanh|Dropout\w*|AlphaDropout|Identity|Flatten|Unflatten|"
    r"(Adaptive)?(Max|Avg)Pool[123]d|Upsample\w*|PixelShuffle|ZeroPad\dd|ConstantPad\dd)$"
)
_LOSS = re.compile(r"(loss|crit|cross_entropy|nll|mse|l1|bce|kl_div|huber)", re.I)
# Assignments under these may or may not run: the name's device is then unknown. Loop bodies
# run in order within an iteration, so they are followed.
_BLOCKS = (cst.If, cst.Try, cst.Match) if hasattr(cst, "Match") else (cst.If, cst.Try)


@dataclass(frozen=True)
class _Value:
    device: Device
    source: str  # where the device comes from, for the message


class _Evaluator:
    """Follows which device each name in one function holds, statement by statement."""

    def __init__(self, ctx: FileContext, resolver: Resolver, stages: dict[str, Device], pass_through: set[str], models: dict[str, Device]) -> None:
        self.ctx = ctx
        self.resolver = resolver
        self.stages = stages  # `self.enc` -> its device
        self.pass_through = pass_through  # `self.relu`: parameterless submodules
        self.models = models  # model variables -> device of their output
        self.env: dict[str, _Value | None] = {}

    def value(self, node: cst.BaseExpression, depth: int = 0) -> _Value | None:
        if depth > 20:
            return None
        if isinstance(node, cst.Call):
            moved = self.resolver.move(node)
            if moved is not None:
                device = moved[1]
                return _Value(device, "")
            func = dotted_name(node.func)
            if func in self.stages:
                return _Value(self.stages[func], f"the output of `{func}`")
            if func in self.models:
                return _Value(self.models[func], f"the output of `{func}`")
            if func in self.pass_through or (func and func.startswith("self.") and func.endswith(".forward") and func[:-8] in self.stages):
                if func.endswith(".forward"):
                    return _Value(self.stages[func[:-8]], f"the output of `{func[:-8]}`")
                return self._first_arg(node, depth)
            if func is not None and func.startswith("self."):
                return None
            if isinstance(node.func, cst.Attribute) and not _is_module_path(self.ctx, node.func):
                return self.value(node.func.value, depth + 1)  # `h.view(...)`, `h.relu()`
            if _is_module_path(self.ctx, node.func):
                return self._first_arg(node, depth)  # `F.relu(h)`, `torch.flatten(h, 1)`
            return None
        if isinstance(node, cst.Name):
            return self.env.get(node.value)
        if isinstance(node, (cst.Subscript, cst.Attribute)) and not (isinstance(node, cst.Attribute) and dotted_name(node) in self.stages):
            if isinstance(node, cst.Attribute) and node.attr.value in ("device", "shape", "dtype"):
                return None
            return self.value(node.value, depth + 1)
        if isinstance(node, cst.BinaryOperation):
            return self.value(node.left, depth + 1) or self.value(node.right, depth + 1)
        if isinstance(node, cst.UnaryOperation):
            return self.value(node.expression, depth + 1)
        return None

    def _first_arg(self, call: cst.Call, depth: int) -> _Value | None:
        for arg in call.args:
            if arg.keyword is None and not arg.star:
                value = arg.value
                if isinstance(value, (cst.List, cst.Tuple)) and value.elements and isinstance(value.elements[0], cst.Element):
                    value = value.elements[0].value
                return self.value(value, depth + 1)
            break
        return None

    def assign(self, statement: cst.BaseSmallStatement, nested: bool) -> None:
        targets: list[cst.BaseExpression] = []
        value: cst.BaseExpression | None = None
        if isinstance(statement, cst.Assign):
            targets, value = [t.target for t in statement.targets], statement.value
        elif isinstance(statement, cst.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        elif isinstance(statement, cst.AugAssign):
            targets, value = [statement.target], None
        result = self.value(value) if value is not None and not nested else None
        for target in targets:
            names = [target] if isinstance(target, cst.Name) else [
                e.value for e in getattr(target, "elements", ()) if isinstance(getattr(e, "value", None), cst.Name)
            ]
            for name in names:
                if isinstance(name, cst.Name):
                    self.env[name.value] = result if isinstance(statement, (cst.Assign, cst.AnnAssign)) else None


def _is_module_path(ctx: FileContext, func: cst.BaseExpression) -> bool:
    qualified = ctx.qualified_name(func) or ""
    return qualified.startswith("torch.") and not qualified.startswith("torch.Tensor")


def _statements(ctx: FileContext, function: cst.FunctionDef) -> list[tuple[cst.BaseSmallStatement, bool]]:
    """Small statements of a function in order, each with whether it sits in a branch or loop."""
    out = []
    for node in scope_facts(ctx, function).nodes:
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            nested = False
            for ancestor in ctx.index.ancestors(node):
                if ancestor is function:
                    break
                if isinstance(ancestor, _BLOCKS):
                    nested = True
                    break
            out.extend((small, nested) for small in node.body)
    return out


def _calls_in(ctx: FileContext, statement: cst.CSTNode) -> list[cst.Call]:
    calls = []
    stack = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(node, cst.Call):
            calls.append(node)
        stack.extend(iter_children(node))
    return calls


@register
class ModelParallelActivationNotMoved(Rule):
    """
    ## What it does
    In a module class whose `__init__` places submodules on different devices
    (`self.enc = Enc().to("cuda:0")`, `self.dec = Dec().to("cuda:1")`), flags `forward` passing
    the output of a stage on one device straight into a stage on another (`self.dec(h)` where
    `h = self.enc(x)`), without `h.to("cuda:1")`. In the same file, also flags targets on one
    device given to a loss together with the output of such a model, whose last stage sits on
    another (`criterion(model(x), y.to("cuda:0"))` when the last stage is on cuda:1). And in
    such a class, flags a stage with weights that `__init__` never places (`self.norm =
    nn.LayerNorm(256)` between stages on cuda:0 and cuda:1) when `forward` feeds it a GPU
    activation.

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
    Devices are compared only when literal (`"cuda:1"`, `.cuda(1)`) or indexed from one list
    (`devs[0]` vs `devs[1]`). Values are followed through names, `torch`/`F` functions,
    tensor methods and parameterless `torch.nn` layers; a value assigned inside a branch or
    loop, or produced by any other call, is not judged. Loss checks need the model built from
    the class in the same function as the loss. An unplaced stage is one built from a
    `torch.nn` layer or a module class of the file with no `device=`, and moved nowhere in
    the file (`model.norm.to(...)` counts as placing it); parameterless layers are exempt.
    """

    code = "DL208"
    name = "model-parallel-activation-not-moved"
    summary = "Manual model parallelism must move each activation to the next stage's device."
    message = "`{value}` is on {have} but {consumer} is on {want}; move it with `{moved}` first"
    tokens = (".to", ".cuda")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        outputs: dict[str, Device] = {}
        for name, placement in class_placements(ctx).items():
            if placement.split() is None:
                continue
            output = yield from self._check_forward(ctx, name, placement)
            if output is not None:
                outputs[name] = output
        if outputs:
            yield from self._check_losses(ctx, outputs)

    def _check_forward(self, ctx: FileContext, name: str, placement: ClassPlacement):  # type: ignore[no-untyped-def]
        forward = methods(placement.cls).get("forward")
        if forward is None:
            return None
        stages = {f"self.{attr}": p.device for attr, p in placement.placements.items()}
        pass_through = _pass_through(ctx, placement.cls)
        unplaced = _unplaced_stages(ctx, placement, pass_through)
        # An unplaced stage is reported once; past it, follow the device its input was on.
        evaluator = _Evaluator(ctx, resolver_for(ctx, forward.body), stages, pass_through | set(unplaced), {})
        output: Device | None = None
        for statement, nested in _statements(ctx, forward):
            for call in _calls_in(ctx, statement):
                stage = dotted_name(call.func)
                if stage in unplaced:
                    built = unplaced.pop(stage)  # one finding per stage, at its construction
                    have = evaluator.value(call.args[0].value) if call.args and not call.args[0].star else None
                    if have is not None and have.device.literal and have.device.type not in ("cpu", "meta"):
                        target = f'"{have.device.text}"'
                        yield self.violation(
                            built, value=stage, have="the CPU (`__init__` never places it)",
                            consumer=f"its input `{short(ctx, call.args[0].value, 30)}` in `forward`", want=have.device.label(),
                            moved=f"{short(ctx, built.value, 40)}.to({target})",
                        )
                if stage not in stages:
                    continue
                for arg in call.args:
                    if arg.star:
                        continue
                    have = evaluator.value(arg.value)
                    if have is not None and distinct(have.device, stages[stage]):
                        yield self._report(ctx, arg.value, have, f"`{stage}`", stages[stage])
            if isinstance(statement, cst.Return) and statement.value is not None and not nested:
                returned = evaluator.value(statement.value)
                output = returned.device if returned is not None else None
            evaluator.assign(statement, nested)
        return output

    def _check_losses(self, ctx: FileContext, outputs: dict[str, Device]) -> Iterator[Violation]:
        for function in ctx.index.of_type(cst.FunctionDef):
            if "(" not in ctx.code_for(function.body):
                continue
            models: dict[str, Device] = {}
            for node in scope_facts(ctx, function).nodes:
                if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                    var = node.targets[0].target.value
                    base = node.value
                    while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and base.func.attr.value in ("train", "eval"):
                        base = base.func.value
                    if isinstance(base, cst.Call) and dotted_name(base.func) in outputs:
                        models[var] = outputs[dotted_name(base.func)]  # type: ignore[index]
            if not models:
                continue
            evaluator = _Evaluator(ctx, resolver_for(ctx, function.body), {}, set(), models)
            for statement, nested in _statements(ctx, function):
                for call in _calls_in(ctx, statement):
                    func = dotted_name(call.func) or ""
                    if not _LOSS.search(func.rsplit(".", 1)[-1]):
                        continue
                    values = [(a.value, evaluator.value(a.value)) for a in call.args if not a.star]
                    outs = [v for _, v in values if v is not None and v.source.startswith("the output of")]
                    if not outs:
                        continue
                    for node, have in values:
                        if have is not None and not have.source.startswith("the output of") and distinct(have.device, outs[0].device):
                            yield self._report(ctx, node, have, f"{outs[0].source} (its last stage)", outs[0].device)
                evaluator.assign(statement, nested)

    def _report(self, ctx: FileContext, node: cst.BaseExpression, have: _Value, consumer: str, want: Device) -> Violation:
        value = short(ctx, node, 40)
        target = f'"{want.text}"' if want.literal else want.text
        receiver = node
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in ("to", "cuda", "cpu"):
            receiver = node.func.value  # `y.to("cuda:0")` becomes `y.to("cuda:1")`
        fixed = f"{short(ctx, receiver, 40)}.to({target})"
        where = have.device.label() + (f" ({have.source})" if have.source else "")
        return self.violation(node, value=value, have=where, consumer=consumer, want=want.label(), moved=fixed)


def _unplaced_stages(ctx: FileContext, placement: ClassPlacement, pass_through: set[str]) -> dict[str, cst.Assign]:
    """`self.x = nn.Linear(...)` (or a module class of the file) left on the CPU by an `__init__`
    that places its other stages on devices, and moved nowhere else in the file."""
    init = methods(placement.cls).get("__init__")
    found: dict[str, cst.Assign] = {}
    if init is None:
        return found
    classes = module_classes(ctx)
    for node in scope_facts(ctx, init).nodes:
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)):
            continue
        target = dotted_name(node.targets[0].target) or ""
        attr = target[5:] if target.startswith("self.") and target.count(".") == 1 else None
        if attr is None or attr in placement.placements or target in pass_through:
            continue
        callee = dotted_name(node.value.func) or ""
        qualified = ctx.qualified_name(node.value.func) or ""
        own = callee in classes and callee not in class_placements(ctx) and not moves_itself(ctx, callee)
        if not (own or (qualified.startswith("torch.nn.") and qualified.count(".") == 2)):
            continue
        if any(arg.keyword is not None and arg.keyword.value == "device" for arg in node.value.args):
            continue
        if re.search(r"\." + re.escape(attr) + r"\s*\.\s*(to|cuda)\(", ctx.source):
            continue  # placed elsewhere: `self.head.to(dev)`, `model.head.cuda(1)`
        found[target] = node
    return found


def _pass_through(ctx: FileContext, cls: cst.ClassDef) -> set[str]:
    init = methods(cls).get("__init__")
    found: set[str] = set()
    if init is None:
        return found
    for node in scope_facts(ctx, init).nodes:
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call):
            target = dotted_name(node.targets[0].target) or ""
            qualified = ctx.qualified_name(node.value.func) or ""
            if target.startswith("self.") and qualified.startswith("torch.nn.") and _PASS_THROUGH.match(qualified.rsplit(".", 1)[-1]):
                found.add(target)
    return found
