from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.model_events import (
    WrapperSite,
    returned_wrapper_sites,
    short,
    spread_by_loader,
    wrapped_split,
    wrapper_sites,
)
from devicelint.analysis.model_events.scopes import statement_of
from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.helpers import calls_of
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# Verbs that mean "cut into pieces" go with the model itself; softer verbs need the pieces named.
_CUT = r"\b(split|splits|splitting|partition\w*|divid\w*|shard\w*|cut)\b"
_PLACE = r"\b(distribut\w*|spread\w*|assign\w*|plac\w*|put\w*|allocat\w*|scatter\w*)\b"
_PIECES = r"\b(layers?|submodules?|sub-modules?|stages?|blocks|parts?\s+of|halves|half\s+of|pieces)\b"
_WHOLE = r"\b(model|network|net)\b"
_GPUS = r"\b(gpus?|devices|cards?|cuda:\d|vram)\b"
# "the model is too big for one GPU": wanting DataParallel to make it fit is wanting a split.
_TOO_BIG = (
    r"\b(too\s+(big|large|huge)|(does|do|will|would|can|could)\s*(n'?t|not)\s+fit\w*|won'?t\s+fit|cannot\s+fit|"
    r"not\s+fit\w*\s+(on|in|into)|out\s+of\s+memory|oom|exceeds?)\b"
)
_MODEL_PARALLEL = re.compile(r"\bmodel[- _]?parallel", re.I)
_DATA_WORDS = re.compile(r"\b(batch\w*|data[- _]parallel\w*|replica\w*|replicat\w*|copy|copies)\b", re.I)
_NOT_MODEL_PARALLEL = re.compile(
    r"\b(not|no|instead\s+of|without|rather\s+than)\s+(a\s+|for\s+)?model[- _]?parallel", re.I
)
_CUT_RE = re.compile(_CUT, re.I)
_PLACE_RE = re.compile(_PLACE, re.I)
_PIECES_RE = re.compile(_PIECES, re.I)
_WHOLE_RE = re.compile(_WHOLE, re.I)
_GPUS_RE = re.compile(_GPUS, re.I)
_TOO_BIG_RE = re.compile(_TOO_BIG, re.I)


def split_intent(text: str) -> str | None:
    """The sentence of a comment that says layers are split across GPUs, else None."""
    for sentence in re.split(r"(?<=[.;!?])\s+|\n", text):
        if not sentence.strip() or _DATA_WORDS.search(sentence):
            continue
        if _MODEL_PARALLEL.search(sentence) and not _NOT_MODEL_PARALLEL.search(sentence):
            return sentence.strip()
        if not _GPUS_RE.search(sentence):
            continue
        if _CUT_RE.search(sentence) and (_WHOLE_RE.search(sentence) or _PIECES_RE.search(sentence)):
            return sentence.strip()
        if _PLACE_RE.search(sentence) and _PIECES_RE.search(sentence):
            return sentence.strip()
        if _TOO_BIG_RE.search(sentence):
            return sentence.strip()
    return None


def _comment_text(ctx: FileContext, site: WrapperSite) -> str:
    """Comments on and right above the wrapper's statement (and its `if`/`with` header when it opens the block).

    Docstrings are left out: a function's docstring often describes several alternatives."""
    wrapped = dotted_name(site.wrapped) if site.wrapped is not None else None
    parts = _comments_at(ctx, site.statement, wrapped)
    function = ctx.index.enclosing_function(site.call)
    body = function.body.body if function is not None and type(function.body) is cst.IndentedBlock else ()
    if function is not None and len(body) == 1 and body[0] is site.statement:
        # a helper that only wraps (`return nn.DataParallel(m, ...).cuda()`): the intent is written
        # where it is called (`# spread it over the 4 GPUs` above `model = wrap(model)`)
        for call in calls_of(ctx, function):
            statement = statement_of(ctx, call)
            if statement is not None:
                parts.extend(_comments_at(ctx, statement, None))
    return "\n".join(parts)


