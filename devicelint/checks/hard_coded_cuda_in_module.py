from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import libcst as cst

from devicelint.analysis.device_tests import machine_device
from devicelint.analysis.devices import string_value
from devicelint.analysis.facts import file_facts
from devicelint.analysis.imported_helpers import imported_calls
from devicelint.analysis.model_events import class_placements
from devicelint.analysis.modules import methods
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement import is_device_guard
from devicelint.analysis.placement_classes import ClassFacts, class_facts, self_attribute
from devicelint.analysis.placement_facts import is_legacy_cuda_constructor
from devicelint.analysis.placement_scope import is_script, is_test_path
from devicelint.analysis.placement_values import on_a_device_path
from devicelint.analysis.run_time_devices import builds_run_time_device, selects_current_gpu
from devicelint.analysis.training.helpers import calls_of
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# Methods whose job is to manage devices (`enable_cpu_offload`, `to_gpu`, `parallelize`).
DEVICE_MANAGEMENT = ("offload", "device", "cuda", "gpu", "accelerat", "parallel", "shard", "distribut")
# Reusable classes other than modules whose methods receive tensors placed by their caller:
# an optimizer's parameters, a scheduler's optimizer, an autograd function's inputs, a
# metric's updates. Matched by qualified name, or by the last part of the base's name when
# the import is not visible (`from .base import BaseOptimizer` stays unknown).
REUSABLE_BASES = frozenset(
    {
        "torch.optim.Optimizer",
        "torch.optim.optimizer.Optimizer",
        "torch.optim.lr_scheduler.LRScheduler",
        "torch.optim.lr_scheduler._LRScheduler",
        "torch.autograd.Function",
        "torch.autograd.function.Function",
        "torchmetrics.Metric",
        "torchmetrics.metric.Metric",
    }
)
REUSABLE_SUFFIXES = ("Optimizer", "LRScheduler")
# Functions that ask about a device rather than place anything on it:
# `torch.cuda.get_device_properties(torch.device("cuda"))`, `torch.cuda.mem_get_info("cuda:0")`.
QUERY_PREFIXES = ("torch.cuda.", "torch.backends.", "torch.xpu.", "torch.mps.", "torch.accelerator.")


_Owner = TypeVar("_Owner")


