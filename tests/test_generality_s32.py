"""Shapes found by re-creating multi-file bugs from public threads (session 32), each tested on
code written apart from those projects: the bug under other names, and its one-fix twin clean."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

from click.testing import CliRunner
from conftest import FIXTURES

from devicelint.cli import cli
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "nets/heads.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


# -- a tensor attribute built on one branch of a conditional (`... if w is not None else None`) --

CONDITIONAL_ATTRIBUTE = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class WeightedHead(nn.Module):
        def __init__(self, dim, n_classes, class_weights=None):
            super().__init__()
            self.fc = nn.Linear(dim, n_classes)
            self.class_weights = None if class_weights is None else torch.FloatTensor(class_weights)

        def forward(self, x, y):
            return F.cross_entropy(self.fc(x), y, weight=self.class_weights)
"""


def test_a_tensor_attribute_made_on_one_branch_of_a_conditional_is_not_registered() -> None:
    assert _found(CONDITIONAL_ATTRIBUTE) == [(11, "DL102")]


def test_the_conditional_attribute_registered_as_a_buffer_is_clean() -> None:
    fixed = CONDITIONAL_ATTRIBUTE.replace(
        "self.class_weights = None if class_weights is None else torch.FloatTensor(class_weights)",
        'self.register_buffer("class_weights", None if class_weights is None else torch.FloatTensor(class_weights))',
    )
    assert _found(fixed) == []


# -- a helper of the file that loads the state of the optimizer it is handed -------------------

RESUME_HELPER = """
    import torch
    import torch.nn as nn


    def restore(run_dir, net, opt, sched=None):
        state = torch.load(f"{run_dir}/last.ckpt", map_location="cpu")
        net.load_state_dict(state["net"])
        if opt is not None:
            opt.load_state_dict(state["opt"])
        return state.get("step", 0)


    def main(run_dir):
        net = nn.GRU(16, 32, batch_first=True)
        opt = torch.optim.RMSprop(net.parameters(), lr=1e-3)
        step = restore(run_dir, net, opt)
        net.to("cuda")
        for _ in range(step, 100):
            out, _ = net(torch.randn(4, 8, 16, device="cuda"))
            out.mean().backward()
            opt.step()
"""


def test_an_optimizer_state_loaded_by_a_helper_before_the_model_moves() -> None:
    assert _found(RESUME_HELPER) == [(17, "DL111")]


def test_the_model_moved_before_the_helper_loads_is_clean() -> None:
    fixed = RESUME_HELPER.replace(
        "        net = nn.GRU(16, 32, batch_first=True)\n",
        '        net = nn.GRU(16, 32, batch_first=True).to("cuda")\n',
    ).replace('        net.to("cuda")\n', "")
    assert _found(fixed) == []


# -- across files: an imported helper loads the optimizer's state; a host table fed a host copy --


def _check(root: Path) -> set[tuple[str, int, str]]:
    old = Path.cwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, ["check", "--no-cache", "--output-format", "json", "."])
    finally:
        os.chdir(old)
    assert result.exit_code in (0, 1), result.output
    return {(Path(r["path"]).name, r["line"], r["code"]) for r in json.loads(result.stdout)}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")


CHECKPOINTS = """
    import torch


    def warm_start(path, network, optim=None, scheduler=None):
        blob = torch.load(path, map_location="cpu")
        network.load_state_dict(blob["weights"])
        if optim is not None and "optim" in blob:
            optim.load_state_dict(blob["optim"])
"""

FINETUNE = """
    import torch
    from torchvision.models import resnet18

    from checkpoints import warm_start

    net = resnet18(num_classes=5)
    sgd = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    warm_start("pretrained.pt", net, optim=sgd)
    net = net.cuda()
"""


def test_an_imported_helper_that_loads_the_optimizer_state_before_the_move(tmp_path: Path) -> None:
    _write(tmp_path, {"checkpoints.py": CHECKPOINTS, "finetune.py": FINETUNE})
    assert _check(tmp_path) == {("finetune.py", 9, "DL111")}
    fixed = FINETUNE.replace("net = resnet18(num_classes=5)", "net = resnet18(num_classes=5).cuda()").replace(
        "net = net.cuda()\n", ""
    )
    _write(tmp_path, {"finetune.py": fixed})
    assert _check(tmp_path) == set()


TALLY = """
    import torch


    class Tally:
        def __init__(self, n):
            self.n = n
            self.counts = torch.zeros(n)

        def update(self, labels):
            self.counts += torch.bincount(labels, minlength=self.n)
"""

