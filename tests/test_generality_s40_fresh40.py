"""Shapes judged wrong on the fifteenth precision reading (projects nobody had linted): each in
two spellings the corpus did not use, with the true positive next to it that must stay found."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _findings(source: str, path: str = "render/data.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


def _codes(source: str, path: str = "render/data.py") -> list[tuple[int, str]]:
    return [(line, code) for line, code, _ in _findings(source, path)]


# -- DL109: a collate function that only loaders forking no workers run ------------------------

# A plain class that keeps its rays on the GPU and batches them in its own collate method.
RAYS_METHOD = """
    import torch
    from torch.utils.data import DataLoader


    class Rays:
        def __init__(self, poses, device):
            self.poses = poses
            self.device = device

        def collate_rays(self, index):
            return {{"poses": self.poses[index].to(self.device)}}

        def loader(self):
            return DataLoader(list(range(len(self.poses))), batch_size=1, collate_fn=self.collate_rays{workers})
"""

# A module-level collate function that a helper moves, handed to two loaders of the file.
VIEWS_FUNCTION = """
    import torch
    from torch.utils.data import DataLoader

    DEVICE = torch.device("cuda")


    def jitter(size, device):
        return torch.rand(size, 3).to(device)


    def batch_views(items):
        views = torch.stack(items)
        return views + jitter(len(items), DEVICE)


    def loaders(train, val):
        return (
            DataLoader(train, batch_size=4, collate_fn=batch_views),
            DataLoader(val, batch_size=4, collate_fn=batch_views{workers}),
        )
