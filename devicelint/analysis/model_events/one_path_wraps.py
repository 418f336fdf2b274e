"""Loads that run whether or not an `if` above them wrapped the model.

`if n_gpu > 1: model = nn.DataParallel(model)` (or `model.encoder = nn.DataParallel(model.encoder)`)
and then, after the `if`, `model.load_state_dict(sd)`: the wrapper's keys carry a `module.` part
that the bare model's keys do not, so whatever keys the checkpoint has, the load fails on one of
the two paths (DL204). Only a wrap under an `if` with no `else` counts (an `else` may wrap too),
and only a load in the statements that follow that `if` in the same block, up to a statement
that binds the loaded name again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.model_events.devices import KEEPS_MODULE
from devicelint.analysis.model_events.wrappers import WrapperSite, wrapper_sites
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext

# Words of a count of GPUs or processes (`n_gpu`, `ngpus`, `num_gpus`, `world_size`).
_COUNT_WORDS = ("gpu", "world_size", "device_count", "num_devices", "n_devices")
# Methods whose result is the module they are called on, moved or switched to a mode.
_SAME_MODULE = KEEPS_MODULE | {"train", "eval", "requires_grad_"}


@dataclass(frozen=True)
class OnePathLoad:
    load: cst.Call  # `model.load_state_dict(...)`
    receiver: str  # `model`
    site: WrapperSite  # the wrap under the `if`
    guard: cst.If

    @property
    def key_prefix(self) -> str:
        """`module.` for the loaded model itself, `encoder.module.` for a wrapped submodule."""
        target = self.site.target or ""
        return "module." if target == self.receiver else f"{target[len(self.receiver) + 1 :]}.module."


def loads_after_one_path_wrap(ctx: FileContext) -> list[OnePathLoad]:
    return ctx.shared("model_events.one_path_loads", _loads_after_one_path_wrap)


def _loads_after_one_path_wrap(ctx: FileContext) -> list[OnePathLoad]:
    found: list[OnePathLoad] = []
    for site in wrapper_sites(ctx):
        target = site.target
        guard = _guard(ctx, site)
        if target is None or guard is None:
            continue
        for load, receiver in _loads_after(ctx, guard, target):
            found.append(OnePathLoad(load, receiver, site, guard))
    return found


def _guard(ctx: FileContext, site: WrapperSite) -> cst.If | None:
    """The nearest `if` (no `else`, not a test of the wrapper type) whose body holds the wrap."""
    node: cst.CSTNode = site.statement
    for ancestor in ctx.index.ancestors(site.statement):
        if ancestor is site.scope or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return None
        if type(ancestor) is cst.If:
            if ancestor.body is not node or ancestor.orelse is not None:
                return None
            return ancestor if _counts_devices(ctx, ancestor.test) else None
        node = ancestor
    return None


def _counts_devices(ctx: FileContext, test: cst.BaseExpression) -> bool:
    """`torch.cuda.device_count() > 1`, `args.n_gpu > 1`, `world_size > 1`: the wrap depends on
    how many GPUs or processes this run has, not on the checkpoint, so the same checkpoint file
    meets both paths. A flag that may say how the checkpoint was saved (`if data_parallel:`)
    does not count."""
    for node in ctx.index.walk(test):
        if type(node) is cst.Call and (ctx.qualified_name(node.func) or "").endswith("device_count"):
            return True
        if type(node) is not cst.Comparison or len(node.comparisons) != 1:
            continue
        bound = node.comparisons[0].comparator
        if type(bound) is not cst.Integer or bound.value not in ("0", "1", "2"):
            continue
        counted = ctx.code_for(node.left).lower()
        if any(word in counted for word in _COUNT_WORDS):
            return True
    return False


def _loads_after(ctx: FileContext, guard: cst.If, target: str) -> Iterator[tuple[cst.Call, str]]:
    block = ctx.index.parent(guard)
    if not isinstance(block, (cst.IndentedBlock, cst.Module)):
        return
    position = next(i for i, stmt in enumerate(block.body) if stmt is guard)
    for stmt in block.body[position + 1 :]:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        for call in _calls_in(stmt):
            if type(call.func) is not cst.Attribute or call.func.attr.value != "load_state_dict" or not call.args:
                continue
            receiver = dotted_name(call.func.value)
            if receiver is not None and (target == receiver or target.startswith(receiver + ".")):
                yield call, receiver
                return
        if _binds(stmt, target):
            return


def _binds(stmt: cst.BaseStatement, target: str) -> bool:
    """Whether the statement binds the name (or a name it starts from) to something else
    (`model = model.cuda()` keeps what it held)."""
    root = target.split(".", 1)[0]
    for node in _walk(stmt):
        if type(node) is cst.Assign:
            bound = [dotted_name(t.target) for t in node.targets]
            value = node.value
        elif type(node) is cst.AnnAssign:
            bound, value = [dotted_name(node.target)], node.value
        else:
            continue
        hit = next(
            (b for b in bound if b is not None and (b == root or target == b or target.startswith(b + "."))), None
        )
        if hit is not None and not _same_module(value, hit):
            return True
    return False


def _same_module(value: cst.BaseExpression | None, name: str) -> bool:
    """`model.cuda()`, `model.to(device).eval()`: the module `name` held, moved or switched."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in _SAME_MODULE:
        value = value.func.value
    return value is not None and dotted_name(value) == name


def _calls_in(stmt: cst.CSTNode) -> Iterator[cst.Call]:
    for node in _walk(stmt):
        if type(node) is cst.Call:
            yield node


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and current is not node:
            continue
        yield current
        stack.extend(reversed(current.children))
