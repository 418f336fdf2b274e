"""Where the code uses the *global* rank of a process as a GPU index on its node.

`dist.get_rank()` and the launcher's `RANK` variable count processes over every node; a GPU
index counts the GPUs of one node. `torch.cuda.set_device(rank)`, `f"cuda:{dist.get_rank()}"`
or `device_ids=[rank]` are right on the first node only: on the second, rank 8 asks for a GPU
that does not exist there. `LOCAL_RANK` (or the rank modulo the node's GPU count) is the index.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.model_events.scopes import scope_facts, scope_of
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.context import FileContext

_GET_RANK = frozenset({"torch.distributed.get_rank", "torch.distributed.distributed_c10d.get_rank"})
_ENV_READERS = frozenset({"os.environ.get", "os.getenv"})
# How far a name is followed through single-scope bindings (`rank = int(os.environ["RANK"])`).
_MAX_DEPTH = 3


@dataclass(frozen=True)
class GlobalRankIndex:
    """`where` uses the global rank `rank` (an expression) as the GPU index of a device."""

    where: cst.CSTNode
    rank: cst.BaseExpression
    how: str  # "set_device", "device string", "device_ids", "move"


def global_rank_indices(ctx: FileContext) -> list[GlobalRankIndex]:
    """Every place in the file that turns a global rank into a CUDA index."""
    if "get_rank" not in ctx.source and "RANK" not in ctx.source:
        return []
    return ctx.shared("model_events.global_rank_indices", _build)


def _build(ctx: FileContext) -> list[GlobalRankIndex]:
    found = []
    for node in ctx.index.of_type(cst.FormattedString):
        index = _cuda_fstring_index(node)
        if index is not None and is_global_rank(ctx, index):
            found.append(GlobalRankIndex(node, index, "device string"))
    for call in ctx.index.of_type(cst.Call):
        for index, how in _indices_of(ctx, call):
            if is_global_rank(ctx, index):
                found.append(GlobalRankIndex(call, index, how))
    # in source order, so that "the first use in a function" is the first one written there
    return sorted(found, key=lambda use: ctx.index.position(use.where))


def _cuda_fstring_index(node: cst.FormattedString) -> cst.BaseExpression | None:
    """`rank` for `f"cuda:{rank}"`."""
    parts = node.parts
    if (
        len(parts) == 2
        and type(parts[0]) is cst.FormattedStringText
        and parts[0].value == "cuda:"
        and type(parts[1]) is cst.FormattedStringExpression
        and parts[1].format_spec is None
    ):
        return parts[1].expression
    return None


def _indices_of(ctx: FileContext, call: cst.Call) -> list[tuple[cst.BaseExpression, str]]:
    """The expressions a call uses as a CUDA index: `set_device(i)`, `torch.device("cuda", i)`,
    `"cuda:{}".format(i)`, `device_ids=[i]`, `x.cuda(i)` / `x.to(i)` with an integer-valued `i`."""
    func = call.func
    qualified = ctx.qualified_name(func) or ""
    plain = [a.value for a in call.args if a.keyword is None and not a.star]
    if qualified == "torch.cuda.set_device" and plain:
        return [(plain[0], "set_device")]
    if qualified == "torch.device" and len(plain) == 2 and _string(plain[0]) == "cuda":
        return [(plain[1], "device string")]
    if (
        type(func) is cst.Attribute
        and func.attr.value == "format"
        and type(func.value) is cst.SimpleString
        and _string(func.value) in ("cuda:{}", "cuda:{:d}")
        and len(plain) == 1
    ):
        return [(plain[0], "device string")]
    found = []
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in ("device_ids", "output_device"):
            value = arg.value
            if isinstance(value, (cst.List, cst.Tuple)) and len(value.elements) == 1:
                found.append((value.elements[0].value, "device_ids"))
            elif arg.keyword.value == "output_device":
                found.append((value, "device_ids"))
    if type(func) is cst.Attribute and func.attr.value in ("cuda", "to") and len(plain) == 1 and len(call.args) == 1:
        found.append((plain[0], "move"))
    return found


def is_global_rank(ctx: FileContext, node: cst.BaseExpression, depth: int = 0) -> bool:
    """`dist.get_rank()`, `int(os.environ["RANK"])`, `os.getenv("RANK")`, or a name (or `self.`
    attribute) every binding of which in its scope (the class, for `self.x`) is one of those.
    `rank % torch.cuda.device_count()` is not: it is a node-local index."""
    if type(node) is cst.Call:
        qualified = ctx.qualified_name(node.func) or ""
        if qualified in _GET_RANK:
            return not node.args  # `get_rank(group)` is the rank inside a sub-group
        if qualified == "builtins.int" or dotted_name(node.func) == "int":
            return len(node.args) >= 1 and is_global_rank(ctx, node.args[0].value, depth)
        if qualified in _ENV_READERS and node.args:
            return _string(node.args[0].value) == "RANK"
        return False
    if type(node) is cst.Subscript:
        if dotted_name(node.value) == "os.environ" and len(node.slice) == 1:
            index = node.slice[0].slice
            return type(index) is cst.Index and _string(index.value) == "RANK"
        return False
    name = dotted_name(node)
    if name is None or depth >= _MAX_DEPTH:
        return False
    values = _bindings(ctx, name, node)
    return bool(values) and all(is_global_rank(ctx, value, depth + 1) for value in values)


def _bindings(ctx: FileContext, name: str, at: cst.CSTNode) -> list[cst.BaseExpression]:
    """What `name` is assigned in `at`'s function (also `args.rank`); for `self.x`, in every
    method of the class. A parameter of the function has a placeholder binding, never a global
    rank."""
    root = scope_of(ctx, at)
    if name.startswith("self.") and name.count(".") == 1:
        cls = ctx.index.enclosing_class(at)
        if cls is None:
            return []
        values: list[cst.BaseExpression] = []
        for method in cls.body.body:
            if type(method) is cst.FunctionDef:
                values.extend(scope_facts(ctx, method).assigned.get(name, ()))
        return values
    if name.count(".") > 1 or name.startswith("self."):
        return []
    # a name, or an attribute of a local object (`args.rank = int(os.environ["RANK"])` in the
    # function that uses it): what this function assigns it; a parameter is bound to a placeholder
    return list(scope_facts(ctx, root).assigned.get(name, ()))


def _string(node: cst.BaseExpression) -> object:
    return literal_value(node) if type(node) is cst.SimpleString else None
