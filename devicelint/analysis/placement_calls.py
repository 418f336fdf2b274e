"""How calls change placement: torch factories, moves, tensor methods, module calls, and
same-file functions followed one level deep.

The layer the statement interpreter in `placement.py` is built on (`_Interpreter` subclasses
`CallEvaluation`). This module does not import `placement.py`: the few things it needs from the
statements (evaluating an expression, recording a meeting) are declared on the class below and
supplied by the interpreter; the state's types come from `placement_program.py`, below both."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from devicelint.analysis.devices import (
    CPU_DEVICE,
    DeviceId,
    indexed,
    int_value,
    is_dtype,
    literal_device,
    torch_device,
)
from devicelint.analysis.dtype_arguments import holds_a_dtype
from devicelint.analysis.host_modules import (
    HOST,
    HostModuleCall,
    built_on_host,
    is_host_module,
    library_model,
    loaded_builder,
    loaded_model_on_host,
)
from devicelint.analysis.kept_devices import kept_cpu_device
from devicelint.analysis.names import dotted_name, is_staticmethod, literal_value
from devicelint.analysis.placement_classes import is_parameter_call, module_constructor
from devicelint.analysis.placement_facts import (
    ACCELERATOR,
    CPU,
    CROSS_DEVICE_FUNCTIONS,
    DATA_FACTORIES,
    DEVICE,
    DEVICE_VALUE,
    FACTORIES,
    FOLLOWS,
    HOST_ARGUMENTS,
    INPLACE_METHODS,
    INPUT_MOVING_WRAPPERS,
    LEGACY_CONSTRUCTORS,
    LIKE_FACTORIES,
    LOSS_CALLABLE_NAMES,
    MEETING_METHODS,
    MODEL_WORDS,
    MODULE,
    MODULE_NON_TENSOR_METHODS,
    MODULE_SELF_METHODS,
    MOVE_METHODS,
    NEW_METHODS,
    NON_TENSOR_METHODS,
    PARAMETER_FREE_MODULES,
    SHAPE_GROWING_METHODS,
    UNKNOWN,
    UNKNOWN_FACT,
    VARIABLE_WRAPPERS,
    Fact,
    is_legacy_cuda_constructor,
    is_tensor_function,
    move_call,
    moves_to_accelerator,
)
from devicelint.analysis.placement_program import MAX_FOLLOW_DEPTH
from devicelint.analysis.placement_scope import defines_tests
from devicelint.analysis.placement_values import (
    DEFAULT_DEVICE_SETTERS,
    LOADER,
    NUMBER,
    PY_DATA,
    Env,
    accelerator_default,
    compatible,
    cpu_side,
    devicey,
    flatten,
    is_device_guard,
    is_empty_placeholder,
    is_literal_data,
    is_number,
    is_python_data,
    module_wide_accelerator_default,
    sets_accelerator_default,
)
from devicelint.analysis.traced_runs import traced_module_and_example, traced_returns_module

if TYPE_CHECKING:
    from collections.abc import Callable

    from devicelint.analysis.placement_classes import ClassFacts
    from devicelint.analysis.placement_program import FileAnalysis, ScopePlacement
    from devicelint.context import FileContext

# Libraries whose calls return host data (arrays, frames, numbers), never a tensor.
HOST_DATA_MODULES = ("numpy.", "pandas.")

# torch functions whose result has more elements than each of their tensor arguments.
GATHERING_FUNCTIONS = frozenset(
    {
        "stack",
        "cat",
        "concat",
        "concatenate",
        "hstack",
        "vstack",
        "dstack",
        "column_stack",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "meshgrid",
        "broadcast_to",
        "tile",
        "repeat_interleave",
        "block_diag",
        "cartesian_prod",
    }
)


def _counts_a_tensor(call: cst.Call, method: str) -> bool:
    """`x.size(1)` (one literal dimension), `x.numel()` and `x.item()`: numbers, on any tensor
    (and `.item()` on a NumPy value too)."""
    if method in ("numel", "item"):
        return not call.args
    return (
        method == "size"
        and len(call.args) == 1
        and call.args[0].keyword is None
        and type(call.args[0].value) in (cst.Integer, cst.UnaryOperation)
    )


_CAST_METHODS = frozenset({"float", "double", "half", "bfloat16", "long", "int", "bool", "clone", "detach"})


# The legacy CPU tensor types (`torch.LongTensor`, `"torch.FloatTensor"`): `.type()` to one moves to the CPU.
_CPU_TENSOR_TYPE = re.compile(r"torch\.[A-Z][A-Za-z]*Tensor")


# torch.nn classes that hold other modules: what they hold decides whether they have parameters.
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Module"})


class CallEvaluation:
    """The call half of the interpreter; `placement._Interpreter` supplies the state and the
    statement-level methods declared first below (its own definitions replace these)."""

    ctx: FileContext
    analysis: FileAnalysis
    scope: cst.CSTNode
    cls: ClassFacts | None
    depth: int
    own_place: str | None
    env: Env
    closure: Env

    bound: Env | None  # what a followed run was handed (arguments, a plain instance's state)
    bound_values: dict[str, tuple[cst.BaseExpression, Fact]]
    result: ScopePlacement
    receiver: str
    receiver_class: cst.ClassDef | None

    if TYPE_CHECKING:  # the interpreter's constructor and entry, for `type(self)(...).run()`

        def __init__(
            self,
            ctx: FileContext,
            analysis: FileAnalysis,
            scope: cst.CSTNode,
            cls: ClassFacts | None,
            bound: Env | None,
            depth: int,
        ) -> None: ...
        def run(self) -> ScopePlacement: ...

    def is_receiver(self, node: cst.CSTNode) -> bool:
        """Whether `node` names the instance this code runs on (`self`, or the parameter a
        helper is handed it through)."""
        return type(node) is cst.Name and node.value == self.receiver

    def receiver_attribute(self, node: cst.CSTNode) -> str | None:
        """`name` for `self.name` (or `<receiver>.name`), else None."""
        if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == self.receiver:
            return node.attr.value
        return None

    def _eval(self, node: cst.CSTNode) -> Fact:
        """The fact of an expression, recorded for the node."""
        raise NotImplementedError

    def _fact_of(self, node: cst.CSTNode) -> Fact:
        """The fact already recorded for an evaluated node."""
        raise NotImplementedError

    def _module_device(self, name: str) -> Fact | None:
        """What the module's top-level code binds to `name`, where a function may read it."""
        raise NotImplementedError

    def _loader_inner(self, node: cst.BaseExpression) -> bool:
        """Whether an iterable is a data loader, also under `tqdm(...)` or `iter(...)`."""
        raise NotImplementedError

    def _key(self, node: cst.BaseExpression) -> str | None:
        """The environment key of a name or `self.` attribute, else None."""
        raise NotImplementedError

    def own_submodule(self, attr: str) -> Fact:
        """A submodule of this class, where its `__init__` leaves it."""
        raise NotImplementedError

    def _placed_inherited(self, attr: str) -> Fact | None:
        """A submodule the class inherits that `__init__` moves by hand (`self.fc.to("cuda:1")`
        in a subclass of torchvision's `ResNet`): a module on that device."""
        raise NotImplementedError

    def _cross(
        self, value: Fact, value_node: cst.CSTNode, other: Fact, other_node: cst.CSTNode, node: cst.CSTNode, how: str
    ) -> None:
        """Record two accelerators that meet at `node`."""
        raise NotImplementedError

    def _record(
        self,
        cpu: Fact,
        cpu_node: cst.CSTNode,
        device: Fact,
        device_node: cst.CSTNode | None,
        node: cst.CSTNode,
        how: str,
    ) -> None:
        """Record a CPU value meeting a device value at `node`."""
        raise NotImplementedError

    def _args(self, call: cst.Call, host: tuple[int | str, ...] = ()) -> list[tuple[Fact, cst.CSTNode]]:
        """The facts of the call's arguments, leaving out those the callee takes on the host."""
        out = []
        for position, arg in enumerate(call.args):
            fact = self._eval(arg.value)
            taken_on_host = (arg.keyword.value if arg.keyword is not None else position) in host
            if not arg.star and not taken_on_host:
                out.extend(flatten(fact, arg.value))
            elif arg.star == "*" and fact.elements is not None and not fact.alike:
                out.extend(flatten(fact, arg.value))  # `self.cell(*args)` of `args = (x, (h, c))`
        return out

    def _call(self, call: cst.Call) -> Fact:
        func = call.func
        # (`qualified_name` reads through a call: `nn.BatchNorm2d(c)(x)` calls the module built,
        # it does not build another)
        qualified = self.ctx.qualified_name(func) if type(func) is not cst.Call else None
        traced = self._traced_run(call)
        if traced is not None:
            return traced
        if qualified is not None and qualified.startswith("torch."):
            return self._torch_call(call, qualified)
        if qualified in PLACING_LAUNCHERS:
            self._args(call)
            return LAUNCHER
        if qualified is not None and qualified.startswith(HOST_DATA_MODULES):
            self._args(call)
            return PY_DATA  # NumPy and pandas values live on the host, whatever they were made from
        library = library_model(self.ctx, call)
        if library is not None:
            return self._constructed(call, library)
        imported = self._imported_result(call) if self.ctx.project.functions else None
        if imported is not None:
            return imported
        if type(func) is cst.Attribute and self.ctx.project.plain_classes:
            spelled = dotted_name(func)  # `D.LabelStats(y)` after `import data as D`
            plain = self.ctx.project.plain_classes.get(spelled or "")
            if plain is not None and plain.method_places and (spelled or "").split(".", 1)[0] not in self.env:
                self._args(call)
                return Fact(UNKNOWN, instance=spelled)
        if type(func) is cst.Attribute and self.ctx.project.classes:
            spelled = dotted_name(func)  # `nets.Generator()` after `import networks as nets`
            if spelled in self.ctx.project.classes and spelled.split(".", 1)[0] not in self.env:
                constructed = module_constructor(self.ctx, call)
                if constructed is not None:
                    return self._constructed(call, constructed)
        if type(func) is cst.Attribute:
            return self._method_call(call, func)
        if type(func) is cst.Name:
            return self._name_call(call, func)
        if type(func) is cst.Subscript:
            callee = self._eval(func)
            if is_host_module(callee) or (callee.kind == MODULE and callee.where in (FOLLOWS, ACCELERATOR)):
                return self._module_call(call, callee, func)  # `nets["g"](z)`, `self.cells[i](x, (h, c))`
            if callee.kind == UNKNOWN and type(func.value) is cst.Attribute:
                # `self.G.decoders["s"](z)` of a model whose class this file does not show: a part of
                # a placed model given a device input computes there, as its methods do
                owner = self._eval(func.value.value)
                if owner.kind == MODULE:
                    return self._module_method(owner, func.value.attr.value, self._args(call))
        if type(func) is cst.Call:
            named = self._torch_attribute_by_name(func)
            if named is not None:  # `getattr(torch, window)(win_length)`, `window="hann_window"`
                return self._torch_call(call, named)
            callee = self._eval(func)
            if callee.kind == MODULE:  # `nn.BatchNorm2d(c)(x)`: a module built and called at once
                return self._module_call(call, callee, func)
        self._args(call)
        return UNKNOWN_FACT

    def _torch_attribute_by_name(self, func: cst.Call) -> str | None:
        """`torch.hann_window` for `getattr(torch, "hann_window")`, or `getattr(torch, window)`
        where `window` is a parameter of the function, never rebound, that defaults to the name
        of a torch factory; None for any other call."""
        if not (
            type(func.func) is cst.Name
            and func.func.value == "getattr"
            and len(func.args) == 2
            and self.ctx.qualified_name(func.args[0].value) == "torch"
            and "getattr" not in self.ctx.imports.bound
        ):
            return None
        spelled = func.args[1].value
        if type(spelled) is cst.Name and type(self.scope) is cst.FunctionDef:
            params = self.scope.params
            param = next((q for q in (*params.params, *params.kwonly_params) if q.name.value == spelled.value), None)
            rebound = any(
                type(n) is cst.Name and n.value == spelled.value and self.ctx.index.in_binding_target(n)
                for n in self.ctx.index.walk(self.scope.body)
            )
            spelled = param.default if param is not None and param.default is not None and not rebound else spelled
        name = literal_value(spelled) if type(spelled) is cst.SimpleString else None
        return f"torch.{name}" if isinstance(name, str) and name in FACTORIES else None

    def _traced_run(self, call: cst.Call) -> Fact | None:
        """`writer.add_graph(model, x)`, `torch.jit.trace(model, x)`, `torch.onnx.export(model,
        (x, m), path)`: the call runs a module on the device on its example inputs, which meet it
        as in `model(x)`. None when the call is no such run."""
        parts = traced_module_and_example(self.ctx, call)
        if parts is None:
            return None
        module, example = parts
        callee = self._eval(module)
        if callee.kind == UNKNOWN and callee.where == ACCELERATOR:
            callee = replace(callee, kind=MODULE)  # what a tracer runs is a module (`net.to(d).eval()`)
        factory = callee.factory or ""
        if (
            callee.kind != MODULE
            or callee.where not in (FOLLOWS, ACCELERATOR)
            or factory in PARAMETER_FREE_MODULES
            or factory in INPUT_MOVING_WRAPPERS
        ):
            return None
        self._args(call)
        for fact, node in flatten(self._fact_of(example), example):
            if cpu_side(fact, allow_scalar=False) and compatible(fact, callee):
                self._record(fact, node, callee, module, call, "module")
        # a traced or exported module stays where the module is; a graph written to a log is no value
        return callee if traced_returns_module(self.ctx, call) else UNKNOWN_FACT

    def _imported_result(self, call: cst.Call) -> Fact | None:
        """What a function of another project module returns (`make_mask(...)` after `from
        .utils import make_mask`), as its module's summary says; None when it is not one."""
        spelled = dotted_name(call.func)
        place = self.ctx.project.functions.get(spelled) if spelled is not None else None
        if spelled is None or place is None:
            return None
        head = spelled.split(".", 1)[0]
        if head in self.env or head in self.analysis.functions:
            return None  # the name is bound again in this file
        self._args(call)
        if place.startswith("follows:"):  # `sample(model, x, steps)` computing its result from `x`
            return self._followed_argument(call, place[len("follows:") :])
        if place.startswith("tuple:"):  # `loss, parts = compute_loss(...)`: each part where it lives
            return Fact(
                UNKNOWN, elements=tuple(self._imported_part(part, call, spelled) for part in place[6:].split("|"))
            )
        return self._imported_part(place, call, spelled)

    def _followed_argument(self, call: cst.Call, followed: str) -> Fact:
        """On the device when the argument an imported function computes its tensor result from
        (`<parameter>#<position>`) is a tensor on the device; unknown otherwise."""
        param, _, position = followed.rpartition("#")
        for index, arg in enumerate(call.args):
            if arg.star:
                break
            if (arg.keyword is not None and arg.keyword.value == param) or (
                arg.keyword is None and index == int(position)
            ):
                fact = self._fact_of(arg.value)
                return Fact(DEVICE, where=fact.where or ACCELERATOR) if fact.kind == DEVICE else UNKNOWN_FACT
        return UNKNOWN_FACT

    @staticmethod
    def _imported_part(place: str, call: cst.Call, spelled: str) -> Fact:
        if place == CPU:
            return Fact(CPU, origin=call, factory=spelled)
        if place == DEVICE:
            return Fact(DEVICE, where=ACCELERATOR)
        if place == "device-value":  # `get_device()` returning `torch.device("cuda" if ... else "cpu")`
            return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr=None)
        return UNKNOWN_FACT

    def _tensor_whose_device(self, node: cst.CSTNode | None) -> Fact | None:
        """The tensor fact of `x` for a device argument read off it (`x.device`, or a local name
        whose every binding in the function is `x.device`: `b, device = x.shape[0], x.device`),
        else None."""
        if type(node) is cst.Name:
            node = self._device_read_bound_to(node)
        if type(node) is not cst.Attribute or node.attr.value != "device":
            return None
        fact = self._fact_of(node.value)
        return fact if fact.is_tensor else None

    def _device_read_bound_to(self, name: cst.Name) -> cst.Attribute | None:
        """`t.device` when every binding of the local `name` in its function reads that one
        `.device` off the same tensor name `t` (also as a part of a tuple assignment)."""
        function = self.ctx.index.enclosing_function(name)
        if function is None or any(p.name.value == name.value for p in _all_params(function)):
            return None
        reads: list[cst.Attribute] = []
        for node in self.ctx.index.walk(function.body):
            if type(node) is cst.AugAssign and type(node.target) is cst.Name and node.target.value == name.value:
                return None
            if type(node) is not cst.Assign:
                continue
            for target in node.targets:
                value = _bound_part(target.target, node.value, name.value)
                if value is None:
                    continue
                if not (
                    type(value) is cst.Attribute and value.attr.value == "device" and type(value.value) is cst.Name
                ):
                    return None
                reads.append(value)
        if not reads or len({r.value.value for r in reads if type(r.value) is cst.Name}) != 1:
            return None
        return reads[-1]

    def _device_argument(self, call: cst.Call) -> tuple[bool, Fact, cst.CSTNode | None]:
        for arg in call.args:
            if arg.star == "**":
                return True, UNKNOWN_FACT, None
            if arg.keyword is not None and arg.keyword.value == "device":
                return True, self._eval(arg.value), arg.value
            if arg.keyword is not None and arg.keyword.value == "out":
                return True, UNKNOWN_FACT, None
        return False, UNKNOWN_FACT, None

    def _placed(self, device: Fact, node: cst.CSTNode | None) -> Fact:
        """The fact of a tensor created on `device`."""
        if device.kind == DEVICE_VALUE:
            if device.where == "cpu":
                return Fact(CPU, where="cpu")
            return Fact(
                DEVICE,
                where=device.where or ACCELERATOR,
                device=device.device,
                device_expr=device.device_expr or (self.ctx.code_for(node) if node is not None else None),
            )
        if device.kind == DEVICE:
            return Fact(DEVICE, where=device.where, device_expr=device.device_expr, device=device.device)
        if device.kind == CPU:
            return Fact(CPU, where="cpu")
        if device.where == ACCELERATOR:
            return Fact(DEVICE, where=ACCELERATOR, device_expr=self.ctx.code_for(node) if node is not None else None)
        return UNKNOWN_FACT

    def _torch_call(self, call: cst.Call, qualified: str) -> Fact:
        short = qualified[len("torch.") :]
        if short in FACTORIES or short in LIKE_FACTORIES:
            return self._factory(call, short)
        if qualified in DEFAULT_DEVICE_SETTERS and call.args:
            self._set_default(call.args[0].value)
            return UNKNOWN_FACT
        if is_legacy_cuda_constructor(qualified):
            # `torch.cuda.FloatTensor(sizes)`: the legacy constructor builds on the current GPU
            self._args(call)
            return Fact(DEVICE, where=ACCELERATOR, device_expr='"cuda"', device=DeviceId("cuda", True, "cuda"))
        if qualified == "torch.device":
            return self._torch_device(call)
        if qualified in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
            args = self._args(call)
            # A DataLoader over tensors already on the GPU, or whose `collate_fn` moves each
            # batch, yields device batches.
            return UNKNOWN_FACT if args and args[0][0].where == ACCELERATOR or self._collate_moves(call) else LOADER
        if qualified in ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"):
            args = self._args(call)
            return Fact(UNKNOWN, where=ACCELERATOR) if any(devicey(f) for f, _ in args) else UNKNOWN_FACT
        if is_parameter_call(self.ctx, call) or qualified in VARIABLE_WRAPPERS:
            # `nn.Parameter(t)` wraps `t` where it is: what `__init__` computes from it before
            # any move is on the CPU when `t` was made there; `Variable(t)` is `t` itself
            args = self._args(call)
            data = args[0][0] if args and call.args[0].keyword is None else UNKNOWN_FACT
            return data if data.is_tensor else UNKNOWN_FACT
        wrapper = _PARALLEL_WRAPPERS.get(qualified)  # `torch.nn.parallel.DistributedDataParallel`
        constructed = wrapper or module_constructor(self.ctx, call)
        if constructed is not None:
            return self._constructed(call, constructed)
        if loaded_model_on_host(self.ctx, call, self.scope):  # `model = torch.load(path, map_location="cpu")`
            self._args(call)
            self.analysis.host_modules_made = True
            return Fact(MODULE, where=HOST, factory=qualified.rsplit(".", 1)[-1], origin=call)
        if not is_tensor_function(qualified):
            self._args(call)
            return UNKNOWN_FACT
        args = self._args(call, HOST_ARGUMENTS.get(qualified, ()))
        if qualified in CROSS_DEVICE_FUNCTIONS:
            return UNKNOWN_FACT
        return self._combine(call, args, allow_scalar=False)

    def _collate_moves(self, loader: cst.Call) -> bool:
        """Whether the loader's `collate_fn` (a lambda, or a function or class of the file) moves
        what it returns to a device."""
        collate = next(
            (a.value for a in loader.args if a.keyword is not None and a.keyword.value == "collate_fn"), None
        )
        classes = {c.name.value: c for c in self.ctx.index.of_type(cst.ClassDef)}
        for _ in range(4):
            if type(collate) is cst.Call:
                if type(collate.func) is cst.Name and collate.func.value in self.analysis.functions:
                    collate = collate.func  # `make_collate(tokenizer)`: the factory builds the function
                elif collate.args:
                    collate = collate.args[0].value  # `partial(collate, device=...)`
                else:
                    break
            elif (
                type(collate) is cst.Name
                and collate.value not in self.analysis.functions
                and collate.value not in classes
                and (bound := only_binding(self.ctx, collate.value, loader)) is not None
            ):
                collate = bound  # `to_device = partial(collate, device=dev)`, passed by that name
            else:
                break
        body: cst.CSTNode | None = collate if type(collate) is cst.Lambda else None
        if type(collate) is cst.Name:
            body = self.analysis.functions.get(collate.value) or classes.get(collate.value)
            if body is None and _returns_device_batch(self.ctx.project.functions.get(collate.value, "")):
                return True  # a collate function of another project module that moves the batch
        return body is not None and any(_places_on_device(node) for node in self.ctx.index.walk(body))

    def _torch_device(self, call: cst.Call) -> Fact:
        """`torch.device("cuda", 1)`, `torch.device(DEV)`, `torch.device(f"cuda:{rank}")`."""
        args = self._args(call)
        kind = index = None
        for position, arg in enumerate(call.args):
            name = arg.keyword.value if arg.keyword else ("type" if position == 0 else "index")
            if arg.star:
                kind = index = None
                break
            if name == "type":
                kind = arg.value
            elif name == "index":
                index = arg.value
        first = self._fact_of(kind) if kind is not None else UNKNOWN_FACT
        if first.kind != DEVICE_VALUE and kind is not None:
            first = replace(first, device=literal_device(self.ctx, kind))
        device = torch_device(call, first.device, index, self.ctx.code_for(call))
        if type(kind) is cst.SimpleString and kind is call.args[0].value:
            # `torch.device("cuda", 1)`: the string's fact, on the device it and the index state
            return (
                replace(first, device=device, spelled="object")
                if first.kind == DEVICE_VALUE
                else Fact(DEVICE_VALUE, spelled="object")
            )
        if first.kind == DEVICE_VALUE and first.where == "cpu":
            return Fact(DEVICE_VALUE, where="cpu", device=device, spelled="object")
        return Fact(
            DEVICE_VALUE,
            where=ACCELERATOR if args else None,
            device_expr=self.ctx.code_for(call),
            device=device,
            spelled="object",
        )

    def _combine(
        self,
        call: cst.CSTNode,
        args: list[tuple[Fact, cst.CSTNode]],
        allow_scalar: bool,
        receiver: tuple[Fact, cst.CSTNode] | None = None,
    ) -> Fact:
        """Tensor arguments of one op must share a device: record a meeting if they do not."""
        facts = ([receiver] if receiver is not None else []) + args
        device = next(((f, n) for f, n in facts if devicey(f)), None)
        if device is not None:
            for fact, node in facts:
                if cpu_side(fact, allow_scalar) and compatible(fact, device[0]):
                    self._record(fact, node, device[0], device[1], call, "op")
                    break
            stated = [(f, n) for f, n in facts if devicey(f) and f.device is not None]
            for fact, node in stated[1:]:
                self._cross(fact, node, stated[0][0], stated[0][1], call, "op")
            lead = stated[0][0] if stated else device[0]
            return Fact(DEVICE, where=device[0].where, device_expr=lead.device_expr, device=lead.device)
        tensors = [(f, n) for f, n in facts if f != NUMBER]
        cpu = [f for f, _ in tensors if f.kind == CPU]
        # With no device tensor among them, a CPU tensor keeps the result on the CPU; 0-dim CPU
        # tensors only where every other argument is on the CPU too (else the others decide).
        if cpu and (len(cpu) == len(tensors) or not all(f.scalar for f in cpu)):
            lead = next((f for f in cpu if not f.scalar), cpu[0])
            # `torch.log(torch.tensor(2.0))` is still 0-dim; `torch.stack([a, b])` is not.
            function = self.ctx.qualified_name(call.func) if type(call) is cst.Call else None
            gathering = (function or "").rsplit(".", 1)[-1] in GATHERING_FUNCTIONS
            if gathering and all(f.from_factory for f in cpu) and any(self._unplaced_part(f, n) for f, n in tensors):
                # `torch.cat([x, torch.zeros(n, d)])` with an input `x` of no known place: the join
                # runs only where the parts agree, and the file does not show where that is
                return UNKNOWN_FACT
            scalar = len(tensors) == 1 and not gathering and (lead.scalar or _full_reduction(function, call))
            if (
                gathering
                and (function or "").startswith("torch.")
                and all(f.copied for f in cpu)
                and type(call) is cst.Call
            ):
                # `torch.stack([mask == j for j in ids])` of host copies: a new CPU tensor made here
                return replace(lead, scalar=False, copied=False, origin=call, factory=function)
            return replace(lead, scalar=scalar)
        return UNKNOWN_FACT

    def _unplaced_part(self, fact: Fact, node: cst.CSTNode) -> bool:
        """A part of a join that is input of no known place: a parameter of the function, or a
        name unpacked from one (`tokens, lengths = batch`); not a value the function computes
        (which may be on a device the file shows elsewhere), nor an option (`indexing="ij"`)."""
        if fact.kind != UNKNOWN or type(node) is not cst.Name:
            return False
        function = self.ctx.index.enclosing_function(node)
        if function is None:
            return False
        params = function.params
        inputs = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        if node.value in inputs:
            return True
        return any(
            type(n) is cst.Assign
            and type(n.value) is cst.Name
            and n.value.value in inputs
            and any(
                isinstance(t.target, (cst.Tuple, cst.List))
                and any(type(e.value) is cst.Name and e.value.value == node.value for e in t.target.elements)
                for t in n.targets
            )
            for n in self.ctx.index.walk(function.body)
        )

    def _set_default(self, node: cst.BaseExpression) -> None:
        """`torch.set_default_device("cuda")` run by this function: the factories it calls
        afterwards build there (an `if` that sets it on one path only leaves it unknown)."""
        stated = self._eval(node)
        named = accelerator_default(self.ctx, node)
        if named is None:
            self.env[DEFAULT_DEVICE_KEY] = Fact(DEVICE_VALUE, where="cpu") if stated.where == "cpu" else UNKNOWN_FACT
        elif stated.kind == DEVICE_VALUE and stated.where == ACCELERATOR:
            self.env[DEFAULT_DEVICE_KEY] = stated
        else:  # `"torch.cuda.FloatTensor"`: the current CUDA device
            self.env[DEFAULT_DEVICE_KEY] = Fact(
                DEVICE_VALUE, where=ACCELERATOR, device_expr='"cuda"', device=DeviceId("cuda", True, "cuda")
            )

    def _factory(self, call: cst.Call, short: str) -> Fact:
        args = self._args(call)
        has_device, device, device_node = self._device_argument(call)
        default = self.env.get(DEFAULT_DEVICE_KEY)
        on_host_anyway = ignores_default_device(call, short)
        if not has_device and default is not None and default.kind == DEVICE_VALUE and not on_host_anyway:
            return self._placed(default, None)  # after this function's own `set_default_device`
        if has_device and device_node is not None and self._kept_cpu_device(call, device_node):
            # `device=self.device`, the constructor's CPU snapshot, after the module may have moved
            return Fact(CPU, where="cpu", origin=call, factory=f"torch.{short}", scalar=self._zero_dim(call, short))
        if has_device:
            source = self._tensor_whose_device(device_node)
            if source is not None and source.kind == CPU:
                # `device=x.device` with `x` on the CPU: made where `x` is, and `x`'s own origin is
                # what put it there (the factory copies that place, it does not choose it).
                return replace(source, scalar=False, mask=False, copied=False, elements=None, fields=None)
            placed = self._placed(device, device_node)
            # made here on the CPU as stated (`device=torch.device("cpu")`): a factory's tensor too
            if placed.kind != CPU:
                return placed
            # (`torch.tensor(0.0, device="cpu")` is 0-dim all the same: it meets any device)
            return replace(placed, origin=call, factory=f"torch.{short}", scalar=self._zero_dim(call, short))
        context = self._device_context(call) if not on_host_anyway else None
        if context is not None:
            return self._placed(context, None)
        if short == "normal" and call.args and not is_number(call.args[0].value) and not on_host_anyway:
            # `torch.normal(mean, std)` with tensor arguments draws on their device
            tensor = next((f for f, _ in args if f.is_tensor), None)
            return replace(tensor, scalar=False) if tensor is not None else UNKNOWN_FACT
        if short in LIKE_FACTORIES:
            return (
                replace(args[0][0], scalar=False, origin=args[0][0].origin)
                if args and args[0][0].is_tensor
                else UNKNOWN_FACT
            )
        if short in DATA_FACTORIES or short in LEGACY_CONSTRUCTORS or short == "from_numpy":
            first = call.args[0].value if call.args and not call.args[0].keyword else None
            if short == "from_numpy":
                pass
            elif first is None or not (
                is_literal_data(first) or is_python_data(self._fact_of(first)) or self._host_array_part(first)
            ):
                data = args[0][0] if args else UNKNOWN_FACT
                if short == "tensor" and data == UNKNOWN_FACT and first is not None:
                    # data the file does not show: torch warns when it is a tensor (the idiom is
                    # `.clone()`), so what `torch.tensor(counts)` reads is a list or an array,
                    # and the new tensor is on the CPU
                    pass
                elif not data.is_tensor or short == "Tensor":
                    return UNKNOWN_FACT
                elif short not in LEGACY_CONSTRUCTORS:
                    return data
                # `torch.FloatTensor(t)` of a tensor is a CPU copy, never `t`'s place (a CUDA `t`
                # raises); of data the file does not show it stays unplaced, as `torch.as_tensor` does
        # `from_numpy` shares the array's memory, and `torch.normal(mean, std, size)` of two numbers
        # is built on the CPU: both are there whatever the default device is
        default_placed = sets_accelerator_default(self.ctx) and not on_host_anyway
        if self._under_device_guard(call) or is_empty_placeholder(call, short) or default_placed:
            return UNKNOWN_FACT
        return Fact(CPU, where="cpu", origin=call, factory=f"torch.{short}", scalar=self._zero_dim(call, short))

    def _kept_cpu_device(self, call: cst.Call, device_node: cst.CSTNode) -> bool:
        method = self.ctx.index.enclosing_function(call)
        return (
            method is not None
            and isinstance(device_node, cst.BaseExpression)
            and kept_cpu_device(self.ctx, device_node, method)
        )

    def _zero_dim(self, call: cst.Call, short: str) -> bool:
        """`torch.tensor(2.0)`, `torch.tensor(x.shape[0])`, `torch.zeros(())`: a factory whose
        tensor has no dimensions."""
        if short in ("tensor", "as_tensor", "scalar_tensor"):
            if not call.args:
                return False
            data = call.args[0].value
            return (
                is_number(data)
                or self._fact_of(data) == NUMBER
                or _number_expression(data)
                or self._number_parameter(data)
                or (short == "tensor" and self._unseen_setting(data))
                or self._bound_number(data)
            )
        return (
            short in ("zeros", "ones", "empty", "full", "rand", "randn")
            and bool(call.args)
            and isinstance(call.args[0].value, (cst.Tuple, cst.List))
            and not call.args[0].value.elements
        )

    def _dtype_view(self, call: cst.Call, method: str) -> bool:
        """`t.view(torch.float32)`: the same elements read as another dtype, the shape kept."""
        return method == "view" and len(call.args) == 1 and is_dtype(self.ctx, call.args[0].value)

    def _bound_number(self, node: cst.BaseExpression) -> bool:
        """A local name last bound to data that reads as one number (`delta = -width / 2`)."""
        if type(node) is not cst.Name:
            return False
        return self._reads_bound_number(node, depth=3)

    def _reads_bound_number(self, name: cst.Name, depth: int) -> bool:
        """`denorm = (bias - ebits) + 1; mask = denorm << MBITS`: a name still bound to number
        arithmetic, whose own names may be bound to numbers a few assignments up."""
        bound = self.bound_values.get(name.value)
        if depth == 0 or bound is None or self.env.get(name.value) is not bound[1]:
            return False
        return _number_expression(bound[0], lambda side: self._reads_bound_number(side, depth - 1))

    def _unseen_setting(self, node: cst.BaseExpression) -> bool:
        """`torch.tensor(self.eps)`, `torch.tensor(atol)` of `atol=0.0078`, `torch.tensor(t if t
        else self.t)`: an attribute the file does not show, or a parameter whose default is a
        number, which in the code measured holds a number far more often than a list (a
        constructor's `torch.tensor(anchors)` of a bare parameter stays a full tensor)."""
        parts = [node.body, node.orelse] if type(node) is cst.IfExp else [node]
        return all(
            (type(p) is cst.Attribute or (type(p) is cst.Name and self._numeric_parameter(p)))
            and self._fact_of(p) == UNKNOWN_FACT
            for p in parts
        )

    def _numeric_parameter(self, name: cst.Name) -> bool:
        """A parameter of this function that reads as a number: annotated as one, defaulting to
        one (`atol=0.0078`), or compared with one (`if sigma_max <= 0:`)."""
        param = self._own_parameter(name)
        if param is None:
            return False
        if _annotated_number(self.ctx, param) or (param.default is not None and is_number(param.default)):
            return True
        return any(
            type(c.left) is cst.Name
            and c.left.value == name.value
            and any(is_number(t.comparator) for t in c.comparisons)
            for c in self.ctx.index.within(self.scope, cst.Comparison)
        )

    def _number_parameter(self, node: cst.BaseExpression) -> bool:
        """A parameter of this function annotated as a number, alone or in a union
        (`x: float | torch.Tensor`, turned into a tensor where it is not one)."""
        param = self._own_parameter(node) if type(node) is cst.Name else None
        return param is not None and _annotated_number(self.ctx, param)

    def _own_parameter(self, name: cst.Name) -> cst.Param | None:
        """The parameter of this function that `name` still reads (not rebound before it)."""
        if type(self.scope) is not cst.FunctionDef:
            return None
        params = self.scope.params
        param = next(
            (p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == name.value),
            None,
        )
        return param if param is not None and not self._rebound_before(name) else None

    def _rebound_before(self, name: cst.Name) -> bool:
        """Whether a statement before `name`'s own rebinds it (`bias = [bias] * 4`)."""
        index = self.ctx.index
        here = index.position(name)
        for node in index.walk(self.scope):
            if index.position(node) >= here:
                return False
            if isinstance(node, (cst.AssignTarget, cst.AugAssign)) and any(
                type(n) is cst.Name and n.value == name.value for n in index.walk(node.target)
            ):
                statement = index.parent(node) if type(node) is cst.AssignTarget else node
                if statement is not None and not any(n is name for n in index.walk(statement)):
                    return True
        return False

    def _host_array_part(self, node: cst.BaseExpression) -> bool:
        """A part of what a NumPy or pandas call returned (`raw["y"]` after `raw = np.load(path)`,
        `frame["label"].values`, `arr[:, 0].tolist()`): host data, whatever the part."""
        while True:
            if type(node) is cst.Subscript or type(node) is cst.Attribute:
                node = node.value
            elif type(node) is cst.Call and type(node.func) is cst.Attribute:
                node = node.func.value
            else:
                break
        if type(node) is cst.Name:
            bound = self.bound_values.get(node.value)
            if bound is None or self.env.get(node.value) is not bound[1]:
                return False
            node = bound[0]
        if type(node) is not cst.Call:
            return False
        qualified = self.ctx.qualified_name(node.func) or ""
        return qualified.startswith(HOST_DATA_MODULES)

    def _device_context(self, node: cst.CSTNode) -> Fact | None:
        """The device of an enclosing `with torch.device("cuda"):` block, which makes factories
        and module constructors inside it default to that device."""
        for ancestor in self.ctx.index.ancestors(node):
            if type(ancestor) is cst.With:
                for item in ancestor.items:
                    spec = item.item
                    if type(spec) is cst.Call and self.ctx.qualified_name(spec.func) == "torch.device":
                        fact = self._fact_of(spec)
                        return fact if fact.kind == DEVICE_VALUE and fact.where is not None else UNKNOWN_FACT
            if ancestor is self.scope:
                return None
        return None

    def _constructed(self, call: cst.Call, constructed: str) -> Fact:
        """A module built here: on the device of an enclosing `with torch.device(...)` block; a
        loss keeps the CPU class weights it is given (`origin` is the constructor); a
        DataParallel or DDP wrapper is where the model it wraps is."""
        if constructed in INPUT_MOVING_WRAPPERS:
            wrapped = self._args(call)
            inner = wrapped[0][0] if wrapped and call.args[0].keyword is None else UNKNOWN_FACT
            if inner.kind in (MODULE, UNKNOWN) and inner.where in (ACCELERATOR, FOLLOWS):
                # (a DDP wrapper that does not move its inputs is, to its callers, its module)
                factory = constructed if _scatters(call, constructed) else inner.factory
                return Fact(MODULE, where=inner.where, factory=factory, device_expr=inner.device_expr)
            return Fact(MODULE, factory=constructed)
        self._args(call)
        context = self._device_context(call)
        if context is not None and context.kind == DEVICE_VALUE:
            return Fact(
                MODULE, where=context.where, factory=constructed, device_expr=context.device_expr, device=context.device
            )
        if sets_accelerator_default(self.ctx):  # built where `torch.set_default_device("cuda")` puts it
            return Fact(MODULE, where=ACCELERATOR, factory=constructed)
        weights = tuple(
            (arg.keyword.value, self._loss_weight(arg.value))
            for arg in call.args
            if arg.keyword is not None and arg.keyword.value in LOSS_WEIGHTS and constructed.endswith("Loss")
        )
        if any(cpu_side(fact, allow_scalar=False) for _, fact in weights):
            return Fact(MODULE, factory=constructed, fields=weights, origin=call)
        if built_on_host(self.ctx, call, constructed, self.scope) or self._holds_host_modules(call, constructed):
            self.analysis.host_modules_made = True
            return Fact(MODULE, where=HOST, factory=constructed, origin=call)
        return Fact(MODULE, factory=constructed)

    def _loss_weight(self, node: cst.BaseExpression) -> Fact:
        """A loss's class weight: `torch.tensor(weights)` of a parameter is host data here (class
        weights come as lists or arrays), as DL106 reads it, where a tensor factory elsewhere
        would follow a tensor argument."""
        fact = self._fact_of(node)
        if cpu_side(fact, allow_scalar=False):
            return fact
        key = self._key(node)
        if key is not None:
            # `w = torch.tensor(weights)` (or `self.w = ...`) on an earlier line, still its value here
            bound = self.bound_values.get(key)
            if bound is not None and self.env.get(key) is bound[1]:
                node = bound[0]
        while (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value in WEIGHT_CASTS
            and not node.args
        ):
            node = node.func.value  # `torch.from_numpy(w).float()`: the cast keeps it where it is
        if type(node) is not cst.Call:
            return fact
        qualified = self.ctx.qualified_name(node.func) or ""
        if (
            qualified.startswith("torch.")
            and qualified.rsplit(".", 1)[-1] in DATA_FACTORIES | LEGACY_CONSTRUCTORS
            and not any(arg.keyword is not None and arg.keyword.value == "device" for arg in node.args)
        ):
            return Fact(CPU, where="cpu", origin=node, factory=qualified)
        return fact

    def _holds_host_modules(self, call: cst.Call, constructed: str) -> bool:
        """`nn.Sequential(nn.Linear(4, 8), nn.ReLU())`: a container of modules built here on the
        CPU (at least one with parameters) is on the CPU."""
        if (
            constructed not in ("Sequential", "ModuleList")
            or not call.args
            or not (self.ctx.qualified_name(call.func) or "").startswith("torch.nn.")
        ):
            return False
        parts = [self._fact_of(arg.value) for arg in call.args]
        if any(arg.star or arg.keyword is not None for arg in call.args):
            return False
        modules = [m for part in parts for m in (part.elements if part.elements is not None else (part,))]
        return all(
            m.kind == MODULE and (is_host_module(m) or m.factory in PARAMETER_FREE_MODULES) for m in modules
        ) and any(is_host_module(m) for m in modules)

    def _under_device_guard(self, node: cst.CSTNode) -> bool:
        for ancestor in self.ctx.index.ancestors(node):
            if ancestor is self.scope:
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and is_device_guard(ancestor.test, self.ctx):
                return True
        return False

    def _move(self, call: cst.Call, receiver: Fact, method: str) -> Fact:
        target: Fact | None = None
        node: cst.CSTNode | None = None
        if method == "cpu":
            target = Fact(DEVICE_VALUE, where="cpu", device=CPU_DEVICE)
        elif method in ("cuda", "xpu", "mps"):
            self._args(call)
            target = Fact(
                DEVICE_VALUE, where=ACCELERATOR, device_expr=f'"{method}"', device=DeviceId(method, True, method)
            )
            if call.args:
                node = call.args[0].value
                target = replace(
                    target, device_expr=self.ctx.code_for(node), device=self._accelerator_index(method, node)
                )
        else:
            dtype_only = True
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value in ("non_blocking", "copy", "memory_format", "dtype"):
                    self._eval(arg.value)
                    continue
                fact = self._eval(arg.value)
                spelled = dotted_name(arg.value) or ""
                if fact == NUMBER and int_value(arg.value) is not None and arg.keyword is None:
                    # `.to(1)`: an index is a CUDA device
                    fact = Fact(
                        DEVICE_VALUE,
                        where=ACCELERATOR,
                        device_expr=f'"cuda:{int_value(arg.value)}"',
                        device=indexed("cuda", int_value(arg.value)),  # type: ignore[arg-type]  # checked not None above
                    )
                if fact.kind == DEVICE_VALUE:
                    target, node = fact, arg.value
                elif fact.is_tensor or devicey(fact):
                    target, node = self._placed(fact, arg.value), arg.value
                    target = Fact(
                        DEVICE_VALUE,
                        where=target.where if target.kind == DEVICE else "cpu",
                        device_expr=target.device_expr,
                        device=target.device,
                    )
                elif (
                    "dtype" in spelled
                    or (self.ctx.qualified_name(arg.value) or "").startswith("torch.")
                    and arg.keyword is None
                ):
                    continue
                else:
                    dtype_only = False
                    continue
                dtype_only = False
            if target is None:
                if dtype_only and call.args:
                    return replace(receiver, scalar=receiver.scalar)
                return Fact(MODULE) if receiver.kind == MODULE else UNKNOWN_FACT
        if receiver.kind == MODULE:
            return Fact(
                MODULE,
                where=target.where,
                factory=receiver.factory,
                device_expr=target.device_expr,
                device=target.device,
            )
        if target.where == "cpu":
            if (receiver.is_tensor or receiver.batch) and not receiver.scalar and not _reduced(call.func):
                return Fact(CPU, where="cpu", origin=call, copied=True)
            if not receiver.is_tensor and constructed_object(self.ctx, call.func):
                return UNKNOWN_FACT  # `Data(x=x).to("cpu")`: an object of a library class, not a tensor
            return Fact(CPU, where="cpu")
        if receiver.is_tensor or receiver.batch:
            return Fact(DEVICE, where=target.where or ACCELERATOR, device_expr=target.device_expr, device=target.device)
        if target.where == ACCELERATOR:
            return Fact(UNKNOWN, where=ACCELERATOR, device_expr=target.device_expr, device=target.device)
        return UNKNOWN_FACT

    def _accelerator_index(self, method: str, node: cst.BaseExpression) -> DeviceId | None:
        """The device of `.cuda(1)`, `.cuda(rank)`, `.cuda(device)`."""
        number = int_value(node)
        if number is not None:
            return indexed(method, number)
        fact = self._fact_of(node)
        if fact.kind == DEVICE_VALUE and fact.device is not None:
            return fact.device
        return DeviceId(self.ctx.code_for(node), False, method)

    def _method_call(self, call: cst.Call, func: cst.Attribute) -> Fact:
        method = func.attr.value
        # self.helper(...) and self.submodule(...)
        if self.cls is not None and self.is_receiver(func.value):
            attr_key = f"self.{method}"
            if attr_key in self.env:
                callee = self.env[attr_key]
                if callee.kind == MODULE or (callee.kind == UNKNOWN and callee.where == ACCELERATOR):
                    return self._module_call(call, callee, func)
            elif method in self.cls.submodules:
                return self._module_call(call, self.own_submodule(method), func)
            elif method not in self.cls.methods and (placed := self._placed_inherited(method)) is not None:
                return self._module_call(call, placed, func)
            elif method in self.cls.methods:
                return self._follow_own_method(self.cls.methods[method], call)
            elif (inherited := self.analysis.inherited_method(self.cls, method)) is not None:
                return self._follow_own_method(inherited, call)  # a base class's method, on this instance
            elif method in self.analysis.injected_modules(self.cls):
                injected = self.analysis.injected_class(self.cls, method)
                return self._module_call(call, Fact(MODULE, where=self.own_place, factory=injected), func)
        if self.cls is None and self.is_receiver(func.value):
            sibling = self.analysis.method_of_plain_class(self.scope, method, self.receiver_class)
            if sibling is not None:  # a trainer's `self._report(loss)`
                return self._follow_own_method(sibling, call)
        if self.cls is None and self.receiver_attribute(func) is not None:
            member = self._eval(func)  # a trainer's `self.teacher = teacher.to("cuda:0")`
            dunder_call = self.analysis.plain_classes.get(member.instance or "", {}).get("__call__")
            if dunder_call is not None:  # `self.policy(obs)`: the kept instance's `__call__`
                return self._follow(dunder_call, call, self._args(call), skip_self=True, state=member.state)
            # a moved value that is called is a module on the device
            if (
                member.kind == MODULE
                and (member.where == ACCELERATOR or member.fields)
                or (is_host_module(member) and member.origin is not None)  # `self.model` kept on the CPU
                or (member.kind == UNKNOWN and member.where == ACCELERATOR and not member.batch)
                or member.device is not None
                and devicey(member)
            ):
                return self._module_call(call, member, func)
        receiver_node = func.value
        receiver = self._eval(receiver_node)
        if receiver == LAUNCHER and method in PLACING_METHODS:
            return self._prepared(call)
        helper = self.analysis.plain_classes.get(receiver.instance or "", {}).get(method)
        if helper is not None:
            static = is_staticmethod(helper)
            return self._follow(
                helper, call, self._args(call), skip_self=not static, state=None if static else receiver.state
            )
        helper = self._class_level_method(receiver_node, method)
        if helper is not None:  # `Normalize._mean(x)`, `Boxes.from_sizes(sizes)`
            return self._follow(helper, call, self._args(call), skip_self=not is_staticmethod(helper))
        imported = self._imported_method_result(call, receiver, method)
        if imported is not None:
            return imported
        part = self._placed_submodule(receiver, method)
        if part is not None:
            return self._module_call(call, part, func)  # `self.nets.features(x)`, `model.encoder(x)`
        owner = self._module_class_of(receiver, method)
        if owner is not None:
            # `cpc.init_hidden(n)` on an instance of a module class of the file: what the method
            # builds itself (a CPU `torch.zeros` state) is what the caller gets; where the
            # instance's own submodules put their outputs is left unknown
            helper = owner.methods[method]
            return self._follow(
                helper,
                call,
                self._args(call),
                skip_self=not is_staticmethod(helper),
                cls=owner,
                placed=receiver.where not in (None, HOST),
            )
        if method == "forward" and (
            receiver.kind == MODULE or receiver.kind == UNKNOWN and receiver.where == ACCELERATOR and not receiver.batch
        ):
            # `model.forward(x)` is `model(x)`; a moved value of unknown kind that has `forward` is a module
            return self._module_call(call, receiver, func)
        if method in MOVE_METHODS:
            return self._move(call, receiver, method)
        if method == "type_as" and call.args:
            target = self._eval(call.args[0].value)
            if receiver.is_tensor and target.is_tensor:
                return replace(
                    target,
                    origin=receiver.origin if target.kind == CPU else None,
                    factory=receiver.factory if target.kind == CPU else None,
                )
            return UNKNOWN_FACT
        if method in NEW_METHODS:
            self._args(call)
            has_device, device, device_node = self._device_argument(call)
            if has_device:
                return self._placed(device, device_node)
            return replace(receiver, scalar=False) if receiver.is_tensor else UNKNOWN_FACT
        if not receiver.is_tensor and not receiver.batch:
            args = self._args(call)
            list_key = self._key(receiver_node)
            if (
                method == "append"
                and receiver.elements is not None
                and list_key is not None
                and len(call.args) == 1
                and not call.args[0].star
            ):
                # `parts.append(t)`: a list of tensors that later reaches `torch.stack(parts)`;
                # `states.append((h, c))`: a list of pairs (the pair is one element, not two);
                # `self.weights.append(w)`: the same list kept on the instance
                item = self._fact_of(call.args[0].value)
                kept = [e for e in receiver.elements if e != item]
                self.env[list_key] = Fact(UNKNOWN, elements=tuple(kept[:3]) + (item,))
                return UNKNOWN_FACT
            if (
                method in ("parameters", "buffers")
                and receiver.kind == MODULE
                and receiver.where in (FOLLOWS, ACCELERATOR)
            ):
                # `for p in model.parameters()`: each one lives where the module does
                return Fact(UNKNOWN, elements=(Fact(DEVICE, where=receiver.where, device=receiver.device),))
            if self.is_receiver(receiver_node) and receiver == UNKNOWN_FACT:
                return _model_like_result(method, args)  # `self.model(x)` in a trainer class
            if receiver.kind == UNKNOWN and _counts_a_tensor(call, method):
                return NUMBER  # `batch["ids"].size(1)`, `mask.numel()`: a Python int whatever the receiver
            owner = self._placed_module_owner(receiver_node) if receiver == UNKNOWN_FACT else None
            if owner is not None:
                # `model.renderer.query(model.decoder, pts)`: a part of a placed model handed a
                # device input computes where the model is, as the model's own method does
                result = self._module_method(owner, method, args)
                return result if result.kind == DEVICE else UNKNOWN_FACT
            if (
                receiver == UNKNOWN_FACT
                and method not in MODULE_NON_TENSOR_METHODS
                and self._handed_module(receiver_node)
            ):
                # `model.visual_encoder(image)` on a model handed in: it computes where its inputs are
                return self._fed_moved_input(call, dotted_name(receiver_node) or "")
            return self._module_method(receiver, method, args)
        args = self._args(call)
        if method in INPLACE_METHODS and receiver.kind == CPU:
            device = next(((f, n) for f, n in args if devicey(f)), None)
            if device is not None and (receiver.from_factory or receiver.batch) and compatible(receiver, device[0]):
                self._record(receiver, receiver_node, device[0], device[1], call, "inplace")
                return receiver
        if method in MEETING_METHODS:
            scalar_ok = method not in ("matmul", "mm", "bmm", "gather", "index_select", "masked_select")
            result = self._combine(call, args, allow_scalar=not scalar_ok, receiver=(receiver, receiver_node))
            return result if result.kind != UNKNOWN else replace(receiver, scalar=False)
        if _counts_a_tensor(call, method):
            return NUMBER  # `target.numel()` of a batch: a Python number wherever the batch is
        if receiver.batch and receiver.kind != CPU:
            return UNKNOWN_FACT
        if method == "type":
            if not call.args:
                return UNKNOWN_FACT  # the type's name, a string
            target = call.args[0].value
            if "cuda" in self.ctx.code_for(target):
                return Fact(DEVICE, where=ACCELERATOR, device_expr='"cuda"')
            qualified = self.ctx.qualified_name(target) or ""
            if not (
                type(target) is cst.SimpleString or qualified.startswith("torch.") or holds_a_dtype(self.ctx, target)
            ):
                # `labels.type(LongTensor)` with `LongTensor = torch.cuda.LongTensor if cuda else ...`
                return UNKNOWN_FACT
            spelled = literal_value(target) if type(target) is cst.SimpleString else qualified
            if isinstance(spelled, str) and _CPU_TENSOR_TYPE.fullmatch(spelled):
                # `y.type(torch.LongTensor)`: a CPU tensor type, so a copy on the CPU
                return self._move(call, receiver, "cpu")
        if method in NON_TENSOR_METHODS:
            return NUMBER if method == "item" else PY_DATA if method in ("tolist", "numpy") else UNKNOWN_FACT
        # Every other tensor method keeps its result where the receiver is.
        return replace(
            receiver,
            scalar=(receiver.scalar and (method not in SHAPE_GROWING_METHODS or self._dtype_view(call, method)))
            or (receiver.kind == CPU and method in _FULL_REDUCTIONS and _no_dimension(call, 0)),
            mask=receiver.mask and method not in _CAST_METHODS,
        )

    def _placed_module_owner(self, node: cst.BaseExpression) -> Fact | None:
        """The fact of the placed module `node` is a part of (`model` for `model.renderer` or
        `model.head.proj`), outside the module's own class; None when there is none."""
        while type(node) is cst.Attribute and not self.is_receiver(node.value):
            node = node.value
            base = self._eval(node)
            if base.kind == MODULE and base.where in (FOLLOWS, ACCELERATOR):
                return base
            if base != UNKNOWN_FACT:
                return None
        return None

    def _imported_method_result(self, call: cst.Call, receiver: Fact, method: str) -> Fact | None:
        """What a method of a module class of another project module returns on an instance
        (`self.cpc.init_hidden(n)` after `from utils.model_utils import CPC`), as the class's
        summary says; None when the receiver is no such instance."""
        plain = self.ctx.project.plain_classes.get(receiver.instance or "") if receiver.kind == UNKNOWN else None
        if plain is not None:  # `ds.class_weights()` on an instance of an imported plain class
            place = dict(plain.method_places).get(method)
            if place is None:
                return None
            self._args(call)
            return self._imported_part(place, call, f"{receiver.instance}.{method}")
        if receiver.kind != MODULE or not receiver.factory or not self.ctx.project.classes:
            return None
        suffix = "." + receiver.factory
        classes = {c for c in self.ctx.project.classes.values() if ("." + c.qualified).endswith(suffix)}
        if len(classes) != 1:
            return None
        place = dict(classes.pop().method_places).get(method)
        if place is None:
            return None
        self._args(call)
        return self._imported_part(place, call, f"{receiver.factory}.{method}")

    def _module_class_of(self, receiver: Fact, method: str) -> ClassFacts | None:
        """The module class of the file whose instance `receiver` is, where `method` is one of its
        own methods other than `forward` (followed as a module call) and the constructor."""
        if receiver.kind != MODULE or method in ("forward", "__init__") or method in MODULE_SELF_METHODS:
            return None
        cls = self.analysis.classes.get(receiver.factory or "")
        if cls is not None and method in MOVE_METHODS and _delegates_move(self.ctx, cls.methods.get(method), method):
            return None  # `def to(...): ...; return super().to(...)` moves the module as nn.Module does
        if cls is None and receiver.factory in _MODULE_CONTAINERS:
            # an element of `self.cells[i]`: the one module class of the file with that method
            owners = [c for c in self.analysis.classes.values() if method in c.methods]
            cls = owners[0] if len(owners) == 1 else None
        return cls if cls is not None and method in cls.methods else None

    def _placed_submodule(self, receiver: Fact, attr: str) -> Fact | None:
        """A submodule of a placed instance of a module class of the file (`self.nets.features`
        of `self.nets = Nets().to(device)`): a module where the instance is."""
        if receiver.kind != MODULE or receiver.where not in (FOLLOWS, ACCELERATOR):
            return None
        cls = self.analysis.classes.get(receiver.factory or "")
        if cls is None or attr not in cls.submodules or attr in cls.methods:
            return None
        return Fact(
            MODULE,
            where=receiver.where,
            factory=cls.submodules[attr],
            device=receiver.device,
            device_expr=receiver.device_expr,
        )

    def _class_level_method(self, receiver: cst.BaseExpression, method: str) -> cst.FunctionDef | None:
        """A static or class method of a class of the file, called on the class itself."""
        if type(receiver) is not cst.Name or receiver.value in self.env:
            return None
        cls = self.analysis.classes.get(receiver.value)
        methods = cls.methods if cls is not None else self.analysis.plain_classes.get(receiver.value, {})
        helper = methods.get(method)
        decorators = {dotted_name(d.decorator) for d in helper.decorators} if helper is not None else set()
        return helper if decorators & {"staticmethod", "classmethod"} else None

    def _module_method(self, receiver: Fact, method: str, args: list[tuple[Fact, cst.CSTNode]]) -> Fact:
        """`model.eval()` is the model; `model.encode(x)` on a placed model with a device input
        computes on the model's device."""
        placed = (receiver.kind == MODULE and receiver.where in (FOLLOWS, ACCELERATOR)) or (
            receiver.kind == UNKNOWN and receiver.where == ACCELERATOR and not receiver.batch
        )
        if receiver.kind == MODULE or placed:
            if method in MODULE_SELF_METHODS:
                return receiver
        if placed and method not in MODULE_NON_TENSOR_METHODS:
            # an input on the device, or a value of unknown kind moved there (`batch.cuda()`)
            device = next((f for f, _ in args if f.kind == DEVICE or moved_there(f)), None)
            if device is not None:
                return Fact(DEVICE, where=receiver.where, device_expr=device.device_expr, device=receiver.device)
        return UNKNOWN_FACT

    def _name_call(self, call: cst.Call, func: cst.Name) -> Fact:
        name = func.value
        at_import = self._module_device(name) if name not in self.env else None
        if at_import is not None and is_host_module(at_import):
            return self._module_call(call, at_import, func)  # a model built at import, run here
        if name in self.env:
            callee = self.env[name]
            if callee.kind == MODULE or (callee.kind == UNKNOWN and callee.where == ACCELERATOR):
                return self._module_call(call, callee, func)
            dunder_call = self.analysis.plain_classes.get(callee.instance or "", {}).get("__call__")
            if dunder_call is not None:  # `net(x)` on an instance of a plain class of the file: its `__call__`
                return self._follow(dunder_call, call, self._args(call), skip_self=True, state=callee.state)
            if name.lower() in LOSS_CALLABLE_NAMES or callee.kind in (CPU, DEVICE):
                return self._combine(call, self._args(call), allow_scalar=True)
        elif name.lower() in LOSS_CALLABLE_NAMES:
            return self._combine(call, self._args(call), allow_scalar=True)
        if name == self.receiver and self.cls is not None and "forward" in self.cls.methods:
            # `self(x)` inside the module: a call of its own forward, on the module's device
            return self._module_call(call, Fact(MODULE, where=self.own_place, factory=self.cls.node.name.value), func)
        if name in ("list", "tuple") and len(call.args) == 1 and not call.args[0].star and name not in self.env:
            # `list(t)`: the rows of a tensor, where it is; `list(xs)`: a copy of a list
            inner = self._eval(call.args[0].value)
            if inner.elements is not None and not inner.fields:
                return Fact(UNKNOWN, elements=inner.elements, alike=inner.alike)
            if inner.is_tensor and not inner.scalar:
                return Fact(UNKNOWN, elements=(inner,), alike=True)
            return UNKNOWN_FACT
        if name in ("iter", "next") and call.args:
            self._eval(call.args[0].value)
            if self._loader_inner(call.args[0].value):
                for arg in call.args[1:]:  # `next(it, None)`: the first was evaluated above
                    self._eval(arg.value)
                # `it = iter(loader)` is a loader still; `x, y = next(it)` is one of its batches
                # (not known to be on the host under a script-wide accelerator default)
                if name == "iter":
                    return LOADER
                return Fact(UNKNOWN, origin=call, batch=module_wide_accelerator_default(self.ctx) is None)
        if name == "next" and call.args:
            inner = call.args[0].value
            self._eval(inner)
            if (
                type(inner) is cst.Call
                and type(inner.func) is cst.Attribute
                and inner.func.attr.value in ("parameters", "buffers")
            ):
                is_self = self.is_receiver(inner.func.value)
                owner = Fact(MODULE, where=self.own_place) if is_self else self._eval(inner.func.value)
                if owner.kind == MODULE and owner.where in (FOLLOWS, ACCELERATOR):
                    return Fact(DEVICE, where=owner.where, device_expr=f"{self.ctx.code_for(call)}.device")
                if owner == UNKNOWN_FACT and not is_self:
                    # `next(model.parameters())` of a model handed in: code written to follow the
                    # model, which is on the accelerator when one is used
                    return Fact(DEVICE, where=ACCELERATOR, device_expr=f"{self.ctx.code_for(call)}.device")
            return UNKNOWN_FACT
        if name in self.analysis.records and name not in self.env:
            return self._record_instance(call, self.analysis.records[name], name)
        if name in self.analysis.plain_classes and name not in self.env:
            init = self.analysis.plain_classes[name].get("__init__")
            args = self._args(call)
            if init is None:
                return Fact(UNKNOWN, instance=name)
            run = self._followed_run(init, call, args, skip_self=True)[1]
            return Fact(UNKNOWN, instance=name, state=self._constructed_state(init, run))
        imported = self.ctx.project.plain_classes.get(name) if name not in self.env else None
        if imported is not None and imported.method_places:
            self._args(call)  # `ds = TabularDataset(x, y)` of another module: its methods' results are known
            return Fact(UNKNOWN, instance=name)
        local = self.analysis.nested.get(id(self.scope), {}).get(name)
        if local is not None and name not in self.env:
            args = self._args(call)
            closure = self.analysis.closure_of(local, self.env)
            return self._followed_run(local, call, args, skip_self=False, closure=closure)[0]
        functions = self.analysis.functions
        if name in functions:
            args = self._args(call)
            return self._follow(functions[name], call, args, skip_self=False)
        constructed = module_constructor(self.ctx, call)
        if constructed is not None:
            return self._constructed(call, constructed)
        args = self._args(call)
        builder = loaded_builder(self.ctx, call, self.scope) if name not in self.env else None
        if builder is not None:  # `net = hourglass(...)` then `net.load_state_dict(...)`
            self.analysis.host_modules_made = True
            return Fact(MODULE, where=HOST, factory=builder, origin=call)
        if name in self.env:
            return UNKNOWN_FACT
        built = self._built_on_device(call)
        if built is not None:
            return built
        named = _model_like_result(name, args)
        return named if named != UNKNOWN_FACT else self._fed_moved_input(call, name)

    def _built_on_device(self, call: cst.Call) -> Fact | None:
        """An instance of a class from another package built with `device=` a stated
        accelerator (`DetectBackend(weights, device=self.device)`): a model that loads itself
        there, as `Net().to(device)` is. A class only: a function given `device=` may return
        anything (a tensor, a tuple). Not in a test module: a test builds such wrappers (an ONNX
        runtime session taking host inputs) to probe what they accept."""
        if defines_tests(self.ctx.path, self.ctx.module):
            return None
        qualified = self.ctx.qualified_name(call.func)
        if qualified is None or qualified.split(".", 1)[0] == "torch" or not qualified.rsplit(".", 1)[-1][:1].isupper():
            return None
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "device"), None)
        if arg is None:
            return None
        device = self._fact_of(arg.value)
        if device.kind != DEVICE_VALUE or device.where != ACCELERATOR:
            return None
        return Fact(
            MODULE,
            where=ACCELERATOR,
            factory=qualified.rsplit(".", 1)[-1],
            device=device.device,
            device_expr=self.ctx.code_for(arg.value),
        )

    def _fed_moved_input(self, call: cst.Call, name: str) -> Fact:
        """`fn(x.to(device))` where `fn` is a parameter of the function: the caller moves the input
        to the accelerator to call it, so it computes there (a model handed in, whatever its name).
        So does `fn(tokens)` where `tokens` was made on a device (`device=memory.device`): a
        callable handed in that computes on placed tensors returns results where they are."""
        if not self._parameter(name.split(".", 1)[0]):
            return UNKNOWN_FACT
        for arg in call.args:
            fact = self._fact_of(arg.value)
            if not arg.star and moves_to_accelerator(arg.value) and fact.kind == DEVICE and fact.where == ACCELERATOR:
                return Fact(DEVICE, where=ACCELERATOR, device_expr=fact.device_expr, device=fact.device)
        for arg in call.args:
            fact = self._fact_of(arg.value)
            as_it_came = type(arg.value) is cst.Name and fact.device_expr == f"{arg.value.value}.device"
            if (
                not arg.star
                and fact.kind == DEVICE
                and fact.where in (ACCELERATOR, FOLLOWS)
                and not fact.guessed
                and not as_it_came  # a tensor parameter handed on: the callable may be a CPU one
            ):
                # (on an accelerator, but not on which one: a model split over devices
                # returns from its last stage)
                follows = fact.device_expr if fact.where == FOLLOWS else None
                return Fact(DEVICE, where=fact.where, device_expr=follows)
        return UNKNOWN_FACT

    def _parameter(self, name: str) -> bool:
        """Whether `name` is a parameter of the function this code runs."""
        scope = self.scope
        return type(scope) is cst.FunctionDef and any(
            p.name.value == name
            for p in (*scope.params.posonly_params, *scope.params.params, *scope.params.kwonly_params)
        )

    def _handed_module(self, node: cst.BaseExpression) -> bool:
        """`model` or `model.text_encoder` where `model` is a parameter of this function that
        it holds nothing about and that reads as a module: named like one (`MODEL_WORDS`), or
        used here through a method only modules have (`scorer.eval()`, `net.parameters()`)."""
        while type(node) is cst.Attribute:
            node = node.value
        if type(node) is not cst.Name or node.value in self.env or not self._parameter(node.value):
            return False
        if any(word in node.value.lower() for word in MODEL_WORDS):
            return True
        return node.value in self.analysis.module_parameters(self.scope)

    def _prepared(self, call: cst.Call) -> Fact:
        """`accelerator.prepare(model, optimizer, loader)`, `fabric.setup(model, opt)`: the
        modules come back on the launcher's device, everything else as it went in."""
        parts = tuple(_prepared_part(fact, node) for fact, node in self._args(call))
        return parts[0] if len(parts) == 1 else Fact(UNKNOWN, elements=parts)

    def _record_instance(self, call: cst.Call, names: list[str], class_name: str | None = None) -> Fact:
        """A dataclass or NamedTuple instance: its fields hold the facts of what built it."""
        parts: list[tuple[str, Fact]] = []
        for position, arg in enumerate(call.args):
            fact = self._eval(arg.value)
            if arg.star:
                return UNKNOWN_FACT
            name = arg.keyword.value if arg.keyword is not None else names[position] if position < len(names) else None
            if name is not None:
                parts.append((name, fact))
        given = {name for name, _ in parts}
        record = self.analysis.record_defaults.get(class_name, {}) if class_name is not None else {}
        for name, default in record.items():
            if name not in given:
                # evaluated where the class is written: the caller's names do not reach it
                env, self.env = self.env, {}
                try:
                    parts.append((name, self._eval(default)))
                finally:
                    self.env = env
        return Fact(UNKNOWN, fields=tuple(parts))

    def _module_call(self, call: cst.Call, callee: Fact, func: cst.CSTNode) -> Fact:
        args = self._args(call, HOST_ARGUMENTS.get(callee.factory or "", ()))
        if callee.fields and callee.origin is not None:
            # a loss built with a CPU class weight and never moved, called on device tensors
            device = next(((f, n) for f, n in args if devicey(f)), None)
            weight = next((f for _, f in callee.fields if cpu_side(f, allow_scalar=False)), None)
            if device is not None and weight is not None:
                self._record(weight, callee.origin, device[0], device[1], call, "weight")
        parameter_free = (callee.factory or "") in PARAMETER_FREE_MODULES
        scattering = (callee.factory or "") in INPUT_MOVING_WRAPPERS
        if is_host_module(callee) and callee.origin is not None and not parameter_free and not scattering:
            self._host_module_call(call, callee, func, args)
        if callee.device is not None and not parameter_free and not scattering:
            for fact, node in args:
                if devicey(fact):
                    self._cross(fact, node, callee, func, call, "module")
        on_device = callee.where in (FOLLOWS, ACCELERATOR) and not parameter_free
        if on_device:
            # DataParallel and DDP move (scatter) their inputs to the device themselves.
            moved_inside = self._inputs_forward_moves(callee)
            for position, (fact, node) in enumerate(args if not scattering else ()):
                if position in moved_inside:
                    continue  # `forward` moves this input itself (`x = x.to(self.device)`)
                if cpu_side(fact, allow_scalar=True) and compatible(fact, callee) and not self._lengths(node):
                    self._record(fact, node, callee, func, call, "module")
            for arg in call.args if callee.where == ACCELERATOR and not scattering else ():
                spread = self._fact_of(arg.value)
                if (
                    arg.star == "**"
                    and spread.origin is not None
                    and (spread.encoded or spread.batch and spread.kind == UNKNOWN)
                ):
                    # `model(**batch)` of a whole batch or a tokenizer's output, never moved
                    self._record(
                        Fact(CPU, where="cpu", origin=spread.origin, batch=True, encoded=spread.encoded),
                        arg.value,
                        callee,
                        func,
                        call,
                        "module",
                    )
            produced = self._forward_of(call, callee, args)
            if produced.from_factory or produced in (NUMBER, PY_DATA):
                return produced  # the forward builds its output on the CPU, or returns host data
            expr = next((f.device_expr for f, _ in args if f.kind == DEVICE and f.device_expr), None)
            # A module whose device nothing states computes where its input is, if it runs at all.
            stated = None if scattering else next((f.device for f, _ in args if devicey(f) and f.device), None)
            on_module = Fact(DEVICE, where=callee.where, device_expr=expr, device=callee.device or stated)
            if produced.elements is not None and not produced.alike:
                # A tuple the forward returns: each part is where the forward leaves it.
                return _returned_parts(produced, on_module)
            return replace(on_module, device=callee.device or produced.device or stated)
        split = False
        if callee.kind == MODULE and not parameter_free and callee.factory in self.analysis.classes:
            produced = self._forward_of(call, callee, args)
            if produced.kind == DEVICE and produced.device is not None:
                return produced  # a model that places its own stages: its output is on the last one
            split = self._places_stages_apart(callee.factory)
        if scattering and any(devicey(f) for f, _ in args):
            # the wrapper scatters every input onto the devices before its module runs: a host
            # input beside a device one (`dp([images.cuda(), boxes])`) never meets it as it is
            return Fact(DEVICE, where=next(f.where for f, _ in args if devicey(f)))
        if scattering:
            return UNKNOWN_FACT  # its output is where its module is, not where its inputs were
        combined = self._combine(call, args, allow_scalar=True)
        # DataParallel gathers its output on `output_device`, whatever its input's device was;
        # a model whose stages sit on different devices returns where its last stage is, which
        # its input's device does not say
        return replace(combined, device=None) if scattering or split else combined

    def _places_stages_apart(self, class_name: str | None) -> bool:
        """Whether the class's `__init__` puts its submodules on more than one stated device."""
        cls = self.analysis.classes.get(class_name or "")
        forward = cls.methods.get("forward") if cls is not None else None
        if forward is None:
            return False
        devices = {
            fact.device
            for key, fact in self.analysis.init_env(forward).items()
            if key.startswith("self.") and fact.kind == MODULE and fact.device is not None
        }
        return len(devices) > 1

    def _host_module_call(
        self, call: cst.Call, callee: Fact, func: cst.CSTNode, args: list[tuple[Fact, cst.CSTNode]]
    ) -> None:
        """A module certainly on the CPU called with an input certainly on the accelerator
        (`**batch` of a moved batch too)."""
        spread = [pair for arg in call.args if arg.star for pair in flatten(self._fact_of(arg.value), arg.value)]
        built_here = self._layer_built_in_device_code(callee)
        for fact, node in args + spread:
            on_accelerator = fact.where == ACCELERATOR and (
                fact.kind == DEVICE or fact.kind == UNKNOWN and not fact.batch
            )
            if on_accelerator or (built_here and fact.kind == DEVICE and fact.where == FOLLOWS):
                key = (id(call), id(callee.origin))
                if key not in self.analysis.host_calls:
                    self.analysis.host_calls[key] = HostModuleCall(callee, func, fact, node, call, self.scope)
                return

    def _layer_built_in_device_code(self, callee: Fact) -> bool:
        """`nn.BatchNorm2d(c)(x)` in a module's `forward` (or a method it runs): a torch layer
        with parameters built anew on the CPU at every call, applied to inputs that follow the
        module's device. (Its weights are never trained either: no optimizer holds them.)"""
        origin = callee.origin
        if self.own_place != FOLLOWS or type(origin) is not cst.Call:
            return False
        if self.ctx.index.enclosing_function(origin) is not self.scope:
            return False
        qualified = self.ctx.qualified_name(origin.func) or ""
        layer = qualified.rsplit(".", 1)[-1]
        return (
            qualified == f"torch.nn.{layer}"
            and layer[:1].isupper()
            and layer not in PARAMETER_FREE_MODULES
            and layer not in _CONTAINERS
            and not layer.endswith("Loss")
        )

    def _lengths(self, node: cst.CSTNode) -> bool:
        """Sequence lengths handed to a module (`self.rnn(x, torch.tensor(lengths))`): packing
        wants them on the CPU."""
        return "len" in self.ctx.code_for(node).lower()

    def _inputs_forward_moves(self, callee: Fact) -> frozenset[int]:
        """Positions of the arguments that the `forward` of a module class of this file moves
        itself before using them (`inputs = inputs.to(self.device)`, `x = x.cuda()`)."""
        cls = self.analysis.classes.get(callee.factory or "")
        forward = (
            (cls.methods.get("forward") or self.analysis.inherited_method(cls, "forward")) if cls is not None else None
        )
        if forward is None:
            return frozenset()
        params = [p.name.value for p in (*forward.params.posonly_params, *forward.params.params)][1:]
        moved = set()
        for statement in forward.body.body if type(forward.body) is cst.IndentedBlock else ():
            if type(statement) is not cst.SimpleStatementLine or type(statement.body[0]) is not cst.Assign:
                continue
            assign = statement.body[0]
            value = assign.value
            method = move_call(value)
            if method is None or method == "cpu" or not isinstance(value, cst.Call):
                continue
            first = next(
                (
                    a
                    for a in value.args
                    if not a.star and a.keyword in (None,) or (a.keyword and a.keyword.value == "device")
                ),
                None,
            )
            if method == "to" and (first is None or is_dtype(self.ctx, first.value)):
                continue  # `x.to(self.dtype)`: a cast
            receiver = value.func.value if type(value.func) is cst.Attribute else None
            for target in assign.targets:
                name = target.target
                if type(name) is cst.Name and type(receiver) is cst.Name and receiver.value == name.value:
                    moved.add(name.value)
        return frozenset(i for i, name in enumerate(params) if name in moved)

    def _forward_of(self, call: cst.Call, callee: Fact, args: list[tuple[Fact, cst.CSTNode]]) -> Fact:
        """What calling a module of a class defined in this file returns, from its `forward`."""
        cls = self.analysis.classes.get(callee.factory or "")
        forward = (
            (cls.methods.get("forward") or self.analysis.inherited_method(cls, "forward")) if cls is not None else None
        )
        if forward is None:
            return UNKNOWN_FACT
        # a model never moved is where it was built: its submodules are on no known device
        return self._follow(forward, call, args, skip_self=True, cls=cls, placed=callee.where not in (None, HOST))

    def _follow(
        self,
        func: cst.FunctionDef,
        call: cst.Call,
        args: list[tuple[Fact, cst.CSTNode]],
        skip_self: bool,
        cls: ClassFacts | None = None,
        placed: bool = True,
        state: tuple[tuple[str, Fact], ...] | None = None,
    ) -> Fact:
        """Analyse a same-file function with the call's argument facts (a few levels deep;
        each distinct set of argument facts is analysed once per file); `state`: what a plain
        instance's constructor left on the instance a method is called on."""
        return self._followed_run(func, call, args, skip_self, cls, placed, state)[0]

    def _followed_run(
        self,
        func: cst.FunctionDef,
        call: cst.Call,
        args: list[tuple[Fact, cst.CSTNode]],
        skip_self: bool,
        cls: ClassFacts | None = None,
        placed: bool = True,
        state: tuple[tuple[str, Fact], ...] | None = None,
        closure: Env | None = None,
    ) -> tuple[Fact, ScopePlacement | None]:
        """`_follow`'s answer and the run of `func` it comes from (None where none was made);
        `closure`: what the enclosing function holds, at the call, in the names a nested one reads."""
        if self.depth >= MAX_FOLLOW_DEPTH or func is self.scope:
            return UNKNOWN_FACT, None
        params = list(func.params.posonly_params) + list(func.params.params)
        if skip_self and params:
            params = params[1:]
        bound: Env = {}
        spread = next((i for i, a in enumerate(call.args) if a.star), None)
        # `window_partition(x, *self.win)`: the positional arguments before the first spread bind
        # as written; what the spread fills (any later parameter, or the `*args` of the helper)
        # is unknown, never a left-out parameter's default.
        leading = call.args if spread is None else call.args[:spread]
        positional = [a for a in leading if a.keyword is None]
        for param, arg in zip(params, positional):
            bound[param.name.value] = handed_input() if self._own_input(arg.value) else self._fact_of(arg.value)
        star = func.params.star_arg
        if type(star) is cst.Param:  # `def cat_all(*parts)`: the extra positional arguments, in order
            bound[star.name.value] = (
                Fact(UNKNOWN, elements=tuple(self._fact_of(arg.value) for arg in positional[len(params) :]))
                if spread is None
                else UNKNOWN_FACT
            )
        for arg in call.args:
            if arg.keyword is not None and not arg.star:
                bound[arg.keyword.value] = handed_input() if self._own_input(arg.value) else self._fact_of(arg.value)
        if spread is not None:
            for param in (*params, *func.params.kwonly_params):
                bound.setdefault(param.name.value, UNKNOWN_FACT)
        receiver = self._handed_receiver(call, params, positional)
        if receiver is not None:
            bound.pop(receiver, None)
        for attr, fact in state or ():
            bound[f"self.{attr}"] = fact  # the instance's own, read as `self.<attr>` by the method
        for param in (*params, *func.params.kwonly_params):
            # a parameter the call leaves out holds its default (`device=torch.device("cpu")`)
            if param.name.value not in bound and param.default is not None and constant_default(param.default):
                default = self._eval(param.default)
                if default != UNKNOWN_FACT:
                    bound[param.name.value] = default
        if (
            receiver is None
            # (a loader batch handed to a method: the instance's model meets it, `runner.step(batch)`;
            # a tokenizer's output handed to a method that feeds it to the model, `self._score(encoded)`)
            and not any(
                f.kind != UNKNOWN
                or f.where
                or ((f.batch or f.encoded) and skip_self)
                or _known_fields(f)
                or any(e.kind != UNKNOWN or e.where or _known_fields(e) for e in f.elements or ())
                for f in bound.values()
            )
            and params
            and not closure
        ):
            # Nothing known flows in: the function's own analysis already covers it. What it
            # returns on its inputs' device says nothing here, where the inputs are unknown.
            returned = _without_followed(self.analysis.returns_of(func) or UNKNOWN_FACT)
            return returned, self.analysis.scopes.get(id(func))
        own_place = self.own_place if placed else None
        receiver_class = self._instance_class() if receiver is not None else None
        key = (
            id(func),
            own_place,
            (receiver, id(receiver_class)),
            tuple(
                sorted(
                    (
                        k,
                        v.kind,
                        v.where,
                        id(v.origin),
                        v.scalar,
                        v.batch,
                        v.encoded,
                        v.conflict,
                        v.elements is not None,
                        tuple((e.kind, e.where, e.fields is not None) for e in v.elements or ()),
                        is_handed(v),
                    )
                    # (a closure's names apart from the parameters: `^name`)
                    for k, v in (*bound.items(), *((f"^{k}", v) for k, v in (closure or {}).items()))
                )
            ),
        )
        cached = self.analysis.followed.get(key)
        if cached is None:
            owner = cls if cls is not None else self.cls if skip_self or receiver is not None else None
            interpreter = type(self)(self.ctx, self.analysis, func, owner, bound, self.depth + 1)
            interpreter.closure = closure or {}
            if own_place is None:
                interpreter.own_place = None  # called while the model is being built, or never moved
            if receiver is not None:
                interpreter.receiver, interpreter.receiver_class = receiver, receiver_class
            cached = interpreter.run()
            cached.unplaced = own_place is None and owner is not None
            self.analysis.followed[key] = cached
            self.analysis.extra_meetings.extend(cached.meetings)
            self.analysis.extra_crossings.extend(cached.crossings)
        if receiver is not None:
            self._take_attributes(cached)
        return cached.returns or UNKNOWN_FACT, cached

    def _constructed_state(
        self, init: cst.FunctionDef, run: ScopePlacement | None
    ) -> tuple[tuple[str, Fact], ...] | None:
        """What a plain class's `__init__`, run with one construction's arguments, left on the
        instance where its own analysis (with arguments unknown) says otherwise, for attributes
        that no other method rebinds, moves or writes into."""
        if run is None:
            return None
        own = self.analysis.scope(init).facts
        kept = tuple(
            (key[5:], fact)
            for key, fact in run.facts.items()
            if key.startswith("self.")
            and fact != UNKNOWN_FACT
            and fact != own.get(key, UNKNOWN_FACT)
            and self.analysis.only_init_assigns(init, key[5:])
        )
        return kept or None

    def _own_input(self, node: cst.BaseExpression) -> bool:
        """A name this code holds nothing about (its own parameter, untouched): handed on, the
        callee reads it as its own analysis reads its parameter, not as "known unknown"."""
        return type(node) is cst.Name and node.value not in self.env and self._fact_of(node) == UNKNOWN_FACT

    def _instance_class(self) -> cst.ClassDef | None:
        """The class whose instance `self.receiver` holds here: the method's own class, or the
        class of the instance a helper was handed."""
        if self.receiver_class is not None:
            return self.receiver_class
        return self.analysis.owner_class(self.scope) if self.receiver == "self" else None

    def _handed_receiver(self, call: cst.Call, params: list[cst.Param], positional: list[cst.Arg]) -> str | None:
        """The parameter of the called function that the call hands this code's own instance
        (`_head(self, h)` into `def _head(model, h)`, `Net._tail(self, h)` into a static
        method's `owner`): there `owner.<attr>` is `self.<attr>` of this class. None where
        none or several are, or where this code runs on no instance of a class."""
        if self._instance_class() is None:
            return None
        handed = [param.name.value for param, arg in zip(params, positional) if self.is_receiver(arg.value)]
        handed += [a.keyword.value for a in call.args if a.keyword is not None and self.is_receiver(a.value)]
        return handed[0] if len(handed) == 1 else None

    def _take_attributes(self, run: ScopePlacement) -> None:
        """What a followed method or helper left on the instance (`self._cache = torch.tensor(...)`,
        `owner.model = owner.model.to(device)`) is what this code reads after the call."""
        for key, fact in run.facts.items():
            if key.startswith("self."):
                if fact == UNKNOWN_FACT:
                    self.env.pop(key, None)
                else:
                    self.env[key] = fact

    def _follow_own_method(self, method: cst.FunctionDef, call: cst.Call) -> Fact:
        """`self.helper(...)`: followed with the call's arguments; what the method leaves on
        `self` (`self._cache = torch.tensor(...)`, `self.model = self.model.to(device)`) is what
        the caller reads after the call: a class is one unit over its methods."""
        static = is_staticmethod(method)
        returned, run = self._followed_run(
            method, call, self._args(call), skip_self=not static, state=None if static else self._instance_state()
        )
        if run is not None and not static:
            self._take_attributes(run)
        return returned

    def _instance_state(self) -> tuple[tuple[str, Fact], ...] | None:
        """What this run of a plain class's method was handed as its instance's construction
        state (`Fact.state`), for a `self.helper(...)` it calls to read too (an evaluator's
        `self.model` from `Evaluator(cfg, model)`, read two methods down)."""
        if self.cls is not None or not self.bound:
            return None
        state = tuple((key[5:], fact) for key, fact in self.bound.items() if key.startswith("self."))
        return state or None


