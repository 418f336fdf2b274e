from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.argument_places import passed_for
from devicelint.analysis.facts import file_facts
from devicelint.analysis.modules import dataset_classes, methods, module_classes
from devicelint.analysis.names import SETTINGS_NAMES, dotted_name, literal_value
from devicelint.analysis.placement_facts import DEVICE_VALUE
from devicelint.analysis.training.syntax import short
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

DATASET_METHODS = frozenset({"__init__", "__getitem__", "__getitems__", "__iter__", "__next__"})
DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})


def _accelerator_string(node: cst.BaseExpression) -> str | None:
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        if isinstance(value, str) and value.split(":", 1)[0] in ("cuda", "mps", "xpu"):
            return value
    return None


def _device_like(node: cst.BaseExpression) -> bool:
    name = (dotted_name(node) or "").rsplit(".", 1)[-1].lower()
    return "device" in name or name in ("gpu", "rank", "local_rank")


def _names_accelerator(ctx: FileContext, node: cst.BaseExpression, depth: int = 0) -> bool:
    """A device value that the engine resolves to an accelerator the code states
    (`torch.device("cuda")`, a module constant `device = "cuda" if ... else "cpu"`). A tensor's own
    `.device` is not one: in a worker the data is on the host, so moving to it is a no-op."""
    if type(node) is cst.Attribute and node.attr.value == "device" and file_facts(ctx).value(node.value).is_tensor:
        return False
    fact = file_facts(ctx).value(node)
    if fact.kind == DEVICE_VALUE and fact.device is not None and fact.device.literal and fact.device.is_accelerator:
        return True
    # a helper's `device` parameter: what every call of the file hands in
    passed = passed_for(ctx, node) if type(node) is cst.Name and depth < 3 else None
    return passed is not None and bool(passed) and all(_names_accelerator(ctx, value, depth + 1) for value in passed)


