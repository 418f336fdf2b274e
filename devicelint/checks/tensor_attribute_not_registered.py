from __future__ import annotations

from typing import Iterator

import libcst as cst

from devicelint.analysis.placement import value_kind
from devicelint.analysis.placement_classes import ClassFacts, class_facts
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.placement_facts import ACCELERATOR, CPU, DEVICE, Fact
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register

# Classes that move or save their own tensors.
CUSTOM_MOVERS = frozenset({"_apply", "to", "cuda", "_load_from_state_dict", "state_dict", "_save_to_state_dict"})
# `self.x.<attr>` uses that read the tensor on the host or move it first.
SAFE_ATTRIBUTES = frozenset(
    {"to", "cuda", "cpu", "type_as", "item", "tolist", "shape", "size", "device", "dtype", "numel", "dim",
     "numpy", "ndim", "is_cuda", "copy_", "fill_", "zero_", "data_ptr", "nelement"}
)
DATA_CONSTRUCTORS = frozenset({"torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor"})
SAFE_FUNCTIONS = frozenset({"len", "print", "int", "float", "str", "bool", "isinstance", "repr", "list", "tuple", "range", "type"})


@register
class TensorAttributeNotRegistered(Rule):
    """
    ## What it does
    Flags `self.name = <tensor>` in an `nn.Module` (in `__init__` or another method) when the
    tensor is created on the CPU, is neither an `nn.Parameter` nor registered with
    `register_buffer`, and a method later computes with it (not only reads its shape or value).

    ## Why it is a bug on a GPU
    `model.to(device)`, `model.cuda()` and `model.half()` move and cast parameters and buffers
    only. A plain tensor attribute stays on the CPU, so `forward` fails with `Expected all
    tensors to be on the same device` on the GPU; `state_dict()` does not save it either, so a
    reloaded model silently loses it.

    ## Example
    ```python
    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, max_len=512):
            super().__init__()
            self.pe = torch.zeros(max_len, d_model)

        def forward(self, x):
            return x + self.pe[: x.size(1)]
    ```

    ## Use instead
    ```python
    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, max_len=512):
            super().__init__()
            self.register_buffer("pe", torch.zeros(max_len, d_model), persistent=False)

        def forward(self, x):
            return x + self.pe[: x.size(1)]
    ```

    ## Fix safety
    No automatic fix: whether the tensor belongs in `state_dict` (`persistent=True`) or is a
    trainable `nn.Parameter` is a design decision.

    ## Known limits
    Only tensors the analysis can prove are made on the CPU (torch factories without `device=`
    and what is computed from them) are reported. A class that overrides `_apply`, `to`,
    `cuda` or its state-dict hooks moves its own tensors and is skipped; so are tensors whose
    every use moves them (`self.pe.to(x.device)`), reads them on the host (`.item()`,
    `.tolist()`, `.shape`, `len`), 0-dim tensors, which PyTorch lets meet device tensors, and
    test files, whose helper modules keep constant tensors on purpose.
    """

    code = "DL102"
    name = "tensor-attribute-not-registered"
    summary = "A tensor stored as a plain module attribute is not moved by `model.to(device)`."
    message = (
        "`self.{attr}` holds a CPU tensor that is not a parameter or buffer: `model.to(device)` never "
        "moves it and `state_dict()` never saves it; use `self.register_buffer(\"{attr}\", ...)` "
        "(or `nn.Parameter` if it is trained)"
    )
    tokens = ("torch",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if is_test_path(ctx.path):
            return  # test fixtures build odd modules on purpose (constant weights for tracing)
        for facts in class_facts(ctx).values():
            if CUSTOM_MOVERS & facts.methods.keys():
                continue
            by_attr: dict[str, list[tuple[cst.BaseExpression, cst.FunctionDef]]] = {}
            for attr, value, method in facts.assignments:
                by_attr.setdefault(attr, []).append((value, method))
            for attr, assignments in by_attr.items():
                if attr in facts.registered or attr in facts.submodules:
                    continue
                candidate = None
                for value, _ in assignments:
                    fact = value_kind(ctx, value)
                    if (fact.kind == DEVICE or fact.where == ACCELERATOR) and _is_move(value):
                        candidate = None  # `self.x = self.x.to(device)`: moved by hand
                        break
                    if candidate is None and _made_on_cpu(ctx, value, fact):
                        candidate = value
                if candidate is None or not _computed_with(ctx, facts, attr):
                    continue
                target = _assignment_target(ctx, candidate)
                yield self.violation(target or candidate, attr=attr)


def _is_move(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in (
        "to", "cuda", "type_as", "xpu", "mps",
    )


def _made_on_cpu(ctx: FileContext, value: cst.BaseExpression, fact: Fact) -> bool:
    if fact.kind == CPU:
        return fact.from_factory and not fact.scalar
    # `torch.tensor(anchors)`: in a constructor the data is configuration, not a device tensor.
    if isinstance(value, cst.Call) and ctx.qualified_name(value.func) in DATA_CONSTRUCTORS and value.args:
        keywords = {a.keyword.value for a in value.args if a.keyword is not None}
        first = value.args[0].value
        literal_scalar = isinstance(first, (cst.Integer, cst.Float, cst.UnaryOperation))
        return "device" not in keywords and not any(a.star for a in value.args) and not literal_scalar and isinstance(first, (cst.Name, cst.Attribute, cst.List, cst.Tuple))
    return False


def _assignment_target(ctx: FileContext, value: cst.BaseExpression) -> cst.CSTNode | None:
    parent = ctx.index.parent(value)
    if isinstance(parent, cst.Assign):
        return parent.targets[0].target
    if isinstance(parent, cst.AnnAssign):
        return parent.target
    return None


def _computed_with(ctx: FileContext, facts: ClassFacts, attr: str) -> bool:
    """Whether a method other than `__init__` uses `self.<attr>` in a computation."""
    return any(
        name == attr and method.name.value != "__init__" and not _safe_read(ctx, node)
        for name, node, method in facts.references
    )


def _safe_read(ctx: FileContext, node: cst.CSTNode) -> bool:
    parent = ctx.index.parent(node)
    while isinstance(parent, cst.Subscript) and parent.value is node:
        node, parent = parent, ctx.index.parent(parent)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        return parent.attr.value in SAFE_ATTRIBUTES
    if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.FormattedStringExpression, cst.Del)):
        return True
    if isinstance(parent, cst.Comparison):
        return all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in parent.comparisons)
    if isinstance(parent, cst.Arg):
        call = ctx.index.parent(parent)
        return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value in SAFE_FUNCTIONS
    if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
        return True
    if isinstance(parent, (cst.If, cst.While, cst.BooleanOperation)):
        return True  # a truth test (`if self.cache:`), not a computation on the device
    return False
