"""Which values read in a step region are device tensors.

The placement interpreter (`devicelint.analysis.facts.file_facts`) answers first: a
`device-tensor` on the accelerator is one, a `cpu-tensor`, a module, a device or a number is not
(`labels = y.to("cpu")` is a CPU tensor, `correct = torch.zeros((), device=device)` a device one).

Only where placement is unknown (or "wherever the inputs are") does a narrower fallback apply,
because training code often gets its model and batches from parameters the file cannot follow.
The fallback trusts only strong evidence: the value is the loss the region backpropagates (also
through a helper of the file it hands the loss to, `backward_step(output)`, and what a helper of
the file that backpropagates returns of its loss, `step_loss = self.training_step(batch)`), the result of a loss
function or a model call made in the function, or computed from one of these
(`pred = out.argmax(1)`). A value the file shows to be an `nn.Module` never counts. Tensors
unpacked from one call together with the loss (`output, num_tokens = forward_step(...)`) count
for tensor methods (`.item()`), as the loss's inputs do.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import module_constructor
from devicelint.analysis.placement_facts import (
    CPU,
    DEVICE,
    DEVICE_VALUE,
    LOSS_CALLABLE_NAMES,
    MODEL_WORDS,
    MODULE,
    PARAMETER_FREE_MODULES,
    UNKNOWN,
    Fact,
)
from devicelint.analysis.placement_values import cpu_only_script, names_accelerator_words, names_no_accelerator
from devicelint.analysis.training.helpers import bound_arguments, callee
from devicelint.analysis.training.loops import StepRegion
from devicelint.analysis.training.reads import closure, computed_from, reaching_assignment, read_names
from devicelint.analysis.training.step import backpropagated, training_scopes
from devicelint.analysis.training.syntax import assigned_names, method_name, receiver
from devicelint.context import FileContext

# Methods only an nn.Module has (an optimizer has `state_dict` and `zero_grad` too).
MODULE_METHODS = frozenset(
    {"parameters", "named_parameters", "modules", "named_modules", "children", "buffers", "eval"}
)
LOSS_FUNCTION_WORDS = ("loss", "cross_entropy", "nll", "kl_div", "mse", "l1", "ctc", "hinge", "margin")


@dataclass(frozen=True)
class HotValues:
    """The fallback evidence of one step region."""

    names: frozenset[str]  # names (and `self.x`) that hold the loss, a model output, or values computed from them
    # Names the loss is computed from in the region, without a move on the way (`targets` and
    # `batch` in `targets = batch["labels"]; loss = f(model(x), targets)`): tensors among them sit
    # on the loss's device, but they may also be Python values, so only tensor methods count.
    inputs: frozenset[str]
    modules: frozenset[str]  # names the file shows to be modules
    # Names hot by the region's own say (the loss, what a helper's caller hands it, an optimizer's
    # parameters), whatever their assignments in the function read.
    given: frozenset[str] = frozenset()


def hot_values(ctx: FileContext, region: StepRegion) -> HotValues:
    """The names whose values the fallback takes for device tensors in `region`."""

    def build(c: FileContext) -> HotValues:
        modules = module_names(c)
        if _cpu_only(c, region):
            return HotValues(frozenset(), frozenset(), modules)
        seeds: set[str] = set()
        # The loss itself (`loss` in `(loss / accum).backward()`, `losses` in `sum(losses.values())`)
        # and the results of model and loss calls, with what is computed from them.
        seeds = {
            n for n in (primary_name(loss) for loss in region.losses) if n is not None and "scaler" not in n.lower()
        }
        inputs = set(seeds)
        for loss in region.losses:
            inputs |= read_names(c, loss, skip_moves=True, skip_fields=True)
        # What the region hands to a helper of the file that backpropagates it
        # (`backward_step(output_tensor)` running `torch.autograd.backward(output_tensor)`).
        handed = _handed_to_backward(c, region.body)
        seeds |= handed
        inputs |= handed
        # What a helper of the file that backpropagates hands back of its loss
        # (`step_loss = self.training_step(batch)` returning `loss.detach()`).
        returned = _returned_by_backward(c, region.body)
        seeds |= returned
        inputs = _loss_inputs(c, region.body, {n for n in inputs if "scaler" not in n.lower()})
        # Unpacked with the loss from one call (`output, num_tokens = forward_step(...)`): made
        # from the same batch, so tensors among them sit where the loss does.
        inputs |= _unpacked_with(c, region.body, seeds)
        for node in c.index.walk(region.body):
            if type(node) is cst.Assign and _calls_model_or_loss(c, node.value, modules):
                for target in node.targets:
                    seeds.update(assigned_names(target.target))
        names = computed_from(c, region.scope.node, seeds)
        if region.seeds:
            # What a helper's caller hands it, an optimizer's parameters: followed without
            # subscript indices (`self.state[p]` is a dict of any values, not a value of `p`).
            names |= computed_from(c, region.scope.node, set(region.seeds), skip_index=True)
        given = {n for n in (primary_name(loss) for loss in region.losses) if n is not None} | set(region.seeds)
        given |= returned
        return HotValues(frozenset(names - modules), frozenset(inputs - modules), modules, frozenset(given))

    return ctx.shared(("training.hot_values", id(region.owner)), build)


def primary_name(loss: cst.BaseExpression) -> str | None:
    """The value a loss expression is made of: `loss` in `loss / accum_steps`, `out` in
    `out.loss`, `losses` in `sum(losses.values())`, `self.loss`; None when there is none. In
    arithmetic a name read only through a field (`args` in `args.r1 / 2 * r1_loss`, a settings
    object's weight) gives way to an operand that is a value itself (`r1_loss`)."""
    return _primary(loss)[0]


def _primary(node: cst.BaseExpression | None) -> tuple[str | None, bool]:
    """The primary name and whether it was only reached through a field (`args` of `args.r1`)."""
    through_field = False
    while node is not None:
        text = dotted_name(node) if type(node) in (cst.Name, cst.Attribute) else None
        if text is not None and (type(node) is cst.Name or (text.startswith("self.") and text.count(".") == 1)):
            return text, through_field
        if type(node) is cst.BinaryOperation:
            left = _primary(node.left)
            if left[0] is not None and not left[1]:
                return left[0], through_field
            right = _primary(node.right)
            if right[0] is not None and not right[1]:
                return right[0], through_field
            found = left if left[0] is not None else right
            return found[0], through_field or found[1]
        if type(node) is cst.Attribute:
            through_field = True
            node = node.value
        elif type(node) is cst.Subscript:
            node = node.value
        elif type(node) is cst.Call:
            node = receiver(node) or (node.args[0].value if node.args else None)
        else:
            return None, through_field
    return None, through_field


def _handed_to_backward(ctx: FileContext, body: cst.CSTNode) -> set[str]:
    """Names `body` passes to a helper of the file for a parameter the helper backpropagates."""
    scopes = {id(scope.node): scope for scope in training_scopes(ctx)}
    found: set[str] = set()
    for node in ctx.index.walk(body):
        if type(node) is not cst.Call:
            continue
        helper = callee(ctx, node)
        scope = scopes.get(id(helper)) if helper is not None else None
        if helper is None or scope is None:
            continue
        losses = {
            primary_name(loss)
            for call in (*scope.backwards, *scope.delegated_backwards)
            if (loss := backpropagated(ctx, call)) is not None
        }
        bound = bound_arguments(ctx, helper, node) or {}
        for param, argument in bound.items():
            name = primary_name(argument) if param in losses else None
            if name is not None and not name.startswith("self."):
                found.add(name)
    return found


def _returned_by_backward(ctx: FileContext, body: cst.CSTNode) -> set[str]:
    """Names `body` binds to what a helper of the file returns of the loss it backpropagates:
    `step_loss` in `step_loss = self.training_step(batch)` whose body runs `loss.backward()`
    and returns `loss.detach()` (by position for a tuple: `loss, logs = step(batch)`)."""
    scopes = {id(scope.node): scope for scope in training_scopes(ctx)}
    found: set[str] = set()
    for node in ctx.index.walk(body):
        if type(node) is not cst.Assign or type(node.value) is not cst.Call:
            continue
        helper = callee(ctx, node.value)
        scope = scopes.get(id(helper)) if helper is not None else None
        if helper is None or scope is None or type(helper) is not cst.FunctionDef:
            continue
        losses = {
            name
            for call in (*scope.backwards, *scope.delegated_backwards)
            if (loss := backpropagated(ctx, call)) is not None and (name := primary_name(loss)) is not None
        }
        if not losses:
            continue
        made_of_loss = computed_from(ctx, helper, losses)
        for returned in ctx.index.within(helper.body, cst.Return):
            if ctx.index.enclosing_function(returned) is not helper or returned.value is None:
                continue
            for target in node.targets:
                found |= _bound_to_loss(target.target, returned.value, made_of_loss)
    return found


def _bound_to_loss(target: cst.BaseExpression, value: cst.BaseExpression, losses: set[str]) -> set[str]:
    """The names of `target` that receive a part of `value` computed from `losses`."""
    if type(target) is cst.Name:
        return {target.value} if primary_name(value) in losses else set()
    if type(target) in (cst.Tuple, cst.List) and type(value) in (cst.Tuple, cst.List):
        targets = [e.value for e in target.elements]  # type: ignore[attr-defined]
        values = [e.value for e in value.elements]  # type: ignore[attr-defined]
        if len(targets) == len(values) and not any(type(e) is cst.StarredElement for e in target.elements):  # type: ignore[attr-defined]
            return {n for t, v in zip(targets, values, strict=True) for n in _bound_to_loss(t, v, losses)}
    return set()


def _unpacked_with(ctx: FileContext, body: cst.CSTNode, losses: set[str]) -> set[str]:
    """The other names a tuple assignment in `body` unpacks from the call that gives a loss."""
    found: set[str] = set()
    for node in ctx.index.walk(body):
        if type(node) is not cst.Assign or type(node.value) is not cst.Call:
            continue
        for target in node.targets:
            if type(target.target) not in (cst.Tuple, cst.List):
                continue
            names = set(assigned_names(target.target))
            if names & losses:
                found |= names - losses
    return found


def _loss_inputs(ctx: FileContext, body: cst.CSTNode, seeds: set[str]) -> set[str]:
    """`seeds` and, transitively, every name an assignment in `body` reads to compute one of them,
    leaving out values read only to be moved (`y` in `y.to(device)`) or through a host copy."""
    flows = []
    for node in ctx.index.walk(body):
        if type(node) is cst.Assign:
            targets = {n for t in node.targets for n in assigned_names(t.target)}
            flows.append((targets, read_names(ctx, node.value, skip_moves=True, skip_fields=True)))
    return closure(flows, seeds, backward=True)


def _cpu_only(ctx: FileContext, region: StepRegion) -> bool:
    """The region calls a model the file builds and never moves, in a file that never mentions an
    accelerator (`fc = nn.Linear(...)` trained in a CPU-only example) or states no device but the
    CPU (`names_no_accelerator`), or uses such a model otherwise (hands it to an environment's
    rollout, clips its parameters): the fallback has nothing to stand on. A model
    received as a parameter may be anywhere, so it does not count, unless the file is a whole
    program (`cpu_only_script`: a `__main__` script, a notebook, a module running its own
    functions) that never names an accelerator and imports nothing of its project that places
    tensors (a class that places itself, a helper returning device tensors or moved copies):
    then nothing it runs can put a model or a batch on a device (a CPU-only RL script whose
    agent is built from a constructor it is handed)."""
    if cpu_only_script(ctx) and not _project_places(ctx):
        return True
    if names_accelerator_words(ctx) and not names_no_accelerator(ctx):
        return False
    for node in ctx.index.walk(region.body):
        if type(node) is cst.Call:
            used = [node.func, *(a.value for a in node.args)]
            if type(node.func) is cst.Attribute:
                used.append(node.func.value)  # `net.parameters()`
            for value in used:
                fact = callee_fact(ctx, value) if type(value) in (cst.Name, cst.Attribute) else None
                if fact is not None and fact.kind == MODULE and fact.where in (None, "cpu"):  # built here, never moved
                    return True
                if _host_model_attribute(ctx, value):
                    return True
    return False


def _host_model_attribute(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`self.model(...)` in a plain class (a trainer, no base) that sets `self.model` only to modules
    it builds here and never moves, in a file that names no accelerator (the caller's test):
    the model the step runs is on the CPU."""
    if not (type(value) is cst.Attribute and type(value.value) is cst.Name and value.value.value == "self"):
        return False
    cls = ctx.index.enclosing_class(value)
    if cls is None or any(b.keyword is None and dotted_name(b.value) != "object" for b in cls.bases):
        return False  # a module (a LightningModule too) is moved as a whole by whoever runs it
    built = []
    for node in ctx.index.walk(cls):
        if type(node) is not cst.Assign:
            continue
        for target in node.targets:
            t = target.target
            if (
                type(t) is cst.Attribute
                and t.attr.value == value.attr.value
                and type(t.value) is cst.Name
                and t.value.value == "self"
            ):
                if not (type(node.value) is cst.Name and node.value.value == "None"):  # a slot filled later
                    built.append(file_facts(ctx).value(node.value))
    return bool(built) and all(
        f.kind == MODULE and f.where in (None, "cpu") and (f.factory or "") not in PARAMETER_FREE_MODULES for f in built
    )


def _project_places(ctx: FileContext) -> bool:
    """Whether something the file imports from its project may place tensors on a device."""
    view = ctx.project
    return (
        any(c.places_itself or c.placed for c in view.classes.values())
        or any(DEVICE in place for place in view.functions.values())
        or any(h.uses.returns_moved for h in view.helpers.values())
    )


def callee_fact(ctx: FileContext, func: cst.BaseExpression) -> Fact:
    """What placement knows of a called name: its fact where it was evaluated, else the fact its
    function's environment ends with (a callee name is not evaluated as an expression)."""
    fact = file_facts(ctx).value(func)
    if fact.kind != UNKNOWN:
        return fact
    key = dotted_name(func)
    if key is None:
        return fact
    scope = ctx.index.enclosing_function(func) or ctx.module
    placement = file_facts(ctx).placement.scopes.get(id(scope))
    return placement.facts.get(key, fact) if placement is not None else fact


def module_names(ctx: FileContext) -> frozenset[str]:
    """Names and `self.x` attributes that the file shows to be `nn.Module`s: built by a module
    class, or used through a method only modules have (`model.parameters()`, `net.eval()`)."""

    def build(c: FileContext) -> frozenset[str]:
        found: set[str] = set()
        for call in c.index.of_type(cst.Call):
            if method_name(call) in MODULE_METHODS and not call.args:
                text = dotted_name(receiver(call))
                if text is not None:
                    found.add(text)
        for assign in c.index.of_type(cst.Assign):
            value = assign.value
            while type(value) is cst.Call and method_name(value) in ("to", "cuda", "cpu", "eval", "train"):
                value = receiver(value)
            if type(value) is cst.Call and module_constructor(c, value) is not None:
                for target in assign.targets:
                    found.update(assigned_names(target.target))
        return frozenset(found)

    return ctx.shared("training.hot_values.modules", build)


def _calls_model_or_loss(ctx: FileContext, value: cst.BaseExpression, modules: frozenset[str]) -> bool:
    """`criterion(out, y)`, `F.cross_entropy(...)`, `model(x)`, `self.net(x)`, `model(x).loss`."""
    while isinstance(value, (cst.Attribute, cst.Subscript)):
        value = value.value
    if type(value) is not cst.Call:
        return False
    qualified = ctx.qualified_name(value.func) or ""
    if qualified.startswith("torch.nn.functional.") and any(w in qualified for w in LOSS_FUNCTION_WORDS):
        return True
    callee = dotted_name(value.func)
    if callee is None:
        return False
    word = callee.rsplit(".", 1)[-1].lower()
    return (
        word in LOSS_CALLABLE_NAMES
        or any(w in word for w in MODEL_WORDS)
        or callee in modules
        or callee_fact(ctx, value.func).kind == MODULE
    )


def placement_says(ctx: FileContext, expr: cst.BaseExpression) -> bool | None:
    """True for a device tensor on the accelerator, False for a CPU tensor, a module, a device or a
    number, None when placement does not know."""
    fact: Fact = file_facts(ctx).value(expr)
    if fact.kind == DEVICE and fact.where != "follows":
        return True
    if fact.kind in (CPU, MODULE, DEVICE_VALUE) or fact.where == "number":
        return False
    return None


def on_device(ctx: FileContext, expr: cst.BaseExpression, hot: HotValues, tensor_method: bool = False) -> bool:
    """Whether reading `expr` on the host waits for the GPU: placement first, then the fallback.
    `tensor_method`: the read is `.item()`/`.cpu()`/`.tolist()`/`.numpy()`, which only tensors (and
    arrays) have, so the loss's inputs count too."""
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
    if type(root) is cst.Name and root.value in hot.modules:
        return False
    pool = hot.names | hot.inputs if tensor_method else hot.names
    return any(n in pool and not _cold_here(ctx, n, expr, hot, pool) for n in read_names(ctx, expr))


def _cold_here(ctx: FileContext, name: str, at: cst.CSTNode, hot: HotValues, pool: frozenset[str]) -> bool:
    """The name is hot somewhere in the function (names are matched ignoring order), but the
    assignment that reaches this read stores a value made of nothing hot: a long `train()` that
    reuses `x` or `ckpt` for host values before or after its loop."""
    if name in hot.given:
        return False
    scope = ctx.index.enclosing_function(at) or ctx.module
    binding = reaching_assignment(ctx, scope, name, at)
    if binding is None:
        return False
    value = binding.value
    if _taken_from_a_value(value):
        return False  # `s = state["s"]`, `d = v.sqrt()`: what it holds is unknown, not shown to be host
    return not (read_names(ctx, value) & pool) and not _calls_model_or_loss(ctx, value, hot.modules)


def _taken_from_a_value(value: cst.BaseExpression) -> bool:
    """A value read out of another one (an item, a field, a method's result), rather than built
    afresh (a literal, a container, a function's result)."""
    node = value
    steps = 0
    while True:
        if isinstance(node, (cst.Subscript, cst.Attribute)):
            node = node.value
        elif type(node) is cst.Call and type(node.func) is cst.Attribute:
            node = node.func.value
        else:
            break
        steps += 1
    return steps > 0 and type(node) is cst.Name and node.value not in ("torch", "np", "numpy", "json", "os")
