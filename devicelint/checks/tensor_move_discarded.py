from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.cell_output import shown_by_cell
from devicelint.analysis.copying_classes import copying_methods, instance_class
from devicelint.analysis.facts import file_facts
from devicelint.analysis.imported_helpers import imported_call
from devicelint.analysis.local_bindings import bindings
from devicelint.analysis.moved_copies import HelperResult, moved_by_helper
from devicelint.analysis.placement_calls import constructed_object
from devicelint.analysis.placement_classes import class_facts, is_parameter_call, self_attribute
from devicelint.analysis.placement_facts import (
    DATA_FACTORIES,
    DEVICE,
    DEVICE_VALUE,
    FACTORIES,
    LEGACY_CONSTRUCTORS,
    MODULE,
    PRESERVING_METHODS,
    TENSOR_ONLY_METHODS,
    UNKNOWN,
    VARIABLE_WRAPPERS,
    Fact,
    is_tensor_function,
)
from devicelint.analysis.placement_values import annotation_is_tensor
from devicelint.analysis.training.syntax import assigned_names
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place
from devicelint.rule_base import FixProposal, Rule, Violation, register

MOVES = frozenset({"to", "cuda", "cpu", "xpu", "mps"})
CASTS = frozenset(
    {
        "half",
        "float",
        "double",
        "bfloat16",
        "long",
        "int",
        "bool",
        "byte",
        "short",
        "char",
        "type",
        "contiguous",
        "pin_memory",
    }
)


