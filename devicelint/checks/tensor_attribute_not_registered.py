from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.argument_places import passed_for
from devicelint.analysis.attribute_aliases import aliased_values, only_handed_on
from devicelint.analysis.constant_attributes import is_class_body_value, module_constant, stored_once
from devicelint.analysis.constructor_devices import cpu_at_every_construction
from devicelint.analysis.container_reads import through_containers, unpacked_part
from devicelint.analysis.custom_movers import moved_attributes
from devicelint.analysis.facts import file_facts
from devicelint.analysis.instance_parameters import handed_references
from devicelint.analysis.kept_devices import moved_after_built
from devicelint.analysis.model_events import data_parallel_classes
from devicelint.analysis.modules import imported_module_class, methods
from devicelint.analysis.moved_copies import moved_by_helper
from devicelint.analysis.names import dotted_name, is_staticmethod, isinstance_test, literal_value
from devicelint.analysis.parameter_products import parameters_read
from devicelint.analysis.placement_classes import (
    ClassFacts,
    added_elements,
    class_facts,
    container_kind,
    is_parameter_call,
    literal_elements,
    local_containers,
    parameter_moved_by_builder,
    parameter_moved_by_hand,
    returned_container,
    self_attribute,
)
from devicelint.analysis.placement_facts import (
    ACCELERATOR,
    CPU,
    DEVICE,
    FACTORIES,
    FOLLOWS,
    MEETING_METHODS,
    PRESERVING_METHODS,
    TENSOR_ONLY_METHODS,
    UNKNOWN,
    Fact,
    move_call,
)
from devicelint.analysis.placement_program import construction_methods
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.placement_values import (
    annotation_is_tensor,
    indexes_every_dimension,
    is_empty_placeholder,
    stated_dimensions,
)
from devicelint.analysis.python_ints import is_python_int
from devicelint.analysis.training.helpers import arguments_for, local_classes, returned_call
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place, own_line_statement
from devicelint.rule_base import FixProposal, Rule, Violation, register

# Methods through which a class moves its own tensors: attributes they touch are moved.
CUSTOM_MOVERS = frozenset({"_apply", "to", "cuda"})
# Classes that save and restore their own tensors: left alone.
CUSTOM_STATE = frozenset({"_load_from_state_dict", "state_dict", "_save_to_state_dict"})
# `self.x.<attr>` uses that read the tensor on the host or move it first.
SAFE_ATTRIBUTES = frozenset(
    {
        "to",
        "cuda",
        "cpu",
        "type_as",
        "item",
        "tolist",
        "shape",
        "size",
        "device",
        "dtype",
        "numel",
        "dim",
        "numpy",
        "ndim",
        "is_cuda",
        "copy_",
        "fill_",
        "zero_",
        "data_ptr",
        "nelement",
    }
)
DATA_CONSTRUCTORS = frozenset(
    {"torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor"}
)
SAFE_FUNCTIONS = frozenset(
    {"len", "print", "int", "float", "str", "bool", "isinstance", "repr", "list", "tuple", "range", "type"}
)


