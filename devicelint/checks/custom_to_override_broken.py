from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.attribute_aliases import aliased_values
from devicelint.analysis.bypassed_movers import bypassed_overrides
from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.custom_movers import copied_as_is, moved_attributes, own_movers
from devicelint.analysis.facts import file_facts
from devicelint.analysis.module_mover_gaps import ModuleMoverGap, module_mover_gaps
from devicelint.analysis.modules import methods, module_classes
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import FACTORIES, move_call
from devicelint.analysis.placement_values import annotation_is_tensor
from devicelint.analysis.training.helpers import callee
from devicelint.context import FileContext
from devicelint.rule_base import FixProposal, Rule, Violation, register

# Overrides that callers chain or assign (`obj = obj.to(device)`): each must return the object.
MOVERS = ("to", "cuda", "cpu")
# `nn.Module.to()` returns `self._apply(fn)`: a module's `_apply` must return the module too.
MODULE_MOVERS = ("_apply",)
# Decorators under which the method is not the object's own working mover.
STUB_DECORATORS = frozenset({"overload", "abstractmethod", "property", "staticmethod", "classmethod"})


@dataclass(frozen=True)
class BrokenMover:
    """A `to`/`cuda`/`cpu`/`_apply` override that does not return the object."""

    cls: cst.ClassDef
    method: cst.FunctionDef
    is_module: bool
    kind: str  # "none", "end" or "inner" (see `_broken_return`)
    returned: cst.Return | None