@register
class TensorMoveDiscarded(Rule):
    """
    ## What it does
    Flags `x.to(device)`, `x.cuda()`, `x.cpu()`, `x.half()`-style calls written as statements
    on their own, when the receiver is a tensor: the call returns a new tensor and the
    statement throws it away. Also flags a statement calling a helper of the same file that
    only returns moved copies of its first argument or of its parts (`to_device(batch)` whose
    body is `return {k: v.to(device) for k, v in batch.items()}`, or `images, targets = batch`
    then `return images.cuda(), targets.cuda()`), or a tuple of moved copies of its arguments
    (`return x.to(device), y.to(device)`). Helpers that walk nested containers recursively
    (`{k: send(v, device) for ...}`, `type(obj)(send(v, device) for v in obj)`, `return obj` for
    other leaves), that return what another such helper returns, that take the device first,
    or that are methods of a base class in the file count too, and so do helpers imported from
    another module of the project (`from utils import to_device`). The same holds for an
    instance of a plain class of the file (not a module) whose `to()`/`cuda()`/`cpu()` returns a
    new object on every path and never `self` (a batch or step-result class: `output.cpu()`
    where `Result.cpu` returns `Result({k: v.cpu() ...})`), when an `isinstance(output, Result)`
    test around the statement, a construction (`output = Result(...)`) or an annotation
    (`output: Result`) names the class.

    ## Why it is a bug on a GPU
    `nn.Module.to()` moves a module in place, so `model.to(device)` alone is right; a tensor is
    never moved in place. `x.to(device)` leaves `x` where it was, and the next operation with a
    device tensor fails with `Expected all tensors to be on the same device` (or, for `.half()`,
    the dtype silently stays the same).

    ## Example
    ```python
    for images, labels in loader:
        images.to(device)
        labels.to(device)
        loss = criterion(model(images), labels)
    ```

    ## Use instead
    ```python
    for images, labels in loader:
        images = images.to(device)
        labels = labels.to(device)
        loss = criterion(model(images), labels)
    ```

    ## Fix safety
    The fix assigns the result back: `x = x.to(device)` (and `.cuda()`, `.cpu()`, `.half()`,
    `.float()`... alike), `self.w = self.w.to(device)`, `batch["x"] = batch["x"].to(device)`,
    or `x, y = to_device(x, y, device)` for a helper returning one copy per argument. It is safe
    for a name the analysis knows holds a tensor: only where that tensor lives changes. It is
    unsafe for names of unknown type, attributes and items (an item of a tuple cannot be
    assigned). Should such a receiver be a module after all, whose `.to()` works in place and
    returns itself, the assignment is harmless: it rebinds the name to the same object. No fix
    where an assignment would change nothing or break: a name nobody reads afterwards (`for t in tensors: t.to(d)` rebinds the loop variable only), a registered
    parameter (`self.weight = self.weight.to(d)` raises; move the module), a receiver that is
    not a name, attribute or item (`model(x).cuda()`), and a helper returning a tuple of the
    parts of one argument (the caller has to unpack it).

    ## Known limits
    Receivers the placement analysis proves to be tensors are reported (factory results,
    DataLoader batch elements, parameters annotated `Tensor` or used as tensors, results of
    tensor operations). A `.to()`/`.cuda()` on a name of unknown type is reported when the name
    was made by a loop over data, by unpacking, by a function call or by indexing, and the code
    uses it as only a tensor is used (indexed with numbers or slices, an arithmetic operand, a
    tensor method, a model's positional input) and never as an object (another attribute such
    as `batch.y`, an attribute written other than `data`/`grad`/`requires_grad` such as
    `batch.split = "train"` on a graph batch, `**inputs`, a string key, a call). Names that say module (`model`, `net`,
    `encoder`...) or that come from a class, a tokenizer or processor, a copy or a
    `load`/`build`/`create`-style call are never reported, unless the binding that last precedes
    the move makes a new tensor with a torch factory (`x = torch.tensor(x)`, `torch.as_tensor`,
    `torch.from_numpy(a).float()`, `torch.stack`...), which settles it whatever the name held
    before (a parameter, a list of token ids). An attribute (`self.mask.cuda()` in a class's own
    `cuda()` or `to()`) is reported when every assignment to it in its class makes a tensor with
    a torch function, or moves or casts a parameter annotated as a tensor (`targets.to(d)` of
    `targets: torch.Tensor`), apart from `None` (not set yet), and it is no registered buffer or
    parameter. Nor is a whole batch (`batch`,
    `data`, `graph`...) whose only use is as a model input: a graph batch or a `BatchEncoding`
    moves in place. A `.to(d)` of a tensor built or moved with that same device expression
    (`torch.zeros(n, device=d)`, also `self.device` set from that `d`) returns the tensor
    itself and is not reported. A helper of the
    same file is followed through other helpers; a function imported
    from another module of the project counts when it returns `x.to(...)`/`x.cuda()` of a
    parameter, or a comprehension over it (its items or values) whose every element is moved.
    One that also changes its argument in place (`batch[k] = ...`, `batch.update(...)`) is not
    reported. A cast to the dtype a legacy typed constructor built (`t = torch.FloatTensor(n, k)`,
    changed since only in place, then `t.float()`) returns the tensor itself and is not
    reported. In a notebook, a move left as a cell's last top-level expression (not ended by `;`)
    is the cell's output, which IPython displays, and is not reported.
    """

    code = "DL104"
    name = "tensor-move-discarded"
    summary = "`x.to(device)` on a tensor, as a statement, moves nothing."
    message = "`{call}` returns {what} that is thrown away, so {unmoved}; {advice}"
    fix_availability = "sometimes"
    reads_helpers = True
    tokens = (
        ".to",
        ".cuda",
        ".cpu",
        ".half",
        ".float",
        ".double",
        ".bfloat16",
        ".long",
        ".int",
        ".bool",
        ".byte",
        ".short",
        ".char",
        ".type",
        ".contiguous",
        ".pin_memory",
        ".xpu",
        ".mps",
    )

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for statement, violation in self._discarded(ctx):
            if not shown_by_cell(ctx, statement):  # a notebook cell's last expression is displayed
                yield violation

    def _discarded(self, ctx: FileContext) -> Iterator[tuple[cst.Expr, Violation]]:
        for statement in ctx.index.of_type(cst.Expr):
            call = statement.value
            moved = moved_by_helper(ctx, call) if type(call) is cst.Call else None
            if moved is not None and type(call) is cst.Call:
                # a helper's `return model.to(device)` handed a module moves it in place
                if not all(file_facts(ctx).value(r).kind == MODULE or _used_as_module(ctx, r) for r in moved.receivers):
                    yield statement, self._helper_report(ctx, call, moved)
                continue
            imported = imported_call(ctx, call) if type(call) is cst.Call else None
            if imported is not None and type(call) is cst.Call:
                helper, bound = imported
                receiver = bound.get(helper.uses.returns_moved or "")
                if type(receiver) in (cst.Name, cst.Attribute, cst.Subscript) and receiver is not None:
                    if not (file_facts(ctx).value(receiver).kind == MODULE or _used_as_module(ctx, receiver)):
                        yield statement, self._report(ctx, call, receiver, "a moved copy", "moved")
                continue
            if not (type(call) is cst.Call and type(call.func) is cst.Attribute):
                continue
            method = call.func.attr.value
            if method not in MOVES and method not in CASTS:
                continue
            if method == "type" and not call.args:
                continue  # `x.type()` returns the type name
            receiver = call.func.value
            fact = file_facts(ctx).value(receiver)
            owner = instance_class(ctx, receiver, statement) if type(receiver) is cst.Name else None
            if owner is not None and method in MOVES and method in copying_methods(ctx)[owner] and fact.kind != MODULE:
                # `output.cpu()` on a `Result` whose `cpu()` builds and returns a new `Result`
                yield statement, self._report(ctx, call, receiver, f"a new `{owner}`", "moved")
                continue
            if fact.is_tensor and (_assigned_an_object(ctx, receiver) or _already_there(ctx, call, fact)):
                continue
            if fact.origin is None and _used_as_module(ctx, receiver):
                continue  # `prior.cuda()` then `prior(x, y)`: no tensor is called, a module moves in place
            if method in CASTS and _already_of_dtype(ctx, receiver, method):
                continue  # `FloatTensor(n, k)` then `.float()`: the cast returns the tensor itself
            creator = None
            if fact.kind == UNKNOWN and type(receiver) is cst.Name:
                creator = _new_tensor_binding(ctx, receiver)
            elif fact.kind == UNKNOWN and type(receiver) is cst.Attribute:
                creator = _tensor_attribute_creator(ctx, receiver)
            elif fact.kind == UNKNOWN and type(receiver) is cst.Subscript:
                creator = _item_just_made(ctx, receiver, statement)
            # `x = torch.tensor(v, device=d)` then `x.to(d)`: the copy would be `x` itself
            made_here = creator is not None and not _created_there(ctx, creator, call)
            if (
                not fact.is_tensor
                and not made_here
                and not (
                    fact.kind == UNKNOWN
                    and method in MOVES
                    and ((type(receiver) is cst.Name and _unknown_is_tensor(ctx, receiver)) or _part_of_batch(receiver))
                )
            ):
                continue
            done = "moved" if method in MOVES and not _dtype_only(ctx, call) else "converted"
            yield (
                statement,
                self._report(ctx, call, receiver, "a new tensor", done, known_tensor=fact.is_tensor or made_here),
            )

    def _helper_report(self, ctx: FileContext, call: cst.Call, moved: HelperResult) -> Violation:
        if len(moved.receivers) == 1 and not moved.pair_only:
            return self._report(ctx, call, moved.receivers[0], "a moved copy", "moved")
        call_text = ctx.code_for(call)
        if moved.pair_only:  # copies of the first argument's parts, returned as a tuple
            first = ctx.code_for(moved.receivers[0])
            return self.violation(
                call,
                call=call_text,
                what=f"a tuple of moved copies of `{first}`'s parts",
                unmoved=f"`{first}` is not moved",
                advice=f"unpack the result (`a, b = {call_text}`) and use it instead of `{first}`",
            )
        # `features, labels = pair_to_device(features, labels, device)`: one target per returned copy
        names = ", ".join(ctx.code_for(r) for r in moved.receivers)
        listed = " and ".join(f"`{ctx.code_for(r)}`" for r in moved.receivers)
        fix = FixProposal(
            description=f"Assign the result: `{names} = {call_text}`",
            safe=False,
            replacements=((call, f"{names} = {call_text}"),),
        )
        return self.violation(
            call,
            fix=fix,
            call=call_text,
            what="a tuple of moved copies",
            unmoved=f"{listed} are not moved",
            advice=f"assign it: `{names} = {call_text}`",
        )

    def _report(
        self,
        ctx: FileContext,
        call: cst.Call,
        receiver: cst.BaseExpression,
        what: str,
        done: str,
        known_tensor: bool = False,
    ) -> Violation:
        call_text = ctx.code_for(call)
        # `t.uniform_(a, b).to(dtype)`: an in-place method returns its own receiver, so `t` is
        # what a rebinding names; a call's result (`model(x).cuda()`) cannot be assigned to.
        target = _in_place_receiver(receiver)
        target_text = ctx.code_for(target)
        fix = None
        if type(target) in (cst.Name, cst.Attribute, cst.Subscript) and _rebinding_helps(ctx, call, target):
            # Safe only for a name the analysis knows holds a tensor: `x = x.to(d)` then changes
            # nothing but where `x` lives. An attribute or item may be a parameter or a tuple slot.
            safe = known_tensor and type(receiver) is cst.Name
            fix = FixProposal(
                description=f"Assign the result: `{target_text} = {call_text}`",
                safe=safe,
                replacements=((call, f"{target_text} = {code_in_place(ctx, call, call)}"),),
            )
        if type(target) in (cst.Name, cst.Attribute, cst.Subscript):
            advice = f"assign it: `{target_text} = {call_text}`"
        else:
            advice = "assign the result to a name and use that"
        return self.violation(
            call,
            fix=fix,
            call=call_text,
            what=what,
            unmoved=f"`{target_text}` is not {done}",
            advice=advice,
        )


