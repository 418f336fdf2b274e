"""DL307 (scaler updated twice), DL111's constructor-state and replaced-tensor cases, and DL404
(loader without workers): exact findings on snippets, silence on code that is right."""

from __future__ import annotations

import textwrap

import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def lint(code: str, source: str, path: str = "x.py") -> list[tuple[int, int, str]]:
    rule = find_rule(code)
    assert rule is not None
    result = lint_source(textwrap.dedent(source), path, EngineOptions(rules=(rule,)))
    assert all(f.code == code for f in result.findings)
    return [(f.line, f.column, f.message) for f in result.findings]


# -- DL307 ---------------------------------------------------------------------------------------

GAN_STEP = """\
import torch

def step(gen, disc, opt_g, opt_d, scaler, z, real):
    with torch.autocast("cuda"):
        loss_g = -disc(gen(z)).mean()
    scaler.scale(loss_g).backward()
    scaler.step(opt_g)
    scaler.update()
    with torch.autocast("cuda"):
        loss_d = disc(gen(z).detach()).mean() - disc(real).mean()
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    scaler.update()
"""


def test_dl307_update_after_each_optimizer() -> None:
    assert lint("DL307", GAN_STEP) == [
        (
            8,
            5,
            "`scaler.update()` runs after `scaler.step(opt_g)` and again after `scaler.step(opt_d)` in the same "
            "iteration, so one scaler's loss scale moves twice per iteration; call `scaler.update()` once per "
            "iteration, after the last `scaler.step(...)` of the iteration",
        )
    ]


def test_dl307_silent_with_one_update_or_two_scalers() -> None:
    once = GAN_STEP.replace("    scaler.update()\n    with", "    with", 1)
    assert once != GAN_STEP
    assert lint("DL307", once) == []
    two = GAN_STEP.replace("scaler.step(opt_d)\n    scaler.update()", "scaler_d.step(opt_d)\n    scaler_d.update()")
    assert two != GAN_STEP and lint("DL307", two) == []


def test_dl307_silent_only_when_a_return_always_separates_the_updates() -> None:
    source = GAN_STEP.replace(
        "    scaler.update()\n    with", "    scaler.update()\n    if z is None:\n        return\n    with", 1
    )
    assert [line for line, _, _ in lint("DL307", source)] == [8]  # the return is conditional: both can still run
    always = GAN_STEP.replace("    scaler.update()\n    with", "    scaler.update()\n    return\n    with", 1)
    assert always != GAN_STEP and lint("DL307", always) == []


def test_dl307_update_per_micro_batch() -> None:
    source = """\
    import torch

    def train(model, loader, optimizer, chunks):
        scaler = torch.amp.GradScaler("cuda")
        for x in loader:
            for part in x.cuda().chunk(chunks):
                scaler.scale(model(part).mean()).backward()
                scaler.update()
            scaler.step(optimizer)
    """
    assert lint("DL307", source) == [
        (
            8,
            13,
            "`scaler.update()` runs on every pass of the inner loop `for part in x.cuda().chunk(chunks)` but "
            "`scaler.step(optimizer)` runs once after it: the first update with no step since the last one raises "
            "'No inf checks were recorded prior to update', and the scale must not change between micro-batches; "
            "call `scaler.update()` once per iteration, after the last `scaler.step(...)` of the iteration",
        )
    ]


def test_dl307_update_outside_the_accumulation_branch() -> None:
    source = """\
    import torch

    def train(model, loader, optimizer, accum):
        scaler = torch.amp.GradScaler("cuda")
        for i, x in enumerate(loader):
            scaler.scale(model(x.cuda()).mean()).backward()
            if (i + 1) % accum == 0:
                scaler.step(optimizer)
            scaler.update()
    """
    assert lint("DL307", source) == [
        (
            9,
            9,
            "`scaler.update()` runs on every micro-batch but `scaler.step(optimizer)` only when `(i + 1) % accum == 0`: "
            "the first update with no step since the last one raises 'No inf checks were recorded prior to update'; "
            "call `scaler.update()` once per iteration, after the last `scaler.step(...)` of the iteration",
        )
    ]
    inside = source.replace(
        "                scaler.step(optimizer)\n            scaler.update()",
        "                scaler.step(optimizer)\n                scaler.update()",
    )
    assert inside != source and lint("DL307", inside) == []


