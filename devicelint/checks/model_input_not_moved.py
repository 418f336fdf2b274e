from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.device_in_scope import bound_before, device_in_scope
from devicelint.analysis.facts import Meeting, file_facts
from devicelint.analysis.imported_helpers import argument_for, imported_calls, imported_method_calls, moved_model
from devicelint.context import FileContext
from devicelint.fix_text import adding_lines, code_in_place, line_before, own_line_statement
from devicelint.rule_base import FixProposal, Rule, Violation, register


@register
class ModelInputNotMoved(Rule):
    """
    ## What it does
    Flags a batch from a `DataLoader` that is passed, never moved, to a model that the same
    function moved to a device (`model.to(device)`, `model.cuda()`), or that meets the model's
    device outputs (targets handed to the loss, labels compared with predictions). A whole
    batch spread into the model (`model(**batch)`) counts, and so does what a tokenizer or
    processor returns with `return_tensors="pt"`, spread into a model on the device. A tracer,
    exporter or graph writer runs the model on its example the same way
    (`writer.add_graph(model, batch)`, `torch.jit.trace(model, batch)`,
    `torch.onnx.export(model, (batch, mask), path)`, `torch.export.export(model, (batch,))`). With the
    project index, a model moved here and a loader handed together to a function of another
    module that loops over the loader and calls the model on what it yields, moving nothing,
    is reported at the call.

    ## Why it is a bug on a GPU
    A `DataLoader` yields CPU tensors (pinned or not), and a tokenizer builds its tensors on the
    CPU. Moving the model moves its parameters only; the first layer then sees a CPU input and fails with `Expected all tensors to be on
    the same device` (or `Input type (torch.FloatTensor) and weight type
    (torch.cuda.FloatTensor) should be the same`).

    ## Example
    ```python
    model = Net().to(device)
    for images, labels in train_loader:
        loss = criterion(model(images), labels)
    ```

    ## Use instead
    ```python
    model = Net().to(device)
    for images, labels in train_loader:
        images, labels = images.to(device), labels.to(device)
        loss = criterion(model(images), labels)
    ```

    ## Fix safety
    The fix moves the batch with the device the code already moves the model to: a line
    `x = x.to(device)` just above the statement where the batch first meets the model (so the
    rest of the step uses the moved copy), or `batch[0].to(device)` in place for an item of a
    batch. A loader's batch handed on as `model(**batch)` is a mapping (a plain dict from the
    default collate, which has no `.to()`): its entries are moved one by one, those that have a
    `.to()` (`batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}`); a
    tokenizer's encoding keeps `.to(device)`. It is unsafe: the step then also sends that tensor wherever it went before (a CPU
    metric, a log) on the device, and a `non_blocking=True` copy may be what the author wants.
    The device is the expression the code moves the model (or the other operand) to: a name
    bound at that point (`device`, `args.device`, `self.device`) or a literal (`"cuda"`). No fix
    when there is none, as when the model is moved with a bare `.cuda()` (the batch would need
    `.cuda()` too; the finding says so), or when the batch name sits inside a one-line suite.

    ## Known limits
    Only loops over a `DataLoader(...)` built in the file, or over a name containing `loader`
    (also through `enumerate`, `tqdm` and `iter`), are followed, and only when the model is
    moved in the same function. A batch moved by a helper, by `accelerate`, by Lightning or
    inside the model is not tracked and not reported; a whole batch that is not unpacked is
    only followed through indexing (`batch[0]`, `batch["x"]`) and `**batch`. A tokenizer's
    output is only followed into `model(**inputs)` of a model certainly on the accelerator. A model wrapped in
    `nn.DataParallel` or `DistributedDataParallel` moves (scatters) its inputs itself, so CPU
    inputs handed to the wrapper are not reported.
    """

    code = "DL105"
    name = "model-input-not-moved"
    summary = "A DataLoader batch reaches a model on the device without being moved."
    message = "`{batch}` comes from {source} and is still on the CPU, but {where}; {advice}"
    fix_availability = "unsafe"
    # `.to(`/`.cuda(`: a loop over any iterable that moves what it yields walks host batches
    tokens = ("loader", "Loader", "LOADER", "return_tensors", ".to(", ".cuda(")
    reads_helpers = True

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        yield from self._meetings(ctx)
        yield from self._handed_to_helpers(ctx)
        yield from self._handed_to_imported_trainers(ctx)

    def _handed_to_helpers(self, ctx: FileContext) -> Iterator[Violation]:
        """A model moved here and a loader handed together to a function of another project
        module that loops over the loader and calls the model on what it yields, moving
        nothing: reported at the model argument, the helper's line named."""
        for _, helper, bound in imported_calls(ctx):
            for model_param, loader_param, batch, line in helper.uses.unmoved_batches:
                model, loader = bound.get(model_param), bound.get(loader_param)
                if model is None or loader is None or not _loader_like(ctx, loader) or not moved_model(ctx, model):
                    continue
                yield self.violation(
                    model,
                    batch=batch,
                    source=f"the loop over `{loader_param}` in `{helper.qualified}` ({helper.path}:{line})",
                    where=f"`{ctx.code_for(model)}`, handed in here, was moved to the device",
                    advice=_move_first(batch, f"next({model_param}.parameters()).device"),
                )

    def _handed_to_imported_trainers(self, ctx: FileContext) -> Iterator[Violation]:
        """A batch handed to a method of a plain class of another project module (a trainer) that
        passes it, unmoved, to the model its `__init__` moved: reported at the argument."""
        facts = file_facts(ctx)
        for call, cls, called in imported_method_calls(ctx):
            for method, params, param, attr, _, line in cls.unmoved_inputs:
                arg = argument_for(call, params, param) if method == called else None
                if arg is None or not facts.value(arg).batch:
                    continue
                yield self.violation(
                    arg,
                    batch=ctx.code_for(arg),
                    source="a DataLoader",
                    where=(
                        f"`{cls.qualified}.{method}` hands it as `{param}` to `self.{attr}`, which its `__init__` "
                        f"moved to the device, without moving it ({cls.path}:{line})"
                    ),
                    advice=f"move it to the model's device in `{method}` (or before the call)",
                )
                break

    def _meetings(self, ctx: FileContext) -> Iterator[Violation]:
        reported: set[int] = set()
        for meeting in file_facts(ctx).meetings:
            if not meeting.cpu.batch or meeting.cpu.origin is None or id(meeting.cpu.origin) in reported:
                continue
            reported.add(id(meeting.cpu.origin))
            batch = ctx.code_for(meeting.cpu_node)
            device = _device_for(ctx, meeting) or _device_of_other(ctx, meeting)
            yield self.violation(
                meeting.cpu_node,
                fix=_move_batch(ctx, meeting),
                batch=batch,
                where=_where(ctx, meeting),
                source='a tokenizer (`return_tensors="pt"` gives CPU tensors)'
                if meeting.cpu.encoded
                else "a DataLoader",
                advice=f"move it first: `{_moved(batch, device, _spread_mapping(ctx, meeting))}`",
            )