EVALUATE = """
    import torch

    from tally import Tally


    def label_histogram(model, loader):
        tally = Tally(10)
        for x in loader:
            tally.update(model(x.cuda()).argmax(1))
        return tally.counts
"""


def test_a_host_table_fed_device_values_by_an_importer_and_its_host_copy_twin(tmp_path: Path) -> None:
    _write(tmp_path, {"tally.py": TALLY, "evaluate.py": EVALUATE})
    assert _check(tmp_path) == {("evaluate.py", 10, "DL101")}
    _write(tmp_path, {"tally.py": TALLY.replace("torch.bincount(labels,", "torch.bincount(labels.cpu(),")})
    assert _check(tmp_path) == set()


# -- a settings module's `DEVICE` (`import settings`, `settings.DEVICE`) is where the author runs ----

SETTINGS_DEVICE = """
    import torch
    import torch.nn as nn

    import settings


    def score(loader):
        net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        net.eval()
        with torch.no_grad():
            return [net(feats.to(settings.DEVICE)) for feats in loader]
"""


def test_a_model_never_moved_while_inputs_go_to_a_settings_modules_device() -> None:
    assert _found(SETTINGS_DEVICE) == [(12, "DL117")]


def test_the_model_moved_to_the_settings_device_is_clean() -> None:
    fixed = SETTINGS_DEVICE.replace("nn.Linear(8, 1))\n", "nn.Linear(8, 1)).to(settings.DEVICE)\n")
    assert _found(fixed) == []


# -- functions and classes of another module, seen from the importing file --------------------


def test_a_moved_copy_returned_by_an_imported_helper_and_dropped(tmp_path: Path) -> None:
    helper = """
        import torch


        def to_gpu(sample):
            return {name: t.cuda() if isinstance(t, torch.Tensor) else t for name, t in sample.items()}
    """
    caller = """
        from gpu import to_gpu


        def predict(net, samples):
            outputs = []
            for sample in samples:
                to_gpu(sample)
                outputs.append(sample["image"].sum())
            return outputs
    """
    _write(tmp_path, {"gpu.py": helper, "predict.py": caller})
    assert _check(tmp_path) == {("predict.py", 8, "DL104")}
    _write(tmp_path, {"predict.py": caller.replace("to_gpu(sample)", "sample = to_gpu(sample)")})
    assert _check(tmp_path) == set()


def test_a_metric_built_by_an_imported_function_and_fed_device_tensors(tmp_path: Path) -> None:
    meters = """
        import torchmetrics


        def make_meter():
            return torchmetrics.MeanSquaredError()
    """
    caller = """
        import torch

        from meters import make_meter


        def validate(net, pairs):
            meter = make_meter()
            for x, y in pairs:
                meter.update(net(x.to("cuda")), y.to("cuda"))
            return meter.compute()
    """
    _write(tmp_path, {"meters.py": meters, "validate.py": caller})
    assert _check(tmp_path) == {("validate.py", 8, "DL113")}
    _write(tmp_path, {"validate.py": caller.replace("meter = make_meter()", 'meter = make_meter().to("cuda")')})
    assert _check(tmp_path) == set()


def test_an_imported_split_drawn_under_a_cuda_default(tmp_path: Path) -> None:
    splits = """
        from torch.utils.data import random_split


        def holdout(dataset, fraction=0.1):
            n_val = int(len(dataset) * fraction)
            return random_split(dataset, [len(dataset) - n_val, n_val])
    """
    caller = """
        import torch

        from splits import holdout


        def prepare(dataset):
            torch.set_default_device("cuda")
            train_set, val_set = holdout(dataset)
            return train_set, val_set
    """
    _write(tmp_path, {"splits.py": splits, "prepare.py": caller})
    assert _check(tmp_path) == {("prepare.py", 9, "DL114")}
    late = """
        import torch

        from splits import holdout


        def prepare(dataset):
            train_set, val_set = holdout(dataset)
            torch.set_default_device("cuda")
            return train_set, val_set
    """
    _write(tmp_path, {"prepare.py": late})
    assert _check(tmp_path) == set()


def test_a_wrapper_handed_to_an_imported_class_that_reads_its_model(tmp_path: Path) -> None:
    ema = """
        import copy


        class EMA:
            def __init__(self, net, decay=0.999):
                self.net = net
                self.shadow = copy.deepcopy(net)
                self.decay = decay

            def update(self):
                for mine, theirs in zip(self.shadow.parameters(), self.net.encoder.parameters()):
                    mine.data.lerp_(theirs.data, 1 - self.decay)
    """
    caller = """
        import torch.nn as nn

        from ema import EMA


        def build(model):
            model = nn.DataParallel(model.cuda())  # noqa: DL207
            tracker = EMA(model, 0.99)
            return model, tracker
    """
    _write(tmp_path, {"ema.py": ema, "build.py": caller})
    assert _check(tmp_path) == {("build.py", 9, "DL203")}
    _write(tmp_path, {"build.py": caller.replace("EMA(model, 0.99)", "EMA(model.module, 0.99)")})
    assert _check(tmp_path) == set()


