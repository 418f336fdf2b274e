"""Generality, forty-first stop, helper sb: four shapes behind the set sb misses, each with
spellings that differ in structure and a clean twin.

- A view only a tensor has (`.data`, `.T`) of a value a move sent to the accelerator is on the
  accelerator, and `name.data.long()` uses `name` as a tensor (sb08: lengths summed from a CUDA
  mask's `.data`).
- A host tensor moved to the accelerator on the path of `torch.cuda.is_available()` and left on
  the other, or one value moved on one side of a device-flag conditional expression and only cast
  on the other, is where the author means: the GPU (sb05, sb12).
- A comprehension over a constructor parameter keeps what every construction hands in, and a
  module's own move (`h.to(device)`) is the module (sb03: prediction heads in a plain list).
"""

from __future__ import annotations

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import REGISTRY, all_rules


def _findings(source: str, code: str) -> list[tuple[str, int, str]]:
    all_rules()
    result = lint_source(source, "case.py", EngineOptions(rules=(REGISTRY[code],)))
    return [(f.code, f.line, f.message) for f in result.findings]


A1 = """\
import torch
from torch.nn.utils.rnn import pack_padded_sequence


def encode(rnn, emb, batch):
    tokens = batch["tokens"].cuda()
    mask = batch["mask"].cuda()
    lens = mask.data.sum(-1)
    packed = pack_padded_sequence(emb(tokens), lens, batch_first=True, enforce_sorted=False)
    return rnn(packed)
"""

A2 = """\
import torch
from torch.nn.utils.rnn import pack_padded_sequence


def encode(rnn, x, src_mask):
    x = x.cuda()
    return rnn(pack_padded_sequence(x, src_mask.cuda().data.long().sum(1), batch_first=True, enforce_sorted=False))
"""

A3 = """\
import torch
from torch.nn.utils.rnn import pack_padded_sequence


def run(net, feats, masks):
    masks = masks.cuda()
    lengths = masks.T.sum(0)
    return net(pack_padded_sequence(feats.cuda(), lengths, enforce_sorted=False))
"""

B1 = """\
import numpy as np
import torch


def quantize(values_path, n_bins):
    idx = torch.from_numpy(np.load(values_path)).long()
    if torch.cuda.is_available():
        idx = idx.cuda()
    centers = torch.linspace(0.0, 1.0, n_bins)
    return centers[idx]
"""

B2 = """\
import torch


class Scorer:
    def __init__(self, keys, use_gpu=True):
        self.keys = keys.cuda().half() if use_gpu else keys.float()

    def score(self, q):
        sims = self.keys @ q
        bias = torch.ones(sims.shape[0])
        return sims + bias
"""

B3 = """\
import torch


class Vocab:
    def __init__(self, n):
        self.freq = torch.arange(n)

    def counts(self, ids):
        return self.freq[ids]


def lookup(vocab, ids, args):
    ids = ids.to("cuda") if args.cuda else ids.long()
    return vocab.counts(ids)


def main(args):
    return lookup(Vocab(100), torch.tensor([1, 2]), args)
"""

B4 = """\
import torch


def score(q, keys, use_cuda):
    keys = keys.cuda() if use_cuda else other_keys(keys)
    bias = torch.ones(keys.shape[0])
    return keys @ q + bias
"""

C1 = """\
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, d, k):
        super().__init__()
        self.proj = nn.Linear(d, k)

    def forward(self, x):
        return self.proj(x)


class MultiTask(nn.Module):
    def __init__(self, encoder, heads, device):
        super().__init__()
        self.encoder = encoder.to(device)
        self.heads = [h.to(device) for h in heads]

    def forward(self, x):
        z = self.encoder(x)
        return [head(z) for head in self.heads]


def build(encoder, device):
    return MultiTask(encoder, [Head(256, 2), Head(256, 5)], device)
"""

C2 = """\
import torch
from torch import nn


class Expert(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return self.ff(x)


class Mixture(nn.Module):
    def __init__(self, experts, d):
        super().__init__()
        self.gate = nn.Linear(d, len(experts))
        self.experts = tuple(e.train() for e in experts)

    def forward(self, x):
        w = self.gate(x).softmax(-1)
        return sum(w[..., i : i + 1] * e(x) for i, e in enumerate(self.experts))


def make(d):
    experts = []
    for _ in range(4):
        experts.append(Expert(d))
    return Mixture(experts, d)
"""

