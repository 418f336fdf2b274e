"""What one function does to one model variable: its binding, moves, sub-module moves, escapes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.model_events.devices import (
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    Device,
    Placement,
    Resolver,
    chain_base,
    rebinds,
    resolver_for,
    strip_self_returning,
    trusted_constructor,
)
from devicelint.analysis.model_events.scopes import Scope, scope_facts, scope_of, statement_of
from devicelint.analysis.modules import builds_cpu_project_module, methods, module_classes
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext


@dataclass
class History:
    """What a scope does to one model variable, in source order."""

    var: str
    bind: cst.BaseExpression | None = None  # the expression last bound before the site
    origin: str | None = None  # class name when bound from an in-file module class
    trusted: bool = False  # bound from a constructor known to leave the model on the CPU
    moves: list[tuple[Device, cst.CSTNode]] = field(default_factory=list)
    sub_moves: dict[str, Placement] = field(default_factory=dict)
    escaped: bool = False


def history(ctx: FileContext, var: str, site: cst.CSTNode) -> History:
    """Binding, moves and escapes of `var` in the scope of `site`, before the statement of `site`."""
    scope = scope_facts(ctx, scope_of(ctx, site))
    return _history(ctx, var, scope, scope.order.get(id(statement_of(ctx, site)), len(scope.nodes)))


def _history(ctx: FileContext, var: str, scope: Scope, limit: int) -> History:
    resolver = resolver_for(ctx, scope.nodes[0])
    facts = History(var)
    classes = module_classes(ctx)
    for position, node in enumerate(scope.nodes):
        if position >= limit:
            break
        if type(node) is cst.Assign and len(node.targets) == 1:
            if _unpacks_kept(ctx, node, var):
                continue  # `model, optimizer = amp.initialize(model, optimizer)`: the same module, where it was
            key = dotted_name(node.targets[0].target)
            if key == var:
                # `model = parts["m"]` after `parts = {"m": model.to(dev)}`: what was put in
                base, device = chain_base(resolver, through_containers(ctx, node.value))
                same_var = dotted_name(base) == var or keeps_placement(ctx, base, var)
                if not same_var:
                    facts.bind, facts.origin, facts.trusted = node.value, None, False
                    facts.moves, facts.sub_moves, facts.escaped = [], {}, False
                    if type(base) is cst.Call:
                        callee = dotted_name(base.func) or ""
                        qualified = ctx.qualified_name(base.func) or ""
                        if callee in classes:
                            facts.origin, facts.trusted = callee, True
                        elif trusted_constructor(qualified) or builds_cpu_project_module(ctx, base):
                            facts.trusted = True
                if device is not None:
                    facts.moves.append((device, node))
                    facts.sub_moves.clear()
                continue
            if key is not None and key.startswith(var + ".") and key.count(".") == var.count(".") + 1:
                device = chain_base(resolver, node.value)[1]
                if device is not None:
                    attr = key.rsplit(".", 1)[1]
                    facts.sub_moves[attr] = Placement(attr, device, node)
            if dotted_name(node.value) == var:
                facts.escaped = True  # `other = model`: aliases are not followed
        elif type(node) is cst.Call:
            moved = resolver.move(node)
            if moved is not None:
                receiver = dotted_name(strip_self_returning(moved[0]))
                if receiver == var:
                    facts.moves.append((moved[1], node))
                    facts.sub_moves.clear()
                elif receiver and receiver.startswith(var + ".") and receiver.count(".") == var.count(".") + 1:
                    attr = receiver.rsplit(".", 1)[1]
                    facts.sub_moves[attr] = Placement(attr, moved[1], node)
                continue
            if facts.origin is not None and type(node.func) is cst.Attribute and dotted_name(node.func.value) == var:
                # `model.place()`: a method of the model's class that moves its submodules itself
                facts.sub_moves.update(_method_sub_moves(ctx, facts.origin, node.func.attr.value))
            if any(dotted_name(arg.value) == var for arg in node.args) and not _harmless_call(ctx, node):
                facts.escaped = True
        elif isinstance(node, (cst.Return, cst.Yield)) and node.value is not None:
            if _mentions(node.value, var):
                facts.escaped = True
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            if any(n.name.value == var for n in node.names):
                facts.escaped = True
    return facts


def _method_sub_moves(ctx: FileContext, class_name: str, method_name: str) -> dict[str, Placement]:
    """The submodules a method of a module class of the file moves to a stated device
    (`self.stage2.cuda(1)`), by attribute."""
    cls = module_classes(ctx).get(class_name)
    method = methods(cls).get(method_name) if cls is not None else None
    if method is None or method_name.startswith("__"):
        return {}
    resolver = resolver_for(ctx, method.body)
    found: dict[str, Placement] = {}
    for node in scope_facts(ctx, method).nodes:
        moved = resolver.move(node) if type(node) is cst.Call else None
        if moved is None:
            continue
        receiver = dotted_name(strip_self_returning(moved[0])) or ""
        if receiver.startswith("self.") and receiver.count(".") == 1:
            found[receiver[5:]] = Placement(receiver[5:], moved[1], node)
    return found


_HARMLESS = frozenset(
    {
        "print",
        "len",
        "str",
        "repr",
        "isinstance",
        "hasattr",
        "getattr",
        "type",
        "id",
        "vars",
        "format",
        "count_parameters",
    }
)
_LOGGING = frozenset({"info", "debug", "warning", "warn", "error", "log", "print", "write"})


# Calls that return the module they are given, where it is: compiled, or patched for mixed
# precision (apex's `initialize` returns `(model, optimizer)`, the model first).
PLACEMENT_KEEPING = frozenset(
    {"torch.compile", "apex.amp.initialize", "peft.get_peft_model", "peft.prepare_model_for_kbit_training"}
)


def keeps_placement(ctx: FileContext, node: cst.BaseExpression, var: str) -> bool:
    """`torch.compile(model)`, `amp.initialize(model, optimizer)`: `var`'s module, unmoved."""
    return (
        type(node) is cst.Call
        and ctx.qualified_name(node.func) in PLACEMENT_KEEPING
        and bool(node.args)
        and not node.args[0].star
        and node.args[0].keyword is None
        and dotted_name(node.args[0].value) == var
    )