@register
class TensorAttributeNotRegistered(Rule):
    """
    ## What it does
    Flags `self.name = <tensor>` in an `nn.Module` (in `__init__` or another method) when the
    tensor is created on the CPU, is neither an `nn.Parameter` nor registered with
    `register_buffer`, and a method later computes with it (not only reads its shape or value).
    Also flags tensors kept in a plain list, tuple or dict attribute (`self.anchors = []` then
    `self.anchors.append(t)`; also inside tuples or dicts put there, `self.stats[k] = {"mean": m}`), even when each one is registered as a buffer as well, and, in a
    class that overrides `to`, `cuda` or `_apply`, every tensor attribute the override does not
    move. A tensor that `__init__` computes from the module's own parameters
    (`self.W = self.A @ self.B`, not detached) is reported even where every use moves it, and
    even when it is 0-dim: the copy is a stale snapshot whose autograd graph holds the CPU
    parameters (frozen ones, `nn.Parameter(t, requires_grad=False)`, hold no graph and count as
    buffers do). A constructor
    argument stored as it came (`self.priors = priors`) counts when every construction of the
    class in the file hands it a CPU tensor (one a LightningModule moved `.to(self.device)` in
    its own `__init__`, where that is still the CPU). A factory placed on the device of an input
    the constructor is given (`torch.zeros(n, device=example.device)` in `__init__` or a helper
    only it calls) counts in a class the file moves after building it, or a LightningModule. So
    does a factory given the constructor's device (`device=self.device`, with `self.device =
    device if device is not None else torch.device("cpu")`) when every construction of the class
    in the file leaves that parameter at a CPU default or passes the CPU, also through a
    subclass's `super().__init__(..., device=device)`; a subclass's methods that read the base's
    attribute count as its uses. In a module class that the file wraps in `nn.DataParallel` over
    several GPUs (or that the wrapped model holds as a submodule), a plain attribute that
    `__init__` puts on the GPU (`self.index = idx.cuda()`), or a list, tuple or dict of such
    tensors, also one handed to `__init__` that every construction of the class in the file fills
    with them (`Net(spirals=[s.to(device) for s in spirals])`), is reported too: the replicas share
    those tensors on the first GPU. Also reported: an `nn.Parameter` moved by hand
    (`self.w = nn.Parameter(t).cuda()`, `.to(device)`), whose result is a plain copy the module
    never registers, and a cache that `__init__` sets to `None` and a method fills once, only
    under `if self.cache is None:` (or `... or self.cache.size(0) < n`, or after `if self.cache is
    not None: return`), with a tensor (or a list of tensors: torchvision's old cell anchors) on the
    inputs' device and no check of that device: a later `model.to(...)` leaves it behind. A CPU
    tensor bound in the class body (`zero_points = torch.tensor([...])`, a class attribute every
    instance reads as `self.zero_points`) that a method computes with and no method rebinds on
    the instance is reported too: it belongs to the class, not to any module's buffers. So is a
    CPU tensor that a plain class of the file (no `nn.Module`, no `to`/`cuda` of its own) stores
    in `__init__` and reads in another method without moving it (`self.window =
    torch.hann_window(n)` in an STFT helper), where a module of the file keeps an instance of it
    as an attribute and uses it: `model.to()` never reaches into a plain object. A hand move in
    `__init__` to the constructor's device (`if device is not None: self.fb = self.fb.to(device)`)
    moves nothing when every construction in the file leaves that device out, also through a
    subclass that forwards its `**kwargs`. STFT windows (`torch.hann_window`, also
    `getattr(torch, window)(n)` with `window="hann_window"` as the default) are factories.

    ## Why it is a bug on a GPU
    `model.to(device)`, `model.cuda()` and `model.half()` move and cast parameters and buffers
    only. A plain tensor attribute stays on the CPU, so `forward` fails with `Expected all
    tensors to be on the same device` on the GPU; `state_dict()` does not save it either, so a
    reloaded model silently loses it. A list of tensors is no better: `.to()` replaces each
    registered buffer with a moved copy, so the list still holds the old CPU tensors.

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
    The fix turns `self.name = <tensor>` in `__init__` into
    `self.register_buffer("name", <tensor>, persistent=False)`: `.to()`/`.cuda()` then move it,
    and `persistent=False` keeps `state_dict()` (and every checkpoint) exactly as it was. It is
    unsafe: a buffer is also cast by `model.half()`, listed by `named_buffers()` and broadcast by
    DDP, and a trained tensor belongs in an `nn.Parameter` instead. No fix when the assignment is
    not a plain `self.name = ...` statement of `__init__` after `super().__init__()`
    (`register_buffer` raises before it), when the class assigns the attribute elsewhere a value
    that is not a tensor (a buffer only takes tensors or None), for tensors kept in lists or
    dicts, or in classes that move their tensors in their own `to()`.

    ## Known limits
    Only tensors the analysis can prove are made on the CPU (torch factories without `device=`
    and what is computed from them) or registered as buffers are reported. A custom `to`,
    `cuda` or `_apply` is read for the `self.<name>` it touches (and the methods of the class it
    calls); one that reaches attributes generically (`vars(self)`, `getattr`, `setattr`)
    silences the class, and so do state-dict hooks. Tensors whose every use moves them
    (`self.pe.to(x.device)`, `self.mean.type_as(x)`, also through a loop over a list), reads them on the host
    (`.item()`, `.tolist()`, `.shape`, `len`, `int(self.stride.max())`), copy them into a
    device tensor (`out[:n].copy_(self.table)`, which copies across devices), meet only what the
    same call copies to the host (`iou(boxes.cpu(), self.anchors[i])`: kept on the CPU on purpose), tensors handed to a
    function or method of the file that moves that parameter itself (`w = w.to(x)`), tensors only
    handed to a helper of the file's own project (a relative import, or a package named in the
    file's path), which the file cannot see and which may move them, tensors
    that only pick from a Python list (`self.items[self.index]`), 0-dim tensors (also
    `torch.tensor(v)` under `isinstance(v, float)`, or from a parameter annotated `float`,
    `int` or `bool`, or defaulting to a number, that the function rebinds only by arithmetic,
    kept alone or in a plain list, and whole-tensor reductions such as `x.sum()` or
    `torch.norm(x)` without a dimension), which PyTorch lets meet device tensors, tensors read only one element at a time with Python
    integers that index away every dimension (`self.weights[i]` for `i` from `range` or
    `enumerate`, not as an element of a list), each read a 0-dim value, tensors of a 1-D factory
    (`torch.linspace`, `2 ** torch.arange(n)`) that a loop walks element by element where each
    element is only an operand of arithmetic (`for f in self.freq_bands: torch.sin(f * x)`),
    caches left empty by `__init__` (`torch.empty(0, ...)`) or rebuilt when their `.device`
    differs from the input's, classes whose base in the same file moves them in `_apply`, and
    test files, whose helper modules keep constant tensors on purpose, are not reported.
    """

    code = "DL102"
    name = "tensor-attribute-not-registered"
    summary = "A tensor stored as a plain module attribute is not moved by `model.to(device)`."
    message = "`self.{attr}` {problem}; {advice}"
    fix_availability = "unsafe"
    tokens = ("torch",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if is_test_path(ctx.path):
            return  # test fixtures build odd modules on purpose (constant weights for tracing)
        yield from self._held_plain_objects(ctx)
        for facts in class_facts(ctx).values():
            if CUSTOM_STATE & facts.methods.keys():
                continue
            movers = sorted(CUSTOM_MOVERS & facts.methods.keys())
            moved = moved_attributes(ctx, facts.node, facts.methods, movers)
            inherited = _moved_by_bases(ctx, facts)
            if moved is None or inherited is None:
                continue  # the class's own (or a base's) `_apply`/`to` reaches every attribute
            moved |= inherited
            yield from self._plain_containers(ctx, facts, moved)
            yield from self._shared_by_replicas(ctx, facts, moved)
            yield from self._class_attributes(ctx, facts, moved)
            for attr, assignments in _plain_attributes(facts, moved).items():
                lost = next(
                    (
                        (v, m)
                        for v, _ in assignments
                        if (m := parameter_moved_by_hand(ctx, v) or parameter_moved_by_builder(ctx, v, facts))
                    ),
                    None,
                )
                if lost is not None:
                    value, method = lost
                    yield self.violation(
                        _assignment_target(ctx, value) or value,
                        fix=None,
                        attr=attr,
                        problem=(
                            f"holds the plain tensor that `.{method}()` returns for an `nn.Parameter`, a copy that is "
                            "no Parameter: the module never registers it, so it is missing from `parameters()` (the "
                            "optimizer never trains it) and from `state_dict()`"
                        ),
                        advice="create the parameter on the device instead (`nn.Parameter(torch.rand(n, device=device))`) or move the whole module",
                    )
                    continue
                cache = None if movers else _lazy_device_cache(ctx, facts, attr, assignments)
                if cache is not None:
                    listed = _cached_list(ctx, assignments)
                    yield self.violation(
                        _assignment_target(ctx, cache) or cache,
                        fix=None,
                        attr=attr,
                        problem=(
                            f"starts empty and caches {'a list of tensors' if listed else 'a tensor'} made on the "
                            f"inputs' device the first time a method runs (while `self.{attr}` is None), as a plain "
                            "attribute: moving the model afterwards (`.to()`, `.cpu()` for inference) never moves "
                            "the cache, which stays on the old device"
                        ),
                        advice=(
                            f"rebuild it when the device changes (`if self.{attr} is None or "
                            f"self.{attr}[0].device != device:`)"
                            if listed
                            else f'register it with `self.register_buffer("{attr}", None, persistent=False)`'
                        ),
                    )
                    continue
                if only_handed_on(ctx, facts.node, attr):
                    continue  # `self.a = self.<attr>` is every read: reported as `self.a`
                candidate = made = None
                assigned_in = {id(v): m for v, m in assignments}
                for value, source in _built_as(ctx, assignments):
                    fact = file_facts(ctx).value(source)
                    if (fact.kind == DEVICE or fact.where == ACCELERATOR) and _is_move(source):
                        if _moved_to_constructor_cpu(ctx, source, assigned_in[id(value)]):
                            continue  # `if device is not None: self.x = self.x.to(device)`, never given one
                        candidate = made = None  # `self.x = self.x.to(device)`: moved by hand
                        break
                    if candidate is None and _made_on_cpu(ctx, through_containers(ctx, source), fact):
                        candidate, made = value, source
                if (
                    candidate is None
                    and not movers
                    and _parameter_snapshot(ctx, facts, attr, assignments[0][0], assignments)
                ):
                    # a product of parameters cached in `__init__`, even a 0-dim one: its graph holds
                    # the CPU parameters
                    candidate = made = assignments[0][0]
                if candidate is None and not movers:
                    # `self.priors = priors`, where every construction in the file hands a CPU tensor
                    candidate = next((v for v, m in assignments if _handed_cpu_tensor(ctx, v, m)), None)
                if candidate is None and not movers:
                    # `torch.arange(n, device=self.device)` where every construction leaves `device=None`
                    candidate = made = next((v for v, m in assignments if _placed_on_constructor_cpu(ctx, v, m)), None)
                example = None
                if candidate is None and not movers:
                    # `torch.zeros(n, device=example.device)` while built, in a class moved later
                    example = candidate = next(
                        (v for v, m in assignments if _placed_like_an_example(ctx, facts, v, m)), None
                    )
                handed_in = None
                if candidate is None and movers:
                    # the class moves its tensors by hand: one handed to the constructor counts too
                    handed_in = candidate = next(
                        (v for v, m in assignments if _tensor_argument(ctx, facts, attr, v, m)), None
                    )
                snapshot = _parameter_snapshot(ctx, facts, attr, candidate, assignments) if handed_in is None else []
                if snapshot:
                    if not _used_after_init(ctx, facts, attr):
                        continue
                elif candidate is None or not _computed_with(ctx, facts, attr) or _moved_by_the_class(ctx, facts, attr):
                    continue
                elif _filled_with_host_copies(ctx, facts, attr):
                    continue
                elif handed_in is None and (
                    _scalar_data(ctx, made or candidate, candidate) or _lazy_slot(ctx, facts, attr, made or candidate)
                ):
                    continue
                assert candidate is not None
                target = _assignment_target(ctx, candidate) or facts.unpacked_targets.get(id(candidate))
                if snapshot:
                    named = ", ".join(f"`self.{p}`" for p in snapshot)
                    problem = (
                        f"holds a tensor computed in `__init__` from the parameters {named}: `model.to(device)` "
                        "leaves it on the CPU, and moving it later copies a stale value whose graph reaches the "
                        "CPU parameters"
                    )
                    advice = "compute it from the parameters in `forward` instead"
                    yield self.violation(target or candidate, fix=None, attr=attr, problem=problem, advice=advice)
                    continue
                if movers:
                    what = "a tensor" if handed_in is not None else "a CPU tensor"
                    problem = f"holds {what} that this class's own `{movers[-1]}()` does not move"
                    advice = f'move it there as well, or use `self.register_buffer("{attr}", ...)`'
                elif example is not None:
                    problem = (
                        "holds a tensor made on the device of an input the constructor is given, and is not a "
                        "parameter or buffer: moving the model later never moves it"
                    )
                    advice = f'use `self.register_buffer("{attr}", ...)`'
                else:
                    problem = (
                        "holds a CPU tensor that is not a parameter or buffer: `model.to(device)` never "
                        "moves it and `state_dict()` never saves it"
                    )
                    advice = f'use `self.register_buffer("{attr}", ...)` (or `nn.Parameter` if it is trained)'
                fix = None if movers else _as_buffer(ctx, attr, candidate, [v for v, _ in assignments])
                yield self.violation(target or candidate, fix=fix, attr=attr, problem=problem, advice=advice)

    def _held_plain_objects(self, ctx: FileContext) -> Iterator[Violation]:
        """A CPU tensor that a plain class of the file (no `nn.Module`) stores in `__init__` and
        reads in its other methods (`self.window = torch.hann_window(n)` in an STFT helper),
        where a module of the file keeps an instance of it as an attribute and uses it after it
        is built: `model.to(device)` moves submodules, parameters and buffers, and never reaches
        into a plain object."""
        modules = class_facts(ctx)
        classes = local_classes(ctx)
        reported: set[int] = set()
        for facts in modules.values():
            for attr, value, method in facts.assignments:
                if method.name.value != "__init__" or type(value) is not cst.Call or type(value.func) is not cst.Name:
                    continue
                held = classes.get(value.func.value)
                if held is None or held.name.value in modules or id(held) in reported or not _plain_class(held):
                    continue
                own = methods(held)
                if (CUSTOM_MOVERS | CUSTOM_STATE | {"cpu", "__getattr__"}) & own.keys():
                    continue  # it moves (or serves) its own tensors
                if not _used_after_init(ctx, facts, attr):
                    continue
                for stored in stored_once(ctx, held).values():
                    if not stored.cpu_tensor or stored.scalar or not _read_after_init(ctx, held, stored.attr):
                        continue
                    target = _assignment_target(ctx, stored.value)
                    reported.add(id(held))
                    yield self.violation(
                        target or stored.value,
                        fix=None,
                        attr=stored.attr,
                        problem=(
                            f"holds a CPU tensor in `{held.name.value}`, a plain class that the module "
                            f"`{facts.node.name.value}` keeps as `self.{attr}`: `model.to(device)` moves submodules, "
                            "parameters and buffers, never the tensors of a plain object, so it stays on the CPU"
                        ),
                        advice=(
                            f"make `{held.name.value}` an `nn.Module` and register the tensor with "
                            f'`self.register_buffer("{stored.attr}", ...)`'
                        ),
                    )
                    break

    def _class_attributes(self, ctx: FileContext, facts: ClassFacts, moved: set[str]) -> Iterator[Violation]:
        """A CPU tensor bound in the class body (`zero_points = torch.tensor([...])`), which the
        methods read as `self.<name>`: a class attribute is no parameter or buffer of any
        instance, so `model.to(device)` never moves it."""
        for attr, stored in stored_once(ctx, facts.node).items():
            if not is_class_body_value(ctx, stored.value) or not stored.cpu_tensor or stored.scalar:
                continue
            if attr in facts.registered or attr in facts.submodules or attr in moved:
                continue
            if not _computed_with(ctx, facts, attr) or _moved_by_the_class(ctx, facts, attr):
                continue
            if _scalar_data(ctx, stored.value, stored.value):
                continue
            yield self.violation(
                _assignment_target(ctx, stored.value) or stored.value,
                fix=None,
                attr=attr,
                problem=(
                    "is a CPU tensor bound in the class body: a class attribute is shared by every instance and "
                    "is no parameter or buffer, so `model.to(device)` never moves it and `state_dict()` never "
                    "saves it"
                ),
                advice=f'register it in `__init__` with `self.register_buffer("{attr}", ...)`',
            )

    def _shared_by_replicas(self, ctx: FileContext, facts: ClassFacts, moved: set[str]) -> Iterator[Violation]:
        """A plain attribute holding a tensor put on the GPU in `__init__`, in a module class that
        `nn.DataParallel` replicates (wrapped, or a submodule of the wrapped model): the replicas
        get copies of the parameters and buffers only, so every replica reads this one tensor from
        the GPU it was put on."""
        replicated = data_parallel_classes(ctx).get(facts.node.name.value)
        if replicated is None or not replicated.several_gpus:
            return
        for attr, assignments in _plain_attributes(facts, moved).items():
            if not all(method.name.value == "__init__" for _, method in assignments):
                continue
            if not all(_on_one_gpu(ctx, value) for value, _ in assignments):
                continue
            if not _computed_with(ctx, facts, attr) or _moved_by_the_class(ctx, facts, attr):
                continue
            value = assignments[0][0]
            owner = f" (a submodule of `{replicated.whole}`)" if replicated.whole is not None else ""
            several = file_facts(ctx).value(value).kind != DEVICE and _gpu_tensors_passed(ctx, value) is not False
            held = "tensors" if several else "a tensor"
            where = (
                "and handed to `__init__`" if type(value) is cst.Name and passed_for(ctx, value) else "in `__init__`"
            )
            problem = (
                f"holds {held} put on one GPU {where}, and `{replicated.spelled}`{replicated.where} wraps "
                f"this module{owner}: "
                "its replicas get copies of the parameters and buffers only, so the replica on every other GPU "
                f"reads {'them' if several else 'this tensor'} from the first one (Expected all tensors to be on "
                "the same device)"
            )
            advice = (
                f'register each one with `self.register_buffer(f"{attr}_{{i}}", ...)` and read them back from the module'
                if several
                else f'use `self.register_buffer("{attr}", ...)`'
            )
            yield self.violation(
                _assignment_target(ctx, value) or value, fix=None, attr=attr, problem=problem, advice=advice
            )

    def _plain_containers(self, ctx: FileContext, facts: ClassFacts, moved: set[str]) -> Iterator[Violation]:
        """Tensors kept in a plain list/tuple/dict attribute: `.to()` moves none of them, and a
        buffer it does move is replaced, so the container keeps the stale CPU tensor."""
        kinds: dict[str, str] = {}
        sites: dict[str, list[cst.CSTNode]] = {}
        for attr, value, method in facts.assignments:
            kind = container_kind(ctx, value)
            elements = literal_elements(value)
            if kind is None:
                box = (
                    local_containers(ctx, method).get(value.value)
                    if type(value) is cst.Name
                    else returned_container(ctx, value, facts)
                )
                if box is None or box.handed_on:
                    continue
                kind = box.kind
                elements = [e for fill in box.fills for e in fill.elements]
            kinds.setdefault(attr, kind)
            if any(_stale_tensor(ctx, facts, e) for e in elements):
                sites.setdefault(attr, []).append(value)
        for attr, node, _ in facts.references:
            if attr in kinds:
                added = added_elements(ctx, node)
                if added is not None and any(_stale_tensor(ctx, facts, e) for e in added[1]):
                    sites.setdefault(attr, []).append(added[0])
        for attr, node, helper in handed_references(ctx, facts.node):
            # `_keep(self, prior)` running `model.priors.append(prior)`: filled through the handed
            # instance, with what every call hands the helper
            if attr in kinds:
                added = added_elements(ctx, node)
                if added is not None and any(_stale_in_callers(ctx, facts, helper, e) for e in added[1]):
                    sites.setdefault(attr, []).append(added[0])
        refilled = _refilled_at_run_time(ctx, facts)
        for attr, found in sites.items():
            if (
                attr in facts.registered
                or attr in facts.submodules
                or attr in moved
                or attr in refilled
                or _moved_by_the_class(ctx, facts, attr)
                or _rebuilt_before_each_read(ctx, facts, attr)
            ):
                continue
            if not _computed_with(ctx, facts, attr):
                continue
            container = kinds[attr]
            yield self.violation(
                found[0],
                attr=attr,
                problem=(
                    f"keeps tensors in a plain {container}: `model.to(device)` moves none of them, and a "
                    f"buffer it moves is replaced, so the {container} still holds the CPU tensor"
                ),
                advice="register each one with `register_buffer` and read it back by name (`getattr(self, name)`)",
            )


def _on_one_gpu(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`value` (assigned in `__init__`) is a non-scalar tensor on the GPU, or a list, tuple or
    dict of them (`[idx.cuda() for idx in spirals]`); a parameter of `__init__` that it never
    rebinds is what every construction of the class in the file passes for it (the caller moved
    the operators to the GPU and handed them in)."""
    if type(value) is cst.Name:
        passed = passed_for(ctx, value)
        if passed:
            return all(_gpu_tensors(file_facts(ctx).value(arg)) for arg in passed)
    return _gpu_tensors(file_facts(ctx).value(value))


def _gpu_tensors_passed(ctx: FileContext, value: cst.BaseExpression) -> bool | None:
    """Whether what is handed in for the `__init__` parameter `value` are containers of tensors
    (True) or tensors (False); None when `value` is not such a parameter."""
    passed = passed_for(ctx, value) if type(value) is cst.Name else None
    if not passed:
        return None
    return any(file_facts(ctx).value(arg).kind != DEVICE for arg in passed)


def _gpu_tensors(fact: Fact) -> bool:
    if fact.kind == DEVICE:
        return fact.where == ACCELERATOR and not fact.scalar
    return bool(fact.elements) and all(_gpu_tensors(e) for e in fact.elements or ())


def _plain_attributes(
    facts: ClassFacts, moved: set[str]
) -> dict[str, list[tuple[cst.BaseExpression, cst.FunctionDef]]]:
    """Each attribute the class assigns that is no buffer, parameter or submodule and that no
    mover moves -> (value, method) of every assignment to it, in the class's order."""
    by_attr: dict[str, list[tuple[cst.BaseExpression, cst.FunctionDef]]] = {}
    for attr, value, method in facts.assignments:
        if attr not in facts.registered and attr not in facts.submodules and attr not in moved:
            by_attr.setdefault(attr, []).append((value, method))
    return by_attr


def _stale_in_callers(
    ctx: FileContext, facts: ClassFacts, helper: cst.FunctionDef, element: cst.BaseExpression
) -> bool:
    """`_stale_tensor` for an element a helper handed the instance adds: a parameter of the
    helper is what every call passes for it (`helpers.arguments_for`)."""
    if type(element) is cst.Name and any(
        p.name.value == element.value for p in (*helper.params.posonly_params, *helper.params.params)
    ):
        passed = arguments_for(ctx, helper, element.value)
        return passed is not None and all(_stale_tensor(ctx, facts, a) for a in passed)
    return _stale_tensor(ctx, facts, element)


def _built_as(
    ctx: FileContext, assignments: list[tuple[cst.BaseExpression, cst.FunctionDef]]
) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(assigned value, what built it): `self.a = self.b` is built by what the class's methods
    assign to `self.b` (`self._store(x)` running `self.b = torch.tensor(x)`)."""
    for value, _ in assignments:
        sources = [source for source, _ in aliased_values(ctx, value)]
        if any(is_parameter_call(ctx, source) for source in sources):
            continue  # `self.w2 = self.w1` of an `nn.Parameter`: `nn.Module` registers it under both names
        if not sources and type(value) is cst.Call:
            # `self.x = self._make(scales)` running `return torch.tensor(scales)`: the call as the
            # engine places it, and the returned call in the caller's words
            returned = returned_call(ctx, value)
            sources = [value, returned] if returned is not None else []
        for source in sources or [value]:
            yield value, source


def _handed_cpu_tensor(ctx: FileContext, value: cst.BaseExpression, method: cst.FunctionDef) -> bool:
    """`self.x = x` in `__init__`, where `x` is a parameter that every construction of the class
    in the file passes a CPU tensor with dimensions (`PriorBox(cfg).make().to(self.device)` in a
    LightningModule's `__init__`, `torch.load(path, map_location="cpu")`)."""
    if type(value) is not cst.Name or method.name.value != "__init__":
        return False
    passed = passed_for(ctx, value)
    if not passed:
        return False
    found = [file_facts(ctx).value(argument) for argument in passed]
    return all(f.kind == CPU and not f.scalar and not f.batch and not f.guessed for f in found)


def _placed_on_constructor_cpu(ctx: FileContext, value: cst.BaseExpression, method: cst.FunctionDef) -> bool:
    """`self.env = self.gamma ** torch.arange(n, device=self.device)` in `__init__`, where the
    device is a constructor parameter (or `self.device` set from one) that every construction of
    the class in the file leaves at a CPU default (`device=None`) or gives the CPU, also through a
    subclass's `super().__init__(..., device=device)`: a CPU tensor, whatever the name says."""
    if method.name.value != "__init__" or any(type(n) is cst.Call and move_call(n) for n in ctx.index.walk(value)):
        return False
    for node in ctx.index.walk(value):
        if type(node) is not cst.Call:
            continue
        qualified = ctx.qualified_name(node.func) or ""
        if not qualified.startswith("torch.") or qualified[len("torch.") :] not in (*FACTORIES, "tensor", "as_tensor"):
            continue
        if file_facts(ctx).value(node).scalar:
            continue  # `torch.tensor(0.0, device=device)`: 0-dim, it meets tensors on any device
        device = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "device"), None)
        if device is not None and cpu_at_every_construction(ctx, device, method):
            return True
    return False


def _placed_like_an_example(
    ctx: FileContext, facts: ClassFacts, value: cst.BaseExpression, method: cst.FunctionDef
) -> bool:
    """`torch.zeros(n, device=x.device)` in a method that runs only while the model is built,
    where `x` is a parameter of that method (an example input the constructor is given), in a
    class whose instances the file moves after building them (`model = Block(example)` then
    `model.to("cuda")`), or a LightningModule, which its trainer moves: the tensor stays
    wherever the example was, and the move leaves it there."""
    if type(value) is not cst.Call or method.name.value not in construction_methods(ctx, facts):
        return False
    qualified = ctx.qualified_name(value.func) or ""
    if not qualified.startswith("torch.") or qualified[len("torch.") :] not in FACTORIES:
        return False
    device = next((a.value for a in value.args if a.keyword is not None and a.keyword.value == "device"), None)
    if type(device) is not cst.Attribute or device.attr.value != "device" or type(device.value) is not cst.Name:
        return False
    params = [p.name.value for p in (*method.params.posonly_params, *method.params.params)][1:]
    if device.value.value not in params or file_facts(ctx).value(device.value).where == ACCELERATOR:
        return False
    return moved_after_built(ctx, facts.node, module_level=False)


def _tensor_argument(
    ctx: FileContext, facts: ClassFacts, attr: str, value: cst.BaseExpression, method: cst.FunctionDef
) -> bool:
    """`self.std = std` where `std` is a parameter annotated `Tensor`, or one that the class then
    uses the way only a tensor is used (`self.std.view(...)`, `self.std[..., None]`)."""
    if type(value) is not cst.Name:
        return False
    params = {p.name.value: p for p in (*method.params.params, *method.params.kwonly_params)}
    param = params.get(value.value)
    if param is None:
        return False
    if param.default is not None and type(param.default) is not cst.Name:
        return False  # `eps=1e-5`, `scale=None`-style options (a literal default) are not tensors
    if annotation_is_tensor(param.annotation, ctx):
        return True
    for name, node, user in facts.references:
        if name != attr or user is method:
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Attribute and parent.value is node and parent.attr.value in TENSOR_ONLY_METHODS:
            return True
        if (
            type(parent) is cst.Subscript
            and parent.value is node
            and type(ctx.index.parent(parent)) is not cst.AssignTarget
        ):
            return True
    return False


def _refilled_at_run_time(ctx: FileContext, facts: ClassFacts) -> set[str]:
    """Containers whose entries a method other than `__init__` replaces (`self.grid[i] = ...`):
    caches rebuilt where they are used, from the input's device."""
    found: set[str] = set()
    for attr, node, method in facts.references:
        if method.name.value == "__init__":
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Subscript and parent.value is node:
            holder = ctx.index.parent(parent)
            while isinstance(holder, (cst.Element, cst.Tuple, cst.List)):
                holder = ctx.index.parent(holder)
            if type(holder) is cst.AssignTarget:
                found.add(attr)
    return found


def _rebuilt_before_each_read(ctx: FileContext, facts: ClassFacts, attr: str) -> bool:
    """A container that every method reading it builds first (`self.extra = {"idx": self.idx}`
    then `f(x, **self.extra)`, outside `__init__`): each call gathers the buffers as they are
    then, after any move, so it never holds a stale copy."""
    built: set[int] = set()
    for name, node, method in facts.references:
        if name != attr:
            continue
        if type(ctx.index.parent(node)) is cst.AssignTarget:
            if method.name.value != "__init__":
                built.add(id(method))
        elif id(method) not in built:
            return False
    return bool(built)


def _stale_tensor(ctx: FileContext, facts: ClassFacts, element: cst.BaseExpression) -> bool:
    """An element that `model.to()` leaves behind: a CPU tensor made here, or a registered buffer
    (`getattr(self, f"anchor_{i}")`, `self.mean`, or the tensor just handed to `register_buffer`)."""
    if type(element) is cst.Call and type(element.func) is cst.Name and element.func.value == "getattr":
        first = element.args[0].value if element.args else None
        return facts.dynamic_buffers and type(first) is cst.Name and first.value == "self"
    if isinstance(element, (cst.Tuple, cst.List)):  # `self.stats[name] = (mean, std)`
        return any(_stale_tensor(ctx, facts, e.value) for e in element.elements if type(e) is not cst.StarredElement)
    if type(element) is cst.Dict:  # `self.stats[name] = {"mean": mean, "std": std}`
        return any(_stale_tensor(ctx, facts, e.value) for e in element.elements if type(e) is cst.DictElement)
    attr = self_attribute(element)
    if attr is not None:
        return attr in facts.buffers
    if type(element) is cst.Name and _registered_as_buffer(ctx, element):
        return True
    if is_parameter_call(ctx, element):
        return False  # parameters kept in a plain container: DL103's finding
    if _scalar_data(ctx, element):
        return False  # `torch.tensor(reward)` of a number: 0-dim, it meets tensors on any device
    fact = file_facts(ctx).value(element)
    if type(element) is cst.Call:
        qualified = ctx.qualified_name(element.func) or ""
        if qualified.startswith("torch.") and is_empty_placeholder(element, qualified[6:]):
            return False  # `torch.empty(0)`: a slot filled at run time, not a tensor to move
    if fact.kind == UNKNOWN and type(element) is cst.Call:
        # comprehension bodies are not interpreted: read a bare torch factory call here
        keywords = {a.keyword.value for a in element.args if a.keyword is not None}
        if qualified.startswith("torch.") and qualified.count(".") == 1 and qualified[6:] in FACTORIES:
            return "device" not in keywords and bool(element.args)
    return _made_on_cpu(ctx, element, fact)


def _registered_as_buffer(ctx: FileContext, name: cst.Name) -> bool:
    """`self.register_buffer(key, name)` in the function that uses `name`."""
    function = ctx.index.enclosing_function(name)
    if function is None:
        return False
    for node in ctx.index.walk(function.body):
        if (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value == "register_buffer"
            and len(node.args) >= 2
            and type(node.args[1].value) is cst.Name
            and node.args[1].value.value == name.value
        ):
            return True
    return False


def _moved_to_constructor_cpu(ctx: FileContext, move: cst.BaseExpression, method: cst.FunctionDef) -> bool:
    """`self.fb = self.fb.to(self.device)` in `__init__`, where the device is a constructor
    parameter (or `self.device` set from one) that every construction of the class in the file
    leaves at `None` or gives the CPU: the move keeps the tensor on the CPU."""
    if type(move) is not cst.Call or type(move.func) is not cst.Attribute or move.func.attr.value != "to":
        return False
    device = next((a.value for a in move.args if a.keyword is None or a.keyword.value == "device"), None)
    return device is not None and cpu_at_every_construction(ctx, device, method)


def _is_move(value: cst.BaseExpression) -> bool:
    return (
        type(value) is cst.Call
        and type(value.func) is cst.Attribute
        and value.func.attr.value
        in (
            "to",
            "cuda",
            "type_as",
            "xpu",
            "mps",
        )
    )


def _made_on_cpu(ctx: FileContext, value: cst.BaseExpression, fact: Fact) -> bool:
    if fact.kind == CPU:
        return fact.from_factory and not fact.scalar
    if type(value) is cst.IfExp:
        # `torch.tensor(alpha) if alpha is not None else None`: the path that makes a tensor
        made = [b for b in (value.body, value.orelse) if not (type(b) is cst.Name and b.value == "None")]
        return any(_made_on_cpu(ctx, b, file_facts(ctx).value(b)) for b in made)
    # `torch.tensor(anchors)`: in a constructor the data is configuration, not a device tensor.
    if type(value) is cst.Call and ctx.qualified_name(value.func) in DATA_CONSTRUCTORS and value.args:
        keywords = {a.keyword.value for a in value.args if a.keyword is not None}
        first = value.args[0].value
        literal_scalar = type(first) in (cst.Integer, cst.Float, cst.UnaryOperation)
        return (
            "device" not in keywords
            and not any(a.star for a in value.args)
            and not literal_scalar
            and type(first) in (cst.Name, cst.Attribute, cst.List, cst.Tuple)
        )
    return False


# Values that are certainly not tensors: assigning one to a buffer raises TypeError.
_NOT_TENSORS = (
    cst.BaseNumber,
    cst.BaseString,
    cst.List,
    cst.Tuple,
    cst.Dict,
    cst.Set,
    cst.ListComp,
    cst.DictComp,
    cst.SetComp,
    cst.Lambda,
)


def _as_buffer(
    ctx: FileContext, attr: str, value: cst.BaseExpression, values: list[cst.BaseExpression]
) -> FixProposal | None:
    """`self.<attr> = value` -> `self.register_buffer("<attr>", value, persistent=False)`."""
    assign = ctx.index.parent(value)
    if type(assign) is not cst.Assign or len(assign.targets) != 1 or own_line_statement(ctx, assign) is None:
        return None
    init = ctx.index.enclosing_function(assign)
    if init is None or init.name.value != "__init__" or not _after_super_init(ctx, init, assign):
        return None
    if any(v is not value and isinstance(v, _NOT_TENSORS) for v in values):
        return None
    text = f'self.register_buffer("{attr}", {code_in_place(ctx, value, value)}, persistent=False)'
    return FixProposal(
        f'Register it: `self.register_buffer("{attr}", ..., persistent=False)`',
        safe=False,
        replacements=((assign, text),),
    )


def _after_super_init(ctx: FileContext, init: cst.FunctionDef, node: cst.CSTNode) -> bool:
    """Whether a `super().__init__(...)` (or `Base.__init__(self, ...)`) statement of `init`'s
    own body comes before the statement holding `node`."""
    statement = own_line_statement(ctx, node)
    if type(init.body) is not cst.IndentedBlock:
        return False
    top = statement
    while top is not None and ctx.index.parent(top) is not init.body:
        top = ctx.index.parent(top)
    for item in init.body.body:
        if item is top:
            return False
        if any(
            type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "__init__"
            for n in ctx.index.walk(item)
        ):
            return True
    return False


def _plain_class(cls: cst.ClassDef) -> bool:
    """A class with no base but `object`."""
    return all(dotted_name(b.value) == "object" for b in cls.bases if b.keyword is None) and not any(
        b.keyword is not None for b in cls.bases
    )


def _read_after_init(ctx: FileContext, cls: cst.ClassDef, attr: str) -> bool:
    """Whether a method of `cls` other than `__init__` reads `self.<attr>` and nothing in the
    class moves it (`self.<attr>.to(x.device)`)."""
    read = False
    for name, method in methods(cls).items():
        for node in ctx.index.walk(method):
            if type(node) is not cst.Attribute or self_attribute(node) != attr:
                continue
            parent = ctx.index.parent(node)
            if (
                type(parent) is cst.Attribute
                and parent.value is node
                and parent.attr.value in ("to", "cuda", "type_as")
            ):
                return False
            read = read or name != "__init__"
    return read


def _assignment_target(ctx: FileContext, value: cst.BaseExpression) -> cst.CSTNode | None:
    parent = ctx.index.parent(value)
    if type(parent) is cst.Assign:
        return parent.targets[0].target
    if type(parent) is cst.AnnAssign:
        return parent.target
    return None


def _moved_by_the_class(ctx: FileContext, facts: ClassFacts, attr: str) -> bool:
    """Whether the class itself moves the attribute to a device somewhere (`self.freqs.to(device)`,
    `[f.to(device) for f in self.freqs]`): its author keeps it off the buffers on purpose
    (complex tables that a dtype cast would break) and manages its device by hand."""
    for name, node, user in facts.references:
        if name != attr:
            continue
        parent = ctx.index.parent(node)
        call = ctx.index.parent(parent) if type(parent) is cst.Attribute and parent.value is node else None
        if call is not None and type(call) is cst.Call and _moved_to_constructor_cpu(ctx, call, user):
            continue
        if call is not None and (move_call(call) not in (None, "cpu") or _takes_device_of_argument(call)):
            return True
        clause = ctx.index.parent(node)
        if type(clause) is cst.CompFor and clause.iter is node:
            comprehension = ctx.index.parent(clause)
            element = getattr(comprehension, "elt", None)
            if element is not None and move_call(element) not in (None, "cpu"):
                return True
    return False


def _takes_device_of_argument(call: cst.CSTNode) -> bool:
    """`self.mean.type_as(x)`: the result lives on `x`'s device (and has its dtype)."""
    return (
        type(call) is cst.Call
        and type(call.func) is cst.Attribute
        and call.func.attr.value == "type_as"
        and len(call.args) == 1
    )


def _parameter_snapshot(
    ctx: FileContext,
    facts: ClassFacts,
    attr: str,
    candidate: cst.BaseExpression | None,
    assignments: list[tuple[cst.BaseExpression, cst.FunctionDef]],
) -> list[str]:
    """The parameters that `self.<attr>`, made on the CPU once in `__init__` (assigned nowhere
    else), is computed from on the autograd graph (`analysis/parameter_products.py`)."""
    if candidate is None or len(assignments) != 1 or assignments[0][1].name.value != "__init__":
        return []
    return parameters_read(ctx, facts, candidate)


def _used_after_init(ctx: FileContext, facts: ClassFacts, attr: str) -> bool:
    """Whether a method other than `__init__` reads the value of `self.<attr>` (not only its
    shape or dtype)."""
    return any(
        name == attr and method.name.value != "__init__" and not _metadata_read(ctx, node)
        for name, node, method in facts.references
    )


def _metadata_read(ctx: FileContext, node: cst.Attribute) -> bool:
    parent = ctx.index.parent(node)
    return type(parent) is cst.Attribute and parent.value is node and parent.attr.value in _METADATA


_METADATA = frozenset({"shape", "size", "dtype", "ndim", "dim", "numel", "device", "is_cuda", "nelement"})


def _filled_with_host_copies(ctx: FileContext, facts: ClassFacts, attr: str) -> bool:
    """`self.history[i : i + k] = codes.cpu()`: the class writes into the tensor only values it
    has just copied to the host, so the tensor is kept on the CPU on purpose (a debug record, a
    histogram read back for logging), and `model.to(device)` leaving it there is the intent."""
    writes = []
    for name, node, _ in facts.references:
        if name != attr:
            continue
        holder = ctx.index.parent(node)
        if type(holder) is cst.Subscript and holder.value is node:
            target = ctx.index.parent(holder)
            if type(target) is cst.AssignTarget:
                assign = ctx.index.parent(target)
                if type(assign) is cst.Assign:
                    writes.append(assign.value)
            elif type(target) is cst.AugAssign and target.target is holder:
                writes.append(target.value)
        elif type(holder) is cst.Attribute and holder.value is node and holder.attr.value.endswith("_"):
            call = ctx.index.parent(holder)  # `self.history.copy_(v)`, `.index_add_(0, i, v)`
            if type(call) is cst.Call and call.func is holder and call.args:
                writes.append(call.args[-1].value)
    return bool(writes) and all(_host_copy(ctx, w) for w in writes)


def _host_copy(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`x.cpu()`, `x.detach().cpu()`, `x.to("cpu")`: a copy made on the host."""
    if not (type(value) is cst.Call and type(value.func) is cst.Attribute):
        return False
    method = value.func.attr.value
    if method == "cpu":
        return True
    return (
        method == "to"
        and len(value.args) >= 1
        and type(value.args[0].value) is cst.SimpleString
        and literal_value(value.args[0].value) == "cpu"
    )


def _computed_with(ctx: FileContext, facts: ClassFacts, attr: str) -> bool:
    """Whether a method other than `__init__` uses `self.<attr>` in a computation (a method of a
    subclass of the file that does not set the attribute itself counts: it runs on the instance
    the base's `__init__` filled)."""
    return any(
        name == attr
        and method.name.value != "__init__"
        and not _safe_read(ctx, node)
        and not _picks_from_python_data(ctx, facts, node)
        and not _picks_a_scalar(ctx, facts, attr, node)
        and not _iterated_as_scalars(ctx, facts, attr, node)
        and not _moved_by_the_callee(ctx, facts, node)
        and not _handed_to_project_code(ctx, node)
        for name, node, method in (*facts.references, *_subclass_references(ctx, facts, attr))
    )


def _subclass_references(
    ctx: FileContext, facts: ClassFacts, attr: str
) -> list[tuple[str, cst.Attribute, cst.FunctionDef]]:
    """`self.<attr>` in the methods of the file's module classes that derive from `facts`'s class
    (directly or through others) and neither set the attribute nor move tensors themselves."""
    every = class_facts(ctx)
    out: list[tuple[str, cst.Attribute, cst.FunctionDef]] = []
    seen = {facts.node.name.value}
    todo = [facts.node.name.value]
    while todo:
        base = todo.pop()
        for name, sub in every.items():
            if name in seen or not any(b.keyword is None and dotted_name(b.value) == base for b in sub.node.bases):
                continue
            seen.add(name)
            todo.append(name)
            if any(a == attr for a, _, _ in sub.assignments) or CUSTOM_MOVERS & sub.methods.keys():
                continue
            out += [r for r in sub.references if r[0] == attr]
    return out


def _moved_by_bases(ctx: FileContext, facts: ClassFacts) -> set[str] | None:
    """The attributes that the `_apply`/`to`/`cuda` of base classes move, in the same file or in
    another module of the project (None when one of them reaches every attribute), and those
    that another class's mover assigns on its instances (`m.stride = fn(m.stride)` under
    `isinstance(m, Detect)` in the model's `_apply`)."""
    moved: set[str] = set(ctx.project.moved_elsewhere.get(facts.node.name.value, ()))
    every = class_facts(ctx)
    seen: set[str] = set()
    todo = [b.value for b in facts.node.bases if b.keyword is None]
    while todo:
        base = todo.pop()
        imported = imported_module_class(ctx, base)
        if imported is not None:
            if imported.moved_attributes is None:
                return None
            moved.update(imported.moved_attributes)
            continue
        name = base.value if type(base) is cst.Name else None
        if name is None or name in seen or name not in every:
            continue
        seen.add(name)
        base_facts = every[name]
        movers = sorted(CUSTOM_MOVERS & base_facts.methods.keys())
        touched = moved_attributes(ctx, base_facts.node, base_facts.methods, movers)
        if touched is None:
            return None
        moved |= touched
        todo += [b.value for b in base_facts.node.bases if b.keyword is None]
    return moved


def _scalar_data(ctx: FileContext, value: cst.BaseExpression, at: cst.BaseExpression | None = None) -> bool:
    """`torch.tensor(factor)` under `if isinstance(factor, float):`: a 0-dim tensor, which
    PyTorch lets meet tensors on any device. `at`: where the file holds `value` (the call of a
    helper whose return `value` is, in the caller's words)."""
    if not (type(value) is cst.Call and ctx.qualified_name(value.func) in DATA_CONSTRUCTORS and value.args):
        return False
    first = value.args[0].value
    if type(first) is not cst.Name:
        return False
    place = value if at is None or ctx.index.position(value) >= 0 else at
    if _scalar_parameter(ctx, place, first.value) or _module_number(ctx, place, first.value):
        return True
    node: cst.CSTNode | None = place
    while node is not None and type(node) is not cst.FunctionDef:
        parent = ctx.index.parent(node)
        if type(parent) is cst.If and parent.body is node:
            guarded = isinstance_test(parent.test)
            if guarded is not None and guarded[0] == first.value:
                kinds = guarded[1]
                names = [e.value for e in kinds.elements] if type(kinds) is cst.Tuple else [kinds]
                return all(type(n) is cst.Name and n.value in ("int", "float", "bool") for n in names)
        node = parent
    return False


_SCALAR_TYPES = frozenset({"int", "float", "bool"})
_SCALAR_CALLS = frozenset({"float", "int", "bool", "round", "min", "max", "abs"})


def _scalar_parameter(ctx: FileContext, at: cst.CSTNode, name: str) -> bool:
    """`torch.tensor(drop_rate)` where `drop_rate` is a parameter of the enclosing function
    annotated `float` (`int`, `bool`) or defaulting to a number, and every rebinding of it there
    is arithmetic on numbers (`drop_rate = frac * drop_rate`): a 0-dim tensor."""
    function = ctx.index.enclosing_function(at)
    if function is None:
        return False
    params = function.params
    param = next(
        (p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == name), None
    )
    if param is None:
        return False
    annotation = param.annotation.annotation if param.annotation is not None else None
    if annotation is not None:
        if not (type(annotation) is cst.Name and annotation.value in _SCALAR_TYPES):
            return False
    elif not _numeric(param.default):
        return False
    for node in ctx.index.walk(function.body):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if any(type(t) is cst.Name and t.value == name for t in targets) and not _numeric(node.value):
                return False
        elif isinstance(node, (cst.For, cst.CompFor)) and any(
            type(n) is cst.Name and n.value == name for n in ctx.index.walk(node.target)
        ):
            return False
    return True


def _module_number(ctx: FileContext, at: cst.CSTNode, name: str) -> bool:
    """`torch.tensor(CLIP)` where `CLIP = 1.0` is a number bound once at module level and the
    enclosing function neither takes nor rebinds the name: a 0-dim tensor."""
    function = ctx.index.enclosing_function(at)
    if function is not None:
        params = function.params
        every = (*params.posonly_params, *params.params, *params.kwonly_params, params.star_arg, params.star_kwarg)
        if any(type(p) is cst.Param and p.name.value == name for p in every):
            return False
        for node in ctx.index.walk(function.body):
            if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.AsName)):
                bound = node.target if not isinstance(node, cst.AsName) else node.name
                if _binds_name(bound, name):
                    return False
    return _numeric(module_constant(ctx, name))


def _binds_name(target: cst.BaseExpression, name: str) -> bool:
    """`name`, or `(a, name)`: not `self.name`, which binds an attribute."""
    if type(target) is cst.Name:
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds_name(e.value, name) for e in target.elements)
    if type(target) is cst.StarredElement:
        return _binds_name(target.value, name)
    return False


