from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.facts import file_facts
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_facts import ACCELERATOR, CPU, MODULE, moves_to_accelerator
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.placement_values import cpu_only_script
from devicelint.analysis.training.loaders import (
    is_parameter,
    iterated_loader,
    iterated_loaders,
    loader_calls,
    passed_arguments,
    same_file_function,
)
from devicelint.analysis.training.step import training_scopes
from devicelint.analysis.training.syntax import (
    assigned_names,
    has_star,
    is_true,
    keyword,
    positional,
    receiver,
    scope_of,
    short,
)
from devicelint.analysis.training.values import attribute_values, values_of
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# `DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)`.
NUM_WORKERS_POSITION = 5
# Dataset packages whose items are read, decoded and transformed one by one in `__getitem__`.
PER_ITEM_PACKAGES = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.")
# Constructor keywords that hand a dataset per-item work.
TRANSFORM_KEYWORDS = frozenset({"transform", "transforms", "target_transform", "preprocess", "augment", "augmentation"})
# Calls in `__getitem__` that do no work worth a worker process (indexing in-memory data).
PLAIN_CALLS = frozenset(
    {"len", "int", "float", "str", "bool", "tuple", "list", "dict", "range", "isinstance", "super", "min", "max"}
)
SUBSETS = frozenset({"torch.utils.data.Subset", "torch.utils.data.dataset.Subset"})
_MAX_DEPTH = 4


