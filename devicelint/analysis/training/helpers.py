"""What a function of the file does to a training step when it is called: its step effects.

Training code moves parts of the step into helpers: `clip_gradients(model)`, `self.amp.unscale(opt)`,
`self.optimizer_step()` that steps and updates the scaler, `self.loss_scaler(loss, opt)` that
scales, steps and updates. For each call whose callee this file defines, this module gives, in the
callee's source order, the step operations the callee performs (and, one level at a time, those
of the helpers it calls in turn), so that the DL30x rules can treat the call site as the place
where those operations happen.

A callee is found only when the file shows it: `helper(...)` for a top-level function,
`self.method(...)` for a method of the calling class, `self.attr.method(...)` / `self.attr(...)`
and `name.method(...)` / `name(...)` where `self.attr` / `name` is assigned `LocalClass(...)` in
the file. Anything else is unknown and has no effects.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.execution_order import calls_by_name, calls_in_order
from devicelint.analysis.instance_parameters import instance_binding
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.training.syntax import (
    assigned_names,
    method_name,
    receiver,
    scope_of,
)
from devicelint.analysis.training.values import attribute_values, values_of
from devicelint.context import FileContext


def local_classes(ctx: FileContext) -> dict[str, cst.ClassDef]:
    """Classes defined in the file, by name (the first definition wins)."""

    def build(c: FileContext) -> dict[str, cst.ClassDef]:
        out: dict[str, cst.ClassDef] = {}
        for node in c.index.of_type(cst.ClassDef):
            out.setdefault(node.name.value, node)
        return out

    return ctx.shared("training.helpers.classes", build)


def optimizer_classes(ctx: FileContext) -> list[cst.ClassDef]:
    """The classes of the file that subclass a `torch.optim` optimizer, directly or through
    another class of the file."""

    def build(c: FileContext) -> list[cst.ClassDef]:
        classes = local_classes(c)
        return [cls for cls in c.index.of_type(cst.ClassDef) if _is_optimizer(c, classes, cls, 0)]

    return ctx.shared("training.helpers.optimizer_classes", build)


def _is_optimizer(ctx: FileContext, classes: dict[str, cst.ClassDef], cls: cst.ClassDef, depth: int) -> bool:
    """(Not a closure: a recursive one is a reference cycle that keeps the file's tree alive.)"""
    for base in cls.bases:
        qualified = ctx.qualified_name(base.value) or ""
        if (
            qualified.startswith("torch.optim.")
            and qualified.rsplit(".", 1)[-1][:1].isupper()
            and "lr_scheduler" not in qualified
            and "swa_utils" not in qualified
        ):
            return True
        parent = classes.get((dotted_name(base.value) or "").rsplit(".", 1)[-1])
        if parent is not None and parent is not cls and depth < 4 and _is_optimizer(ctx, classes, parent, depth + 1):
            return True
    return False


def parameter_names(ctx: FileContext, func: cst.FunctionDef) -> set[str]:
    """Names bound to an optimizer's parameters in `func`: targets of a loop or an assignment over
    `group["params"]` (`for p in group["params"]`, `params = group["params"]`)."""
    names: set[str] = set()
    for node in ctx.index.walk(func.body):
        if isinstance(node, (cst.For, cst.CompFor)) and _reads_params(ctx, node.iter):
            names.update(assigned_names(node.target))
        elif type(node) is cst.Assign and _reads_params(ctx, node.value):
            for target in node.targets:
                names.update(assigned_names(target.target))
    return names


def _reads_params(ctx: FileContext, node: cst.CSTNode) -> bool:
    return any(
        type(n) is cst.Subscript
        and len(n.slice) == 1
        and type(n.slice[0].slice) is cst.Index
        and type(n.slice[0].slice.value) is cst.SimpleString
        and literal_value(n.slice[0].slice.value) == "params"
        for n in ctx.index.walk(node)
    )


def _own_method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = cls.body.body if type(cls.body) is cst.IndentedBlock else []
    for statement in body:
        if type(statement) is cst.FunctionDef and statement.name.value == name:
            return statement
    return None


def method_of(ctx: FileContext, cls: cst.ClassDef, name: str, depth: int = 0) -> cst.FunctionDef | None:
    """`cls`'s method `name`, its own or inherited from a class of this file."""
    found = _own_method(cls, name)
    if found is not None or depth > 3:
        return found
    classes = local_classes(ctx)
    for base in cls.bases:
        parent = classes.get((dotted_name(base.value) or "").rsplit(".", 1)[-1])
        if parent is not None and parent is not cls:
            found = method_of(ctx, parent, name, depth + 1)
            if found is not None:
                return found
    return None


def _called_method(ctx: FileContext, cls: cst.ClassDef) -> cst.FunctionDef | None:
    """What calling an instance of `cls` runs: its `__call__`, else its `forward` (an `nn.Module`
    runs `forward` from `__call__`)."""
    return method_of(ctx, cls, "__call__") or method_of(ctx, cls, "forward")


def _nested_function(ctx: FileContext, call: cst.Call, name: str) -> cst.FunctionDef | None:
    """The function `name` defined inside a function that encloses `call` (a step closure in
    `main()`), nearest first: it hides a top-level function of that name."""
    if name not in _nested_names(ctx):
        return None
    for scope in ctx.index.ancestors(call):
        if type(scope) is not cst.FunctionDef:
            continue
        for inner in ctx.index.within(scope.body, cst.FunctionDef):
            if inner.name.value == name and ctx.index.enclosing_function(inner) is scope:
                return inner
    return None


def _nested_names(ctx: FileContext) -> frozenset[str]:
    """The names of the functions defined inside functions (most files have none)."""

    def build(c: FileContext) -> frozenset[str]:
        return frozenset(
            f.name.value for f in c.index.of_type(cst.FunctionDef) if c.index.enclosing_function(f) is not None
        )

    return ctx.shared("training.helpers.nested_names", build)


def _top_function(ctx: FileContext, name: str) -> cst.FunctionDef | None:
    def build(c: FileContext) -> dict[str, cst.FunctionDef]:
        found: dict[str, cst.FunctionDef] = {}
        for statement in c.module.body:
            if type(statement) is cst.FunctionDef:
                found.setdefault(statement.name.value, statement)
        return found

    return ctx.shared("training.helpers.top_functions", build).get(name)


def instance_class(
    ctx: FileContext, node: cst.BaseExpression, at: cst.CSTNode, handed: bool = True
) -> cst.ClassDef | None:
    """The local class `node` (`self.clipper`, `amp`) is built from, when every value the file
    assigns to it is `LocalClass(...)` of one class; with `handed`, `owner.clipper` in a helper
    every caller of which hands it the trainer is the trainer's `self.clipper`."""
    if type(node) is cst.Name:
        values = values_of(ctx, node.value, scope_of(ctx, at))
        if not values or values == [None]:
            annotated = _annotated_class(ctx, node, at)  # `pipe: Pipeline`, a parameter
            return annotated if annotated is not None or not handed else _class_handed_in(ctx, node, at)
    elif type(node) is cst.Attribute:
        alias = handed_instance_attribute(ctx, node) if handed else None
        values = attribute_values(ctx, alias or node)
    else:
        return None
    classes = local_classes(ctx)
    found: set[str] = set()
    for value in values or ():
        # `Loss(...).to(device)`, `Net().cuda().train()`: the instance itself.
        while type(value) is cst.Call and method_name(value) in ("to", "cuda", "train", "eval", "float", "half"):
            value = receiver(value)
        if not (type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in classes):
            return None
        found.add(value.func.value)
    return classes[found.pop()] if len(found) == 1 else None


def handed_arguments(
    ctx: FileContext, name: cst.Name, at: cst.CSTNode
) -> list[tuple[cst.Call, cst.BaseExpression | None]] | None:
    """What each call of the function around `at` hands its parameter `name` (None where a call
    leaves it out), with the call; None when `name` is no parameter of it or a call spreads
    `*args`/`**kwargs`."""
    function = ctx.index.enclosing_function(at)
    if function is None:
        return None
    positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    if name.value not in positional and all(p.name.value != name.value for p in function.params.kwonly_params):
        return None
    sites = call_sites(ctx, function)
    index = positional.index(name.value) if name.value in positional else None
    if index is not None and sites.binds_receiver:
        index -= 1
    found: list[tuple[cst.Call, cst.BaseExpression | None]] = []
    for call in sites.calls:
        if any(a.star for a in call.args):
            return None
        handed = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name.value), None)
        given = [a.value for a in call.args if a.keyword is None]
        if handed is None and index is not None and 0 <= index < len(given):
            handed = given[index]
        found.append((call, handed))
    return found