def _unpacks_kept(ctx: FileContext, node: cst.Assign, var: str) -> bool:
    """`var, opt = amp.initialize(var, opt)`: the first target takes the module back."""
    target = node.targets[0].target
    return (
        isinstance(target, (cst.Tuple, cst.List))
        and bool(target.elements)
        and dotted_name(target.elements[0].value) == var
        and keeps_placement(ctx, node.value, var)
    )


def _harmless_call(ctx: FileContext, call: cst.Call) -> bool:
    """Calls that take a model without moving it: wrappers, printing, logging."""
    if ctx.qualified_name(call.func) in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL | PLACEMENT_KEEPING:
        return True
    if type(call.func) is cst.Name:
        return call.func.value in _HARMLESS
    return type(call.func) is cst.Attribute and call.func.attr.value in _LOGGING


def _mentions(node: cst.CSTNode, var: str) -> bool:
    if dotted_name(node) == var:
        return True
    if isinstance(node, (cst.Tuple, cst.List)):
        return any(type(e) is cst.Element and _mentions(e.value, var) for e in node.elements)
    if type(node) is cst.Dict:
        return any(type(e) is cst.DictElement and _mentions(e.value, var) for e in node.elements)
    return False


@dataclass
class Usage:
    """What a scope does with a variable after one statement."""

    moves: list[tuple[Device, cst.CSTNode]] = field(default_factory=list)
    escaped: bool = False
    called: bool = False
    # called before anything moved it or took it elsewhere: the first call runs it where it was
    called_first: bool = False
    # escaped otherwise than by `return var` (handed to other code, yielded, returned in a container)
    handed: bool = False

    @property
    def only_returned(self) -> bool:
        """Escaped only by being returned as it is: what happens to it next is the callers'."""
        return self.escaped and not self.handed


def usage_after(ctx: FileContext, var: str, site: cst.CSTNode) -> Usage:
    """Moves, calls and escapes of `var` after the statement of `site`, until `var` is rebound.
    Handed to a plain function of the file (`run(net, args)`), `var` is followed into it as the
    parameter it fills: what the function does with it counts here (two calls deep)."""
    scope = scope_facts(ctx, scope_of(ctx, site))
    statement = statement_of(ctx, site)
    start = scope.order.get(id(statement), -1)
    inside = {id(n) for n in ctx.index.walk(statement)}
    return _usage(ctx, var, scope, start + 1, inside, resolver_for(ctx, site), _HELPER_DEPTH)


_HELPER_DEPTH = 2