@register
class DataloaderWithoutWorkers(Rule):
    """
    ## What it does
    Flags a `DataLoader(...)` built with the default `num_workers=0` (no `num_workers`
    argument, or a literal `0`) whose batches feed a training loop on the device: a loop, over
    that loader, that backpropagates and moves its batches to an accelerator (or calls a model
    the file moves there), when the file shows that the dataset does per-item work that workers
    would take off the training process: a torchvision/torchaudio dataset, a dataset built with a
    `transform`, or a `Dataset` class of the file whose `__getitem__` calls something (reads a
    file, decodes, transforms). The loader may be built in the loop's function, at module level,
    on `self`, by a builder function of the file, or handed to the training function by a caller
    in the same file; datasets are followed the same way.

    ## Why it is a bug on a GPU
    With `num_workers=0` every batch is read, decoded, augmented and collated in the training
    process itself, between two steps, while the GPU waits: utilisation drops to whatever share
    of the step the GPU part is, often well under half for image pipelines. Worker processes
    prepare the next batches while the GPU computes the current one, and `pin_memory=True` makes
    their host-to-device copies fast and asynchronous.

    ## Example
    ```python
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = criterion(model(images), labels)
        loss.backward()
    ```

    ## Use instead
    ```python
    loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
    ```

    ## Fix safety
    No fix: the right number of workers depends on the machine (CPU cores per GPU), the
    dataset must be picklable for worker processes, and each worker holds a copy of the
    dataset object's memory.

    ## Known limits
    Off by default: it is advice about throughput, not a device bug, and it also fires on code
    whose device handling is right. Silent when `num_workers` is set to anything but a literal
    `0` (also a variable), when `*args`/`**kwargs` could set it, for datasets the file does not
    show (a parameter no caller here passes, a dataset imported from another module) and for
    data already in memory (`TensorDataset(...)`, a `Dataset` whose `__getitem__` only indexes),
    in tests, and in whole programs (scripts, notebooks) that never name an accelerator. A loop counts as a device training
    loop when it calls `.backward()` (or `accelerator.backward(...)`, or a function or method of
    the file that does) and moves a batch with `.to(...)`/`.cuda()` or calls a model the file
    moves; batches moved only inside a helper, and loaders prepared by a framework
    (`accelerator.prepare(loader)`, Lightning's `Trainer.fit`), are not seen.
    """

    code = "DL404"
    name = "dataloader-without-workers"
    summary = "A `DataLoader` feeding a GPU training loop loads its data in the main process (`num_workers=0`)."
    message = (
        "`{loader}` feeds the device training loop `{loop}` with `num_workers=0`, so every batch "
        "is loaded and collated in the training process while the GPU waits; pass `num_workers=N` "
        "(a few per GPU, up to the CPU cores){pin}"
    )
    severity = "warning"
    default_enabled = False
    tokens = ("DataLoader",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if cpu_only_script(ctx) or is_test_path(ctx.path):
            return
        reported: set[int] = set()
        for loop in ctx.index.of_type(cst.For):
            loaders = iterated_loaders(ctx, loop.iter)
            calls = [
                call
                for loader in loaders
                for call in loader_calls(ctx, loader, scope_of(ctx, loop)) or ()
                if id(call) not in reported and _default_workers(call) and _per_item_work(ctx, call)
            ]
            # The loaders first: the training-loop test walks the loop's body and is dearer.
            if not calls or not _device_training_loop(ctx, loop):
                continue
            for call in calls:
                if id(call) in reported:
                    continue
                reported.add(id(call))
                pinned = is_true(keyword(call, "pin_memory"))
                yield self.violation(
                    call,
                    loader=short(ctx, call),
                    loop=f"for {short(ctx, loop.target, 30)} in {short(ctx, loop.iter, 40)}",
                    pin="" if pinned else " and `pin_memory=True` for fast asynchronous copies",
                )


def _default_workers(call: cst.Call) -> bool:
    """No `num_workers` (or a literal 0) and no `*args`/`**kwargs` that could set it."""
    if has_star(call):
        return False
    workers = keyword(call, "num_workers")
    if workers is None:
        args = positional(call)
        workers = args[NUM_WORKERS_POSITION] if len(args) > NUM_WORKERS_POSITION else None
    return workers is None or (type(workers) is cst.Integer and workers.value == "0")


def _device_training_loop(ctx: FileContext, loop: cst.For) -> bool:
    """The loop backpropagates and moves one of its batches to an accelerator (the engine's
    DataLoader-batch fact), both in its own body rather than in a nested loop over another loader."""
    backprop = any(
        _own(ctx, call, loop)
        for scope in training_scopes(ctx)
        for call in (*scope.backwards, *scope.delegated_backwards)
    )
    if not backprop and not _calls_step_function(ctx, loop):
        return False
    facts = file_facts(ctx)
    scope = scope_of(ctx, loop)
    targets = set(assigned_names(loop.target))  # the loop's own batch names, where the engine has no batch fact
    for node in ctx.index.walk(loop.body):
        if type(node) is not cst.Call or not _own(ctx, node, loop):
            continue
        owner = receiver(node)
        if (
            moves_to_accelerator(node)
            and owner is not None
            and facts.value(node).kind != CPU
            and (facts.value(owner).batch or (type(owner) is cst.Name and owner.value in targets))
        ):
            return True  # `x = x.to(device)`: a batch moved towards the device (one the engine may not name)
        if _device_module(ctx, node.func, scope):
            return True  # `model(x)` with a model the file moves to the device
    return False


def _calls_step_function(ctx: FileContext, loop: cst.For) -> bool:
    """The loop's body calls a function of the file that backpropagates (`self._run_batch(x, y)`,
    `train_step(model, batch)`): a method of the loop's class through `self`, or a top-level one."""
    backprop: set[int] = {
        id(scope.node) for scope in training_scopes(ctx) if scope.backwards or scope.delegated_backwards
    }
    owner_class = ctx.index.enclosing_class(loop)
    for node in ctx.index.walk(loop.body):
        if type(node) is not cst.Call or not _own(ctx, node, loop):
            continue
        callee: cst.FunctionDef | None = None
        func = node.func
        if type(func) is cst.Name:
            callee = same_file_function(ctx, node)
        elif (
            owner_class is not None
            and type(func) is cst.Attribute
            and type(func.value) is cst.Name
            and func.value.value == "self"
        ):
            callee = next(
                (f for f in owner_class.body.body if type(f) is cst.FunctionDef and f.name.value == func.attr.value),
                None,
            )
        if callee is not None and id(callee) in backprop:
            return True
    return False


def _device_module(ctx: FileContext, callee: cst.BaseExpression, scope: cst.CSTNode) -> bool:
    """`callee` is a module (the engine's fact in the loop's scope) that the engine places on the
    accelerator, or that the loop's function (or the module's top level) moves there, also under
    a condition (`if cuda: generator.cuda()`)."""
    name = dotted_name(callee)
    if name is None:
        return False
    fact = file_facts(ctx).scope(scope).facts.get(name)
    if fact is None or fact.kind != MODULE:
        return False
    if fact.where == ACCELERATOR:
        return True
    return any(
        moves_to_accelerator(call) and dotted_name(receiver(call)) == name
        for call in ctx.index.of_type(cst.Call)
        if scope_of(ctx, call) in (scope, ctx.module)
    )


def _own(ctx: FileContext, node: cst.CSTNode, loop: cst.For) -> bool:
    """`node` runs in `loop`'s body and not inside a nested loop over another loader."""
    for ancestor in ctx.index.ancestors(node):
        if ancestor is loop:
            return True
        if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
        if (
            type(ancestor) is cst.For
            and iterated_loader(ctx, ancestor.iter) is not None
            and _names_a_loader(ctx, ancestor)
        ):
            return False
    return False


def _names_a_loader(ctx: FileContext, loop: cst.For) -> bool:
    """An inner loop over something that is itself a loader (`for x in DataLoader(...)`, or a name
    holding one), not over a plain sequence (`for micro in batch.chunk(4)`)."""
    loader = iterated_loader(ctx, loop.iter)
    return loader is not None and bool(loader_calls(ctx, loader, scope_of(ctx, loop)))


def _per_item_work(ctx: FileContext, call: cst.Call) -> bool:
    """The loader's dataset shows per-item work that worker processes would take off the training
    process: every value it can hold is a torchvision/torchaudio dataset, takes a `transform`, or is
    a `Dataset` class of this file whose `__getitem__` calls something (`Image.open`, a transform).
    A dataset the file does not show (a parameter nobody here passes, an import) is unknown: silent."""
    dataset = keyword(call, "dataset") or (positional(call)[0] if positional(call) else None)
    values = _dataset_values(ctx, dataset, scope_of(ctx, call), 0) if dataset is not None else None
    return bool(values) and all(_decodes_items(ctx, value) for value in values)  # type: ignore[union-attr]  # bool(values): not None


def _dataset_values(
    ctx: FileContext, node: cst.BaseExpression, scope: cst.CSTNode, depth: int
) -> list[cst.Call] | None:
    """The constructor calls a dataset expression can hold, through names, `self.x`, `Subset(...)`
    and the arguments callers in the file pass for a parameter; None when one is unknown."""
    if depth > _MAX_DEPTH:
        return None
    if type(node) is cst.Call:
        if ctx.qualified_name(node.func) in SUBSETS and positional(node):
            return _dataset_values(ctx, positional(node)[0], scope, depth + 1)
        return [node]
    if type(node) is cst.Name:
        values = values_of(ctx, node.value, scope)
        if values is None:
            return None
        pairs: list[tuple[cst.BaseExpression | None, cst.CSTNode]] = [
            (v, scope_of(ctx, v) if v is not None else scope) for v in values if v is not None
        ]
        if None in values:
            passed = (
                passed_arguments(ctx, scope, node.value)
                if type(scope) is cst.FunctionDef and is_parameter(scope, node.value)
                else None
            )
            if passed is None:
                return None
            pairs.extend(passed)
    else:
        attribute = attribute_values(ctx, node)
        if attribute is None or None in attribute:
            return None
        pairs = [(v, scope_of(ctx, v)) for v in attribute if v is not None]
    out: list[cst.Call] = []
    for value, value_scope in pairs:
        found = _dataset_values(ctx, value, value_scope, depth + 1) if value is not None else None
        if found is None:
            return None
        out.extend(found)
    return out


def _decodes_items(ctx: FileContext, call: cst.Call) -> bool:
    qualified = ctx.qualified_name(call.func) or ""
    if qualified.startswith(PER_ITEM_PACKAGES):
        return True
    if any(arg.keyword is not None and arg.keyword.value in TRANSFORM_KEYWORDS for arg in call.args):
        return True
    if type(call.func) is not cst.Name:
        return False
    for statement in ctx.module.body:
        if type(statement) is cst.ClassDef and statement.name.value == call.func.value:
            return any(
                type(method) is cst.FunctionDef and method.name.value == "__getitem__" and _does_work(ctx, method)
                for method in statement.body.body
            )
    return False


def _does_work(ctx: FileContext, method: cst.FunctionDef) -> bool:
    """`__getitem__` calls something beyond plain indexing helpers (`len`, `int`, `tuple`...)."""
    for node in ctx.index.walk(method.body):
        if type(node) is cst.Call:
            name = node.func.value if type(node.func) is cst.Name else None
            if name not in PLAIN_CALLS:
                return True
    return False
