"""The device expression a fix can name: what the code around a node already moves things to.

A fix that adds `map_location=` or `device=` must name a device that exists where the edit
goes. The most telling one is the expression the same code passes to `.to(...)` or `device=`
(`device`, `args.device`, `self.device`): it says both that the code runs on an accelerator and
which spelling it uses. Only expressions whose root name is visible at the edit are offered.
"""

from __future__ import annotations

from collections import Counter

import libcst as cst

from devicelint.analysis.devices import is_dtype
from devicelint.analysis.training.syntax import keyword, method_name, positional
from devicelint.context import FileContext

# A name or attribute that spells a device, as code in the wild names it.
_DEVICE_WORDS = ("device", "dev", "cuda", "gpu", "rank")


def device_in_scope(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """Source text of the device that code around `node` moves tensors or modules to, visible at
    `node`: the most used one in `node`'s function, else its class, else the file; None when
    there is none."""
    function = ctx.index.enclosing_function(node)
    owner = ctx.index.enclosing_class(node)
    # Nearest first: the same function, the same class, the file.
    counts: tuple[Counter[str], ...] = (Counter(), Counter(), Counter())
    for call in ctx.index.of_type(cst.Call):
        target = _moved_to(ctx, call)
        if target is None:
            continue
        text = ctx.code_for(target)
        same_class = owner is not None and ctx.index.enclosing_class(call) is owner
        if text.startswith("self.") and not same_class:
            continue  # another class's `self.device`
        counts[0 if ctx.index.enclosing_function(call) is function else 1 if same_class else 2][text] += 1
    for tier, ranked in enumerate(counts):
        for text, _ in ranked.most_common():
            if _visible(ctx, text, node, same_function=tier == 0):
                return text
    return None


def _moved_to(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    if method_name(call) == "to":
        args = positional(call)
        target = keyword(call, "device") or (args[0] if args else None)
    else:
        target = keyword(call, "device")
    if not isinstance(target, (cst.Name, cst.Attribute)) or is_dtype(ctx, target):
        return None
    last = (target.attr if isinstance(target, cst.Attribute) else target).value.lower()
    return target if any(word in last for word in _DEVICE_WORDS) else None


def _visible(ctx: FileContext, text: str, node: cst.CSTNode, same_function: bool) -> bool:
    """Whether `text` means at `node` what it meant where the code used it: `self.` inside a
    method, a name of the same function bound before `node`, or (from elsewhere in the file) a
    module-level name the function around `node` does not rebind (`x` in another function is
    another `x`)."""
    root = text.split(".", 1)[0]
    function = ctx.index.enclosing_function(node)
    if root == "self":
        params = function.params.params if function is not None else ()
        return bool(params) and params[0].name.value == "self"
    if same_function:
        return bound_before(ctx, text, node)
    if function is not None and (any(p.name.value == root for p in function.params.params)
                                 or any(_binds(ctx, n, root) for n in ctx.index.walk(function.body))):
        return False
    return any(_binds(ctx, n, root) and ctx.index.enclosing_function(n) is None for n in ctx.index.walk(ctx.module))


def bound_before(ctx: FileContext, expression: str, node: cst.CSTNode | None) -> bool:
    """Whether the name an expression starts with (`x` of `x.device`) is surely bound where
    `node` runs: a parameter of its function (`self` included), a name that function assigns
    before `node`'s statement, or, for module code, a name the module assigns before it; a
    function also sees every module-level name (it runs after the module is loaded)."""
    root = expression.split(".", 1)[0].split("(", 1)[0]
    if node is None or not root.isidentifier():
        return False
    function = ctx.index.enclosing_function(node)
    if function is not None:
        params = function.params
        if any(p.name.value == root for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
            return True
    scope: cst.CSTNode = function.body if function is not None else ctx.module
    for found in ctx.index.walk(scope):
        if found is node:
            break
        if _binds(ctx, found, root) and ctx.index.enclosing_function(found) is function:
            return True
    if function is None:
        return False
    return any(_binds(ctx, found, root) and ctx.index.enclosing_function(found) is None
               for found in ctx.index.walk(ctx.module))


def _binds(ctx: FileContext, node: cst.CSTNode, name: str) -> bool:
    """`node` binds `name` in its function or module scope (not a comprehension's own variable)."""
    if not (isinstance(node, cst.Name) and node.value == name and ctx.index.in_binding_target(node)):
        return False
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.CompFor, cst.Lambda)):
            return False
        if isinstance(ancestor, (cst.BaseStatement, cst.FunctionDef)):
            return True
    return True
