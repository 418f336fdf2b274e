from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.container_reads import holders
from devicelint.analysis.device_in_scope import bound_before
from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_facts import move_call
from devicelint.analysis.training.helpers import callee
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place
from devicelint.rule_base import FixProposal, Rule, Violation, register

WEIGHT_KEYWORDS = frozenset({"weight", "pos_weight"})
FACTORY_NAMES = frozenset(
    {
        "torch.tensor",
        "torch.as_tensor",
        "torch.from_numpy",
        "torch.Tensor",
        "torch.FloatTensor",
        "torch.ones",
        "torch.full",
        "torch.linspace",
    }
)
ACCELERATOR_MOVES = frozenset({"cuda", "to"})


def _is_loss_class(ctx: FileContext, call: cst.Call) -> str | None:
    qualified = ctx.qualified_name(call.func) or ""
    if qualified.startswith("torch.nn.") and qualified.count(".") == 2 and qualified.endswith("Loss"):
        return qualified.rsplit(".", 1)[-1]
    return None


def _direct_cpu_factory(ctx: FileContext, value: cst.BaseExpression) -> bool:
    if type(value) is cst.Call and ctx.qualified_name(value.func) in FACTORY_NAMES:
        return not any(a.keyword is not None and a.keyword.value == "device" or a.star for a in value.args)
    return False


def _cpu_weight(ctx: FileContext, value: cst.BaseExpression) -> bool:
    fact = file_facts(ctx).value(value)
    place = file_facts(ctx).place_of(value)
    if place is Place.HOST:
        return fact.from_factory
    if fact.kind != "unknown" or fact.where is not None:
        return False
    if _direct_cpu_factory(ctx, value):
        return True
    if type(value) is cst.Name:
        # `w = torch.tensor(class_weights)` on an earlier line of the same function: the data is
        # configuration (a list, a NumPy array), so the tensor is on the CPU unless moved since.
        last = _last_assignment(ctx, value)
        return last is not None and _direct_cpu_factory(ctx, last)
    return False


def _last_assignment(ctx: FileContext, use: cst.Name) -> cst.BaseExpression | None:
    scope = ctx.index.enclosing_function(use) or ctx.module
    use_line = _statement_of(ctx, use)
    order = {id(stmt): i for i, stmt in enumerate(ctx.index.of_type(cst.SimpleStatementLine))}
    if use_line is None or id(use_line) not in order:
        return None
    found: tuple[int, cst.BaseExpression] | None = None
    for assign in ctx.index.of_type(cst.Assign):
        if not any(type(t.target) is cst.Name and t.target.value == use.value for t in assign.targets):
            continue
        if (ctx.index.enclosing_function(assign) or ctx.module) is not scope:
            continue
        line = ctx.index.parent(assign)
        position = order.get(id(line), -1)
        if position < order[id(use_line)] and (found is None or position > found[0]):
            found = (position, assign.value)
    return found[1] if found is not None else None


def _statement_of(ctx: FileContext, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) is cst.SimpleStatementLine:
            return ancestor
    return None


def _moves_in_scope(ctx: FileContext, scope: cst.CSTNode) -> list[tuple[str | None, cst.Call]]:
    """(receiver name, call) for every `.to(...)`/`.cuda()` in the scope's own code."""
    out = []
    for call in ctx.index.of_type(cst.Call):
        if move_call(call) not in ACCELERATOR_MOVES:
            continue
        if (ctx.index.enclosing_function(call) or ctx.module) is not scope:
            continue
        receiver = call.func.value  # type: ignore[attr-defined]  # a move: `x.to(...)`, func is an Attribute
        out.append((receiver.value if type(receiver) is cst.Name else None, call))
    return out


