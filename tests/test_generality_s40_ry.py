"""Shapes behind the misses of re-created set ry (session 40), each tested in at least two
spellings other than the pair's, with its one-fix twin clean."""

from __future__ import annotations

import textwrap

import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, path: str = "train/loop.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


# -- factories under an accelerator default device build the lengths on the device (DL118) ----------

CONDITIONAL_TENSOR_TYPE_LENGTHS = """
    import torch
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence


    class Tagger(nn.Module):
        def __init__(self, vocab, dim):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.rnn = nn.GRU(dim, dim, batch_first=True)

        def forward(self, ids, sizes):
            packed = pack_padded_sequence(self.embed(ids), sizes, batch_first=True, enforce_sorted=False)
            return self.rnn(packed)[1]


    def run(batches, vocab, use_gpu):
        if use_gpu:
            torch.set_default_tensor_type(torch.cuda.FloatTensor)
        tagger = Tagger(vocab, 64)
        for ids, raw in batches:
            sizes = torch.as_tensor([len(r) for r in raw])
            tagger(ids, sizes)
"""

CONDITIONAL_TENSOR_TYPE_LIST = CONDITIONAL_TENSOR_TYPE_LENGTHS.replace(
    "torch.as_tensor([len(r) for r in raw])", "[len(r) for r in raw]"
)

CONDITIONAL_DEFAULT_DEVICE_LENGTHS = """
    import torch
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence


    class SpeechEncoder(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.lstm = nn.LSTM(80, dim, batch_first=True)

        def forward(self, feats, lens):
            return self.lstm(pack_padded_sequence(feats, lens, batch_first=True, enforce_sorted=False))


    def main(utterances):
        if torch.cuda.is_available():
            torch.set_default_device("cuda")
        encoder = SpeechEncoder(256)
        for feats, frames in utterances:
            encoder(feats, torch.tensor(frames))
"""

CONDITIONAL_DEFAULT_DEVICE_LIST = CONDITIONAL_DEFAULT_DEVICE_LENGTHS.replace("torch.tensor(frames)", "list(frames)")


# -- an object of the file that copies the parameters it is built from, before the model moves (DL111) ---

SWA_BEFORE_CUDA = """
    import torch


    class WeightAverager:
        def __init__(self, model_params):
            self.sums = [torch.zeros_like(w) for w in model_params]
            self.count = 0

        def update(self, model_params):
            for s, w in zip(self.sums, model_params):
                s.add_(w.detach())
            self.count += 1


    def train(net, loader, epochs):
        averager = WeightAverager(net.parameters())
        net.cuda()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(epochs):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
            averager.update(net.parameters())
"""

SWA_AFTER_CUDA = SWA_BEFORE_CUDA.replace(
    "        averager = WeightAverager(net.parameters())\n        net.cuda()\n",
    "        net.cuda()\n        averager = WeightAverager(net.parameters())\n",
)

SHADOW_BEFORE_PREPARE = """
    import torch
    from accelerate import Accelerator


    class Shadow:
        def __init__(self, params, beta=0.999):
            params = list(params)
            self.beta = beta
            self.copies = [q.detach().clone() for q in params]

        @torch.no_grad()
        def step(self, params):
            for c, q in zip(self.copies, params):
                c.lerp_(q, 1 - self.beta)

        def to(self, device):
            self.copies = [c.to(device) for c in self.copies]
            return self


    def fit(policy, loader):
        accelerator = Accelerator()
        shadow = Shadow(policy.parameters())
        opt = torch.optim.AdamW(policy.parameters(), lr=3e-4)
        policy, opt, loader = accelerator.prepare(policy, opt, loader)
        for batch in loader:
            loss = policy(**batch).loss
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            shadow.step(policy.parameters())
"""

SHADOW_MOVED_AFTER_PREPARE = SHADOW_BEFORE_PREPARE.replace(
    "        for batch in loader:\n",
    "        shadow.to(accelerator.device)\n        for batch in loader:\n",
)


# -- a module's own move that forgets a plain attribute keeping tensors (DL112) ---------------------

MODULE_TO_FORGETS_CACHE = """
    import torch
    import torch.nn as nn


    class Solved:
        def __init__(self, gram, targets):
            self.factor = torch.linalg.cholesky(gram)
            self.weights = torch.cholesky_solve(targets, self.factor)


    class KernelRidge(nn.Module):
        def __init__(self, anchors, targets):
            super().__init__()
            self.anchors = anchors
            self.targets = targets
            self.scale = nn.Parameter(torch.ones(()))
            self.solved = None

        def to(self, *args, **kwargs):
            self.anchors = self.anchors.to(*args, **kwargs)
            self.targets = self.targets.to(*args, **kwargs)
            return super().to(*args, **kwargs)

        def forward(self, x):
            if self.solved is None:
                gram = torch.exp(-torch.cdist(self.anchors, self.anchors) * self.scale)
                self.solved = Solved(gram, self.targets)
            return torch.exp(-torch.cdist(x, self.anchors) * self.scale) @ self.solved.weights
"""

MODULE_TO_RESETS_CACHE = MODULE_TO_FORGETS_CACHE.replace(
    "            self.targets = self.targets.to(*args, **kwargs)\n",
    "            self.targets = self.targets.to(*args, **kwargs)\n            self.solved = None\n",
)