def _number_expression(
    node: cst.BaseExpression, name_is_number: Callable[[cst.Name], bool] = lambda name: False
) -> bool:
    """Data that reads as one Python number (`x.shape[0]`, `len(tokens)`, `cfg.dim ** 0.5`):
    `torch.tensor` of it is a 0-dim tensor, which may meet tensors on any device. `name_is_number`
    says which bare names the caller knows to hold numbers."""
    node = _unsigned(node)  # `-width / 2`
    if type(node) is cst.Name:
        return name_is_number(node)
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if type(node) is cst.Subscript:
        owner = node.value
        return (type(owner) is cst.Attribute and owner.attr.value == "shape") or (
            type(owner) is cst.Call and type(owner.func) is cst.Attribute and owner.func.attr.value == "size"
        )
    if type(node) is cst.Call:
        func = node.func
        if type(func) is cst.Name:
            return func.value in ("len", "int", "float", "round")
        return type(func) is cst.Attribute and (
            func.attr.value in ("item", "numel", "dim") or (func.attr.value == "size" and bool(node.args))
        )
    if type(node) in (cst.BinaryOperation, cst.BooleanOperation):  # `cfg.dim ** 0.5`, `floor or 0.0`
        sides = (node.left, node.right)  # type: ignore[attr-defined]  # both have the two sides
        return any(_number_expression(side, name_is_number) for side in sides) and all(
            _plain_operand(side, name_is_number) for side in sides
        )
    return False


