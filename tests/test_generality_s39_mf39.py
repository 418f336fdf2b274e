"""Multi-file shapes of DL203 (session 39, helper mf39): a wrapper's attribute read in another
module than the one that wraps. Each is tested in other spellings than the re-created project
that showed it (`fixtures/projects/ddp_forward_ctx_counts_on_wrapper`,
`ddp_net_attribute_in_subclass_trainer`), with its one-fix twin clean."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from devicelint.cli import cli


def _lint(root: Path, files: dict[str, str]) -> list[tuple[str, int, str, str]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL203", str(root)])
    assert result.exit_code in (0, 1), result.output
    return sorted(
        (Path(r["path"]).relative_to(root).as_posix(), r["line"], r["code"], r["message"])
        for r in json.loads(result.stdout)
    )


# -- a helper of another module that updates an attribute in place (`+=`) reads it first -------

COUNTER = """
    def count_step(net, by=1):
        net.steps_done += by
        return net
"""

ENGINE_KEPT = """
    import torch
    from torch import nn

    from counters import count_step


    class Runner:
        def __init__(self, net):
            self.wrapped = nn.DataParallel(net.cuda())

        def step(self, x):
            count_step(self.wrapped, by=2)
            return self.wrapped(x.cuda())
"""

ENGINE_LOCAL = """
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import counters


    def fit(net, batches, rank):
        ddp = DDP(net.cuda(rank), device_ids=[rank])
        for x in batches:
            counters.count_step(ddp)
            ddp(x.cuda(rank)).sum().backward()
"""


def test_an_in_place_update_in_a_helper_reads_the_wrappers_attribute(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"counters.py": COUNTER, "runner.py": ENGINE_KEPT, "fit.py": ENGINE_LOCAL})
    assert [(p, line, code) for p, line, code, _ in found] == [("fit.py", 11, "DL203"), ("runner.py", 13, "DL203")]
    assert found[1][3] == (
        "`counters.count_step` reads `net.steps_done` (counters.py:3) from the `DataParallel` wrapper that "
        "`step` passes to it as `net`, which does not forward its model's attributes (AttributeError); pass "
        "`self.wrapped.module`, or read `net.module.steps_done` there"
    )


def test_the_helper_that_sets_the_attribute_first_or_an_unwrapped_model_is_clean(tmp_path: Path) -> None:
    setter = """
        def count_step(net, by=1):
            net.steps_done = 0
            net.steps_done += by
    """
    assert _lint(tmp_path / "a", {"counters.py": setter, "runner.py": ENGINE_KEPT}) == []
    unwrapped = ENGINE_KEPT.replace("count_step(self.wrapped, by=2)", "count_step(self.wrapped.module, by=2)")
    assert _lint(tmp_path / "b", {"counters.py": COUNTER, "runner.py": unwrapped}) == []


# -- a subclass reads through the wrapper its base class of another module keeps on `self` ------

BASE = """
    import torch
    from torch import nn


    class BaseRunner:
        def __init__(self, net, gpus):
            net = net.cuda()
            if gpus > 1:
                net = nn.DataParallel(net)
            self.model = net

        def fit(self, batches):
            for x in batches:
                self.step(x)
"""

SUBCLASS = """
    import torch

    from engine.base import BaseRunner


    class GanRunner(BaseRunner):
        def step(self, x):
            fake = self.model.generator(torch.randn(x.shape[0], 64, device="cuda"))
            return self.model.critic(fake).mean()

        def parameters(self):
            return self.model.parameters()
