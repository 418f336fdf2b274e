"""Which default device is in force at a call: the CPU, an accelerator, or unknown.

`torch.set_default_device("cuda")`, `torch.set_default_tensor_type(torch.cuda.FloatTensor)` and
`with torch.device("cuda"):` make every factory without `device=` (including the ones that
torch's own samplers call) create its tensor on the accelerator. DL110 reports module-level
setters; the sampling rules (DL114, DL115) ask this module what is in force at one call.

Setters are read in the order the file runs them, as far as one file shows it: an enclosing
`with torch.device(...)` block first, then the last setter earlier in the same function (or a
same-file helper it called earlier), then the class's `__init__`, then the module's top level
(which runs before any function is called from its `__main__` block).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.local_bindings import bindings, device_type_of
from devicelint.analysis.names import SETTINGS_NAMES, dotted_name, literal_value
from devicelint.analysis.placement_values import (
    DEFAULT_DEVICE_SETTERS,
    accelerator_default,
    configured_defaults,
    sets_accelerator_default,
)
from devicelint.analysis.training.helpers import callee, returned_call
from devicelint.context import FileContext

ACCELERATOR_DEFAULT = "accelerator"
CPU_DEFAULT = "cpu"
UNKNOWN_DEFAULT = "unknown"

# Arguments of a setter that put the default back on the CPU.
_CPU_TENSOR_TYPES = ("torch.FloatTensor", "torch.DoubleTensor", "torch.HalfTensor", "torch.BFloat16Tensor")


@dataclass(frozen=True)
class DefaultDevice:
    """The default device at one call and the code that chose it (None: nothing did)."""

    state: str  # ACCELERATOR_DEFAULT, CPU_DEFAULT or UNKNOWN_DEFAULT
    device: str = "cpu"  # the device type: "cuda", "mps", ... or "cpu"
    setter: cst.CSTNode | None = None  # the setter call or the `torch.device(...)` of a `with`


NO_DEFAULT = DefaultDevice(CPU_DEFAULT)
# Methods that run before a class's other methods: the constructor, and the Lightning hooks that
# run before any `*_dataloader` or step (`setup`, `prepare_data`, `configure_model`).
RUN_FIRST_METHODS = ("__init__", "prepare_data", "setup", "configure_model")
UNKNOWN = DefaultDevice(UNKNOWN_DEFAULT, device="?")


def _device_type(text: str) -> str:
    if text.startswith("torch.cuda."):
        return "cuda"
    if text[:1] in "fF" and text[1:2] in ("'", '"'):
        text = text[2:]  # `f"cuda:{rank}"`, as accelerator_default spells it
    return text.split(":", 1)[0]


def _is_cpu_argument(ctx: FileContext, node: cst.BaseExpression) -> bool:
    if type(node) is cst.Name and node.value == "None":
        return True
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        return isinstance(value, str) and (value.split(":", 1)[0] == "cpu" or value in _CPU_TENSOR_TYPES)
    if ctx.qualified_name(node) in _CPU_TENSOR_TYPES:
        return True
    if type(node) is cst.Call and ctx.qualified_name(node.func) == "torch.device" and node.args:
        return _is_cpu_argument(ctx, node.args[0].value)
    return False


def default_set_by(ctx: FileContext, node: cst.BaseExpression, setter: cst.CSTNode) -> DefaultDevice:
    """What a setter's argument (or a `with` block's `torch.device(...)` argument) makes the default."""
    accelerator = accelerator_default(ctx, node)
    if accelerator is not None:
        return DefaultDevice(ACCELERATOR_DEFAULT, _device_type(accelerator), setter)
    if _is_cpu_argument(ctx, node):
        return DefaultDevice(CPU_DEFAULT, "cpu", setter)
    # `torch.set_default_device(device)` with `device = torch.device("cuda" if ... else "cpu")`:
    # the GPU run, where samplers fail, makes the accelerator the default.
    named = device_type_of(ctx, node) if type(node) is cst.Name else None
    if named == "cpu":
        return DefaultDevice(CPU_DEFAULT, "cpu", setter)
    if named is not None:
        return DefaultDevice(ACCELERATOR_DEFAULT, named, setter)
    # `device = idist.device()`, then `device = torch.device("mps")` on a Mac, or `device =
    # torch.device(cli.device)`: the run on the accelerator that one of its bindings names is the
    # one where samplers fail
    values = (bindings(ctx, node.value, node) or []) if type(node) is cst.Name else [node]
    kinds = sorted({device_type_of(ctx, value) or "cpu" for value in values if value is not node} - {"cpu"})
    if kinds:
        return DefaultDevice(ACCELERATOR_DEFAULT, kinds[0], setter)
    for value in values:
        setting = _settings_device(ctx, _device_argument(ctx, value))
        if setting is not None:
            # `torch.set_default_device(args.device)`: the run the setting exists for is on the GPU
            return DefaultDevice(ACCELERATOR_DEFAULT, setting, setter)
    return DefaultDevice(UNKNOWN_DEFAULT, "?", setter)


def _device_argument(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression:
    """`x` for `torch.device(x)`, else the node itself."""
    if type(node) is cst.Call and ctx.qualified_name(node.func) == "torch.device" and len(node.args) == 1:
        return node.args[0].value
    return node


def _settings_device(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """`args.device`, `cfg.train.DEVICE`, `self.config["device"]`, `cli.device` of `cli =
    parser.parse_args()`: a device named by a setting. Its kind: the accelerator the file's own
    declared default names (`add_argument("--device", default="mps")`), else "cuda"."""
    if type(node) is cst.Attribute:
        key: str | None = node.attr.value
        holder = node.value
    elif type(node) is cst.Subscript and len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index:
        index = node.slice[0].slice.value
        value = literal_value(index) if type(index) is cst.SimpleString else None
        key = value if isinstance(value, str) else None
        holder = node.value
    else:
        return None
    if key is None or key.lower() != "device":
        return None
    parts: list[cst.BaseExpression] = []
    while isinstance(holder, (cst.Attribute, cst.Subscript)):
        parts.append(holder)
        holder = holder.value
    if type(holder) is not cst.Name:
        return None
    root = parts[-1] if holder.value == "self" and parts else holder
    name = root.attr.value if type(root) is cst.Attribute else root.value if type(root) is cst.Name else ""
    if name not in SETTINGS_NAMES and not (type(root) is cst.Name and _parsed_options(ctx, root)):
        return None
    declared = [literal_value(v) for v in configured_defaults(ctx, key) if type(v) is cst.SimpleString]
    kinds = sorted({_device_type(v) for v in declared if isinstance(v, str)} - {"cpu", ""})
    return kinds[0] if kinds else "cuda"


def _parsed_options(ctx: FileContext, name: cst.Name) -> bool:
    """`cli` bound to `parser.parse_args()` (or the first of `parse_known_args()`)."""
    for value in bindings(ctx, name.value, name) or ():
        if type(value) is cst.Subscript:
            value = value.value
        if type(value) is cst.Call and type(value.func) is cst.Attribute:
            if value.func.attr.value in ("parse_args", "parse_known_args"):
                return True
    return False


def _setter_argument(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    if ctx.qualified_name(call.func) not in DEFAULT_DEVICE_SETTERS:
        return None
    positional = [a for a in call.args if a.keyword is None and a.star == ""]
    if positional:
        return positional[0].value
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value in ("device", "t")), None)


class _Order:
    """Source order of the calls and `with` blocks in the file."""

    def __init__(self, ctx: FileContext) -> None:
        self.index = ctx.index

    def _rank(self, node: cst.CSTNode) -> int:
        return self.index.position(node) if type(node) in (cst.Call, cst.With) else -1

    def before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        return self._rank(a) < self._rank(b)


def _order(ctx: FileContext) -> _Order:
    return ctx.shared("default_device.order", _Order)


def _scope_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    return ctx.index.enclosing_function(node) or ctx.module


def _setters_by_scope(ctx: FileContext) -> dict[int, list[tuple[cst.Call, cst.BaseExpression]]]:
    """Setter calls with their argument, grouped by the function (or module) that runs them."""

    def build(c: FileContext) -> dict[int, list[tuple[cst.Call, cst.BaseExpression]]]:
        found: dict[int, list[tuple[cst.Call, cst.BaseExpression]]] = {}
        for call in c.index.of_type(cst.Call):
            argument = _setter_argument(c, call)
            if argument is not None:
                found.setdefault(id(_scope_of(c, call)), []).append((call, argument))
        return found

    return ctx.shared("default_device.setters", build)


def _under(ctx: FileContext, node: cst.CSTNode, root: cst.CSTNode) -> bool:
    return node is root or any(a is root for a in ctx.index.ancestors(node))


def _in_other_branch(ctx: FileContext, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether `a` and `b` sit in different branches of one `if` (only one of them runs)."""
    ancestors_of_a = {id(n) for n in ctx.index.ancestors(a)}
    for ancestor in ctx.index.ancestors(b):
        if id(ancestor) in ancestors_of_a:
            return type(ancestor) is cst.If and not (_under(ctx, a, ancestor.test) or _under(ctx, b, ancestor.test))
    return False