def _in_place_receiver(receiver: cst.BaseExpression) -> cst.BaseExpression:
    """The tensor an in-place method chain works on: `t` for `t.uniform_(a, b).clamp_(0, 1)`."""
    while (
        type(receiver) is cst.Call
        and type(receiver.func) is cst.Attribute
        and receiver.func.attr.value.endswith("_")
        and not receiver.func.attr.value.startswith("_")
    ):
        receiver = receiver.func.value
    return receiver


def _rebinding_helps(ctx: FileContext, call: cst.Call, receiver: cst.BaseExpression) -> bool:
    """Whether `receiver = <call>` is a sound fix: the receiver can be assigned, it is not a
    registered parameter (assigning a plain tensor to one raises), and a rebound name is read
    again afterwards (`for t in tensors: t.to(d)` moves nothing even when assigned)."""
    if type(receiver) is cst.Subscript:
        return True
    if type(receiver) is cst.Attribute:
        attr = self_attribute(receiver)
        owner = ctx.index.enclosing_class(call)
        facts = class_facts(ctx).get(owner.name.value) if (attr is not None and owner is not None) else None
        return facts is None or not any(
            name == attr and is_parameter_call(ctx, value) for name, value, _ in facts.assignments
        )
    if type(receiver) is not cst.Name:
        return False  # `model(x).cuda()`: nothing to assign to
    scope = ctx.index.enclosing_function(call) or ctx.module
    after = False
    for node in ctx.index.walk(scope):
        if node is call:
            after = True
        elif after and type(node) is cst.Name and node.value == receiver.value and node is not receiver:
            if ctx.index.in_binding_target(node):
                # Rebound: read first only by its own right-hand side (`z = z - 0.1 * eps`).
                statement = next(
                    (a for a in ctx.index.ancestors(node) if isinstance(a, (cst.Assign, cst.AugAssign))), None
                )
                return type(statement) is cst.AugAssign or (
                    statement is not None
                    and any(type(n) is cst.Name and n.value == receiver.value for n in ctx.index.walk(statement.value))
                )
            return True
    # No read after it: only a loop's next pass can read it, at the top of the body, and not
    # when the loop itself rebinds the name each pass.
    for loop in ctx.index.ancestors(call):
        if type(loop) is cst.For and receiver.value in assigned_names(loop.target):
            return False
        if isinstance(loop, (cst.For, cst.While)):
            return any(
                type(n) is cst.Name
                and n.value == receiver.value
                and n is not receiver
                and not ctx.index.in_binding_target(n)
                for n in ctx.index.walk(loop.body)
            )
    return False


