"""What a launcher (Lightning Fabric, Hugging Face Accelerate) does to the objects handed to it.

`fabric.setup(model, *optimizers)` and `fabric.setup_module(model)` move the module to Fabric's
device and wrap it; they do not touch the optimizers' state, which stays where
`optimizer.load_state_dict` put it (Lightning issue 19225). Accelerate's `prepare` moves an
optimizer's state along with the model, so it is not one of these; but it moves the modules
it prepares, and not the copies of their parameters that some other object (an EMA of the
weights) made before (`prepared_modules`).
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_calls import LAUNCHER
from devicelint.context import FileContext

# Fabric's methods that place a module (its first positional argument) on the device.
FABRIC_MODULE_PLACERS = frozenset({"setup", "setup_module"})
# Accelerate's methods that move the modules among their positional arguments to the device.
LAUNCHER_PREPARERS = frozenset({"prepare", "prepare_model"})


def fabric_placed_module(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """The module a Fabric `setup(model, ...)` / `setup_module(model)` call moves to the device,
    when the engine shows the receiver to be a launcher (`fabric = L.Fabric(...)`, `self.fabric`)."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value not in FABRIC_MODULE_PLACERS:
        return None
    first = next((a for a in call.args if a.keyword is None), None)
    if first is None or first.star:
        return None
    if file_facts(ctx).value(func.value) != LAUNCHER:
        return None
    return first.value


def prepared_modules(ctx: FileContext, call: cst.Call) -> list[str]:
    """The names handed positionally to a launcher's `prepare(...)` / `prepare_model(...)`
    (`accelerator.prepare(unet, optimizer, loader)`), which moves the modules among them to the
    device; the engine shows the receiver to be a launcher. Which of them is a module is the
    caller's to know (the model it tracks)."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value not in LAUNCHER_PREPARERS:
        return []
    if file_facts(ctx).value(func.value) != LAUNCHER:
        return []
    return [name for a in call.args if a.keyword is None and not a.star and (name := dotted_name(a.value)) is not None]
