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
from typing import TYPE_CHECKING

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.effects import effects_of_call, named_unscale
from devicelint.analysis.training.helpers import bound_arguments, calls_of, handed_instance_attribute
from devicelint.analysis.training.step_parts import (  # re-exported for the rules
    CLIPPERS as CLIPPERS,
)
from devicelint.analysis.training.step_parts import (
    GRAD_SCALERS as GRAD_SCALERS,
)
from devicelint.analysis.training.step_parts import (
    _disabled_scaler as _disabled_scaler,
)
from devicelint.analysis.training.step_parts import (
    disabled_scalers as disabled_scalers,
)
from devicelint.analysis.training.step_parts import (
    is_clipper as is_clipper,
)
from devicelint.analysis.training.step_parts import (
    is_disabled_scaler as is_disabled_scaler,
)
from devicelint.analysis.training.step_parts import (
    is_scaler as is_scaler,
)
from devicelint.analysis.training.step_parts import (
    looks_like_optimizer as looks_like_optimizer,
)
from devicelint.analysis.training.step_parts import (
    proven_scaler as proven_scaler,
)
from devicelint.analysis.training.step_parts import (
    scaled_backward as scaled_backward,
)
from devicelint.analysis.training.step_parts import (
    scaler_names as scaler_names,
)
from devicelint.analysis.training.syntax import (
    body_nodes,
    enclosing_ifs,
    has_star,
    inside,
    is_false,
    is_true,
    keyword,
    last_word,
    method_name,
    positional,
    receiver,
    scope_of,
    test_words,
)
from devicelint.analysis.training.values import (
    UNKNOWN,
    _record_target,
    attribute_values,
    possible_devices,
    possible_dtypes,
    values_of,
)
from devicelint.context import FileContext

if TYPE_CHECKING:
    from devicelint.analysis.training.effects import Effect

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
SCALER_METHODS = ("scale", "unscale_", "step", "update")
# Words in an `if` test that make its branch the mixed-precision (or the fp32) alternative.
AMP_WORDS = ("amp", "16", "half", "scal", "mixed", "precision", "autocast", "dtype")


@dataclass(frozen=True)
class Autocast:
    """One `with` block that enters autocast, or a function decorated with it
    (`@torch.autocast("cuda")` on a module's `forward`)."""

    node: cst.With | cst.FunctionDef
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
    # Calls of the file's own functions that scale, backpropagate, unscale, clip, step or update
    # (`clip_gradients(model)`, `self.optimizer_step()`), with what they do (`helpers.effects`).
    helper_calls: list[tuple[cst.Call, tuple[Effect, ...]]] = field(default_factory=list)


# ----------------------------------------------------------------------------- autocast


def autocast_call(ctx: FileContext, expr: cst.BaseExpression, scope: cst.CSTNode, depth: int = 0) -> cst.Call | None:
    """The autocast call a with-item enters: directly, or through a name (`ctx = autocast(...)`)."""
    if type(expr) is cst.Call and ctx.qualified_name(expr.func) in AUTOCAST:
        return expr
    if depth > 3:
        return None
    if type(expr) is cst.IfExp:
        return autocast_call(ctx, expr.body, scope, depth + 1) or autocast_call(ctx, expr.orelse, scope, depth + 1)
    if type(expr) in (cst.Name, cst.Attribute):
        values = values_of(ctx, expr.value, scope) if type(expr) is cst.Name else attribute_values(ctx, expr)
        for value in values or ():
            if value is not None:
                found = autocast_call(ctx, value, scope_of(ctx, value), depth + 1)
                if found is not None:
                    return found
    if type(expr) is cst.Call:
        function = _entered_function(ctx, expr, scope)
        if function is not None:
            return _autocast_of_context_function(ctx, function, depth + 1)
    return None