def test_dl307_update_per_optimizer_in_a_loop() -> None:
    source = """\
    import torch

    def step(loss, optimizers, scaler):
        scaler.scale(loss).backward()
        for opt in optimizers:
            scaler.step(opt)
            scaler.update()
    """
    assert lint("DL307", source) == [
        (
            7,
            9,
            "`scaler.update()` runs once per optimizer of `for opt in optimizers`, right after `scaler.step(opt)`, so "
            "the loss scale is updated once per optimizer instead of once per iteration; call `scaler.update()` once "
            "per iteration, after the last `scaler.step(...)` of the iteration",
        )
    ]
    per_optimizer = source.replace("scaler.step(opt)", "scalers[opt].step(opt)").replace(
        "scaler.update()", "scalers[opt].update()"
    )
    assert per_optimizer != source and lint("DL307", per_optimizer) == []


def test_dl307_helper_called_per_optimizer() -> None:
    source = """\
    import torch

    class Trainer:
        def apply(self, loss, opt):
            self.scaler.scale(loss).backward()
            self.scaler.step(opt)
            self.scaler.update()

        def train_step(self, lg, ld):
            self.apply(lg, self.opt_g)
            self.apply(ld, self.opt_d)
    """
    assert lint("DL307", source) == [
        (
            7,
            9,
            "`self.scaler.update()` in `apply` runs on each of `self.apply(lg, self.opt_g)` and "
            "`self.apply(ld, self.opt_d)` in the same iteration, so one scaler's loss scale moves twice per iteration; "
            "call `self.scaler.update()` once per iteration, after the last `self.scaler.step(...)` of the iteration",
        )
    ]
    once = source.replace("            self.apply(ld, self.opt_d)\n", "")
    assert once != source and lint("DL307", once) == []


@pytest.mark.parametrize(
    "odd",
    [
        "scaler.update(*args)\nscaler.update(new_scale=2.0 ** 16)",
        "scaler.step(*opts)\nscaler.update()\nscaler.step(**kw)\nscaler.update()",
        "scalers[0].step(opt)\nscalers[1].update()\nscalers[0].update()",
    ],
)
def test_dl307_odd_calls_do_not_crash(odd: str) -> None:
    lint("DL307", "import torch\n" + odd + "\n")


# -- DL111: state made at construction, tensors replaced by copies --------------------------------


def test_dl307_a_loop_counting_optimizer_steps_is_not_a_loop_over_optimizers() -> None:
    source = """\
    import torch

    def update(world, actor, buffer, world_opt, actor_opt, total_optim_steps):
        scaler_w, scaler_a = torch.amp.GradScaler(), torch.amp.GradScaler()
        for optim_step in range(total_optim_steps):
            batch = buffer.sample().cuda()
            with torch.autocast("cuda"):
                loss_w = world(batch).mean()
            scaler_w.scale(loss_w).backward()
            scaler_w.step(world_opt)
            scaler_w.update()
            with torch.autocast("cuda"):
                loss_a = actor(batch).mean()
            scaler_a.scale(loss_a).backward()
            scaler_a.step(actor_opt)
            scaler_a.update()
    """
    assert lint("DL307", source) == []
    by_index = source.replace("for optim_step in range(total_optim_steps):", "for k in range(len(opts)):").replace(
        "scaler_w.step(world_opt)", "scaler_w.step(opts[k])"
    )
    by_index = by_index.replace("world_opt, actor_opt,", "opts, actor_opt,")
    assert lint("DL307", by_index) == [
        (
            11,
            9,
            "`scaler_w.update()` runs once per optimizer of `for k in range(len(opts))`, right after "
            "`scaler_w.step(opts[k])`, so the loss scale is updated once per optimizer instead of once per "
            "iteration; call `scaler_w.update()` once per iteration, after the last `scaler_w.step(...)` of "
            "the iteration",
        )
    ]


def test_dl303_a_scaler_rebuilt_under_a_precision_switch_is_the_finding_not_a_stale_unscale() -> None:
    source = """\
    import torch
    from torch.amp import GradScaler

    def train(model, opt, loader, cfg):
        done_optim_steps = 0
        for step, x in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x.cuda()).mean()
            if cfg.mixed_precision:
                scaler = GradScaler()
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if not torch.isfinite(norm):
                opt.zero_grad()
                continue
            scaler.step(opt)
            scaler.update()
            done_optim_steps += 1
    """
    assert lint("DL303", source) == [
        (
            10,
            22,
            "`GradScaler()` builds a new scaler on every pass of `for step, x in enumerate(loader)`, so what "
            "`update()` learned about the loss scale is thrown away: each pass starts again from the initial "
            "scale and skips steps with inf gradients until it has lowered it again; create the scaler once, "
            "before the training loop",
        )
    ]


