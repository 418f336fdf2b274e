"""Shapes of set ru (session 39), each in at least two spellings with its one-fix twin clean:
gradients of a float16 autocast backward that are read instead of stepped (DL301), clipping
between Lightning's `manual_backward` and `opt.step()` under float16 mixed precision (DL304), and
DataParallel over a model that the program's own switch keeps on the CPU (DL202)."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, code: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "pkg/train.py", DEFAULT)
    return [(f.line, f.message) for f in result.findings if f.code == code]


# -- DL301: float16 gradients that are read, not stepped ----------------------------------------

GRADIENT_CHECK_TEST = """
    import torch


    def test_adapters_get_gradients(model, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(batch)
            loss = out.float().pow(2).mean()
        loss.backward()
        for name, param in model.named_parameters():
            if "adapter" in name:
                assert param.grad is not None
"""

GRADIENT_PROBE = """
    import torch


    def gradient_norms(net, inputs, targets):
        net.zero_grad()
        with torch.amp.autocast(device_type="cuda"):
            score = torch.nn.functional.mse_loss(net(inputs), targets)
        score.backward()
        return {n: p.grad.norm().item() for n, p in net.named_parameters()}
"""


def test_a_float16_backward_whose_gradients_a_test_checks_is_reported() -> None:
    assert _found(GRADIENT_CHECK_TEST, "DL301") == [
        (
            9,
            '`loss.backward()` backpropagates a loss computed under `torch.autocast("cuda", dtype=torch.float16)`, '
            "which runs in float16, with no `GradScaler`: small gradients underflow to zero and training silently "
            'stalls; use `scaler = torch.amp.GradScaler("cuda")` with `scaler.scale(loss).backward()`, '
            "`scaler.step(optimizer)`, `scaler.update()`, or autocast to `torch.bfloat16`",
        )
    ]


def test_a_probe_that_reads_gradient_norms_after_a_default_dtype_autocast_is_reported() -> None:
    found = _found(GRADIENT_PROBE, "DL301")
    assert [line for line, _ in found] == [9]
    assert "runs in float16 (autocast's default dtype on CUDA)" in found[0][1]


def test_the_bfloat16_twins_are_clean() -> None:
    assert _found(GRADIENT_CHECK_TEST.replace("torch.float16", "torch.bfloat16"), "DL301") == []
    probe = GRADIENT_PROBE.replace('device_type="cuda")', 'device_type="cuda", dtype=torch.bfloat16)')
    assert _found(probe, "DL301") == []


def test_gradients_only_reset_after_the_backward_are_not_a_use() -> None:
    source = GRADIENT_CHECK_TEST.replace(
        """        for name, param in model.named_parameters():
            if "adapter" in name:
                assert param.grad is not None""",
        """        for param in model.parameters():
            param.grad = None""",
    )
    assert _found(source, "DL301") == []


# -- DL304: Lightning's manual optimisation under float16 mixed precision ----------------------

MANUAL_CLIP_INLINE = """
    import lightning as L
    import torch


    class Seq2Seq(L.LightningModule):
        def __init__(self, net):
            super().__init__()
            self.automatic_optimization = False
            self.net = net

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self.net(*batch)
            opt.zero_grad()
            self.manual_backward(loss)
            torch.nn.utils.clip_grad_norm_(self.parameters(), 0.5)
            opt.step()
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-4)


    def main(net, data):
        L.Trainer(precision="16-mixed", max_epochs=3).fit(Seq2Seq(net), data)
"""

MANUAL_CLIP_HELPER = """
    import pytorch_lightning as pl
    import torch
    from torch.nn.utils import clip_grad_value_


    class Critic(pl.LightningModule):
        def __init__(self, actor, critic):
            super().__init__()
            self.automatic_optimization = False
            self.actor, self.critic = actor, critic

        def limit(self, module):
            clip_grad_value_(module.parameters(), 1.0)

        def training_step(self, batch, batch_idx):
            actor_optim, critic_optim = self.optimizers()
            value_loss = self.critic(batch).pow(2).mean()
            critic_optim.zero_grad()
            self.manual_backward(value_loss)
            self.limit(self.critic)
            critic_optim.step()

        def configure_optimizers(self):
            return [torch.optim.Adam(self.actor.parameters()), torch.optim.Adam(self.critic.parameters())]


    trainer = pl.Trainer(accelerator="gpu", precision=16)
