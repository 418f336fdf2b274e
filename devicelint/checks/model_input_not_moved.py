from __future__ import annotations

from typing import Iterator

from devicelint.analysis.facts import Meeting, file_facts
from devicelint.context import FileContext
from devicelint.registry import Rule, Violation, register


@register
class ModelInputNotMoved(Rule):
    """
    ## What it does
    Flags a batch from a `DataLoader` that is passed, never moved, to a model that the same
    function moved to a device (`model.to(device)`, `model.cuda()`), or that meets the model's
    device outputs (targets handed to the loss, labels compared with predictions).

    ## Why it is a bug on a GPU
    A `DataLoader` yields CPU tensors (pinned or not). Moving the model moves its parameters
    only; the first layer then sees a CPU input and fails with `Expected all tensors to be on
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
    No automatic fix: where the move belongs (and whether it should be `non_blocking`) is the
    author's choice.

    ## Known limits
    Only loops over a `DataLoader(...)` built in the file, or over a name containing `loader`
    (also through `enumerate`, `tqdm` and `iter`), are followed, and only when the model is
    moved in the same function. A batch moved by a helper, by `accelerate`, by Lightning or
    inside the model is not tracked and not reported; a whole batch that is not unpacked is
    only followed through indexing (`batch[0]`, `batch["x"]`). A model wrapped in
    `nn.DataParallel` or `DistributedDataParallel` moves (scatters) its inputs itself, so CPU
    inputs handed to the wrapper are not reported.
    """

    code = "DL105"
    name = "model-input-not-moved"
    summary = "A DataLoader batch reaches a model on the device without being moved."
    message = "`{batch}` comes from a DataLoader and is still on the CPU, but {where}; move it first: `{batch} = {batch}.to({device})`"
    tokens = ("loader", "Loader", "LOADER")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        reported: set[int] = set()
        for meeting in file_facts(ctx).meetings:
            if not meeting.cpu.batch or meeting.cpu.origin is None or id(meeting.cpu.origin) in reported:
                continue
            reported.add(id(meeting.cpu.origin))
            batch = ctx.code_for(meeting.cpu_node)
            yield self.violation(
                meeting.cpu_node, batch=batch, where=_where(ctx, meeting), device=meeting.device.device_expr or "device",
            )


def _where(ctx: FileContext, meeting: Meeting) -> str:
    other = ctx.code_for(meeting.device_node) if meeting.device_node is not None else "a device tensor"
    if meeting.how == "module":
        return f"`{other}` was moved to the device"
    return f"it meets the device tensor `{other}`"
