"""DL102/DL103/DL104 on the shapes of issue 11: plain containers filled elsewhere, custom movers,
and discarded moves on values of unknown type."""

from __future__ import annotations

import textwrap

import libcst as cst

from devicelint.analysis.placement_classes import class_facts, library_module, local_containers, returned_container
from devicelint.context import FileContext
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def _context(source: str) -> FileContext:
    source = textwrap.dedent(source)
    return FileContext(path="x.py", source=source, module=cst.parse_module(source))


def _lines(code: str, source: str) -> list[int]:
    rule = find_rule(code)
    assert rule is not None
    result = lint_source(textwrap.dedent(source), "x.py", EngineOptions(rules=(rule,)))
    return [f.line for f in result.findings if f.code == code]


def test_local_containers_record_fills_and_hand_offs() -> None:
    ctx = _context(
        """
        import torch.nn as nn

        def build(n):
            kept = []
            wrapped = []
            for _ in range(n):
                kept.append(nn.Linear(2, 2))
                wrapped += [nn.Linear(2, 2)]
            body = nn.Sequential(*wrapped)
            return kept
        """
    )
    build = next(f for f in ctx.index.of_type(cst.FunctionDef) if f.name.value == "build")
    boxes = local_containers(ctx, build)
    assert boxes["kept"].kind == "list" and not boxes["kept"].handed_on and boxes["kept"].returned
    assert len(boxes["kept"].fills) == 2  # the literal and the append
    assert boxes["wrapped"].handed_on
    call = cst.parse_expression("build(3)")
    assert returned_container(ctx, call, None) is boxes["kept"]


def test_library_modules_and_buffer_facts() -> None:
    ctx = _context(
        """
        import torch
        import torchmetrics
        from torchmetrics.functional import accuracy
        from torch import nn

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("mean", torch.zeros(3))
                for i in range(2):
                    self.register_buffer(f"b{i}", torch.zeros(3))
        """
    )
    assert library_module(ctx, cst.parse_expression("torchmetrics.Accuracy(task='binary')")) == "Accuracy"
    assert library_module(ctx, cst.parse_expression("accuracy(p, t)")) is None  # a function, not a metric
    assert library_module(ctx, cst.parse_expression("timm.create_model('resnet18')")) is None  # timm not imported
    facts = class_facts(ctx)["M"]
    assert facts.buffers == {"mean"} and "mean" in facts.registered and facts.dynamic_buffers


def test_dl103_local_list_builder_and_metrics_dict() -> None:
    source = """
    import torch.nn as nn
    import torchmetrics

    def blocks(n):
        out = [nn.Linear(4, 4) for _ in range(n)]
        return out

    class M(nn.Module):
        def __init__(self, n):
            super().__init__()
            layers = []
            for _ in range(n):
                layers.append(nn.Conv1d(4, 4, 3))
            self.layers = layers
            self.blocks = blocks(n)
            self.metrics = {"acc": torchmetrics.Accuracy(task="binary")}
            self.ok = nn.ModuleList(blocks(n))
    """
    assert _lines("DL103", source) == [15, 16, 17]


def test_dl102_stale_buffer_list_and_partial_custom_to() -> None:
    source = """
    import torch
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.levels = []
            for i in range(3):
                t = torch.rand(4)
                self.register_buffer(f"level{i}", t)
                self.levels.append(t)
            self.a = torch.tensor([1.0, 2.0])
            self.b = torch.tensor([3.0, 4.0])

        def cuda(self, device=None):
            self.a = self.a.cuda(device)
            return super().cuda(device)

        def forward(self, x):
            return [x * level + self.a + self.b for level in self.levels]
    """
    assert _lines("DL102", source) == [12, 14]


def test_dl102_silent_when_every_use_moves_to_the_input_device() -> None:
    source = """
    import torch
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.randn(4, 4)
            self.parts = [torch.randn(4) for _ in range(3)]

        def forward(self, x):
            y = x @ self.w.to(x.device)
            for p in self.parts:
                y = y + p.to(x.device)
            return y + self.w[0].to(x.device, x.dtype)
    """
    assert _lines("DL102", source) == []