def test_an_imported_trainer_that_resumes_its_optimizer_before_the_model_moves(tmp_path: Path) -> None:
    runner = """
        import torch


        class Runner:
            def __init__(self, net, cfg):
                self.cfg = cfg
                self.optim = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=0.9)

            def load(self, ckpt_path):
                state = torch.load(ckpt_path, map_location="cpu")
                self.optim.load_state_dict(state["optim"])

            def run(self, batches):
                for loss_fn in batches:
                    self.optim.zero_grad()
                    loss_fn().backward()
                    self.optim.step()
    """
    caller = """
        from types import SimpleNamespace

        import torchvision

        from runner import Runner


        def main(ckpt):
            backbone = torchvision.models.mobilenet_v3_small()
            runner = Runner(backbone, SimpleNamespace(lr=0.01))
            runner.load(ckpt)
            backbone.to("cuda")
            return runner
    """
    _write(tmp_path, {"runner.py": runner, "main.py": caller})
    assert _check(tmp_path) == {("main.py", 12, "DL111")}
    moved_first = caller.replace(
        "torchvision.models.mobilenet_v3_small()", 'torchvision.models.mobilenet_v3_small().to("cuda")'
    ).replace('            backbone.to("cuda")\n', "")
    _write(tmp_path, {"main.py": moved_first})
    assert _check(tmp_path) == set()


def test_a_host_tensor_another_module_builds_at_import_read_on_device(tmp_path: Path) -> None:
    constants = """
        import torch

        CLASS_PRIOR = torch.tensor([0.7, 0.2, 0.1])
    """
    caller = """
        import torch

        from constants import CLASS_PRIOR as prior


        def calibrated(logits):
            return torch.log_softmax(logits, -1) - prior.log()


        def evaluate(net, xs):
            return [calibrated(net(x.cuda())) for x in xs]
    """
    _write(tmp_path, {"constants.py": constants, "calibrate.py": caller})
    assert _check(tmp_path) == {("calibrate.py", 8, "DL101")}
    _write(tmp_path, {"calibrate.py": caller.replace("- prior.log()", "- prior.to(logits.device).log()")})
    assert _check(tmp_path) == set()


def test_an_imported_host_constant_follows_edits_of_its_module_on_a_warm_run(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURES / "projects" / "host_constants_read_through_module_alias" / "bad", root)
    args = ["check", "--output-format", "json", "--cache-dir", str(tmp_path / "cache"), "."]

    def found() -> list[tuple[str, int, str]]:
        old = Path.cwd()
        os.chdir(root)
        try:
            result = CliRunner().invoke(cli, args)
        finally:
            os.chdir(old)
        return [(Path(r["path"]).name, r["line"], r["code"]) for r in json.loads(result.stdout)]

    assert found() == [("model.py", 13, "DL101")]
    assert found() == [("model.py", 13, "DL101")]  # warm: from the cache
    (root / "transforms.py").write_text("MEAN = 0.45\nSTD = 0.225\n", encoding="utf-8")  # numbers now
    assert found() == []


def test_a_model_handed_unmoved_to_an_imported_loop_that_moves_only_the_batches(tmp_path: Path) -> None:
    engine = """
        import torch.nn.functional as F


        def run_epoch(net, batches, opt, dev):
            for inputs, targets in batches:
                inputs = inputs.to(dev)
                loss = F.mse_loss(net(inputs), targets.to(dev))
                opt.zero_grad()
                loss.backward()
                opt.step()
    """
    caller = """
        import torch

        from engine import run_epoch


        def main(batches):
            net = torch.nn.Linear(16, 1)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for _ in range(3):
                run_epoch(net, batches, opt, "cuda")
    """
    _write(tmp_path, {"engine.py": engine, "main.py": caller})
    assert _check(tmp_path) == {("main.py", 11, "DL117")}
    _write(tmp_path, {"main.py": caller.replace("torch.nn.Linear(16, 1)", 'torch.nn.Linear(16, 1).to("cuda")')})
    assert _check(tmp_path) == set()
    # a loop that moves the model itself is fine
    _write(
        tmp_path,
        {
            "main.py": caller,
            "engine.py": engine.replace("            for inputs", "            net.to(dev)\n            for inputs"),
        },
    )
    assert _check(tmp_path) == set()


