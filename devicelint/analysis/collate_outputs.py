"""What a loader's `collate_fn` of the file returns that is no tensor at all.

A collate function often returns, beside the stacked tensors, plain Python lists built by
appending what each sample carries (`num_crowds.append(sample[1][2])`: counts, ids, file
names). A loop over the loader binds those parts too; they are no CPU tensor to move
(`num_crowds.to("cuda")` would fail on a list), so the engine leaves them unknown.
"""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext

Path = tuple[int, ...]


def plain_list_parts(ctx: FileContext, loader: cst.Call, functions: dict[str, cst.FunctionDef]) -> set[Path]:
    """Positions (paths into the returned tuple, `(1, 2)` for `num_crowds` in
    `return images, (targets, masks, num_crowds)`) of the parts that the loader's
    `collate_fn`, a function of the file with one `return` of a tuple, builds as a list that
    starts empty and is only grown with `append` of values made without any call."""
    collate = next((a.value for a in loader.args if a.keyword is not None and a.keyword.value == "collate_fn"), None)
    function = functions.get(collate.value) if type(collate) is cst.Name else None
    if function is None:
        return set()
    returns = [n for n in ctx.index.walk(function.body) if type(n) is cst.Return]
    if len(returns) != 1 or type(returns[0].value) is not cst.Tuple:
        return set()
    found: set[Path] = set()
    _collect(ctx, function, returns[0].value, (), found)
    return found


def _collect(ctx: FileContext, function: cst.FunctionDef, value: cst.Tuple, path: Path, found: set[Path]) -> None:
    for i, element in enumerate(value.elements):
        part = element.value
        if type(part) is cst.Tuple:
            _collect(ctx, function, part, (*path, i), found)
        elif type(part) is cst.Name and _plain_list(ctx, function, part.value):
            found.add((*path, i))


def _plain_list(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """`name` starts as `[]` (alone or in a tuple of empty lists) and every other use that
    changes it is `name.append(value)` with a value made without a call (`sample[1][2]`)."""
    started = False
    for node in ctx.index.walk(function.body):
        if type(node) is cst.Assign:
            for target in node.targets:
                pairs = _targets_and_values(target.target, node.value)
                for bound, value in pairs:
                    if bound == name:
                        if type(value) is not cst.List or value.elements:
                            return False
                        started = True
        elif type(node) is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name:
            if node.func.value.value != name:
                continue
            if node.func.attr.value != "append" or len(node.args) != 1:
                return False
            if any(type(inner) is cst.Call for inner in ctx.index.walk(node.args[0].value)):
                return False
        elif type(node) is cst.AugAssign and type(node.target) is cst.Name and node.target.value == name:
            return False
    return started


def _targets_and_values(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression]]:
    if type(target) is cst.Name:
        return [(target.value, value)]
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
        if len(target.elements) == len(value.elements):
            out: list[tuple[str, cst.BaseExpression]] = []
            for t, v in zip(target.elements, value.elements):
                out += _targets_and_values(t.value, v.value)
            return out
    return []
