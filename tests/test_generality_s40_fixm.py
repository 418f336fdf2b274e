"""Shapes behind the misses of re-created set rw (and rv03), fixed in session 40 by fixm: each
tested in at least two spellings other than the pair's, with its one-fix twin clean."""

from __future__ import annotations

import textwrap

import libcst as cst

from devicelint.analysis.facts import Place, file_facts
from devicelint.context import FileContext
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, path: str = "train/loop.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


def _dl101(factory: str, function: str, device: str, expr: str, device_expr: str) -> str:
    return (
        f"`{factory}(...)` creates a CPU tensor in `{function}` that meets the device tensor `{device}` in"
        f" `{expr}`; pass `device={device_expr}`"
    )


# -- 1. a plain class's attributes hold what its construction was given; calling an instance
#       runs its `__call__` ----------------------------------------------------------------------

PLAIN_METHOD_KEEPS_CONSTRUCTOR_TENSOR = """
    import torch


    class Jitter:
        def __init__(self, scale, shift=0.0):
            self.scale = scale
            self.shift = shift

        def magnitude(self, n):
            noise = torch.randn(n)
            return float((noise * self.scale).abs().max()) + self.shift


    def perturb(feats):
        spread = feats.std(dim=0)
        jit = Jitter(spread)
        return feats * jit.magnitude(feats.shape[1])


    def perturb_all(model, loader, device):
        model.to(device)
        for x, _ in loader:
            x = x.to(device)
            yield perturb(model(x))
"""

DUNDER_CALL_IN_FORWARD = """
    import torch
    import torch.nn as nn


    class Cutoff:
        def __init__(self, low, high):
            self.low = low
            self.high = high

        def __call__(self, width):
            span = self.high - self.low
            offsets = torch.linspace(0, 1, width)
            return int((span * offsets).argmax())


    class Head(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            y = self.proj(x)
            cut = Cutoff(y.min(dim=0).values, y.max(dim=0).values)
            keep = cut(y.shape[-1])
            return y[..., :keep]
"""


def test_a_plain_instance_method_reads_the_tensor_its_constructor_was_given() -> None:
    assert _found(PLAIN_METHOD_KEEPS_CONSTRUCTOR_TENSOR) == [
        (11, "DL101", _dl101("torch.randn", "magnitude", "self.scale", "(noise * self.scale)", "self.scale.device"))
    ]
    fixed = PLAIN_METHOD_KEEPS_CONSTRUCTOR_TENSOR.replace("torch.randn(n)", "torch.randn(n, device=self.scale.device)")
    assert _found(fixed) == []


def test_calling_a_plain_instance_runs_its_call_with_the_constructor_tensors() -> None:
    assert _found(DUNDER_CALL_IN_FORWARD) == [
        (13, "DL101", _dl101("torch.linspace", "__call__", "span", "(span * offsets)", "span.device"))
    ]
    fixed = DUNDER_CALL_IN_FORWARD.replace("(0, 1, width)", "(0, 1, width, device=span.device)")
    assert _found(fixed) == []


def _place_of_reads(source: str, text: str) -> set[Place]:
    """Where the engine places each read of `text` (an expression spelled so) in `__call__`."""
    code = textwrap.dedent(source)
    ctx = FileContext(path="train/loop.py", source=code, module=cst.parse_module(code))
    facts = file_facts(ctx)
    calls = [f for f in ctx.index.of_type(cst.FunctionDef) if f.name.value == "__call__"]
    return {
        facts.place_of(node)
        for node in ctx.index.of_type(cst.Attribute)
        if ctx.code_for(node) == text and ctx.index.enclosing_function(node) in calls
    }


def test_an_attribute_another_method_rebinds_is_not_taken_from_the_constructor() -> None:
    assert _place_of_reads(DUNDER_CALL_IN_FORWARD, "self.high") == {Place.FOLLOWS}
    rebound = DUNDER_CALL_IN_FORWARD.replace(
        "    def __call__(self, width):",
        "    def reset(self):\n            self.low, self.high = 0.0, 1.0\n\n        def __call__(self, width):",
    )
    assert _place_of_reads(rebound, "self.high") == {Place.UNKNOWN}


# -- 2. a model or criterion handed in as a parameter computes where its inputs are; a
#       parameter every caller fills with an instance of a class of the file runs that class -------

