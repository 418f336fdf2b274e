"""Which module classes a module hands to `nn.DataParallel`, read with Python's own parser
(`ast`), so that the module defining a class knows its instances run as per-GPU replicas even
when the wrapping happens in a training script elsewhere in the project."""

from __future__ import annotations

import ast

from devicelint.project.summary import _NESTED_SCOPES, _descendants, _Qualifier

_WRAPPERS = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel"})
# `Net().cuda()`, `Net().to(device)`: the wrapped model is still an instance of the class
_KEEPING = frozenset({"cuda", "to", "float", "half", "double", "train", "eval"})


def data_parallel_wraps(tree: ast.Module, qualify: _Qualifier) -> list[tuple[str, int, bool]]:
    """(class as the module spells it, line, may span several GPUs) for each `nn.DataParallel`
    call whose model is an instance of a class built right there (`DataParallel(Net(...))`) or
    bound to a name in the same scope (`net = Net(...).cuda(); net = DataParallel(net)`)."""
    found: list[tuple[str, int, bool]] = []
    scopes: list[ast.AST] = [tree, *(n for n in _descendants(tree) if isinstance(n, _NESTED_SCOPES))]
    for scope in scopes:
        nodes = _descendants(scope, _NESTED_SCOPES)
        built = _built_names(nodes, qualify)
        for node in nodes:
            if not (isinstance(node, ast.Call) and qualify(node.func) in _WRAPPERS):
                continue
            model = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "module"), None)
            if model is None:
                continue
            spelled = _class_built(_unchained(model), qualify)
            if spelled is None and isinstance(model := _unchained(model), ast.Name):
                spelled = _last_before(built.get(model.id, []), node.lineno)
            if spelled is not None:
                found.append((spelled, node.lineno, _several_gpus(node)))
    return found


def _unchained(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _KEEPING:
        node = node.func.value
    return node


def _class_built(node: ast.expr, qualify: _Qualifier) -> str | None:
    """`Net(...)` -> `Net` as the module spells it (`models.Net` after `import models`); a
    builder's call (`build_model(cfg)`) -> the builder, which the index follows to the class
    every `return` builds."""
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
        spelled = qualify(node.func)
        if spelled is not None and not spelled.startswith("torch."):
            return spelled
    return None


def _built_names(nodes: list[ast.AST], qualify: _Qualifier) -> dict[str, list[tuple[int, str | None]]]:
    """Name -> (line, class built there or None) for each plain assignment to it in the scope."""
    built: dict[str, list[tuple[int, str | None]]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            value = _unchained(node.value)
            if isinstance(value, ast.Call) and qualify(value.func) in _WRAPPERS:
                continue  # the wrapping itself
            cls = _class_built(value, qualify)
            if cls is None and isinstance(value, ast.Name) and value.id == name:
                continue  # `net = net.cuda()` keeps what `net` held
            built.setdefault(name, []).append((node.lineno, cls))
    return built


def _last_before(bindings: list[tuple[int, str | None]], line: int) -> str | None:
    before = [(at, cls) for at, cls in bindings if at < line]
    return max(before, key=lambda binding: binding[0])[1] if before else None


def _several_gpus(call: ast.Call) -> bool:
    """No `device_ids` (every visible GPU), or a list of more than one."""
    ids = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "device_ids"), None)
    return not (isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) < 2)
