"""Which names an expression reads, and which names are computed from given ones (def-use).

Plain syntax over one function, ignoring order: used to tell which values a loss is made of and
which values are computed from a loss or a model output. It says nothing about devices.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.attribute_aliases import argument_for, own_method
from devicelint.analysis.index import iter_children
from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.syntax import assigned_names, method_name
from devicelint.context import FileContext


def computed_from(ctx: FileContext, root: cst.CSTNode, seeds: set[str], skip_index: bool = False) -> set[str]:
    """`seeds` and every name assigned under `root` from an expression that reads one of them,
    including loop and comprehension targets over one (def-use, to a fixed point, ignoring order). Reads through a host copy (`loss.item()`,
    `float(x)`) do not count: their result is a Python number, not the value. With `skip_index`,
    a subscript's index is not read (`state` in `state = self.state[p]` is not computed from `p`)."""
    flows: list[tuple[set[str], set[str]]] = []
    for node in ctx.index.walk(root):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            names = {n for t in targets for n in assigned_names(t)}
            flows.append((names, read_names(ctx, node.value, skip_index=skip_index)))
        elif isinstance(node, (cst.For, cst.CompFor)):
            # `for name, value in losses.items():` and `{k: v for k, v in losses.items()}`
            target = _non_index_target(node.target, node.iter)
            if target is not None:
                flows.append((set(assigned_names(target)), read_names(ctx, node.iter, skip_index=skip_index)))
        elif type(node) is cst.Call:
            flows.extend(_left_on_self(ctx, node, skip_index))
    return closure(flows, seeds)


def _left_on_self(ctx: FileContext, call: cst.Call, skip_index: bool) -> list[tuple[set[str], set[str]]]:
    """What `self._keep(loss)` leaves on `self`, in the caller's words: `self.last = value` in
    the method flows from the caller's arguments for the parameters `value` is computed from
    (`self.bad = torch.isnan(loss)` makes `self.bad` computed from the caller's `loss`)."""
    method = own_method(ctx, call)
    if method is None or any(a.star for a in call.args):
        return []
    params = [p.name.value for p in (*method.params.posonly_params, *method.params.params)][1:]
    inner: list[tuple[set[str], set[str]]] = []
    stores: list[tuple[str, cst.BaseExpression]] = []
    for node in ctx.index.walk(method.body):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            names = {n for t in targets for n in assigned_names(t)}
            inner.append((names, read_names(ctx, node.value, skip_index=skip_index)))
            stores.extend((n, node.value) for n in names if n.startswith("self.") and n.count(".") == 1)
    flows: list[tuple[set[str], set[str]]] = []
    for attr, value in stores:
        sources = closure(inner, read_names(ctx, value, skip_index=skip_index), backward=True)
        reads = {n for n in sources if n.startswith("self.")}
        for name in sources & set(params):
            given = argument_for(call, method, name)
            if given is not None:
                reads |= read_names(ctx, given, skip_index=skip_index)
        if reads:
            flows.append(({attr}, reads))
    return flows


def _non_index_target(target: cst.BaseExpression, iterated: cst.BaseExpression) -> cst.BaseExpression | None:
    """The part of a loop target that takes values of what is iterated: none for `range(...)`
    (Python ints, even from a tensor bound), the second element for `enumerate(...)`."""
    func = iterated.func if type(iterated) is cst.Call else None
    if type(func) is cst.Name and func.value == "range":
        return None
    if type(func) is cst.Name and func.value == "enumerate":
        if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            return target.elements[1].value
    return target


def closure(flows: list[tuple[set[str], set[str]]], seeds: set[str], backward: bool = False) -> set[str]:
    """`seeds` and the names that `(targets, reads)` flows connect to them, to a fixed point:
    forward, what is computed from the seeds; `backward`, what the seeds are computed from."""
    found = set(seeds)
    changed = True
    while changed:
        changed = False
        for targets, reads in flows:
            source, reached = (targets, reads) if backward else (reads, targets)
            if source & found and not reached <= found:
                found |= reached
                changed = True
    return found


HOST_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})
HOST_BUILTINS = frozenset({"float", "int", "bool", "len", "str", "print", "isinstance", "repr", "round"})


# Tensor metadata: host values that reading never waits for (`x.shape[0]`, `x.size(1)`).
METADATA_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "requires_grad", "is_cuda", "layout", "names"})
METADATA_METHODS = frozenset(
    {"size", "dim", "numel", "element_size", "get_device", "is_contiguous", "nelement", "stride"}
)


def is_host_value(call: cst.Call) -> bool:
    """A call whose result is a Python or NumPy value, not a tensor."""
    if method_name(call) in HOST_METHODS:
        return True
    return type(call.func) is cst.Name and call.func.value in HOST_BUILTINS