HANDED_SCORER_RERANK = """
    import torch


    @torch.no_grad()
    def rerank(scorer, queries, gallery_loader, device, k=10):
        scorer.eval()
        kept, embeds = [], []
        for images in gallery_loader:
            images = images.to(device)
            feats = scorer.encode(images)
            embeds.append(feats.mean(dim=1))
            kept.append(feats.cpu())
        kept = torch.cat(kept)
        embeds = torch.cat(embeds)
        q = scorer.encode(queries.to(device)).mean(dim=1)
        best = (q @ embeds.T).argmax(dim=1)
        return kept[best]
"""

HANDED_ENCODER_HARD_NEGATIVES = """
    import torch


    def hard_negatives(encoder, pool_loader, anchors, device, k=4):
        pool = []
        for chunk in pool_loader:
            pool.append(encoder.project(chunk.to(device)).cpu())
        pool = torch.cat(pool)
        sims = encoder.project(anchors.to(device)) @ pool.mean(0).to(device)
        _, picked = torch.topk(sims, k)
        return pool[picked]
"""


def _dl116(table: str, index: str, target: str) -> str:
    return (
        f"`{table}` is a CPU tensor indexed by `{index}`, which is on the device (indices must be on the CPU or on"
        f" the indexed tensor's device); move the table first: `{table}.to({target})[...]`"
    )


def test_a_handed_in_model_computes_where_its_inputs_are() -> None:
    assert _found(HANDED_SCORER_RERANK) == [(18, "DL116", _dl116("kept", "best", "best.device"))]
    assert _found(HANDED_SCORER_RERANK.replace("kept[best]", "kept[best.cpu()]")) == []
    assert _found(HANDED_ENCODER_HARD_NEGATIVES) == [(12, "DL116", _dl116("pool", "picked", "picked.device"))]
    assert _found(HANDED_ENCODER_HARD_NEGATIVES.replace("pool[picked]", "pool[picked.cpu()]")) == []


CRITERION_MODULE_HANDED_BY_CALLER = """
    import torch
    import torch.nn as nn


    class PairLoss(nn.Module):
        def _first_hits(self, pairs):
            firsts = {}
            for src, dst in pairs:
                for a, b in zip(src, dst):
                    key = b.item()
                    firsts.setdefault(key, a.item())
            return firsts

        def forward(self, scores, labels):
            pairs = [(s.argmax(-1), l) for s, l in zip(scores, labels)]
            hits = self._first_hits(pairs)
            return scores.sum() * len(hits)


    def fit_epoch(net, objective, batches, opt, device):
        net.train()
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            out = net(x)
            err = objective(out, y)
            opt.zero_grad()
            err.backward()
            opt.step()


    def run(net, batches, rounds=5):
        device = torch.device("cuda")
        net.to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(rounds):
            fit_epoch(net, PairLoss(), batches, opt, device)
"""

LOSS_OBJECT_HANDED_BY_KEYWORD = """
    import torch


    class Counter:
        def __call__(self, logits, target):
            total = 0
            for row in logits.argmax(dim=1):
                total += row.item()
            return torch.nn.functional.cross_entropy(logits, target) + total


    def step_all(model, data, loss_obj, opt):
        for inp, tgt in data:
            inp, tgt = inp.cuda(), tgt.cuda()
            loss = loss_obj(model(inp), tgt)
            opt.zero_grad()
            loss.backward()
            opt.step()


    def main(model, data):
        model.cuda()
        opt = torch.optim.Adam(model.parameters())
        counting = Counter()
        step_all(model, data, loss_obj=counting, opt=opt)
"""


def _accumulated(expr: str) -> str:
    return (
        f"`{expr}` copies a device tensor to the host on every training step to accumulate it, which stalls the GPU"
        " until the step's kernels finish; accumulate on the device (`total += loss.detach()`) and call `.item()`"
        " once per log interval (`if step % log_every == 0:`)"
    )


def test_a_criterion_every_caller_hands_in_is_followed_into_its_methods() -> None:
    assert _found(CRITERION_MODULE_HANDED_BY_CALLER) == [
        (11, "DL401", _accumulated("b.item()")),
        (12, "DL401", _accumulated("a.item()")),
    ]
    assert _found(LOSS_OBJECT_HANDED_BY_KEYWORD) == [(9, "DL401", _accumulated("row.item()"))]
    fixed = LOSS_OBJECT_HANDED_BY_KEYWORD.replace(
        "            for row in logits.argmax(dim=1):\n                total += row.item()\n",
        "            total = logits.argmax(dim=1).sum()\n",
    )
    assert _found(fixed) == []