"""


def test_a_subclass_reading_its_base_classes_wrapper_is_found(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"engine/__init__.py": "", "engine/base.py": BASE, "engine/gan.py": SUBCLASS})
    assert [(p, line, code) for p, line, code, _ in found] == [
        ("engine/gan.py", 9, "DL203"),
        ("engine/gan.py", 10, "DL203"),
    ]
    assert found[0][3] == (
        "`self.model.generator` reads `generator` from the `DataParallel`/DDP wrapper that the base class "
        "`BaseRunner` (engine/base.py) keeps in `self.model`, which does not forward its model's attributes "
        "(AttributeError); use `self.model.module.generator`"
    )


def test_a_subclass_that_unwraps_or_tests_the_wrapper_is_clean(tmp_path: Path) -> None:
    through_module = SUBCLASS.replace("self.model.generator", "self.model.module.generator").replace(
        "self.model.critic", "self.model.module.critic"
    )
    assert (
        _lint(tmp_path / "a", {"engine/__init__.py": "", "engine/base.py": BASE, "engine/gan.py": through_module}) == []
    )
    tested = SUBCLASS.replace(
        "        def step(self, x):\n",
        "        def step(self, x):\n            assert not isinstance(self.model, torch.nn.DataParallel)\n",
    )
    assert _lint(tmp_path / "b", {"engine/__init__.py": "", "engine/base.py": BASE, "engine/gan.py": tested}) == []
    unwrapping_base = BASE.replace(
        "            self.model = net\n", "            self.model = net\n            self.model = self.model.module\n"
    )
    assert (
        _lint(tmp_path / "c", {"engine/__init__.py": "", "engine/base.py": unwrapping_base, "engine/gan.py": SUBCLASS})
        == []
    )


# -- a wrapper handed inside a list or tuple that the helper unpacks ----------------------------

EPOCH = """
    def run_epoch(models, batches):
        student, teacher = models
        student.head.requires_grad_(True)
        for x in batches:
            teacher(x).sum().backward()
"""

PAIR_SCRIPT = """
    import torch
    from torch import nn

    from epoch import run_epoch


    def main(student, teacher, batches):
        student = nn.DataParallel(student.cuda())
        teacher = teacher.cuda()
        run_epoch((student, teacher), batches)
        run_epoch([teacher, student], batches)
"""


def test_a_wrapper_inside_a_list_the_helper_unpacks_is_found(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"epoch.py": EPOCH, "pair.py": PAIR_SCRIPT})
    # only the first element's attributes are read: `[teacher, student]` hands the wrapper second
    assert [(p, line, code) for p, line, code, _ in found] == [("pair.py", 11, "DL203")]
    assert found[0][3] == (
        "`epoch.run_epoch` reads `models[0].head` (epoch.py:4) from the `DataParallel` wrapper that `main` "
        "passes to it as `models[0]`, which does not forward its model's attributes (AttributeError); pass "
        "`student.module`, or read `models[0].module.head` there"
    )


def test_an_unpacked_part_the_helper_tests_or_rebinds_is_clean(tmp_path: Path) -> None:
    tested = EPOCH.replace(
        "        student.head", "        student = getattr(student, 'module', student)\n        student.head"
    )
    assert _lint(tmp_path / "a", {"epoch.py": tested, "pair.py": PAIR_SCRIPT}) == []
    unwrapped = PAIR_SCRIPT.replace("run_epoch((student, teacher)", "run_epoch((student.module, teacher)")
    assert _lint(tmp_path / "b", {"epoch.py": EPOCH, "pair.py": unwrapped}) == []


# -- a wrapper handed to an instance of an imported class called directly (`__call__`) ---------

SCORER = """
    import torch


    class Scorer:
        def __init__(self, scale):
            self.scale = scale

        def __call__(self, images, net):
            with torch.no_grad():
                return net.embed(images) * self.scale
"""

SCORE_SCRIPT = """
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from scoring import Scorer


    def evaluate(net, loader, rank):
        net = DistributedDataParallel(net.cuda(rank), device_ids=[rank])
        score = Scorer(0.5)
        return [score(x.cuda(rank), net) for x in loader]
"""


def test_a_wrapper_handed_to_an_imported_instance_call_is_found(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"scoring.py": SCORER, "score.py": SCORE_SCRIPT})
    assert [(p, line, code) for p, line, code, _ in found] == [("score.py", 11, "DL203")]
    assert found[0][3] == (
        "`scoring.Scorer.__call__` reads `net.embed` (scoring.py:11) from the `DistributedDataParallel` wrapper "
        "that `evaluate` passes to it as `net`, which does not forward its model's attributes (AttributeError); "
        "pass `net.module`, or read `net.module.embed` there"
    )


def test_an_imported_instance_call_given_the_bare_model_is_clean(tmp_path: Path) -> None:
    bare = SCORE_SCRIPT.replace("score(x.cuda(rank), net)", "score(x.cuda(rank), net.module)")
    assert _lint(tmp_path / "a", {"scoring.py": SCORER, "score.py": bare}) == []
    unwrapping = SCORER.replace("return net.embed(images)", "return net.module.embed(images)")
    assert _lint(tmp_path / "b", {"scoring.py": unwrapping, "score.py": SCORE_SCRIPT}) == []


# -- DL114: an imported helper hands its sampler a CPU generator it makes, under a CUDA default --

LOADERS = """
    import torch
    from torch.utils.data import DataLoader, RandomSampler


    def shuffled(ds, seed):
        return DataLoader(ds, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed))


    def sampled(ds):
        return RandomSampler(ds, generator=torch.Generator(torch.device("cpu")))