def _numeric(node: cst.BaseExpression | None, leaf_names: bool = False) -> bool:
    """A number, or arithmetic and rounding on numbers and names (`frac * rate`, `round(r, 2)`);
    a bare name only inside such an expression."""
    if type(node) in (cst.Integer, cst.Float):
        return True
    if type(node) is cst.Name:
        return leaf_names and node.value not in ("None", "True", "False")
    if type(node) is cst.UnaryOperation:
        return _numeric(node.expression, leaf_names)
    if type(node) is cst.BinaryOperation:
        return _numeric(node.left, True) and _numeric(node.right, True)
    if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in _SCALAR_CALLS:
        return bool(node.args) and all(_numeric(a.value, True) for a in node.args if a.keyword is None)
    return False


def _lazy_slot(ctx: FileContext, facts: ClassFacts, attr: str, value: cst.BaseExpression) -> bool:
    """A cache that `__init__` leaves empty (`torch.empty(0, ...)`) or that a method rebuilds
    when its device is not the input's (`if self.cache.device != x.device:`): filled at run time
    where it is used."""
    refilled = any(a == attr and m.name.value != "__init__" for a, _, m in facts.assignments)
    if not refilled:
        return False
    if type(value) is cst.Call:
        qualified = ctx.qualified_name(value.func) or ""
        short = qualified[6:] if qualified.startswith("torch.") else ""
        if short in ("empty", "zeros", "ones") and value.args and _zero(facts, value.args[0].value):
            return True
    for name, node, method in facts.references:
        if name != attr or method.name.value == "__init__":
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Attribute and parent.value is node and parent.attr.value == "device":
            holder = ctx.index.parent(parent)
            if type(holder) in (cst.Comparison, cst.ComparisonTarget):
                return True
    return False