def _enclosing_with(ctx: FileContext, node: cst.CSTNode) -> DefaultDevice | None:
    """The innermost `with torch.device(...)` block around `node` within its function."""
    child = node
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return None
        if type(ancestor) is cst.With and child is ancestor.body:
            for item in reversed(ancestor.items):
                found = _block_default(ctx, item.item)
                if found is not None:
                    return found
        child = ancestor
    return None


def _block_default(ctx: FileContext, item: cst.BaseExpression) -> DefaultDevice | None:
    """What `with <item>:` makes the default device, where `item` is `torch.device(...)` (also
    read back from a container it was put in: `with box.device:`)."""
    expr = through_containers(ctx, item)
    setter: cst.CSTNode = expr
    if type(expr) is cst.Call and ctx.qualified_name(expr.func) != "torch.device":
        # `with on_gpu():` where the file's `on_gpu` returns `torch.device("cuda")`: the device it
        # returns, in the caller's words (the setter shown is the caller's call)
        expr = returned_call(ctx, expr) or expr
    if type(expr) is cst.Call and ctx.qualified_name(expr.func) == "torch.device" and expr.args:
        return default_set_by(ctx, expr.args[0].value, setter)
    return None


def _conditions(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode) -> tuple[tuple[int, int], ...]:
    """The conditional parts that `node` sits in below `scope`, outermost first: each `if` branch,
    loop body and `try` handler as (id of the statement, id of the part)."""
    parts: list[tuple[int, int]] = []
    child = node
    for ancestor in ctx.index.ancestors(node):
        if ancestor is scope:
            break
        if type(ancestor) in (cst.If, cst.For, cst.While, cst.Try, cst.ExceptHandler) and child is not getattr(
            ancestor, "test", None
        ):
            parts.append((id(ancestor), id(child)))
        child = ancestor
    return tuple(reversed(parts))


