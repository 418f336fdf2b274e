from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from devicelint.analysis.module_placement import (
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    WrapperSite,
    chain_base,
    history,
    resolver_for,
    scope_facts,
    scope_of,
    short,
    wrapper_at,
)
from devicelint.analysis.names import dotted_name
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register

SAVERS = frozenset({"torch.save", "torch.serialization.save"})
LOADERS = frozenset({"torch.load", "torch.serialization.load"})
# Code that already handles the prefix: nothing to report in that file.
_PREFIX_HANDLING = ('"module."', "'module.'", "consume_prefix_in_state_dict_if_present", "[7:]", "'module'", '"module"')


@dataclass(frozen=True)
class _Saved:
    call: cst.Call
    model: str
    path: str
    key: str | None
    wrapper: WrapperSite | None  # the wrapper the saved model is, None for a bare model


@register
class WrappedStateDictPrefix(Rule):
    """
    ## What it does
    Flags a checkpoint that crosses the `DataParallel`/`DistributedDataParallel` boundary in
    one file: `torch.save(model.state_dict(), path)` (or `{"model": model.state_dict()}`) where
    `model` is a wrapper, and the same path (and key) later loaded with `load_state_dict` into a
    bare model built in the file; and the reverse, a bare model's checkpoint loaded into a
    wrapper.

    ## Why it is a bug on a GPU
    A wrapper holds the model as its `module` attribute, so every key of its `state_dict()`
    starts with `module.` (`module.encoder.weight`). Loading those keys into the bare model
    fails with `Missing key(s) in state_dict: "encoder.weight" ... Unexpected key(s):
    "module.encoder.weight"`, and with `strict=False` it silently loads nothing. The
    checkpoint written by the multi-GPU run cannot be used by the single-GPU evaluation.

    ## Example
    ```python
    model = nn.DataParallel(Net()).cuda()
    torch.save(model.state_dict(), "best.pt")
    ...
    net = Net()
    net.load_state_dict(torch.load("best.pt", map_location="cpu"))
    ```

    ## Use instead
    ```python
    torch.save(model.module.state_dict(), "best.pt")
    ```

    ## Fix safety
    No fix: old checkpoints already on disk keep their `module.` keys.

    ## Known limits
    Save and load must be in the same file and name the same path expression (or the same
    constant). Files that mention `"module."` or `consume_prefix_in_state_dict_if_present`
    are taken to handle the prefix. The loaded model must be built in the same function from
    a class call; a model received as an argument is not judged.
    """

    code = "DL204"
    name = "wrapped-state-dict-prefix"
    summary = "A wrapper's state dict keys start with `module.` and do not load into the bare model."
    message = "{problem}; {advice}"
    tokens = ("state_dict",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if "DataParallel" not in ctx.source or any(token in ctx.source for token in _PREFIX_HANDLING):
            return
        saves = [s for call in ctx.index.of_type(cst.Call) for s in _saves(ctx, call)]
        if not saves:
            return
        for call in ctx.index.of_type(cst.Call):
            if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "load_state_dict" and call.args):
                continue
            target = dotted_name(call.func.value)
            source = _loaded_from(ctx, call.args[0].value)
            if target is None or source is None:
                continue
            into_wrapper = wrapper_at(ctx, target, call)
            for saved in saves:
                if (saved.path, saved.key) != source:
                    continue
                if saved.wrapper is not None and into_wrapper is None and _bare(ctx, target, call):
                    yield self.violation(
                        saved.call,
                        problem=(
                            f"`{short(ctx, saved.call)}` saves the state dict of the `{saved.wrapper.kind}` wrapper "
                            f"`{saved.model}`, whose keys start with `module.`, and `{short(ctx, call)}`{_where(ctx, call)} "
                            f"loads it into the bare model `{target}` (missing and unexpected keys)"
                        ),
                        advice=f"save `{saved.model}.module.state_dict()` instead",
                    )
                elif saved.wrapper is None and into_wrapper is not None:
                    yield self.violation(
                        call,
                        problem=(
                            f"`{short(ctx, call)}` loads the state dict of the bare model `{saved.model}`{_where(ctx, saved.call)} into the "
                            f"`{into_wrapper.kind}` wrapper `{target}`, whose keys start with `module.` "
                            "(missing and unexpected keys)"
                        ),
                        advice=f"load it with `{target}.module.load_state_dict(...)`",
                    )