def _lazy_device_cache(
    ctx: FileContext, facts: ClassFacts, attr: str, assignments: list[tuple[cst.BaseExpression, cst.FunctionDef]]
) -> cst.BaseExpression | None:
    """The `None` that `__init__` assigns to a cache that other methods fill once, only under
    `if self.<attr> is None:`, with a tensor on the accelerator or on their inputs' device, and
    never compare with the input's device: the first device it ran on is kept for good."""
    empty = [v for v, m in assignments if m.name.value == "__init__" and type(v) is cst.Name and v.value == "None"]
    filled = [(v, m) for v, m in assignments if m.name.value != "__init__"]
    if len(empty) != 1 or len(empty) + len(filled) != len(assignments) or not filled:
        return None
    for value, method in filled:
        fact = file_facts(ctx).value(value)
        # a tensor, or a list of them (`[make(s, device) for s in self.sizes]`, torchvision's
        # cell anchors): each entry stays where the first run made it
        for part in fact.elements if fact.kind == UNKNOWN and fact.elements else (fact,):
            if part.kind != DEVICE or part.where not in (ACCELERATOR, FOLLOWS) or part.scalar:
                return None
            if part.where == FOLLOWS and part.device_expr is None:
                return None  # made by a call the analysis only guesses runs where the module is (`self.Tensor(1)`)
        if not _filled_only_when_empty(ctx, value, method, attr):
            return None
    if _lazy_slot(ctx, facts, attr, empty[0]) or not _computed_with(ctx, facts, attr):
        return None  # rebuilt when the device changes, or never used
    return empty[0]


