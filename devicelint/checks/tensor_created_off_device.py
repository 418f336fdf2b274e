from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.container_reads import holders
from devicelint.analysis.device_in_scope import bound_before, device_in_scope
from devicelint.analysis.facts import Meeting, file_facts
from devicelint.analysis.imported_helpers import argument_for, imported_calls, imported_method_calls, moved_model
from devicelint.analysis.kept_devices import kept_cpu_device
from devicelint.analysis.model_events import statement_of
from devicelint.analysis.optimizer_state_stores import host_state_stores
from devicelint.analysis.placement_facts import DEVICE, FACTORIES, FOLLOWS, LIKE_FACTORIES, MODULE
from devicelint.analysis.placement_values import cpu_only_script
from devicelint.analysis.training.reads import computed_from
from devicelint.analysis.vocabulary import LEGACY_CONSTRUCTORS
from devicelint.context import FileContext
from devicelint.fix_text import keyword_argument, with_argument
from devicelint.rule_base import FixProposal, Rule, Violation, register

# Factories that take no `device=`: the tensor has to be moved.
NO_DEVICE_ARGUMENT = LEGACY_CONSTRUCTORS | {"from_numpy"}


@register
class TensorCreatedOffDevice(Rule):
    """
    ## What it does
    Flags a tensor created by a torch factory without `device=` (`torch.arange(n)`,
    `torch.ones(n, n).tril()`, `torch.zeros(layers, batch, hidden)`, `torch.eye(n)`,
    `torch.tensor(0.)` used as an accumulator...) in code that runs on the device, when that
    tensor then meets a device tensor in an operation, is passed to a module, is written into a
    device tensor through an index tensor or list (`out[rows] = t`, an `index_put_`), or is
    returned from `forward` (unless `forward` itself moves a copy of it, `ids[:, 0].to(x.device)`:
    then the host tensor is kept there knowingly). A write through integers, slices, `...` and `None` alone
    (`out[0, :2] = t`) fills a view with `copy_`, which copies across devices, and is fine.
    A factory given `device=self.device` outside `__init__` counts as one without `device=` when
    that attribute is the device the constructor stored (`self.device = torch.device(device)`),
    the CPU at every construction of the class in the file, in a class the file moves after
    building it: moving the module does not update the attribute.
    Device code is a module's `forward` path and the helpers it calls (methods, static
    methods, module-level functions, `self(...)` and the `forward` of submodules defined in the
    file, also a `forward` or method a submodule inherits from a module class of the file),
    Lightning's `training_step`/`validation_step`/`test_step`, loss modules, a function
    taking tensors, trainer classes that keep `self.device`, and a training or evaluation loop
    that moves its model or batches. The CPU tensor is followed through casts, arithmetic
    (reflected operators too), comparisons, comprehensions, lists built with `append`, and
    `torch.stack`/`torch.cat`/`torch.meshgrid`, and across calls a few levels deep. A tensor that
    `torch.stack`/`torch.cat` build from host copies (`x.cpu() == j`) is a CPU tensor made there.
    With the project index, a model moved here and handed to a function of another module that
    runs it (`model(x)`, `model.predict(x)`) on a tensor it builds with a factory, moving
    nothing, is reported at the call, and so is a device tensor handed to a method of a plain
    class of another module that adds it in place into a host tensor the class keeps (a metric
    bank's `self.correct = torch.zeros(n)`).
    In an optimizer class of the file, a factory without `device=` whose tensor is stored in the
    per-parameter state (`self.state[p]["exp_avg"] = torch.zeros(p.shape)`, through `state =
    self.state[p]`, or by a helper with a computed key, `self.state[self._param][name]`) is
    reported where it is made: `step()` updates that state with the parameter and its gradient,
    wherever the model is (a 0-dim step count, an explicit `device=` or a pinned buffer is not).

    ## Why it is a bug on a GPU
    Factories create tensors on the CPU unless told otherwise. On a CPU-only test run the code
    works; on a GPU it fails with `RuntimeError: Expected all tensors to be on the same device,
    but found at least two devices, cuda:0 and cpu!`, often an hour into the job, at the first
    batch that takes the branch that creates the tensor.

    ## Example
    ```python
    class Attention(nn.Module):
        def forward(self, x):
            n = x.size(1)
            mask = torch.ones(n, n).tril()
            scores = self.qk(x)
            return scores.masked_fill(mask == 0, float("-inf"))
    ```

    ## Use instead
    ```python
    class Attention(nn.Module):
        def forward(self, x):
            n = x.size(1)
            mask = torch.ones(n, n, device=x.device).tril()
            scores = self.qk(x)
            return scores.masked_fill(mask == 0, float("-inf"))
    ```
    A constant tensor that does not depend on the input can also be made once in `__init__`
    and registered with `self.register_buffer(...)`, so that `model.to(device)` moves it.

    ## Fix safety
    The fix adds `device=<expr>` to the factory, naming the device the message names: the
    device of the tensor it meets (`x.device`) when that tensor is bound before the factory, a
    tensor parameter's `.device`, `self.device` or `next(self.parameters()).device` in a module,
    else the device the surrounding code moves things to (`device`, `args.device`). It is unsafe:
    a random factory then draws from the device's generator (seeded numbers change) and the
    tensor's dtype rules stay as they were. No fix for constructors without a `device`
    parameter (`torch.from_numpy`, `torch.FloatTensor`), for calls with `**kwargs` or a
    `device` already, or when no device expression is valid where the factory is written.

    ## Known limits
    The analysis is per file: it follows calls to methods and functions of the same file up to
    three levels deep, and a submodule's `forward` when its class is defined in the file. A
    tensor whose placement it cannot prove (built with `torch.as_tensor` from a variable that
    may be a tensor, passed through an unknown function, created under a device check such as `if x.is_cuda:`, or in a
    file that makes CUDA the default device) is not reported; `torch.tensor(x)` of data the
    file does not show is a CPU tensor (PyTorch warns when `x` is a tensor), 0-dim where `x`
    reads as one number (`x.shape[0]`, `len(...)`, a parameter annotated `float`). Code that runs while the model is
    built (`__init__` and helpers called only from it) is never device code; nor are plain
    functions of a data-pipeline module, named so (`transforms.py`, `collate.py`) or held in a
    data folder (`datasets/`, `data/`, `loader/`, `transforms/`), which prepare samples in loader workers
    on the CPU, or of a test module, which get the tensors the test builds (unless a caller
    in the file passes device tensors). 0-dim CPU tensors
    (`torch.tensor(2.0)`) are allowed by PyTorch in elementwise operations with device tensors
    and are only reported as in-place accumulators or where one branch replaces them with a
    device tensor (their device then depends on the path). Indexing (or index-assigning) a
    device tensor with a CPU index tensor or boolean mask is allowed (PyTorch moves the index)
    and not reported; neither are CTC targets and lengths or sequence lengths handed to a
    module, which PyTorch takes on the CPU. Factories inside `with torch.device(...)` are made
    on that device. A whole program in one file that never names an accelerator anywhere (a CPU-only
    example with a `__main__` guard, a notebook, a module whose top level runs its own
    functions or a loop) is not device code.
    """

    code = "DL101"
    name = "tensor-created-off-device"
    summary = "A tensor created without `device=` in device code meets device tensors."
    message = "`{factory}(...)` creates a CPU tensor in `{function}` that {how}; {advice}{hint}"
    fix_availability = "unsafe"
    tokens = ("torch",)
    reads_helpers = True

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if cpu_only_script(ctx):
            return
        reported: set[int] = set()
        for violation in self._meetings(ctx):
            reported.add(id(statement_of(ctx, violation.node)))
            yield violation
        for store in host_state_stores(ctx):
            if id(statement_of(ctx, store.factory)) in reported:
                continue
            yield self.violation(
                store.factory,
                factory=ctx.code_for(store.factory.func),
                function=store.function.name.value,
                how=(
                    f"is kept as optimizer state (`{store.entry}`), which `step()` updates with "
                    f"`{store.parameter}` and its gradient on their device"
                ),
                advice=f"pass `device={store.parameter}.device`",
                hint="",
            )
        yield from self._handed_to_helpers(ctx)
        yield from self._mixed_with_imported_constants(ctx)
        yield from self._fed_to_imported_accumulators(ctx)

    def _handed_to_helpers(self, ctx: FileContext) -> Iterator[Violation]:
        """A model moved here handed to a function of another project module that runs it on a
        tensor it builds on the host, moving nothing: reported at the model argument, the only
        place this file can see, naming the helper's line."""
        for _, helper, bound in imported_calls(ctx):
            for model_param, factory, argument, line in helper.uses.host_inputs:
                model = bound.get(model_param)
                if model is None or not moved_model(ctx, model):
                    continue
                yield self.violation(
                    model,
                    factory=factory,
                    function=helper.qualified,
                    how=(
                        f"is fed as `{argument}` to `{model_param}` at {helper.path}:{line}, and "
                        f"`{ctx.code_for(model)}`, handed in here, was moved to the device"
                    ),
                    advice=f"move it to `next({model_param}.parameters()).device` there, or hand the helper a device",
                    hint="",
                )

    def _mixed_with_imported_constants(self, ctx: FileContext) -> Iterator[Violation]:
        """A device tensor handed to a function of another project module that combines it with
        a tensor that module builds on the host at import (`normalize(images)` computing
        `(images - MEAN) / STD`): reported at the argument."""
        facts = file_facts(ctx)
        for _, helper, bound in imported_calls(ctx):
            for param, name, factory, line in helper.host_mixes:
                arg = bound.get(param)
                if arg is None or not facts.is_device_tensor(arg, certain=True):
                    continue
                yield self.violation(
                    arg,
                    factory=factory,
                    function=f"{helper.qualified.rsplit('.', 1)[0]}` as `{name}",
                    how=(
                        f"`{helper.qualified}` combines with its `{param}` ({helper.path}:{line}), but "
                        f"`{ctx.code_for(arg)}` handed in here is on the device"
                    ),
                    advice=f"move `{name}` where it is used there (`.to({param}.device)`)",
                    hint="",
                )
                break

    def _fed_to_imported_accumulators(self, ctx: FileContext) -> Iterator[Violation]:
        """A device tensor handed to a method of a plain class of another project module that adds
        it in place into a host tensor the class built (`meter.update(logits.argmax(1), y)` with
        `RunningAccuracy` keeping `self.correct = torch.zeros(n)`): reported at the argument."""
        facts = file_facts(ctx)
        for call, cls, called in imported_method_calls(ctx):
            reported: set[str] = set()
            for method, params, param, attr, factory, line in cls.host_updates:
                if method != called or attr in reported:
                    continue
                arg = argument_for(call, params, param)
                if arg is None or not facts.is_device_tensor(arg, certain=True):
                    continue
                reported.add(attr)
                yield self.violation(
                    arg,
                    factory=factory,
                    function=cls.qualified,
                    how=(
                        f"`{method}` adds its `{param}` into in place (`self.{attr}`, {cls.path}:{line}), but "
                        f"`{ctx.code_for(arg)}` handed in here is on the device"
                    ),
                    advice=f"build `self.{attr}` on the device it is fed, or hand it `{ctx.code_for(arg)}.cpu()`",
                    hint="",
                )

    def _meetings(self, ctx: FileContext) -> Iterator[Violation]:
        reported: set[int] = set()
        for meeting in file_facts(ctx).meetings:
            cpu = meeting.cpu
            if not cpu.from_factory or cpu.origin is None or meeting.how == "weight":
                continue  # a loss's class weight is DL106's
            if _scalar_only_in_arithmetic(ctx, meeting):
                continue
            # One finding per statement: `h = (torch.zeros(...), torch.zeros(...))` is one fix.
            statement = statement_of(ctx, cpu.origin)
            if id(statement) in reported:
                continue
            reported.add(id(statement))
            yield self.violation(cpu.origin, fix=_pass_device(ctx, meeting), **_describe(ctx, meeting))


