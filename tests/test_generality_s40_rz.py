"""Shapes behind the misses of re-created set rz (session 40), each tested in at least two
spellings other than the pair's, with a clean twin; exact code, line and message."""

from __future__ import annotations

import textwrap

import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, path: str = "train/loop.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


# -- a model a plain class keeps in `self.<attr>` stays on the CPU when a part of another attribute is handed to a call ---

CLASSIFIER_TEMPERATURE_FROM_OPTS = """
    import torch
    from transformers import AutoModelForSequenceClassification


    class Classifier:
        def __init__(self, opts):
            self.opts = opts
            self.model = AutoModelForSequenceClassification.from_pretrained(opts.checkpoint)

        def predict(self, loader, device):
            labels = []
            for ids, mask in loader:
                inputs = {"input_ids": ids, "attention_mask": mask}
                inputs = {key: value.to(device) for key, value in inputs.items()}
                logits = self.model(**inputs).logits / max(self.opts.temperature, 1e-6)
                labels.append(logits.argmax(-1).cpu())
            return torch.cat(labels)[: self.opts.limit]
"""

SCORER_GPU_FROM_CFG = """
    import torch
    from torch import nn


    class Scorer:
        def __init__(self, cfg):
            self.cfg = cfg
            self.net = nn.Sequential(nn.Linear(cfg.width, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 1))

        def score(self, loader):
            out = []
            for feats, mask in loader:
                parts = {"feats": feats, "mask": mask}
                feats, mask = [value.cuda(self.cfg.gpu) for value in parts.values()]
                out.append(self.net(feats).squeeze(-1) * mask)
            return torch.cat(out, dim=0)
"""

CLASSIFIER_PART_OF_MODEL_HANDED_ON = """
    import torch
    from transformers import AutoModelForSequenceClassification


    class Classifier:
        def __init__(self, opts):
            self.opts = opts
            self.model = AutoModelForSequenceClassification.from_pretrained(opts.checkpoint)

        def predict(self, loader, device):
            labels = []
            for ids, mask in loader:
                inputs = {"input_ids": ids, "attention_mask": mask}
                inputs = {key: value.to(device) for key, value in inputs.items()}
                logits = self.model(**inputs).logits / max(self.opts.temperature, 1e-6)
                labels.append(logits.argmax(-1).cpu())
            return torch.cat(labels)

        def freeze(self):
            prepare_frozen(self.model.base_model)


    def prepare_frozen(part):
        part.requires_grad_(False)
        part.cuda()
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            CLASSIFIER_TEMPERATURE_FROM_OPTS,
            [
                (
                    16,
                    "DL117",
                    "`self.model` is built on the CPU by `AutoModelForSequenceClassification.from_pretrained(...)` and never moved, but is called with `inputs`, which is on the device; move the model first: `self.model.to(device)`",
                )
            ],
        ),
        (
            SCORER_GPU_FROM_CFG,
            [
                (
                    16,
                    "DL117",
                    "`self.net` is built on the CPU by `nn.Sequential(...)` and never moved, but is called with `feats`, which is on the device; move the model first: `self.net.to(self.cfg.gpu)`",
                )
            ],
        ),
        (CLASSIFIER_PART_OF_MODEL_HANDED_ON, []),
    ],
)
def test_held(source: str, expected: list[tuple[int, str, str]]) -> None:
    assert _found(source) == expected


# -- each entry of `d.items()` / `d.values()` is what the dict's entries are (device tensors in a list of dicts, a dict) ---

ROWS_OF_DEVICE_DICTS_TO_NUMPY = """
    import numpy as np
    import torch


    def to_numpy(rows):
        merged = {}
        for row in rows:
            for name, value in row.items():
                merged.setdefault(name, []).append(value.detach().numpy())
        return {name: np.concatenate(parts) for name, parts in merged.items()}


    def evaluate(model, loader, device="cuda"):
        model.to(device)
        rows = []
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            rows.append({"target": y, "score": model(x)})
        return to_numpy(rows)
"""

DICT_VALUES_TO_NUMPY = """
    import torch


    def summarize(outputs):
        return [float(value.mean().numpy()) for value in outputs.values()]


    class Tester:
        def __init__(self, net):
            self.device = torch.device("cuda")
            self.net = net.to(self.device)

        def run(self, images):
            images = images.to(self.device)
            feats = self.net(images)
            return summarize({"feats": feats, "norms": feats.norm(dim=1)})