# -- receivers the placement analysis does not know ---------------------------------------------
# `x.to(device)` on a value of unknown type is decided from how the name was made and what the
# code does with it: a tensor-like use (indexed, an operand, a model's input) and no sign of an
# object whose `.to()` works in place (a module, a BatchEncoding, a graph batch).

# Parts of names that hold modules or objects moved in place.
MODULE_WORDS = (
    "model",
    "net",
    "module",
    "encoder",
    "decoder",
    "backbone",
    "classifier",
    "generator",
    "discriminator",
    "critic",
    "policy",
    "head",
    "layer",
    "block",
    "ema",
    "teacher",
    "student",
    "pipe",
    "learner",
    "agent",
    "criterion",
    "loss_fn",
    "metric",
    "vae",
    "unet",
    "transformer",
    "embed",
    "tokeniz",
    "processor",
    "trainer",
    "wrapper",
    "engine",
    "accelerator",
    "encoding",
    "optim",
    "scaler",
)
# Names of whole batches that may be objects moved in place (a graph batch, a BatchEncoding): a
# model input alone is no evidence that they are tensors.
CONTAINER_WORDS = ("batch", "data", "graph", "sample", "inputs", "encoded", "example", "item", "record")
# Callees whose results are objects with their own `.to()` or modules.
OBJECT_CALL_WORDS = (
    "tokeniz",
    "processor",
    "extractor",
    "collat",
    "checkpoint",
    "ckpt",
    "load_state",
    "pretrained",
    "instantiate",
    "deepcopy",
    "copy",
    "prepare",
    "wrap",
    "compile",
    "pipeline",
)
# Attributes any tensor has; any other attribute use marks an object (`batch.y`, `enc.input_ids`).
TENSOR_ATTRIBUTES = (
    TENSOR_ONLY_METHODS
    | PRESERVING_METHODS
    | frozenset(
        {
            "shape",
            "dtype",
            "device",
            "ndim",
            "T",
            "tolist",
            "numpy",
            "requires_grad",
            "grad",
            "backward",
            "is_cuda",
            "to",
            "cuda",
            "cpu",
            "float",
            "half",
            "long",
            "numel",
            "element_size",
            "data",
            "sum",
            "mean",
            "squeeze",
        }
    )
)
DTYPES = frozenset(
    {
        "float32",
        "float",
        "float16",
        "half",
        "bfloat16",
        "float64",
        "double",
        "int64",
        "long",
        "int32",
        "int",
        "int16",
        "int8",
        "uint8",
        "bool",
        "complex64",
        "complex128",
    }
)
LOOP_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "zip"})
MODULE_ITERATORS = frozenset(
    {"modules", "children", "named_modules", "named_children", "values", "items", "parameters"}
)