def _plain_operand(node: cst.BaseExpression, name_is_number: Callable[[cst.Name], bool]) -> bool:
    """A side of number arithmetic that cannot be a list: a number, a name, an attribute, a
    setting, or arithmetic of those (`(bias - ebits) + 1`)."""
    node = _unsigned(node)
    if _number_expression(node, name_is_number) or type(node) in (cst.Name, cst.Attribute) or _setting_entry(node):
        return True
    return type(node) is cst.BinaryOperation and all(
        _plain_operand(side, name_is_number) for side in (node.left, node.right)
    )


def _annotated_number(ctx: FileContext, param: cst.Param) -> bool:
    """`x: float`, `n: Optional[int]`, `x: float | torch.Tensor`."""
    return param.annotation is not None and any(
        type(n) is cst.Name and n.value in ("int", "float", "bool", "Number")
        for n in ctx.index.walk(param.annotation.annotation)
    )


def _unsigned(node: cst.BaseExpression) -> cst.BaseExpression:
    while type(node) is cst.UnaryOperation and type(node.operator) in (cst.Minus, cst.Plus):
        node = node.expression
    return node


def _setting_entry(node: cst.BaseExpression) -> bool:
    """`params["mean"]`: an entry of a mapping by a string key, a setting (an array is indexed by
    numbers, slices or masks)."""
    return (
        type(node) is cst.Subscript
        and len(node.slice) == 1
        and type(node.slice[0].slice) is cst.Index
        and type(node.slice[0].slice.value) is cst.SimpleString
    )