def _class_handed_in(ctx: FileContext, name: cst.Name, at: cst.CSTNode) -> cst.ClassDef | None:
    """The local class of the instance that every call of the function around `at` hands it
    at its parameter `name` (`train(model, criterion)` called as `train(net, Criterion())` or
    with a name bound to one there), whatever the parameter is called."""
    found: dict[int, cst.ClassDef] = {}
    for call, handed in handed_arguments(ctx, name, at) or ():
        built = handed.func.value if type(handed) is cst.Call and type(handed.func) is cst.Name else None
        cls = local_classes(ctx).get(built) if built is not None else None
        if cls is None and handed is not None:
            cls = instance_class(ctx, handed, call, handed=False)
        if cls is None:
            return None
        found[id(cls)] = cls
    return next(iter(found.values())) if len(found) == 1 else None


def _annotated_class(ctx: FileContext, name: cst.Name, at: cst.CSTNode) -> cst.ClassDef | None:
    """The local class a parameter of the function around `at` is annotated with."""
    function = ctx.index.enclosing_function(at)
    params = function.params if function is not None else None
    for param in (*params.posonly_params, *params.params, *params.kwonly_params) if params is not None else ():
        if param.name.value == name.value and param.annotation is not None:
            annotation = param.annotation.annotation
            return local_classes(ctx).get(annotation.value) if type(annotation) is cst.Name else None
    return None


