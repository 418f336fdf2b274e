"""Which values read in a step region are device tensors.

The placement interpreter (`devicelint.analysis.placement.value_kind`) answers first: a
`device-tensor` on the accelerator is one, a `cpu-tensor`, a module, a device or a number is not
(`labels = y.to("cpu")` is a CPU tensor, `correct = torch.zeros((), device=device)` a device one).

Only where placement is unknown (or "wherever the inputs are") does a narrower fallback apply,
because training code often gets its model and batches from parameters the file cannot follow.
The fallback trusts only strong evidence: the value is the loss the region backpropagates, the
result of a loss function or a model call made in the function, or computed from one of these
(`pred = out.argmax(1)`). A value the file shows to be an `nn.Module` never counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.placement import value_kind
from devicelint.analysis.placement_facts import CPU, DEVICE, DEVICE_VALUE, LOSS_CALLABLE_NAMES, MODEL_NAMES, MODULE, Fact
from devicelint.analysis.placement_classes import module_constructor
from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.loops import StepRegion
from devicelint.analysis.training.step import computed_from, read_names
from devicelint.analysis.training.syntax import assigned_names, method_name, receiver
from devicelint.context import FileContext

# Methods only an nn.Module has (an optimizer has `state_dict` and `zero_grad` too).
MODULE_METHODS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "buffers", "eval"})
LOSS_FUNCTION_WORDS = ("loss", "cross_entropy", "nll", "kl_div", "mse", "l1", "ctc", "hinge", "margin")


@dataclass(frozen=True)
class HotValues:
    """The fallback evidence of one step region."""

    names: frozenset[str]  # names (and `self.x`) that hold the loss, a model output, or values computed from them
    modules: frozenset[str]  # names the file shows to be modules


def hot_values(ctx: FileContext, region: StepRegion) -> HotValues:
    """The names whose values the fallback takes for device tensors in `region`."""

    def build(c: FileContext) -> HotValues:
        modules = module_names(c)
        seeds: set[str] = set()
        for loss in region.losses:
            seeds |= read_names(c, loss)
        # What a loss is computed from sits on the loss's device (`total = sum(per_head.values())`,
        # `loss = criterion(out, y)`): one step back, leaving out values read only to be moved.
        for node in c.index.walk(region.scope.node):
            if isinstance(node, cst.Assign) and any(set(assigned_names(t.target)) & seeds for t in node.targets):
                seeds |= read_names(c, node.value, skip_moves=True)
        for node in c.index.walk(region.body):
            if isinstance(node, cst.Assign) and _calls_model_or_loss(c, node.value, modules):
                for target in node.targets:
                    seeds.update(assigned_names(target.target))
        names = computed_from(c, region.scope.node, {s for s in seeds if "scaler" not in s.lower()})
        return HotValues(frozenset(names - modules), modules)

    return ctx.shared(("training.hot_values", id(region.owner)), build)


def module_names(ctx: FileContext) -> frozenset[str]:
    """Names and `self.x` attributes that the file shows to be `nn.Module`s: built by a module
    class, or used through a method only modules have (`model.parameters()`, `net.eval()`)."""

    def build(c: FileContext) -> frozenset[str]:
        found: set[str] = set()
        for call in c.index.of_type(cst.Call):
            if method_name(call) in MODULE_METHODS and not call.args:
                text = dotted_name(receiver(call))  # type: ignore[arg-type]
                if text is not None:
                    found.add(text)
        for assign in c.index.of_type(cst.Assign):
            value = assign.value
            while isinstance(value, cst.Call) and method_name(value) in ("to", "cuda", "cpu", "eval", "train"):
                value = receiver(value)  # type: ignore[assignment]
            if isinstance(value, cst.Call) and module_constructor(c, value) is not None:
                for target in assign.targets:
                    found.update(assigned_names(target.target))
        return frozenset(found)

    return ctx.shared("training.hot_values.modules", build)


def _calls_model_or_loss(ctx: FileContext, value: cst.BaseExpression, modules: frozenset[str]) -> bool:
    """`criterion(out, y)`, `F.cross_entropy(...)`, `model(x)`, `self.net(x)`, `model(x).loss`."""
    while isinstance(value, (cst.Attribute, cst.Subscript)):
        value = value.value
    if not isinstance(value, cst.Call):
        return False
    qualified = ctx.qualified_name(value.func) or ""
    if qualified.startswith("torch.nn.functional.") and any(w in qualified for w in LOSS_FUNCTION_WORDS):
        return True
    callee = dotted_name(value.func)
    if callee is None:
        return False
    word = callee.rsplit(".", 1)[-1].lower()
    return (
        word in LOSS_CALLABLE_NAMES or word in MODEL_NAMES or callee in modules
        or value_kind(ctx, value.func).kind == MODULE
    )


def placement_says(ctx: FileContext, expr: cst.BaseExpression) -> bool | None:
    """True for a device tensor on the accelerator, False for a CPU tensor, a module, a device or a
    number, None when placement does not know."""
    fact: Fact = value_kind(ctx, expr)
    if fact.kind == DEVICE and fact.where != "follows":
        return True
    if fact.kind in (CPU, MODULE, DEVICE_VALUE) or fact.where == "number":
        return False
    return None


def on_device(ctx: FileContext, expr: cst.BaseExpression, hot: HotValues) -> bool:
    """Whether reading `expr` on the host waits for the GPU: placement first, then the fallback."""
    known = placement_says(ctx, expr)
    if known is not None:
        return known
    root = expr
    while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
        if isinstance(root, cst.Call):
            if receiver(root) is None:
                break
            root = root.func
        else:
            text = dotted_name(root)
            if text is not None and text in hot.modules:
                return False
            root = root.value
    if isinstance(root, cst.Name) and root.value in hot.modules:
        return False
    return bool(read_names(ctx, expr) & hot.names)