def _cuda_use(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """How `node` puts a tensor on the GPU, or None."""
    if type(node) is not cst.Call:
        return None
    func = node.func
    if (
        type(func) is cst.Attribute
        and func.attr.value == "cuda"
        and not (ctx.qualified_name(func) or "").startswith("torch.")
    ):
        return f"{ctx.code_for(func)}()" if not node.args else ctx.code_for(node)
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == "device":
            value = _accelerator_string(arg.value)
            if value is not None:
                return f'device="{value}"'
            if _names_accelerator(ctx, arg.value):
                return f"device={ctx.code_for(arg.value)}"
    if type(func) is cst.Attribute and func.attr.value == "to" and node.args:
        first = node.args[0]
        if first.keyword is None:
            value = _accelerator_string(first.value)
            if value is not None:
                return f'.to("{value}")'
            if _device_like(first.value) or _names_accelerator(ctx, first.value):
                return f".to({ctx.code_for(first.value)})"
    return None


def _workers_only_on_host(ctx: FileContext, cls: cst.ClassDef, move: cst.CSTNode) -> bool:
    """`.to(device)` of the dataset's `__init__` parameter `device`, whose default is "cpu", where
    every loader of the file over an instance given another device forks workers only for the
    host (`num_workers=n if cache == "cpu" else 0`, `cache` the expression passed as `device`): a
    cache put on the GPU on request is read in the main process."""
    target = _move_target(move)
    init = methods(cls).get("__init__")
    if type(target) is not cst.Name or init is None:
        return False
    params = [p for p in (*init.params.posonly_params, *init.params.params, *init.params.kwonly_params)]
    param = next((p for p in params if p.name.value == target.value), None)
    if param is None or not _names_the_host(param.default):
        return False
    position = next(i for i, p in enumerate(params) if p is param) - 1  # after `self`
    built = [c for c in ctx.index.of_type(cst.Call) if type(c.func) is cst.Name and c.func.value == cls.name.value]
    if not built:
        return False
    for call in built:
        passed = _argument_for(call, target.value, position)
        if passed is None or _names_the_host(passed):
            continue  # the default, or the host by name
        holder = ctx.index.parent(call)
        if not (type(holder) is cst.Assign and len(holder.targets) == 1 and type(holder.targets[0].target) is cst.Name):
            return False
        loaders = _loaders_over(ctx, holder.targets[0].target.value)
        if not loaders or not all(_workers_for_host_only(ctx, loader, passed) for loader in loaders):
            return False
    return True


def _loaded_only_in_main_process(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """Every instance of the dataset the file builds goes straight into DataLoaders of the file
    that fork no workers (no `num_workers`, or `num_workers=0`; `**kwargs` of a function whose
    every call in the file passes it no `num_workers`): its items are made in the main
    process, where CUDA works (`DataLoader(Replay(memories, device=dev), batch_size=16)`)."""
    built = [c for c in ctx.index.of_type(cst.Call) if type(c.func) is cst.Name and c.func.value == cls.name.value]
    if not built:
        return False
    for call in built:
        holder = ctx.index.parent(call)
        if type(holder) is cst.Arg:
            loader = ctx.index.parent(holder)
            if not (type(loader) is cst.Call and ctx.qualified_name(loader.func) in DATALOADERS):
                return False
            if _dataset_argument(loader) is not call or not _forks_no_workers(ctx, loader):
                return False
            continue
        if not (type(holder) is cst.Assign and len(holder.targets) == 1 and type(holder.targets[0].target) is cst.Name):
            return False
        name = holder.targets[0].target
        scope = ctx.index.enclosing_function(holder)
        uses = [
            n
            for n in ctx.index.of_type(cst.Name)
            if n.value == name.value and n is not name and ctx.index.enclosing_function(n) is scope
        ]
        loaders = _loaders_over(ctx, name.value)
        if not loaders or not all(_forks_no_workers(ctx, loader) for loader in loaders):
            return False
        if any(
            not any(_dataset_argument(loader) is use for loader in loaders) and not _read_here(ctx, use) for use in uses
        ):
            return False  # handed on, returned or kept: another loader may fork workers over it
    return True


def _read_here(ctx: FileContext, use: cst.Name) -> bool:
    """A use of the dataset that reads items in this process: `ds[i]`, `len(ds)`,
    `random.choice(ds)`, `for item in ds`."""
    parent = ctx.index.parent(use)
    if type(parent) is cst.Subscript and parent.value is use:
        return True
    if type(parent) is cst.For and parent.iter is use:
        return True
    if type(parent) is cst.Arg and parent.keyword is None and not parent.star:
        call = ctx.index.parent(parent)
        if type(call) is cst.Call:
            callee = ctx.qualified_name(call.func) or dotted_name(call.func) or ""
            return callee in _ITEM_READERS
    return False


_ITEM_READERS = frozenset({"len", "iter", "next", "list", "enumerate", "random.choice", "random.sample"})


def _dataset_argument(loader: cst.Call) -> cst.BaseExpression | None:
    return next(
        (
            a.value
            for a in loader.args
            if (a.keyword is None and not a.star) or (a.keyword is not None and a.keyword.value == "dataset")
        ),
        None,
    )


def _forks_no_workers(ctx: FileContext, loader: cst.Call) -> bool:
    """`DataLoader(ds, batch_size=8)`: `num_workers` left at its default 0, or given as 0."""
    positional = [a for a in loader.args if a.keyword is None and not a.star]
    if len(positional) > 5:  # `DataLoader(ds, 8, True, None, None, 4)`: the sixth is num_workers
        return False
    for arg in loader.args:
        if arg.keyword is not None and arg.keyword.value == "num_workers":
            if not (type(arg.value) is cst.Integer and arg.value.value == "0"):
                return False
        elif arg.star == "*":
            return False
        elif arg.star == "**" and not _no_workers_in_keywords(ctx, loader, arg.value):
            return False
    return True


def _no_workers_in_keywords(ctx: FileContext, loader: cst.Call, spread: cst.BaseExpression) -> bool:
    """`**kwargs` of the function building the loader, where every call of that function in the
    file passes it no `num_workers` (only the function's named parameters and other keywords,
    `drop_last=True`, no `**` spread of its own)."""
    function = ctx.index.enclosing_function(loader)
    extra = function.params.star_kwarg if function is not None else None
    if function is None or extra is None or type(spread) is not cst.Name or spread.value != extra.name.value:
        return False
    named = {
        p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
    }
    calls = [c for c in ctx.index.of_type(cst.Call) if type(c.func) is cst.Name and c.func.value == function.name.value]
    if not calls:
        return False
    for call in calls:
        for arg in call.args:
            if arg.star or (
                arg.keyword is not None and arg.keyword.value == "num_workers" and "num_workers" not in named
            ):
                return False
        if len([a for a in call.args if a.keyword is None]) > len(function.params.posonly_params) + len(
            function.params.params
        ):
            return False
    return True


def _names_the_host(node: cst.BaseExpression | None) -> bool:
    return type(node) is cst.SimpleString and literal_value(node) == "cpu"


def _move_target(node: cst.CSTNode) -> cst.BaseExpression | None:
    """`d` of `.to(d)` or `device=d`."""
    if type(node) is not cst.Call:
        return None
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == "device":
            return arg.value
    if type(node.func) is cst.Attribute and node.func.attr.value == "to" and node.args and node.args[0].keyword is None:
        return node.args[0].value
    return None


def _argument_for(call: cst.Call, name: str, position: int) -> cst.BaseExpression | None:
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
        if arg.keyword is None and not arg.star and index == position:
            return arg.value
    return None


def _loaders_over(ctx: FileContext, dataset: str) -> list[cst.Call]:
    """The file's `DataLoader(dataset, ...)` calls over the name `dataset`."""
    found = []
    for call in ctx.index.of_type(cst.Call):
        if ctx.qualified_name(call.func) not in DATALOADERS:
            continue
        first = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "dataset"), None)
        if type(first) is cst.Name and first.value == dataset:
            found.append(call)
    return found