def test_an_imported_logging_helper_that_reads_its_loss_on_the_host_every_step(tmp_path: Path) -> None:
    logging_utils = """
        def log_scalars(writer, loss, step):
            writer.add_scalar("train/loss", float(loss), step)
    """
    caller = """
        import torch

        from logging_utils import log_scalars


        def fit(net, loader, writer):
            opt = torch.optim.Adam(net.parameters())
            for step, (x, y) in enumerate(loader):
                loss = torch.nn.functional.l1_loss(net(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
                log_scalars(writer, loss, step)
    """
    _write(tmp_path, {"logging_utils.py": logging_utils, "fit.py": caller})
    assert _check(tmp_path) == {("fit.py", 14, "DL401")}
    _write(
        tmp_path,
        {
            "fit.py": caller.replace(
                "log_scalars(writer, loss, step)",
                "log_scalars(writer, loss.detach(), step) if step % 100 == 0 else None",
            )
        },
    )
    assert _check(tmp_path) == set()


def test_a_plain_list_of_layers_from_an_imported_builder(tmp_path: Path) -> None:
    heads = """
        from torch import nn


        def make_heads(dim, tasks):
            return [nn.Linear(dim, n) for n in tasks]
    """
    model = """
        from torch import nn

        from heads import make_heads


        class MultiTask(nn.Module):
            def __init__(self, dim, tasks):
                super().__init__()
                self.trunk = nn.Linear(dim, dim)
                self.heads = make_heads(dim, tasks)

            def forward(self, x):
                h = self.trunk(x)
                return [head(h) for head in self.heads]
    """
    _write(tmp_path, {"heads.py": heads, "model.py": model})
    assert _check(tmp_path) == {("model.py", 11, "DL103")}
    _write(tmp_path, {"model.py": model.replace("= make_heads(dim, tasks)", "= nn.ModuleList(make_heads(dim, tasks))")})
    assert _check(tmp_path) == set()
    # a builder of activations only holds nothing to move
    _write(tmp_path, {"model.py": model, "heads.py": heads.replace("nn.Linear(dim, n)", "nn.ReLU()")})
    assert _check(tmp_path) == set()


def test_an_imported_step_helper_without_its_scaler_under_float16_autocast(tmp_path: Path) -> None:
    steps = """
        def optimize(loss, optimizer, grad_scaler=None):
            optimizer.zero_grad()
            if grad_scaler is None:
                loss.backward()
                optimizer.step()
            else:
                grad_scaler.scale(loss).backward()
                grad_scaler.step(optimizer)
                grad_scaler.update()
    """
    caller = """
        import torch

        from steps import optimize


        def train(net, data, opt):
            for x, y in data:
                with torch.autocast(device_type="cuda", dtype=torch.float16):
                    loss = torch.nn.functional.mse_loss(net(x.cuda()), y.cuda())
                optimize(loss, opt)
    """
    _write(tmp_path, {"steps.py": steps, "train.py": caller})
    assert _check(tmp_path) == {("train.py", 11, "DL301")}
    scaled = caller.replace("def train(net, data, opt):", "def train(net, data, opt, scaler):").replace(
        "optimize(loss, opt)", "optimize(loss, opt, grad_scaler=scaler)"
    )
    _write(tmp_path, {"train.py": scaled})
    assert _check(tmp_path) == set()
    # bfloat16 needs no scaler
    _write(tmp_path, {"train.py": caller.replace("torch.float16", "torch.bfloat16")})
    assert _check(tmp_path) == set()


def test_a_metric_kept_by_an_imported_class_and_fed_device_tensors(tmp_path: Path) -> None:
    scoring = """
        from torchmetrics.regression import MeanAbsoluteError


        class Scorer:
            def __init__(self):
                self.mae = MeanAbsoluteError()
                self.count = 0

            def add(self, prediction, truth):
                self.mae(prediction, truth)
                self.count += 1
    """
    caller = """
        import torch

        from scoring import Scorer


        def score(model, pairs):
            scorer = Scorer()
            for x, y in pairs:
                scorer.add(model(x.cuda()).squeeze(-1), y.cuda())
            return scorer.mae.compute()
    """
    _write(tmp_path, {"scoring.py": scoring, "score.py": caller})
    assert _check(tmp_path) == {("score.py", 8, "DL113")}
    _write(
        tmp_path,
        {
            "score.py": caller.replace(
                "scorer.add(model(x.cuda()).squeeze(-1), y.cuda())", "scorer.add(model(x.cuda()).squeeze(-1).cpu(), y)"
            )
        },
    )
    assert _check(tmp_path) == set()