def _entered_function(ctx: FileContext, call: cst.Call, scope: cst.CSTNode) -> cst.FunctionDef | None:
    """The function of the file a with-item's call runs: `self._amp_context()`, `train_ctx()`,
    or a name bound to what a factory returns (`ctx_fn = get_train_context(cfg)`; `with
    ctx_fn():`) when the factory returns a def of its own body."""
    from devicelint.analysis.training.helpers import callee  # helpers builds on this module

    found = callee(ctx, call)
    if found is not None or type(call.func) is not cst.Name:
        return found
    for value in values_of(ctx, call.func.value, scope) or ():
        factory = callee(ctx, value) if type(value) is cst.Call else None
        if factory is None:
            continue
        nested = (
            {s.name.value: s for s in factory.body.body if type(s) is cst.FunctionDef}
            if type(factory.body) is cst.IndentedBlock
            else {}
        )
        for node in body_nodes(factory):
            if type(node) is cst.Return and type(node.value) is cst.Name and node.value.value in nested:
                return nested[node.value.value]
    return None


def _autocast_of_context_function(ctx: FileContext, function: cst.FunctionDef, depth: int) -> cst.Call | None:
    """The autocast a function's call enters as a context manager: one it returns (`return
    torch.autocast(...)`, on some path), or, for a `@contextmanager` generator, one it enters
    before it yields (`with torch.autocast(...): yield`, `stack.enter_context(torch.autocast(...))`)."""
    generator = any(dotted_name(d.decorator) in _CONTEXT_MANAGER_DECORATORS for d in function.decorators)
    for node in body_nodes(function):
        if type(node) is cst.Return and node.value is not None:
            found = autocast_call(ctx, node.value, function, depth)
            if found is not None:
                return found
        elif generator and type(node) is cst.With:
            for item in node.items:
                found = autocast_call(ctx, item.item, function, depth)
                if found is not None and any(type(n) is cst.Yield for n in body_nodes(node.body)):
                    return found
        elif generator and type(node) is cst.Call and method_name(node) == "enter_context" and node.args:
            found = autocast_call(ctx, node.args[0].value, function, depth)
            if found is not None:
                return found
    return None


_CONTEXT_MANAGER_DECORATORS = frozenset({"contextmanager", "contextlib.contextmanager"})


def describe_autocast(
    ctx: FileContext,
    with_node: cst.With | cst.FunctionDef,
    expr: cst.BaseExpression,
    call: cst.Call,
    scope: cst.CSTNode,
) -> Autocast:
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
        # `owner.amp_dtype` in a helper handed the trainer is the trainer's `self.amp_dtype`
        dtype_node = handed_instance_attribute(ctx, dtype_node) or dtype_node
        dtypes = possible_dtypes(ctx, dtype_node, scope)
        if dtypes == {UNKNOWN}:
            dtypes = _through_callers(ctx, dtype_node, scope) or dtypes
    elif has_star(call):
        dtypes = frozenset({UNKNOWN})
    else:
        dtypes = frozenset(d for device in devices for d in _default_dtypes(device))
    enabled = False if is_false(enabled_node) else (True if enabled_node is None or is_true(enabled_node) else None)
    device_text = ctx.code_for(device_node) if implied is None and device_node is not None else implied
    return Autocast(with_node, expr, devices, dtypes, enabled, dtype_node is None and not has_star(call), device_text)


def returned_under_autocast(ctx: FileContext, func: cst.FunctionDef) -> Autocast | None:
    """The autocast block `func` returns its result from: a `return` inside the block, or a
    returned name assigned inside it (`with autocast(...): loss = ...` then `return loss`)."""
    returns = [n for n in body_nodes(func.body) if type(n) is cst.Return and n.value is not None]
    if not returns:
        return None
    for node in body_nodes(func.body):
        if type(node) is not cst.With:
            continue
        for item in node.items:
            found = autocast_call(ctx, item.item, func)
            if found is None:
                continue
            assigned = names_assigned_in(ctx, node.body)
            for ret in returns:
                if inside(ctx, ret, node) or any(
                    type(n) is cst.Name and n.value in assigned
                    for n in ctx.index.walk(ret.value)  # type: ignore[arg-type]  # `returns` holds `return <value>` only
                ):
                    return describe_autocast(ctx, node, item.item, found, scope_of(ctx, found))
    return None


