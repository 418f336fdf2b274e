from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.device_in_scope import bound_before, device_in_scope
from devicelint.analysis.facts import file_facts
from devicelint.analysis.held_models import held_model
from devicelint.analysis.host_modules import HostModuleCall, is_host_module
from devicelint.analysis.imported_helpers import imported_calls
from devicelint.analysis.names import literal_value
from devicelint.analysis.placement_classes import self_attribute
from devicelint.analysis.placement_facts import FOLLOWS
from devicelint.analysis.placement_values import cpu_only_script
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@register
class ModelNotMoved(Rule):
    """
    ## What it does
    Flags a call of a module that the program built on the CPU and never moved, with an input
    that the program put on the accelerator: `model(x)`, `model.forward(x)`, `model(**batch)`.
    The module is built in the file (an `nn` layer, a module class of the file that owns
    parameters, a `torchvision`/`timm` model, a transformers `from_pretrained` model without
    `device_map` or a `from_config` one, a detectron2 part built from a config
    (`build_backbone(cfg)`: unlike `build_model`, it does not move what it builds), a whole
    model loaded with `torch.load(path, map_location="cpu")` or `torch.jit.load` that the code
    calls and never indexes like a checkpoint, a model from another package's builder that the code loads weights into),
    also inside a helper that returns it, or kept by a plain class (a predictor, a wrapper) in
    `self.<attr>` from `__init__` (or from the one other method that sets it up over a `None`
    that `__init__` leaves there: `self.model = None`, then `self.model = Net()` in `load()`) and
    called in another method or handed to a project function or class that runs it on inputs it
    moves (`Predictor(self.model).predict(batch)`), or built at import and run by a
    function of the file that none of them moves (`net = resnet18()` at the top level, `def
    classify(x): return net(x.cuda())`); the input was moved with
    `.to(device)`/`.cuda()` or made with `device=`. Also a torch layer with weights built inside
    a module's own device code and applied there (`nn.BatchNorm2d(c)(x)` or `norm =
    nn.LayerNorm(d)` in `forward`, not given `device=` or moved): it is built on the CPU at every
    call, while the activations follow the module's device, and no optimizer ever trains it.

    ## Why it is a bug on a GPU
    Moving the inputs does not move the model: its weights stay on the CPU and the first layer
    fails with `Expected all tensors to be on the same device` (or `Input type
    (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same`). Loading a
    checkpoint does not move it either: `load_state_dict` copies the saved tensors into the
    parameters where they are.

    ## Example
    ```python
    model = Net()
    model.load_state_dict(torch.load(path, map_location=device))
    model.eval()
    x = x.to(device)
    logits = model(x)
    ```

    ## Use instead
    ```python
    model = Net().to(device)
    model.load_state_dict(torch.load(path, map_location=device))
    model.eval()
    x = x.to(device)
    logits = model(x)
    ```

    ## Fix safety
    No fix is offered: where the model should be moved (right after it is built, or after the
    checkpoint is loaded) and to which device is for the author to choose.

    ## Known limits
    Only a module whose place is certain is reported. Once the module is handed to anything
    that might move it (a function of unknown body, a helper of the file, a `Trainer`,
    `accelerator.prepare`, a `DataParallel`/DDP wrapper, a method of the module other than
    `eval`/`train`/`load_state_dict`-style ones, any object's attribute), or moved on one
    path only (`if use_cuda: model.cuda()`), or built under a `with` block, a default
    device, with `device=`/`device_map=`/`**kwargs`, or from a class that moves itself or
    inherits from a class outside the file and `torch`, it is not reported. A model a plain
    class builds in `__init__` and uses in another method is followed only where no code of
    the file moves it or hands it on: every use of `self.<attr>` calls it, reads a part of
    it or calls a method that keeps it in place, no `<instance>.<attr>` elsewhere does
    otherwise, `self` is handed to nothing and no class of the file derives from the class
    (other files of the project are not read for this; `fit` moving it and `predict` not is
    not reported: the order in which methods run is unknown, unless the class restores
    instances with a class-level method, `load()` building `cls(...)`, that runs none of the
    methods that move it, and the method calling it runs none of them either). Models from
    other builders (`build_model(cfg)`, `torch.load` without a CPU `map_location`) are of
    unknown place, except a builder function (not a class) imported from another package
    that is handed nothing that could say where to build (no `device=`-like keyword, no
    whole settings object, no value named after a device) and whose model the same function
    loads weights into (`net = hourglass(num_stacks=args.stacks)` then
    `net.load_state_dict(...)`). A project function that moves its inputs to a device
    parameter whose default is the CPU (`evaluate(loader, net, device=torch.device("cpu"))`)
    is taken to run a model on the device only at a direct call that passes that parameter
    (`evaluate(loader, net, device="cuda")`), not through another project function.
    """

    code = "DL117"
    name = "model-not-moved"
    summary = "A module built on the CPU and never moved is called with inputs on the device."
    message = (
        "`{model}` is built on the CPU{built} and {moved}, but is called with `{argument}`, "
        "which is on the {where}; {advice}"
    )
    tokens = ("to(", "cuda", "device")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for found in file_facts(ctx).host_module_calls:
            if found.argument.where == FOLLOWS and cpu_only_script(ctx):
                continue  # a layer built in `forward` of a script that never leaves the CPU
            yield self.violation(found.node, fix=None, **_fields(ctx, found))
        yield from self._handed_to_imported_runners(ctx)

    def _handed_to_imported_runners(self, ctx: FileContext) -> Iterator[Violation]:
        """A module built here on the CPU handed to a function (or class) of another project
        module that runs it on inputs it moves to the device and never moves it (`Trainer(model,
        cfg)` whose `fit` runs `self.model(x.to(self.device))`): reported at the argument."""
        facts = file_facts(ctx)
        for _, helper, bound in imported_calls(ctx):
            runs = list(helper.uses.runs_unmoved)
            for param, device, line in helper.uses.runs_unmoved_if_passed:
                passed = bound.get(device)  # its device parameter defaults to the CPU: what the call gives
                if passed is not None and not _host_device(passed):
                    runs.append((param, line))
            for param, line in runs:
                arg = bound.get(param)
                if arg is None or not is_host_module(facts.value(arg)):
                    continue
                model = _short(ctx.code_for(arg))
                message = (
                    f"`{model}` is built on the CPU and never moved, but `{helper.qualified}` "
                    f"({helper.path}:{line}) runs it on inputs it moves to the device, and never moves it; "
                    f"move the model first: `{model}.to(device)`"
                )
                yield Violation(rule=type(self), node=arg, message=message, fix=None)