def read_names(
    ctx: FileContext, root: cst.CSTNode, skip_moves: bool = False, skip_fields: bool = False, skip_index: bool = False
) -> set[str]:
    """Names (and `self.x` attributes) an expression reads as data, leaving out called functions,
    keywords, imported modules and values read only through a host copy; with `skip_moves`, also
    values read only to be moved (`y` in `y.to(device)`); with `skip_fields`, also objects read
    only for a field (`opt` in `opt.lambda_adv * loss`: a config object, not a tensor)."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call and is_host_value(node):
            continue
        if skip_moves and type(node) is cst.Call and method_name(node) in ("to", "cuda"):
            continue
        if type(node) is cst.Call and method_name(node) in METADATA_METHODS:
            continue
        if type(node) is cst.Attribute and node.attr.value in METADATA_ATTRS:
            continue
        if type(node) is cst.Name:
            names.add(node.value)
        elif type(node) is cst.Attribute:
            text = dotted_name(node)
            if text is not None and text.startswith("self.") and text.count(".") == 1:
                names.add(text)
            elif skip_fields and type(node.value) not in (cst.Call, cst.Subscript):
                continue
            stack.append(node.value)
        elif (skip_fields or skip_index) and type(node) is cst.Subscript:
            stack.append(node.value)  # `losses[i]` reads `losses`; the index is not a tensor on the device
        elif type(node) is cst.Arg:
            stack.append(node.value)
        elif type(node) is cst.Call:
            func = node.func
            # `model(x)` and `F.mse_loss(...)` name functions, not data; `out.argmax()` reads `out`.
            if type(func) is cst.Attribute and ctx.qualified_name(func) is None:
                stack.append(func.value)
            stack.extend(node.args)
        elif type(node) in (cst.Lambda, cst.FunctionDef, cst.ClassDef):
            continue
        elif isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            # A comprehension's variables are its own (`x` in `[f(x) for x in sizes]` is not the
            # function's `x`); what they hold comes from the iterables, which are read.
            bound: set[str] = set()
            clause: cst.CompFor | None = node.for_in
            while clause is not None:
                bound.update(assigned_names(clause.target))
                clause = clause.inner_for_in
            for child in iter_children(node):
                names |= read_names(ctx, child, skip_moves, skip_fields, skip_index) - bound
        elif type(node) is cst.CompFor:
            # `for q in state["Q"]` reads its iterable, not its target.
            stack.extend(n for n in (node.iter, *node.ifs, node.inner_for_in) if n is not None)
        else:
            stack.extend(iter_children(node))
    names.discard("self")
    names.discard("cls")
    return names


def reaching_assignment(ctx: FileContext, scope: cst.CSTNode, name: str, at: cst.CSTNode) -> cst.Assign | None:
    """The plain assignment whose value `name` holds where `at` reads it, when the function shows
    it by statement order alone: the last binding of `name` before `at`, in a block that holds
    `at` (so it runs on every path to it), and not rebound later in a loop around `at` unless that
    loop also runs this binding first. None when unknown: no earlier binding, a binding in a
    branch, a loop target, an augmented assignment, or an assignment nested in an expression."""
    order: dict[int, int] = ctx.shared(("reads.order", id(scope)), lambda c: _walk_order(c, scope))
    position = order.get(id(at))
    if position is None:
        return None
    ancestors = {id(a) for a in ctx.index.ancestors(at)}
    before: cst.CSTNode | None = None
    later: list[cst.CSTNode] = []
    for binding in ctx.shared(("reads.bindings", id(scope), name), lambda c: _bindings(c, scope, name)):
        if id(binding) in ancestors:
            continue  # `x = f(x)`: the read is in the value of this very binding
        if order.get(id(binding), -1) < position:
            before = binding
        else:
            later.append(binding)
    if type(before) is not cst.Assign:
        return None
    line = ctx.index.parent(before)
    block = ctx.index.parent(line) if line is not None else None
    if block is None or id(block) not in ancestors:
        return None
    for loop in (a for a in ctx.index.ancestors(at) if type(a) in (cst.For, cst.While)):
        inside = {id(n) for n in ctx.index.walk(loop)}
        if any(id(b) in inside for b in later) and id(before) not in inside:
            return None
    return before


def bound_only_later(ctx: FileContext, scope: cst.CSTNode, name: str, at: cst.CSTNode) -> bool:
    """Whether `scope` binds `name` only after `at` and in no loop around `at`, so that `at`
    reads what the function was given (`sample(batch)` before `batch = batch.to(device)`): none
    of the function's own values for the name reaches it."""
    order: dict[int, int] = ctx.shared(("reads.order", id(scope)), lambda c: _walk_order(c, scope))
    position = order.get(id(at))
    bindings = ctx.shared(("reads.bindings", id(scope), name), lambda c: _bindings(c, scope, name))
    if position is None or not bindings or any(order.get(id(b), -1) < position for b in bindings):
        return False
    loops = [a for a in ctx.index.ancestors(at) if type(a) in (cst.For, cst.While)]
    return not any(any(a is loop for a in ctx.index.ancestors(b)) for b in bindings for loop in loops)


def _walk_order(ctx: FileContext, scope: cst.CSTNode) -> dict[int, int]:
    return {id(n): i for i, n in enumerate(ctx.index.walk(scope))}


def _bindings(ctx: FileContext, scope: cst.CSTNode, name: str) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []
    for node in ctx.index.walk(scope):
        if type(node) is cst.Assign:
            if any(name in assigned_names(t.target) for t in node.targets):
                found.append(node)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            if name in assigned_names(node.target):
                found.append(node)
        elif isinstance(node, (cst.For, cst.CompFor)):
            if name in assigned_names(node.target):
                found.append(node)
        elif type(node) in (cst.WithItem, cst.NamedExpr):
            target = node.asname.name if type(node) is cst.WithItem and node.asname else None
            target = node.target if type(node) is cst.NamedExpr else target
            if target is not None and name in assigned_names(target):
                found.append(node)
    return found