"""


def test_collate_method_of_a_loader_without_workers_is_clean() -> None:
    assert _codes(RAYS_METHOD.format(workers=", num_workers=0")) == []
    assert _codes(RAYS_METHOD.format(workers="")) == []


def test_collate_function_of_loaders_without_workers_is_clean() -> None:
    assert _codes(VIEWS_FUNCTION.format(workers="")) == []
    assert _codes(VIEWS_FUNCTION.format(workers=", num_workers=0")) == []


def test_collate_with_a_loader_that_forks_workers_stays_found() -> None:
    assert _findings(RAYS_METHOD.format(workers=", num_workers=4")) == [
        (
            12,
            "DL109",
            '`.to(self.device)` puts a tensor on the GPU in `collate_rays`; with `num_workers > 0` this fails ("Cannot '
            're-initialize CUDA in forked subprocess"); return CPU tensors and move batches in the training loop',
        )
    ]
    assert _findings(VIEWS_FUNCTION.format(workers=", num_workers=2")) == [
        (
            9,
            "DL109",
            "`.to(device)` puts a tensor on the GPU in `jitter` (called from `batch_views`); with `num_workers > 0` "
            'this fails ("Cannot re-initialize CUDA in forked subprocess"); return CPU tensors and move batches in '
            "the training loop",
        )
    ]


def test_collate_used_otherwise_too_stays_found() -> None:
    # handed on to something that is no loader of the file: its workers are unknown
    source = (
        RAYS_METHOD.format(workers=", num_workers=0")
        + "\n        def batches(self):\n"
        + ("            return make_loader(self, collate=self.collate_rays)\n")
    )
    assert [code for _, code in _codes(source)] == ["DL109"]


# -- DL111: a model moved on the way to the load, or in the `else:` of the `if` that loads ------

# The optimizer is handed in; the resume branch moves the model (through its wrapper) first.
RESUME_HANDED_IN = """
    import torch
    from torch import nn


    def restore(net, optimizer, path, device):
        if path:
            state = torch.load(path, map_location="cpu")
            net.load_state_dict(state["net"])
{first}            optimizer.load_state_dict(state["optim"])
        else:
            net = nn.DataParallel(net)
            net.to(device)
{tail}        return net
"""
MOVED_FIRST = "            net = nn.DataParallel(net)\n            net.to(device)\n"

# A trainer whose optimizer holds parameter groups of its model's parts, resumed under `elif`.
RESUME_GROUPS = """
    import torch


    class Trainer:
        def __init__(self, model, cfg):
            self.model = model
            self.optimizer = torch.optim.SGD(
                [{{"params": self.model.backbone.parameters(), "lr": cfg.lr / 10}}, {{"params": self.model.head.parameters()}}],
                lr=cfg.lr,
            )
            if cfg.resume is None:
                self.model.cuda()
            elif cfg.finetune:
{first}                self.optimizer.load_state_dict(torch.load(cfg.resume, map_location="cpu")["optimizer"])
            else:
                self.model.cuda()
{tail}"""


def test_move_before_the_load_or_in_its_else_is_clean() -> None:
    assert _codes(RESUME_HANDED_IN.format(first=MOVED_FIRST, tail=""), "train.py") == []
    assert _codes(RESUME_GROUPS.format(first="                self.model.cuda()\n", tail=""), "train.py") == []
    # moved again after both branches (a no-op on the resumed path): still clean
    again = RESUME_HANDED_IN.format(first=MOVED_FIRST, tail="        net.cuda()\n")
    assert _codes(again, "train.py") == []


def test_load_before_the_only_move_stays_found() -> None:
    late = RESUME_HANDED_IN.format(first="", tail="        net.cuda()\n")
    assert _findings(late, "train.py") == [
        (
            10,
            "DL111",
            '`optimizer.load_state_dict(state["optim"])` loads the optimizer state while `net` is still on the CPU, so '
            "the state stays there after `net.cuda()`; move the model before building the optimizer and loading "
            "its state",
        )
    ]
    groups = RESUME_GROUPS.format(first="", tail="            self.model.cuda()\n")
    assert [code for _, code in _codes(groups, "train.py")] == ["DL111"]


# -- DL102: a tensor attribute that a call meets with the host copies it makes of the rest -------

# Anchors kept per scale in a plain list, matched against the boxes brought to the host.
ANCHORS_LIST = """
    import torch
    from torch import nn


    def iou(a, b):
        return (a[:, None, 2:] * b[None, :, 2:]).prod(-1)


    class MatchLoss(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.priors = []
            for w, h in sizes:
                self.priors.append(torch.tensor([[0.0, 0.0, w, h]]))

        def forward(self, boxes, scale):
            best = iou({boxes}, self.priors[scale]).argmax(1)
            return best.to(boxes.device)


    loss = MatchLoss([(10, 13), (16, 30)]).to("cuda")
"""

# One table, handed by keyword beside a detached host copy.
TABLE_ATTRIBUTE = """
    import torch
    from torch import nn


    def assign(codes, table):
        return torch.cdist(codes, table).argmin(1)


    class Quantizer(nn.Module):
        def __init__(self, n, d):
            super().__init__()
            self.proj = nn.Linear(d, d)
            self.table = torch.randn(n, d)

        def forward(self, x):
            z = self.proj(x)
            return assign(table=self.table, codes={codes})


    model = Quantizer(512, 64).cuda()
"""


def test_attribute_met_with_host_copies_is_clean() -> None:
    assert _codes(ANCHORS_LIST.format(boxes="boxes.cpu()"), "detect/loss.py") == []
    assert _codes(TABLE_ATTRIBUTE.format(codes='z.detach().to("cpu")'), "vq/model.py") == []


def test_attribute_met_with_device_tensors_stays_found() -> None:
    assert _findings(ANCHORS_LIST.format(boxes="boxes"), "detect/loss.py") == [
        (
            15,
            "DL102",
            "`self.priors` keeps tensors in a plain list: `model.to(device)` moves none of them, and a buffer it "
            "moves is replaced, so the list still holds the CPU tensor; register each one with `register_buffer` "
            "and read it back by name (`getattr(self, name)`)",
        )
    ]
    assert [code for _, code in _codes(TABLE_ATTRIBUTE.format(codes="z.detach()"), "vq/model.py")] == ["DL102"]