def _move_first(batch: str, device: str) -> str:
    return f"move it first: `{_moved(batch, device)}`"


def _moved(batch: str, device: str, mapping: bool = False) -> str:
    """The statement that moves a batch; a loader's mapping (`model(**batch)`) is a plain dict,
    which has no `.to()`: its tensors are moved one by one (a tokenizer's encoding has one)."""
    if mapping:
        return f'{batch} = {{k: v.to({device}) if hasattr(v, "to") else v for k, v in {batch}.items()}}'
    return f"{batch} = {batch}.to({device})"


def _spread_mapping(ctx: FileContext, meeting: Meeting) -> bool:
    """A DataLoader batch handed on as `**batch`: a mapping, from the default collate a dict."""
    parent = ctx.index.parent(meeting.cpu_node)
    return type(parent) is cst.Arg and parent.star == "**" and not meeting.cpu.encoded


def _loader_like(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`loader`, `self.train_loader`, `loaders["val"]`, `DataLoader(...)`."""
    while type(node) is cst.Subscript:
        node = node.value
    if type(node) is cst.Call:
        return (ctx.qualified_name(node.func) or "").endswith("DataLoader")
    return "loader" in ctx.code_for(node).rsplit(".", 1)[-1].lower()


def _move_batch(ctx: FileContext, meeting: Meeting) -> FixProposal | None:
    """`x = x.to(device)` just above the statement where a batch name meets the device (the
    rest of the step then uses the moved copy); `batch[0].to(device)` in place for an item."""
    node = meeting.cpu_node
    device = _device_for(ctx, meeting)
    if device is None:
        return None
    if type(node) is cst.Subscript:
        return FixProposal(
            f"Move it: `.to({device})`",
            safe=False,
            replacements=((node, f"{code_in_place(ctx, node, node)}.to({device})"),),
        )
    statement = own_line_statement(ctx, node)
    if type(node) is not cst.Name or statement is None:
        return None
    moved = _moved(node.value, device, _spread_mapping(ctx, meeting))
    return adding_lines(f"Move it first: `{moved}`", False, line_before(ctx, statement, moved))


def _device_for(ctx: FileContext, meeting: Meeting) -> str | None:
    """The device expression the code moves the model or the other operand to, usable where the
    batch is: a name bound there (`device`, `args.device`) or a literal (`"cuda"`, `"cuda:0"`)."""
    device = meeting.device.device_expr
    if device is not None and _LITERAL_DEVICE.match(device):
        return device
    if device is None or not bound_before(ctx, device, meeting.cpu_node):
        device = device_in_scope(ctx, meeting.cpu_node)
    return device


def _device_of_other(ctx: FileContext, meeting: Meeting) -> str:
    """Where no device name is in reach of the batch: the device of what it meets, spelled so
    that the advice runs where the batch is (`logits.device`, `next(model.parameters()).device`)."""
    other = meeting.device_node
    if other is None or type(other) not in (cst.Name, cst.Attribute):
        return meeting.device.device_expr or "device"
    text = ctx.code_for(other)
    return f"next({text}.parameters()).device" if meeting.how == "module" else f"{text}.device"


_LITERAL_DEVICE = re.compile(r"""^(["'])(cuda|cpu|mps|xpu)(:\d+)?\1$""")


def _where(ctx: FileContext, meeting: Meeting) -> str:
    other = ctx.code_for(meeting.device_node) if meeting.device_node is not None else "a device tensor"
    if meeting.how == "module":
        return f"`{other}` was moved to the device"
    return f"it meets the device tensor `{other}`"