def _cached_list(ctx: FileContext, assignments: list[tuple[cst.BaseExpression, cst.FunctionDef]]) -> bool:
    """A cache filled with a list of tensors rather than one."""
    return any(
        (fact := file_facts(ctx).value(value)).kind == UNKNOWN and bool(fact.elements) for value, _ in assignments
    )


def _filled_only_when_empty(ctx: FileContext, value: cst.BaseExpression, method: cst.FunctionDef, attr: str) -> bool:
    """`value` is assigned under `if self.<attr> is None:` (alone or as one `or` operand), or
    after an `if self.<attr> is not None: return` at the top of the method."""
    for ancestor in ctx.index.ancestors(value):
        if ancestor is method:
            return _returns_when_filled(ctx, value, method, attr)
        if type(ancestor) is cst.If and _tests_empty(ancestor.test, attr):
            return True
    return False


def _returns_when_filled(ctx: FileContext, value: cst.BaseExpression, method: cst.FunctionDef, attr: str) -> bool:
    """`if self.<attr> is not None: return` among the method's statements before the one that
    assigns `value`."""
    body = method.body.body if type(method.body) is cst.IndentedBlock else ()
    statement = next((s for s in body if any(a is s for a in ctx.index.ancestors(value))), None)
    for earlier in body:
        if earlier is statement:
            return False
        if (
            type(earlier) is cst.If
            and earlier.orelse is None
            and _tests_filled(earlier.test, attr)
            and type(earlier.body) is cst.IndentedBlock
            and len(earlier.body.body) == 1
            and type(earlier.body.body[0]) is cst.SimpleStatementLine
            and all(type(s) is cst.Return for s in earlier.body.body[0].body)
        ):
            return True
    return False