def calls_through_instances(ctx: FileContext, scope: cst.CSTNode) -> list[cst.Call]:
    """`scope`'s calls in the order they run (`calls_in_order`), with the methods it runs on
    instances of the file's classes spliced in where it calls them: `trainer = Trainer(model)`
    runs `Trainer.__init__`, then `trainer.restore(path)` and `trainer.setup("cuda")` run theirs,
    so the order of what a class's methods do follows the file's own calls of them."""
    methods = _local_method_names(ctx)
    out: list[cst.Call] = []
    for call in calls_in_order(ctx, scope):
        out.append(call)
        func = call.func
        method: cst.FunctionDef | None = None
        if type(func) is cst.Name and func.value in local_classes(ctx):
            method = method_of(ctx, local_classes(ctx)[func.value], "__init__")
        elif type(func) is cst.Attribute and type(func.value) is cst.Name and func.attr.value in methods:
            if func.value.value not in ("self", "cls"):
                cls = instance_class(ctx, func.value, call)
                method = method_of(ctx, cls, func.attr.value) if cls is not None else None
        if method is not None and method is not scope and ctx.index.enclosing_function(call) is not method:
            out.extend(calls_in_order(ctx, method))
    return out


def _local_method_names(ctx: FileContext) -> frozenset[str]:
    """The names of the methods the file's classes define (a call by another name runs none)."""

    def build(c: FileContext) -> frozenset[str]:
        return frozenset(
            f.name.value
            for cls in local_classes(c).values()
            if type(cls.body) is cst.IndentedBlock
            for f in cls.body.body
            if type(f) is cst.FunctionDef
        )

    return ctx.shared("training.helpers.method_names", build)


def function_referred(ctx: FileContext, ref: cst.BaseExpression, at: cst.Call) -> cst.FunctionDef | None:
    """The function of this file that `ref`, handed to `at` uncalled (a hook, a callback), names:
    a nested or top-level function (`record`), or a method of the enclosing class (`self._log`)."""
    if type(ref) is cst.Name:
        return _nested_function(ctx, at, ref.value) or _top_function(ctx, ref.value)
    if type(ref) is cst.Attribute and type(ref.value) is cst.Name and ref.value.value == "self":
        cls = ctx.index.enclosing_class(at)
        return method_of(ctx, cls, ref.attr.value) if cls is not None else None
    return None


def callee(ctx: FileContext, call: cst.Call, handed: bool = True) -> cst.FunctionDef | None:
    """The function of this file that `call` runs, when the file shows which one. Without
    `handed`, only from what the call's own scope shows (not through a helper's parameter that
    its callers fill with an instance, which asks for the helper's own call sites)."""
    func = call.func
    if type(func) is cst.Name:
        if func.value in local_classes(ctx):
            return None  # a constructor
        found = _nested_function(ctx, call, func.value) or _top_function(ctx, func.value)
        if found is not None:
            return found
        cls = instance_class(ctx, func, call, handed)
        return _called_method(ctx, cls) if cls is not None else None
    if type(func) is not cst.Attribute:
        return None
    owner, name = func.value, func.attr.value
    if type(owner) is cst.Name and owner.value == "self":
        cls = ctx.index.enclosing_class(call) or (_handed_self(ctx, owner, call) if handed else None)
        method = method_of(ctx, cls, name) if cls is not None else None
        if method is not None:
            return method
        # `self.clipper(params)`: an attribute holding an instance of a local class.
        cls = instance_class(ctx, func, call, handed)
        return _called_method(ctx, cls) if cls is not None else None
    built = owner.func.value if type(owner) is cst.Call and type(owner.func) is cst.Name else None
    cls = (
        (local_classes(ctx).get(built) if built is not None else None)  # `Runner().fit(...)`
        or _class_named(ctx, owner, call)
        or instance_class(ctx, owner, call, handed)
        or (_handed_self(ctx, owner, call) or _duck_class(ctx, owner, name, call) if handed else None)
    )
    return method_of(ctx, cls, name) if cls is not None else None


# A helper returning another helper's call is followed this many helpers deep.
_MAX_RETURN_CHAIN = 3


def returned_call(ctx: FileContext, call: cst.Call, depth: int = 0) -> cst.Call | None:
    """What a call of a helper of the file whose one `return` is a call stands for, in the
    caller's words: `make_opt(w, b)` running `return torch.optim.SGD([w, b], lr=0.1)` is
    `torch.optim.SGD([<w>, <b>], lr=0.1)` with the caller's argument nodes in place of the
    parameters (a method's receiver for its `self`). A returned call of another such helper
    (`return _sgd(params, lr)`) stands for what that one returns, a few helpers deep. None when
    the helper returns anything else, uses a parameter the call fills with nothing it shows,
    builds from its own locals, or the call passes `*args`/`**kwargs`."""
    helper = callee(ctx, call)
    if helper is None or any(arg.star for arg in call.args):
        return None
    inner = only_returned(ctx, helper)
    if not isinstance(inner, cst.Call):
        return None
    return _through_helpers(ctx, helper, call, inner, depth)