def handed_input() -> Fact:
    """The fact a followed call binds to a parameter it hands the caller's own untouched input:
    nothing known, as `UNKNOWN_FACT`, but its own object, so the callee can tell it from an
    unknown value the caller made (`fabric.setup_dataloaders(loader)`) and read the name as its
    own analysis does (a loader parameter yields host batches)."""
    return Fact(UNKNOWN)


def is_handed(fact: Fact) -> bool:
    return fact is not UNKNOWN_FACT and fact == UNKNOWN_FACT


_MODULE_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential"})

# The environment key under which a function keeps the default device it set itself.
DEFAULT_DEVICE_KEY = "<default device>"

# Reductions that, called without a dimension, leave a 0-dim tensor (`loss.sum().cpu()`).
_FULL_REDUCTIONS = frozenset(
    {
        "sum",
        "mean",
        "max",
        "min",
        "prod",
        "norm",
        "std",
        "var",
        "median",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "all",
        "any",
        "item",
        "logsumexp",
        "nansum",
        "nanmean",
    }
)


def _returned_parts(produced: Fact, on_module: Fact) -> Fact:
    """What a module on the device hands back for each part of the tuple its `forward` returns:
    a tensor it computes is on the module's device; host data (`lengths.tolist()`, `x.item()`,
    a list of ints) and a tensor it builds on the CPU or copies there stay on the host; a part
    the forward's analysis cannot place is placed nowhere, never guessed onto the device."""
    parts = []
    for part in produced.elements or ():
        if part.elements is not None and not part.alike:
            parts.append(_returned_parts(part, on_module))
        elif part in (NUMBER, PY_DATA) or part.from_factory or (part.kind == CPU and part.copied):
            parts.append(part)
        elif part.kind == DEVICE:
            parts.append(replace(on_module, device=on_module.device or part.device))
        else:
            parts.append(UNKNOWN_FACT)
    return Fact(UNKNOWN, elements=tuple(parts))


