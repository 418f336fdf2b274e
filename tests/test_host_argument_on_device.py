"""DL118: device tensors handed where PyTorch takes only host tensors (packing lengths)."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def findings(source: str) -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), "pkg/model.py", EngineOptions(rules=(find_rule("DL118"),)))
    return [(f.line, f.code, f.message) for f in result.findings]


MESSAGE = "`pack_padded_sequence` needs `lengths` on the CPU, but `{0}` is on the device; pass `{0}.cpu()`"


def test_lengths_moved_in_a_script_are_reported_with_their_text() -> None:
    assert findings("""
        import torch as th
        from torch.nn.utils import rnn

        def encode(emb, lens, device):
            seq_lens = lens.to(device)
            return rnn.pack_padded_sequence(emb, seq_lens, batch_first=True)
    """) == [(7, "DL118", MESSAGE.format("seq_lens"))]


def test_lengths_from_a_lightning_batch_reach_forward() -> None:
    assert findings("""
        import torch.nn as nn
        import pytorch_lightning as pl
        from torch.nn.utils.rnn import pack_padded_sequence

        class Tagger(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(8, 8, batch_first=True)

            def forward(self, x, n):
                return self.rnn(pack_padded_sequence(x, n, batch_first=True, enforce_sorted=False))

            def training_step(self, batch, batch_idx):
                x, y, n = batch
                return self(x, n)[1].sum()
    """) == [(12, "DL118", MESSAGE.format("n"))]


def test_lengths_computed_from_forward_input_in_a_helper() -> None:
    found = findings("""
        import torch.nn as nn

        def lengths_of(tokens):
            return (tokens != 0).sum(1)

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(10, 8)
                self.rnn = nn.GRU(8, 8, batch_first=True)

            def forward(self, tokens):
                emb = self.embed(tokens)
                return self.rnn(nn.utils.rnn.pack_padded_sequence(emb, lengths_of(tokens), batch_first=True))
    """)
    assert found == [(15, "DL118", MESSAGE.format("lengths_of(tokens)"))]


def test_host_lengths_are_silent() -> None:
    assert (
        findings("""
        import torch
        import torch.nn as nn
        from torch.nn.utils.rnn import pack_padded_sequence

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(8, 8, batch_first=True)

            def forward(self, emb, lengths, tokens):
                a = pack_padded_sequence(emb, lengths, batch_first=True)  # callers unseen
                b = pack_padded_sequence(emb, (tokens > 0).sum(1).cpu(), batch_first=True)
                c = pack_padded_sequence(emb, [len(t) for t in tokens], batch_first=True)
                d = pack_padded_sequence(emb, torch.as_tensor([3, 2]), batch_first=True)
                return a, b, c, d

        def run(model, loader):
            model.cuda()
            for emb, lengths, tokens in loader:
                model(emb.cuda(), lengths, tokens.cuda())
    """)
        == []
    )


def test_cpu_only_scripts_and_odd_calls_are_silent() -> None:
    assert (
        findings("""
        from torch.nn.utils.rnn import pack_padded_sequence

        def f(emb, lengths, *rest, **kw):
            pack_padded_sequence(emb, *rest)
            pack_padded_sequence(**kw)
            pack_padded_sequence(emb)
            return pack_padded_sequence(emb, lengths.to("cpu"))
    """)
        == []
    )