def decorated_autocast(ctx: FileContext, func: cst.FunctionDef) -> Autocast | None:
    """The autocast a function's decorator enters around every call of it
    (`@torch.autocast("cuda", dtype=torch.float16)`, `@torch.cuda.amp.autocast()`)."""
    for decorator in func.decorators:
        call = decorator.decorator
        if type(call) is cst.Call and ctx.qualified_name(call.func) in AUTOCAST:
            return describe_autocast(ctx, func, call, call, func)
    return None


def _through_callers(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode) -> frozenset[str] | None:
    """`cfg.amp_dtype` where `cfg` is a parameter the function never rebinds: the dtypes the
    same field has in what every call of the function hands it (`_Trainer().run(cfg)` from a
    function whose `cfg: TrainConfig` declares the field). None where no call is seen."""
    if type(node) is not cst.Attribute or type(node.value) is not cst.Name or type(scope) is not cst.FunctionDef:
        return None
    name = node.value.value
    params = scope.params
    if not any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
        return None
    found: set[str] = set()
    calls = calls_of(ctx, scope)
    for call in calls:
        given = (bound_arguments(ctx, scope, call) or {}).get(name)
        if given is None:
            return None
        found |= possible_dtypes(ctx, node.with_changes(value=given), scope_of(ctx, call))
    return frozenset(found) if calls else None


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


def training_scopes(ctx: FileContext) -> list[Scope]:
    """Every scope that calls `.backward()` or a GradScaler method, with its step facts."""

    def build(c: FileContext) -> list[Scope]:
        scopes: dict[int, Scope] = {}
        if not _has_step_calls(c):
            return []
        for call in c.index.of_type(cst.Call):
            name = method_name(call)
            if not is_clipper(c, call):
                found = effects_of_call(c, call)
                if found:
                    _scope(c, scopes, call).helper_calls.append((call, found))
                elif (
                    name is not None
                    and "unscale" in name.lower()
                    and not is_scaler(c, receiver(call))
                    and not _disabled_scaler(c, receiver(call))
                ):
                    # `self.strategy.unscale_gradients(opt)`: another object unscales, as its name says.
                    _scope(c, scopes, call).helper_calls.append((call, (named_unscale(call),)))
            if name is None:
                if is_clipper(c, call):
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
            elif name == "step" and (
                looks_like_optimizer(owner, c) or (_disabled_scaler(c, owner) and positional(call))
            ):
                # a disabled scaler's `step(opt)` is a plain `opt.step()`
                _scope(c, scopes, call).optimizer_steps.append(call)
            elif is_clipper(c, call):
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


# Every step operation, in a scope or a helper, is a call of one of these methods, a method
# named for unscaling, or a gradient clipper.
_STEP_METHODS = frozenset({*SCALER_METHODS, "backward"})


def _has_step_calls(ctx: FileContext) -> bool:
    """Whether the file makes any call a step operation could be: model code (most files of a
    model zoo) has none, and then no call needs its helpers followed."""
    if "clip_grad" in ctx.source:  # a clipper may be imported under another name
        return True
    if any(helper.uses.step_effects for helper in ctx.project.helpers.values()):
        return True  # a step helper of another project module (`backward_step(loss, opt)`)
    if any(cls.step_effects for cls in ctx.project.plain_classes.values()):
        return True  # a trainer class of another project module (`trainer.optimize_parameters()`)
    for call in ctx.index.of_type(cst.Call):
        name = method_name(call)
        if name is not None and (name in _STEP_METHODS or "unscale" in name.lower()):
            return True
    return False


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
    out: dict[str, list[cst.BaseExpression | None]] = {}
    for node in ctx.index.walk(block):
        if type(node) is cst.Assign:
            for target in node.targets:
                _record_target(out, target.target, node.value)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            _record_target(out, node.target, None)
        elif type(node) is cst.WithItem and node.asname is not None:
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
    if type(loss) is cst.Call and method_name(loss) == "scale" and positional(loss):
        return positional(loss)[0]
    return loss


def _is_tensor_backward(ctx: FileContext, call: cst.Call) -> bool:
    """`loss.backward(gradient)`: a tensor's own backward with a positional gradient, told apart from
    `accelerator.backward(loss)` only by the receiver's name."""
    word = last_word(receiver(call))
    return "loss" in word or word in ("out", "output", "outputs", "y", "pred")