def test_dl104_unknown_receivers_decided_by_use() -> None:
    source = """
    def step(model, loader, fetch, tokenizer, device):
        for x, y in fetch():
            x.to(device)
            y.to(device)
            out = model(x)
            loss = (out - y).abs().mean()
        enc = tokenizer("hi", return_tensors="pt")
        enc.to(device)
        for batch in loader:
            batch.to(device)
            model(batch)
        helper = model.module
        helper.to(device)
    """
    assert _lines("DL104", source) == [4, 5]


STATELESS_BLOCKS = """
import torch
import torch.nn as nn


class Trend(nn.Module):
    def __init__(self, width, step=1):
        super().__init__()
        self.width = width
        self.pool = nn.MaxPool1d(width, stride=step)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.pool(x))


class Decompose(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.trend = Trend(width)

    def forward(self, x):
        return x - self.trend(x)


class MultiDecompose(nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.parts = [Decompose(w) for w in widths]

    def forward(self, x):
        return sum(p(x) for p in self.parts) / len(self.parts)
"""


def test_dl103_a_list_of_the_file_s_parameter_free_blocks_holds_nothing_to_move() -> None:
    # fresh30 W2: blocks of pooling and activations only lose nothing outside a ModuleList
    assert _lines("DL103", STATELESS_BLOCKS) == []


def test_dl103_the_same_list_once_a_block_holds_weights_is_reported() -> None:
    weighted = STATELESS_BLOCKS.replace("self.act = nn.GELU()", "self.act = nn.Conv1d(1, 1, 1)")
    assert _lines("DL103", weighted) == [29]
    handed = STATELESS_BLOCKS.replace(
        "self.trend = Trend(width)", "self.trend = Trend(width)\n        self.extra = nn.Parameter(torch.ones(1))"
    )
    assert _lines("DL103", handed) == [30]


HOST_RECORD = """
import torch
import torch.nn as nn


class Coder(nn.Module):
    def __init__(self, n, keep=False):
        super().__init__()
        self.head = nn.Linear(16, n)
        self.keep = keep
        if keep:
            self.seen = torch.zeros((1024,), dtype=torch.long)
            self.at = 0

    def record(self, ids):
        ids = ids.flatten()
        self.seen[self.at : self.at + ids.numel()] = ids.cpu()
        self.seen[:1] += ids[:1].detach().to("cpu")
        self.at += ids.numel()

    def histogram(self):
        return self.seen[: self.at].bincount()

    def forward(self, x):
        ids = self.head(x).argmax(-1)
        if self.keep:
            self.record(ids)
        return ids
"""


def test_dl102_a_tensor_the_class_fills_only_with_host_copies_is_kept_there_on_purpose() -> None:
    # fresh30 W7: a debug record written with `.cpu()` values stays on the host by design
    assert _lines("DL102", HOST_RECORD) == []


def test_dl102_the_same_record_filled_with_device_values_is_reported() -> None:
    assert _lines("DL102", HOST_RECORD.replace("= ids.cpu()", "= ids")) == [12]


REGISTERED_APART = """
import torch.nn as nn


class Tables(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.kernels = []
        self.slots = nn.ModuleDict()
        for i, n in enumerate(sizes):
            table = nn.Embedding(n, 4)
            self.kernels.append(table)
            slot = nn.Module()
            slot.register_parameter("weight", table.weight)
            self.slots[str(i)] = slot
        self.views = [nn.Linear(4, 4) for _ in sizes]
        self.shadow = nn.ModuleDict()
        for j, view in enumerate(self.views):
            self.shadow[str(j)] = nn.Module()
            self.shadow[str(j)].register_parameter("weight", nn.Parameter(view.weight))

    def forward(self, ids):
        return [v(k(i)) for k, v, i in zip(self.kernels, self.views, ids)]
"""


def test_dl103_lists_whose_elements_tensors_are_registered_apart_are_managed_by_hand() -> None:
    # fresh30 W2: each element's weight is registered through another, registered module
    assert _lines("DL103", REGISTERED_APART) == []


def test_dl103_the_same_lists_without_the_registrations_are_reported() -> None:
    bare = REGISTERED_APART.replace('            slot.register_parameter("weight", table.weight)\n', "").replace(
        '            self.shadow[str(j)].register_parameter("weight", nn.Parameter(view.weight))\n', ""
    )
    assert _lines("DL103", bare) == [12, 15]