def ignores_default_device(call: cst.Call, short: str) -> bool:
    """Factories that build on the CPU whatever the default device or `with torch.device(...)`
    says: `torch.from_numpy` (it shares the array's memory) and the overload of `torch.normal`
    that takes a number mean and std and a `size` (`torch.normal(0, std, size=(n, m))`); an
    explicit `device=` still places either."""
    if short == "from_numpy":
        return True
    if short != "normal":
        return False
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in call.args):
        return False
    return "size" in keywords or len(positional) >= 3


def _no_dimension(call: cst.Call, tensors: int) -> bool:
    """No argument after the first `tensors` positional ones names a dimension: `x.sum()`,
    `x.mean(dtype=torch.float64)`, `torch.sum(x)`, not `x.sum(1)` nor `torch.max(a, b)`."""
    return all(
        arg.keyword is not None and arg.keyword.value not in ("dim", "axis", "other") for arg in call.args[tensors:]
    ) and all(arg.keyword is None and not arg.star for arg in call.args[:tensors])


def _full_reduction(function: str | None, call: cst.CSTNode) -> bool:
    """`torch.sum(x)`, `torch.norm(x)`: a reduction of a whole tensor, a 0-dim tensor."""
    return (
        type(call) is cst.Call
        and (function or "").startswith("torch.")
        and (function or "").count(".") == 1
        and (function or "").rsplit(".", 1)[-1] in _FULL_REDUCTIONS
        and len(call.args) >= 1
        and _no_dimension(call, 1)
    )