def _unknown_is_tensor(ctx: FileContext, receiver: cst.Name) -> bool:
    name = receiver.value
    lowered = name.lower()
    if any(word in lowered for word in MODULE_WORDS):
        return False
    scope: cst.CSTNode = ctx.index.enclosing_function(receiver) or ctx.module
    names = [
        n
        for n in ctx.index.walk(scope)
        if type(n) is cst.Name and n.value == name and (ctx.index.enclosing_function(n) or ctx.module) is scope
    ]
    made = False
    evidence = False
    weak = False
    before = True  # bindings after the discarded move say nothing about what it moved
    for node in names:
        if node is receiver:
            before = False
            continue
        binding = _binding(ctx, node)
        if binding is not None:
            if not before:
                continue
            if binding == "object":
                return False
            made = True
            evidence = evidence or binding == "tensor"
            # a whole batch (not a part unpacked or indexed out of one) may be an object
            weak = weak or (binding == "whole" and any(word in lowered for word in CONTAINER_WORDS))
            continue
        use = _use(ctx, node)
        if use == "object":
            return False
        evidence = evidence or use == "tensor" or (use == "input" and not weak)
    return made and evidence


# torch functions that always return one new tensor, whatever their arguments are (a list, an
# array, a tensor of unknown device): `x = torch.tensor(x)` holds a tensor even where the
# analysis cannot say which device it is on.
_NEW_TENSOR_FUNCTIONS = FACTORIES | DATA_FACTORIES | LEGACY_CONSTRUCTORS | {"from_numpy", "stack", "cat", "concat"}
# torch functions and tensor methods that return a tuple of tensors (or may, with some arguments)
_SEVERAL_RESULTS = frozenset(
    {
        "split",
        "chunk",
        "unbind",
        "tensor_split",
        "hsplit",
        "vsplit",
        "dsplit",
        "meshgrid",
        "broadcast_tensors",
        "sort",
        "topk",
        "max",
        "min",
        "median",
        "mode",
        "kthvalue",
        "unique",
        "unique_consecutive",
        "where",
        "nonzero",
        "svd",
        "qr",
        "eig",
        "eigh",
        "lu",
        "slogdet",
        "histogram",
        "frexp",
        "aminmax",
        "var_mean",
        "std_mean",
        "cummax",
        "cummin",
        "lobpcg",
        "pca_lowrank",
        "svd_lowrank",
        "lstsq",
    }
)


def _created_there(ctx: FileContext, creator: cst.Call, move: cst.Call) -> bool:
    """The factory already names the device the move names (`device=d` and `.to(d)`)."""
    made_on = next((a.value for a in creator.args if a.keyword is not None and a.keyword.value == "device"), None)
    target = next((a.value for a in move.args if a.keyword is None or a.keyword.value == "device"), None)
    return (
        made_on is not None
        and target is not None
        and bool(_device_spellings(ctx, made_on) & _device_spellings(ctx, target))
    )


def _new_tensor_binding(ctx: FileContext, receiver: cst.Name) -> cst.Call | None:
    """The binding of `receiver`'s name that last precedes it in its function is
    `name = torch.<factory>(...)`: the name holds a tensor, whatever it held before (a parameter
    rebound to `torch.tensor(tokens)`, an argument list turned into a tensor); that call."""
    scope: cst.CSTNode = ctx.index.enclosing_function(receiver) or ctx.module
    at = ctx.index.position(receiver)
    last: cst.Name | None = None
    for node in ctx.index.walk(scope):
        if ctx.index.position(node) >= at:
            break
        if type(node) is not cst.Name or node.value != receiver.value:
            continue
        if (ctx.index.enclosing_function(node) or ctx.module) is not scope:
            continue  # a nested function's own name
        parent = ctx.index.parent(node)
        if ctx.index.in_binding_target(node) or isinstance(
            parent, (cst.Param, cst.AsName, cst.AnnAssign, cst.Global, cst.Nonlocal)
        ):
            last = node
    if last is None:
        return None
    target = ctx.index.parent(last)
    assign = ctx.index.parent(target) if type(target) is cst.AssignTarget else None
    if type(assign) is not cst.Assign:
        return None  # unpacked, a loop target, a parameter
    return _tensor_making_call(ctx, assign.value)


def _item_just_made(ctx: FileContext, receiver: cst.Subscript, statement: cst.Expr) -> cst.Call | None:
    """`d[key] = torch.tensor(d[key])` as the statement just before `d[key].to(device)`, whatever
    `key` is (a loop over a list of keys): the item is that new tensor; its making call."""
    line = ctx.index.parent(statement)
    suite = ctx.index.parent(line) if line is not None else None
    body = list(suite.body) if isinstance(suite, (cst.IndentedBlock, cst.Module)) else []
    at = next((i for i, s in enumerate(body) if s is line), 0)
    before = body[at - 1] if at > 0 else None
    if type(before) is not cst.SimpleStatementLine or len(before.body) != 1:
        return None
    assign = before.body[0]
    if type(assign) is not cst.Assign or len(assign.targets) != 1:
        return None
    if ctx.code_for(assign.targets[0].target) != ctx.code_for(receiver):
        return None
    return _tensor_making_call(ctx, assign.value)