"""

ROWS_COPIED_TO_HOST_FIRST = """
    import numpy as np
    import torch


    def to_numpy(rows):
        merged = {}
        for row in rows:
            for name, value in row.items():
                merged.setdefault(name, []).append(value.detach().cpu().numpy())
        return {name: np.concatenate(parts) for name, parts in merged.items()}


    def evaluate(model, loader, device="cuda"):
        model.to(device)
        rows = []
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            rows.append({"target": y, "score": model(x)})
        return to_numpy(rows)
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            ROWS_OF_DEVICE_DICTS_TO_NUMPY,
            [
                (
                    10,
                    "DL108",
                    "`value.detach().numpy()` converts a tensor that is on the device: it raises `TypeError: can't convert cuda:0 device type tensor to numpy`; call `.cpu()` first: `value.detach().cpu().numpy()`",
                )
            ],
        ),
        (
            DICT_VALUES_TO_NUMPY,
            [
                (
                    6,
                    "DL108",
                    "`value.mean().numpy()` converts a tensor that is on the device: it raises `TypeError: can't convert cuda:0 device type tensor to numpy`; call `.cpu()` first: `value.mean().cpu().numpy()`",
                )
            ],
        ),
        (ROWS_COPIED_TO_HOST_FIRST, []),
    ],
)
def test_entries(source: str, expected: list[tuple[int, str, str]]) -> None:
    assert _found(source) == expected


# -- a model built at import that no function moves is on the CPU in the functions that run it ---

RESNET_AT_IMPORT_RUN_BY_CLASSIFY = """
    import torch
    import torchvision

    net = torchvision.models.resnet18()
    net.load_state_dict(torch.load("weights.pt", map_location="cpu"))
    net.eval()


    def classify(batch):
        batch = batch.to("cuda")
        with torch.no_grad():
            return net(batch).argmax(dim=1)


    if __name__ == "__main__":
        print(classify(torch.load("images.pt")))
"""

ENCODER_AT_IMPORT_RUN_BY_MAIN = """
    import torch
    from torch import nn

    encoder = nn.Sequential(nn.Linear(128, 64), nn.ReLU())


    def main(features):
        features = features.cuda()
        return encoder(features)


    main(torch.randn(8, 128))
"""

ENCODER_MOVED_BY_A_FUNCTION = """
    import torch
    from torch import nn

    encoder = nn.Sequential(nn.Linear(128, 64), nn.ReLU())


    def warm_up():
        encoder.cuda()


    def main(features):
        features = features.cuda()
        return encoder(features)


    warm_up()
    main(torch.randn(8, 128))
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            RESNET_AT_IMPORT_RUN_BY_CLASSIFY,
            [
                (
                    13,
                    "DL117",
                    '`net` is built on the CPU by `torchvision.models.resnet18(...)` and never moved, but is called with `batch`, which is on the device; move the model first: `net.to("cuda")`',
                ),
                (
                    17,
                    "DL501",
                    '`torch.load(...)` has no `map_location`: a checkpoint saved on a GPU fails on a CPU-only machine or lands on the saving GPU; pass `map_location=device` (or "cpu")',
                ),
            ],
        ),
        (
            ENCODER_AT_IMPORT_RUN_BY_MAIN,
            [
                (
                    10,
                    "DL117",
                    '`encoder` is built on the CPU by `nn.Sequential(...)` and never moved, but is called with `features`, which is on the device; move the model first: `encoder.to("cuda")`',
                )
            ],
        ),
        (ENCODER_MOVED_BY_A_FUNCTION, []),
    ],
)
def test_import(source: str, expected: list[tuple[int, str, str]]) -> None:
    assert _found(source) == expected


# -- a plain class's instance a module keeps (`self.vocab = vocab`, `vocab: Vocab`) is not moved with the module ---

VOCAB_STOP_IDS_COMPARED = """
    import torch
    from torch import nn


    class Vocab:
        def __init__(self, words):
            self.stop_ids = torch.tensor([i for i, w in enumerate(words) if w in {"the", "a"}])


    class Tagger(nn.Module):
        def __init__(self, vocab: Vocab, dim: int = 64):
            super().__init__()
            self.vocab = vocab
            self.embed = nn.Embedding(1000, dim)

        def forward(self, tokens):
            keep = (tokens[..., None] != self.vocab.stop_ids).all(-1)
            return self.embed(tokens) * keep[..., None]