C3 = """\
import torch
from torch import nn


class Pyramid(nn.Module):
    def __init__(self, body, scales):
        super().__init__()
        self.body = body
        self.scales = [s * 2 for s in scales]

    def forward(self, x):
        return [self.body(nn.functional.interpolate(x, scale_factor=s)) for s in self.scales]


def build(body):
    return Pyramid(body, [0.5, 1.0, 2.0])
"""


def test_lengths_summed_from_the_data_of_a_moved_mask() -> None:
    assert _findings(A1, "DL118") == [
        (
            "DL118",
            9,
            "`pack_padded_sequence` needs `lengths` on the CPU, but `lens` is on the device; pass `lens.cpu()`",
        )
    ]
    fixed = A1.replace("lens = mask.data.sum(-1)", "lens = mask.data.sum(-1).cpu()")
    assert _findings(fixed, "DL118") == []


def test_lengths_from_a_view_of_a_moved_value_inline() -> None:
    value = "src_mask.cuda().data.long().sum(1)"
    assert _findings(A2, "DL118") == [
        (
            "DL118",
            7,
            f"`pack_padded_sequence` needs `lengths` on the CPU, but `{value}` is on the device; pass `{value}.cpu()`",
        )
    ]


def test_lengths_from_the_transpose_of_a_moved_mask() -> None:
    assert _findings(A3, "DL118") == [
        (
            "DL118",
            8,
            "`pack_padded_sequence` needs `lengths` on the CPU, but `lengths` is on the device; pass `lengths.cpu()`",
        )
    ]


def test_host_table_indexed_by_indices_moved_under_an_availability_test() -> None:
    assert _findings(B1, "DL116") == [
        (
            "DL116",
            10,
            "`centers` is a CPU tensor indexed by `idx`, which is on the device (indices must be on the CPU or"
            " on the indexed tensor's device); move the table first: `centers.to(idx.device)[...]`",
        )
    ]
    assert _findings(B1.replace("centers[idx]", "centers.to(idx.device)[idx]"), "DL116") == []


def test_factory_meets_a_value_moved_or_cast_by_a_flag_in_a_plain_class() -> None:
    assert _findings(B2, "DL101") == [
        (
            "DL101",
            10,
            "`torch.ones(...)` creates a CPU tensor in `score` that meets the device tensor `sims` in"
            ' `sims + bias`; pass `device="cuda"`',
        )
    ]
    fixed = B2.replace("torch.ones(sims.shape[0])", "torch.ones(sims.shape[0], device=sims.device)")
    assert _findings(fixed, "DL101") == []


def test_plain_class_table_indexed_by_ids_moved_by_a_settings_flag() -> None:
    assert _findings(B3, "DL116") == [
        (
            "DL116",
            9,
            "`self.freq` is a CPU tensor indexed by `ids`, which is on the device (indices must be on the CPU or"
            " on the indexed tensor's device); move the table first: `self.freq.to(ids.device)[...]`",
        )
    ]


def test_a_flag_between_two_different_values_makes_no_claim() -> None:
    # `keys.cuda() if use_cuda else other_keys(keys)`: the other side is another value
    assert _findings(B4, "DL101") == []


def test_moved_elements_of_a_list_handed_to_the_constructor() -> None:
    assert _findings(C1, "DL103") == [
        (
            "DL103",
            18,
            "`self.heads` keeps submodules in a plain list: `model.to(device)` never moves them, `state_dict()`"
            " never saves them and `parameters()` skips them; use `nn.ModuleList`",
        )
    ]
    registered = C1.replace(
        "self.heads = [h.to(device) for h in heads]", "self.heads = nn.ModuleList([h.to(device) for h in heads])"
    )
    assert _findings(registered, "DL103") == []


def test_generator_over_a_list_the_caller_filled_into_a_tuple() -> None:
    assert _findings(C2, "DL103") == [
        (
            "DL103",
            18,
            "`self.experts` keeps submodules in a plain tuple: `model.to(device)` never moves them, `state_dict()`"
            " never saves them and `parameters()` skips them; use `nn.ModuleList`",
        )
    ]


def test_comprehension_over_numbers_handed_in_is_no_container_of_modules() -> None:
    assert _findings(C3, "DL103") == []