def _tensor_making_call(ctx: FileContext, value: cst.BaseExpression) -> cst.Call | None:
    """The `torch.*` call that makes the tensor `value` is (`torch.triu(torch.ones(n, n)).bool()`
    gives `torch.triu(...)`), or None when `value` may be something else."""
    # `torch.from_numpy(img).float().unsqueeze(0)`: tensor methods keep a tensor a tensor
    while (
        type(value) is cst.Call
        and type(value.func) is cst.Attribute
        and value.func.attr.value in PRESERVING_METHODS
        and value.func.attr.value not in _SEVERAL_RESULTS
        and not (ctx.qualified_name(value.func) or "").startswith("torch.")  # `torch.triu(x)` itself
    ):
        value = value.func.value
    if type(value) is not cst.Call:
        return None
    qualified = ctx.qualified_name(value.func) or ""
    if qualified in VARIABLE_WRAPPERS and value.args and value.args[0].keyword is None:
        return _tensor_making_call(ctx, value.args[0].value)  # `Variable(t)` is `t` itself
    namespace, _, last = qualified.rpartition(".")
    if namespace != "torch":
        return None
    new = last in _NEW_TENSOR_FUNCTIONS or (is_tensor_function(qualified) and last not in _SEVERAL_RESULTS)
    return value if new else None


def _tensor_attribute_creator(ctx: FileContext, receiver: cst.BaseExpression) -> cst.Call | None:
    """`self.mask` that every `self.mask = ...` of its class sets to a tensor made by torch, or to
    a call the placement analysis knows returns a tensor (`targets.to(d)` of a parameter annotated
    `Tensor`), apart from `None` (an optional tensor not set yet), and that is no registered buffer
    or parameter, which the module's own move carries: the call that makes it."""
    attr = self_attribute(receiver)
    owner = ctx.index.enclosing_class(receiver)
    if attr is None or owner is None:
        return None
    facts = class_facts(ctx).get(owner.name.value)
    if facts is not None and attr in facts.registered:
        return None
    creators: list[cst.Call] = []
    for node in ctx.index.walk(owner):
        if type(node) is cst.Assign and any(self_attribute(t.target) == attr for t in node.targets):
            if type(node.value) is cst.Name and node.value.value == "None":
                continue  # `self._targets = None` until the first data arrives
            made = _tensor_making_call(ctx, node.value) or _move_of_tensor_parameter(ctx, node.value)
            if made is None:
                return None
            creators.append(made)
        elif type(node) in (cst.AugAssign, cst.AnnAssign) and self_attribute(node.target) == attr:  # type: ignore[attr-defined]
            return None
    return creators[0] if creators else None


def _move_of_tensor_parameter(ctx: FileContext, value: cst.BaseExpression) -> cst.Call | None:
    """`targets.to(self.device)` (or `.cuda()`, `.float()`...) of a parameter its function
    annotates as a tensor (`targets: torch.Tensor`): a tensor, wherever it ends up; that call."""
    if not (type(value) is cst.Call and type(value.func) is cst.Attribute):
        return None
    if value.func.attr.value not in MOVES and value.func.attr.value not in CASTS:
        return None
    receiver = value.func.value
    function = ctx.index.enclosing_function(value)
    if type(receiver) is not cst.Name or function is None:
        return None
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.name.value == receiver.value:
            return value if annotation_is_tensor(param.annotation, ctx) else None
    return None


_MODULE_ONLY_METHODS = frozenset({"parameters", "named_parameters", "buffers", "modules", "children", "eval", "train"})


def _used_as_module(ctx: FileContext, receiver: cst.BaseExpression, *, calls_count: bool = True) -> bool:
    """A name its function calls (`model(x)`; unless `calls_count` is off), asks for parameters
    (`model.parameters()`), switches to eval mode, or annotates as a module: a module, whose
    `.to()` moves it in place and whose call's inputs are tensors."""
    if type(receiver) is not cst.Name:
        return False
    scope: cst.CSTNode = ctx.index.enclosing_function(receiver) or ctx.module
    for node in ctx.index.walk(scope):
        if type(node) is cst.Param and node.name.value == receiver.value and node.annotation is not None:
            if (ctx.qualified_name(node.annotation.annotation) or "").endswith("Module"):
                return True
        if not (type(node) is cst.Name and node.value == receiver.value):
            continue
        parent = ctx.index.parent(node)
        if calls_count and type(parent) is cst.Call and parent.func is node:
            return True
        if type(parent) is cst.Attribute and parent.value is node and parent.attr.value in _MODULE_ONLY_METHODS:
            return True
    return False