def _last_setter_before(ctx: FileContext, scope: cst.CSTNode, node: cst.CSTNode | None) -> DefaultDevice | None:
    """The default that `scope`'s setters leave in force before `node` (at its end when `node` is
    None). Setters on different paths (`if args.cuda: ...cuda... else: ...cpu...`) may each be
    the last one: an accelerator default on any path is in force (the run taking that path
    fails); a later setter replaces an earlier one only when it runs whenever that one did."""
    setters = _setters_by_scope(ctx).get(id(scope), [])
    if not setters:
        return None
    order = _order(ctx)
    reaching = [
        (call, argument, _conditions(ctx, call, scope))
        for call, argument in setters
        if node is None or (order.before(call, node) and not _in_other_branch(ctx, call, node))
    ]
    last_on_some_path = [
        default_set_by(ctx, argument, call)
        for i, (call, argument, where) in enumerate(reaching)
        if not any(where[: len(later)] == later for _, _, later in reaching[i + 1 :])
    ]
    for state in (ACCELERATOR_DEFAULT, UNKNOWN_DEFAULT, CPU_DEFAULT):
        found = [d for d in last_on_some_path if d.state == state]
        if found:
            return found[-1]
    return None


def _module_functions(ctx: FileContext) -> dict[str, cst.FunctionDef]:
    return ctx.shared(
        "default_device.module_functions",
        lambda c: {d.name.value: d for d in c.module.body if type(d) is cst.FunctionDef},
    )