def _workers_for_host_only(ctx: FileContext, loader: cst.Call, device: cst.BaseExpression) -> bool:
    """`num_workers=n if device == "cpu" else 0` (or `0 if device != "cpu" else n`)."""
    workers = next((a.value for a in loader.args if a.keyword is not None and a.keyword.value == "num_workers"), None)
    if type(workers) is not cst.IfExp or type(workers.test) is not cst.Comparison:
        return False
    test = workers.test
    if len(test.comparisons) != 1:
        return False
    compared = test.comparisons[0]
    left, right = test.left, compared.comparator
    if not (
        (_names_the_host(right) and ctx.code_for(left) == ctx.code_for(device))
        or (_names_the_host(left) and ctx.code_for(right) == ctx.code_for(device))
    ):
        return False
    host_only = workers.orelse if type(compared.operator) is cst.Equal else workers.body
    if type(compared.operator) not in (cst.Equal, cst.NotEqual):
        return False
    return type(host_only) is cst.Integer and host_only.value == "0"


def _moves_to_default(node: cst.CSTNode, defaulted: frozenset[str]) -> bool:
    """`.to(device)` where no caller passes `device`: it keeps its default (usually None)."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "to" and node.args:
        first = node.args[0].value
        return type(first) is cst.Name and first.value in defaulted
    return False


TENSOR_ATTRIBUTES = frozenset(
    {
        "shape",
        "size",
        "dtype",
        "ndim",
        "dim",
        "numel",
        "type_as",
        "view",
        "reshape",
        "float",
        "long",
        "clone",
        "detach",
        "unsqueeze",
        "squeeze",
    }
)


def _follows_a_tensor(ctx: FileContext, function: cst.FunctionDef, node: cst.CSTNode) -> bool:
    """`.to(f0.device)` where `f0` is a tensor of the worker code itself (it reads `f0.shape`,
    indexes it, builds it with `torch.*`): a copy onto the device the data already has, which in
    a worker is the host. Device holders (`self.device`, `args.device`) do not count."""
    if not (type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "to" and node.args):
        return False
    target = node.args[0].value
    if type(target) is cst.Name:
        return _data_device(ctx, function, target.value)
    if not (type(target) is cst.Attribute and target.attr.value == "device" and type(target.value) is cst.Name):
        return False
    name = target.value.value
    if name == "self":
        return False
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    if name in params and name not in SETTINGS_NAMES and name not in ("self", "cls"):
        return True  # `.to(edge_index.device)`: the device of the data the code was handed
    for other in ctx.index.walk(function.body):
        if type(other) is cst.Attribute and type(other.value) is cst.Name and other.value.value == name:
            if other.attr.value in TENSOR_ATTRIBUTES:
                return True
        elif type(other) is cst.Subscript and type(other.value) is cst.Name and other.value.value == name:
            return True
        elif (
            type(other) is cst.Assign
            and type(other.value) is cst.Call
            and any(type(t.target) is cst.Name and t.target.value == name for t in other.targets)
        ):
            if (ctx.qualified_name(other.value.func) or "").startswith("torch."):
                return True
    return False


# Parameters that carry settings, whose `.device` is the one the user asked for.
_SETTINGS_HOLDERS = frozenset(
    {"self", "cls", "args", "cfg", "config", "conf", "opt", "opts", "options", "hparams", "settings"}
)


def _data_device(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """`device = batch["image"].device` (every binding of `name` in the worker code): the
    device of the data the worker code was handed, which in a worker is the host."""
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)} - {"self", "cls"}
    bindings = [
        node
        for node in ctx.index.walk(function.body)
        if type(node) is cst.Assign and any(type(t.target) is cst.Name and t.target.value == name for t in node.targets)
    ]
    if not bindings or any(p.name.value == name for p in function.params.params):
        return False
    for binding in bindings:
        value = binding.value
        if not (type(value) is cst.Attribute and value.attr.value == "device"):
            return False
        root = value.value
        while isinstance(root, (cst.Subscript, cst.Attribute)):
            root = root.value
        if not (type(root) is cst.Name and root.value in params):
            return False
    return True


def _collate_functions(ctx: FileContext) -> list[cst.FunctionDef]:
    passed: set[str] = set()
    built: list[cst.FunctionDef] = []
    for call in ctx.index.of_type(cst.Call):
        if ctx.qualified_name(call.func) in DATALOADERS:
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "collate_fn" and type(arg.value) is cst.Name:
                    passed.add(arg.value.value)
                elif arg.keyword is not None and arg.keyword.value == "collate_fn" and type(arg.value) is cst.Call:
                    built += _returned_functions(ctx, arg.value)
    # A model's own `_collate_*` helper runs in the main process, next to its parameters, unless
    # the file installs it as a loader's collate function (`loader.collate_fn = self.collate`).
    installed = _installed_collate_methods(ctx)
    model_methods = {
        id(m) for cls in module_classes(ctx).values() for name, m in methods(cls).items() if name not in installed
    }
    found = [
        f
        for f in ctx.index.of_type(cst.FunctionDef)
        if (
            f.name.value in passed
            or (
                "collate" in f.name.value.lower()
                and not f.name.value.startswith("test")
                and id(f) not in model_methods
                and not _batches_for_other_code(ctx, f)
            )
        )
        and not _collated_only_in_main_process(ctx, f)
    ]
    return found + [f for f in built if f not in found]


def _collated_only_in_main_process(ctx: FileContext, func: cst.FunctionDef) -> bool:
    """Every use of the function in the file is the `collate_fn=` of a DataLoader of the file
    that forks no workers (`DataLoader(ids, collate_fn=self.collate, num_workers=0)`): it
    batches in the main process, where CUDA works, as a dataset read only by such loaders does."""
    name = func.name.value
    uses: list[cst.BaseExpression] = [
        node
        for node in ctx.index.of_type(cst.Name)
        if node.value == name and node is not func.name and not _attribute_name(ctx, node)
    ]
    uses += [node for node in ctx.index.of_type(cst.Attribute) if node.attr.value == name]
    if not uses:
        return False
    for use in uses:
        arg = ctx.index.parent(use)
        loader = ctx.index.parent(arg) if type(arg) is cst.Arg else None
        if not (
            type(loader) is cst.Call
            and ctx.qualified_name(loader.func) in DATALOADERS
            and arg.keyword is not None  # type: ignore[union-attr]  # an Arg: its parent is the loader call
            and arg.keyword.value == "collate_fn"  # type: ignore[union-attr]  # as above
            and _forks_no_workers(ctx, loader)
        ):
            return False
    return True


def _attribute_name(ctx: FileContext, name: cst.Name) -> bool:
    """`collate` in `self.collate`: counted as the Attribute, not as a bare name."""
    parent = ctx.index.parent(name)
    return type(parent) is cst.Attribute and parent.attr is name


def _batches_for_other_code(ctx: FileContext, func: cst.FunctionDef) -> bool:
    """A function named like a collate that the file uses only in other ways: called directly
    (`batch = collate_requests(items)`) or kept by an object that is no loader
    (`self.collate_fn = collate_fn or _default_collate` in an inference server that stacks
    requests in its own thread). It never runs in a DataLoader worker here; one the file never
    uses may be a loader's collate elsewhere and is still read."""
    uses = [n for n in ctx.index.of_type(cst.Name) if n.value == func.name.value and n is not func.name]
    return bool(uses) and not any(_loader_use(ctx, use) for use in uses)