def _tests_filled(test: cst.BaseExpression, attr: str) -> bool:
    """`self.<attr> is not None`."""
    return _compared_with_none(test, attr, cst.IsNot)


def _tests_empty(test: cst.BaseExpression, attr: str) -> bool:
    """`self.<attr> is None`, alone or as one side of an `or`."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.Or:
        return _tests_empty(test.left, attr) or _tests_empty(test.right, attr)
    return _compared_with_none(test, attr, cst.Is)


def _compared_with_none(test: cst.BaseExpression, attr: str, operator: type[cst.BaseCompOp]) -> bool:
    return (
        type(test) is cst.Comparison
        and self_attribute(test.left) == attr
        and len(test.comparisons) == 1
        and type(test.comparisons[0].operator) is operator
        and type(test.comparisons[0].comparator) is cst.Name
        and test.comparisons[0].comparator.value == "None"
    )


def _zero(facts: ClassFacts, size: cst.BaseExpression) -> bool:
    """`0`, or `self.n` that `__init__` sets to 0 (`self.seq_len_cached = 0`)."""
    if type(size) is cst.Integer:
        return size.value == "0"
    attr = self_attribute(size) if type(size) is cst.Attribute else None
    if attr is None:
        return False
    values = [v for a, v, m in facts.assignments if a == attr and m.name.value == "__init__"]
    return len(values) == 1 and type(values[0]) is cst.Integer and values[0].value == "0"


def _picks_from_python_data(ctx: FileContext, facts: ClassFacts, node: cst.CSTNode) -> bool:
    """`self.items[self.index]` where `self.items` is a Python list or dict: the tensor only
    picks an element on the host."""
    parent = ctx.index.parent(node)
    if type(parent) is not cst.Index:
        return False
    element = ctx.index.parent(parent)
    subscript = ctx.index.parent(element) if type(element) is cst.SubscriptElement else None
    if type(subscript) is not cst.Subscript:
        return False
    holder = self_attribute(subscript.value) if type(subscript.value) is cst.Attribute else None
    values = [v for a, v, _ in facts.assignments if a == holder]
    return bool(values) and all(container_kind(ctx, v) is not None for v in values)


def _picks_a_scalar(ctx: FileContext, facts: ClassFacts, attr: str, node: cst.CSTNode) -> bool:
    """`self.weights[idx]` with Python integers (`for idx, loss in enumerate(...)`) that index
    away every dimension of the CPU factory's tensor: a 0-dim value, which PyTorch lets take part
    in operations on any device (`total.add(self.weights[idx] * loss)`). Not as an element of a
    list or tuple (`torch.stack([...])` does need one device)."""
    subscript = ctx.index.parent(node)
    if type(subscript) is not cst.Subscript or subscript.value is not node:
        return False
    if not all(type(e.slice) is cst.Index and is_python_int(ctx, e.slice.value) for e in subscript.slice):
        return False
    if type(ctx.index.parent(subscript)) is cst.Element:
        return False
    made = [
        fact
        for fact in (file_facts(ctx).value(value) for name, value, _ in facts.assignments if name == attr)
        if fact.kind == CPU
    ]
    return bool(made) and all(indexes_every_dimension(fact, subscript) for fact in made)


def _iterated_as_scalars(ctx: FileContext, facts: ClassFacts, attr: str, node: cst.CSTNode) -> bool:
    """`for freq in self.freq_bands: out.append(torch.sin(freq * x))` over a 1-D CPU factory's
    tensor: each element is a 0-dim tensor, which PyTorch lets take part in arithmetic on any
    device. Only when every read of the element is an operand of arithmetic (kept in a list, it
    could reach `torch.stack`, which needs one device)."""
    loop = ctx.index.parent(node)
    if not isinstance(loop, (cst.For, cst.CompFor)) or loop.iter is not node or type(loop.target) is not cst.Name:
        return False
    made = [
        fact
        for fact in (file_facts(ctx).value(value) for name, value, _ in facts.assignments if name == attr)
        if fact.kind == CPU
    ]
    if not made or any(stated_dimensions(fact) != 1 for fact in made):
        return False
    element = loop.target.value
    scope = loop.body if type(loop) is cst.For else ctx.index.parent(loop)
    if scope is None:
        return False
    reads = [
        n
        for n in ctx.index.walk(scope)
        if type(n) is cst.Name and n.value == element and n is not loop.target and not _is_attribute_name(ctx, n)
    ]
    return bool(reads) and all(type(ctx.index.parent(n)) is cst.BinaryOperation for n in reads)


def _is_attribute_name(ctx: FileContext, name: cst.Name) -> bool:
    parent = ctx.index.parent(name)
    return type(parent) is cst.Attribute and parent.attr is name


def _handed_to_project_code(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`util.add_boundaries(x, mask, self.bos)` with `util` imported from the file's own
    project (a relative import, or a package named in the file's path): a helper the file does
    not show, which may move the tensor itself (as same-file helpers often do)."""
    arg = ctx.index.parent(node)
    call = ctx.index.parent(arg) if type(arg) is cst.Arg else None
    if type(call) is not cst.Call or arg.star:  # type: ignore[union-attr]  # a call: `arg` is its Arg
        return False
    root = call.func
    while type(root) is cst.Attribute:
        root = root.value
    return type(root) is cst.Name and root.value in _project_imports(ctx)