"""

PRIOR_ADDED_TO_LOGITS = """
    import torch
    from torch import nn


    class Prior:
        def __init__(self, counts):
            self.log_prior = torch.log(torch.tensor(counts, dtype=torch.float) / sum(counts))


    class Head(nn.Module):
        def __init__(self, prior: Prior, dim: int, n: int):
            super().__init__()
            self.prior = prior
            self.fc = nn.Linear(dim, n)

        def forward(self, x):
            return self.fc(x) + self.prior.log_prior
"""

PRIOR_WITH_ITS_OWN_TO = """
    import torch
    from torch import nn


    class Prior:
        def __init__(self, counts):
            self.log_prior = torch.log(torch.tensor(counts, dtype=torch.float) / sum(counts))

        def to(self, device):
            self.log_prior = self.log_prior.to(device)
            return self


    class Head(nn.Module):
        def __init__(self, prior: Prior, dim: int, n: int):
            super().__init__()
            self.prior = prior
            self.fc = nn.Linear(dim, n)

        def forward(self, x):
            return self.fc(x) + self.prior.log_prior
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            VOCAB_STOP_IDS_COMPARED,
            [
                (
                    8,
                    "DL101",
                    "`torch.tensor(...)` creates a CPU tensor in `__init__` that meets the device tensor `tokens[..., None]` in `(tokens[..., None] != self.vocab.stop...`; move it where it is used, to the device of `tokens[..., None]`",
                )
            ],
        ),
        (
            PRIOR_ADDED_TO_LOGITS,
            [
                (
                    8,
                    "DL101",
                    "`torch.tensor(...)` creates a CPU tensor in `__init__` that meets the device tensor `self.fc(x)` in `self.fc(x) + self.prior.log_prior`; move it where it is used, to the device of `self.fc(x)`",
                )
            ],
        ),
        (PRIOR_WITH_ITS_OWN_TO, []),
    ],
)
def test_plain(source: str, expected: list[tuple[int, str, str]]) -> None:
    assert _found(source) == expected


# -- a GPU index spelled into a device string with `%` or `.format` (DL119) --------------------

FORMAT_DEVICE_STRING = """
    import argparse

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args()
    device = torch.device("cuda:{}".format(args.gpu))
    model = torch.nn.Linear(4, 2).to(device)
    x = torch.randn(3, 4).cuda()
    print(model(x.to(device)))
"""

PERCENT_DEVICE_STRING = """
    import argparse

    import torch


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--device-id", type=int, default=0)
        opts = parser.parse_args()
        where = "cuda:%d" % opts.device_id
        model = torch.nn.Linear(4, 2).to(where)
        weights = torch.ones(2, device="cuda")
        return model(torch.randn(3, 4, device=where)) * weights.to(where)
"""

PERCENT_WITH_SET_DEVICE = """
    import argparse

    import torch


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--device-id", type=int, default=0)
        opts = parser.parse_args()
        torch.cuda.set_device(opts.device_id)
        where = "cuda:%d" % opts.device_id
        model = torch.nn.Linear(4, 2).to(where)
        weights = torch.ones(2, device="cuda")
        return model(torch.randn(3, 4, device=where)) * weights.to(where)
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            FORMAT_DEVICE_STRING,
            [
                (
                    11,
                    "DL119",
                    '`.cuda()` places on GPU 0, but the script parses `--gpu` and uses it only in a device string (`"cuda:{}".format(args.gpu)`), which places only what is built on it; pass `.cuda(args.gpu)`',
                )
            ],
        ),
        (
            PERCENT_DEVICE_STRING,
            [
                (
                    13,
                    "DL119",
                    '`device="cuda"` places on GPU 0, but the script parses `--device-id` and uses it only in a device string (`"cuda:%d" % opts.device_id`), which places only what is built on it; pass `f"cuda:{opts.device_id}"`',
                )
            ],
        ),
        (PERCENT_WITH_SET_DEVICE, []),
    ],
)
def test_flag(source: str, expected: list[tuple[int, str, str]]) -> None:
    assert _found(source) == expected