def _loader_use(ctx: FileContext, name: cst.Name) -> bool:
    """The name handed to a call (`DataLoader(ds, collate_fn=name)`, a wrapper that builds one),
    or stored as the `collate_fn` of something other than the file's own non-loader class."""
    for ancestor in ctx.index.ancestors(name):
        if type(ancestor) is cst.Arg:
            return True
        if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
            kept_in = [t.target for t in ancestor.targets] if isinstance(ancestor, cst.Assign) else [ancestor.target]
            for kept in kept_in:
                if type(kept) is cst.Attribute and kept.attr.value == "collate_fn":
                    owner = ctx.index.enclosing_class(ancestor)
                    on_self = type(kept.value) is cst.Name and kept.value.value == "self"
                    return not on_self or (owner is not None and "loader" in owner.name.value.lower())
            return True  # bound to another name: followed no further
        if type(ancestor) is cst.Call and ancestor.func is name:
            return False  # called here, in this process
        if isinstance(ancestor, cst.BaseStatement):
            break
    return False


def _installed_collate_methods(ctx: FileContext) -> set[str]:
    """Methods the file hands over as a collate function: `collate_fn=self.collate` (to any
    call) or `loader.collate_fn = self.collate`."""
    values: list[cst.BaseExpression] = []
    for arg in ctx.index.of_type(cst.Arg):
        if arg.keyword is not None and arg.keyword.value == "collate_fn":
            values.append(arg.value)
    for assign in ctx.index.of_type(cst.Assign):
        if any(type(t.target) is cst.Attribute and t.target.attr.value == "collate_fn" for t in assign.targets):
            values.append(assign.value)
    return {v.attr.value for v in values if type(v) is cst.Attribute}


def _returned_functions(ctx: FileContext, factory: cst.Call) -> list[cst.FunctionDef]:
    """`collate_fn=make_collate(tokenizer)`: the nested functions that the file's factory
    returns by name."""
    if type(factory.func) is not cst.Name:
        return []
    outer = next(
        (f for f in ctx.module.body if type(f) is cst.FunctionDef and f.name.value == factory.func.value), None
    )
    if outer is None or type(outer.body) is not cst.IndentedBlock:
        return []
    nested = {f.name.value: f for f in outer.body.body if type(f) is cst.FunctionDef}
    returned = {
        node.value.value
        for node in ctx.index.walk(outer.body)
        if type(node) is cst.Return and type(node.value) is cst.Name
    }
    return [nested[name] for name in returned if name in nested]


def _datasets(ctx: FileContext) -> dict[str, cst.ClassDef]:
    """Dataset subclasses, plus classes whose base is a project's own `...Dataset` (imported
    from elsewhere) and that serve items with `__getitem__`/`__iter__`."""
    found = dict(dataset_classes(ctx))
    for cls in ctx.index.of_type(cst.ClassDef):
        if cls.name.value in found:
            continue
        bases = [(dotted_name(b.value) or "") for b in cls.bases if b.keyword is None]
        own = methods(cls)
        if any(b.endswith("Dataset") for b in bases) and ("__getitem__" in own or "__iter__" in own):
            found[cls.name.value] = cls
    return found