"""

LAUNCH = """
    import torch

    import loaders


    def launch(ds):
        torch.set_default_device("cuda")
        train = loaders.shuffled(ds, 0)
        sampler = loaders.sampled(ds)
        return train, sampler
"""


def test_a_cpu_generator_made_by_an_imported_helper_under_a_cuda_default_is_found(tmp_path: Path) -> None:
    files = {"loaders.py": LOADERS, "launch.py": LAUNCH}
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL114", str(tmp_path)]
    )
    rows = json.loads(result.stdout)
    assert [(Path(r["path"]).name, r["line"], r["code"]) for r in rows] == [
        ("launch.py", 9, "DL114"),
        ("launch.py", 10, "DL114"),
    ]
    assert rows[0]["message"] == (
        "`loaders.shuffled(...)` (its `DataLoader(...)` at loaders.py:7) draws with the CPU generator it is handed "
        'there after `torch.set_default_device("cuda")`, so it fails with `Expected a ' + "'cuda'" + " device type "
        "for generator but found 'cpu'`; pass `generator=torch.Generator(device=" + '"cuda")`'
    )


def test_a_helper_given_a_device_generator_or_called_without_a_cuda_default_is_clean(tmp_path: Path) -> None:
    on_device = LOADERS.replace(
        "torch.Generator().manual_seed(seed)", 'torch.Generator(device="cuda").manual_seed(seed)'
    )
    on_device = on_device.replace('torch.Generator(torch.device("cpu"))', "torch.Generator(torch.get_default_device())")
    for folder, loaders, launch in (
        ("a", on_device, LAUNCH),
        ("b", LOADERS, LAUNCH.replace('        torch.set_default_device("cuda")\n', "")),
    ):
        root = tmp_path / folder
        root.mkdir()
        (root / "loaders.py").write_text(textwrap.dedent(loaders), encoding="utf-8")
        (root / "launch.py").write_text(textwrap.dedent(launch), encoding="utf-8")
        result = CliRunner().invoke(
            cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL114", str(root)]
        )
        assert json.loads(result.stdout) == []


# -- DL103: an imported helper returns a plain dict of layers or metrics that a module keeps ----

HEADS = """
    from torch import nn
    from torchmetrics.classification import MulticlassAccuracy


    def make_heads(dim, tasks):
        return {"cls": nn.Linear(dim, tasks), "aux": nn.Sequential(nn.Linear(dim, dim), nn.ReLU())}


    def make_meters(n):
        return {"top1": MulticlassAccuracy(num_classes=n)}
"""

NET = """
    import torch
    from torch import nn

    import heads as H


    class MultiTask(nn.Module):
        def __init__(self, dim, tasks):
            super().__init__()
            self.trunk = nn.Linear(dim, dim)
            self.heads = H.make_heads(dim, tasks)
            self.meters = H.make_meters(tasks)

        def forward(self, x):
            h = self.trunk(x)
            return {k: head(h) for k, head in self.heads.items()}
"""


def test_a_plain_dict_of_layers_or_metrics_from_an_imported_helper_is_found(tmp_path: Path) -> None:
    (tmp_path / "heads.py").write_text(textwrap.dedent(HEADS), encoding="utf-8")
    (tmp_path / "net.py").write_text(textwrap.dedent(NET), encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL103", str(tmp_path)]
    )
    rows = json.loads(result.stdout)
    assert [(Path(r["path"]).name, r["line"], r["code"]) for r in rows] == [
        ("net.py", 12, "DL103"),
        ("net.py", 13, "DL103"),
    ]
    assert rows[0]["message"] == (
        "`self.heads` keeps submodules in a plain dict: `model.to(device)` never moves them, `state_dict()` never "
        "saves them and `parameters()` skips them; use `nn.ModuleDict`"
    )


def test_a_registered_or_stateless_dict_from_an_imported_helper_is_clean(tmp_path: Path) -> None:
    registered = NET.replace("H.make_heads(dim, tasks)", "nn.ModuleDict(H.make_heads(dim, tasks))").replace(
        "H.make_meters(tasks)", "nn.ModuleDict(H.make_meters(tasks))"
    )
    stateless = HEADS.replace(
        '{"cls": nn.Linear(dim, tasks), "aux": nn.Sequential(nn.Linear(dim, dim), nn.ReLU())}',
        '{"act": nn.ReLU(), "drop": nn.Dropout(0.1)}',
    ).replace('{"top1": MulticlassAccuracy(num_classes=n)}', '{"n": n}')
    for folder, heads, net in (("a", HEADS, registered), ("b", stateless, NET)):
        root = tmp_path / folder
        root.mkdir()
        (root / "heads.py").write_text(textwrap.dedent(heads), encoding="utf-8")
        (root / "net.py").write_text(textwrap.dedent(net), encoding="utf-8")
        result = CliRunner().invoke(
            cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL103", str(root)]
        )
        assert json.loads(result.stdout) == []


# -- DL111: an imported trainer class moves the model it keeps after the optimizer was built -----

RUNNER = """
    class Runner:
        def __init__(this, net, opt, gpu=None):
            this.net = net
            this.opt = opt
            if gpu is not None:
                this.net.to(f"cuda:{gpu}")