def _project_imports(ctx: FileContext) -> frozenset[str]:
    """Names the file imports from its own project: relative imports, and imports whose
    top-level package is a folder of the file's path (`allennlp/...` importing `allennlp.nn`)."""

    def build(c: FileContext) -> frozenset[str]:
        folders = set(c.path.replace("\\", "/").split("/")[:-1])
        names: set[str] = set()
        for statement in c.index.of_type(cst.ImportFrom):
            module = dotted_name(statement.module) if statement.module is not None else None
            own = bool(statement.relative) or (module is not None and module.split(".")[0] in folders)
            if own and type(statement.names) is not cst.ImportStar:
                names.update((a.asname.name.value if a.asname else dotted_name(a.name) or "") for a in statement.names)  # type: ignore[union-attr]  # asname holds a Name
        for statement in c.index.of_type(cst.Import):
            for alias in statement.names:
                module = dotted_name(alias.name) or ""
                if module.split(".")[0] in folders:
                    names.add(alias.asname.name.value if alias.asname else module.split(".")[0])  # type: ignore[union-attr]  # as above
        return frozenset(names - {""})

    return ctx.shared("tensor_attribute_not_registered.project_imports", build)


def _rebound_to(ctx: FileContext, statement: cst.Assign, name: str) -> cst.BaseExpression | None:
    """The value `statement` binds the local `name` to: the assigned one (what a container read
    gives back), or its part of a container it unpacks (`w, _ = (w.to(x), None)`)."""
    for target in statement.targets:
        if type(target.target) is cst.Name and target.target.value == name:
            return through_containers(ctx, statement.value)
        if type(target.target) in (cst.Tuple, cst.List):
            for node in ctx.index.walk(target.target):
                if type(node) is cst.Name and node.value == name and type(ctx.index.parent(node)) is cst.Element:
                    return unpacked_part(ctx, node)
    return None