def _reduced(move: cst.BaseExpression) -> bool:
    """Whether a move's receiver is a full reduction (`x.sum().cpu()`): a 0-dim tensor, which
    PyTorch lets meet device tensors."""
    receiver = move.value if type(move) is cst.Attribute else None
    return (
        type(receiver) is cst.Call
        and type(receiver.func) is cst.Attribute
        and receiver.func.attr.value in _FULL_REDUCTIONS
        and not receiver.args
    )


def only_binding(ctx: FileContext, name: str, use: cst.CSTNode) -> cst.BaseExpression | None:
    """The one value that a plain `name = ...` gives `name` in the function of `use` (else at
    module level, as a notebook's cells do), when nothing else binds it there."""
    function = ctx.index.enclosing_function(use)
    if function is not None:
        params = function.params
        if any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
            return None  # the caller's value
    for scope in (function, None) if function is not None else (None,):
        values: list[cst.BaseExpression] = []
        for node in ctx.index.walk(scope or ctx.module):
            if type(node) is cst.Assign and ctx.index.enclosing_function(node) is scope:
                if any(type(t.target) is cst.Name and t.target.value == name for t in node.targets):
                    values.append(node.value)
        if values:
            return values[0] if len(values) == 1 else None
    return None


def _places_on_device(node: cst.CSTNode) -> bool:
    """`t.to(device)`, `t.cuda()`, `torch.tensor(x, device=device)` (not to the CPU)."""
    if type(node) is not cst.Call:
        return False
    if move_call(node) in ("to", "cuda"):
        return True
    device = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "device"), None)
    return device is not None and not (type(device) is cst.SimpleString and "cpu" in device.value)