def returned_calls(ctx: FileContext, call: cst.Call) -> list[cst.Call] | None:
    """`returned_call` for a helper with several `return`s, one per branch (`make_optimizer(name,
    params, lr)` returning `Adagrad(params, lr=lr)`, `Adam(params, lr=lr)` or `SGD(...)` by
    name): each returned call in the caller's words. None unless every `return` of the helper is
    a call that reads only what the call passes."""
    helper = callee(ctx, call)
    if helper is None or any(arg.star for arg in call.args):
        return None
    returns = [r.value for r in ctx.index.returns_of(helper)]
    out = []
    for inner in returns:
        replaced = _through_helpers(ctx, helper, call, inner, 0) if isinstance(inner, cst.Call) else None
        if replaced is None:
            return None
        out.append(replaced)
    return out or None


def _through_helpers(
    ctx: FileContext, helper: cst.FunctionDef, call: cst.Call, inner: cst.Call, depth: int
) -> cst.Call | None:
    """`inner`, the call `helper` returns, in the words of `call`: first, where `inner` is itself
    a call of a helper that returns a call, what that one returns in `helper`'s words."""
    deeper = returned_call(ctx, inner, depth + 1) if depth + 1 < _MAX_RETURN_CHAIN else None
    if deeper is None:
        return _in_callers_words(ctx, helper, call, inner)
    # only the parts `inner`'s own arguments brought in are in `helper`'s words
    brought = {id(node) for arg in inner.args for node in ctx.index.walk(arg.value)}
    replaced = _substituted(ctx, helper, call, deeper, brought)
    return replaced if isinstance(replaced, cst.Call) else None


def returned_in_callers_words(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """What a call of a helper of the file with one `return` hands back, in the caller's words,
    whatever the expression (`self.pick(generator, device)` running `return generator.device if
    generator is not None else device`); None as for `returned_call`."""
    helper = callee(ctx, call)
    if helper is None or any(arg.star for arg in call.args):
        return None
    inner = only_returned(ctx, helper)
    return _substituted(ctx, helper, call, inner) if inner is not None else None


def _in_callers_words(ctx: FileContext, helper: cst.FunctionDef, call: cst.Call, inner: cst.Call) -> cst.Call | None:
    """`inner`, a call the helper returns, with the call's arguments in place of the parameters
    it reads; None where it reads a parameter the call leaves out or a local of the helper."""
    replaced = _substituted(ctx, helper, call, inner)
    return replaced if isinstance(replaced, cst.Call) else None


def _substituted(
    ctx: FileContext,
    helper: cst.FunctionDef,
    call: cst.Call,
    inner: cst.BaseExpression,
    only: set[int] | None = None,
) -> cst.BaseExpression | None:
    """`inner` with the helper's parameters replaced by what `call` passes for them (only among
    the nodes `only` names, where given: the rest is in another helper's words already)."""
    bound = bound_arguments(ctx, helper, call)
    if bound is None:
        return None
    params = {
        p.name.value for p in (*helper.params.posonly_params, *helper.params.params, *helper.params.kwonly_params)
    }
    local = _locals_of(ctx, helper)
    swaps: dict[int, cst.BaseExpression] = {}
    for node in ctx.index.walk(inner):
        if type(node) is not cst.Name or (only is not None and id(node) not in only) or not _is_value_name(ctx, node):
            continue
        if node.value in bound:
            swaps[id(node)] = bound[node.value]
        elif node.value in params or node.value in local:
            return None  # a parameter the call leaves to its default, or the helper's own local
    replaced = inner.visit(_Swap(swaps)) if swaps else inner
    return replaced if isinstance(replaced, cst.BaseExpression) else None


class _Swap(cst.CSTTransformer):
    """Every node named in `swaps` (by identity) replaced, in one pass: a second `deep_replace`
    would look for nodes the first one already rebuilt. What is swapped in keeps its identity."""

    def __init__(self, swaps: dict[int, cst.BaseExpression]) -> None:
        super().__init__()
        self._swaps = swaps

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self._swaps.get(id(original_node), updated_node)


def only_returned(ctx: FileContext, helper: cst.FunctionDef) -> cst.BaseExpression | None:
    """What the helper's one `return` hands back (None for several, none, or a bare `return`).
    (`model_events.scopes.only_return` is the same question above this layer.)"""
    returns = ctx.index.returns_of(helper)
    return returns[0].value if len(returns) == 1 else None


def handed_back(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """The caller's argument that a call of a helper of the file gives back as it came: the
    helper's one `return` is one of its parameters, which it never rebinds (`def keep(layers):
    log(layers); return layers`), so `self.layers = keep(layers)` holds the caller's `layers`.
    None for any other helper, or where the call fills that parameter with nothing it shows."""
    if any(arg.star for arg in call.args):
        return None
    made = _local_callable(ctx, call.func)
    if type(made) is cst.Lambda:
        return _lambda_handed_back(ctx, made, call)
    if type(made) is cst.Call:
        return _partial_handed_back(ctx, made, call)
    helper = callee(ctx, call)
    if helper is None:
        return None
    value = only_returned(ctx, helper)
    if type(value) is not cst.Name or value.value in _locals_of(ctx, helper):
        return None
    bound = bound_arguments(ctx, helper, call)
    return bound.get(value.value) if bound is not None else None


def _local_callable(ctx: FileContext, func: cst.BaseExpression) -> cst.Lambda | cst.Call | None:
    """The lambda or `functools.partial(helper, ...)` a name is bound to once, in the function
    that calls it or else at the module's top level (`init_ = lambda m: init(m, nn.init.orthogonal_)`),
    where that scope binds the name no other way."""
    if type(func) is not cst.Name or func.value not in _callables_bound(ctx):
        return None
    scope = ctx.index.enclosing_function(func)
    if scope is not None:
        if func.value in _parameter_names(scope):
            return None
        values = _single_bindings(ctx, scope.body, func.value, nested=True)
        if values != []:
            return _callable_value(ctx, values)
    top = _single_bindings(ctx, ctx.module, func.value, nested=False)
    return _callable_value(ctx, top) if top else None


def _callables_bound(ctx: FileContext) -> frozenset[str]:
    """Names some plain assignment of the file binds to a lambda or a call (a `partial(...)`
    among them): the only names `_local_callable` need look up, out of every call's."""

    def build(c: FileContext) -> frozenset[str]:
        if "lambda" not in c.source and "partial" not in c.source:
            return frozenset()
        return frozenset(
            target.target.value
            for assign in c.index.of_type(cst.Assign)
            if type(assign.value) in (cst.Lambda, cst.Call)
            for target in assign.targets
            if type(target.target) is cst.Name
        )

    return ctx.shared("training.helpers.callables_bound", build)


def _single_bindings(ctx: FileContext, root: cst.CSTNode, name: str, nested: bool) -> list[cst.BaseExpression] | None:
    """The values of plain `name = ...` in `root` (only its own statements unless `nested`);
    None when `root` also binds the name another way."""
    values: list[cst.BaseExpression] = []
    nodes = ctx.index.walk(root) if nested else [s for line in ctx.module.body for s in _small(line)]
    for node in nodes:
        if isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.AsName)) and _names_target(node, name):
            return None
        if type(node) is cst.Assign and any(_names(t.target, name) for t in node.targets):
            if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
                return None
            values.append(node.value)
    return values