def _comments_at(ctx: FileContext, statement: cst.CSTNode, wrapped: str | None) -> list[str]:
    parts: list[str] = []
    holders: list[cst.CSTNode] = [statement]
    parent = ctx.index.parent(statement)
    block = ctx.index.parent(parent) if type(parent) is cst.IndentedBlock else None
    if type(parent) is cst.IndentedBlock and parent.body and parent.body[0] is statement and block is not None:
        holders.append(block)  # first statement of an `if`/`with` block: the header's comments count
    previous = _previous_statement(ctx, statement)
    if previous is not None and wrapped is not None and _binds(previous, wrapped):
        holders.append(previous)  # `# too big for one GPU` above `model = Net()`, then the wrapper
    for holder in holders:
        for line in getattr(holder, "leading_lines", ()):
            if line.comment is not None:
                parts.append(line.comment.value.lstrip("#").strip())
        trailing = getattr(holder, "trailing_whitespace", None)
        if trailing is not None and trailing.comment is not None:
            parts.append(trailing.comment.value.lstrip("#").strip())
    if isinstance(block, cst.BaseCompoundStatement):
        body = getattr(block, "body", None)
        header = getattr(body, "header", None)
        if header is not None and header.comment is not None:
            parts.append(header.comment.value.lstrip("#").strip())
    return parts


