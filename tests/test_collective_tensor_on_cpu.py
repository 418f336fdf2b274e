"""DL209 on code written apart from the re-created bug (ra12): a CPU tensor made in a helper or
from a batch's shape reaches a collective; the one-fix twin (the tensor made on the device) and
gloo jobs are clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _findings(source: str) -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), "train/metrics.py", DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


TRAINER = """
    import torch
    from transformers import Trainer


    def _width(features):
        return torch.tensor(features["input_ids"].size(-1))


    class WidthTrackingTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            out = model(**inputs)
            if "token_type_ids" in inputs:
                widths = self.accelerator.gather_for_metrics(_width(inputs))
                self.log({"width": widths.float().mean().item()})
            return out.loss
"""


def test_cpu_count_from_a_helper_reaches_gather_for_metrics() -> None:
    assert _findings(TRAINER) == [
        (
            14,
            "DL209",
            "`_width(inputs)` is a tensor made on the CPU, handed to `self.accelerator.gather_for_metrics`: "
            "NCCL only communicates GPU tensors; create it with `device=self.accelerator.device`",
        )
    ]


def test_count_made_on_the_device_is_clean() -> None:
    fixed = TRAINER.replace(
        'return torch.tensor(features["input_ids"].size(-1))',
        'return torch.tensor(features["input_ids"].size(-1), device=features["input_ids"].device)',
    )
    assert _findings(fixed) == []


DDP_EVAL = """
    import torch
    import torch.distributed as dist


    def run(rank, model, loader):
        dist.init_process_group(backend="nccl")
        loss_sum, batches = torch.zeros(()), 0
        for x, y in loader:
            x, y = x.to(rank), y.to(rank)
            loss_sum += torch.nn.functional.mse_loss(model(x), y).item()
            batches += 1
        dist.reduce(loss_sum, dst=0)
        return loss_sum / batches
"""


def test_cpu_accumulator_reduced_over_nccl() -> None:
    assert [(line, code) for line, code, _ in _findings(DDP_EVAL)] == [(13, "DL209")]


def test_accumulator_on_the_rank_device_is_clean() -> None:
    assert _findings(DDP_EVAL.replace("torch.zeros(())", "torch.zeros((), device=rank)")) == []


def test_gloo_job_is_clean() -> None:
    assert _findings(DDP_EVAL.replace('backend="nccl"', 'backend="gloo"')) == []