APPLY_FORGETS_CACHE = """
    import torch
    import torch.nn as nn


    class Moments:
        def __init__(self, data):
            self.mean = data.mean(0)
            self.cov = torch.cov(data.T)


    class Whitener(nn.Module):
        def __init__(self, reference):
            super().__init__()
            self.reference = reference
            self.proj = nn.Linear(reference.shape[1], reference.shape[1])
            self.stats = Moments(reference)

        def _apply(self, fn, recurse=True):
            self.reference = fn(self.reference)
            return super()._apply(fn, recurse)

        def forward(self, x):
            return self.proj(x - self.stats.mean)
"""

APPLY_REBUILDS_CACHE = APPLY_FORGETS_CACHE.replace(
    "            self.reference = fn(self.reference)\n",
    "            self.reference = fn(self.reference)\n            self.stats = Moments(self.reference)\n",
)


# -- parts of a batch that the file's collate function builds as plain lists are no tensors (DL105) ---

COLLATE_PLAIN_LIST = """
    import torch
    from torch.utils.data import DataLoader


    def collate(samples):
        images, captions = [], []
        for s in samples:
            images.append(torch.as_tensor(s["image"]))
            captions.append(s["caption"])
        return torch.stack(images), captions


    def train(model, criterion, dataset, device):
        model = model.to(device)
        loader = DataLoader(dataset, batch_size=8, collate_fn=collate)
        for images, captions in loader:
            # the contrastive loss tokenizes the raw captions itself
            loss = criterion(model(images.to(device)), captions)
            loss.backward()
"""

COLLATE_NESTED_PLAIN_LIST = """
    import torch
    from torch.utils.data import DataLoader


    def collate_boxes(batch):
        boxes = []
        crowd = []
        for sample in batch:
            boxes.append(torch.tensor(sample[1]))
            crowd.append(sample[2])
        return torch.stack([b[0] for b in batch]), (boxes, crowd)


    def train(detector, criterion, dataset):
        detector.cuda()
        loader = DataLoader(dataset, batch_size=4, shuffle=True, collate_fn=collate_boxes)
        for images, (boxes, crowd) in loader:
            out = detector(images.cuda())
            loss = criterion(out, [b.cuda() for b in boxes], crowd)
            loss.backward()
"""
# the same loop over token tensors the collate function makes: a list of CPU tensors still meets the loss
COLLATE_TENSOR_LIST = COLLATE_PLAIN_LIST.replace(
    'captions.append(s["caption"])', 'captions.append(torch.tensor(s["tokens"]))'
)


CASES = [
    (
        CONDITIONAL_TENSOR_TYPE_LENGTHS,
        [
            (
                14,
                "DL118",
                "`pack_padded_sequence` needs `lengths` on the CPU, but `sizes` is on the device; pass `sizes.cpu()`",
            )
        ],
    ),
    (CONDITIONAL_TENSOR_TYPE_LIST, []),
    (
        CONDITIONAL_DEFAULT_DEVICE_LENGTHS,
        [
            (
                13,
                "DL118",
                "`pack_padded_sequence` needs `lengths` on the CPU, but `lens` is on the device; pass `lens.cpu()`",
            )
        ],
    ),
    (CONDITIONAL_DEFAULT_DEVICE_LIST, []),
    (
        SWA_BEFORE_CUDA,
        [
            (
                17,
                "DL111",
                "`WeightAverager(net.parameters())` creates WeightAverager's per-parameter `torch.zeros_like(w)` state in its constructor while `net` is still on the CPU, so the state stays there after `net.cuda()` and the first `step()` fails; move the model before building the optimizer",
            )
        ],
    ),
    (SWA_AFTER_CUDA, []),
    (
        SHADOW_BEFORE_PREPARE,
        [
            (
                24,
                "DL111",
                "`Shadow(policy.parameters())` creates Shadow's per-parameter `q.detach().clone()` state in its constructor while `policy` is still on the CPU, so the state stays there after `accelerator.prepare(policy, opt, loader)` and the first `step()` fails; move the model before building the optimizer",
            )
        ],
    ),
    (SHADOW_MOVED_AFTER_PREPARE, []),
    (
        MODULE_TO_FORGETS_CACHE,
        [
            (
                28,
                "DL112",
                "`self.solved` is a plain attribute that holds tensors, and `KernelRidge.to()` moves the module's plain attributes by hand (`self.anchors`) but not this one, so it stays on the device it was made on; move `self.solved` in `to()` as well, or reset it there so it is rebuilt",
            )
        ],
    ),
    (MODULE_TO_RESETS_CACHE, []),
    (
        APPLY_FORGETS_CACHE,
        [
            (
                17,
                "DL112",
                "`self.stats` is a plain attribute that holds tensors, and `Whitener._apply()` moves the module's plain attributes by hand (`self.reference`) but not this one, so it stays on the device it was made on; move `self.stats` in `_apply()` as well, or reset it there so it is rebuilt",
            )
        ],
    ),
    (APPLY_REBUILDS_CACHE, []),
    (COLLATE_PLAIN_LIST, []),
    (
        COLLATE_TENSOR_LIST,
        [
            (
                19,
                "DL105",
                "`captions` comes from a DataLoader and is still on the CPU, but it meets the device tensor `model(images.to(device))`; move it first: `captions = captions.to(device)`",
            )
        ],
    ),
    (COLLATE_NESTED_PLAIN_LIST, []),
]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_shape_and_twin(source: str, expected: list[tuple[int, str, str]]) -> None:
    assert _found(source) == expected
