"""Parameters a function hands to NumPy: what it computes from them reaches `.numpy()` with no
move to the CPU on the way (`boxes = boxes * scale; xyxy = convert(boxes).numpy()`). A device
tensor would fail there, so the function is written for host tensors: its callers pass CPU values
(a detector's drawing helper gets boxes its prediction function already copied with `.cpu()`).
So does a function that calls one of the tensor methods PyTorch runs only on CPU tensors
(`preds[..., 0].apply_(fn)`, `map_`, `map2_`) on what it computes from them. Values unpacked from
a result (`vals, idx = torch.max(hm, 2)`) are computed from what it reads.
"""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext

# Calls on the way that put the value on the host (or out of the tensor world) first.
_TO_HOST = frozenset({"cpu", "to", "tolist", "item"})
_MAX_ROUNDS = 6
# Conversions to NumPy, and tensor methods that PyTorch implements only for CPU tensors (they run
# a Python callable on each element).
_HOST_ONLY_METHODS = frozenset({"numpy", "apply_", "map_", "map2_"})


def numpy_bound_parameters(ctx: FileContext, func: cst.FunctionDef, names: set[str]) -> set[str]:
    """The names among `names` (the function's parameters) whose values, or values computed from
    them by plain assignments in the function, are turned into NumPy arrays without a move."""
    memo: dict[int, frozenset[str]] = ctx.shared("numpy_bound.parameters", lambda c: {})
    found = memo.get(id(func))
    if found is None:
        found = memo[id(func)] = frozenset(_bound(ctx, func))
    return names & found


def _bound(ctx: FileContext, func: cst.FunctionDef) -> set[str]:
    params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
    numpy_calls = [
        node
        for node in ctx.index.walk(func.body)
        if type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and node.func.attr.value in _HOST_ONLY_METHODS
        and (not node.args if node.func.attr.value == "numpy" else bool(node.args))
        and ctx.index.enclosing_function(node) is func
    ]
    if not numpy_calls or not params:
        return set()
    assigns = [
        node
        for node in ctx.index.walk(func.body)
        if type(node) is cst.Assign and ctx.index.enclosing_function(node) is func
    ]
    out = set()
    for param in params:
        derived = {param}
        for _ in range(_MAX_ROUNDS):
            grown = set(derived)
            for assign in assigns:
                if _reads(ctx, assign.value, derived):
                    for target in assign.targets:
                        grown |= _bound_names(target.target)
            if grown == derived:
                break
            derived = grown
        if any(_reads(ctx, call.func.value, derived) for call in numpy_calls):  # type: ignore[attr-defined]  # an Attribute, checked above
            out.add(param)
    return out


def _bound_names(target: cst.BaseExpression) -> set[str]:
    """`x` of `x = ...`, and `a`, `b` of `a, b = ...` / `(a, (b, c)) = ...`."""
    if type(target) is cst.Name:
        return {target.value}
    if type(target) is cst.Tuple or type(target) is cst.List:
        found: set[str] = set()
        for element in target.elements:
            found |= _bound_names(element.value)
        return found
    return set()


def _reads(ctx: FileContext, expr: cst.BaseExpression, names: set[str]) -> bool:
    """`expr` reads one of `names` with no move to the host, no host read and no test on the
    way (`x.cpu()`, `x.to(...)`, `x.tolist()`, `x.is_cuda` leave it out)."""
    for node in ctx.index.walk(expr):
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _TO_HOST:
            return False
        if type(node) is cst.Attribute and node.attr.value in ("is_cuda", "device"):
            return False
    return any(type(n) is cst.Name and n.value in names for n in ctx.index.walk(expr))


# Libraries whose functions turn their array arguments into NumPy arrays (`numpy.asarray`).
# NumPy's own functions are left out: they are called as often on the arrays that pipelines and
# other libraries' objects return (a diffusers pipeline's images, a pyannote feature's `.data`),
# which the engine cannot tell from their tensors.
NUMPY_CONSUMERS = ("sklearn.", "scipy.")


def numpy_consumer(ctx: FileContext, call: cst.Call) -> str | None:
    """The qualified name of a SciPy or scikit-learn function that `call` runs
    (`scipy.stats.pearsonr`, `sklearn.metrics.f1_score`), whose array arguments become NumPy
    arrays; else None."""
    qualified = ctx.qualified_name(call.func)
    if qualified is None or not qualified.startswith(NUMPY_CONSUMERS):
        return None
    return qualified
