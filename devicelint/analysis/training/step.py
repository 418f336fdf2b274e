"""The order of a training step inside one function (or the module's top level).

A step is autocast block -> loss -> backward -> (scaler.unscale_ -> clip) -> step -> update.
For each scope this module records, in source order, the autocast blocks with the device
types and dtypes they may run with, the backward calls, the GradScaler calls, the clipping
calls and the plain optimizer steps, so that the DL3xx rules only compare positions. It is
about order and dtypes, not about where values live: that is the placement interpreter's job
(`devicelint.analysis.placement`).

Everything here is deliberately conservative: a value the analysis cannot follow is "unknown"
and rules stay silent on unknowns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.index import iter_children
from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.syntax import (
    enclosing_ifs, has_star, is_false, is_true, keyword, last_word, method_name, positional, receiver,
    scope_of, test_words, text_of,
)
from devicelint.context import FileContext

UNKNOWN = "?"
# Autocast context managers -> the device type they imply (None: given by the first argument).
AUTOCAST = {
    "torch.autocast": None,
    "torch.amp.autocast": None,
    "torch.amp.autocast_mode.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}
GRAD_SCALERS = frozenset(
    {
        "torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler", "torch.cpu.amp.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
CLIPPERS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_", "torch.nn.utils.clip_grad.clip_grad_norm",
    }
)
DTYPES = {
    "torch.float16": "float16", "torch.half": "float16", "torch.bfloat16": "bfloat16",
    "torch.float32": "float32", "torch.float": "float32",
}
SCALER_METHODS = ("scale", "unscale_", "step", "update")
# Words in an `if` test that make its branch the mixed-precision (or the fp32) alternative.
AMP_WORDS = ("amp", "16", "half", "scal", "mixed", "precision", "autocast", "dtype")
SCHEDULER_WORDS = ("sched", "lr", "warmup", "env", "swa")


@dataclass(frozen=True)
class Autocast:
    """One `with` block that enters autocast."""

    node: cst.With
    expr: cst.BaseExpression  # the with-item: the autocast call or the name holding it
    devices: frozenset[str]  # "cuda", "cpu", ... or UNKNOWN
    dtypes: frozenset[str]  # "float16", "bfloat16", "float32" or UNKNOWN
    enabled: bool | None  # False only for a literal `enabled=False`
    # No dtype given: autocast's default for the device type (float16 on CUDA, bfloat16 on the CPU).
    default_dtype: bool = False
    # The device-type argument as written (`"cuda"`, `device.type`), for messages.
    device_text: str | None = None

    @property
    def may_run_float16(self) -> bool:
        """float16 is a possible dtype (explicit, or the CUDA default) on a device that is not only the CPU."""
        return self.enabled is not False and "float16" in self.dtypes and bool(self.devices & {"cuda", UNKNOWN})


@dataclass
class Scope:
    """Facts about one function body (or the module top level), in source order."""

    node: cst.CSTNode
    autocasts: list[Autocast] = field(default_factory=list)
    backwards: list[cst.Call] = field(default_factory=list)  # `t.backward()`, scaled or not
    # `accelerator.backward(loss)`, `engine.backward(loss)`: a framework scales and steps.
    delegated_backwards: list[cst.Call] = field(default_factory=list)
    scaler_calls: dict[str, list[cst.Call]] = field(default_factory=dict)
    optimizer_steps: list[cst.Call] = field(default_factory=list)  # plain `opt.step()`
    clips: list[cst.Call] = field(default_factory=list)


# ----------------------------------------------------------------------------- values


def _record_target(assigned: dict, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _record_target(assigned, element.value, None)
        return
    if isinstance(target, cst.StarredElement):
        _record_target(assigned, target.value, None)
        return
    text = dotted_name(target)
    if text is not None:
        assigned.setdefault(text, []).append(value)


def assignments(ctx: FileContext) -> dict[int, dict[str, list[cst.BaseExpression | None]]]:
    """id(scope) -> target text -> the values assigned to it there (None: not followable)."""

    def build(c: FileContext) -> dict[int, dict[str, list[cst.BaseExpression | None]]]:
        table: dict[int, dict[str, list[cst.BaseExpression | None]]] = {}
        for node in c.index.of_type(cst.Assign):
            scope = table.setdefault(id(scope_of(c, node)), {})
            for target in node.targets:
                _record_target(scope, target.target, node.value)
        for node in c.index.of_type(cst.AnnAssign):
            if node.value is not None:
                _record_target(table.setdefault(id(scope_of(c, node)), {}), node.target, node.value)
        for node in c.index.of_type(cst.AugAssign):
            _record_target(table.setdefault(id(scope_of(c, node)), {}), node.target, None)
        for node in c.index.of_type(cst.For):
            _record_target(table.setdefault(id(scope_of(c, node)), {}), node.target, None)
        for node in c.index.of_type(cst.FunctionDef):
            own = table.setdefault(id(node), {})
            for param in (*node.params.params, *node.params.kwonly_params, *node.params.posonly_params):
                own.setdefault(param.name.value, []).append(None)
        return table

    return ctx.shared("training.step.assignments", build)


def values_of(ctx: FileContext, name: str, scope: cst.CSTNode) -> list[cst.BaseExpression | None] | None:
    """The values assigned to `name` in its scope, else at module level; None when never assigned."""
    table = assignments(ctx)
    local = table.get(id(scope), {}).get(name)
    if local is not None:
        return local
    if scope is not ctx.module:
        return table.get(id(ctx.module), {}).get(name)
    return None


def attribute_values(ctx: FileContext, node: cst.BaseExpression) -> list[cst.BaseExpression | None] | None:
    """The values assigned to `self.x` in any method of the file; None for other expressions."""
    text = dotted_name(node) if isinstance(node, cst.Attribute) else None
    if text is None or not text.startswith("self.") or text.count(".") != 1:
        return None
    return [v for table in assignments(ctx).values() for v in table.get(text, [])] or None


def _resolve(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode, leaf, depth: int = 0) -> frozenset[str]:  # type: ignore[no-untyped-def]
    """Possible values of `node` through names, conditionals and dict look-ups; `leaf` reads one."""
    if depth > 8:
        return frozenset({UNKNOWN})
    direct = leaf(node)
    if direct is not None:
        return frozenset({direct})
    if isinstance(node, cst.IfExp):
        return _resolve(ctx, node.body, scope, leaf, depth + 1) | _resolve(ctx, node.orelse, scope, leaf, depth + 1)
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Dict):
        out: frozenset[str] = frozenset()
        for element in node.value.elements:
            if isinstance(element, cst.DictElement):
                out |= _resolve(ctx, element.value, scope, leaf, depth + 1)
            else:
                out |= {UNKNOWN}
        return out or frozenset({UNKNOWN})
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name):
        values = values_of(ctx, node.value.value, scope)
        if values and all(isinstance(v, cst.Dict) for v in values):
            return _resolve(ctx, node.with_changes(value=values[0]), scope, leaf, depth + 1)
        return frozenset({UNKNOWN})
    if (isinstance(node, cst.Name) and ctx.qualified_name(node) is None) or isinstance(node, cst.Attribute):
        values = values_of(ctx, node.value, scope) if isinstance(node, cst.Name) else attribute_values(ctx, node)
        if not values:
            return frozenset({UNKNOWN})
        out = frozenset()
        for value in values:
            if value is None:
                out |= {UNKNOWN}
                continue
            # `self.x = ...` is read in the scope that assigned it.
            where = scope if isinstance(node, cst.Name) else scope_of(ctx, value)
            out |= _resolve(ctx, value, where, leaf, depth + 1)
        return out
    return frozenset({UNKNOWN})


def possible_dtypes(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode) -> frozenset[str]:
    return _resolve(ctx, node, scope, lambda n: DTYPES.get(ctx.qualified_name(n) or ""))


def _device_leaf(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        if isinstance(value, str):
            return value.split(":", 1)[0]
    return None


def possible_devices(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode) -> frozenset[str]:
    return _resolve(ctx, node, scope, _device_leaf)


# ----------------------------------------------------------------------------- autocast


def autocast_call(ctx: FileContext, expr: cst.BaseExpression, scope: cst.CSTNode, depth: int = 0) -> cst.Call | None:
    """The autocast call a with-item enters: directly, or through a name (`ctx = autocast(...)`)."""
    if isinstance(expr, cst.Call) and ctx.qualified_name(expr.func) in AUTOCAST:
        return expr
    if depth > 3:
        return None
    if isinstance(expr, cst.IfExp):
        return autocast_call(ctx, expr.body, scope, depth + 1) or autocast_call(ctx, expr.orelse, scope, depth + 1)
    if isinstance(expr, (cst.Name, cst.Attribute)):
        values = values_of(ctx, expr.value, scope) if isinstance(expr, cst.Name) else attribute_values(ctx, expr)
        for value in values or ():
            if value is not None:
                found = autocast_call(ctx, value, scope_of(ctx, value), depth + 1)
                if found is not None:
                    return found
    return None


def describe_autocast(ctx: FileContext, with_node: cst.With, expr: cst.BaseExpression, call: cst.Call, scope: cst.CSTNode) -> Autocast:
    implied = AUTOCAST[ctx.qualified_name(call.func) or ""]
    args = positional(call)
    if implied is None:  # torch.autocast(device_type, dtype=None, enabled=True)
        device_node = keyword(call, "device_type") or (args[0] if args else None)
        devices = possible_devices(ctx, device_node, scope) if device_node is not None else frozenset({UNKNOWN})
        dtype_node = keyword(call, "dtype") or (args[1] if len(args) > 1 else None)
        enabled_node = keyword(call, "enabled") or (args[2] if len(args) > 2 else None)
    else:  # torch.cuda.amp.autocast(enabled=True, dtype=torch.float16)
        devices = frozenset({implied})
        enabled_node = keyword(call, "enabled") or (args[0] if args else None)
        dtype_node = keyword(call, "dtype") or (args[1] if len(args) > 1 else None)
    if dtype_node is not None:
        dtypes = possible_dtypes(ctx, dtype_node, scope)
    elif has_star(call):
        dtypes = frozenset({UNKNOWN})
    else:
        dtypes = frozenset(d for device in devices for d in _default_dtypes(device))
    enabled = False if is_false(enabled_node) else (True if enabled_node is None or is_true(enabled_node) else None)
    device_text = ctx.code_for(device_node) if implied is None and device_node is not None else implied
    return Autocast(with_node, expr, devices, dtypes, enabled, dtype_node is None and not has_star(call), device_text)


def _default_dtypes(device: str) -> tuple[str, ...]:
    """autocast's dtype when none is given: float16 on CUDA, bfloat16 on the CPU. For a device type
    the file does not spell out (`device.type`, `str(device)`), float16 is what a training script
    gets on the CUDA machine it is written for, so it counts, next to the unknown."""
    if device == "cuda":
        return ("float16",)
    if device == "cpu":
        return ("bfloat16",)
    if device == UNKNOWN:
        return ("float16", UNKNOWN)
    return (UNKNOWN,)


# ----------------------------------------------------------------------------- scalers, optimizers


def scaler_names(ctx: FileContext) -> frozenset[str]:
    """Targets (`scaler`, `self.scaler`) assigned a GradScaler anywhere in the file."""

    def build(c: FileContext) -> frozenset[str]:
        names = set()
        for scope in assignments(c).values():
            for target, values in scope.items():
                for value in values:
                    if isinstance(value, cst.IfExp):
                        value = value.body if isinstance(value.body, cst.Call) else value.orelse
                    if isinstance(value, cst.Call) and c.qualified_name(value.func) in GRAD_SCALERS:
                        names.add(target)
        return frozenset(names)

    return ctx.shared("training.step.scalers", build)


def is_scaler(ctx: FileContext, node: cst.BaseExpression | None) -> bool:
    if node is None:
        return False
    text = text_of(node)
    if text is None:
        return isinstance(node, cst.Call) and ctx.qualified_name(node.func) in GRAD_SCALERS
    return text in scaler_names(ctx) or "scaler" in text.rsplit(".", 1)[-1].lower()


def proven_scaler(ctx: FileContext, node: cst.BaseExpression | None) -> bool:
    """A scaler built from `GradScaler(...)` in this file, or one that scales or unscales somewhere."""

    def build(c: FileContext) -> frozenset[str]:
        used = set(scaler_names(c))
        for call in c.index.of_type(cst.Call):
            if method_name(call) in ("scale", "unscale_") and positional(call):
                text = text_of(call.func.value)  # type: ignore[attr-defined]
                if text is not None and "scaler" in text.rsplit(".", 1)[-1].lower():
                    used.add(text)
        return frozenset(used)

    text = text_of(node) if node is not None else None
    return text is not None and text in ctx.shared("training.step.proven_scalers", build)


def looks_like_optimizer(node: cst.BaseExpression | None) -> bool:
    word = last_word(node)
    if not word or any(w in word for w in SCHEDULER_WORDS) or "scaler" in word:
        return False
    return "optim" in word or word.startswith("opt") or word.endswith("opt")


def scaled_backward(ctx: FileContext, call: cst.Call) -> bool:
    """`scaler.scale(loss).backward()`."""
    inner = receiver(call)
    return isinstance(inner, cst.Call) and method_name(inner) == "scale" and is_scaler(ctx, receiver(inner))


def training_scopes(ctx: FileContext) -> list[Scope]:
    """Every scope that calls `.backward()` or a GradScaler method, with its step facts."""

    def build(c: FileContext) -> list[Scope]:
        scopes: dict[int, Scope] = {}
        for call in c.index.of_type(cst.Call):
            name = method_name(call)
            if name is None:
                if c.qualified_name(call.func) in CLIPPERS:
                    _scope(c, scopes, call).clips.append(call)
                continue
            owner = receiver(call)
            if name == "backward" and not positional(call) and not has_star(call):
                _scope(c, scopes, call).backwards.append(call)
            elif name == "backward" and len(positional(call)) == 1:
                _scope(c, scopes, call).delegated_backwards.append(call)
            elif name in SCALER_METHODS and is_scaler(c, owner):
                if name == "update" or positional(call):
                    _scope(c, scopes, call).scaler_calls.setdefault(name, []).append(call)
            elif name == "step" and looks_like_optimizer(owner):
                _scope(c, scopes, call).optimizer_steps.append(call)
            elif c.qualified_name(call.func) in CLIPPERS:
                _scope(c, scopes, call).clips.append(call)
        for with_node in c.index.of_type(cst.With):
            scope_node = scope_of(c, with_node)
            scope = scopes.get(id(scope_node))
            if scope is None:
                continue
            for item in with_node.items:
                found = autocast_call(c, item.item, scope_node)
                if found is not None:
                    scope.autocasts.append(describe_autocast(c, with_node, item.item, found, scope_of(c, found)))
                    break
        return list(scopes.values())

    return ctx.shared("training.step.scopes", build)


def _scope(ctx: FileContext, scopes: dict[int, Scope], node: cst.CSTNode) -> Scope:
    owner = scope_of(ctx, node)
    scope = scopes.get(id(owner))
    if scope is None:
        scope = scopes[id(owner)] = Scope(owner)
    return scope


def order(ctx: FileContext) -> dict[int, int]:
    """id(call) -> its rank in source order."""
    return ctx.shared("training.step.order", lambda c: {id(n): i for i, n in enumerate(c.index.of_type(cst.Call))})


def names_assigned_in(ctx: FileContext, block: cst.CSTNode) -> set[str]:
    """Targets assigned inside `block` (assignments, augmented, for targets, with-as)."""
    out: dict[str, list] = {}
    for node in ctx.index.walk(block):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                _record_target(out, target.target, node.value)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            _record_target(out, node.target, None)
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            _record_target(out, node.asname.name, None)
    return set(out)




def amp_gated(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    """Whether `node` only runs under (or instead of) a mixed-precision switch."""
    for branch, _ in enclosing_ifs(ctx, node, scope):
        words = test_words(ctx, branch.test)
        if any(w in words for w in AMP_WORDS):
            return True
    return False


def backpropagated(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """The loss a backward call backpropagates: `loss` in `loss.backward(retain_graph=True)`,
    `scaler.scale(loss).backward()` and `accelerator.backward(loss)`."""
    args = positional(call)
    if args and method_name(call) == "backward" and receiver(call) is not None and not _is_tensor_backward(ctx, call):
        return args[0]
    loss = receiver(call)
    if isinstance(loss, cst.Call) and method_name(loss) == "scale" and positional(loss):
        return positional(loss)[0]
    return loss


def _is_tensor_backward(ctx: FileContext, call: cst.Call) -> bool:
    """`loss.backward(gradient)`: a tensor's own backward with a positional gradient, told apart from
    `accelerator.backward(loss)` only by the receiver's name."""
    word = last_word(receiver(call))
    return "loss" in word or word in ("out", "output", "outputs", "y", "pred")


