"""The nodes and bindings of one function (or the module), and position queries over them."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.branches import taken_together
from devicelint.analysis.index import iter_children
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.context import FileContext


def scope_of(ctx: FileContext, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Module)):
            return ancestor
    return ctx.module


@dataclass
class Scope:
    """The nodes of one function (or the module) in source order, nested defs left out."""

    root: cst.FunctionDef | cst.Module
    nodes: list[cst.CSTNode]
    order: dict[int, int]
    # name or `self.attr` text -> values assigned to it in this scope
    assigned: dict[str, list[cst.BaseExpression]]


def scope_facts(ctx: FileContext, root: cst.FunctionDef | cst.Module) -> Scope:
    cache: dict[int, Scope] = ctx.shared("model_events.scopes", lambda c: {})
    scope = cache.get(id(root))
    if scope is None:
        scope = _build_scope(root)
        cache[id(root)] = scope
    return scope


_NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
REBOUND = cst.Name("__rebound__")


def _build_scope(root: cst.FunctionDef | cst.Module) -> Scope:
    nodes: list[cst.CSTNode] = []
    assigned: dict[str, list[cst.BaseExpression]] = {}
    start = root.body if type(root) is cst.FunctionDef else root
    if type(root) is cst.FunctionDef:
        params = root.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            assigned.setdefault(param.name.value, []).append(REBOUND)  # a caller chooses it
        for star in (params.star_arg, params.star_kwarg):
            if type(star) is cst.Param:
                assigned.setdefault(star.name.value, []).append(REBOUND)
    stack: list[cst.CSTNode] = [start]
    append = nodes.append
    while stack:
        node = stack.pop()
        append(node)
        kind = type(node)
        if kind in _NESTED and node is not start:
            continue
        if kind is cst.Assign:
            for target in node.targets:  # type: ignore[attr-defined]  # `kind` is type(node), tested by identity for speed
                key = dotted_name(target.target)
                if key is not None:
                    assigned.setdefault(key, []).append(node.value)  # type: ignore[attr-defined]  # `kind` is type(node), tested by identity for speed
        elif kind is cst.AnnAssign:
            key = dotted_name(node.target)  # type: ignore[attr-defined]  # `kind` is type(node), tested by identity for speed
            if key is not None and node.value is not None:  # type: ignore[attr-defined]  # `kind` is type(node), tested by identity for speed
                assigned.setdefault(key, []).append(node.value)  # type: ignore[attr-defined]  # `kind` is type(node), tested by identity for speed
        elif kind in (cst.AugAssign, cst.For, cst.NamedExpr, cst.WithItem):
            target = node.asname.name if kind is cst.WithItem and node.asname else getattr(node, "target", None)  # type: ignore[attr-defined]  # `kind` is type(node), tested by identity for speed
            key = dotted_name(target) if isinstance(target, cst.BaseExpression) else None
            if key is not None:  # a second binding makes the name unresolvable
                assigned.setdefault(key, []).append(REBOUND)
        children = list(iter_children(node))
        children.reverse()
        stack.extend(children)
    return Scope(root, nodes, {id(n): i for i, n in enumerate(nodes)}, assigned)


def module_functions(ctx: FileContext) -> dict[str, cst.FunctionDef]:
    """Functions defined once at the top level of the module, by name."""

    def build(c: FileContext) -> dict[str, cst.FunctionDef]:
        seen: dict[str, list[cst.FunctionDef]] = {}
        for statement in c.module.body:
            if type(statement) is cst.FunctionDef:
                seen.setdefault(statement.name.value, []).append(statement)
        return {name: defs[0] for name, defs in seen.items() if len(defs) == 1}

    return ctx.shared("model_events.functions", build)


def only_return(ctx: FileContext, function: cst.FunctionDef) -> cst.Return | None:
    """The one `return <value>` of a function (a builder's), or None if it has several or none."""
    returns = [n for n in scope_facts(ctx, function).nodes if type(n) is cst.Return]
    return returns[0] if len(returns) == 1 and returns[0].value is not None else None


def statement_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    """The simple statement (or compound statement header owner) holding `node`."""
    current = node
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return ancestor
        current = ancestor
    return current


_SETS_DEVICE = frozenset({"set_device", "set_device_index", "device_index"})


def set_device_calls(ctx: FileContext) -> list[cst.Call]:
    """Calls that change the current device: `torch.cuda.set_device(...)`, any
    `*.set_device(...)`/`set_device_index(...)`, or `with torch.cuda.device(...)` (comments do not count)."""
    helpers = ctx.project.helpers
    if "set_device" not in ctx.source and "cuda.device(" not in ctx.source and not helpers:
        return []
    found = []
    for call in ctx.index.of_type(cst.Call):
        func = call.func
        name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
        if name in _SETS_DEVICE or ctx.qualified_name(func) == "torch.cuda.device":
            found.append(call)
        elif helpers and _sets_up(ctx, call, "set_device"):
            found.append(call)  # a set-up function of another module (`init_distributed_mode(args)`)
    return found


def _sets_up(ctx: FileContext, call: cst.Call, step: str) -> bool:
    """`call` runs an imported project function that makes this distributed set-up step."""
    spelled = dotted_name(call.func)
    helper = ctx.project.helpers.get(spelled) if spelled is not None else None
    return helper is not None and step in helper.uses.distributed_setup


INIT_PROCESS_GROUP = frozenset(
    {"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"}
)


def process_group_initialised(ctx: FileContext) -> bool:
    """The file calls `init_process_group` itself, or a project function of another module
    that does: its distributed set-up is visible here."""
    return any(
        ctx.qualified_name(call.func) in INIT_PROCESS_GROUP
        or (ctx.project.helpers and _sets_up(ctx, call, "init_process_group"))
        for call in ctx.index.of_type(cst.Call)
    )


def set_device_called(ctx: FileContext, at: cst.CSTNode | None = None) -> bool:
    """The code changes the current device; with `at`, on the way to `at`: anywhere in another
    function (a set-up helper), or before `at` in its own function and not in a branch that
    leaves `at` out (`if args.gpu is not None: set_device(...)` does not cover the `else`)."""
    calls = set_device_calls(ctx)
    if at is None or not calls:
        return bool(calls)
    root = scope_of(ctx, at)
    scope = scope_facts(ctx, root)
    position = scope.order.get(id(statement_of(ctx, at)), len(scope.nodes))
    around = {id(a) for a in ctx.index.ancestors(at)}
    for call in calls:
        if scope_of(ctx, call) is not root:
            if not _conditional(ctx, call):
                return True  # an unconditional set-up helper
            continue
        if scope.order.get(id(call), position) >= position:
            continue
        blocks = [
            a
            for a in ctx.index.ancestors(call)
            if type(a) in (cst.IndentedBlock, cst.SimpleStatementSuite)
            and scope_of(ctx, a) is root
            and a is not getattr(root, "body", None)
        ]
        if all(id(block) in around or _same_condition(ctx, block, at) for block in blocks):
            return True
    return False


def _same_condition(ctx: FileContext, block: cst.CSTNode, at: cst.CSTNode) -> bool:
    """`block` is the body of `if <test>:` and `at` sits in the body of another `if` with the
    same test (`if args.distributed: set_device(...)` ... `if args.distributed: DDP(...)`): the
    two branches are taken together."""
    owner = ctx.index.parent(block)
    return type(owner) is cst.If and owner.body is block and taken_together(ctx, owner, at)
    test = ctx.code_for(owner.test)
    child: cst.CSTNode = at
    for ancestor in ctx.index.ancestors(at):
        if type(ancestor) is cst.If and ancestor.body is child and ctx.code_for(ancestor.test) == test:
            return True
        child = ancestor
    return False


def _conditional(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`node` runs only under an `if` or a loop of its own function. An `if` whose other arms all
    raise (`if launcher == "pytorch": ... else: raise ValueError(...)`) is the only way on: a
    function that returns has run the arm holding `node`."""
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) in (cst.FunctionDef, cst.Module):
            return False
        if type(ancestor) in (cst.For, cst.While):
            return True
        elif_or_else = type(ancestor) is cst.Else or (
            type(ancestor) is cst.If and type(ctx.index.parent(ancestor)) is cst.If
        )
        if elif_or_else:
            continue  # judged with the chain's first `if`, against the arm's block in `child`
        if type(ancestor) is cst.If and not _only_way_on(ancestor, child):
            return True
        child = ancestor
    return False


def _only_way_on(branch: cst.If, child: cst.CSTNode) -> bool:
    """`child` is one arm's block of the `if`/`elif`/`else` chain that starts at `branch`, the
    chain has an `else`, and every other arm ends in `raise`."""
    arms: list[cst.BaseSuite] = []
    current: cst.If | cst.Else | None = branch
    while current is not None:
        arms.append(current.body)
        current = current.orelse if type(current) is cst.If else None
    if type(_last_else(branch)) is not cst.Else or not any(arm is child for arm in arms):
        return False
    return all(arm is child or _ends_in_raise(arm) for arm in arms)


def _last_else(branch: cst.If) -> cst.If | cst.Else | None:
    current: cst.If | cst.Else | None = branch
    while type(current) is cst.If and current.orelse is not None:
        current = current.orelse
    return current


def _ends_in_raise(block: cst.BaseSuite) -> bool:
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    last = body[-1] if body else None
    if type(last) is cst.SimpleStatementLine:
        return type(last.body[-1]) is cst.Raise
    if type(last) is cst.SimpleStatementSuite:
        return type(last.body[-1]) is cst.Raise
    return False


def string_constants(ctx: FileContext) -> frozenset[str]:
    """Every string literal of the code (comments left out), for "does the code say X" tests."""

    def build(c: FileContext) -> frozenset[str]:
        found = set()
        for node in c.index.of_type(cst.SimpleString):
            value = literal_value(node)
            if isinstance(value, str):
                found.add(value)
        return frozenset(found)

    return ctx.shared("model_events.strings", build)


def short(ctx: FileContext, node: cst.CSTNode, limit: int = 60) -> str:
    """Source of `node` for a message, or `callee(...)` when it is long or spans lines."""
    code = ctx.code_for(node).strip()
    if len(code) <= limit and "\n" not in code:
        return code
    if type(node) is cst.Call:
        return f"{ctx.code_for(node.func).strip()}(...)"
    return code.split("\n", 1)[0][:limit] + "..."
