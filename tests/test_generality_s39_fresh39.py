"""Shapes judged wrong on the fourteenth precision reading (projects nobody had linted): each in
two spellings the corpus did not use, with the true positive next to it that must stay found."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _findings(source: str) -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), "asr/evaluate.py", DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


# -- a metric whose update hands the tensors to an object it holds (a decoder) ------------------

EVALUATE = """
    import torch
    from torchmetrics import Metric


    {metric}


    @torch.no_grad()
    def evaluate(model, loader, decoder, device):
        model.to(device)
        score = Score(decoder)
        for feats, labels in loader:
            logits = model(feats.to(device))
            score.update(logits, labels.to(device))
        return score.compute()
"""

# The edit distance of decoded strings, through a method of a base class in the file.
DECODED_THROUGH_BASE = """class Base(Metric):
        def __init__(self, decoder):
            super().__init__()
            self.decoder = decoder

        def update(self, logits, labels):
            hyps = self.decoder.decode(logits)
            refs = self.decoder.to_strings(labels)
            for hyp, ref in zip(hyps, refs):
                self.add_pair(hyp, ref)


    class Score(Base):
        def __init__(self, decoder):
            super().__init__(decoder)
            self.add_state("errors", default=torch.tensor(0), dist_reduce_fx="sum")
            self.add_state("words", default=torch.tensor(0), dist_reduce_fx="sum")

        def add_pair(self, hyp, ref):
            self.errors += edit_distance(hyp.split(), ref.split())
            self.words += len(ref.split())

        def compute(self):
            return self.errors.float() / self.words
"""

# The held object is called directly, and the strings kept in a list state.
CALLED_HELD_OBJECT = """class Score(Metric):
        def __init__(self, decoder):
            super().__init__()
            self.tokenizer = decoder
            self.add_state("texts", default=[], dist_reduce_fx="cat")
            self.add_state("count", default=torch.tensor(0), dist_reduce_fx="sum")

        def update(self, logits, labels):
            texts = self.tokenizer(logits.argmax(-1))
            self.texts.extend(texts)
            self.count += len(texts)

        def compute(self):
            return self.count
"""

# The twin: the metric's own code adds the device tensors into a CPU state.
COUNTED_ON_TENSORS = """class Score(Metric):
        def __init__(self, decoder):
            super().__init__()
            self.decoder = decoder
            self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")

        def update(self, logits, labels):
            self.decoder.decode(logits)
            self._count(logits.argmax(-1), labels)

        def _count(self, predicted, labels):
            self.correct += (predicted == labels).sum()

        def compute(self):
            return self.correct
"""


def test_a_metric_that_decodes_what_it_is_handed_is_not_reported_through_a_base_class() -> None:
    assert _findings(EVALUATE.format(metric=DECODED_THROUGH_BASE)) == []


def test_a_metric_that_calls_a_held_object_and_keeps_strings_is_not_reported() -> None:
    assert _findings(EVALUATE.format(metric=CALLED_HELD_OBJECT)) == []


def test_a_metric_that_adds_the_tensors_into_its_state_through_a_helper_is_still_reported() -> None:
    source = EVALUATE.format(metric=COUNTED_ON_TENSORS)
    line = textwrap.dedent(source).splitlines().index("    score = Score(decoder)") + 1
    assert _findings(source) == [
        (
            line,
            "DL113",
            "`Score(decoder)` is created on the CPU and never moved, but `score.update(logits, labels.to(device))` feeds it "
            "the device tensor `logits`; create it with `.to(device)` (or make it an attribute of the model)",
        )
    ]


# -- a 1-D CPU tensor attribute iterated for its elements, each a 0-dim tensor --------------------

ENCODING = """
    import torch
    from torch import nn


    class Encoding(nn.Module):
        def __init__(self, bands):
            super().__init__()
            self.scales = {made}

        def forward(self, x):
{forward}


    def run(points, device):
        return Encoding(10).to(device)(points.to(device))
"""

LOOPED = """\
        parts = [x]
        for scale in self.scales:
            for fn in (torch.sin, torch.cos):
                parts.append(fn(scale * x))
        return torch.cat(parts, dim=-1)"""

COMPREHENDED = """\
        return torch.cat([x] + [torch.sin(x / s) for s in self.scales], dim=-1)"""

STACKED = """\
        kept = []
        for scale in self.scales:
            kept.append(scale)
        return x * torch.stack(kept)"""


def _encoding(made: str, forward: str) -> str:
    return ENCODING.format(made=made, forward=textwrap.indent(forward, "    "))


def test_a_range_attribute_whose_elements_only_scale_the_input_is_not_reported() -> None:
    assert _findings(_encoding("2.0 ** torch.linspace(0, bands - 1, bands)", LOOPED)) == []
    assert _findings(_encoding("torch.logspace(0, 3, bands)", COMPREHENDED)) == []


DL102_MESSAGE = (
    "`self.scales` holds a CPU tensor that is not a parameter or buffer: `model.to(device)` never moves it and "
    '`state_dict()` never saves it; use `self.register_buffer("scales", ...)` (or `nn.Parameter` if it is trained)'
)


def test_rows_of_a_two_dimensional_attribute_or_elements_stacked_together_are_still_reported() -> None:
    assert _findings(_encoding("torch.rand(bands, 3)", LOOPED)) == [(9, "DL102", DL102_MESSAGE)]
    assert _findings(_encoding("torch.arange(bands).float()", STACKED)) == [(9, "DL102", DL102_MESSAGE)]


# -- a tensor helper of a data-loading package named in the singular or with an underscore ------

WARP = """
    import torch


    def warp_rows(spec, shift):
        rows = spec.shape[-2]
        grid = torch.arange(rows).float().unsqueeze(-1)
        return torch.roll(spec, shift, dims=-1) * (grid >= 0) + spec * (grid < 0)
"""


def _dl101(path: str) -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(WARP), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


def test_a_helper_in_a_loader_folder_prepares_samples_on_the_cpu() -> None:
    assert _dl101("deepspeech/loader/warp.py") == []
    assert _dl101("speech/data_loader/spec_ops.py") == []


def test_the_same_helper_in_a_model_package_is_still_device_code() -> None:
    assert _dl101("speech/model/warp.py") == [
        (
            7,
            "DL101",
            "`torch.arange(...)` creates a CPU tensor in `warp_rows` that meets the device tensor "
            "`torch.roll(spec, shift, dims=-1)` in `torch.roll(spec, shift, dims=-1) * (g...`; "
            "pass `device=spec.device`",
        )
    ]