def computed_from(ctx: FileContext, root: cst.CSTNode, seeds: set[str]) -> set[str]:
    """`seeds` and every name assigned under `root` from an expression that reads one of them
    (def-use, to a fixed point, ignoring order). Reads through a host copy (`loss.item()`,
    `float(x)`) do not count: their result is a Python number, not the value."""
    flows: list[tuple[set[str], set[str]]] = []
    for node in ctx.index.walk(root):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            names = {n for t in targets for n in _names_of(t)}
            flows.append((names, read_names(ctx, node.value)))
    found = set(seeds)
    changed = True
    while changed:
        changed = False
        for targets, reads in flows:
            if reads & found and not targets <= found:
                found |= targets
                changed = True
    return found


def _names_of(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _names_of(e.value)]
    if isinstance(target, cst.StarredElement):
        return _names_of(target.value)
    text = dotted_name(target)
    return [text] if text is not None else []


HOST_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})
HOST_BUILTINS = frozenset({"float", "int", "bool", "len", "str", "print", "isinstance", "repr", "round"})


# Tensor metadata: host values that reading never waits for (`x.shape[0]`, `x.size(1)`).
METADATA_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "requires_grad", "is_cuda", "layout", "names"})
METADATA_METHODS = frozenset({"size", "dim", "numel", "element_size", "get_device", "is_contiguous", "nelement", "stride"})


