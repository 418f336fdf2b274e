"""Host tensors an optimizer of the file stores in its per-parameter state.

`self.state[p]["exp_avg"] = torch.zeros(p.shape)`, `self.state[self._param][name] =
torch.full(shape, value)` in a helper, or through `state = self.state[p]`: a parameter's state
is read and updated together with the parameter and its gradient in `step()`, so it must live on
the parameter's device (torch's own `Optimizer.load_state_dict` casts it there). A factory with
no `device=` builds it on the CPU, and the first step on a GPU model mixes devices (DL101), however
the entry is keyed and whichever helper reads it back. An explicit `device=` (an offloading
optimizer keeps its state on the CPU on purpose), a 0-dim tensor (a step count, which may stay on
the host) and a pinned buffer are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import CPU
from devicelint.analysis.training.helpers import optimizer_classes
from devicelint.context import FileContext


@dataclass(frozen=True)
class HostStateStore:
    factory: cst.Call  # `torch.zeros(p.shape)`
    function: cst.FunctionDef  # where it is stored
    entry: str  # `self.state[p]["exp_avg"]`
    parameter: str  # `p`: the parameter whose state it is


def host_state_stores(ctx: FileContext) -> list[HostStateStore]:
    return ctx.shared("optimizer_state_stores", _host_state_stores)


def _host_state_stores(ctx: FileContext) -> list[HostStateStore]:
    found: list[HostStateStore] = []
    for cls in optimizer_classes(ctx):
        for function in (n for n in ctx.index.walk(cls) if type(n) is cst.FunctionDef):
            aliases = _state_aliases(function)
            for assign in (n for n in ctx.index.walk(function) if type(n) is cst.Assign):
                if len(assign.targets) != 1 or type(assign.targets[0].target) is not cst.Subscript:
                    continue
                parameter = _state_parameter(assign.targets[0].target, aliases)
                factory = _host_factory(ctx, assign.value) if parameter is not None else None
                if parameter is None or factory is None:
                    continue
                entry = ctx.code_for(assign.targets[0].target)
                found.append(HostStateStore(factory, function, entry, parameter))
    return found


def _state_aliases(function: cst.FunctionDef) -> dict[str, str]:
    """`state = self.state[p]`: the local name, with the parameter it is the state of."""
    aliases: dict[str, str] = {}
    for node in _statements(function):
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
            parameter = _state_of(node.value)
            if parameter is not None:
                aliases[node.targets[0].target.value] = parameter
    return aliases


def _statements(function: cst.FunctionDef) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if type(node) is cst.Assign:
            out.append(node)
        stack.extend(c for c in node.children if not isinstance(c, (cst.FunctionDef, cst.ClassDef)))
    return out


def _state_of(node: cst.BaseExpression) -> str | None:
    """`p` of `self.state[p]`."""
    if type(node) is not cst.Subscript or len(node.slice) != 1 or type(node.slice[0].slice) is not cst.Index:
        return None
    if dotted_name(node.value) != "self.state":
        return None
    return dotted_name(node.slice[0].slice.value)


def _state_parameter(target: cst.Subscript, aliases: dict[str, str]) -> str | None:
    """The parameter of an entry written into its state: `self.state[p][k]` or `state[k]`."""
    holder = target.value
    if type(holder) is cst.Name:
        return aliases.get(holder.value)
    return _state_of(holder)


def _host_factory(ctx: FileContext, value: cst.BaseExpression) -> cst.Call | None:
    """The factory call that made the stored value on the host (`torch.zeros(n)`, also inside
    arithmetic, `1e-4 * torch.eye(n)`), when it was given no device and is not 0-dim."""
    fact = file_facts(ctx).value(value)
    call = fact.origin
    if fact.kind != CPU or not fact.from_factory or fact.scalar or type(call) is not cst.Call:
        return None
    keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    if keywords & {"device", "pin_memory"}:
        return None
    size = next((arg.value for arg in call.args if arg.keyword is None or arg.keyword.value == "size"), None)
    if isinstance(size, (cst.Tuple, cst.List)) and not size.elements:
        return None  # `torch.full((), 0.0)`: 0-dim, like a step count
    return call