def hard_coded_cuda(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """The spelling of a hard-coded CUDA placement (`.cuda()`, `"cuda:0"` as a device), else None."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "cuda":
        if (ctx.qualified_name(node.func) or "").startswith("torch."):
            return None  # `torch.cuda(...)` is the module, not a move
        return ".cuda()" if not node.args else None
    if type(node) is cst.Call and is_legacy_cuda_constructor(ctx.qualified_name(node.func)):
        return f"{dotted_name(node.func) or 'torch.cuda.FloatTensor'}(...)"
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        if not isinstance(value, str) or not (value == "cuda" or value.startswith("cuda:")):
            return None
        parent = ctx.index.parent(node)
        if type(parent) is cst.Param and parent.default is node and _kept_for_other_methods(ctx, parent):
            return f'{parent.name.value}="{value}"'
        if type(parent) is cst.Arg:
            call = ctx.index.parent(parent)
            if parent.keyword is not None and parent.keyword.value == "device":
                # a placement only where torch or a tensor method takes it (`check_device(x,
                # device="cuda")`, a helper of the file, may just ask about the device; another
                # library's own `device=` keyword, `ctranslate2.Generator(path, device="cuda")`,
                # names no torch device either)
                qualified = ctx.qualified_name(call.func) if type(call) is cst.Call else None
                placing = type(call) is cst.Call and (
                    (type(call.func) is cst.Attribute and qualified is None) or (qualified or "").startswith("torch.")
                )
                return f'device="{value}"' if placing else None
            if type(call) is cst.Call and parent.keyword is None:
                if type(call.func) is cst.Attribute and call.func.attr.value == "to":
                    return f'.to("{value}")'
                if ctx.qualified_name(call.func) == "torch.device":
                    return f'torch.device("{value}")'
    return None


def _cpu_round_trip(node: cst.CSTNode) -> cst.BaseExpression | None:
    """`x` in `x.cpu().cumsum(0).cuda()`: a tensor taken to the CPU and sent back with a bare
    `.cuda()`, which lands on the current device rather than where `x` was, even under a check
    that `x` is on a GPU (`if x.is_cuda:`); None for any other `.cuda()`."""
    if not (type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "cuda"):
        return None
    part: cst.BaseExpression = node.func.value
    while True:
        if type(part) is cst.Call and type(part.func) is cst.Attribute:
            if part.func.attr.value == "cpu" and not part.args:
                inner = part.func.value
                return inner if type(inner) in (cst.Name, cst.Attribute) else None
            part = part.func.value
        elif isinstance(part, (cst.Attribute, cst.Subscript)):
            part = part.value
        else:
            return None


def _under_tensor_cuda_test(
    ctx: FileContext, node: cst.CSTNode, function: cst.FunctionDef
) -> cst.BaseExpression | None:
    """`x` for a bare `.cuda()` whose nearest enclosing test asks whether the tensor `x` is on a
    GPU (`t.cuda() if x.is_cuda else t`, `if x.device.type == "cuda":`): the copy lands on the
    current CUDA device, not on the GPU `x` is on; None for any other `.cuda()`."""
    if not (type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "cuda"):
        return None
    if node.args:
        return None  # `.cuda(x.device)` says where
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        if ancestor is function:
            return None
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is ancestor.body:
            return _cuda_tested_tensor(ancestor.test)
        child = ancestor
    return None


def _cuda_tested_tensor(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` in the tests `x.is_cuda` and `x.device.type == "cuda"`."""
    if type(test) is cst.Attribute and test.attr.value == "is_cuda":
        tensor = test.value
    elif (
        type(test) is cst.Comparison
        and len(test.comparisons) == 1
        and type(test.comparisons[0].operator) is cst.Equal
        and type(test.left) is cst.Attribute
        and test.left.attr.value == "type"
        and type(test.left.value) is cst.Attribute
        and test.left.value.attr.value == "device"
        and type(test.comparisons[0].comparator) is cst.SimpleString
        and literal_value(test.comparisons[0].comparator) == "cuda"
    ):
        tensor = test.left.value.value
    else:
        return None
    return tensor if type(tensor) in (cst.Name, cst.Attribute) else None


def _kept_for_other_methods(ctx: FileContext, param: cst.Param) -> bool:
    """A constructor parameter (`device="cuda"`) stored on the instance (`self.device = device`)
    and read by another method of the class: the default decides where those methods put
    tensors, not only where `__init__` builds them."""
    function = ctx.index.enclosing_function(param)
    cls = ctx.index.enclosing_class(function) if function is not None else None
    if function is None or cls is None or function.name.value != "__init__":
        return False
    stored = {
        attr
        for node in ctx.index.walk(function.body)
        if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value == param.name.value
        for target in node.targets
        if (attr := self_attribute(target.target)) is not None
    }
    if not stored or _places_with(ctx, function, param.name.value):
        return False  # `self.model = model.to(device)`: built where the default says, consistently
    others = [method for method in methods(cls).values() if method is not function]
    if any(_assigns_self(ctx, method, stored) for method in others):
        return False  # `self.device = x.device` in `forward`: the default is replaced before use
    return any(self_attribute(node) in stored for method in others for node in ctx.index.walk(method))


def _assigns_self(ctx: FileContext, method: cst.FunctionDef, attrs: set[str]) -> bool:
    return any(
        type(node) is cst.AssignTarget and self_attribute(node.target) in attrs for node in ctx.index.walk(method)
    )


def _places_with(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """`function` moves or builds something on the device `name` holds (`.to(name)`,
    `device=name` of a torch call)."""
    for call in ctx.index.walk(function.body):
        if type(call) is not cst.Call:
            continue
        for arg in call.args:
            if not (type(arg.value) is cst.Name and arg.value.value == name):
                continue
            if type(call.func) is cst.Attribute and call.func.attr.value in ("to", "cuda") and arg.keyword is None:
                return True
            if (
                arg.keyword is not None
                and arg.keyword.value == "device"
                and (ctx.qualified_name(call.func) or "").startswith("torch.")
            ):
                return True
    return False


def under_device_guard(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    for ancestor in ctx.index.ancestors(node):
        if ancestor is scope:
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and is_device_guard(ancestor.test, ctx):
            return True
        if type(ancestor) is cst.BooleanOperation and type(ancestor.operator) is cst.And:
            # `torch.cuda.is_available() and torch.cuda.get_device_capability(...)`
            if is_device_guard(ancestor.left, ctx) and not _contains(ctx, ancestor.left, node):
                return True
    return False


def _contains(ctx: FileContext, root: cst.CSTNode, node: cst.CSTNode) -> bool:
    return root is node or any(a is root for a in ctx.index.ancestors(node))


def is_device_query(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`torch.device("cuda")` or `"cuda"` handed to `torch.cuda.get_device_properties(...)` and
    other functions that only ask about a device."""
    parent = ctx.index.parent(node)
    call = ctx.index.parent(parent) if type(parent) is cst.Arg else None
    if type(node) is cst.SimpleString and type(call) is cst.Call and ctx.qualified_name(call.func) == "torch.device":
        parent = ctx.index.parent(call)
        call = ctx.index.parent(parent) if type(parent) is cst.Arg else None
    return type(call) is cst.Call and (ctx.qualified_name(call.func) or "").startswith(QUERY_PREFIXES)


def _gpu_kernel_file(ctx: FileContext) -> bool:
    """Triton or CUDA-extension kernels: code that only exists on the GPU, so CUDA is no choice."""
    return any(
        ctx.qualified_name(node) in GPU_KERNEL_MODULES
        for node in ctx.index.of_type(cst.Name)
        if node.value in ("triton", "tl")
    )


GPU_KERNEL_MODULES = frozenset({"triton", "triton.language"})


def _chooses_device(ctx: FileContext) -> bool:
    """The file picks its device at run time (`torch.cuda.is_available()`,
    `torch.backends.mps.is_available()`, a `torch.device` built from an option or a config,
    `torch.device(f"cuda:{args.gpu}")`, with no current GPU selected that a bare `.cuda()`
    would follow), or runs a model on the CPU (`Net().cpu()`, `model.to("cpu")`): a module that
    hard-codes CUDA contradicts either."""
    if builds_run_time_device(ctx) and not selects_current_gpu(ctx):
        return True
    if _moves_under_flag(ctx):
        return True
    if "is_available" in ctx.source and any(
        (ctx.qualified_name(call.func) or "").endswith(("cuda.is_available", "mps.is_available"))
        for call in ctx.index.of_type(cst.Call)
    ):
        return True
    if "cpu" not in ctx.source:
        return False
    facts = file_facts(ctx)
    return any(
        type(call.func) is cst.Attribute
        and (
            (call.func.attr.value == "cpu" and not call.args)
            or (call.func.attr.value == "to" and len(call.args) == 1 and string_value(call.args[0].value) == "cpu")
        )
        and facts.is_module(call.func.value)
        for call in ctx.index.of_type(cst.Call)
    )


def _moves_under_flag(ctx: FileContext) -> bool:
    """The file moves something to the GPU only under a device test (`if args.use_cuda:
    x = x.cuda()`, `t.cuda() if use_gpu else t`): on the other path it stays on the CPU, so the
    script runs either way, and a function of it that hard-codes CUDA breaks the CPU run."""
    for call in ctx.index.of_type(cst.Call):
        if type(call.func) is not cst.Attribute or call.func.attr.value != "cuda":
            continue
        if on_a_device_path(ctx, call):
            return True
    return False


def reusable_classes(ctx: FileContext) -> dict[int, cst.ClassDef]:
    """Optimizers, schedulers, autograd functions and metrics defined in the file, by node id."""
    found: dict[int, cst.ClassDef] = {}
    for cls in ctx.index.of_type(cst.ClassDef):
        for base in cls.bases:
            qualified = ctx.qualified_name(base.value) if base.keyword is None else None
            spelled = (dotted_name(base.value) or "") if base.keyword is None else ""
            if qualified in REUSABLE_BASES or (qualified is None and spelled.endswith(REUSABLE_SUFFIXES)):
                found[id(cls)] = cls
    return found


@register
class HardCodedCudaInModule(Rule):
    """
    ## What it does
    Flags `.cuda()`, `device="cuda"`, `.to("cuda:0")` and `torch.device("cuda")` inside the
    methods of an `nn.Module`, of an optimizer, LR scheduler, `torch.autograd.Function` or
    torchmetrics `Metric` (their state follows the parameters or inputs a caller hands them),
    or inside a library function that takes tensors, unless the code sits under a device check
    (`if torch.cuda.is_available():`, `if x.is_cuda:`, `torch.cuda.is_available() and ...`).
    Under such a check it still flags a tensor taken to the CPU and sent back with a bare
    `.cuda()` (`x.cpu().cumsum(0).cuda()`), and, under a check that a tensor is on a GPU
    (`w.cuda() if x.is_cuda else w`, `if x.device.type == "cuda":`), any bare `.cuda()`: the
    copy lands on the current device, not on the GPU `x` is on (`x.device`).
    In a library file (no `__main__` block) it also flags a module method that places a tensor
    on the machine's device chosen once for the file: `device=get_device()` where the file's
    `get_device()` returns `"cuda" if torch.cuda.is_available() else "cpu"`, or a module-level
    `DEVICE` bound to that choice. It is CUDA whenever the machine has a GPU, wherever the
    model is.

    ## Why it is a bug on a GPU
    A module cannot know where its caller put it. Hard-coding CUDA breaks CPU-only runs
    (`Torch not compiled with CUDA enabled`), sends tensors to GPU 0 when the model is on
    `cuda:1` or on another DDP rank (`Expected all tensors to be on the same device, but found
    cuda:1 and cuda:0`), and excludes MPS and other accelerators.

    ## Example
    ```python
    class Decoder(nn.Module):
        def forward(self, x):
            steps = torch.arange(x.size(1)).cuda()
            return self.proj(x) + steps
    ```

    ## Use instead
    ```python
    class Decoder(nn.Module):
        def forward(self, x):
            steps = torch.arange(x.size(1), device=x.device)
            return self.proj(x) + steps
    ```

    ## Fix safety
    No automatic fix: the right device expression (an input's `.device`, a parameter's) depends
    on the code.

    ## Known limits
    Test files are not checked. Scripts (files with a `__main__` block) that never choose
    their device at run time are GPU-only by design, so their modules and functions are not
    checked; a script that calls `torch.cuda.is_available()`, runs one of its modules on
    the CPU (`Net().cpu()`, `.to("cpu")`), or moves anything to the GPU only under a device test
    (`if args.use_cuda: feats = feats.cuda()`, which leaves it on the CPU otherwise) is, since
    a module that hard-codes CUDA defeats that choice, and so is a script that builds its device from an option or a config
    (`torch.device(f"cuda:{args.gpu}")`, `torch.device(args.device)`) without making it the
    current GPU (`torch.cuda.set_device`, `CUDA_VISIBLE_DEVICES`), which a bare `.cuda()` would
    follow. A constructor's string default (`device="cuda"`) is reported only where the
    instance keeps it and another method reads it, and the constructor does not also build on
    it (`self.net = net.to(device)` builds where the default says, consistently). An optimizer or scheduler class is checked even in a
    GPU-only script, since it serves whatever parameters it is given. `.cuda(rank)` with an
    explicit device, code under a device check, methods named for device management
    (`to_gpu`, `enable_cpu_offload`), and a device handed to a query such as
    `torch.cuda.get_device_properties(torch.device("cuda"))`, and the default of a parameter
    the function never reads, are not reported. Library
    functions are those whose parameters the placement analysis sees as tensors. Other
    plain classes (trainers, EMA helpers) are not checked, and bases imported from elsewhere
    are recognised only by name (`...Optimizer`, `...LRScheduler`). The machine's device is
    recognised only where this file defines it (a module-level name or a function with no
    arguments); in `__init__` and in scripts it is the author's choice of where to build, and
    is not reported, nor is a device the file also uses outside module methods (a tutorial
    that moves its models and data to the same `device` agrees with its modules).
    With the project index, a call in a module's method of a function (or of a method of an
    instance of a class) of another module that leaves a device parameter the callee reads at
    an accelerator default (`self.anchor_generator.grid_anchors(size, stride)` where
    `grid_anchors` takes `device="cuda"`) is reported at the call, naming the default's line.
    """

    code = "DL107"
    name = "hard-coded-cuda-in-module"
    summary = '`.cuda()` or `device="cuda"` inside a module or library function.'
    message = "`{what}` {claim} in `{function}`: {why}; use the input's device (`{device}`)"
    tokens = ("cuda",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if is_test_path(ctx.path):
            return
        # A script picks its own device for its modules; an optimizer or scheduler class still
        # receives whatever parameters the caller built, so it is checked even in a script.
        # A GPU-only script picks the GPU for its own modules. A script that chooses its device
        # at run time (`torch.cuda.is_available()`) is contradicted by a module that hard-codes
        # CUDA, and an optimizer or scheduler class serves whatever parameters it is given.
        script = is_script(ctx.source) and not _chooses_device(ctx)
        reusable_methods = {id(m): c for c in reusable_classes(ctx).values() for m in methods(c).values()}
        if script and not reusable_methods:
            return
        classes = {} if script else class_facts(ctx)
        # Manual model parallelism places stages on fixed devices on purpose.
        split_classes = {name for name, placed in class_placements(ctx).items() if placed.split() is not None}
        module_methods = {id(m): c for c in classes.values() for m in c.methods.values()}
        if _gpu_kernel_file(ctx):
            return
        candidates: list[cst.Call | cst.SimpleString] = [
            n for n in ctx.index.of_type(cst.Call) if type(n.func) is cst.Attribute and n.func.attr.value == "cuda"
        ]
        candidates += [n for n in ctx.index.of_type(cst.SimpleString) if "cuda" in n.value]
        candidates += [n for n in ctx.index.of_type(cst.Call) if is_legacy_cuda_constructor(ctx.qualified_name(n.func))]
        for node in candidates:
            what = hard_coded_cuda(ctx, node)
            if what is None:
                continue
            function = ctx.index.enclosing_function(node)
            if function is None:
                continue
            cls = module_methods.get(id(function)) or _only_caller(ctx, function, module_methods)
            enclosing = ctx.index.enclosing_class(function)
            if enclosing is not None and enclosing.name.value in split_classes:
                continue
            reusable = reusable_methods.get(id(function)) or _only_caller(ctx, function, reusable_methods)
            if script and reusable is None:
                continue
            placement = file_facts(ctx).scope(function)
            if cls is None and reusable is None and not placement.device_params:
                continue
            tested = _under_tensor_cuda_test(ctx, node, function)
            round_trip = _cpu_round_trip(node) or tested
            if (under_device_guard(ctx, node, function) and round_trip is None) or any(
                w in function.name.value.lower() for w in DEVICE_MANAGEMENT
            ):
                continue
            if is_device_query(ctx, node) or _unread_default(ctx, node, function):
                continue
            if round_trip is not None:
                device = f"{ctx.code_for(round_trip)}.device"  # back where the tensor came from
            elif reusable is not None:
                device = _reusable_device(ctx, node, function, placement.device_params)
            elif placement.device_params:
                device = f"{placement.device_params[0]}.device"
            elif cls is not None:
                device = "self.device" if cls.has_device else "next(self.parameters()).device"
            else:
                device = "x.device"
            yield self.violation(
                node,
                what=what,
                claim="hard-codes CUDA",
                function=function.name.value,
                device=device,
                why=_WHY if round_trip is None else _ROUND_TRIP_WHY if tested is None else _TESTED_WHY,
            )
        yield from self._accelerator_defaults(ctx, module_methods, split_classes)
        if not is_script(ctx.source):
            yield from self._machine_devices(ctx, classes)

    def _accelerator_defaults(
        self, ctx: FileContext, module_methods: dict[int, ClassFacts], split_classes: set[str]
    ) -> Iterator[Violation]:
        """A call, in a module's code, of a function of another module that leaves a device
        parameter at its CUDA default (`self.anchor_generator.grid_anchors(size, stride)` where
        `grid_anchors` takes `device="cuda"`): the tensors it builds land on the current GPU."""
        if not any(helper.uses.accelerator_defaults for helper in ctx.project.helpers.values()):
            return  # (most files: no call to resolve)
        for call, helper, bound in imported_calls(ctx):
            left = [entry for entry in helper.uses.accelerator_defaults if entry[0] not in bound]
            function = ctx.index.enclosing_function(call) if left else None
            if function is None:
                continue
            cls = module_methods.get(id(function)) or _only_caller(ctx, function, module_methods)
            enclosing = ctx.index.enclosing_class(function)
            if cls is None or (enclosing is not None and enclosing.name.value in split_classes):
                continue
            if under_device_guard(ctx, call, function) or any(
                w in function.name.value.lower() for w in DEVICE_MANAGEMENT
            ):
                continue
            param, default, line = left[0]
            tensors = file_facts(ctx).scope(function).device_params
            device = (
                f"{tensors[0]}.device"
                if tensors
                else "self.device"
                if cls.has_device
                else "next(self.parameters()).device"
            )
            yield self.violation(
                call,
                what=f"{ctx.code_for(call.func)}(...)",
                claim=f"leaves `{param}` at its default `{default}` ({helper.path}:{line})",
                function=function.name.value,
                device=f"{param}={device}",
                why=_WHY,
            )

    def _machine_devices(self, ctx: FileContext, classes: dict[str, ClassFacts]) -> Iterator[Violation]:
        """`device=get_device()` in a module's method, where `get_device()` (or a module-level
        `DEVICE`) is the machine's device: CUDA whenever one exists, wherever the model is."""
        module_methods = {id(m): c for c in classes.values() for m in c.methods.values()}
        uses: list[tuple[cst.Arg, str, cst.FunctionDef | None]] = []
        for arg in ctx.index.of_type(cst.Arg):
            spelled = machine_device(ctx, arg.value) if _placement_argument(ctx, arg) else None
            if spelled is not None:
                uses.append((arg, spelled, ctx.index.enclosing_function(arg)))
        # Where the file itself places models or data on that device too (`model.to(DEVICE)` in
        # a tutorial-style script), its modules agree with it: only a device that nothing but
        # module methods uses is the module's own guess.
        shared = {spelled for _, spelled, function in uses if function is None or id(function) not in module_methods}
        for arg, spelled, function in uses:
            cls = module_methods.get(id(function)) if function is not None else None
            if spelled in shared or function is None or cls is None or under_device_guard(ctx, arg, function):
                continue
            if any(w in function.name.value.lower() for w in DEVICE_MANAGEMENT) or function.name.value == "__init__":
                continue
            yield self.violation(
                arg.value,
                what=f"device={spelled}" if arg.keyword is not None else f".to({spelled})",
                claim="places on the machine's device (CUDA whenever one exists), not the model's,",
                function=function.name.value,
                why="a model kept on the CPU, moved to `cuda:1` or to MPS gets tensors on another device",
                device="self.device" if cls.has_device else "next(self.parameters()).device",
            )


_WHY = "it breaks CPU-only runs, other GPUs (`cuda:1`, DDP ranks) and MPS"
# A CPU copy sent back with a bare `.cuda()`: it lands on the current device, not where it came from.
_ROUND_TRIP_WHY = (
    "the CPU copy goes back to the current CUDA device, not to the GPU the input was on (`cuda:1`, DDP ranks)"
)

# A bare `.cuda()` under `if x.is_cuda:`: it lands on the current device, not on `x`'s GPU.
_TESTED_WHY = "the tensor goes to the current CUDA device, not to the GPU the tested tensor is on (`cuda:1`, DDP ranks)"


def _unread_default(ctx: FileContext, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
    """`node` is in the default of a parameter the function never reads (`device=torch.device(
    "cuda:0")` kept in a model's signature after it stopped using it): building a device object
    places nothing."""
    param = next((a for a in ctx.index.ancestors(node) if type(a) is cst.Param), None)
    if param is None or param.default is None:
        return False
    name = param.name.value
    return not any(type(n) is cst.Name and n.value == name for n in ctx.index.walk(function.body))


def _only_caller(ctx: FileContext, function: cst.FunctionDef, owners: dict[int, _Owner]) -> _Owner | None:
    """The class whose methods (in `owners`) make every call of a helper of the file (a step's
    piece moved into a function of its own), a few calls up; None if any call is made elsewhere."""
    seen: set[int] = set()
    frontier = [function]
    found: set[int] = set()
    result: dict[int, _Owner] = {}
    for _ in range(3):
        callers: list[cst.FunctionDef] = []
        for helper in frontier:
            calls = calls_of(ctx, helper)
            if not calls:
                return None
            for call in calls:
                outer = ctx.index.enclosing_function(call)
                if outer is None:
                    return None
                owner = owners.get(id(outer))
                if owner is not None:
                    found.add(id(owner))
                    result[id(owner)] = owner
                elif id(outer) not in seen:
                    seen.add(id(outer))
                    callers.append(outer)
        if not callers:
            break
        frontier = callers
    else:
        return None
    return result[found.pop()] if len(found) == 1 else None


def _placement_argument(ctx: FileContext, arg: cst.Arg) -> bool:
    """`device=...` of a torch factory or tensor method, or the first argument of `.to(...)`."""
    call = ctx.index.parent(arg)
    if type(call) is not cst.Call:
        return False
    if arg.keyword is not None:
        qualified = ctx.qualified_name(call.func) or ""
        return arg.keyword.value == "device" and (
            qualified.startswith("torch.") or (type(call.func) is cst.Attribute and not qualified)
        )
    return bool(call.args) and call.args[0] is arg and type(call.func) is cst.Attribute and call.func.attr.value == "to"


def _loop_variable(ctx: FileContext, node: cst.CSTNode, function: cst.FunctionDef) -> str | None:
    """`p` in `for p in group["params"]:` around `node`: the tensor whose device to use."""
    for ancestor in ctx.index.ancestors(node):
        if ancestor is function:
            return None
        if type(ancestor) is cst.For and type(ancestor.target) is cst.Name:
            return ancestor.target.value
    return None


def _reusable_device(ctx: FileContext, node: cst.CSTNode, function: cst.FunctionDef, tensors: list[str]) -> str:
    """The device to suggest inside an optimizer-like class: the loop's parameter, a tensor
    argument, else a parameter's."""
    loop = _loop_variable(ctx, node, function)
    if loop is not None:
        return f"{loop}.device"
    if tensors:
        return f"{tensors[0]}.device"
    # The inputs come first and have no default (`eps=1e-10`, `closure=None` are no tensors).
    params = [
        p.name.value for p in function.params.params if p.name.value not in ("self", "cls", "ctx") and p.default is None
    ]
    return f"{params[0]}.device" if params else "p.device"