def _small(line: cst.CSTNode) -> list[cst.CSTNode]:
    return list(line.body) if type(line) is cst.SimpleStatementLine else [line]


def _callable_value(ctx: FileContext, values: list[cst.BaseExpression] | None) -> cst.Lambda | cst.Call | None:
    if values is None or len(values) != 1:
        return None
    value = values[0]
    if type(value) is cst.Lambda:
        return value
    if (
        type(value) is cst.Call
        and ctx.qualified_name(value.func) == "functools.partial"
        and value.args
        and value.args[0].keyword is None
        and type(value.args[0].value) is cst.Name
    ):
        return value
    return None


def _partial_handed_back(ctx: FileContext, made: cst.Call, call: cst.Call) -> cst.BaseExpression | None:
    """The argument a call of `functools.partial(helper, ...)` gives back: the helper's one
    `return` is the parameter that the partial's or the call's arguments fill."""
    helper = _top_function(ctx, made.args[0].value.value)  # type: ignore[attr-defined]  # _callable_value checked a Name
    if helper is None or any(a.star for a in made.args):
        return None
    value = only_returned(ctx, helper)
    if type(value) is not cst.Name or value.value in _locals_of(ctx, helper):
        return None
    names = [p.name.value for p in (*helper.params.posonly_params, *helper.params.params)]
    positional = [a.value for a in (*made.args[1:], *call.args) if a.keyword is None]
    bound = dict(zip(names, positional))
    bound.update({a.keyword.value: a.value for a in (*made.args, *call.args) if a.keyword is not None})
    return bound.get(value.value)


def _lambda_handed_back(ctx: FileContext, made: cst.Lambda, call: cst.Call) -> cst.BaseExpression | None:
    """The caller's argument a call of a local lambda gives back: its body is one of its
    parameters, or a call of a helper that hands that parameter back (`init(m, ...)` returning `m`)."""
    params = made.params
    if params.star_arg is not None and type(params.star_arg) is cst.Param or params.star_kwarg is not None:
        return None
    names = [p.name.value for p in (*params.posonly_params, *params.params)]
    positional = [a.value for a in call.args if a.keyword is None]
    if len(positional) > len(names):
        return None
    bound = dict(zip(names, positional))
    bound.update({a.keyword.value: a.value for a in call.args if a.keyword is not None})
    body = made.body
    if type(body) is cst.Call:
        inner = handed_back(ctx, body)
        if inner is None:
            return None
        body = inner
    return bound.get(body.value) if type(body) is cst.Name else None


def _parameter_names(function: cst.FunctionDef) -> set[str]:
    params = function.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if type(p) is cst.Param]
    return {p.name.value for p in every}


def _names(target: cst.BaseExpression, name: str) -> bool:
    if type(target) is cst.Name:
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_names(e.value, name) for e in target.elements)
    return type(target) is cst.StarredElement and _names(target.value, name)


def _names_target(node: cst.CSTNode, name: str) -> bool:
    target = node.name if type(node) is cst.AsName else node.target  # type: ignore[attr-defined]  # the four binding kinds
    return _names(target, name)