def _worker_code(ctx: FileContext, name: str, cls: cst.ClassDef) -> list[tuple[cst.FunctionDef, str, frozenset[str]]]:
    """The dataset's item methods, the methods they call through `self.` and the file's
    functions they call by name (two levels): all of it runs in the loader's workers. Each
    comes with the parameters its callers leave to their default (`.to(device)` with the
    default `device=None` moves nothing)."""
    own = methods(cls)
    out: list[tuple[cst.FunctionDef, str, frozenset[str]]] = [
        (m, f"`{name}.{n}`", frozenset()) for n, m in own.items() if n in DATASET_METHODS
    ]
    return _with_callees(ctx, out, own, name)


def _with_callees(
    ctx: FileContext, out: list[tuple[cst.FunctionDef, str, frozenset[str]]], own: dict[str, cst.FunctionDef], name: str
) -> list[tuple[cst.FunctionDef, str, frozenset[str]]]:
    """`out` and what it calls in the file, two levels deep: `self.` methods of `own` and the
    file's functions by name."""
    functions = {f.name.value: f for f in ctx.module.body if type(f) is cst.FunctionDef}
    seen = {id(m) for m, _, _ in out}
    frontier = list(out)
    for _ in range(2):
        reached: dict[int, tuple[cst.FunctionDef, str, set[str]]] = {}
        for function, where, _ in frontier:
            for call in ctx.index.walk(function.body):
                if type(call) is not cst.Call:
                    continue
                func = call.func
                target = None
                if (
                    type(func) is cst.Attribute
                    and type(func.value) is cst.Name
                    and func.value.value in ("self", "cls", name)
                ):
                    target = own.get(func.attr.value)  # `self._load()`, `cls._make()`, `Dataset._make()`
                elif type(func) is cst.Name:
                    target = functions.get(func.value)
                if target is None or target.name.value in DATASET_METHODS or id(target) in seen:
                    continue
                caller = where.split(" ", 1)[0]
                owner = f"{name}.{target.name.value}" if target.name.value in own else target.name.value
                entry = reached.setdefault(
                    id(target), (target, f"`{owner}` (called from {caller})", _defaulted(target))
                )
                entry[2].difference_update(_passed(target, call, target.name.value in own))
        seen |= set(reached)
        frontier = [(f, w, frozenset(d)) for f, w, d in reached.values()]
        out += frontier
    return out