def _moved_by_the_callee(ctx: FileContext, facts: ClassFacts, node: cst.CSTNode) -> bool:
    """`helper(x, self.doas)` where the file's `helper` moves that parameter itself
    (`doas = doas.to(x.device)`, `w = w.to(x)`, `torch.as_tensor(w, device=x.device)`)."""
    arg = ctx.index.parent(node)
    call = ctx.index.parent(arg) if type(arg) is cst.Arg else None
    if type(call) is not cst.Call or arg.star:  # type: ignore[union-attr]  # a call: `arg` is its Arg
        return False
    func = call.func
    callee = None
    bound = False
    if type(func) is cst.Name:
        callee = next((f for f in ctx.module.body if type(f) is cst.FunctionDef and f.name.value == func.value), None)
    elif type(func) is cst.Attribute and type(func.value) is cst.Name:
        owner = func.value.value
        if owner == "self" or owner == facts.node.name.value:
            callee = facts.methods.get(func.attr.value)
            bound = owner == "self" and callee is not None and not is_staticmethod(callee)
    if callee is None:
        return False
    params = [p.name.value for p in (*callee.params.posonly_params, *callee.params.params)]
    if bound:
        params = params[1:]
    if arg.keyword is not None:  # type: ignore[union-attr]  # as above
        name = arg.keyword.value  # type: ignore[union-attr]  # as above
    else:
        position = [a for a in call.args if a.keyword is None].index(arg)  # type: ignore[arg-type]  # as above
        if position >= len(params):
            return False
        name = params[position]
    for statement in ctx.index.walk(callee.body):
        if type(statement) is not cst.Assign:
            continue
        value = _rebound_to(ctx, statement, name)
        if value is None:
            continue
        type_as = type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "type_as"
        if (type_as or move_call(value) not in (None, "cpu")) and any(
            type(n) is cst.Name and n.value == name for n in ctx.index.walk(value)
        ):
            return True
        # `w = to_device_of(w, x)`: a helper of the file that returns the parameter moved
        helped = moved_by_helper(ctx, value) if type(value) is cst.Call else None
        if helped is not None and any(type(r) is cst.Name and r.value == name for r in helped.receivers):
            return True
        if (
            type(value) is cst.Call
            and ctx.qualified_name(value.func) in DATA_CONSTRUCTORS
            and value.args
            and (
                type(value.args[0].value) is cst.Name
                and value.args[0].value.value == name
                and any(a.keyword is not None and a.keyword.value == "device" for a in value.args)
            )
        ):
            return True
    return False


def _safe_read(ctx: FileContext, node: cst.CSTNode) -> bool:
    parent = ctx.index.parent(node)
    while True:
        if type(parent) is cst.Subscript and parent.value is node:
            node, parent = parent, ctx.index.parent(parent)
            continue
        # `self.t.unsqueeze(0).expand(n, -1).to(device)`: reshaped on the host, then moved
        call = ctx.index.parent(parent) if type(parent) is cst.Attribute and parent.value is node else None
        if (
            type(call) is cst.Call
            and type(parent) is cst.Attribute
            and call.func is parent
            and parent.attr.value in PRESERVING_METHODS
            and parent.attr.value not in MEETING_METHODS
            and (_moved_afterwards(ctx, call) or _read_on_host(ctx, call))
        ):
            return True
        break
    if type(parent) is cst.Attribute and parent.value is node:
        return parent.attr.value in SAFE_ATTRIBUTES
    if type(parent) in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.FormattedStringExpression, cst.Del):
        return True
    if type(parent) is cst.Comparison:
        return all(type(c.operator) in (cst.Is, cst.IsNot) for c in parent.comparisons)
    if type(parent) is cst.Arg:
        call = ctx.index.parent(parent)
        if type(call) is not cst.Call:
            return False
        if (
            type(call.func) is cst.Name
            and call.func.value in ("zip", "enumerate")
            and type(ctx.index.parent(call)) is cst.For
        ):
            return _loop_reads_safely(ctx, ctx.index.parent(call))  # type: ignore[arg-type]  # a For, checked above
        if type(call.func) is cst.Attribute and call.func.attr.value == "copy_":
            return True  # `out[:, :n].copy_(self.table)`: `copy_` copies across devices
        if any(a is not parent and _host_copy(ctx, a.value) for a in call.args):
            return True  # `iou(boxes.cpu(), self.anchors)`: the call brings the other tensors to it, on the host
        # `torch.as_tensor(self.w, device=x.device)`: copied to a device at the use
        placed = any(a.keyword is not None and a.keyword.value == "device" for a in call.args)
        return placed or (type(call.func) is cst.Name and call.func.value in SAFE_FUNCTIONS)
    if type(parent) is cst.For and parent.iter is node:
        return _loop_reads_safely(ctx, parent)
    if type(parent) is cst.UnaryOperation and type(parent.operator) is cst.Not:
        return True
    if type(parent) in (cst.If, cst.While, cst.BooleanOperation):
        return True  # a truth test (`if self.cache:`), not a computation on the device
    return False


def _moved_afterwards(ctx: FileContext, node: cst.CSTNode) -> bool:
    """The chain of host-side reshapes that starts at `node` ends in a move (`.to(...)`, `.cuda()`)."""
    while True:
        parent = ctx.index.parent(node)
        if type(parent) is cst.Subscript and parent.value is node:
            node = parent
            continue
        if not (type(parent) is cst.Attribute and parent.value is node):
            return False
        if parent.attr.value in ("to", "cuda", "type_as"):
            return True
        call = ctx.index.parent(parent)
        if not (
            type(call) is cst.Call
            and call.func is parent
            and parent.attr.value in PRESERVING_METHODS
            and parent.attr.value not in MEETING_METHODS
        ):
            return False
        node = call


def _read_on_host(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`int(self.stride.max())`, `self.sizes.prod().item()`: the result becomes a Python number."""
    parent = ctx.index.parent(node)
    if type(parent) is cst.Attribute and parent.value is node:
        return parent.attr.value in ("item", "tolist", "numpy")
    if type(parent) is cst.Arg:
        call = ctx.index.parent(parent)
        return (
            type(call) is cst.Call
            and type(call.func) is cst.Name
            and call.func.value in ("int", "float", "bool", "len", "range", "list", "tuple", "round")
        )
    return False


def _loop_reads_safely(ctx: FileContext, loop: cst.For) -> bool:
    """`for w in self.weights: ... w.to(x.device) ...`: every use of the loop's names is safe."""
    targets = {n.value for n in ctx.index.walk(loop.target) if type(n) is cst.Name}
    uses = [n for n in ctx.index.walk(loop.body) if type(n) is cst.Name and n.value in targets]
    return bool(uses) and all(_safe_read(ctx, use) for use in uses)