@register
class CustomToOverrideBroken(Rule):
    """
    ## What it does
    Flags a class's own `to()`, `cuda()` or `cpu()` (and an `nn.Module`'s `_apply()`) that
    returns nothing, that returns a value on some paths but ends with a plain statement
    (falling off its end returns None), or that returns a part of the object
    (`return self.model.to(device)`) instead of the object; and every call in the file that
    uses what such an override returns (`learner = learner.to(device)`). In a class that is not an `nn.Module`, it also flags each
    tensor attribute (set in `__init__`, or declared as a `Tensor` field) that the class's
    own move leaves behind while it moves others: `to()`, `cuda()`, or a method of any name
    that moves two or more attributes in place (`_make_cuda()`, `to_device()`), and also a
    `to()` that returns a new instance and hands it the attribute unmoved
    (`return Masked(self.data.to(device), self.mask)`). In an `nn.Module` (a subclass of a
    torch layer such as `nn.Dropout` included) that overrides neither `_apply` nor `to`, it
    flags a `cuda()` or `cpu()` override that does work of its own besides handing on to
    `super()` or to the module's `to()` (rebuilding a generator, setting a flag, moving a
    plain attribute).

    ## Why it is a bug on a GPU
    `obj = obj.to(device)` is the idiom for tensors and modules alike, and `nn.Module.to()`
    returns the module (through `_apply`). An override without `return` makes that line
    replace the object with `None`, and the next use fails with `'NoneType' object has no
    attribute ...`, often far from the override, or only on the machine that takes the GPU
    branch. A hand-written `to()` that lists the attributes to move and forgets one leaves
    that tensor on the CPU, and the first operation that meets it with a moved one fails with
    `Expected all tensors to be on the same device`. A module's `cuda()` override runs only
    when `.cuda()` is called on that very instance: `module.to(device)`, and a parent
    module's `.cuda()`, move every submodule through `_apply` and never call it, so its work
    (a CUDA generator, a moved plain attribute) is silently skipped.

    ## Example
    ```python
    class Learner(nn.Module):
        def to(self, device):
            self.device = torch.device(device)
            self.model.to(self.device)

    learner = Learner(model).to("cuda")

    class Batch:
        def __init__(self, tokens, mask):
            self.tokens = torch.as_tensor(tokens)
            self.mask = torch.as_tensor(mask)

        def to(self, device):
            self.tokens = self.tokens.to(device)
            return self
    ```

    ## Use instead
    ```python
    class Learner(nn.Module):
        def to(self, device):
            self.device = torch.device(device)
            self.model.to(self.device)
            return self

    class Batch:
        ...
        def to(self, device):
            self.tokens = self.tokens.to(device)
            self.mask = self.mask.to(device)
            return self
    ```

    ## Fix safety
    When the override has no `return` at all and ends with a simple statement, the fix adds
    `return self` at its end. It is safe on an `nn.Module`, whose `to()` contract is to return
    the module, and unsafe elsewhere, where the class may have meant to return a moved copy.
    An override that returns on some paths or returns a part of the object, and a forgotten
    attribute, have no automatic fix.

    ## Known limits
    Only overrides defined in the class itself are read; stubs (a body of `pass`, `...`,
    a docstring or a `raise`), overrides that move nothing themselves (that only raise through
    a helper or record the device), `@overload`/`@abstractmethod` methods and generators are
    not reported, nor is a plain class whose override is annotated `-> None` (it moves in
    place by design, and a type checker catches `obj = obj.to(device)`); an override that only
    records the device and returns nothing, and a plain class's override that returns nothing
    while the file calls it on the class's instances as a statement (`reader.cuda()`: an
    in-place mover, used as one), are reported only where the file uses what they return. The
    call that uses the `None` is found when its receiver is the constructor call, a name bound
    to one in the same function, a parameter annotated with the class, or a `self.<attr>` that
    the same class sets to one; the class may also inherit the override from a class of the
    file.
    Forgotten attributes are looked for in classes that are not `nn.Module`s, whose mover
    moves at least one `self.<attr>` explicitly and never reaches attributes generically
    (`vars(self)`, `getattr`, `dataclasses.fields`); a tensor attribute is one the analysis
    proves is a tensor, one made by a torch factory, or one annotated `Tensor`. In an
    `nn.Module` (whose registered tensors `nn.Module.to()` moves), only where its own
    `_apply`/`to`/`cuda` moves plain attributes by hand (`self.train_x = fn(self.train_x)`)
    and another plain attribute, assigned in any method, holds an instance of a class of the
    file that keeps tensors (a prediction cache; a plain tensor attribute left behind is
    DL102's); resetting it in the mover (`self.cache = None`) counts as handling it.
    """

    code = "DL112"
    name = "custom-to-override-broken"
    summary = "A class's own `to()`/`cuda()` returns None or forgets some of its tensors."
    message = "{problem}; {advice}"
    fix_availability = "sometimes"
    tokens = ("def to", "def cuda", "def cpu", "def _apply", ".to(", ".cuda(")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        modules = module_classes(ctx)
        broken: dict[str, BrokenMover] = {}
        # overrides that only record the device and return nothing: reported where the file uses
        # what they return (`data = data.to(device)` is None), never on their own
        recorders: dict[str, BrokenMover] = {}
        for cls in ctx.index.of_type(cst.ClassDef):
            is_module = cls.name.value in modules
            own = methods(cls)
            for name in (*MOVERS, *MODULE_MOVERS):
                method = own.get(name)
                if method is None or (name in MODULE_MOVERS and not is_module):
                    continue
                if not is_module and _annotated_none(method):
                    continue  # a plain class that declares `-> None` moves in place by design
                broken_return = _broken_return(ctx, method)
                if broken_return is None:
                    if name in MOVERS and _only_records(ctx, method):
                        recorders.setdefault(
                            f"{cls.name.value}.{name}", BrokenMover(cls, method, is_module, "none", None)
                        )
                    continue
                kind, ret = broken_return
                broken.setdefault(f"{cls.name.value}.{name}", BrokenMover(cls, method, is_module, kind, ret))
                if not is_module and kind == "none" and _called_in_place(ctx, cls.name.value, name):
                    continue  # reported where a call uses the None, if one does
                yield self._override(ctx, cls, method, is_module, kind, ret)
            if not is_module:
                yield from self._forgotten(ctx, cls, own)
            else:
                for gap in module_mover_gaps(ctx, cls, own):
                    yield self._module_gap(gap)
                for method in bypassed_overrides(ctx, own):
                    if f"{cls.name.value}.{method.name.value}" not in broken:
                        yield self._bypassed(cls, method)
        if broken or recorders:
            yield from self._uses(ctx, {**recorders, **broken})

    def _override(
        self,
        ctx: FileContext,
        cls: cst.ClassDef,
        method: cst.FunctionDef,
        is_module: bool,
        kind: str,
        ret: cst.Return | None,
    ) -> Violation:
        name = method.name.value
        where = f"`{cls.name.value}.{name}()`"
        gets = "None" if kind != "inner" else f"`{ctx.code_for(ret.value)}`"  # type: ignore[union-attr, arg-type]  # "inner": a `return <value>`
        returns = {
            "none": "returns None",
            "end": "returns None when it reaches its end",
            "inner": f"returns {gets}, not the object",
        }[kind]
        if is_module and name == "_apply":
            problem = f"{where} {returns}, but `nn.Module.to()`, `.cuda()` and `.half()` return what `_apply` returns"
            advice = "end it with `return self` (or `return super()._apply(fn)`)"
        elif is_module:
            problem = (
                f"{where} {returns}, but `nn.Module.{name}()` returns the module, so "
                f"`model = model.{name}(...)` and `model.{name}(...).eval()` get {gets}"
            )
            advice = "end it with `return self`" if kind != "inner" else "return `self`"
        else:
            problem = f"{where} {returns}, so the usual `obj = obj.{name}(...)` replaces the object with {gets}"
            advice = (
                "end it with `return self` (or return the moved copy)"
                if kind != "inner"
                else "return `self` (or a moved copy of the object)"
            )
        fix = _return_self_fix(ctx, method, safe=is_module) if kind == "none" else None
        return self.violation(ret if ret is not None else method.name, fix=fix, problem=problem, advice=advice)

    def _uses(self, ctx: FileContext, broken: dict[str, BrokenMover]) -> Iterator[Violation]:
        """Calls whose result is used, on an object of a class whose override (its own, or the
        one it inherits from a class of the file) returns None."""
        classes = {cls.name.value: cls for cls in ctx.index.of_type(cst.ClassDef)}
        for call in ctx.index.of_type(cst.Call):
            func = call.func
            if type(func) is not cst.Attribute or func.attr.value not in (*MOVERS, *MODULE_MOVERS):
                continue
            if type(ctx.index.parent(call)) is cst.Expr:
                continue  # a statement: the None is dropped, the in-place move works
            cls_name = _class_of(ctx, func.value)
            entry = _inherited(classes, broken, cls_name, func.attr.value) if cls_name else None
            if entry is None:
                continue
            call_text = ctx.code_for(call)
            override = f"`{entry.cls.name.value}.{func.attr.value}()`"
            if entry.kind == "inner":
                problem = (
                    f"`{call_text}` is `{ctx.code_for(entry.returned.value)}`, not the object: {override} returns that"  # type: ignore[union-attr, arg-type]  # "inner": a `return <value>`
                )
            elif entry.kind == "end":
                problem = f"`{call_text}` may be None: {override} falls off its end without `return`"
            else:
                problem = f"`{call_text}` is None: {override} has no `return`"
            yield self.violation(
                call, problem=problem, advice=f"return `self` from {override}, or call it as a statement"
            )

    def _bypassed(self, cls: cst.ClassDef, method: cst.FunctionDef) -> Violation:
        name = method.name.value
        return self.violation(
            method.name,
            problem=(
                f"`{cls.name.value}.{name}()` does work of its own that `module.to(device)` and a parent "
                f"module's `.{name}()` never run: `nn.Module` moves itself and every submodule through "
                f"`_apply`, and calls no submodule's `{name}()`"
            ),
            advice=(
                "do that work in an `_apply(self, fn, *args, **kwargs)` override that calls `super()._apply`, "
                "or where it is used, from the device of the tensors it meets"
            ),
        )

    def _module_gap(self, gap: ModuleMoverGap) -> Violation:
        where = f"{gap.cls_name}.{gap.mover}()"
        return self.violation(
            gap.node,
            problem=(
                f"`self.{gap.attr}` is a plain attribute that holds tensors, and `{where}` moves the "
                f"module's plain attributes by hand (`self.{gap.moved}`) but not this one, so it stays "
                "on the device it was made on"
            ),
            advice=f"move `self.{gap.attr}` in `{gap.mover}()` as well, or reset it there so it is rebuilt",
        )

    def _forgotten(self, ctx: FileContext, cls: cst.ClassDef, own: dict[str, cst.FunctionDef]) -> Iterator[Violation]:
        """Tensor attributes that the plain class's own `to`/`cuda` does not move."""
        movers = [own[name] for name in own_movers(ctx, own)]
        if not movers:
            return
        tensors = _tensor_attributes(ctx, cls, own)
        if not tensors:
            return
        for mover in movers:
            touched = moved_attributes(ctx, cls, own, [mover.name.value])
            if touched is None or not _moves_an_attribute(ctx, mover):
                continue
            moved = sorted(a for a in touched if a in tensors)
            if not moved:
                continue
            copies = copied_as_is(ctx, cls, own, mover.name.value)
            for attr, node in tensors.items():
                if attr in touched:
                    continue
                where = f"{cls.name.value}.{mover.name.value}()"
                problem = (
                    f"`self.{attr}` holds a tensor that `{where}` does not move (it moves `self.{moved[0]}`), "
                    "so it stays on the CPU"
                    if attr not in copies
                    else f"`{where}` hands `self.{attr}` unmoved to the copy it builds (it moves "
                    f"`self.{moved[0]}`), so the copy keeps that tensor on the CPU"
                )
                yield self.violation(
                    copies.get(attr, node),
                    problem=problem,
                    advice=f"move `self.{attr}` in `{mover.name.value}()` as well",
                )
            return  # one override is enough to list the forgotten ones