def _self_method(call: cst.Call, methods_by_name: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """What `methods_by_name` holds for the method a `self.<method>(...)` call names."""
    func = call.func
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
        return methods_by_name.get(func.attr.value)
    return None


def _inherited_device_methods(ctx: FileContext, cls: cst.ClassDef) -> dict[str, tuple[str, str]]:
    """Method -> (`Base.method`, its file) for each method the class does not define itself that
    a base imported from another project module certainly returns on the GPU (a loading mixin's
    `return torch.from_numpy(a).to("cuda")`)."""
    own = methods(cls)
    found: dict[str, tuple[str, str]] = {}
    for base in cls.bases:
        if base.keyword is not None:
            continue
        imported = ctx.project.plain_classes.get(dotted_name(base.value) or "")
        if imported is None:
            continue
        for method, place in imported.method_places:
            if place == "device-tensor" and method not in own:
                found.setdefault(method, (f"{imported.qualified}.{method}", imported.path))
    return found


ITEM_METHODS = DATASET_METHODS - {"__init__"}


@dataclass(frozen=True)
class _MainProcessCode:
    """Code that only the dataset's `__init__` runs (it and the helpers only it calls): it runs
    once, in the main process, before any worker is forked. A GPU tensor made there fails in a
    worker only when the item code reads it: kept on `self` in an attribute that the item
    methods (and what they call) read. `callers`: for a helper, the functions of this set that
    call it, whose use of its result decides."""

    item_reads: frozenset[str]
    callers: tuple[cst.FunctionDef, ...]
    scopes: dict[int, _MainProcessCode]

    def reaches_workers(self, ctx: FileContext, function: cst.FunctionDef, node: cst.CSTNode, depth: int = 0) -> bool:
        statement = _statement_of(ctx, node)
        if statement is None:
            return True
        kept = _kept_on_self(ctx, function, statement)
        if kept is None or kept & self.item_reads:
            return True  # a read attribute (or a flow not followed): the workers meet it
        if not _returned(ctx, function, statement) or depth > 2:
            return False
        for caller in self.callers:  # a helper that returns what it moved: where the callers keep it
            outer = self.scopes.get(id(caller))
            for call in _calls_of(ctx, caller, function.name.value):
                if outer is None or outer.reaches_workers(ctx, caller, call, depth + 1):
                    return True
        return False


def _main_process_code(
    ctx: FileContext, name: str, cls: cst.ClassDef, found: list[tuple[cst.FunctionDef, str, frozenset[str]]]
) -> dict[int, _MainProcessCode]:
    """The scopes of `found` that only `__init__` reaches, for a dataset whose own item methods
    are all in the file (else what they read is unknown and nothing is filtered)."""
    own = methods(cls)
    items = [(m, f"`{name}.{n}`", frozenset[str]()) for n, m in own.items() if n in ITEM_METHODS]
    if not items or "__init__" not in own:
        return {}
    item_scopes = _with_callees(ctx, list(items), own, name)
    reached_by_items = {id(f) for f, _, _ in item_scopes}
    reads = frozenset(
        node.attr.value
        for f, _, _ in item_scopes
        for node in ctx.index.walk(f)
        if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self"
    )
    for f, _, _ in item_scopes:
        for node in ctx.index.walk(f.body):
            if type(node) is cst.Name and node.value == "self":
                parent = ctx.index.parent(node)
                if not (type(parent) is cst.Attribute and parent.value is node):
                    return {}  # `self` handed on whole (`load(self, i)`, `vars(self)`): any attribute may be read
    init_scopes = _with_callees(ctx, [(own["__init__"], "", frozenset())], own, name)
    main = [f for f, _, _ in init_scopes if id(f) not in reached_by_items]
    if not main:
        return {}
    scopes: dict[int, _MainProcessCode] = {}
    for function in main:
        callers = tuple(f for f in main if f is not function and _calls_of(ctx, f, function.name.value))
        scopes[id(function)] = _MainProcessCode(reads, callers, scopes)
    return scopes


def _statement_of(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode | None:
    """The small statement (`x = ...`, `return ...`, an expression) holding `node`."""
    for ancestor in (node, *ctx.index.ancestors(node)):
        if isinstance(ancestor, cst.BaseSmallStatement):
            return ancestor
        if isinstance(ancestor, cst.BaseStatement):
            return None
    return None


def _self_attribute(target: cst.BaseExpression) -> str | None:
    """`x` of `self.x`, `self.x[i]`, `self.x.y`."""
    while True:
        if type(target) is cst.Attribute:
            if type(target.value) is cst.Name and target.value.value == "self":
                return target.attr.value
            target = target.value
        elif type(target) is cst.Subscript:
            target = target.value
        else:
            return None


def _targets(statement: cst.CSTNode) -> list[cst.BaseExpression]:
    if type(statement) is cst.For:
        return [statement.target]  # `for row in table:` carries `table` on to `row`
    if type(statement) is cst.Assign:
        return [t.target for t in statement.targets]
    if type(statement) in (cst.AugAssign, cst.AnnAssign):
        return [statement.target]  # type: ignore[attr-defined]  # both have .target
    return []


def _names_in(ctx: FileContext, node: cst.CSTNode) -> set[str]:
    return {n.value for n in ctx.index.walk(node) if type(n) is cst.Name}


# Calls whose result is host data whatever the device of what they read.
_HOST_COPIES = frozenset({"cpu", "numpy", "item", "tolist"})


def _carried(node: cst.CSTNode) -> set[str]:
    """The names whose value `node` carries on: not those read only through a host copy
    (`scorer(x).cpu().numpy()` carries no device tensor)."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _HOST_COPIES:
        return set()
    if type(node) is cst.Name:
        return {node.value}
    found: set[str] = set()
    for child in node.children:
        found |= _carried(child)
    return found


def _kept_on_self(ctx: FileContext, function: cst.FunctionDef, statement: cst.CSTNode) -> set[str] | None:
    """The `self` attributes the value of `statement` ends in, through the function's local
    names (`x = t.cuda()`, `y = x * 2`, `self.data = y`), or None where it goes somewhere not
    followed (an attribute of another object, a call handing it on as an argument). A bare
    move (`model.to(device)`) moves what it names in place."""
    small = [s for s in ctx.index.walk(function.body) if isinstance(s, (cst.BaseSmallStatement, cst.For))]
    kept: set[str] = set()
    tainted: set[str] = set()
    targets = _targets(statement)
    if not targets and type(statement) is cst.Expr:
        value = statement.value
        if type(value) is cst.Call and type(value.func) is cst.Attribute:
            targets = [value.func.value]  # `model.to(device)`, `self.table.cuda()`
        else:
            return None
    for target in targets:
        attribute = _self_attribute(target)
        if attribute is not None:
            kept.add(attribute)
        elif type(target) in (cst.Name, cst.Tuple, cst.List):
            tainted |= _names_in(ctx, target)
        elif type(statement) is not cst.Return:
            return None
    for _ in range(4):  # local flows, to a fixed point
        grown = False
        for other in small:
            if other is statement:
                continue
            value = other.iter if type(other) is cst.For else getattr(other, "value", None)
            reads = _carried(value) if isinstance(value, cst.CSTNode) else set()
            if type(other) is cst.Expr and type(other.value) is cst.Call:
                call = other.value
                holder = _self_attribute(call.func) if type(call.func) is cst.Attribute else None
                if holder is not None and reads & tainted:
                    kept.add(holder)  # `self.items.append(x)`
                continue
            if not (reads & tainted):
                continue
            for target in _targets(other):
                attribute = _self_attribute(target)
                if attribute is not None:
                    kept.add(attribute)
                else:
                    new = _names_in(ctx, target) - tainted
                    if new:
                        tainted |= new
                        grown = True
        if not grown:
            break
    return kept


def _returned(ctx: FileContext, function: cst.FunctionDef, statement: cst.CSTNode) -> bool:
    """Whether what `statement` made (or moved in place) may leave the function by `return`."""
    if type(statement) is cst.Return:
        return True
    names = set().union(*(_names_in(ctx, t) for t in _targets(statement)))
    if type(statement) is cst.Expr and type(statement.value) is cst.Call:
        names |= _names_in(ctx, statement.value.func)
    return any(
        type(r) is cst.Return and r.value is not None and _names_in(ctx, r.value) & names
        for r in ctx.index.walk(function.body)
    )


def _calls_of(ctx: FileContext, function: cst.FunctionDef, callee: str) -> list[cst.Call]:
    """Calls of `callee` (by name, or as `self.<callee>`, `cls.<callee>` or `<Class>.<callee>` of
    the function's class) in `function`."""
    owner = ctx.index.enclosing_class(function)
    receivers = {"self", "cls"} | ({owner.name.value} if owner is not None else set())
    found = []
    for node in ctx.index.walk(function.body):
        if type(node) is not cst.Call:
            continue
        func = node.func
        if (type(func) is cst.Name and func.value == callee) or (
            type(func) is cst.Attribute
            and func.attr.value == callee
            and type(func.value) is cst.Name
            and func.value.value in receivers
        ):
            found.append(node)
    return found


def _defaulted(function: cst.FunctionDef) -> set[str]:
    params = function.params
    return {
        p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.default is not None
    }


def _passed(function: cst.FunctionDef, call: cst.Call, bound: bool) -> set[str]:
    """The parameter names a call gives a value (all of them when it forwards `*args`)."""
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    if bound and params:
        params = params[1:]  # `self`
    passed: set[str] = set()
    for index, arg in enumerate(call.args):
        if arg.star:
            return set(params) | {p.name.value for p in function.params.kwonly_params}
        if arg.keyword is not None:
            passed.add(arg.keyword.value)
        elif index < len(params):
            passed.add(params[index])
    return passed


@register
class CudaInDataset(Rule):
    """
    ## What it does
    Flags tensors created on or moved to the GPU inside a `Dataset`'s `__init__`,
    `__getitem__` or `__iter__`, in the dataset's own methods and the file's functions that
    those call (two calls deep), or inside a `collate_fn`: `.cuda()`, `.to("cuda")`,
    `.to(device)`, `device="cuda"`, and devices the engine resolves to an accelerator
    (`device=torch.device("cuda")`, a module constant `GPU = torch.device("cuda:0")`).

    ## Why it is a bug on a GPU
    With `num_workers > 0` the `DataLoader` runs these in forked worker processes, where CUDA
    cannot be initialised: `RuntimeError: Cannot re-initialize CUDA in forked subprocess`.
    With `num_workers=0` it works but serialises host-to-device copies with data loading, and
    a dataset built on the GPU in `__init__` holds GPU memory for the whole run. Pinned-memory
    loading (`pin_memory=True`) also refuses CUDA tensors.

    ## Example
    ```python
    class Pairs(Dataset):
        def __getitem__(self, i):
            x, y = self.rows[i]
            return torch.tensor(x).cuda(), torch.tensor(y).cuda()
    ```

    ## Use instead
    ```python
    class Pairs(Dataset):
        def __getitem__(self, i):
            x, y = self.rows[i]
            return torch.tensor(x), torch.tensor(y)

    for x, y in DataLoader(Pairs(rows), num_workers=4, pin_memory=True):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    ```

    ## Fix safety
    No automatic fix: the move has to go to the training loop.

    ## Known limits
    Datasets are subclasses of `torch.utils.data.Dataset`/`IterableDataset` in the same file,
    or classes that serve items (`__getitem__`/`__iter__`) from a base named `...Dataset`
    imported from elsewhere; collate functions are those passed as `collate_fn=` to a
    `DataLoader` in the file (also the nested function a factory of the file returns,
    `collate_fn=make_collate(tok)`) or whose name contains `collate` (a test function such as `test_collate_pads` is not one, nor a method of an `nn.Module`, which runs in the main process next to its parameters, unless the file installs it as a collate function: `loader.collate_fn = self.collate`; nor one that the file only calls itself or keeps on an object that is no loader, `self.collate_fn = collate_fn or default_collate` in an inference server that batches requests in its own thread), and the file's functions
    they call (a `device` parameter judged by what every call passes). Helpers are followed through
    `self.<method>(...)` and calls of the file's top-level functions; a function of another project
    module is reported at its call when its body certainly puts a tensor on the GPU (`.cuda()`,
    `.to("cuda")`, `device="cuda"`), naming that line; it is not followed further. So is
    `self.<method>(...)` of a method the dataset inherits from a class of another project module
    (a loading mixin) whose every `return` is certainly a GPU tensor.
    `.to(x)` is reported only when `x` is named like a device; `.to(t.device)` where the worker
    code uses `t` as a tensor (`t.shape`, `t[...]`, `t = torch.*(...)`) follows the data's own
    device and is not reported, nor is `.to(device)` where every binding of `device` is the
    device of the worker code's own input (`device = batch["image"].device`). A dataset is not
    reported where every instance the file builds goes straight into loaders of the file that fork
    no workers (no `num_workers` or `num_workers=0`, also through the `**kwargs` of a loader
    factory that no call of the file hands `num_workers`): its items are made in the main
    process. The same holds for a collate function whose every use in the file is the
    `collate_fn=` of such a loader (`DataLoader(ids, collate_fn=self.collate, num_workers=0)` in
    a renderer that keeps its rays on the GPU). Nor where the choice is the caller's: a `device` parameter of `__init__` that
    defaults to `"cpu"`, where every loader of the file over an instance given another device
    forks workers only for the host (`num_workers=n if cache == "cpu" else 0`, `cache` the
    expression passed as `device`). A dataset the file builds nowhere (a library's) is read as
    before. `__init__` (and the helpers only it calls) runs once, in the main process:
    there a GPU value is reported only where it ends, through the method's local names, in an
    attribute of `self` that the item methods (or what they call) read; GPU work whose results
    are kept as host data (`self.rows.append(model(x).cpu().numpy())`), a model moved to run it,
    and device copies the item code never reads (`self.mean_gpu` for the training loop) are not
    reported. A dataset whose item methods are not all in its class, or whose item code hands
    `self` on whole (`row_of(self, i)`), is read as before.
    """

    code = "DL109"
    name = "cuda-in-dataset"
    summary = "CUDA tensors created in a Dataset or collate_fn fail in forked DataLoader workers."
    message = '`{what}` puts a tensor on the GPU in {where}; with `num_workers > 0` this fails ("Cannot re-initialize CUDA in forked subprocess"); return CPU tensors and move batches in the training loop'
    tokens = ("cuda", "device", "Device", "DEVICE", "gpu", "Gpu", "GPU", "rank", "Rank", "RANK", "mps", "xpu")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        scopes: list[tuple[cst.FunctionDef, str, frozenset[str]]] = []
        # id of a scope -> the methods its class inherits from a project class of another module
        # that certainly return a tensor on the GPU (`ClassSummary.method_places`)
        inherited: dict[int, dict[str, tuple[str, str]]] = {}
        # id of a scope that only the dataset's `__init__` reaches -> what the item code reads
        main_only: dict[int, _MainProcessCode] = {}
        # id of a dataset's scope -> the dataset class (for its loaders' worker counts)
        classes: dict[int, cst.ClassDef] = {}
        for name, cls in _datasets(ctx).items():
            found = _worker_code(ctx, name, cls)
            scopes += found
            classes.update((id(function), cls) for function, _, _ in found)
            main_only.update(_main_process_code(ctx, name, cls, found))
            devices = _inherited_device_methods(ctx, cls)
            for function, _, _ in found if devices else ():
                inherited[id(function)] = devices
        scopes += _with_callees(ctx, [(f, f"`{f.name.value}`", frozenset()) for f in _collate_functions(ctx)], {}, "")
        seen: set[int] = set()
        # id of a dataset class -> whether every loader over it runs in the main process
        main_process: dict[int, bool] = {}
        helpers = {n: h for n, h in ctx.project.helpers.items() if h.uses.accelerator_tensor}
        for function, where, defaulted in scopes:
            devices = inherited.get(id(function), {})
            for node in ctx.index.walk(function.body):
                if devices and type(node) is cst.Call and id(node) not in seen:
                    base = _self_method(node, devices)
                    if base is not None:  # `self.load_image(path)` of a base that returns `....to("cuda")`
                        seen.add(id(node))
                        inside = f"{where}, through the inherited `{base[0]}` ({base[1]}), which returns a GPU tensor"
                        yield self.violation(node, what=f"{short(ctx, node, 40)}", where=inside)
                        continue
                if helpers and type(node) is cst.Call and id(node) not in seen:
                    helper = helpers.get(dotted_name(node.func) or "")
                    if helper is not None:  # `interp(points)` of a project function that calls `.cuda()`
                        seen.add(id(node))
                        how, line = helper.uses.accelerator_tensor[0]
                        inside = f"{where}, through `{helper.qualified}` ({helper.path}:{line}: `{how}`)"
                        yield self.violation(node, what=f"{short(ctx, node, 40)}", where=inside)
                        continue
                what = _cuda_use(ctx, node)
                if what is not None and defaulted and _moves_to_default(node, defaulted):
                    continue
                main = main_only.get(id(function))
                if what is not None and main is not None and not main.reaches_workers(ctx, function, node):
                    continue
                if what is not None and _follows_a_tensor(ctx, function, node):
                    continue
                cls = classes.get(id(function))
                if what is not None and cls is not None and _workers_only_on_host(ctx, cls, node):
                    continue
                if what is not None and cls is not None:
                    if id(cls) not in main_process:
                        main_process[id(cls)] = _loaded_only_in_main_process(ctx, cls)
                    if main_process[id(cls)]:
                        continue
                if what is not None and id(node) not in seen:
                    seen.add(id(node))
                    yield self.violation(node, what=what, where=where)
