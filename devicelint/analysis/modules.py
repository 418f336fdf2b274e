"""Which classes in a file are `nn.Module`s (directly, through known bases, or through each other)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import NN_NON_MODULES
from devicelint.analysis.vocabulary import MODULE_BASE_SUFFIXES as MODULE_BASE_SUFFIXES
from devicelint.analysis.vocabulary import MODULE_BASES as MODULE_BASES
from devicelint.context import FileContext
from devicelint.project.view import ImportedClass

# Libraries whose capitalised classes are `nn.Module`s, by qualified-name prefix (a class
# deriving from `torchvision.models.resnet.ResNet` or a torchmetrics metric is a module too),
# less the names there that are not modules.
MODULE_LIBRARIES = (
    "torchmetrics.",
    "torchvision.ops.",
    "torchvision.models.",
    "timm.layers.",
    "timm.models.",
    "torchaudio.models.",
)
NOT_MODULES = ("functional", "utilities", "utils", "Config", "Tokenizer", "Processor", "Output", "Weights")
DATASET_BASES = frozenset(
    {"torch.utils.data.Dataset", "torch.utils.data.IterableDataset", "torch.utils.data.dataset.Dataset"}
)


def _base_names(ctx: FileContext, cls: cst.ClassDef) -> list[tuple[str | None, str | None]]:
    """(qualified name, spelled name) of each base class."""
    out = []
    for base in cls.bases:
        if base.keyword is not None:
            continue
        out.append((ctx.qualified_name(base.value), dotted_name(base.value)))
    return out


def imported_module_class(ctx: FileContext, node: cst.CSTNode) -> ImportedClass | None:
    """The `nn.Module` class of another project module that `node` names (`Net`, `models.Net`)."""
    if not ctx.project.classes:
        return None
    spelled = dotted_name(node)
    return ctx.project.classes.get(spelled) if spelled is not None else None


def builds_cpu_project_module(ctx: FileContext, call: cst.Call) -> bool:
    """`call` builds a class of another project module whose parameters start on the CPU (it
    builds them and places nothing itself)."""
    imported = imported_module_class(ctx, call.func)
    return imported is not None and imported.owns_cpu_parameters and not imported.places_itself


def is_library_module_class(qualified: str | None) -> bool:
    """`torchvision.models.resnet.ResNet`, `torchmetrics.Accuracy`: a module class of a library."""
    if not qualified or any(word in qualified for word in NOT_MODULES):
        return False
    last = qualified.rsplit(".", 1)[-1]
    if qualified.startswith("torch.nn.") and last not in NN_NON_MODULES:
        return last[:1].isupper()  # `class SeededDropout(nn.Dropout)`: torch's own layers are modules
    return qualified.startswith(MODULE_LIBRARIES) and last[:1].isupper()


def _classes_deriving(
    ctx: FileContext,
    roots: frozenset[str],
    suffixes: frozenset[str],
    library: Callable[[str | None], bool] = lambda _: False,
) -> dict[str, cst.ClassDef]:
    classes = {c.name.value: c for c in ctx.index.of_type(cst.ClassDef)}
    imported = roots is MODULE_BASES and bool(ctx.project.classes)
    found: dict[str, cst.ClassDef] = {}
    changed = True
    while changed:  # a fixed point: `class B(A)` where `class A(nn.Module)` in the same file
        changed = False
        for name, cls in classes.items():
            if name in found:
                continue
            for qualified, spelled in _base_names(ctx, cls):
                last = (spelled or "").rsplit(".", 1)[-1]
                if (
                    (qualified in roots)
                    or (spelled in found)
                    or (qualified is None and last in suffixes)
                    or (imported and spelled in ctx.project.classes)
                    or library(qualified)
                ):
                    found[name] = cls
                    changed = True
                    break
    return found


def module_classes(ctx: FileContext) -> dict[str, cst.ClassDef]:
    """Classes of this file that are `nn.Module` subclasses, by name."""
    return ctx.shared(
        "module_classes", lambda c: _classes_deriving(c, MODULE_BASES, MODULE_BASE_SUFFIXES, is_library_module_class)
    )


def dataset_classes(ctx: FileContext) -> dict[str, cst.ClassDef]:
    """Classes of this file that are `torch.utils.data.Dataset` subclasses, by name."""
    return ctx.shared(
        "dataset_classes", lambda c: _classes_deriving(c, DATASET_BASES, frozenset({"Dataset", "IterableDataset"}))
    )


def methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    """The functions defined directly in a class body, by name."""
    body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
    return {stmt.name.value: stmt for stmt in body if type(stmt) is cst.FunctionDef}