def _broken_return(ctx: FileContext, method: cst.FunctionDef) -> tuple[str, cst.Return | None] | None:
    """How an override breaks `obj = obj.to(device)`: ("none", None) when it never returns a
    value, ("end", None) when it returns one on some paths but its last statement falls off the
    end, ("inner", ret) when it returns a part of the object (`return self.model`) instead of
    the object. None when it returns the object, a copy or what
    `super()` returns, and for stubs and overrides that move nothing."""
    for decorator in method.decorators:
        target = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
        last = target.attr.value if type(target) is cst.Attribute else target.value if type(target) is cst.Name else ""
        if last in STUB_DECORATORS or last.endswith("setter"):
            return None
    if _is_stub(method) or not _moves_something(ctx, method):
        return None
    returns: list[cst.Return] = []
    for node in ctx.index.walk(method.body):
        if type(node) in (cst.Yield, cst.Await) and ctx.index.enclosing_function(node) is method:
            return None
        if type(node) is cst.Return and ctx.index.enclosing_function(node) is method:
            # what a container read gives back is what is returned (`out, _ = box; return out`)
            value = through_containers(ctx, node.value) if node.value is not None else None
            if value is not None and not (type(value) is cst.Name and value.value == "None"):
                returns.append(node)
    if not returns:
        return "none", None
    for ret in returns:
        if _returns_a_part(through_containers(ctx, ret.value)):  # type: ignore[arg-type]  # `returns` holds `return <value>` only
            return "inner", ret
    if _falls_off_the_end(method):
        return "end", None
    return None


