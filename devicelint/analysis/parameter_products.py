"""Tensors a module computes from its own parameters while it is built.

`self.W = self.A @ self.B` in `__init__` is a snapshot: it holds the CPU values (and the
autograd graph) of the parameters as they were before any `model.to(device)`. Moving the
snapshot in `forward` (`self.W.to(x.device)`) does not help: the copy is not the parameters'
current value, and backward through it sends gradients along a graph of CPU tensors. The
product belongs in `forward`. A detached snapshot (`.detach()`, `.data`, under
`torch.no_grad()`) holds no graph and is an ordinary constant, and so is one computed only from
frozen parameters (`nn.Parameter(t, requires_grad=False)` wherever the class sets them), which
are constants the module moves, no more on the graph than a buffer. A read of the parameters'
metadata (`self.weight.size(0)`, `.shape`, `.dtype`) is no tensor at all.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.placement_classes import ClassFacts, is_parameter_call, self_attribute
from devicelint.context import FileContext

# Calls and attributes that cut a value off the autograd graph.
_DETACHING = frozenset({"detach", "detach_", "data", "item", "tolist", "numpy", "requires_grad_"})
# Reads of a parameter's metadata: a Python int, a shape, a dtype or a device, never a tensor
# on the graph (`self.width = self.weight.size(0)`).
_METADATA = frozenset(
    {"shape", "size", "dtype", "ndim", "dim", "numel", "nelement", "device", "is_cuda", "requires_grad", "ndimension"}
)


def parameters_read(ctx: FileContext, facts: ClassFacts, value: cst.BaseExpression) -> list[str]:
    """The class's own parameters (registered, not buffers) that `value` computes with while
    keeping them on the autograd graph; empty when the value is detached or built under
    `torch.no_grad()`/`torch.inference_mode()`."""
    if _detached(ctx, value):
        return []
    found: list[str] = []
    parameters = facts.registered - facts.buffers
    for node in _walk(value):
        if type(node) is not cst.Attribute:
            continue
        attr = self_attribute(node)
        if attr is None or attr not in parameters or attr in found or _frozen(ctx, facts, attr):
            continue
        if _cut_off(ctx, node, value):
            continue
        found.append(attr)
    return found


def _frozen(ctx: FileContext, facts: ClassFacts, attr: str) -> bool:
    """Every value the class gives `self.<attr>` (but a `None` placeholder) is
    `nn.Parameter(..., requires_grad=False)`: a constant that carries no graph."""
    values = [v for a, v, _ in facts.assignments if a == attr and not (type(v) is cst.Name and v.value == "None")]
    return bool(values) and all(
        type(v) is cst.Call
        and is_parameter_call(ctx, v)
        and any(
            arg.keyword is not None
            and arg.keyword.value == "requires_grad"
            and type(arg.value) is cst.Name
            and arg.value.value == "False"
            for arg in v.args
        )
        for v in values
    )


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    todo = [node]
    while todo:
        current = todo.pop()
        out.append(current)
        if type(current) in (cst.Lambda, cst.ListComp, cst.DictComp, cst.GeneratorExp, cst.SetComp):
            continue  # run later, or per element: not the snapshot itself
        todo.extend(reversed(current.children))
    return out


def _cut_off(ctx: FileContext, node: cst.CSTNode, top: cst.CSTNode) -> bool:
    """Whether a `.detach()`/`.data`/`.item()` between `node` and `top` cuts it off the graph."""
    current = node
    while current is not top:
        parent = ctx.index.parent(current)
        if parent is None:
            return False
        if type(parent) is cst.Attribute and parent.value is current and parent.attr.value in _DETACHING | _METADATA:
            return True
        current = parent
    return False


def _detached(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """A value detached as a whole, or assigned under `with torch.no_grad():`."""
    node: cst.CSTNode = value
    while type(node) is cst.Call and type(node.func) is cst.Attribute:
        if node.func.attr.value in _DETACHING:
            return True
        node = node.func.value
    if type(node) is cst.Attribute and node.attr.value in _DETACHING:
        return True
    parent = ctx.index.parent(value)
    while parent is not None and type(parent) is not cst.FunctionDef:
        if type(parent) is cst.With and any(
            (ctx.qualified_name(item.item.func) if type(item.item) is cst.Call else None)
            in ("torch.no_grad", "torch.inference_mode")
            for item in parent.items
        ):
            return True
        parent = ctx.index.parent(parent)
    return False
