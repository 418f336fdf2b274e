from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.container_reads import through_containers, unpacked_part
from devicelint.analysis.facts import file_facts
from devicelint.analysis.imported_helpers import argument_for, imported_construction, imported_method_calls
from devicelint.analysis.metric_updates import update_feeds_states
from devicelint.analysis.modules import module_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import ACCELERATOR, DEVICE, FOLLOWS, moves_to_accelerator
from devicelint.analysis.training.helpers import arguments_for, bound_arguments, callee
from devicelint.analysis.training.helpers import calls_of as training_calls_of
from devicelint.analysis.training.reads import computed_from
from devicelint.context import FileContext
from devicelint.rule_base import FixProposal, Rule, Violation, register

# Bases that make a class a plain object (its attributes move with nothing).
PLAIN_BASES = frozenset({"object", "abc.ABC", "ABC", "typing.Generic", "Generic", "typing.Protocol", "Protocol"})
# Lightning callbacks hold metrics outside the LightningModule: the trainer moves none of them.
CALLBACK_PACKAGES = ("lightning.", "pytorch_lightning.")
# Calls that feed a metric: `metric.update(preds, target)`, `metric(preds, target)`.
FEEDING_METHODS = frozenset({"update", "forward"})
# Lightning callback hooks that receive the batch (and the step's outputs) on the module's device.
BATCH_HOOK = re.compile(r"^on_(train|validation|test|predict)_batch_(start|end)$")
HOOK_DEVICE_PARAMS = frozenset({"batch", "outputs"})
# Reads that bring a tensor to the host.
HOST_READS = frozenset({"cpu", "item", "tolist", "numpy"})
# Container methods whose elements a loop gets (`for name, metric in metrics.items()`).
CONTAINER_VIEWS = frozenset({"values", "items"})


@dataclass
class Holder:
    """Where a metric (or a plain container of metrics) is kept: a local or global name, or an
    attribute of a plain class."""

    created: cst.BaseExpression  # the constructor call, or the container literal
    is_container: bool
    moved: bool = False
    escaped: bool = False  # handed to code that may move it (`fabric.setup(metric)`)
    fed: list[tuple[cst.Call, cst.BaseExpression]] = field(default_factory=list)  # (call, device argument)
    built_by_helper: bool = False  # `created` is in a helper of the file that returns it


HolderKey = tuple[int, str]