def constant_default(node: cst.BaseExpression) -> bool:
    """A default that means the same wherever it is read: literals, `None`, and `torch.*`
    values built from them (`"cpu"`, `torch.device("cuda", 0)`), never a name of the caller."""
    if type(node) in (cst.SimpleString, cst.Integer, cst.Float):
        return True
    if type(node) is cst.Name:
        return node.value in ("None", "True", "False")
    if type(node) is cst.Attribute:
        return (dotted_name(node) or "").startswith("torch.")
    if type(node) is cst.Call:
        return (
            type(node.func) is cst.Attribute
            and (dotted_name(node.func) or "").startswith("torch.")
            and all(arg.keyword is None or arg.keyword.value != "device" for arg in node.args)
            and all(constant_default(arg.value) for arg in node.args)
        )
    return False


def _known_fields(fact: Fact) -> bool:
    """A record (dataclass, dict) handed in with something known in it (`opts.device`)."""
    return any(part != UNKNOWN_FACT for _, part in fact.fields or ())


def _without_followed(fact: Fact) -> Fact:
    """A callee's return fact for a caller that knows nothing of the arguments: facts that only
    follow the callee's own inputs become unknown; CPU tensors it creates stay."""
    if fact.elements is not None:
        return replace(fact, elements=tuple(_without_followed(e) for e in fact.elements))
    if fact.kind in (DEVICE, MODULE) and fact.where == FOLLOWS:
        return UNKNOWN_FACT
    return fact


