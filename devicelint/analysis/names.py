"""Resolve expressions to qualified names from the file's own imports.

`import torch as T`, `from torch import nn`, `import torch.nn.functional as F` and
`from torch.nn import DataParallel as DP` all resolve, so no rule matches on spelling.
The table is flow-insensitive (every import in the file counts, wherever it is): cheap,
and right for the way training code imports.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.index import NodeIndex


def dotted_name(node: cst.CSTNode | None) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None (also for no node)."""
    parts: list[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is cst.Name:
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _module_name(node: cst.BaseExpression) -> str | None:
    return dotted_name(node)


class ImportTable:
    """Local name -> fully qualified name, for every import in one module."""

    def __init__(self, index: NodeIndex) -> None:
        self.bound: dict[str, str] = {}
        for node in index.of_type(cst.Import):
            for alias in node.names:
                full = _module_name(alias.name)
                if full is None:
                    continue
                if alias.asname is not None and type(alias.asname.name) is cst.Name:
                    self.bound[alias.asname.name.value] = full
                else:
                    top = full.split(".", 1)[0]
                    self.bound.setdefault(top, top)
        for node in index.of_type(cst.ImportFrom):
            if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
                continue
            base = _module_name(node.module)
            if base is None:
                continue
            for alias in node.names:
                if type(alias.name) is not cst.Name:
                    continue
                local = alias.name.value
                if alias.asname is not None and type(alias.asname.name) is cst.Name:
                    local = alias.asname.name.value
                self.bound[local] = f"{base}.{alias.name.value}"

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        """`torch.nn.DataParallel` for `DP`, `nn.DataParallel`, `torch.nn.DataParallel`..."""
        # Exact type tests: these node classes have no subclasses, and this runs for every call.
        if type(node) is cst.Call:
            node = node.func
        parts: list[str] = []
        while type(node) is cst.Attribute:
            parts.append(node.attr.value)
            node = node.value
        if type(node) is not cst.Name:
            return None
        base = self.bound.get(node.value)
        if base is None:
            return None
        parts.append(base)
        return ".".join(reversed(parts))

    def imports_module(self, prefix: str) -> bool:
        """Whether any import binds a name under `prefix` (e.g. "torch")."""
        return any(v == prefix or v.startswith(prefix + ".") for v in self.bound.values())


_LITERALS: dict[str, object] = {}


def literal_value(node: cst.SimpleString) -> object:
    """`node.evaluated_value`, remembered by the literal's text: LibCST evaluates it with
    `ast.literal_eval` (a compile per call), and rules ask about the same few strings often."""
    text = node.value
    value = _LITERALS.get(text, _LITERALS)
    if value is _LITERALS:
        if len(_LITERALS) > 50_000:
            _LITERALS.clear()
        value = _LITERALS[text] = node.evaluated_value
    return value


# Names that usually hold a configuration (`args.device == "cuda"` compares two strings)
# rather than a tensor or a module.
SETTINGS_NAMES = frozenset(
    {
        "args",
        "opt",
        "opts",
        "cfg",
        "config",
        "conf",
        "hparams",
        "hp",
        "params",
        "settings",
        "options",
        "flags",
        "training_args",
        "train_args",
        "trainer_args",
        "kwargs",
        "os",
        "env",
    }
)


def isinstance_test(test: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
    """(`x`, the class or tuple of classes) for a test `isinstance(x, C)` on a plain name."""
    if (
        type(test) is cst.Call
        and type(test.func) is cst.Name
        and test.func.value == "isinstance"
        and len(test.args) == 2
        and type(test.args[0].value) is cst.Name
    ):
        return test.args[0].value.value, test.args[1].value
    return None


def is_staticmethod(func: cst.FunctionDef) -> bool:
    """`@staticmethod` on the function: it takes no instance as its first parameter."""
    return any(dotted_name(d.decorator) == "staticmethod" for d in func.decorators)