def _where(ctx: FileContext, node: cst.CSTNode) -> str:
    """` in `evaluate`` for a node inside a function, else nothing."""
    function = ctx.index.enclosing_function(node)
    return f" in `{function.name.value}`" if function is not None else ""


def _saves(ctx: FileContext, call: cst.Call) -> list[_Saved]:
    if ctx.qualified_name(call.func) not in SAVERS or len(call.args) < 2:
        return []
    obj, path = call.args[0], call.args[1]
    if obj.keyword is not None or path.star or obj.star:
        return []
    path_text = _path_key(ctx, path.value, call)
    found = []
    pairs: list[tuple[cst.BaseExpression, str | None]] = [(obj.value, None)]
    if isinstance(obj.value, cst.Dict):
        pairs = [
            (e.value, e.key.evaluated_value)
            for e in obj.value.elements
            if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
            and isinstance(e.key.evaluated_value, str)
        ]
    for value, key in pairs:
        model = _state_dict_of(value)
        if model is None:
            continue
        wrapper = wrapper_at(ctx, model, call)
        if wrapper is None and not _bare(ctx, model, call):
            continue
        found.append(_Saved(call, model, path_text, key, wrapper))
    return found


def _state_dict_of(node: cst.BaseExpression) -> str | None:
    """`model` for `model.state_dict()`."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict":
        if not node.args:
            return dotted_name(node.func.value)
    return None


def _path_key(ctx: FileContext, node: cst.BaseExpression, at: cst.CSTNode) -> str:
    """A comparable form of a path expression: its constant value when it has one, else its source."""
    key = dotted_name(node)
    if key is not None:
        values = scope_facts(ctx, scope_of(ctx, at)).assigned.get(key) or scope_facts(ctx, ctx.module).assigned.get(key)
        if values is not None and len(values) == 1 and isinstance(values[0], cst.SimpleString):
            node = values[0]
    if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
        return "str:" + node.evaluated_value
    return "".join(ctx.code_for(node).split())


def _loaded_from(ctx: FileContext, node: cst.BaseExpression, depth: int = 0) -> tuple[str, str | None] | None:
    """(path, key) for `torch.load(p)`, `torch.load(p)["k"]`, or a name bound once to either."""
    key = None
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if not isinstance(index, cst.Index) or not isinstance(index.value, cst.SimpleString):
            return None
        key = index.value.evaluated_value if isinstance(index.value.evaluated_value, str) else None
        if key is None:
            return None
        node = node.value
    if isinstance(node, cst.Call) and ctx.qualified_name(node.func) in LOADERS and node.args:
        first = node.args[0]
        if first.star or (first.keyword is not None and first.keyword.value != "f"):
            return None
        return _path_key(ctx, first.value, node), key
    name = dotted_name(node)
    if name is not None and depth < 2:
        values = scope_facts(ctx, scope_of(ctx, node)).assigned.get(name)
        if values is not None and len(values) == 1:
            inner = _loaded_from(ctx, values[0], depth + 1)
            if inner is not None and (key is None or inner[1] is None):
                return inner[0], key or inner[1]
    return None


def _bare(ctx: FileContext, var: str, at: cst.CSTNode) -> bool:
    """Whether `var` is a model built by a class call in this scope (or `wrapper.module`)."""
    if var.endswith(".module"):
        return True
    facts = history(ctx, var, at)
    if facts.bind is None:
        return False
    base = chain_base(resolver_for(ctx, at), facts.bind)[0]
    if not isinstance(base, cst.Call):
        return False
    qualified = ctx.qualified_name(base.func) or ""
    if qualified in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL:
        return False
    callee = (dotted_name(base.func) or "").rsplit(".", 1)[-1]
    return facts.trusted or callee[:1].isupper() or callee == "from_pretrained"