def _inherited(
    classes: dict[str, cst.ClassDef], broken: dict[str, BrokenMover], cls_name: str, name: str
) -> BrokenMover | None:
    """The broken override `cls_name` objects run for `name`: the class's own, or, where the class
    does not define `name`, the one of its nearest base class in the file that does."""
    seen: set[str] = set()
    pending = [cls_name]
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        entry = broken.get(f"{current}.{name}")
        if entry is not None:
            return entry
        cls = classes.get(current)
        if cls is None or name in methods(cls):
            continue  # a class outside the file, or one whose own override works
        pending.extend(base.value.value for base in cls.bases if type(base.value) is cst.Name)
    return None


def _only_records(ctx: FileContext, method: cst.FunctionDef) -> bool:
    """An override that moves nothing and returns nothing but stores what it is given on the
    object (`self.device = device`): the move happens later, elsewhere, so the override itself is
    fine, but what it returns is None."""
    if _is_stub(method) or method.decorators:
        return False
    params = {p.name.value for p in method.params.params[1:]}
    records = False
    for node in ctx.index.walk(method.body):
        if type(node) in (cst.Return, cst.Yield, cst.Await) and ctx.index.enclosing_function(node) is method:
            return False
        if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value in params:
            records = records or any(self_attribute(t.target) is not None for t in node.targets)
    return records