def moved_there(fact: Fact) -> bool:
    """A value of unknown kind that a move put on the accelerator (`batch.cuda()` of a batch the
    file does not show): a tensor, or a structure of them, on the device."""
    return fact.kind == UNKNOWN and fact.where == ACCELERATOR and fact.device_expr is not None and not fact.batch


# Loss constructor keywords that become buffers of the loss module.
LOSS_WEIGHTS = frozenset({"weight", "pos_weight"})
# Dtype casts without arguments, which leave a class weight on the device it was made on.
WEIGHT_CASTS = frozenset({"float", "double", "half", "bfloat16", "contiguous"})
# Launchers that place the models handed to them on their device (`accelerator.prepare(...)`).
PLACING_LAUNCHERS = frozenset({"accelerate.Accelerator", "lightning.Fabric", "lightning.fabric.Fabric"})
PLACING_METHODS = frozenset({"prepare", "prepare_model", "setup", "setup_module"})
LAUNCHER = Fact(UNKNOWN, factory="<launcher>")


# A loader a launcher prepared: its batches come on the device.
DEVICE_LOADER = Fact(UNKNOWN, factory="<device loader>")


def _prepared_part(fact: Fact, node: cst.CSTNode) -> Fact:
    """What `accelerator.prepare` returns for one argument: modules on the device, loaders that
    yield device batches, tensors as they were (it does not move them), the rest unknown."""
    if fact.kind == MODULE or (fact == UNKNOWN_FACT and _model_named(node)):
        return Fact(MODULE, where=ACCELERATOR, factory=fact.factory)
    if (
        fact == LOADER
        or "loader" in (dotted_name(node) or "").lower()
        or (type(node) is cst.Call and "loader" in (dotted_name(node.func) or "").lower())
    ):
        return DEVICE_LOADER
    return fact if fact.is_tensor else UNKNOWN_FACT


def _model_named(node: cst.CSTNode) -> bool:
    name = node.value if type(node) is cst.Name else node.attr.value if type(node) is cst.Attribute else ""
    return any(word in name.lower() for word in MODEL_WORDS)


def _model_like_result(name: str, args: list[tuple[Fact, cst.CSTNode]]) -> Fact:
    """What `model(x)` returns when nothing else is known of `model`: where its device input is."""
    if not any(word in name.lower() for word in MODEL_WORDS):
        return UNKNOWN_FACT
    device = next((f for f, _ in args if devicey(f)), None)
    return Fact(DEVICE, where=device.where, device_expr=device.device_expr) if device is not None else UNKNOWN_FACT


# The parallel wrappers by the names they are imported under (the engine's factory is the short name).
_PARALLEL_WRAPPERS = {
    "torch.nn.parallel.DistributedDataParallel": "DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": "DistributedDataParallel",
    "torch.nn.parallel.DataParallel": "DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "DataParallel",
}


def _scatters(call: cst.Call, wrapper: str) -> bool:
    """`DataParallel(m)` always moves its inputs to its first device; `DDP(m, device_ids=[i])`
    moves them to `i`; `DDP(m)` without devices (`device_ids=None`) hands them on as they are."""
    if wrapper != "DistributedDataParallel":
        return True
    ids = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "device_ids"), None)
    if ids is None and len(call.args) > 1 and call.args[1].keyword is None:
        ids = call.args[1].value
    if any(a.star for a in call.args):
        return True
    return ids is not None and not (type(ids) is cst.Name and ids.value == "None")


def _delegates_move(ctx: FileContext, override: cst.FunctionDef | None, method: str) -> bool:
    """A module class's own `to()`/`cuda()` whose every return hands back the base class's move
    (`return super().to(*args, **kwargs)`) or the instance itself: whatever else it does, the
    caller gets the module, moved."""
    if override is None:
        return False
    returns = [r.value for r in ctx.index.returns_of(override)]

    def delegated(value: cst.BaseExpression | None) -> bool:
        if type(value) is cst.Name:
            return value.value == "self"
        func = value.func if type(value) is cst.Call else None
        return (
            type(func) is cst.Attribute
            and func.attr.value == method
            and type(func.value) is cst.Call
            and type(func.value.func) is cst.Name
            and func.value.func.value == "super"
        )

    return bool(returns) and all(delegated(value) for value in returns)


def constructed_object(ctx: FileContext, func: cst.BaseExpression) -> bool:
    """`Data(...).to(...)`: the receiver is built by a class that is not torch's."""
    if type(func) is not cst.Attribute or type(func.value) is not cst.Call:
        return False
    callee = func.value.func
    last = callee.attr.value if type(callee) is cst.Attribute else callee.value if type(callee) is cst.Name else ""
    return last[:1].isupper() and not (ctx.qualified_name(callee) or "").startswith("torch.")


def _returns_device_batch(place: str) -> bool:
    """An imported function's place (`ProjectView.functions`) that says its result, or every
    part of the tuple it returns, is on the device."""
    if place == DEVICE:
        return True
    parts = place[len("tuple:") :].split("|") if place.startswith("tuple:") else []
    return bool(parts) and all(part == DEVICE for part in parts)


def _all_params(function: cst.FunctionDef) -> list[cst.Param]:
    params = function.params
    star = [params.star_arg] if isinstance(params.star_arg, cst.Param) else []
    kwargs = [params.star_kwarg] if params.star_kwarg is not None else []
    return [*params.posonly_params, *params.params, *params.kwonly_params, *star, *kwargs]


def _bound_part(target: cst.BaseExpression, value: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
    """What `target = value` binds to `name`: the value, or its matching element when both
    sides are tuples of the same length (`b, device = n, x.device`); `value` itself as a
    stand-in when the name is bound some other way (unpacking a call), None when not bound."""
    if type(target) is cst.Name:
        return value if target.value == name else None
    if type(target) in (cst.Tuple, cst.List):
        elements = target.elements  # type: ignore[attr-defined]
        for index, element in enumerate(elements):
            if type(element.value) is cst.Name and element.value.value == name:
                if type(element) is cst.Element and type(value) in (cst.Tuple, cst.List):
                    parts = value.elements  # type: ignore[attr-defined]
                    if len(parts) == len(elements) and type(parts[index]) is cst.Element:
                        return parts[index].value  # type: ignore[no-any-return]
                return value
    return None