def _host_device(value: cst.BaseExpression) -> bool:
    """`"cpu"`, `torch.device("cpu")`."""
    if type(value) is cst.Call and len(value.args) == 1:
        value = value.args[0].value
    return type(value) is cst.SimpleString and literal_value(value) == "cpu"


def _fields(ctx: FileContext, found: HostModuleCall) -> dict[str, str]:
    origin = found.module.origin
    assert type(origin) is cst.Call
    built = ctx.code_for(origin.func) + "(...)"
    argument = _short(ctx.code_for(found.argument_node))
    if found.argument.where == FOLLOWS:
        # a layer built in the module's own device code (`nn.BatchNorm2d(c)(x)` in `forward`)
        scope = found.scope
        function = scope.name.value if type(scope) is cst.FunctionDef else "forward"
        return {
            "model": built,
            "built": f" in `{function}`",
            "moved": "built again at every call",
            "argument": argument,
            "where": "module's device",
            "advice": f"build it once in `__init__` as a submodule (`self.<name> = {built}`), so that "
            "`.to()` moves it and the optimizer trains it",
        }
    model = found.module_node
    if type(model) is cst.Attribute and model.attr.value == "forward":
        model = model.value
    model_text = _short(ctx.code_for(model))
    return {
        "model": model_text,
        "built": f" by `{built}`",
        "moved": _moved(ctx, model),
        "argument": argument,
        "where": "device",
        "advice": f"move the model first: `{model_text}.to({_device(ctx, found)})`",
    }


def _moved(ctx: FileContext, model: cst.CSTNode) -> str:
    """ "never moved", or which methods move a plain class's `self.<attr>` and which
    class-level method returns an instance that skips them."""
    attr = self_attribute(model)
    cls = ctx.index.enclosing_class(model) if attr is not None else None
    held = held_model(ctx, cls, attr) if cls is not None and attr is not None else None
    if held is None or not held.movers or held.restorer is None:
        return "never moved"
    movers = ", ".join(f"`{name}()`" for name in sorted(held.movers))
    return f"moved only by {movers}, which an instance from `{held.restorer}()` has not run"


def _device(ctx: FileContext, found: HostModuleCall) -> str:
    """The device the input went to, as the code spells it (`device`, `args.device`, `"cuda"`)
    where that is a short name visible at the call; else the device code nearby moves things to."""
    stated = found.argument.device_expr
    if stated is not None and _SPELLED.match(stated) and bound_before(ctx, stated, found.node):
        return stated
    if stated is not None and _LITERAL.match(stated):
        return stated
    return device_in_scope(ctx, found.node) or "device"


_SPELLED = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_][A-Za-z_0-9]*)*$")
_LITERAL = re.compile(r"""^(["'])(cuda|mps|xpu)(:\d+)?\1$""")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."