# -- 3. a batch dict moved entry by entry, also past a non-tensor test, holds device tensors ------

DICT_MOVED_PAST_ISINSTANCE = """
    import torch
    import torch.nn as nn


    class Tagger(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.rnn = nn.GRU(dim, dim, batch_first=True)

        def forward(self, feats, lens):
            packed = nn.utils.rnn.pack_padded_sequence(feats, lens, batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            return out


    def fit(loader, dim, device):
        model = Tagger(dim).to(device)
        for batch in loader:
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            model(batch["feats"], batch["lens"])
"""

DICT_MOVED_BY_HELPER_NOT_IS_TENSOR = """
    import torch
    import torch.nn as nn


    class Reader(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.lstm = nn.LSTM(dim, dim)

        def forward(self, tokens, lengths):
            packed = nn.utils.rnn.pack_padded_sequence(tokens, lengths, enforce_sorted=False)
            return self.lstm(packed)[0]


    def on_gpu(sample):
        return {name: part if not torch.is_tensor(part) else part.cuda() for name, part in sample.items()}


    def evaluate(samples, dim):
        reader = Reader(dim).cuda()
        for sample in samples:
            sample = on_gpu(sample)
            reader(sample["tokens"], sample["lengths"])
"""


def _lengths(value: str) -> str:
    return f"`pack_padded_sequence` needs `lengths` on the CPU, but `{value}` is on the device; pass `{value}.cpu()`"


def test_a_dict_comprehension_that_moves_the_tensor_entries_moves_them() -> None:
    assert _found(DICT_MOVED_PAST_ISINSTANCE) == [(12, "DL118", _lengths("lens"))]
    assert _found(DICT_MOVED_PAST_ISINSTANCE.replace('batch["lens"])', 'batch["lens"].cpu())')) == []
    assert _found(DICT_MOVED_BY_HELPER_NOT_IS_TENSOR) == [(12, "DL118", _lengths("lengths"))]
    assert _found(DICT_MOVED_BY_HELPER_NOT_IS_TENSOR.replace('sample["lengths"])', 'sample["lengths"].cpu())')) == []


# -- 4. `.to(p)` where `p` defaults to None and every call leaves it out moves nothing -----------

WRAPPER_HELPER_DEVICE_LEFT_OUT = """
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel


    def wrap(net, rank, device=None):
        net.to(device)
        return DistributedDataParallel(net, device_ids=[rank])


    def main(build):
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = wrap(build(), rank)
        return model
"""

ENGINE_KEYWORD_DEVICE_LEFT_OUT = """
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn


    class Engine:
        def __init__(self, network, *, local_rank, where=None):
            self.local_rank = local_rank
            network = network.to(where)
            self.network = nn.parallel.DistributedDataParallel(network, device_ids=[local_rank], output_device=local_rank)


    def launch(make_network):
        dist.init_process_group(backend="nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        return Engine(make_network(), local_rank=local_rank)
"""


def _none_move(call: str, model: str, move: str, param: str) -> str:
    return (
        f"`{call}` wraps `{model}`, which `{move}` leaves where it came from (`{param}` is None there: its default,"
        " which every call leaves out), while `device_ids` asks for a GPU module; move it to the device"
        " `device_ids` names before wrapping"
    )


def test_a_move_to_a_parameter_every_call_leaves_at_none_moves_nothing() -> None:
    call = "DistributedDataParallel(net, device_ids=[rank])"
    assert _found(WRAPPER_HELPER_DEVICE_LEFT_OUT) == [
        (11, "DL205", _none_move(call, "net", "net.to(device)", "device"))
    ]
    assert (
        _found(WRAPPER_HELPER_DEVICE_LEFT_OUT.replace("wrap(build(), rank)", "wrap(build(), rank, device=rank)")) == []
    )
    assert _found(ENGINE_KEYWORD_DEVICE_LEFT_OUT) == [
        (13, "DL205", _none_move("nn.parallel.DistributedDataParallel(...)", "network", "network.to(where)", "where"))
    ]
    given = ENGINE_KEYWORD_DEVICE_LEFT_OUT.replace(
        "local_rank=local_rank)\n", "local_rank=local_rank, where=local_rank)\n"
    )
    assert _found(given) == []