def _returns_a_part(value: cst.BaseExpression) -> bool:
    """`self.model`, `self.model.to(device)`: a part of the object, not the object nor a copy of
    it. (A returned parameter is left alone: `to(self, x, dtype)` helpers convert their argument.)"""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MOVERS:
        value = value.func.value
    return self_attribute(value) is not None


def _falls_off_the_end(method: cst.FunctionDef) -> bool:
    """The body ends with a plain statement (no `return`/`raise`): the path that reaches it
    returns None."""
    body = method.body.body if type(method.body) is cst.IndentedBlock else ()
    if not body or type(body[-1]) is not cst.SimpleStatementLine:
        return False
    return not any(type(small) in (cst.Return, cst.Raise) for small in body[-1].body)


def _moves_something(ctx: FileContext, method: cst.FunctionDef) -> bool:
    """The override does a move (`self.model.to(d)`, `super()._apply(fn)`, `fn(self.t)`): not a
    placeholder that only raises through a helper (`_raise_not_supported(...)`)."""
    params = {p.name.value for p in method.params.params[1:]}
    for node in ctx.index.walk(method.body):
        if type(node) is not cst.Call:
            continue
        func = node.func
        if move_call(node) is not None or (type(func) is cst.Attribute and func.attr.value in MODULE_MOVERS):
            return True
        if type(func) is cst.Name and func.value in params:
            return True  # `_apply(self, fn)` calling `fn(...)`
    return False


def _annotated_none(method: cst.FunctionDef) -> bool:
    returns = method.returns.annotation if method.returns is not None else None
    return type(returns) is cst.Name and returns.value == "None"


def _is_stub(method: cst.FunctionDef) -> bool:
    """`pass`, `...`, a docstring or a `raise`: an interface, not an implementation."""
    body = method.body.body if type(method.body) is cst.IndentedBlock else (method.body,)
    small: list[cst.CSTNode] = []
    for statement in body:
        if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        small.extend(statement.body)
    return all(
        type(s) in (cst.Pass, cst.Raise)
        or (type(s) is cst.Expr and type(s.value) in (cst.Ellipsis, cst.SimpleString, cst.ConcatenatedString))
        for s in small
    )


def _return_self_fix(ctx: FileContext, method: cst.FunctionDef, safe: bool) -> FixProposal | None:
    """Append `return self` after the last simple statement of a method with no `return` at all."""
    if type(method.body) is not cst.IndentedBlock or not method.body.body:
        return None
    if any(type(n) is cst.Return for n in ctx.index.walk(method.body)):
        return None  # bare returns elsewhere would still return None: not a one-edit fix
    last = method.body.body[-1]
    if type(last) is not cst.SimpleStatementLine or last.trailing_whitespace.comment is not None:
        return None
    indent = _indentation(ctx, method.body)
    if indent is None:
        return None
    tail = last.body[-1]
    return FixProposal(
        description="Add `return self`",
        safe=safe,
        replacements=((tail, f"{ctx.code_for(tail).rstrip().rstrip(';')}\n{indent}return self"),),
    )


def _indentation(ctx: FileContext, block: cst.IndentedBlock) -> str | None:
    """The absolute indentation of the statements in `block`."""
    parts = []
    for node in (block, *ctx.index.ancestors(block)):
        if type(node) is cst.IndentedBlock:
            parts.append(node.indent if node.indent is not None else ctx.module.default_indent)
    text = "".join(reversed(parts))
    return text if text.strip() == "" else None


def _called_in_place(ctx: FileContext, cls_name: str, name: str) -> bool:
    """Whether the file moves instances of the plain class with `obj.<name>(...)` as a
    statement (`reader.cuda()`): it uses the mover in place, as designed."""
    return any(
        type(call.func) is cst.Attribute
        and call.func.attr.value == name
        and type(ctx.index.parent(call)) is cst.Expr
        and _class_of(ctx, call.func.value) == cls_name
        for call in ctx.index.of_type(cst.Call)
    )