"""


def test_a_clip_between_manual_backward_and_the_step_is_reported() -> None:
    assert _found(MANUAL_CLIP_INLINE, "DL304") == [
        (
            17,
            "`torch.nn.utils.clip_grad_norm_(self.parameters(), 0.5)` clips gradients still multiplied by the loss "
            'scale, so the clip is about 65536 times too strong; under `precision="16-mixed"` `self.manual_backward` '
            "scales the loss and only `opt.step()` unscales; clip with `self.clip_gradients(opt, gradient_clip_val=...)`, "
            "which unscales first",
        )
    ]


def test_a_clipping_helper_under_an_integer_precision_is_reported_at_its_call() -> None:
    assert [line for line, _ in _found(MANUAL_CLIP_HELPER, "DL304")] == [21]


def test_lightning_clip_gradients_and_other_precisions_are_clean() -> None:
    fixed = MANUAL_CLIP_INLINE.replace(
        "torch.nn.utils.clip_grad_norm_(self.parameters(), 0.5)",
        'self.clip_gradients(opt, gradient_clip_val=0.5, gradient_clip_algorithm="norm")',
    )
    assert _found(fixed, "DL304") == []
    assert _found(MANUAL_CLIP_INLINE.replace('"16-mixed"', '"bf16-mixed"'), "DL304") == []
    assert _found(MANUAL_CLIP_HELPER.replace("precision=16", 'precision="32"'), "DL304") == []


def test_an_unscale_through_the_precision_plugin_before_the_clip_is_clean() -> None:
    fixed = MANUAL_CLIP_INLINE.replace(
        "            torch.nn.utils.clip_grad_norm_",
        "            self.trainer.precision_plugin.scaler.unscale_(opt)\n            torch.nn.utils.clip_grad_norm_",
    )
    assert _found(fixed, "DL304") == []


# -- DL202: DataParallel over a model the program's own switch keeps on the CPU ----------------

FORCED_CPU_CHAINED = """
    import torch
    import torch.nn as nn


    def train(args, model, loader):
        if args.force_cpu:
            device = torch.device("cpu")
        elif torch.cuda.is_available():
            device = torch.device(f"cuda:{args.device_ids[0]}")
        else:
            device = torch.device("cpu")
        model = nn.DataParallel(model, device_ids=args.device_ids).to(device)
        for x, y in loader:
            loss = nn.functional.l1_loss(model(x.to(device)), y.to(device))
            loss.backward()
"""

FORCED_CPU_MOVED_FIRST = """
    import torch.nn as nn

    from nets import UNet


    def run(opt, batches):
        if opt.use_cpu:
            dev = "cpu"
        else:
            dev = f"cuda:{opt.gpus[0]}"
        net = UNet(opt.channels)
        net.to(dev)
        net = nn.DataParallel(net, device_ids=opt.gpus)
        return [net(b.to(dev)) for b in batches]
"""


def test_a_wrapper_moved_to_a_switched_cpu_device_is_reported() -> None:
    assert _found(FORCED_CPU_CHAINED, "DL202") == [
        (
            13,
            "`nn.DataParallel(model, device_ids=args.device_ids)` needs the model on `args.device_ids[0]` "
            "(`device_ids[0]`), but `model` is on the CPU when `args.force_cpu` sets `device` to it, and the GPUs "
            "stay visible to DataParallel; wrap it only on the GPU path (not when `args.force_cpu`)",
        )
    ]


def test_a_model_moved_to_a_switched_cpu_name_before_wrapping_is_reported() -> None:
    assert [line for line, _ in _found(FORCED_CPU_MOVED_FIRST, "DL202")] == [14]


def test_a_wrap_guarded_by_the_switch_or_a_cpu_chosen_for_lack_of_gpus_is_clean() -> None:
    guarded = FORCED_CPU_MOVED_FIRST.replace(
        "        net = nn.DataParallel(net, device_ids=opt.gpus)",
        "        if not opt.use_cpu:\n            net = nn.DataParallel(net, device_ids=opt.gpus)",
    )
    assert _found(guarded, "DL202") == []
    lacking = FORCED_CPU_CHAINED.replace(
        """        if args.force_cpu:
            device = torch.device("cpu")
        elif torch.cuda.is_available():""",
        """        if torch.cuda.is_available():""",
    )
    assert _found(lacking, "DL202") == []