def _assigned_an_object(ctx: FileContext, receiver: cst.BaseExpression) -> bool:
    """`self.linear.weight = bnb.nn.Params4bit(...)` earlier in the function: an object of a
    library class, whose own `.cuda()` may work in place, not a plain tensor."""
    if type(receiver) is not cst.Attribute:
        return False
    text = ctx.code_for(receiver)
    scope: cst.CSTNode = ctx.index.enclosing_function(receiver) or ctx.module
    for node in ctx.index.walk(scope):
        if not (type(node) is cst.Assign and type(node.value) is cst.Call):
            continue
        if not any(ctx.code_for(t.target) == text for t in node.targets):
            continue
        qualified = ctx.qualified_name(node.value.func) or ""
        last = (qualified or ctx.code_for(node.value.func)).rsplit(".", 1)[-1]
        if last[:1].isupper() and not qualified.startswith("torch."):
            return True
    return False


def _dtype_only(ctx: FileContext, call: cst.Call) -> bool:
    """`x.to(torch.float32)`, `x.to(dtype=...)`: a cast, not a move."""
    args = [
        a
        for a in call.args
        if not (a.keyword is not None and a.keyword.value in ("non_blocking", "copy", "memory_format"))
    ]
    return bool(args) and all(
        (a.keyword is not None and a.keyword.value == "dtype")
        or (a.keyword is None and type(a.value) is cst.Attribute and a.value.attr.value == "dtype")  # `x.to(w.dtype)`
        or (
            a.keyword is None
            and (ctx.qualified_name(a.value) or "").startswith("torch.")
            and (ctx.qualified_name(a.value) or "").rsplit(".", 1)[-1] in DTYPES
        )
        for a in args
    )


def _part_of_batch(receiver: cst.BaseExpression) -> bool:
    """`batch["input_ids"]`, `data[0]`, `sample[key]`: one entry of a batch, a tensor."""
    if not (type(receiver) is cst.Subscript and type(receiver.value) is cst.Name):
        return False
    lowered = receiver.value.value.lower()
    return any(word in lowered for word in CONTAINER_WORDS) and not any(word in lowered for word in MODULE_WORDS)


def _binding(ctx: FileContext, node: cst.Name) -> str | None:
    """How `node` binds its name: "part" (unpacked from a tuple, indexed out of a container),
    "whole" (a loop element, a function's result), "object" (anything else that binds), or None
    (a use)."""
    index = ctx.index
    child: cst.CSTNode = node
    parent = index.parent(node)
    unpacked = False
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.StarredElement)):
        unpacked = unpacked or isinstance(parent, (cst.Tuple, cst.List))
        child, parent = parent, index.parent(parent)
    if type(parent) is cst.AssignTarget:
        assign = index.parent(parent)
        if type(assign) is not cst.Assign:
            return "object"
        if unpacked:
            return "part"
        value = assign.value
        if isinstance(value, (cst.Subscript, cst.BinaryOperation)):
            return "part"  # an entry of a container, an arithmetic result
        if type(value) is cst.Call and constructed_object(ctx, value.func):
            return "object"  # `Data(x=x).to("cpu")`: a library object, moved
        if (
            type(value) is cst.Call
            and type(value.func) is cst.Attribute
            and value.func.attr.value in TENSOR_ONLY_METHODS
            and value.func.attr.value != "item"
        ):
            return "tensor"  # `x = f(img).unsqueeze(0)`: only a tensor has the method
        if (
            type(value) is cst.Call
            and type(value.func) is cst.Attribute
            and value.func.attr.value in TENSOR_ATTRIBUTES
            and not any(word in ctx.code_for(value.func.value).lower() for word in MODULE_WORDS)
        ):
            return "part"  # `x = y.clone()`, `x = y.float()`: a tensor method's result
        return "whole" if _made_by_call(ctx, value) else "object"
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is child:
        if not _loop_over_data(ctx, parent.iter):
            return "object"
        return "part" if unpacked else "whole"
    if type(parent) in (cst.Param, cst.AsName, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.Global, cst.Nonlocal):
        return "object" if type(parent) is not cst.AugAssign else None
    if node is not child:
        return None  # an element of a tuple being built, a use
    return None


