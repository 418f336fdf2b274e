from __future__ import annotations

from typing import Iterator

import libcst as cst

from devicelint.analysis.placement_facts import MODEL_WORDS, move_call, moves_to_accelerator
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register


def _optimizer_of(ctx: FileContext, call: cst.Call) -> str | None:
    """The model name `m` when `call` is `torch.optim.X(m.parameters(), ...)`."""
    if not (ctx.qualified_name(call.func) or "").startswith("torch.optim.") or not call.args:
        return None
    first = call.args[0].value
    if (isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute)
            and first.func.attr.value in ("parameters", "named_parameters") and isinstance(first.func.value, cst.Name)):
        return first.func.value.value
    return None


def _moved_model(call: cst.Call) -> str | None:
    """`m` when `call` moves the name `m` towards an accelerator (`m.to(device)`, `m.cuda()`)."""
    if moves_to_accelerator(call) and move_call(call) in ("to", "cuda") and isinstance(call.func.value, cst.Name):  # type: ignore[attr-defined]
        return call.func.value.value  # type: ignore[attr-defined]
    return None


# The model of an optimizer that the function receives: any module moved after the load.
ANY_MODEL = "<any model>"


@register
class OptimizerStateDevice(Rule):
    """
    ## What it does
    Flags `optimizer.load_state_dict(...)` on an optimizer built from `model.parameters()`
    when the same function moves `model` to a device only afterwards.

    ## Why it is a bug on a GPU
    `Optimizer.load_state_dict` casts the saved state (Adam's `exp_avg`, `exp_avg_sq`, momentum
    buffers) to the device of each parameter *at load time*. Loaded while the model is still on
    the CPU, the state stays on the CPU after `model.to(device)`, and the first
    `optimizer.step()` fails with `Expected all tensors to be on the same device` (or, with
    `foreach`/fused kernels, with a device-mismatch error deep inside the optimizer).

    ## Example
    ```python
    model = Net()
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])
    model.to(device)
    ```

    ## Use instead
    ```python
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])
    ```

    ## Fix safety
    No automatic fix: the statements have to be reordered.

    ## Known limits
    Only optimizers of `torch.optim` built from `<name>.parameters()` (then a move of that same
    name), or optimizers the function receives under a name containing `optim` (then a move of
    a name whose state the function also loaded, or that names a model), in the same function
    are considered. Building the optimizer before `model.to(device)`
    without loading a state is not reported: `Module.to` moves parameters in place, so the
    optimizer keeps working.
    """

    code = "DL111"
    name = "optimizer-state-device"
    summary = "An optimizer state is loaded before its model is moved to the device."
    message = "`{call}` loads the optimizer state while `{model}` is still on the CPU, so the state stays there after `{move}`; move the model before building the optimizer and loading its state"
    tokens = ("load_state_dict",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        # Calls in source order, grouped by scope (function or module code).
        optimizers: dict[tuple[int, str], str] = {}  # (scope, optimizer name) -> model name
        loads: dict[int, list[tuple[cst.Call, str]]] = {}  # scope -> (load call, model)
        loaded: dict[int, set[str]] = {}  # scope -> names whose (module) state was loaded
        for call in ctx.index.of_type(cst.Call):
            scope = id(ctx.index.enclosing_function(call) or ctx.module)
            model = _optimizer_of(ctx, call)
            if model is not None:
                parent = ctx.index.parent(call)
                if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
                    optimizers[(scope, parent.targets[0].target.value)] = model
                continue
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict" and isinstance(func.value, cst.Name):
                name = func.value.value
                owner = optimizers.get((scope, name))
                if owner is None and "optim" in name.lower():
                    owner = ANY_MODEL  # an optimizer handed in: its model is whichever moves next
                if owner is not None:
                    loads.setdefault(scope, []).append((call, owner))
                else:
                    loaded.setdefault(scope, set()).add(name)
                continue
            moved = _moved_model(call)
            if moved is None:
                continue
            pending = loads.get(scope, [])
            is_model = moved in loaded.get(scope, set()) or any(word in moved.lower() for word in MODEL_WORDS)
            for entry in [p for p in pending if p[1] == moved or (p[1] is ANY_MODEL and is_model)]:
                pending.remove(entry)
                yield self.violation(entry[0], call=ctx.code_for(entry[0]), model=moved, move=ctx.code_for(call))