def _scalar_only_in_arithmetic(ctx: FileContext, meeting: Meeting) -> bool:
    """`aux = loss.mean() if training else torch.tensor(0.0)` then only `w * aux`: a 0-dim CPU
    tensor mixes with tensors on any device in an operator, so a placeholder that is on the CPU on
    one path and on the device on the other is fine where every read of it is an operand. Where
    it is also handed on (`self.log("kl", kl)`, appended, stacked), the values collected from
    different steps sit on different devices, which is the bug reported."""
    cpu = meeting.cpu
    origin = cpu.origin
    if not (cpu.scalar and cpu.conflict) or meeting.how != "op" or type(meeting.node) is not cst.BinaryOperation:
        return False
    assert origin is not None
    node: cst.CSTNode = origin
    parent = ctx.index.parent(node)
    while type(parent) is cst.IfExp and node is not parent.test:
        node, parent = parent, ctx.index.parent(parent)
    function = ctx.index.enclosing_function(origin)
    if function is None:
        return False
    if type(parent) is cst.Assign and len(parent.targets) == 1 and type(parent.targets[0].target) is cst.Name:
        return _only_operands(ctx, function, parent.targets[0].target.value)
    # put in a container and read back (`box = [aux]; a = box[0]`): every name it comes back in
    # is read only as an operand, and the container only to hand it to them
    held = holders(ctx, node)
    built = ctx.index.enclosing(node, cst.Assign)
    if not held or built is None or any(type(h) is not cst.Name for h in held):
        return False
    readers = {id(ctx.index.enclosing(h, cst.Assign)) for h in held}
    for target in built.targets:
        if type(target.target) is not cst.Name:
            return False
        for read in _reads(ctx, function, target.target.value):
            if id(ctx.index.enclosing(read, cst.Assign)) not in readers:
                return False
    return all(_only_operands(ctx, function, h.value) for h in held)  # type: ignore[attr-defined]  # each a Name


