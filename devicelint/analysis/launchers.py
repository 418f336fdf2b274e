"""What a launcher (Lightning Fabric, Hugging Face Accelerate) does to the objects handed to it.

`fabric.setup(model, *optimizers)` and `fabric.setup_module(model)` move the module to Fabric's
device and wrap it; they do not touch the optimizers' state, which stays where
`optimizer.load_state_dict` put it (Lightning issue 19225). Accelerate's `prepare` moves an
optimizer's state along with the model, so it is not one of these.
"""

from __future__ import annotations

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.analysis.placement_calls import LAUNCHER
from devicelint.context import FileContext

# Fabric's methods that place a module (its first positional argument) on the device.
FABRIC_MODULE_PLACERS = frozenset({"setup", "setup_module"})


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