@register
class LossWeightOffDevice(Rule):
    """
    ## What it does
    Flags a loss module built with a class weight created on the CPU
    (`nn.CrossEntropyLoss(weight=torch.tensor([...]))`, `nn.BCEWithLogitsLoss(pos_weight=...)`)
    in a function or script that moves its model to a device but never moves the loss, and a
    loss built so anywhere (a helper that returns it, a trainer's `__init__`) that is then
    called on device tensors without having been moved.

    ## Why it is a bug on a GPU
    The weight is a buffer of the loss module. It stays on the CPU unless the loss itself is
    moved (`criterion.to(device)`), so the first loss computation on GPU logits fails with
    `Expected all tensors to be on the same device, but found at least two devices, cuda:0 and
    cpu!`.

    ## Example
    ```python
    model = Net().to(device)
    criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 5.0]))
    ```

    ## Use instead
    ```python
    model = Net().to(device)
    criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 5.0], device=device))
    ```

    ## Fix safety
    The fix moves the loss module where the model goes: `nn.CrossEntropyLoss(weight=w)` becomes
    `nn.CrossEntropyLoss(weight=w).to(device)` (or `.cuda()`), with the device expression of the
    model's own move. Loss modules keep `weight` and `pos_weight` as buffers, so this moves the
    weight and keeps it in the module's `state_dict`. It is unsafe: the loss module now lives
    on the device, which code that reads `criterion.weight` on the host would notice. Moving
    the module rather than writing `weight=w.to(device)` works for any weight expression and
    keeps the weight a buffer of the loss, moved again with it later. No fix when the model's
    device is named only after the loss is built, or the model is moved in another way
    (`.to(device, dtype)`, `.cuda(1)`, `.to(**kw)`).

    ## Known limits
    A loss is checked where it is assigned to a plain name in the same function (or in the
    script's top-level code) as a `.to(...)`/`.cuda()` move, or where the engine follows it
    (returned from a helper of the file, kept on `self` by a class that is not a module) to a
    call with device tensors; the second kind has no fix, since no model move is in view. A
    loss kept as an attribute of an `nn.Module` moves with it and is not reported. A function of
    another project module counts as such a helper when every `return` of it builds a `torch.nn`
    loss unmoved and one is given a class weight made on the host
    (`if cfg.class_weights: return nn.CrossEntropyLoss(weight=torch.tensor(cfg.class_weights))`):
    the finding is at the call and names that line. A model handed to the constructor of a
    class of another project module that moves that argument (`Train(model, ...)` whose
    `__init__` does `self.model = model.to(device)`) counts as moved in the scope of that call;
    such a finding has no fix.
    """

    code = "DL106"
    name = "loss-weight-off-device"
    summary = "A loss built with a CPU `weight=` tensor is never moved while the model is."
    message = "`{loss}` gets a CPU `{keyword}` tensor and `{name}` is never moved, while `{moved}` is: the loss fails on GPU logits; pass `device=` to the weight or use `{name} = {loss}(...).to(device)`"
    fix_availability = "unsafe"
    tokens = ("weight",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        reported: set[int] = set()
        for violation, constructor in self._moved_beside(ctx):
            reported.add(id(constructor))
            yield violation
        # Wherever the loss was built (a helper, a trainer's `__init__`): called on device tensors.
        for meeting in file_facts(ctx).meetings:
            constructor = meeting.cpu_node
            if meeting.how != "weight" or id(constructor) in reported or type(constructor) is not cst.Call:
                continue
            reported.add(id(constructor))
            weight = next(a for a in constructor.args if a.keyword is not None and a.keyword.value in WEIGHT_KEYWORDS)
            yield self.violation(
                weight.value,
                loss=f"nn.{_loss_name(ctx, constructor)}",
                keyword=weight.keyword.value,  # type: ignore[union-attr]  # next() picked a keyword argument
                name=ctx.code_for(meeting.node.func),  # type: ignore[attr-defined]  # a weight meeting is at a call
                moved=ctx.code_for(meeting.device_node) if meeting.device_node is not None else "its input",
            )

    def _moved_beside(self, ctx: FileContext) -> Iterator[tuple[Violation, cst.Call]]:
        """A loss built in a scope that moves the model but never the loss."""
        seen: set[int] = set()
        for site in ctx.index.of_type(cst.Call):
            assign = ctx.index.parent(site)
            direct = (
                type(assign) is cst.Assign and len(assign.targets) == 1 and type(assign.targets[0].target) is cst.Name
            )
            held = None
            if not direct:
                # a loss put in a container and read back into a name (`criterion, _ = (CrossEntropyLoss(...),
                # None)`); only constructors are looked for there (asked first: the lookup is what costs)
                if type(assign) not in (cst.Element, cst.DictElement, cst.Arg) or _is_loss_class(ctx, site) is None:
                    continue
                held = next((h for h in holders(ctx, site) if type(h) is cst.Name), None)
                if held is None:
                    continue
            if direct and ctx.project.functions:
                imported = _imported_loss(ctx, site, assign.targets[0].target.value)  # type: ignore[union-attr]  # `direct`: one Name target
                if imported is not None:
                    yield imported, site
                    continue
            # the loss's constructor, or the one a helper of the file returns (`build_loss(w)`)
            call = site if _is_loss_class(ctx, site) is not None else _returned_loss(ctx, site)
            loss = _is_loss_class(ctx, call) if call is not None else None
            if call is None or loss is None or id(call) in seen:
                continue
            weight = next((a for a in call.args if a.keyword is not None and a.keyword.value in WEIGHT_KEYWORDS), None)
            if weight is None or not _cpu_weight(ctx, weight.value):
                continue
            name = assign.targets[0].target.value if direct else held.value  # type: ignore[union-attr]  # one of the two is set
            scope = ctx.index.enclosing_function(site) or ctx.module
            moves = _moves_in_scope(ctx, scope)
            handed = _constructor_moves(ctx, scope)
            if any(receiver == name for receiver, _ in (*moves, *handed)):
                continue
            others = [c for receiver, c in moves if receiver != name and not _is_cpu_move(c)]
            if others:
                moved = ctx.code_for(others[0].func.value)  # type: ignore[attr-defined]  # `others` are moves: `x.to(...)`
            elif handed:
                moved = ctx.code_for(handed[0][1])  # a trainer's constructor moves it
            else:
                continue
            seen.add(id(call))
            yield (
                self.violation(
                    weight.value,
                    fix=_move_loss(ctx, call, others[0]) if call is site and direct and others else None,
                    loss=f"nn.{loss}",
                    keyword=weight.keyword.value,  # type: ignore[union-attr]  # the weight's keyword was matched
                    name=name,
                    moved=moved,
                ),
                call,
            )


def _constructor_moves(ctx: FileContext, scope: cst.CSTNode) -> list[tuple[str | None, cst.BaseExpression]]:
    """(name, argument) for each argument a call in the scope's own code hands to a parameter
    that the constructor of an imported plain class moves to a device (`Train(model, ...)`
    whose `__init__` does `self.model = model.to(device)`: `ClassSummary.moved_params`)."""
    classes = {n: c for n, c in ctx.project.plain_classes.items() if c.moved_params}
    out: list[tuple[str | None, cst.BaseExpression]] = []
    for call in ctx.index.of_type(cst.Call) if classes else ():
        cls = classes.get(dotted_name(call.func) or "")
        if cls is None or (ctx.index.enclosing_function(call) or ctx.module) is not scope:
            continue
        for position, arg in enumerate(call.args):
            if arg.star:
                break
            if arg.keyword is not None:
                param: str | None = arg.keyword.value
            else:
                param = cls.init_params[position] if position < cls.init_positional else None
            if param in cls.moved_params:
                out.append((arg.value.value if type(arg.value) is cst.Name else None, arg.value))
    return out


def _imported_loss(ctx: FileContext, site: cst.Call, name: str) -> Violation | None:
    """`criterion = build_criterion(cfg)` of another project module's function that returns a loss
    built with a host class weight (`ProjectView.functions`' "loss:CrossEntropyLoss:weight:
    losses.py:9"), in a scope that moves something to the device but never `criterion`."""
    spelled = dotted_name(site.func)
    place = ctx.project.functions.get(spelled or "", "")
    if not place.startswith("loss:"):
        return None
    loss, keyword, path, line = place[len("loss:") :].split(":")
    moves = _moves_in_scope(ctx, ctx.index.enclosing_function(site) or ctx.module)
    others = [c for receiver, c in moves if receiver != name and not _is_cpu_move(c)]
    if any(receiver == name for receiver, _ in moves) or not others:
        return None
    moved = ctx.code_for(others[0].func.value)  # type: ignore[attr-defined]  # `others` are moves: `x.to(...)`
    message = (
        f"`{spelled}(...)` returns an `nn.{loss}` built with a CPU `{keyword}` tensor ({path}:{line}) and "
        f"`{name}` is never moved, while `{moved}` is: the loss fails on GPU logits; "
        f"use `{name} = {spelled}(...).to(device)`"
    )
    fix = _move_loss(ctx, site, others[0])
    return Violation(rule=LossWeightOffDevice, node=site, message=message, fix=fix)


def _returned_loss(ctx: FileContext, call: cst.Call) -> cst.Call | None:
    """The loss constructor that a function or method of the file returns from its one `return`
    (`def make_criterion(w): return nn.CrossEntropyLoss(weight=w)`), for a call of it."""
    helper = callee(ctx, call)
    if helper is None:
        return None
    returns = [n for n in ctx.index.walk(helper.body) if type(n) is cst.Return]
    value = returns[0].value if len(returns) == 1 else None
    if type(value) is not cst.Call or _is_loss_class(ctx, value) is None:
        return None
    return value


def _loss_name(ctx: FileContext, constructor: cst.Call) -> str:
    """`CrossEntropyLoss` for `nn.CrossEntropyLoss(...)`, however it was imported."""
    return (ctx.qualified_name(constructor.func) or ctx.code_for(constructor.func)).rsplit(".", 1)[-1]


def _move_loss(ctx: FileContext, loss: cst.Call, model_move: cst.Call) -> FixProposal | None:
    """`nn.CrossEntropyLoss(weight=w)` -> `nn.CrossEntropyLoss(weight=w).to(<the model's device>)`:
    loss modules keep `weight`/`pos_weight` as buffers, so moving the module moves them."""
    method = model_move.func.attr.value if type(model_move.func) is cst.Attribute else None
    if method == "cuda" and not model_move.args:
        move = ".cuda()"
    elif (
        method == "to"
        and len(model_move.args) == 1
        and not model_move.args[0].star
        and (model_move.args[0].keyword is None or model_move.args[0].keyword.value == "device")
    ):
        device = ctx.code_for(model_move.args[0].value)
        literal = type(model_move.args[0].value) is cst.SimpleString
        if not literal and not bound_before(ctx, device, loss):
            return None  # the device is defined after the loss: no expression to name there
        move = f".to({device})"
    else:
        return None
    return FixProposal(
        f"Move the loss with the model: `{move}`",
        safe=False,
        replacements=((loss, f"{code_in_place(ctx, loss, loss)}{move}"),),
    )


def _is_cpu_move(call: cst.Call) -> bool:
    if not call.args:
        return False
    first = call.args[0].value
    return type(first) is cst.SimpleString and literal_value(first) == "cpu"