def _own_method(owner: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    if type(owner.body) is not cst.IndentedBlock:
        return None
    return next((d for d in owner.body.body if type(d) is cst.FunctionDef and d.name.value == name), None)


def _same_file_callee(ctx: FileContext, call: cst.Call) -> cst.FunctionDef | None:
    """The function of this file that `helper(...)`, `self.helper(...)` or `obj.method(...)` on
    an instance of a class of the file (`trainer = Trainer(...)`, then `trainer.train()`) calls,
    if any."""
    func = call.func
    if type(func) is cst.Name:
        return _module_functions(ctx).get(func.value)
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
        owner = ctx.index.enclosing_class(call)
        return _own_method(owner, func.attr.value) if owner is not None else None
    if type(func) is cst.Attribute and type(func.value) is cst.Name:
        return callee(ctx, call, handed=False)
    return None


def _imported_setter(ctx: FileContext, call: cst.Call) -> DefaultDevice | None:
    """The accelerator default an imported project function leaves in force
    (`init_env(args)` of `lib/env.py` calling `torch.set_default_tensor_type(...)`), the call
    standing for its setter."""
    spelled = dotted_name(call.func)
    helper = ctx.project.helpers.get(spelled) if spelled is not None else None
    if helper is None or not helper.uses.default_device:
        return None
    return DefaultDevice(ACCELERATOR_DEFAULT, helper.uses.default_device, call)


def _set_by_earlier_helper(ctx: FileContext, scope: cst.CSTNode, node: cst.CSTNode | None) -> DefaultDevice | None:
    """A default set by a helper that `scope` calls before `node` (`setup_device()` of this file
    or an imported one; anywhere in `scope` when `node` is None)."""
    imported = any(helper.uses.default_device for helper in ctx.project.helpers.values())
    if not _setters_by_scope(ctx) and not imported:
        return None
    order = _order(ctx)
    chosen: DefaultDevice | None = None
    for call in ctx.index.walk(scope):
        if type(call) is not cst.Call or _scope_of(ctx, call) is not scope:
            continue
        if node is not None and not order.before(call, node):
            continue
        callee = _same_file_callee(ctx, call)
        if callee is not None and callee is not scope:
            chosen = _last_setter_before(ctx, callee, None) or chosen
        elif imported:
            chosen = _imported_setter(ctx, call) or chosen
    return chosen


def calls_under_accelerator_blocks(ctx: FileContext) -> dict[int, list[tuple[cst.Call, DefaultDevice]]]:
    """Same-file functions called inside a `with torch.device("cuda"):` block: the function's id ->
    each such call with the block's default (memoised)."""

    def build(c: FileContext) -> dict[int, list[tuple[cst.Call, DefaultDevice]]]:
        found: dict[int, list[tuple[cst.Call, DefaultDevice]]] = {}
        for block in c.index.of_type(cst.With):
            device = next((made for item in block.items if (made := _block_default(c, item.item))), None)
            if device is None or device.state != ACCELERATOR_DEFAULT:
                continue
            for call in c.index.walk(block.body):
                if type(call) is not cst.Call or _enclosing_with(c, call) != device:
                    continue  # inside a nested function or a nested device block
                callee = _same_file_callee(c, call)
                if callee is not None:
                    found.setdefault(id(callee), []).append((call, device))
        return found

    return ctx.shared("default_device.called_under_blocks", build)


def only_called_under_accelerator_blocks(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether the function `node` runs in is called in the file, and every such call is inside a
    `with torch.device("cuda"):` block (`restore_rng(path)` from the block that builds the run):
    its factories build on the accelerator, whatever `default_device_at` says of other callers."""
    blocks = calls_under_accelerator_blocks(ctx)
    if not blocks:
        return False  # (cheap: no device block calls a function of the file)
    scope = _scope_of(ctx, node)
    under = blocks.get(id(scope)) if scope is not ctx.module else None
    if not under:
        return False
    counts: dict[int, int] = ctx.shared("default_device.call_counts", _call_counts)
    return counts.get(id(scope), 0) == len(under)


def _call_counts(ctx: FileContext) -> dict[int, int]:
    """How many same-file calls each function of the file has (the function's id -> count)."""
    counts: dict[int, int] = {}
    for call in ctx.index.of_type(cst.Call):
        callee_def = _same_file_callee(ctx, call)
        if callee_def is not None:
            counts[id(callee_def)] = counts.get(id(callee_def), 0) + 1
    return counts


def _callers(ctx: FileContext) -> dict[int, list[cst.Call]]:
    """Same-file calls of each function of the file (the function's id -> its call sites)."""

    def build(c: FileContext) -> dict[int, list[cst.Call]]:
        found: dict[int, list[cst.Call]] = {}
        if not _setters_by_scope(c):
            return found  # only asked for when a setter exists
        for call in c.index.of_type(cst.Call):
            callee = _same_file_callee(c, call)
            if callee is not None:
                found.setdefault(id(callee), []).append(call)
        return found

    return ctx.shared("default_device.callers", build)


def _set_by_every_caller(ctx: FileContext, scope: cst.CSTNode, depth: int) -> DefaultDevice | None:
    """The accelerator default that every same-file caller of `scope` has in force at the call
    (`main()` sets it, then calls `build_loaders()`); UNKNOWN where only some callers have it."""
    calls = [c for c in _callers(ctx).get(id(scope), []) if _scope_of(ctx, c) is not scope]
    if not calls or depth >= 3:
        return None
    defaults = [default_device_at(ctx, call, depth + 1) for call in calls]
    accelerated = [d for d in defaults if d.state == ACCELERATOR_DEFAULT]
    if not accelerated:
        return None
    return accelerated[0] if len(accelerated) == len(defaults) else UNKNOWN


def default_device_at(ctx: FileContext, node: cst.CSTNode, depth: int = 0) -> DefaultDevice:
    """The default device when `node` runs, as far as this file shows."""
    found = _enclosing_with(ctx, node)
    if found is not None:
        return found
    scope = _scope_of(ctx, node)
    if scope is not ctx.module:
        found = _last_setter_before(ctx, scope, node) or _set_by_earlier_helper(ctx, scope, node)
        if found is not None:
            return found
        owner = ctx.index.enclosing_class(scope)
        if owner is not None and type(owner.body) is cst.IndentedBlock:
            for method in owner.body.body:
                if type(method) is cst.FunctionDef and method is not scope and method.name.value in RUN_FIRST_METHODS:
                    found = _last_setter_before(ctx, method, None) or _set_by_earlier_helper(ctx, method, None) or found
            if found is not None:
                return found
        if id(scope) in calls_under_accelerator_blocks(ctx):
            return UNKNOWN  # it also runs inside a caller's `with torch.device(...)` block
        found = _set_by_every_caller(ctx, scope, depth)
        if found is not None:
            return found
        # Functions run after the module's top level (usually from its `__main__` block),
        # including what the helpers it calls set (`device = get_default_device()`).
        found = _last_setter_before(ctx, ctx.module, None) or _set_by_earlier_helper(ctx, ctx.module, None)
    else:
        found = _last_setter_before(ctx, ctx.module, node) or _set_by_earlier_helper(ctx, ctx.module, node)
    if found is not None:
        return found
    # The file sets an accelerator default somewhere this call may run after (another function,
    # a caller): the default here is not known.
    return UNKNOWN if sets_accelerator_default(ctx) else NO_DEFAULT
