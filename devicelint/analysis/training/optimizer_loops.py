"""Whether a `for` loop runs once per optimizer: told by what it iterates, not by its words.

`for opt in [opt_g, opt_d]`, `for name, opt in self.optimizers.items()`, `zip(optimizers, losses)`,
`range(len(optimizers))` and `self.optimizers()` (Lightning) go over optimizers; `range(n)` over
a count does not, whatever the count is called (`range(total_optim_steps)` is a loop of training
steps). Where the file shows nothing of the collection (a parameter, an attribute stored from one),
its own name decides, so that `for opt in self.optimizers` still counts.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.training.step_parts import looks_like_optimizer, optimizer_class
from devicelint.analysis.training.syntax import last_word, method_name, positional, receiver, scope_of
from devicelint.analysis.training.values import attribute_values, values_of
from devicelint.context import FileContext

# Builtins that hand on the elements of their first argument (`enumerate(opts)`, `list(opts)`).
_PASS_THROUGH = frozenset({"enumerate", "reversed", "list", "tuple", "sorted", "iter"})
# Words of a name that counts or indexes steps, not optimizers (`optim_steps`, `n_optim_iters`).
_COUNT_WORDS = ("step", "iter", "epoch", "count", "num", "len", "size", "idx", "index", "freq", "interval")
_MAX_DEPTH = 4


def loops_over_optimizers(ctx: FileContext, loop: cst.For) -> bool:
    """`loop` iterates a collection of optimizers (or its indices)."""
    return _optimizers(ctx, loop.iter, scope_of(ctx, loop), 0)


def _optimizers(ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    kind = type(node)
    if kind is cst.Call:
        return _call_of_optimizers(ctx, node, scope, depth)  # type: ignore[arg-type]  # checked above
    if kind in (cst.List, cst.Tuple, cst.Set):
        return any(
            type(el) is cst.Element and _one_optimizer(ctx, el.value)
            for el in node.elements  # type: ignore[attr-defined]  # List, Tuple and Set have elements
        )
    if kind is cst.Dict:
        return any(type(el) is cst.DictElement and _one_optimizer(ctx, el.value) for el in node.elements)  # type: ignore[attr-defined]  # checked above
    if kind in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
        return _one_optimizer(ctx, node.elt)  # type: ignore[attr-defined]  # comprehensions have elt
    if kind is cst.DictComp:
        return _one_optimizer(ctx, node.value)  # type: ignore[attr-defined]  # checked above
    if kind is cst.Subscript:
        return _optimizers(ctx, node.value, scope, depth + 1)  # type: ignore[attr-defined]  # checked above
    if kind is cst.Name:
        known = values_of(ctx, node.value, scope)  # type: ignore[attr-defined]  # checked above
    elif kind is cst.Attribute:
        known = attribute_values(ctx, node)
    else:
        return False
    shown = [v for v in known or () if v is not None and not _opaque(ctx, v)]
    if shown and len(shown) == len(known or ()):
        return any(_optimizers(ctx, v, scope, depth + 1) for v in shown)
    if any(_optimizers(ctx, v, scope, depth + 1) for v in shown):
        return True
    # Nothing the file shows says what it holds: a collection named for optimizers.
    word = last_word(node)
    return "optim" in word and not any(w in word for w in _COUNT_WORDS)


def _call_of_optimizers(ctx: FileContext, call: cst.Call, scope: cst.CSTNode, depth: int) -> bool:
    args = positional(call)
    if type(call.func) is cst.Name:
        name = call.func.value
        if name in _PASS_THROUGH:
            return bool(args) and _optimizers(ctx, args[0], scope, depth + 1)
        if name == "zip":
            return any(_optimizers(ctx, a, scope, depth + 1) for a in args)
        if name == "range":
            # `range(len(optimizers))` walks the optimizers by index; any other range counts.
            size = args[-1] if len(args) in (1, 2) else None
            return (
                type(size) is cst.Call
                and type(size.func) is cst.Name
                and size.func.value == "len"
                and bool(positional(size))
                and _optimizers(ctx, positional(size)[0], scope, depth + 1)
            )
        return False
    method = method_name(call)
    owner = receiver(call)
    if method in ("values", "items") and owner is not None:
        return _optimizers(ctx, owner, scope, depth + 1)
    # Lightning's `self.optimizers()` returns the module's optimizers.
    return method == "optimizers"


def _one_optimizer(ctx: FileContext, node: cst.BaseExpression) -> bool:
    if type(node) is cst.Call:
        return optimizer_class(ctx.qualified_name(node.func) or "")
    return looks_like_optimizer(node, ctx)


def _opaque(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """A name the file shows nothing more of (a parameter: `self.optimizers = opts`): what it
    holds is as unknown as if nothing were shown, and the collection's own name decides."""
    if type(value) is not cst.Name:
        return False
    return not [v for v in values_of(ctx, value.value, scope_of(ctx, value)) or () if v is not None]