def _made_by_call(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`x = helper(...)`: a function's result, of unknown type."""
    if type(value) is not cst.Call:
        return False
    func = value.func
    last = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
    if not last or last[:1].isupper() or last in class_facts(ctx):
        return False  # a class: an object, perhaps a module
    if type(func) is cst.Attribute and func.attr.value in MOVES:
        return False
    if ctx.qualified_name(func) == "torch.load":
        return False  # a checkpoint: a dict, a whole model or a tensor
    lowered = last.lower()
    return not any(word in lowered for word in OBJECT_CALL_WORDS + MODULE_WORDS)


def _loop_over_data(ctx: FileContext, iterable: cst.BaseExpression) -> bool:
    """A loop over batches or a list of values, not over modules (`self.modules()`, `models`)."""
    while (
        type(iterable) is cst.Call
        and type(iterable.func) is cst.Name
        and iterable.func.value in LOOP_WRAPPERS
        and iterable.args
    ):
        iterable = iterable.args[0].value
    if type(iterable) is cst.Call:
        func = iterable.func
        last = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
        if last in MODULE_ITERATORS or last == "range":
            return False
    spelled = ctx.code_for(iterable).lower()
    return not any(word in spelled for word in ("model", "module", "net", "layer", "block", "range"))


# Attributes code sets on a tensor (`w.grad = None`, `t.data = ...`, `p.requires_grad = False`).
_TENSOR_SETTABLE = frozenset({"data", "grad", "requires_grad", "names"})


def _assigned_attribute(ctx: FileContext, attribute: cst.Attribute) -> bool:
    """`obj.attr = value` (or `obj.attr += value`): the attribute is written, not read."""
    holder = ctx.index.parent(attribute)
    if type(holder) is cst.AssignTarget or type(holder) is cst.AugAssign or type(holder) is cst.AnnAssign:
        return holder.target is attribute
    return False


def _use(ctx: FileContext, node: cst.Name) -> str | None:
    """ "tensor" for a use only a tensor has, "object" for one a tensor never has, else None."""
    index = ctx.index
    parent = index.parent(node)
    if type(parent) is cst.Attribute and parent.value is node:
        if _assigned_attribute(ctx, parent) and parent.attr.value not in _TENSOR_SETTABLE:
            return "object"  # `batch.split = "train"`: a tensor's methods are not overwritten
        return "tensor" if parent.attr.value in TENSOR_ATTRIBUTES else "object"
    if type(parent) is cst.Call and parent.func is node:
        return "object"
    if type(parent) is cst.Subscript and parent.value is node:
        keys = [e.slice for e in parent.slice]
        if any(
            type(k) is cst.Index and type(k.value) in (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)
            for k in keys
        ):
            return "object"
        return "tensor"
    if type(parent) is cst.BinaryOperation:
        return "tensor"
    if type(parent) is cst.Arg:
        if parent.star == "**":
            return "object"
        call = index.parent(parent)
        if type(call) is cst.Call and parent.keyword is None and not parent.star and _model_call(ctx, call):
            return "input"
    return None


def _model_call(ctx: FileContext, call: cst.Call) -> bool:
    """`model(x)`, `self.encoder(x)`, `net(x)`, `torch.cat(...)`, `F.relu(x)`: its inputs are tensors."""
    qualified = ctx.qualified_name(call.func) or ""
    if qualified.startswith("torch."):
        return True
    fact = file_facts(ctx).value(call.func)
    if fact.kind == MODULE or _used_as_module(ctx, call.func, calls_count=False):
        return True
    func = call.func
    last = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
    return any(
        word in last.lower()
        for word in ("model", "net", "encoder", "decoder", "backbone", "classifier", "criterion", "loss")
    )


# The dtype each legacy typed constructor builds, by the cast method that names it.
_LEGACY_DTYPES = {
    "FloatTensor": "float",
    "DoubleTensor": "double",
    "HalfTensor": "half",
    "LongTensor": "long",
    "IntTensor": "int",
    "ByteTensor": "byte",
    "BoolTensor": "bool",
}


def _already_of_dtype(ctx: FileContext, receiver: cst.BaseExpression, method: str) -> bool:
    """`y.scatter_(...).float()` where every binding of `y` is `torch.FloatTensor(...)`, changed
    since only in place (`zero_()`, `scatter_(...)`, which keep the dtype): a cast to the dtype
    the tensor has returns the tensor itself, so throwing it away loses nothing."""
    node = receiver
    while type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value.endswith("_"):
        node = node.func.value
    if type(node) is not cst.Name:
        return False
    values = bindings(ctx, node.value, node)
    return bool(values) and all(
        type(v) is cst.Call and _LEGACY_DTYPES.get((ctx.qualified_name(v.func) or "").removeprefix("torch.")) == method
        for v in values or ()
    )


def _already_there(ctx: FileContext, call: cst.Call, fact: Fact) -> bool:
    """`z.to(model.device)` of a tensor built or moved with that same device expression
    (`torch.tensor(..., device=model.device)`): the copy it would return is the tensor itself, so
    throwing it away loses nothing."""
    if fact.kind != DEVICE or fact.device_expr is None or call.func.attr.value != "to":  # type: ignore[attr-defined]
        return False
    target = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "device"), None)
    return target is not None and len(call.args) == 1 and fact.device_expr in _device_spellings(ctx, target)


def _device_spellings(ctx: FileContext, device: cst.BaseExpression) -> set[str]:
    """The text of a device expression, and the expression the analysis resolves it to
    (`self.device` set from a `device` parameter is spelled `device` there)."""
    spelled = {ctx.code_for(device)}
    resolved = file_facts(ctx).value(device)
    if resolved.kind == DEVICE_VALUE and resolved.device_expr is not None:
        spelled.add(resolved.device_expr)
    return spelled
