from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from devicelint.analysis.names import dotted_name
from devicelint.analysis.negation import through_not
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register


@dataclass(frozen=True)
class _Removed:
    prefix: str
    removed_in: str
    advice: str


REMOVED = (
    _Removed(
        "torch.distributed.pipeline",
        "2.4",
        "use `torch.distributed.pipelining` (`pipeline(...)`, `PipelineStage`, `ScheduleGPipe`)",
    ),
    _Removed(
        "torch.nn.parallel.DistributedDataParallelCPU",
        "1.5",
        "use `torch.nn.parallel.DistributedDataParallel` with the `gloo` backend and no `device_ids`",
    ),
    _Removed(
        "torch.distributed.deprecated",
        "1.2",
        "use `torch.distributed` (`init_process_group`, `DistributedDataParallel`)",
    ),
)
_LAST_PARTS = frozenset(entry.prefix.rsplit(".", 1)[1] for entry in REMOVED)
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "AttributeError"})


def _match(name: str | None) -> _Removed | None:
    if not name:
        return None
    for entry in REMOVED:
        if name == entry.prefix or name.startswith(entry.prefix + "."):
            return entry
    return None


@register
class RemovedParallelApi(Rule):
    """
    ## What it does
    Flags imports and uses of parallelism APIs that torch has removed:
    `torch.distributed.pipeline` (including `torch.distributed.pipeline.sync.Pipe`, removed in
    torch 2.4), `torch.nn.parallel.DistributedDataParallelCPU` and
    `torch.distributed.deprecated`. Aliases resolve (`import torch.distributed as dist;
    dist.pipeline.sync.Pipe`). The rule applies to torch 2.4 and later: with `torch-version`
    set to an older release in the configuration it is silent.

    ## Why it is a bug on a GPU
    The import fails (`ModuleNotFoundError: No module named 'torch.distributed.pipeline'`) as
    soon as the job runs on a current torch, usually on the cluster image rather than on the
    laptop where the code was written. Pipeline-parallel training code built on `Pipe` must be
    ported to `torch.distributed.pipelining`.

    ## Example
    ```python
    from torch.distributed.pipeline.sync import Pipe

    model = Pipe(nn.Sequential(stage0, stage1), chunks=8)
    ```

    ## Use instead
    ```python
    from torch.distributed.pipelining import ScheduleGPipe, pipeline

    pipe = pipeline(model, mb_args=(example_microbatch,))
    ```

    ## Fix safety
    No fix: `torch.distributed.pipelining` has a different API (stages, schedules, one
    process per stage).

    ## Known limits
    Imports inside `try:` blocks that catch `ImportError`, under an `if` that tests a version, or
    on the path where a feature test of torch fails (the `else` of `if hasattr(torch.distributed,
    "ReduceOp"):`), are taken as deliberate compatibility paths.
    A file that imports a removed module is reported at the import only, not at each use.
    """

    code = "DL206"
    name = "removed-parallel-api"
    summary = "`torch.distributed.pipeline` (`Pipe`) and other removed parallel APIs fail to import."
    message = "`{api}` was removed in torch {removed}; {advice}"
    torch_versions = ">=2.4"
    tokens = ("pipeline", "DistributedDataParallelCPU", "deprecated")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if not torch_in(ctx.torch_version, self.torch_versions):
            return
        imported: set[str] = set()
        for node in ctx.index.of_type(cst.Import):
            for alias in node.names:
                entry = _match(dotted_name(alias.name))
                if (
                    entry is not None
                    and torch_in(ctx.torch_version, f">={entry.removed_in}")
                    and not _guarded(ctx, node)
                ):
                    imported.add(entry.prefix)
                    yield self.violation(
                        alias, api=dotted_name(alias.name), removed=entry.removed_in, advice=entry.advice
                    )
        for node in ctx.index.of_type(cst.ImportFrom):
            if node.relative or node.module is None:
                continue
            base = dotted_name(node.module)
            names = [] if isinstance(node.names, cst.ImportStar) else [dotted_name(a.name) for a in node.names]
            full = _match(base) and (f"{base}.{names[0]}" if len(names) == 1 else base)
            if not full:
                full = next((f"{base}.{n}" for n in names if _match(f"{base}.{n}")), None)
            entry = _match(full)
            if entry is None or not torch_in(ctx.torch_version, f">={entry.removed_in}") or _guarded(ctx, node):
                continue
            imported.add(entry.prefix)
            yield self.violation(node, api=full, removed=entry.removed_in, advice=entry.advice)
        for node in ctx.index.of_type(cst.Attribute):
            if node.attr.value not in _LAST_PARTS:
                continue
            entry = _match(ctx.qualified_name(node))
            if entry is None or entry.prefix in imported or _match(ctx.qualified_name(node.value)):
                continue
            if not torch_in(ctx.torch_version, f">={entry.removed_in}") or _guarded(ctx, node):
                continue
            yield self.violation(node, api=entry.prefix, removed=entry.removed_in, advice=entry.advice)


def torch_in(target: str | None, specifier: str) -> bool:
    """Whether the targeted torch release (None: the latest) falls in `specifier`."""
    if not target:
        return True
    try:
        return Version(target) in SpecifierSet(specifier)
    except (InvalidVersion, InvalidSpecifier):
        return True


def _guarded(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Inside a `try:` body whose handlers catch import failures, or under an `if` that tests a
    version (`if torch.__version__ < "2.4":`): a deliberate compatibility path."""
    child: cst.CSTNode = node
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) is cst.If and child is ancestor.body and "version" in ctx.code_for(ancestor.test).lower():
            return True
        if type(ancestor) is cst.If and _feature_test(ctx, ancestor.test) == (child is ancestor.body):
            return True  # the path of a torch that lacks what `hasattr(torch..., "X")` asks for
        if type(ancestor) is cst.Try and child is ancestor.body:
            for handler in ancestor.handlers:
                if handler.type is None:
                    return True
                caught = handler.type.elements if type(handler.type) is cst.Tuple else [handler.type]
                for item in caught:
                    value = item.value if type(item) is cst.Element else item
                    if (dotted_name(value) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS:
                        return True
        child = ancestor
    return False


def _feature_test(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    """False for `hasattr(torch.<...>, "X")` (its `else` runs on a torch without `X`), True for
    its `not`; None for any other test."""
    return through_not(test, lambda plain: _torch_hasattr(ctx, plain))


def _torch_hasattr(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    if not (
        type(test) is cst.Call
        and type(test.func) is cst.Name
        and test.func.value == "hasattr"
        and len(test.args) == 2
        and (ctx.qualified_name(test.args[0].value) or "").split(".", 1)[0] == "torch"
    ):
        return None
    return False