"""

FIT = """
    import torch

    from runner import Runner


    def fit(net, gpu):
        opt = torch.optim.Adagrad(net.parameters(), lr=0.1)
        return Runner(net, opt, gpu=gpu)


    def resume(net, path):
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        opt.load_state_dict(torch.load(path, map_location="cpu")["opt"])
        return Runner(opt=opt, net=net, gpu=0)
"""


def test_an_imported_class_that_moves_the_model_it_keeps_after_the_optimizer_is_found(tmp_path: Path) -> None:
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER), encoding="utf-8")
    (tmp_path / "fit.py").write_text(textwrap.dedent(FIT), encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL111", str(tmp_path)]
    )
    rows = json.loads(result.stdout)
    assert [(Path(r["path"]).name, r["line"], r["code"]) for r in rows] == [
        ("fit.py", 8, "DL111"),
        ("fit.py", 14, "DL111"),
    ]
    assert rows[0]["message"] == (
        "`torch.optim.Adagrad(net.parameters(), lr=0.1)` creates Adagrad's `sum` state in its constructor while `net` is still on the CPU, "
        "so the state stays there after `Runner(net, opt, gpu=gpu)` and the first `step()` fails; move the model "
        "before building the optimizer"
    )


def test_an_imported_class_that_keeps_two_models_in_one_attribute_or_moves_none_is_clean(tmp_path: Path) -> None:
    shared = RUNNER.replace("            this.opt = opt\n", "            this.opt = opt\n            this.net = opt\n")
    unmoved = RUNNER.replace('                this.net.to(f"cuda:{gpu}")\n', "                this.gpu = gpu\n")
    for folder, runner in (("a", shared), ("b", unmoved)):
        root = tmp_path / folder
        root.mkdir()
        (root / "runner.py").write_text(textwrap.dedent(runner), encoding="utf-8")
        (root / "fit.py").write_text(textwrap.dedent(FIT), encoding="utf-8")
        result = CliRunner().invoke(
            cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL111", str(root)]
        )
        assert json.loads(result.stdout) == []


# -- an imported instance's `__call__`: what it does under a test of its own settings is unknown --

LOSS = """
    import torch


    class BoxLoss:
        def __init__(self, balance=False):
            self.balance = balance
            self.weight = 1.0

        def __call__(self, pred, target):
            loss = (pred - target).abs().mean()
            if self.balance:
                self.weight = 0.99 * self.weight + 0.01 / loss.detach().item()
            return loss * self.weight
"""

LOOP = """
    import torch

    from losses import BoxLoss


    def train(model, loader, opt):
        model.cuda()
        criterion = BoxLoss()
        for x, y in loader:
            pred = model(x.cuda())
            loss = criterion(pred, y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_host_read_under_the_instances_own_setting_is_not_taken_for_every_call(tmp_path: Path) -> None:
    for folder, losses, expected in (
        ("a", LOSS, []),
        (
            "b",
            LOSS.replace("            if self.balance:\n                self.weight", "            self.weight"),
            [("loop.py", 12, "DL401")],
        ),
    ):
        root = tmp_path / folder
        root.mkdir()
        (root / "losses.py").write_text(textwrap.dedent(losses), encoding="utf-8")
        (root / "loop.py").write_text(textwrap.dedent(LOOP), encoding="utf-8")
        result = CliRunner().invoke(
            cli, ["check", "--output-format", "json", "--no-cache", "--select", "DL401", str(root)]
        )
        assert [(Path(r["path"]).name, r["line"], r["code"]) for r in json.loads(result.stdout)] == expected
