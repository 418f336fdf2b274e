"""Whether a metric class of the file puts what its `update` is handed into its states.

A torchmetrics metric fails on a device tensor only where its own code combines that tensor
with a state made on the CPU (`self.correct += (preds == target).sum()`). A metric whose
`update` hands the tensors to another object it holds (a speech decoder's `decode(preds)`, a
tokenizer) and keeps what that returns (strings, edit distances) never does so in its own
code: whatever device the tensors are on, its states only meet what the other object makes.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.helpers import local_classes, method_of
from devicelint.analysis.training.reads import read_names
from devicelint.analysis.training.syntax import assigned_names
from devicelint.context import FileContext

# Methods that put a value into a list state (`self.preds.append(preds)`).
_LIST_WRITES = frozenset({"append", "extend"})


def update_feeds_states(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """Whether `cls`'s `update` (its own, or one inherited from a class of the file) may put a
    value computed from its tensors into one of the states its classes register with
    `add_state`. True when the file shows no `update` or no state (torchmetrics' own
    `update` computes on the tensors), so that only a proven hand-off clears a metric."""
    update = method_of(ctx, cls, "update")
    states = _states(ctx, cls)
    if update is None or not states:
        return True
    params = _parameters(update)
    return _feeds(ctx, cls, update, params, states, depth=0)


def _parameters(method: cst.FunctionDef) -> set[str]:
    params = [p.name.value for p in (*method.params.posonly_params, *method.params.params)][1:]
    return {*params, *(p.name.value for p in method.params.kwonly_params)}


def _states(ctx: FileContext, cls: cst.ClassDef) -> set[str]:
    """`self.<name>` of each `self.add_state("name", ...)` in `cls` and its classes of the file."""
    states: set[str] = set()
    for klass in _chain(ctx, cls):
        for call in ctx.index.walk(klass):
            if type(call) is cst.Call and dotted_name(call.func) == "self.add_state" and call.args:
                name = call.args[0].value
                if type(name) is cst.SimpleString and isinstance(name.evaluated_value, str):
                    states.add("self." + name.evaluated_value)
    return states


def _chain(ctx: FileContext, cls: cst.ClassDef, depth: int = 0) -> list[cst.ClassDef]:
    classes = local_classes(ctx)
    chain = [cls]
    for base in cls.bases:
        parent = classes.get((dotted_name(base.value) or "").rsplit(".", 1)[-1])
        if parent is not None and parent is not cls and depth < 3:
            chain.extend(_chain(ctx, parent, depth + 1))
    return chain


def _feeds(
    ctx: FileContext, cls: cst.ClassDef, method: cst.FunctionDef, tainted: set[str], states: set[str], depth: int
) -> bool:
    """Whether `method`, handed `tainted` values, writes one into a state, itself or through
    a method of the class it hands one to."""
    tainted = set(tainted)
    changed = True
    while changed:  # def-use to a fixed point, ignoring order
        changed = False
        for node in ctx.index.walk(method.body):
            if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None:
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                names = {n for t in targets for n in assigned_names(t)}
                if _reads(ctx, cls, node.value, tainted) and not names <= tainted:
                    tainted |= names
                    changed = True
            elif type(node) is cst.For and _reads(ctx, cls, node.iter, tainted):
                names = set(assigned_names(node.target))
                if not names <= tainted:
                    tainted |= names
                    changed = True
    for node in ctx.index.walk(method.body):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            written = {n for t in targets for n in assigned_names(t)}
            written |= {dotted_name(t.value) or "" for t in targets if type(t) is cst.Subscript}
            if written & states and _reads(ctx, cls, node.value, tainted):
                return True
        if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
            continue
        owner = dotted_name(node.func.value)
        if owner in states and node.func.attr.value in _LIST_WRITES:
            if any(_reads(ctx, cls, a.value, tainted) for a in node.args):
                return True
        elif owner == "self" and depth < 3:
            callee = method_of(ctx, cls, node.func.attr.value)
            if callee is None:
                continue
            handed = _handed_parameters(callee, node, lambda v: _reads(ctx, cls, v, tainted))
            if handed and _feeds(ctx, cls, callee, handed, states, depth + 1):
                return True
    return False


def _handed_parameters(
    callee: cst.FunctionDef, call: cst.Call, tainted: Callable[[cst.BaseExpression], bool]
) -> set[str]:
    """The parameters of `callee` that `call` fills with a tainted value; all of them when the
    call spreads arguments (`*args`), which cannot be matched to parameters."""
    if any(a.star and tainted(a.value) for a in call.args):
        return _parameters(callee)
    params = [p.name.value for p in (*callee.params.posonly_params, *callee.params.params)][1:]
    handed: set[str] = set()
    for position, arg in enumerate(call.args):
        if arg.star or not tainted(arg.value):
            continue
        if arg.keyword is not None:
            handed.add(arg.keyword.value)
        elif position < len(params):
            handed.add(params[position])
    return handed


def _reads(ctx: FileContext, cls: cst.ClassDef, value: cst.BaseExpression, tainted: set[str]) -> bool:
    """`value` reads a tainted name other than inside a call of an object the metric holds
    (`self.decoder.decode(preds)`): what such an object returns is its own making."""
    reads = read_names(ctx, value) & tainted
    if not reads:
        return False
    inside: set[int] = set()
    for node in ctx.index.walk(value):
        if id(node) not in inside and _held_object_call(ctx, cls, node):
            inside.update(id(n) for n in ctx.index.walk(node))
    if not inside:
        return True
    outside = {
        n.value if type(n) is cst.Name else dotted_name(n) or ""
        for n in ctx.index.walk(value)
        if id(n) not in inside and type(n) in (cst.Name, cst.Attribute)
    }
    return bool(reads & outside)


def _held_object_call(ctx: FileContext, cls: cst.ClassDef, node: cst.CSTNode) -> bool:
    """`self.decoder.decode(...)`, `self.tokenizer(...)`: a call of an attribute of `self` (or
    of its method) where that attribute is neither a method of the class nor a state."""
    if type(node) is not cst.Call:
        return False
    func = node.func
    held = func.value if type(func) is cst.Attribute and dotted_name(func.value) != "self" else func
    text = dotted_name(held) or ""
    if not text.startswith("self.") or text.count(".") != 1:
        return False
    attr = text.split(".", 1)[1]
    return method_of(ctx, cls, attr) is None and attr not in _registered(ctx, cls)


def _registered(ctx: FileContext, cls: cst.ClassDef) -> set[str]:
    return {s.split(".", 1)[1] for s in _states(ctx, cls)}