@register
class MetricObjectOnCpu(Rule):
    """
    ## What it does
    Flags a torchmetrics `Metric` or `MetricCollection` that is created outside an
    `nn.Module` (a local or global of a script or of a module's method, an attribute of a plain
    class or a Lightning callback, an entry of a plain dict or list kept there, or a metric built
    where it is fed, `F1Score(...)(preds, y)`), fed with tensors that the analysis proves are on
    the accelerator (`metric.update(preds, target)`, `metric(preds, target)`) or, in a module's
    method, on the module's own device (a LightningModule step's batch), and never moved
    (`metric.to(device)`, `.cuda()`, `Metric(...).to(device)`).

    ## Why it is a bug on a GPU
    A metric is an `nn.Module` whose state (`tp`, `fp`, running sums) is a set of tensors made
    on the CPU when the metric is built. Only `metric.to(device)` or the module that owns it
    moves them; a metric that is not an attribute of the model stays on the CPU. Updating it
    with CUDA predictions fails with `Expected all tensors to be on the same device`, or, for
    list states, concatenates tensors of two devices at `compute()`.

    ## Example
    ```python
    precision = MulticlassPrecision(num_classes=10)
    for x, y in loader:
        preds = model(x.to(device)).argmax(dim=1)
        precision.update(preds, y.to(device))
    ```

    ## Use instead
    ```python
    precision = MulticlassPrecision(num_classes=10).to(device)
    for x, y in loader:
        preds = model(x.to(device)).argmax(dim=1)
        precision.update(preds, y.to(device))
    ```

    ## Fix safety
    When the metric is bound to a name and the device it is fed from is a parameter of the
    same function (`device`), the fix appends `.to(device)` to the constructor call. It is
    unsafe: the metric's later `compute()` then returns a device tensor.

    ## Known limits
    A metric is recognised by its class's qualified name (`torchmetrics.` and a class name), or as
    an instance of a class of the file that derives from such a class, unless that class's own
    `update` hands the tensors to an object it holds (`self.decoder.decode(preds)`) and puts
    only what that returns into its states (edit distances of decoded strings): its own code
    never meets them with a state.
    Metrics that are attributes of an `nn.Module` (a LightningModule included) move with it
    and are never reported; those it keeps in a plain dict or list are DL103's. In a Lightning
    callback's `on_*_batch_start/end` hooks, the `batch` and `outputs` parameters and what is
    computed from them count as device tensors (Lightning hands them over on the module's
    device); `.clone()` of a metric counts as a new one. A metric handed to a function of the
    file (`evaluate(model, loader, metric, device)`) is followed there, two helpers deep: a move
    there moves it, an update there feeds it. A parameter of the method that feeds the metric
    counts as a device tensor when a call of that method in the file fills it with one
    (`self.evaluator.add_batch(logits, labels)` from the trainer's CUDA model). A metric handed
    to other code (`fabric.setup(metric)`, a function of another file, a return), moved
    anywhere in the file, or fed only with tensors whose device the analysis cannot prove (a
    parameter no call of the file fills from the device) is not reported. Classes whose bases
    come from other files may be modules and are skipped.
    """

    code = "DL113"
    name = "metric-object-on-cpu"
    summary = "A torchmetrics metric kept outside the model is fed device tensors but never moved."
    message = "{created} on the CPU and never moved, but {fed} feeds {it} the device tensor `{argument}`; {advice}"
    fix_availability = "unsafe"
    tokens = ("torchmetrics",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        yield from _fed_to_imported_holders(self, ctx)
        holders = _holders(ctx)
        if not holders:
            return
        _read_uses(ctx, holders)
        for holder in holders.values():
            if holder.moved or holder.escaped or not holder.fed:
                continue
            call, argument = holder.fed[0]
            created = _short(ctx, holder.created)
            fix = (
                None if holder.is_container or holder.built_by_helper else _to_device_fix(ctx, holder.created, argument)
            )
            if holder.is_container and not is_metric_constructor(ctx, holder.created):  # a literal of metrics
                created = f"the metrics in `{created}` are created"
                advice = "move each metric with `.to(device)` (or keep them in an `nn.ModuleDict` on the model)"
            else:
                created = f"`{created}` is created"
                advice = "create it with `.to(device)` (or make it an attribute of the model)"
            cls = ctx.index.enclosing_class(holder.created)
            if cls is not None and any(_is_callback_base(ctx, b.value) for b in cls.bases if b.keyword is None):
                advice = (
                    "Lightning moves the LightningModule, not its callbacks: move it to `pl_module.device` "
                    "in the callback's `setup()`"
                )
            yield self.violation(
                holder.created,
                fix=fix,
                created=created,
                fed=f"`{_short(ctx, call)}`",
                it="it" if created.endswith("is created") else "them",
                argument=ctx.code_for(argument),
                advice=advice,
            )


def _fed_to_imported_holders(rule: Rule, ctx: FileContext) -> Iterator[Violation]:
    """`evaluator.update(preds, y)` with device tensors, where the imported plain class keeps a
    torchmetrics metric it never moves and feeds it what `update` is handed: reported at the
    instance's construction (where `.to(device)` belongs), once per instance."""
    facts = file_facts(ctx)
    done: set[int] = set()
    for call, cls, called in imported_method_calls(ctx):
        built = imported_construction(ctx, call.func.value) if type(call.func) is cst.Attribute else None
        if built is None or id(built[1]) in done:
            continue
        for method, params, param, attr, metric, line in cls.metric_feeds:
            arg = argument_for(call, params, param) if method == called else None
            if arg is None or not facts.is_device_tensor(arg, certain=True):
                continue
            done.add(id(built[1]))
            message = (
                f"`{_short(ctx, built[1])}` keeps `{metric}` (`self.{attr}`, {cls.path}:{line}) on the CPU and "
                f"never moves it, but `{_short(ctx, call)}` feeds it the device tensor `{ctx.code_for(arg)}`; "
                f"move the metric to the device (a `to()` on `{cls.qualified.rsplit('.', 1)[-1]}` that moves "
                f"`self.{attr}`, or build it with `.to(device)`)"
            )
            yield Violation(rule=type(rule), node=built[1], message=message, fix=None)
            break


def _short(ctx: FileContext, node: cst.BaseExpression) -> str:
    """The source of a call or literal, shortened to `func(...)` / `{...}` when long."""
    text = ctx.code_for(node)
    if len(text) <= 60 and "\n" not in text:
        return text
    if type(node) is cst.Call:
        return ctx.code_for(node.func) + "(...)"
    return {cst.Dict: "{...}", cst.DictComp: "{...}", cst.List: "[...]", cst.ListComp: "[...]"}.get(type(node), "(...)")


# -- where metrics are kept ----------------------------------------------------------------------


def is_metric_constructor(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`Accuracy(...)`, `torchmetrics.F1Score(...)`, `MetricCollection([...])`: a torchmetrics class."""
    if type(node) is not cst.Call:
        return False
    if not _metric_class(ctx, node.func, frozenset()):
        return False
    if type(node.func) is cst.Name and not _computes_on_tensors(ctx, node.func.value):
        return False
    return not any(a.keyword is not None and a.keyword.value == "device" for a in node.args)


def _computes_on_tensors(ctx: FileContext, name: str) -> bool:
    """A metric class of the file whose `update` only hands its tensors to an object it holds
    (a speech decoder) and accumulates what that returns does not fail on device tensors."""
    classes = [c for c in ctx.index.of_type(cst.ClassDef) if c.name.value == name]
    return len(classes) != 1 or update_feeds_states(ctx, classes[0])


def _metric_class(ctx: FileContext, func: cst.BaseExpression, seen: frozenset[str]) -> bool:
    """A torchmetrics class, or a class of the file deriving from one (`class Perplexity(NLL)`,
    `class NLL(MeanMetric)`): its states are made on the CPU like its base's."""
    qualified = ctx.qualified_name(func) or ""
    if qualified.startswith("torchmetrics.") and not qualified.startswith("torchmetrics.functional."):
        return qualified.rsplit(".", 1)[-1][:1].isupper()
    if type(func) is not cst.Name or func.value in seen:
        return False
    classes = [c for c in ctx.index.of_type(cst.ClassDef) if c.name.value == func.value]
    return len(classes) == 1 and any(
        base.keyword is None and _metric_class(ctx, base.value, seen | {func.value}) for base in classes[0].bases
    )


def _moved_constructor(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`Accuracy(...).to(device)`, `MetricCollection(...).cuda()`."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute:
        if moves_to_accelerator(node) and is_metric_constructor(ctx, node.func.value):
            return True
        node = node.func.value
    return False


def _holds_metrics(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """A dict/list/tuple literal or comprehension that builds metrics."""
    if type(node) not in (cst.Dict, cst.List, cst.Tuple, cst.DictComp, cst.ListComp):
        return False
    return any(is_metric_constructor(ctx, n) for n in ctx.index.walk(node) if type(n) is cst.Call)


def _plain_class(ctx: FileContext, cls: cst.ClassDef, seen: frozenset[str] = frozenset()) -> bool:
    """Not an `nn.Module`, and every base is known not to be one (object, ABC, a Lightning
    callback, another plain class of the file)."""
    if cls.name.value in module_classes(ctx) or cls.name.value in seen:
        return False
    classes = {c.name.value: c for c in ctx.index.of_type(cst.ClassDef)}
    for base in cls.bases:
        if base.keyword is not None:
            continue  # `metaclass=ABCMeta`
        value = base.value.value if type(base.value) is cst.Subscript else base.value
        qualified = ctx.qualified_name(value) or dotted_name(value) or ""
        if qualified in PLAIN_BASES:
            continue
        if qualified.startswith(CALLBACK_PACKAGES) and qualified.endswith(".Callback"):
            continue
        if qualified in classes and _plain_class(ctx, classes[qualified], seen | {cls.name.value}):
            continue
        return False
    return True


def _holder_key(ctx: FileContext, target: cst.BaseExpression) -> HolderKey | None:
    """The key of the place an assignment target names: a local, a global, or a plain class's attribute."""
    function = ctx.index.enclosing_function(target)
    if type(target) is cst.Name:
        return (id(function or ctx.module), target.value)
    attr = self_attribute(target)
    if attr is None or function is None:
        return None
    cls = ctx.index.enclosing_class(function)
    if cls is None or not _plain_class(ctx, cls):
        return None  # a module's attribute moves with it (and a plain container there is DL103's)
    return (id(cls), attr)


def _holders(ctx: FileContext) -> dict[HolderKey, Holder]:
    holders: dict[HolderKey, Holder] = {}
    clones: list[tuple[HolderKey, cst.Call]] = []
    aliases: list[tuple[HolderKey, cst.BaseExpression]] = []
    for target, value in _bindings(ctx):
        # `self.bank[name] = metric` in `add(self, name, metric)`: the metric every call hands it
        value = _handed_metric(ctx, value) or value
        if type(target) is cst.Subscript:  # `self.metrics["acc"] = Accuracy()`
            if not is_metric_constructor(ctx, value):
                continue
            key = _holder_key(ctx, target.value)
            if key is not None:
                holders.setdefault(key, Holder(created=value, is_container=True))
            continue
        key = _holder_key(ctx, target)
        if key is None:
            continue
        value = through_containers(ctx, value)  # `acc = box[0]`, `acc, _ = box`: what was put in
        returned = _returned_metric(ctx, value)
        if is_metric_constructor(ctx, value):
            holders.setdefault(key, Holder(created=value, is_container=False))
        elif returned is not None:  # `metric = make_metric(...)`: what the helper builds, unmoved
            holders.setdefault(key, Holder(created=returned, is_container=False, built_by_helper=True))
        elif _holds_metrics(ctx, value):
            holders.setdefault(key, Holder(created=value, is_container=True))
        elif _moved_constructor(ctx, value):
            holders.setdefault(key, Holder(created=value, is_container=False)).moved = True
        elif type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "clone":
            clones.append((key, value))  # `val_metrics = metrics.clone(prefix="val/")`: a copy where the original is
        elif type(value) in (cst.Name, cst.Subscript) or self_attribute(value) is not None:
            # `self.acc = metrics["acc"]`, `self.acc = self._made`: the same metric under another name
            aliases.append((key, value))
    for call in ctx.index.of_type(cst.Call):
        # `F1Score(...)(preds, y)`, `Accuracy(...).update(preds, y)`: a metric built where it is
        # fed, kept nowhere, so nothing ever moves it
        inner = (
            call.func.value
            if type(call.func) is cst.Attribute and call.func.attr.value in FEEDING_METHODS
            else call.func
        )
        if is_metric_constructor(ctx, inner):
            holder = holders.setdefault((id(inner), "<inline>"), Holder(created=inner, is_container=False))
            fed = next((arg.value for arg in call.args if _fed_on_device(ctx, call, arg.value)), None)
            if fed is not None:
                holder.fed.append((call, fed))
    for key, value in aliases:
        original = _resolve(ctx, value, holders)
        if original is not None and key not in holders:
            holders[key] = original
    for key, value in clones:
        original = _resolve(ctx, value.func.value, holders)  # type: ignore[attr-defined]  # a `metrics.clone(...)` call
        if original is not None and not original.is_container:
            holders.setdefault(key, Holder(created=value, is_container=False)).moved = original.moved
    return holders


def _bindings(ctx: FileContext) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of each single-target assignment, and of each name or attribute unpacked
    from a container the file shows (`self.acc, _ = Accuracy(...), None`)."""
    for assign in ctx.index.of_type(cst.Assign):
        for target in assign.targets:
            if type(target.target) in (cst.Tuple, cst.List):
                for node in ctx.index.walk(target.target):
                    if type(node) in (cst.Name, cst.Attribute) and type(ctx.index.parent(node)) is cst.Element:
                        part = unpacked_part(ctx, node)  # type: ignore[arg-type]  # a Name or an Attribute
                        if part is not None:
                            yield node, part  # type: ignore[misc]  # as above
        if len(assign.targets) == 1:
            yield assign.targets[0].target, assign.value


def _handed_metric(ctx: FileContext, value: cst.BaseExpression) -> cst.Call | None:
    """The metric constructor that every call of the enclosing function passes for `value`, one of
    its parameters that it never rebinds (`scorer.add("acc", Accuracy(...))` for `metric`)."""
    if type(value) is not cst.Name:
        return None
    function = ctx.index.enclosing_function(value)
    params = (*function.params.posonly_params, *function.params.params) if function is not None else ()
    if function is None or not any(p.name.value == value.value for p in params) or _rebound(ctx, function, value):
        return None
    given = arguments_for(ctx, function, value.value)
    if not given or not all(type(g) is cst.Call and is_metric_constructor(ctx, g) for g in given):
        return None
    return given[0]  # type: ignore[return-value]  # a Call, checked above


def _rebound(ctx: FileContext, function: cst.FunctionDef, name: cst.Name) -> bool:
    return any(
        type(n) is cst.Name and n.value == name.value and ctx.index.in_binding_target(n)
        for n in ctx.index.walk(function.body)
    )


def _returned_metric(ctx: FileContext, value: cst.BaseExpression) -> cst.Call | None:
    """The metric constructor that a function or method of the file returns from its one
    `return` (`def make_confusion(n): return MulticlassConfusionMatrix(num_classes=n)`), for a
    call of it."""
    if type(value) is not cst.Call:
        return None
    if ctx.project.functions.get(dotted_name(value.func) or "") == "metric":
        return value  # a function of another module that returns one (`build_metrics(n)`)
    helper = callee(ctx, value)
    if helper is None:
        return None
    returns = [n for n in ctx.index.walk(helper.body) if type(n) is cst.Return]
    inner = returns[0].value if len(returns) == 1 else None
    return inner if type(inner) is cst.Call and is_metric_constructor(ctx, inner) else None


# -- how the file uses them ----------------------------------------------------------------------


def _resolve(ctx: FileContext, node: cst.BaseExpression, holders: dict[HolderKey, Holder]) -> Holder | None:
    """The holder an expression reads: its name, `self.attr`, an entry `metrics["acc"]`, or a loop
    variable over `metrics.values()` / `metrics.items()`."""
    if type(node) is cst.Subscript:
        holder = _resolve(ctx, node.value, holders)
        return holder if holder is not None and holder.is_container else None
    if type(node) is cst.Attribute:
        key = _holder_key(ctx, node) if self_attribute(node) is not None else None
        return holders.get(key) if key is not None else None
    if type(node) is not cst.Name:
        return None
    function = ctx.index.enclosing_function(node)
    local = holders.get((id(function or ctx.module), node.value))
    if local is not None:
        return local
    loop = _loop_over(ctx, node)
    if loop is not None:
        container = _resolve(ctx, loop, holders)
        if container is not None and container.is_container:
            return container
    if function is not None and not _bound_in(ctx, function, node.value):
        return holders.get((id(ctx.module), node.value))
    return None


def _loop_over(ctx: FileContext, node: cst.Name) -> cst.BaseExpression | None:
    """The container a `for` (or comprehension) that binds `node`'s name iterates, unwrapped from
    `.values()`/`.items()`."""
    scope: cst.CSTNode = ctx.index.enclosing_function(node) or ctx.module
    for ancestor in ctx.index.ancestors(node):
        loops = [ancestor] if isinstance(ancestor, (cst.For, cst.CompFor)) else []
        if isinstance(ancestor, (cst.ListComp, cst.DictComp, cst.GeneratorExp, cst.SetComp)):
            loops = [ancestor.for_in]
        for loop in loops:
            if any(type(n) is cst.Name and n.value == node.value for n in ctx.index.walk(loop.target)):
                iterable = loop.iter
                if (
                    type(iterable) is cst.Call
                    and type(iterable.func) is cst.Attribute
                    and iterable.func.attr.value in CONTAINER_VIEWS
                ):
                    iterable = iterable.func.value
                return iterable
        if ancestor is scope:
            break
    return None


def _bound_in(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """Whether the function binds `name` itself (a parameter, an assignment, a loop target)."""
    if any(p.name.value == name for p in (*function.params.params, *function.params.kwonly_params)):
        return True
    for node in ctx.index.walk(function.body):
        if (
            type(node) is cst.Name
            and node.value == name
            and ctx.index.in_binding_target(node)
            and (ctx.index.enclosing_function(node) is function)
        ):
            return True
    return False


def _read_uses(ctx: FileContext, holders: dict[HolderKey, Holder]) -> None:
    """Mark each holder moved, escaped or fed, from every reference to it in the file."""
    for node in (*ctx.index.of_type(cst.Name), *ctx.index.of_type(cst.Attribute)):
        if type(node) is cst.Attribute and self_attribute(node) is None:
            continue
        parent = ctx.index.parent(node)
        if type(node) is cst.Name and type(parent) is cst.Attribute and parent.attr is node:
            continue  # the `update` in `metric.update`
        if ctx.index.in_binding_target(node):
            continue
        holder = _resolve(ctx, node, holders)
        if holder is not None:
            _read_use(ctx, node, holder, holders, 0)


# How many helpers deep a metric handed on as an argument is followed.
_MAX_HANDED_DEPTH = 2


def _read_use(
    ctx: FileContext, node: cst.BaseExpression, holder: Holder, holders: dict[HolderKey, Holder], depth: int
) -> None:
    """Mark `holder` moved, escaped or fed from one reference `node` to it."""
    parent = ctx.index.parent(node)
    user: cst.BaseExpression = node
    while type(parent) is cst.Subscript and parent.value is user:
        user, parent = parent, ctx.index.parent(parent)
    call = None
    if type(parent) is cst.Call and parent.func is user:
        call = parent  # `metric(preds, target)`
    elif type(parent) is cst.Attribute and parent.value is user:
        outer = ctx.index.parent(parent)
        if type(outer) is cst.Call and outer.func is parent:
            if moves_to_accelerator(outer):
                holder.moved = True
                return
            if parent.attr.value in FEEDING_METHODS:
                call = outer
    elif (
        type(parent) is cst.Assign
        and user is parent.value
        and all(_resolve(ctx, t.target, holders) is holder for t in parent.targets)
    ):
        return  # `self.acc = metrics["acc"]`: the same metric kept under another name
    elif type(parent) is cst.Arg and user is node and _follow_into_helper(ctx, parent, holder, holders, depth):
        return  # `evaluate(model, loader, metric)`: what the helper does with it counts
    elif type(parent) in (cst.Arg, cst.Return, cst.Element, cst.DictElement, cst.Assign) and not (
        type(parent) is cst.Assign and user is not parent.value
    ):
        holder.escaped = True  # handed on: whoever gets it may move it
        return
    if call is None:
        return
    on_device = _callback_batch_names(ctx, call) | _device_parameters(ctx, call)
    for arg in call.args:
        if _fed_on_device(ctx, call, arg.value) or _computed_from(ctx, arg.value, on_device):
            holder.fed.append((call, arg.value))
            break


def _follow_into_helper(
    ctx: FileContext, arg: cst.Arg, holder: Holder, holders: dict[HolderKey, Holder], depth: int
) -> bool:
    """A metric handed to a function of the file (`evaluate(model, loader, metric, device)`):
    read the helper's uses of the parameter that receives it as uses of the metric (a move there
    moves it, an update there feeds it). False when the file does not show the helper, the
    parameter, or the helper rebinds it."""
    call = ctx.index.parent(arg)
    if depth >= _MAX_HANDED_DEPTH or type(call) is not cst.Call or arg.star:
        return False
    helper = callee(ctx, call)
    bound = bound_arguments(ctx, helper, call) if helper is not None else None
    name = next((n for n, value in (bound or {}).items() if value is arg.value), None)
    if helper is None or name is None or _rebound(ctx, helper, cst.Name(name)):
        return False
    for node in ctx.index.walk(helper.body):
        if type(node) is not cst.Name or node.value != name or ctx.index.enclosing_function(node) is not helper:
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Attribute and parent.attr is node:
            continue
        _read_use(ctx, node, holder, holders, depth + 1)
    return True


def _device_parameters(ctx: FileContext, call: cst.Call, depth: int = 0) -> set[str]:
    """Parameters of the function around a metric call that a call of it in the file fills with
    a device tensor (`self.evaluator.add_batch(logits, labels)` with `logits` from the CUDA
    model, for `add_batch(self, logits, labels)`), with the names computed from them there."""
    function = ctx.index.enclosing_function(call)
    if function is None or depth >= _MAX_HANDED_DEPTH:
        return set()
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    params -= {"self", "cls"}
    device: set[str] = set()
    for name in params:
        if _rebound(ctx, function, cst.Name(name)):
            continue
        for site in training_calls_of(ctx, function):
            bound = bound_arguments(ctx, function, site) if not any(a.star for a in site.args) else None
            given = (bound or {}).get(name)
            if given is not None and (
                _fed_on_device(ctx, site, given) or _computed_from(ctx, given, _device_parameters(ctx, site, depth + 1))
            ):
                device.add(name)
                break
    return computed_from(ctx, function.body, device) if device else device


def _fed_on_device(ctx: FileContext, call: cst.Call, value: cst.BaseExpression) -> bool:
    """Whether a metric call's argument is a device tensor: one the engine proves is on the
    accelerator, a value it saw moved there (counted even where it could not prove the receiver
    was a tensor, `y.to(device)`), or, in a method of an `nn.Module` (a LightningModule's step),
    a tensor on the module's own device, which the metric does not follow unless it is an
    attribute of the module."""
    facts = file_facts(ctx)
    fact = facts.value(value)
    if facts.is_device_tensor(value, certain=True) or fact.where == ACCELERATOR:
        return True
    if fact.kind != DEVICE or fact.where != FOLLOWS or fact.scalar:
        return False
    cls = ctx.index.enclosing_class(call)
    return cls is not None and module_classes(ctx).get(cls.name.value) is cls


def _callback_batch_names(ctx: FileContext, call: cst.Call) -> set[str]:
    """In a Lightning callback's batch hook (`on_validation_batch_end(self, trainer, pl_module,
    outputs, batch, ...)`), the names that hold the batch or the step's outputs, or are computed
    from them: Lightning hands both over on the module's device."""
    function = ctx.index.enclosing_function(call)
    if function is None or not BATCH_HOOK.match(function.name.value):
        return set()
    cls = ctx.index.enclosing_class(function)
    if cls is None or not any(_is_callback_base(ctx, b.value) for b in cls.bases if b.keyword is None):
        return set()
    names = {p.name.value for p in function.params.params if p.name.value in HOOK_DEVICE_PARAMS}
    # what is computed from them, not through a host copy (`.item()`, `.cpu()`, `float(...)`)
    return computed_from(ctx, function.body, names) if names else names


def _is_callback_base(ctx: FileContext, base: cst.BaseExpression) -> bool:
    qualified = ctx.qualified_name(base) or ""
    return qualified.startswith(CALLBACK_PACKAGES) and qualified.endswith(".Callback")


def _computed_from(ctx: FileContext, value: cst.BaseExpression, names: set[str]) -> bool:
    """`value` reads one of `names` and does not bring the result to the host (`.cpu()`, `.item()`)."""
    if not names:
        return False
    mentions = False
    for node in ctx.index.walk(value):
        if type(node) is cst.Attribute and node.attr.value in HOST_READS:
            return False
        if (
            type(node) is cst.Name
            and node.value in names
            and not (type(parent := ctx.index.parent(node)) is cst.Attribute and parent.attr is node)
        ):
            mentions = True
    return mentions


def _to_device_fix(ctx: FileContext, created: cst.BaseExpression, argument: cst.BaseExpression) -> FixProposal | None:
    """`Metric(...)` -> `Metric(...).to(device)` when the device the argument came from is a
    parameter of the function that builds the metric."""
    device = file_facts(ctx).value(argument).device_expr
    function = ctx.index.enclosing_function(created)
    if device is None or function is None or not device.isidentifier():
        return None
    if not any(p.name.value == device for p in (*function.params.params, *function.params.kwonly_params)):
        return None
    text = ctx.code_for(created)
    return FixProposal(
        description=f"Move the metric: `.to({device})`", safe=False, replacements=((created, f"{text}.to({device})"),)
    )
