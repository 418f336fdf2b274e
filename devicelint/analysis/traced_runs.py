"""Calls that run a module on example inputs without calling it: graph writers, tracers and
exporters (`writer.add_graph(model, x)`, `torch.jit.trace(model, x)`, `torch.onnx.export(model,
x, path)`, `torch.export.export(model, (x,))`). Each runs `model(*example)` once, so an example
left on the CPU meets a module on the device as a call would."""

from __future__ import annotations

import libcst as cst

from devicelint.context import FileContext

# qualified function -> the keyword of its example argument (always the second positional one)
TRACING_FUNCTIONS = {
    "torch.jit.trace": "example_inputs",
    "torch.onnx.export": "args",
    "torch.export.export": "args",
}
# functions whose result is the traced module itself, on the module's device
RETURNS_MODULE = frozenset({"torch.jit.trace"})
# `SummaryWriter.add_graph(model, input_to_model)`: a method, whatever the writer is called
GRAPH_METHODS = {"add_graph": "input_to_model"}


def traced_module_and_example(ctx: FileContext, call: cst.Call) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """The module and the example input expression of such a call, else None."""
    func = call.func
    keyword = TRACING_FUNCTIONS.get(ctx.qualified_name(func) or "")
    if keyword is None and type(func) is cst.Attribute:
        keyword = GRAPH_METHODS.get(func.attr.value)
    if keyword is None or any(a.star for a in call.args):
        return None
    positional = [a.value for a in call.args if a.keyword is None]
    named = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    module = positional[0] if positional else named.get("model")
    example = positional[1] if len(positional) > 1 else named.get(keyword)
    if module is None or example is None:
        return None
    return module, example


def traced_returns_module(ctx: FileContext, call: cst.Call) -> bool:
    """Whether the call returns the traced module (`torch.jit.trace`), not a graph or a file."""
    return (ctx.qualified_name(call.func) or "") in RETURNS_MODULE