def _class_of(ctx: FileContext, receiver: cst.BaseExpression) -> str | None:
    """The class of `receiver` when the code shows it: `Cls(...)`, a name bound to `Cls(...)` in
    the same function, or a parameter annotated `Cls`."""
    if type(receiver) is cst.Call and type(receiver.func) is cst.Name:
        return receiver.func.value
    attr = self_attribute(receiver)
    if attr is not None:  # `self.learner = Learner(...)` in a method of the same class
        cls = ctx.index.enclosing_class(receiver)
        for node in ctx.index.walk(cls) if cls is not None else ():
            if (
                type(node) is cst.Assign
                and type(node.value) is cst.Call
                and type(node.value.func) is cst.Name
                and any(self_attribute(t.target) == attr for t in node.targets)
            ):
                return node.value.func.value
        return None
    if type(receiver) is not cst.Name:
        return None
    scope: cst.CSTNode = ctx.index.enclosing_function(receiver) or ctx.module
    found: str | None = None
    for node in ctx.index.walk(scope):
        if type(node) in (cst.FunctionDef, cst.ClassDef) and node is not scope:
            continue
        if type(node) is cst.Param and node.name.value == receiver.value and node.annotation is not None:
            annotation = node.annotation.annotation
            if type(annotation) is cst.Name:
                found = annotation.value
        if (
            type(node) is cst.Assign
            and type(node.value) is cst.Call
            and type(node.value.func) is cst.Name
            and any(type(t.target) is cst.Name and t.target.value == receiver.value for t in node.targets)
            and ctx.index.enclosing_function(node) is (scope if scope is not ctx.module else None)
        ):
            found = node.value.func.value
    return found


def _tensor_attributes(ctx: FileContext, cls: cst.ClassDef, own: dict[str, cst.FunctionDef]) -> dict[str, cst.CSTNode]:
    """Attribute -> where it is set, for the tensors a plain class holds."""
    found: dict[str, cst.CSTNode] = {}
    body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
    for statement in body:  # `x: torch.Tensor` fields of a dataclass-like holder
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                if (
                    type(small) is cst.AnnAssign
                    and type(small.target) is cst.Name
                    and annotation_is_tensor(small.annotation, ctx)
                ):
                    found.setdefault(small.target.value, small.target)
    init = own.get("__init__")
    if init is None:
        return found
    params = {p.name.value: p for p in (*init.params.params, *init.params.kwonly_params)}
    facts = file_facts(ctx)
    for node in ctx.index.walk(init.body):
        if type(node) is cst.Assign and len(node.targets) == 1:
            target, value, annotation = node.targets[0].target, node.value, None
        elif type(node) is cst.AnnAssign and node.value is not None:
            target, value, annotation = node.target, node.value, node.annotation
        else:
            continue
        attr = self_attribute(target)
        if attr is None or attr in found:
            continue
        param = params.get(value.value) if type(value) is cst.Name else None
        # `self.rewards = self._kept`: what the class's methods put on `self._kept`
        sources = [source for source, _ in aliased_values(ctx, value)] or [value]
        if (
            any(
                facts.value(source).is_tensor or _factory_call(ctx, source) or _returns_new_tensors(ctx, source)
                for source in sources
            )
            or annotation_is_tensor(annotation, ctx)
            or (param is not None and annotation_is_tensor(param.annotation, ctx))
        ):
            found[attr] = target
    return found


def _factory_call(ctx: FileContext, value: cst.BaseExpression) -> bool:
    qualified = ctx.qualified_name(value) if type(value) is cst.Call else None
    return (
        qualified is not None
        and qualified.startswith("torch.")
        and qualified.count(".") == 1
        and qualified[6:] in FACTORIES
    )


def _returns_new_tensors(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """A call of a function or method of the file whose every `return` makes a tensor with a
    torch factory (`self._as_rewards(r)` returning `torch.tensor(r, dtype=...)`)."""
    helper = callee(ctx, value) if type(value) is cst.Call else None
    if helper is None:
        return False
    returns = [n for n in ctx.index.walk(helper.body) if type(n) is cst.Return]
    return bool(returns) and all(
        r.value is not None and ctx.index.enclosing_function(r) is helper and _factory_call(ctx, r.value)
        for r in returns
    )


def _moves_an_attribute(ctx: FileContext, mover: cst.FunctionDef) -> bool:
    """The override moves at least one `self.<attr>` by name (it lists what it moves)."""
    for node in ctx.index.walk(mover.body):
        if move_call(node) is not None and self_attribute(node.func.value) is not None:  # type: ignore[attr-defined]  # move_call() matched `x.<method>(...)`
            return True
    return False