def test_dl111_adagrad_before_move() -> None:
    source = """\
    import torch

    def build(net, device):
        opt = torch.optim.Adagrad(net.parameters(), lr=0.1)
        net.to(device)
        return opt
    """
    assert lint("DL111", source) == [
        (
            4,
            11,
            "`torch.optim.Adagrad(net.parameters(), lr=0.1)` creates Adagrad's `sum` state in its constructor while "
            "`net` is still on the CPU, so the state stays there after `net.to(device)` and the first `step()` fails; "
            "move the model before building the optimizer",
        )
    ]


@pytest.mark.parametrize("optimizer", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_dl111_lazy_state_optimizers_before_move_are_silent(optimizer: str) -> None:
    source = f"""\
    import torch

    def build(net, device):
        opt = torch.optim.{optimizer}(net.parameters(), lr=0.1)
        net.to(device)
        return opt
    """
    assert lint("DL111", source) == []


def test_dl111_tensors_replaced_by_device_copies() -> None:
    source = """\
    import torch

    def fit(params, device):
        opt = torch.optim.SGD(params, lr=0.1)
        params = [p.to(device) for p in params]
        return opt, params
    """
    assert lint("DL111", source) == [
        (
            4,
            11,
            "`torch.optim.SGD(params, lr=0.1)` holds the CPU tensors of `params`, which "
            "`params = [p.to(device) for p in params]` then replaces with device copies: the optimizer steps the CPU "
            "originals, never the tensors the computation uses; move the tensors before building the optimizer",
        )
    ]
    assert lint("DL111", source.replace("p.to(device)", "p.to('cpu')")) == []
    assert (
        lint(
            "DL111", source.replace("params = [p.to(device) for p in params]", "moved = [p.to(device) for p in params]")
        )
        == []
    )


def test_dl111_odd_optimizer_calls_do_not_crash() -> None:
    lint("DL111", "import torch\nopt = torch.optim.Adagrad(*groups)\nopt2 = torch.optim.SGD()\nw = w.cuda()\n")


# -- DL404 ---------------------------------------------------------------------------------------

TRAIN_LOOP = """\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

def train(model, root, optimizer, device):
    dataset = datasets.ImageFolder(root, transform=transforms.ToTensor())
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
"""


def test_dl404_loader_without_workers() -> None:
    assert lint("DL404", TRAIN_LOOP) == [
        (
            7,
            14,
            "`DataLoader(dataset, batch_size=64, shuffle=True)` feeds the device training loop `for x, y in loader` "
            "with `num_workers=0`, so every batch is loaded and collated in the training process while the GPU waits; "
            "pass `num_workers=N` (a few per GPU, up to the CPU cores) and `pin_memory=True` for fast asynchronous copies",
        )
    ]


@pytest.mark.parametrize(
    "change",
    [
        ("shuffle=True)", "shuffle=True, num_workers=4)"),
        ("shuffle=True)", "shuffle=True, num_workers=args.workers)"),
        ("shuffle=True)", "shuffle=True, **loader_kwargs)"),
        ("DataLoader(dataset,", "DataLoader(torch.utils.data.TensorDataset(xs, ys),"),
        ("DataLoader(dataset,", "DataLoader(unknown_dataset,"),
        ("datasets.ImageFolder(root, transform=transforms.ToTensor())", "load_dataset(root)"),
        ("        loss.backward()\n", ""),
        ("x.to(device)), y.to(device)", "x), y"),
    ],
)
def test_dl404_silent(change: tuple[str, str]) -> None:
    assert change[0] in TRAIN_LOOP
    assert lint("DL404", TRAIN_LOOP.replace(*change)) == []


def test_dl404_silent_in_tests() -> None:
    assert lint("DL404", TRAIN_LOOP, path="tests/test_train.py") == []


def test_dl404_is_off_by_default() -> None:
    rule = find_rule("DL404")
    assert rule is not None and rule.default_enabled is False


def test_dl404_dataset_class_of_the_file_that_reads_items() -> None:
    source = TRAIN_LOOP.replace(
        "def train(",
        "class Images(torch.utils.data.Dataset):\n"
        "    def __getitem__(self, i):\n"
        "        return load_image(self.paths[i])\n\n"
        "def train(",
    ).replace("datasets.ImageFolder(root, transform=transforms.ToTensor())", "Images(root)")
    assert [line for line, _, _ in lint("DL404", source)] == [11]
    in_memory = source.replace("return load_image(self.paths[i])", "return self.items[i]")
    assert in_memory != source and lint("DL404", in_memory) == []