def arguments_for(ctx: FileContext, helper: cst.FunctionDef, name: str) -> list[cst.BaseExpression] | None:
    """What every call of `helper` in the file (`calls_of`) passes for its parameter `name`, in
    the callers' words (`bound_arguments`); None when there is no call, or one passes `*args` or
    leaves the parameter to its default."""
    found: list[cst.BaseExpression] = []
    for call in calls_of(ctx, helper):
        bound = bound_arguments(ctx, helper, call) if not any(a.star for a in call.args) else None
        given = bound.get(name) if bound is not None else None
        if given is None:
            return None
        found.append(given)
    return found or None


def bound_arguments(ctx: FileContext, helper: cst.FunctionDef, call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """The helper's parameter names -> what `call` passes for them (a method's first parameter:
    the object it is called on, or the explicit instance of `Class.method(obj, ...)`)."""
    params = [p.name.value for p in (*helper.params.posonly_params, *helper.params.params)]
    bound: dict[str, cst.BaseExpression] = {}
    decorators = {dotted_name(d.decorator) for d in helper.decorators}
    method = ctx.index.enclosing_class(helper) is not None and "staticmethod" not in decorators
    if method and params:
        func = call.func
        if type(func) is cst.Attribute and _class_named(ctx, func.value, call) is None:
            bound[params[0]] = func.value
            params = params[1:]
        elif "classmethod" in decorators:
            params = params[1:]  # `cls`: whichever class, never a value the helper moves
        elif type(func) is cst.Name and (func.value in local_classes(ctx) or helper.name.value == "__init__"):
            params = params[1:]  # `Class(...)`, `cls(...)` run `__init__` on the instance they build
        elif type(func) is cst.Name:
            bound[params[0]] = func  # `sampler(...)` runs `__call__` on `sampler`
            params = params[1:]
        elif type(func) is not cst.Attribute:
            return None
    positional = [a.value for a in call.args if a.keyword is None]
    if len(positional) > len(params):
        return None
    bound.update(zip(params, positional))
    for arg in call.args:
        if arg.keyword is not None:
            bound[arg.keyword.value] = arg.value
    return bound


def in_callers_words(ctx: FileContext, helper: cst.FunctionDef, call: cst.Call, text: str) -> str | None:
    """A dotted name in the helper's words (`owner.scaler`, `scaler`, `self.scaler`) as `call`, a
    call of `helper`, spells it: the parameter it starts with replaced by the caller's argument
    (`bound_arguments`; a method's `self` by the object it is called on), a module-level name as
    it is. None where the call leaves that parameter to its default, passes `*args`, or the name
    is the helper's own local."""
    if any(arg.star for arg in call.args):
        return None
    bound = bound_arguments(ctx, helper, call)
    if bound is None:
        return None
    head, dot, rest = text.partition(".")
    given = bound.get(head)
    if given is not None:
        return " ".join(ctx.code_for(given).split()) + dot + rest
    params = {
        p.name.value
        for p in (
            *helper.params.posonly_params,
            *helper.params.params,
            *helper.params.kwonly_params,
        )
    }
    if head in params or head in _locals_of(ctx, helper):
        return None
    return text


def _locals_of(ctx: FileContext, helper: cst.FunctionDef) -> set[str]:
    """The names the helper binds itself (assignments, loop and `with` targets)."""
    found: set[str] = set()
    for node in ctx.index.walk(helper.body):
        if type(node) is cst.Name and ctx.index.in_binding_target(node):
            found.add(node.value)
        elif type(node) is cst.AsName and type(node.name) is cst.Name:
            found.add(node.name.value)
    return found


def _is_value_name(ctx: FileContext, node: cst.Name) -> bool:
    """A name read as a value (not an attribute's name, a keyword, or a lambda's parameter)."""
    parent = ctx.index.parent(node)
    if type(parent) is cst.Attribute and parent.attr is node:
        return False
    if type(parent) is cst.Arg and parent.keyword is node:
        return False
    return type(parent) is not cst.Param


def _class_named(ctx: FileContext, owner: cst.BaseExpression, call: cst.Call) -> cst.ClassDef | None:
    """`Trainer._clip(self)`, `cls._clip(opt)`: a method called on a class of the file itself
    (a static or class method, or a plain one handed its instance explicitly)."""
    if type(owner) is not cst.Name:
        return None
    if owner.value == "cls":
        return ctx.index.enclosing_class(call)
    if owner.value not in local_classes(ctx) or _is_parameter(ctx, owner):
        return None
    return local_classes(ctx)[owner.value]


def _handed_self(ctx: FileContext, owner: cst.BaseExpression, call: cst.CSTNode) -> cst.ClassDef | None:
    """`trainer.step_g(loss)` in a function every caller of which hands it `self` of one class
    of the file in that parameter's place (a method's body moved into a function or a static
    method that takes the instance)."""
    if type(owner) is not cst.Name or owner.value == "cls" or not _is_parameter(ctx, owner):
        return None
    function = ctx.index.enclosing_function(owner)
    if function is None:
        return None
    memo: dict[tuple[int, str], cst.ClassDef | None] = ctx.shared("training.handed_self", lambda c: {})
    key = (id(function), owner.value)
    if key not in memo:
        memo[key] = _handed_self_of(ctx, owner, function)
    return memo[key]


def _handed_self_of(ctx: FileContext, owner: cst.Name, function: cst.FunctionDef) -> cst.ClassDef | None:
    host = ctx.index.enclosing_class(function)
    if host is None or not _is_bound_method(function):
        # a module-level function or a static or class method: the engine's binding
        bound = instance_binding(ctx, function)
        return bound[1] if bound is not None and bound[0] == owner.value else None
    # a method of another class handed this one's instance (`self.runner.run(self, batches)`)
    params = [*function.params.posonly_params, *function.params.params]
    position = next((i for i, p in enumerate(params) if p.name.value == owner.value), None)
    if position is None:
        return None
    position -= 1  # `self.helper(trainer)` fills the parameter after `self`
    found: set[int] = set()
    owners: dict[int, cst.ClassDef] = {}
    for site in calls_of(ctx, function):
        positional_args = [a for a in site.args if a.keyword is None and not a.star]
        if position < 0 or position >= len(positional_args):
            return None
        value = positional_args[position].value
        cls = ctx.index.enclosing_class(site)
        if not (type(value) is cst.Name and value.value == "self" and cls is not None):
            return None
        found.add(id(cls))
        owners[id(cls)] = cls
    return owners[found.pop()] if len(found) == 1 else None


def handed_instance_attribute(ctx: FileContext, node: cst.BaseExpression) -> cst.Attribute | None:
    """`self.<attr>` for `owner.<attr>` read in a function every caller of which hands it `self`
    of one class of the file as `owner` (a training loop moved into a helper that takes the
    trainer): the attribute the class's own methods assign."""
    if type(node) is not cst.Attribute or type(node.value) is not cst.Name:
        return None
    if _handed_self(ctx, node.value, node) is None:
        return None
    return cst.Attribute(value=cst.Name("self"), attr=node.attr)


def _is_bound_method(function: cst.FunctionDef) -> bool:
    names = {dotted_name(d.decorator) for d in function.decorators}
    return not names & {"staticmethod", "classmethod"}


def calls_of(ctx: FileContext, function: cst.FunctionDef) -> list[cst.Call]:
    """The file's calls that run `function`, in source order (`call_sites`)."""
    return list(call_sites(ctx, function).calls)


@dataclass(frozen=True)
class CallSites:
    # The calls, in source order.
    calls: tuple[cst.Call, ...]
    # Whether a method's first parameter is filled by the call's receiver (`self`/`cls` are not
    # among the call's arguments) rather than by the call's first argument.
    binds_receiver: bool


def call_sites(ctx: FileContext, function: cst.FunctionDef) -> CallSites:
    """The reverse of `callee`: every call of the file that runs `function`, so that a rule
    judging a parameter by what the callers hand in sees each way the file runs it: `f(...)`,
    `self.f(...)` (also from a subclass), `runner.f(...)` on an instance, `Runner().f(...)`,
    `self.runner.f(...)`, `sampler(...)` for `__call__`, `Class(...)`
    for `__init__` (a base class's, when the subclass has none), `Class.f(...)` for a static or
    class method. A bound method called as `Class.f(instance, ...)` is left out: its arguments
    sit one place off from the others'. Memoised per function; a function asked about while its
    own sites are being found (helpers handed each other's instances) has none so far."""
    memo: dict[int, CallSites] = ctx.shared("training.call_sites", lambda c: {})
    found = memo.get(id(function))
    if found is None:
        memo[id(function)] = CallSites((), binds_receiver=False)
        found = memo[id(function)] = _call_sites(ctx, function)
    return found


def _call_sites(ctx: FileContext, function: cst.FunctionDef) -> CallSites:
    body = ctx.index.parent(function)
    owner = ctx.index.parent(body) if body is not None else None
    owner = owner if type(owner) is cst.ClassDef else None
    static = owner is not None and "staticmethod" in {dotted_name(d.decorator) for d in function.decorators}
    name = function.name.value
    by_name = calls_by_name(ctx)
    candidates = list(by_name.get(name, ()))
    constructors: set[str] = set()
    if owner is not None and name == "__init__":
        constructors = {n for n, cls in local_classes(ctx).items() if method_of(ctx, cls, "__init__") is function}
        candidates += [call for n in constructors for call in by_name.get(n, ())]
    elif owner is not None and name == "__call__":
        # (a module's `forward` through `module(x)` is the placement engine's to follow; looking
        # for those calls here would resolve every call of a model file)
        candidates += _instance_calls(ctx)
    if constructors:
        # `cls(...)` in a class method builds an instance of its class
        candidates += [call for call in by_name.get("cls", ()) if _built_by_class_method(ctx, call, constructors)]
    out = []
    for call in sorted(set(candidates), key=ctx.index.position):
        func = call.func
        if type(func) is cst.Name and (func.value in constructors or func.value == "cls"):
            out.append(call)
        elif callee(ctx, call, handed=False) is function and not (
            owner is not None
            and _is_bound_method(function)
            and type(func) is cst.Attribute
            and type(func.value) is cst.Name
            and func.value.value == owner.name.value
        ):
            out.append(call)
    return CallSites(tuple(out), binds_receiver=owner is not None and not static)


def _built_by_class_method(ctx: FileContext, call: cst.Call, classes: set[str]) -> bool:
    """`cls(...)` in a `@classmethod` of one of `classes` (`Reader.load(path)` returning
    `cls(args, state)`)."""
    method = ctx.index.enclosing_function(call)
    owner = ctx.index.enclosing_class(method) if method is not None else None
    return (
        type(call.func) is cst.Name
        and owner is not None
        and owner.name.value in classes
        and any(dotted_name(d.decorator) == "classmethod" for d in method.decorators)  # type: ignore[union-attr]  # set with owner
    )


def _instance_calls(ctx: FileContext) -> list[cst.Call]:
    """The calls that may call an instance (`sampler(...)`, `self.head(...)`): the candidates
    for running a `__call__`, of which `callee` decides."""

    def build(c: FileContext) -> list[cst.Call]:
        classes = local_classes(c)
        return [
            call
            for call in c.index.of_type(cst.Call)
            if (type(call.func) is cst.Name and call.func.value not in classes)
            or (
                type(call.func) is cst.Attribute
                and type(call.func.value) is cst.Name
                and call.func.value.value == "self"
            )
        ]

    return ctx.shared("training.instance_calls", build)


# Method names too common to pick a class by (optimizers, schedulers, modules, meters have them).
_COMMON_METHODS = frozenset(
    {
        "step",
        "zero_grad",
        "update",
        "forward",
        "__call__",
        "train",
        "eval",
        "to",
        "cuda",
        "cpu",
        "state_dict",
        "load_state_dict",
        "parameters",
        "reset",
        "get",
        "set",
        "close",
        "item",
    }
)


def _duck_class(ctx: FileContext, owner: cst.BaseExpression, name: str, call: cst.Call) -> cst.ClassDef | None:
    """The one local class that defines `name`, for `self.attr.name(...)` where `self.attr` only
    ever holds a constructor parameter (`self.precision = precision`): a plugin object the
    file's own classes are written for, whose type the file never states."""
    if name in _COMMON_METHODS or name.startswith("__") or not _self_attribute(owner):
        return None
    values = attribute_values(ctx, owner)
    if not values or not all(type(v) is cst.Name and _is_parameter(ctx, v) for v in values):
        return None
    here = ctx.index.enclosing_class(call)
    found = [cls for cls in local_classes(ctx).values() if cls is not here and method_of(ctx, cls, name) is not None]
    return found[0] if len(found) == 1 else None


def _self_attribute(node: cst.BaseExpression) -> bool:
    return type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self"


def _is_parameter(ctx: FileContext, name: cst.Name) -> bool:
    """`name` is a parameter of the function it is read in."""
    function = ctx.index.enclosing_function(name)
    if function is None:
        return False
    params = function.params
    return any(p.name.value == name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def looped_methods(ctx: FileContext, call: cst.Call) -> list[cst.FunctionDef]:
    """The methods `call` runs when its receiver is the variable of a loop over a container the
    function (or its class's `__init__`) writes out with instances of the file's classes:
    `for metric in metrics.values(): metric.update(out)` after `metrics = {"loss": Loss(fn),
    "top5": TopK(5)}` runs `Loss.update` and `TopK.update`. Empty when the file does not show
    every element's class."""
    func = call.func
    if type(func) is not cst.Attribute or type(func.value) is not cst.Name:
        return []
    variable = func.value.value
    loop = next(
        (
            a
            for a in ctx.index.ancestors(call)
            if type(a) is cst.For and type(a.target) is cst.Name and a.target.value == variable
        ),
        None,
    )
    if loop is None:
        return []
    source = loop.iter
    if (
        type(source) is cst.Call
        and type(source.func) is cst.Attribute
        and source.func.attr.value == "values"
        and not source.args
    ):
        source = source.func.value
    container = _written_container(ctx, source, loop)
    if container is None:
        return []
    classes = local_classes(ctx)
    methods: list[cst.FunctionDef] = []
    for element in container:
        cls = classes.get(element.func.value) if type(element) is cst.Call and type(element.func) is cst.Name else None
        method = method_of(ctx, cls, func.attr.value) if cls is not None else None
        if method is None:
            return []
        if all(m is not method for m in methods):
            methods.append(method)
    return methods


def _written_container(
    ctx: FileContext, source: cst.BaseExpression, at: cst.CSTNode
) -> list[cst.BaseExpression] | None:
    """The elements (dict values) of the one dict/list/tuple literal that `source` (a local, or a
    `self.` attribute the class assigns once) is bound to."""
    name = dotted_name(source)
    if name is None:
        return None
    if name.startswith("self."):
        cls = ctx.index.enclosing_class(at)
        root: cst.CSTNode | None = cls
    else:
        root = ctx.index.enclosing_function(at) or ctx.module
    if root is None:
        return None
    bound = [
        node.value
        for node in ctx.index.walk(root)
        if type(node) is cst.Assign and len(node.targets) == 1 and dotted_name(node.targets[0].target) == name
    ]
    if len(bound) != 1:
        return None
    value = bound[0]
    if type(value) is cst.Dict:
        return [e.value for e in value.elements if type(e) is cst.DictElement] or None
    if isinstance(value, (cst.List, cst.Tuple)):
        return [e.value for e in value.elements if type(e) is cst.Element] or None
    return None