def _usage(
    ctx: FileContext, var: str, scope: Scope, start: int, skip: set[int], resolver: Resolver, depth: int
) -> Usage:
    usage = Usage()
    for node in scope.nodes[start:]:
        if id(node) in skip:
            continue
        if rebinds(resolver, node, var):
            break
        if type(node) is cst.Call:
            moved = resolver.move(node)
            if moved is not None and dotted_name(strip_self_returning(moved[0])) == var:
                usage.moves.append((moved[1], node))
            elif dotted_name(node.func) == var:
                usage.called_first = usage.called_first or not (usage.called or usage.moves or usage.escaped)
                usage.called = True
            elif any(dotted_name(arg.value) == var for arg in node.args) and not _harmless_call(ctx, node):
                inner = _usage_in_helper(ctx, node, var, depth)
                if inner is None:
                    usage.escaped = usage.handed = True
                    continue
                first = not (usage.called or usage.moves or usage.escaped)
                usage.called_first = usage.called_first or (first and inner.called_first)
                usage.called = usage.called or inner.called
                usage.moves.extend(inner.moves)
                if inner.escaped:
                    usage.escaped = usage.handed = True
        elif isinstance(node, (cst.Return, cst.Yield)) and node.value is not None and _mentions(node.value, var):
            usage.handed = usage.handed or not (type(node) is cst.Return and dotted_name(node.value) == var)
            usage.escaped = True
    return usage


def _usage_in_helper(ctx: FileContext, call: cst.Call, var: str, depth: int) -> Usage | None:
    """What a plain function of the file (a module-level `def`, called by its name) does with the
    parameter that `var` fills at `call`; None when that is not known (a method, a function of
    another module, `*args`, `var` handed twice, or the helpers nest too deep)."""
    if depth <= 0 or type(call.func) is not cst.Name:
        return None
    function = _module_functions(ctx).get(call.func.value)
    if function is None or function.asynchronous is not None:
        return None
    handed = [arg for arg in call.args if dotted_name(arg.value) == var]
    if len(handed) != 1 or handed[0].star:
        return None
    arg = handed[0]
    params = function.params
    positional = [*params.posonly_params, *params.params]
    if arg.keyword is not None:
        names = {p.name.value for p in (*positional, *params.kwonly_params)}
        name = arg.keyword.value if arg.keyword.value in names else None
    else:
        index = sum(1 for a in call.args[: call.args.index(arg)] if a.keyword is None and not a.star)
        if any(a.star for a in call.args[: call.args.index(arg)]):
            return None
        name = positional[index].name.value if index < len(positional) else None
    if name is None:
        return None
    inner = scope_facts(ctx, function)
    return _usage(ctx, name, inner, 0, set(), resolver_for(ctx, function.body), depth - 1)


def _module_functions(ctx: FileContext) -> dict[str, cst.FunctionDef]:
    """The module-level functions of the file by name (a name defined twice is left out)."""

    def build(c: FileContext) -> dict[str, cst.FunctionDef]:
        found: dict[str, cst.FunctionDef] = {}
        twice: set[str] = set()
        for statement in c.module.body:
            if type(statement) is cst.FunctionDef:
                if statement.name.value in found:
                    twice.add(statement.name.value)
                found[statement.name.value] = statement
        return {k: v for k, v in found.items() if k not in twice}

    return ctx.shared("model_events.module_functions", build)


_PLAIN_BASES = frozenset({"object", "ABC", "abc.ABC"})


def class_history(ctx: FileContext, var: str, site: cst.CSTNode) -> History | None:
    """What the class does to `self.attr` before `site`, the class taken as one unit: bound once
    in `__init__` (where the history starts), touched by no method other than `__init__` and
    the one holding `site`, and not bound in that one before `site`. None otherwise, or when the
    class has a base class that could move the attribute itself."""
    if not var.startswith("self.") or var.count(".") != 1:
        return None
    cls = ctx.index.enclosing_class(site)
    if cls is None or any((dotted_name(base.value) or "") not in _PLAIN_BASES for base in cls.bases):
        return None
    here = scope_of(ctx, site)
    functions = methods(cls)
    init = functions.get("__init__")
    if init is None or init is here:
        return None
    local = history(ctx, var, site)
    if local.bind is not None:
        return None
    attr = var.split(".", 1)[1]
    if re.search(r"\." + re.escape(attr) + r"\s*\.\s*(to|cuda|xpu|mps)\(", ctx.source.replace(f"self.{attr}.", "")):
        return None  # moved from outside the class too (`trainer.model.cuda(rank)`)
    for function in functions.values():
        if function is init or function is here:
            continue
        scope = scope_facts(ctx, function)
        other = _history(ctx, var, scope, len(scope.nodes))
        if other.bind is not None or other.moves or other.sub_moves or other.escaped:
            return None
    scope = scope_facts(ctx, init)
    built = _history(ctx, var, scope, len(scope.nodes))
    if built.bind is None or len(scope.assigned.get(var, ())) != 1:
        return None
    built.moves += local.moves
    built.sub_moves.update(local.sub_moves)
    built.escaped = built.escaped or local.escaped
    return built