def _reads(ctx: FileContext, function: cst.FunctionDef, name: str) -> Iterator[cst.Name]:
    """The reads of a local name in `function` (not another name spelled the same: an
    attribute, a keyword)."""
    for read in ctx.index.within(function, cst.Name):
        if read.value != name or ctx.index.in_binding_target(read):
            continue
        holder = ctx.index.parent(read)
        if type(holder) is cst.Attribute and holder.attr is read or type(holder) is cst.Arg and holder.keyword is read:
            continue  # `self.aux(...)`, `f(aux=...)`: another name spelled the same
        yield read


def _only_operands(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """Every read of the local `name` is an operand of an operator."""
    return all(type(ctx.index.parent(read)) is cst.BinaryOperation for read in _reads(ctx, function, name))


def _kept_device(ctx: FileContext, origin: cst.CSTNode) -> str | None:
    """`self.device` for a factory whose `device=self.device` is the constructor's CPU snapshot."""
    if type(origin) is not cst.Call:
        return None
    device = next((a.value for a in origin.args if a.keyword is not None and a.keyword.value == "device"), None)
    method = ctx.index.enclosing_function(origin)
    if device is None or method is None or not kept_cpu_device(ctx, device, method):
        return None
    return ctx.code_for(device)


def _describe(ctx: FileContext, meeting: Meeting) -> dict[str, str]:
    origin = meeting.cpu.origin
    assert origin is not None
    function = ctx.index.enclosing_function(origin)
    function_name = function.name.value if function is not None else "module code"
    cls = ctx.index.enclosing_class(origin)
    device = _device_expression(ctx, meeting, function) or "device"
    hint = ""
    if (
        cls is not None
        and meeting.device.where == FOLLOWS
        and type(origin) is cst.Call
        and _constant_arguments(ctx, origin)
    ):
        hint = " or register it as a buffer in `__init__`"
    factory = meeting.cpu.factory or "torch.tensor"
    imported = (
        ctx.project.host_constants.get(ctx.code_for(origin)) if type(origin) in (cst.Name, cst.Attribute) else None
    )
    if imported is not None:
        # a tensor another module builds on the host at import, read here
        _, path, line = imported
        spelled = ctx.code_for(origin)
        user = ctx.code_for(meeting.device_node) if meeting.device_node is not None else None
        where = (
            f"`.to({user}.device)`" if user is not None and type(meeting.device_node) is cst.Name else "`.to(device)`"
        )
        return {
            "factory": factory,
            "function": f"{path}:{line}` at import, read here as `{spelled}",
            "how": _how(ctx, meeting),
            "advice": f"move it where it is used ({where}), or register it as a buffer of the module that reads it",
            "hint": "",
        }
    elsewhere = function is None or (
        function.name.value == "__init__" and ctx.index.enclosing_function(meeting.node) is not function
    )
    if elsewhere and meeting.device_node is not None:
        # a constant built at import, or kept by an instance's `__init__`, read where device
        # tensors are: move it there (the device is named where it is used, not where it is built)
        used = ctx.code_for(meeting.device_node)
        advice = (
            f"move it where it is used (`.to({used}.device)`)"
            if type(meeting.device_node) in (cst.Name, cst.Attribute)
            else f"move it where it is used, to the device of `{used if len(used) <= 40 else used[:37] + '...'}`"
        )
    elif not _takes_device(factory):
        advice = f"move it with `.to({device})`"
    elif (kept := _kept_device(ctx, origin)) is not None:
        instead = f" (`device={device}`)" if device != kept else ""
        advice = (
            f"`device={kept}` is the device the constructor stored, which moving the module does not "
            f"update: take the device from an input{instead}"
        )
    else:
        advice = f"pass `device={device}`"
    return {
        "factory": factory,
        "function": function_name,
        "how": _how(ctx, meeting),
        "advice": advice,
        "hint": hint,
    }


def _takes_device(factory: str) -> bool:
    """Whether the function that made the CPU tensor takes `device=`: factories do; legacy
    constructors, `from_numpy`, and `torch.stack`/`torch.cat` of host copies do not."""
    short = factory.rsplit(".", 1)[-1]
    return short not in NO_DEVICE_ARGUMENT and (short in FACTORIES or short in LIKE_FACTORIES)


def _pass_device(ctx: FileContext, meeting: Meeting) -> FixProposal | None:
    origin = meeting.cpu.origin
    factory = meeting.cpu.factory or ""
    if type(origin) is not cst.Call or not _takes_device(factory):
        return None
    if any(arg.star for arg in origin.args) or any(
        arg.keyword is not None and arg.keyword.value == "device" for arg in origin.args
    ):
        return None
    if not _alone_on_the_host(ctx, origin):
        return None
    device = _device_expression(ctx, meeting, ctx.index.enclosing_function(origin), checked=True)
    if device is None:
        return None
    new = with_argument(origin, keyword_argument("device", device))
    return None if new is None else FixProposal(f"Pass `device={device}`", safe=False, replacements=((origin, new),))


def _runs_on_a_built_instance(function: cst.FunctionDef | None) -> bool:
    """A method with `self` that runs once the module is built: not a static or class method
    (no `self`), not `__init__` (`next(self.parameters())` may find none yet)."""
    if function is None or function.name.value == "__init__" or not function.params.params:
        return False
    decorators = {d.decorator.value for d in function.decorators if type(d.decorator) is cst.Name}
    return function.params.params[0].name.value == "self" and not decorators & {"staticmethod", "classmethod"}


def _alone_on_the_host(ctx: FileContext, factory: cst.Call) -> bool:
    """Whether the factory is not one of several tensors built together on the host
    (`torch.cat([torch.zeros(n), torch.tensor(times)])`): moving only it would split them."""
    parent = ctx.index.parent(factory)
    if type(parent) is not cst.Element:
        return True
    display = ctx.index.parent(parent)
    others = [e.value for e in getattr(display, "elements", ()) if e is not parent]
    facts = file_facts(ctx)
    return all(isinstance(o, (cst.BaseNumber, cst.BaseString)) or facts.is_device_tensor(o) for o in others)


def _constant_arguments(ctx: FileContext, call: cst.Call) -> bool:
    """Whether the factory's arguments are fixed at construction time (literals, `self.` fields),
    so that a buffer made once in `__init__` can replace it."""
    for arg in call.args:
        for node in ctx.index.walk(arg.value):
            if type(node) is cst.Name and node.value not in ("self", "torch", "True", "False", "None"):
                parent = ctx.index.parent(node)
                if not (type(parent) is cst.Attribute and parent.value is node and node.value in ("self", "torch")):
                    if not (type(parent) is cst.Attribute and parent.attr is node):
                        return False
    return True


def _how(ctx: FileContext, meeting: Meeting) -> str:
    if meeting.how == "return":
        return "is returned from `forward`"
    if meeting.how == "module":
        callee = ctx.code_for(meeting.device_node) if meeting.device_node is not None else "a module"
        return f"is passed to the module `{_short(callee)}`, which lives on the model's device"
    if meeting.how == "inplace":
        return f"accumulates device values in place (`{_short(ctx.code_for(meeting.node))}`)"
    other = ctx.code_for(meeting.device_node) if meeting.device_node is not None else "a device tensor"
    return f"meets the device tensor `{_short(other)}` in `{_short(ctx.code_for(meeting.node))}`"


def _device_expression(
    ctx: FileContext, meeting: Meeting, function: cst.FunctionDef | None, checked: bool = False
) -> str | None:
    """A device expression for where the factory is written. With `checked` (a fix writes it),
    only one whose names are surely bound there, else None."""
    origin = meeting.cpu.origin
    if function is meeting.scope:
        stated = meeting.device.device_expr
        # a helper followed from its caller sees the caller's device by the caller's name: say
        # it in the helper's own terms where that name is not bound there
        if stated and (bound_before(ctx, stated, origin) or (not checked and not stated[:1].isidentifier())):
            return stated
        if type(meeting.device_node) is cst.Name and (
            not checked or bound_before(ctx, meeting.device_node.value, origin)
        ):
            name = meeting.device_node.value
            # a module has no `.device`; its parameters have
            return f"next({name}.parameters()).device" if meeting.device.kind == MODULE else f"{name}.device"
    # The factory sits in a helper or a caller of the place where the tensors meet.
    facts = file_facts(ctx)
    placement = facts.scope(function if function is not None else ctx.module)
    if placement.device_params:
        return f"{placement.device_params[0]}.device"
    cls = ctx.index.enclosing_class(function) if function is not None else None
    model = facts.class_model(cls.name.value) if cls is not None else None
    if model is not None and (not checked or _runs_on_a_built_instance(function)):
        if model.has_device:
            return "self.device"
        if not model.registered and not model.submodules and function is not None:
            # a module with no parameters of its own (a transform): the tensor input it works on
            read = _input_read_at(ctx, meeting, function)
            if read is not None:
                return f"{read}.device"
        return "next(self.parameters()).device"
    named = _device_name_in(ctx, meeting, origin) if function is meeting.scope and origin is not None else None
    if named is not None:
        return f"{named}.device"  # `draw * (hi - lo)`: the device of `hi`, bound where the factory is
    if checked:
        return device_in_scope(ctx, origin) if origin is not None else None
    return "device"


def _device_name_in(ctx: FileContext, meeting: Meeting, origin: cst.CSTNode) -> str | None:
    """The first name or attribute of a name (`self.scale`) in the device side of the meeting
    (an expression, `hi - lo + 1`) that holds a device tensor and is bound where the factory is
    written."""
    if meeting.device_node is None or type(meeting.device_node) is cst.Name:
        return None
    facts = file_facts(ctx)
    for node in ctx.index.walk(meeting.device_node):
        base = node.value if type(node) is cst.Attribute else node
        if (
            type(base) is cst.Name
            and (base is node or type(ctx.index.parent(node)) is not cst.Attribute)
            and facts.value(node).kind == DEVICE
            and bound_before(ctx, base.value, origin)
        ):
            return ctx.code_for(node)
    return None


def _input_read_at(ctx: FileContext, meeting: Meeting, function: cst.FunctionDef) -> str | None:
    """The first parameter of `function` that the device side of the meeting is computed from
    (`x` for `vmax - vmin` with `vmax, vmin = x.max(), x.min()`), or None."""
    if function is not meeting.scope or meeting.device_node is None:
        return None
    read = {n.value for n in ctx.index.walk(meeting.device_node) if type(n) is cst.Name}
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    for name in params:
        if name not in ("self", "cls") and read & computed_from(ctx, function.body, {name}):
            return name
    return None


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