def is_host_value(call: cst.Call) -> bool:
    """A call whose result is a Python or NumPy value, not a tensor."""
    if method_name(call) in HOST_METHODS:
        return True
    return isinstance(call.func, cst.Name) and call.func.value in HOST_BUILTINS


def read_names(ctx: FileContext, root: cst.CSTNode, skip_moves: bool = False) -> set[str]:
    """Names (and `self.x` attributes) an expression reads as data, leaving out called functions,
    keywords, imported modules and values read only through a host copy; with `skip_moves`, also
    values read only to be moved (`y` in `y.to(device)`)."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and is_host_value(node):
            continue
        if skip_moves and isinstance(node, cst.Call) and method_name(node) in ("to", "cuda"):
            continue
        if isinstance(node, cst.Call) and method_name(node) in METADATA_METHODS:
            continue
        if isinstance(node, cst.Attribute) and node.attr.value in METADATA_ATTRS:
            continue
        if isinstance(node, cst.Name):
            names.add(node.value)
        elif isinstance(node, cst.Attribute):
            text = dotted_name(node)
            if text is not None and text.startswith("self.") and text.count(".") == 1:
                names.add(text)
            stack.append(node.value)
        elif isinstance(node, cst.Arg):
            stack.append(node.value)
        elif isinstance(node, cst.Call):
            func = node.func
            # `model(x)` and `F.mse_loss(...)` name functions, not data; `out.argmax()` reads `out`.
            if isinstance(func, cst.Attribute) and ctx.qualified_name(func) is None:
                stack.append(func.value)
            stack.extend(node.args)
        elif isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        else:
            stack.extend(iter_children(node))
    names.discard("self")
    names.discard("cls")
    return names