def _previous_statement(ctx: FileContext, statement: cst.CSTNode) -> cst.CSTNode | None:
    parent = ctx.index.parent(statement)
    body = getattr(parent, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    for index, child in enumerate(body):
        if child is statement:
            return body[index - 1] if index > 0 else None
    return None


def _binds(statement: cst.CSTNode, name: str) -> bool:
    """`statement` is `name = ...` (a simple statement line assigning `name`)."""
    if type(statement) is not cst.SimpleStatementLine:
        return False
    return any(
        isinstance(small, (cst.Assign, cst.AnnAssign))
        and any(
            dotted_name(t) == name
            for t in ([a.target for a in small.targets] if isinstance(small, cst.Assign) else [small.target])
        )
        for small in statement.body
    )


@register
class DataParallelAsModelParallelism(Rule):
    """
    ## What it does
    Flags `nn.DataParallel` (and `DistributedDataParallel` given `device_ids`) wrapping a model
    whose submodules the code places on different devices, either in the model's `__init__`
    (`self.enc = Enc().to("cuda:0")`, `self.dec = Dec().to("cuda:1")`) or on the instance
    before wrapping (`model.dec.to("cuda:1")`, or a method of its class called on it, such as
    `model.place()` moving `self.dec.cuda(1)`), or by its loader (`from_pretrained(...,
    device_map="auto")`, `model.parallelize()`), also when the model reaches the wrapper as a
    parameter (`self.model = model` in a trainer's `__init__`) that every call in the file fills
    with such a model (through `peft.get_peft_model` or `torch.compile`, which keep it where it
    is). Also flags `nn.DataParallel` whose comment
    says it splits the model's layers across GPUs, or that the model is too big for one GPU
    ("does not fit on a single card", "too large for one GPU", "out of memory").

    ## Why it is a bug on a GPU
    DataParallel does not distribute layers. On every forward pass it copies the *whole* model
    from `device_ids[0]` to each listed GPU and gives each copy a slice of the batch. It
    refuses a model with parameters off `device_ids[0]` (`RuntimeError: module must have its
    parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device:
    cuda:1`), every GPU must hold the full model (so a model that did not fit on one GPU still
    does not fit), and a hand-split model collapsed onto one GPU breaks the `.to("cuda:1")`
    calls in its `forward`. `DistributedDataParallel` accepts a multi-device module only with
    `device_ids=None`.

    ## Example
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = Encoder().to("cuda:0")
            self.dec = Decoder().to("cuda:1")

    # DataParallel distributes the layers of the model across the GPUs
    model = nn.DataParallel(Net(), device_ids=[0, 1])
    ```

    ## Use instead
    Either manual model parallelism, moving the activations between stages:
    ```python
    class Net(nn.Module):
        def forward(self, x):
            h = self.enc(x.to("cuda:0"))
            return self.dec(h.to("cuda:1"))

    model = Net()  # no DataParallel
    ```
    or data parallelism over a model that sits whole on one device
    (`DistributedDataParallel(Net().to(rank), device_ids=[rank])`), or pipeline parallelism
    (`torch.distributed.pipelining`) or FSDP for a model that does not fit on one GPU.

    ## Fix safety
    No fix: choosing between data, pipeline and model parallelism is a design decision.

    ## Known limits
    Placements are seen in the same file only: a training script that imports a hand-split
    model class from another module is reported only through its comments. Devices held in
    variables count as different only when literal (`"cuda:0"` vs `"cuda:1"`, `1`) or indexed
    from the same list (`devs[0]` vs `devs[1]`), or when the module's `__init__` places two
    submodules on devices named alike but for their stage number (`self.dev0`/`self.dev1` from
    the config). A loader is followed into a function of the file that returns its model.
    Comment intent is read only from comments on and right above the wrapping statement, and
    above the statement just before it when that one builds the wrapped model (not from
    docstrings); comments that mention the batch, replicas or data parallelism are taken as
    correct.
    """

    code = "DL201"
    name = "dataparallel-as-model-parallelism"
    summary = "DataParallel replicates the whole model and splits the batch; it does not split layers across GPUs."
    message = "`{call}` {reason}: {explanation}; {advice}"
    tokens = ("DataParallel",)

    _DP_EXPLANATION = (
        "DataParallel does not split layers across GPUs, it copies the whole model to every GPU in "
        "`device_ids` and splits the batch, and it needs every parameter on `device_ids[0]`"
    )
    _ADVICE = (
        "drop DataParallel and move activations between stages by hand, or use "
        "`torch.distributed.pipelining` or FSDP for a model too big for one GPU"
    )

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        # direct wrappers, and the calls of a helper of the file that wraps the model it is handed
        handed = [site for site in returned_wrapper_sites(ctx) if site.wrapped is not None]
        for site in wrapper_sites(ctx) + handed:
            found = wrapped_split(ctx, site)
            spread = spread_by_loader(ctx, site) if found is None else None
            if spread is not None and (
                site.kind == "DataParallel" or (site.device_ids is not None and not _is_none(site.device_ids))
            ):
                yield self.violation(
                    site.call,
                    call=short(ctx, site.call),
                    reason=f"wraps a model that {spread}",
                    explanation=(
                        self._DP_EXPLANATION
                        if site.kind == "DataParallel"
                        else "a module spread over several devices needs `device_ids=None`"
                    ),
                    advice='load it on one device (`device_map={"": local_rank}`) for data parallelism, or drop the wrapper and let `device_map` split it',
                )
                continue
            if site.kind == "DistributedDataParallel":
                if found is not None and site.device_ids is not None and not _is_none(site.device_ids):
                    model, (first, second) = found
                    yield self.violation(
                        site.call,
                        call=short(ctx, site.call),
                        reason=f"passes `device_ids` for `{model}`, whose `{first.attr}` is on {first.device.label()} and `{second.attr}` on {second.device.label()}",
                        explanation="a module spread over several devices needs `device_ids=None`, and DDP then replicates the split model once per process",
                        advice="drop `device_ids`, or use FSDP or `torch.distributed.pipelining` to split a model that does not fit",
                    )
                continue
            if found is not None:
                model, (first, second) = found
                yield self.violation(
                    site.call,
                    call=short(ctx, site.call),
                    reason=f"wraps `{model}`, whose `{first.attr}` is on {first.device.label()} and `{second.attr}` on {second.device.label()}",
                    explanation=self._DP_EXPLANATION,
                    advice=self._ADVICE,
                )
                continue
            sentence = split_intent(_comment_text(ctx, site))
            if sentence is not None:
                quoted = sentence if len(sentence) <= 70 else sentence[:67].rsplit(" ", 1)[0] + "..."
                yield self.violation(
                    site.call,
                    call=short(ctx, site.call),
                    reason=f'is described as splitting the model across GPUs ("{quoted}")',
                    explanation=self._DP_EXPLANATION,
                    advice=self._ADVICE,
                )


def _is_none(node: cst.BaseExpression) -> bool:
    return type(node) is cst.Name and node.value == "None"