def test_an_imported_collate_that_moves_the_batch_is_not_an_unmoved_batch(tmp_path: Path) -> None:
    batching = """
        import torch


        def to_gpu_batch(items):
            xs = torch.stack([x for x, _ in items]).cuda()
            ys = torch.tensor([y for _, y in items]).cuda()
            return xs, ys
    """
    caller = """
        import torch
        from torch.utils.data import DataLoader

        from batching import to_gpu_batch


        def fit(dataset, net, opt):
            net = net.cuda()
            for xs, ys in DataLoader(dataset, batch_size=8, collate_fn=to_gpu_batch):
                loss = torch.nn.functional.cross_entropy(net(xs), ys)
                opt.zero_grad()
                loss.backward()
                opt.step()
    """
    _write(tmp_path, {"batching.py": batching, "fit.py": caller})
    assert _check(tmp_path) == set()
    _write(tmp_path, {"batching.py": batching.replace(").cuda()", ")")})
    assert _check(tmp_path) == {("fit.py", 11, "DL105")}


GENERATOR_HELPER = """
    import torch
    from torch.utils.data import RandomSampler


    def seeded(seed, device="cuda"):
        gen = torch.Generator(device)
        gen.manual_seed(seed)
        return gen


    def sampler_for(dataset):
        return RandomSampler(dataset, generator=seeded(1234))
"""


def test_a_cuda_generator_returned_by_a_helper_of_the_file_handed_to_a_sampler() -> None:
    assert _found(GENERATOR_HELPER) == [(13, "DL115")]
    assert _found(GENERATOR_HELPER.replace("seeded(1234)", 'seeded(1234, device="cpu")')) == []


def test_a_cuda_generator_returned_by_an_imported_function_handed_to_a_sampler(tmp_path: Path) -> None:
    helper, _, caller = GENERATOR_HELPER.partition("\n\n\n    def sampler_for")
    caller = (
        "import torch\n    from torch.utils.data import RandomSampler\n\n    from seeds import seeded\n\n\n    def sampler_for"
        + caller
    )
    _write(tmp_path, {"seeds.py": helper, "samplers.py": "    " + caller})
    assert _check(tmp_path) == {("samplers.py", 8, "DL115")}
    _write(tmp_path, {"samplers.py": "    " + caller.replace("seeded(1234)", 'seeded(1234, device="cpu")')})
    assert _check(tmp_path) == set()
    _write(tmp_path, {"samplers.py": "    " + caller.replace("seeded(1234)", 'seeded(1234, "cpu")')})
    assert _check(tmp_path) == set()


def test_a_wrapper_checkpoint_saved_and_loaded_under_another_modules_path_constant(tmp_path: Path) -> None:
    paths = """
        BEST = "checkpoints/best.pt"
    """
    train = """
        import torch
        from torch import nn

        import paths


        def train(net):
            net = nn.parallel.DistributedDataParallel(net.cuda())
            torch.save({"net": net.state_dict()}, paths.BEST)
    """
    serve = """
        import torch
        from torch import nn

        from paths import BEST


        def load():
            net = nn.Linear(4, 4)
            net.load_state_dict(torch.load(BEST, map_location="cpu")["net"])
            return net
    """
    _write(tmp_path, {"paths.py": paths, "train.py": train, "serve.py": serve})
    assert ("serve.py", 10, "DL204") in _check(tmp_path)
    _write(tmp_path, {"train.py": train.replace("net.state_dict()", "net.module.state_dict()")})
    assert ("serve.py", 10, "DL204") not in _check(tmp_path)


def test_an_eager_optimizer_from_an_imported_builder_before_the_model_moves(tmp_path: Path) -> None:
    optim = """
        import torch


        def make_optimizer(net, lr=0.1):
            return torch.optim.Adagrad(net.parameters(), lr=lr)
    """
    caller = """
        import torch

        from optim import make_optimizer

        net = torch.nn.Embedding(1000, 32)
        opt = make_optimizer(net)
        net = net.cuda()
    """
    _write(tmp_path, {"optim.py": optim, "run.py": caller})
    assert _check(tmp_path) == {("run.py", 7, "DL111")}
    _write(
        tmp_path,
        {
            "run.py": caller.replace("torch.nn.Embedding(1000, 32)", "torch.nn.Embedding(1000, 32).cuda()").replace(
                "net = net.cuda()\n", ""
            )
        },
    )
    assert _check(tmp_path) == set()
    # a builder of an optimizer that makes its state lazily is fine before the move
    _write(tmp_path, {"optim.py": optim.replace("Adagrad", "SGD"), "run.py": caller})
    assert _check(tmp_path) == set()
