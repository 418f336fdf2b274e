"""Whole-file renames: locals and parameters, import aliases, factories imported by name."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import Assignment, ComprehensionScope, FunctionScope

from .cst_tools import Analysis, NotApplicable, walk
from .op_extract import add_module_statements

_KEEP = {"self", "cls", "_", "__class__"}


def rename_locals(a: Analysis) -> cst.Module:
    """Every function's locals, parameters, loop and comprehension variables get neutral names
    (`v1`, `v2`...). Parameters that some call in the file passes by keyword keep their name."""
    keywords = {n.keyword.value for n in walk(a.module) if isinstance(n, cst.Arg) and n.keyword is not None}
    declared = {
        item.name.value for n in walk(a.module) if isinstance(n, (cst.Global, cst.Nonlocal)) for item in n.names
    }
    taken = {n.value for n in walk(a.module) if isinstance(n, cst.Name)}
    new_ids: dict[int, str] = {}
    counter = 0
    seen_scopes = {id(s): s for s in a.scopes.values() if isinstance(s, (FunctionScope, ComprehensionScope))}
    for scope in seen_scopes.values():
        for assignment in scope.assignments:
            if not isinstance(assignment, Assignment) or assignment.name in _KEEP | declared:
                continue
            node = assignment.node
            if isinstance(node, cst.Param):
                if assignment.name in keywords:
                    continue
                binding = node.name
            elif isinstance(node, cst.Name):
                binding = node
            else:
                continue  # nested defs, classes and imports keep their names
            key = (id(scope), assignment.name)
            if key not in new_ids:  # type: ignore[comparison-overlap]
                counter += 1
                while f"v{counter}" in taken:
                    counter += 1
                new_ids[key] = f"v{counter}"  # type: ignore[index]
            new = new_ids[key]  # type: ignore[index]
            targets = [binding] + [r.node for r in assignment.references if isinstance(r.node, cst.Name)]
            for target in targets:
                new_ids[id(target)] = new
    names = {k: v for k, v in new_ids.items() if isinstance(k, int)}
    if not names:
        raise NotApplicable("no function locals to rename")
    return a.module.visit(_RenameIds(names))


class _RenameIds(cst.CSTTransformer):
    def __init__(self, names: dict[int, str]) -> None:
        super().__init__()
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.names.get(id(original_node))
        return updated_node.with_changes(value=new) if new else updated_node


_LIBS = {
    "torch",
    "torchvision",
    "torchaudio",
    "torchmetrics",
    "lightning",
    "pytorch_lightning",
    "accelerate",
    "transformers",
    "numpy",
}


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _alias(name: str) -> str:
    return ("t" if name[:1].islower() else "T") + name if name != "torch" else "th"


def _name_ids_to_skip(module: cst.Module) -> set[int]:
    """Names that are not reads of a module-level binding: attribute names, keywords, import parts, params."""
    skip: set[int] = set()
    for node in walk(module):
        if isinstance(node, cst.Attribute):
            skip.add(id(node.attr))
        elif isinstance(node, (cst.Arg,)) and node.keyword is not None:
            skip.add(id(node.keyword))
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            skip.update(id(n) for n in walk(node))
        elif isinstance(node, (cst.Param, cst.FunctionDef, cst.ClassDef)):
            skip.add(id(node.name))
    return skip


def alias_imports(a: Analysis) -> cst.Module:
    """`import torch` -> `import torch as th`, `import torch.nn as nn` -> `... as tnn`,
    `from torch import nn` -> `from torch import nn as tnn`; every use follows."""
    module = a.module
    bound_locally = {n.name.value for n in walk(module) if isinstance(n, cst.Param)} | {
        t.value
        for n in walk(module)
        if isinstance(n, cst.AssignTarget)
        for t in walk(n.target)
        if isinstance(t, cst.Name)
    }
    renames: dict[str, str] = {}
    alias_swaps: dict[int, cst.ImportAlias] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        small = stmt.body[0]
        if isinstance(small, cst.Import):
            for alias in small.names:
                full = _dotted(alias.name)
                if full.split(".")[0] not in _LIBS:
                    continue
                if alias.asname is None and "." not in full:
                    old = full
                elif alias.asname is not None:
                    old = alias.asname.name.value  # type: ignore[union-attr]
                else:
                    continue
                renames[old] = _alias(old)
                alias_swaps[id(alias)] = alias.with_changes(asname=cst.AsName(cst.Name(renames[old])))
        elif (
            isinstance(small, cst.ImportFrom)
            and not isinstance(small.names, cst.ImportStar)
            and small.module is not None
        ):
            if _dotted(small.module).split(".")[0] not in _LIBS or small.relative:
                continue
            for alias in small.names:
                old = alias.asname.name.value if alias.asname else alias.name.value  # type: ignore[union-attr]
                renames[old] = _alias(old)
                alias_swaps[id(alias)] = alias.with_changes(asname=cst.AsName(cst.Name(renames[old])))
    renames = {k: v for k, v in renames.items() if k not in bound_locally}
    if not renames:
        raise NotApplicable("no module-level imports of torch or its ecosystem to alias")
    skip = _name_ids_to_skip(module)

    class Alias(cst.CSTTransformer):
        def leave_ImportAlias(self, original_node: cst.ImportAlias, updated_node: cst.ImportAlias) -> cst.ImportAlias:
            swap = alias_swaps.get(id(original_node))
            if swap is None:
                return updated_node
            old = swap.asname.name.value  # type: ignore[union-attr]
            return swap if any(old == v for v in renames.values()) else updated_node

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
            if id(original_node) in skip or original_node.value not in renames:
                return updated_node
            return updated_node.with_changes(value=renames[original_node.value])

    return module.visit(Alias())


FACTORIES = (
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "rand",
    "randn",
    "randint",
    "randperm",
    "tensor",
    "linspace",
    "eye",
    "from_numpy",
    "as_tensor",
    "load",
)


def from_import_factories(a: Analysis) -> cst.Module:
    """`torch.zeros(...)` -> `zeros(...)` with `from torch import zeros` (for each factory used)."""
    module = a.module
    attrs = {id(n.attr) for n in walk(module) if isinstance(n, cst.Attribute)}
    bound = {n.value for n in walk(module) if isinstance(n, cst.Name) and id(n) not in attrs} - {"torch"}
    used: list[str] = []
    swaps: dict[int, cst.CSTNode] = {}
    for node in walk(module):
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Name)
            and node.func.value.value == "torch"
            and node.func.attr.value in FACTORIES
            and node.func.attr.value not in bound
        ):
            swaps[id(node.func)] = cst.Name(node.func.attr.value)
            if node.func.attr.value not in used:
                used.append(node.func.attr.value)
    if not used:
        raise NotApplicable("no torch factory call (torch.zeros, torch.tensor, torch.load...) to import by name")

    class Swap(cst.CSTTransformer):
        def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
            return swaps.get(id(original_node), updated_node)

    result = module.visit(Swap())
    return add_module_statements(result, [f"from torch import {', '.join(used)}"])
