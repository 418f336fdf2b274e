"""Multi-file shapes of session 41 (helper mf41): a loader helper whose `map_location` parameter
defaults to `None` and that its callers leave out (DL501), and a mixed-precision optimizer
wrapper handed to a step function as a parameter, whose scaler the float16 check must see
(DL301, which cried wolf). Each is tested in other spellings than the re-created projects that
showed it (`fixtures/projects/resume_helper_map_location_left_out_by_ddp_workers`,
`optimizer_wrapper_step_unscales_prepared_grads_again`), with a clean twin."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from devicelint.cli import cli


def _lint(root: Path, files: dict[str, str], code: str) -> list[tuple[str, int, str, str]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["check", "--output-format", "json", "--no-cache", "-j", "1", "--select", code, str(root)]
    )
    assert result.exit_code in (0, 1), result.output
    return sorted(
        (Path(r["path"]).relative_to(root).as_posix(), r["line"], r["code"], r["message"])
        for r in json.loads(result.stdout)
    )


def _where(found: list[tuple[str, int, str, str]]) -> list[tuple[str, int, str]]:
    return [(path, line, code) for path, line, code, _ in found]


# -- DL501: a loader helper that leaves `map_location` to its callers -------------------------

CHECKPOINTS = """
    import torch


    def restore(path, map_location=None):
        return torch.load(path, map_location=map_location)


    def restore_positional(path, device=None):
        state = torch.load(path, device)
        return state["model"]


    def restore_or_host(path, map_location=None):
        map_location = map_location or "cpu"
        return torch.load(path, map_location=map_location)
"""

RESUME = """
    import torch

    import checkpoints as C
    from checkpoints import restore_positional


    def resume(model, args):
        state = C.restore(args.resume)
        model.load_state_dict(state["model"])
        model.load_state_dict(restore_positional(args.weights, device=None))


    def resume_mapped(model, args, device):
        state = C.restore(args.resume, map_location=device)
        model.load_state_dict(state["model"])
        model.load_state_dict(restore_positional(args.weights, "cpu"))
        model.load_state_dict(C.restore_or_host(args.weights))
"""

ONE_FILE = """
    import torch


    class Checkpointer:
        def __init__(self, folder):
            self.folder = folder

        def load(self, name, map_location=None):
            return torch.load(f"{self.folder}/{name}", map_location=map_location)


    def resume(model, args):
        ckpt = Checkpointer(args.out)
        model.load_state_dict(ckpt.load("last.pt"))
        model.load_state_dict(ckpt.load("best.pt", map_location="cpu"))
        states = ckpt.load("rng.pkl")  # RNG states and a sampler: no device tensors, not reported
        torch.set_rng_state(states["torch"])
        args.loader.set_sampler(ckpt.load("sampler.bin"))
"""


def test_dl501_reports_the_calls_that_leave_a_helpers_map_location_none(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"checkpoints.py": CHECKPOINTS, "resume.py": RESUME, "one_file.py": ONE_FILE}, "DL501")
    assert _where(found) == [
        ("one_file.py", 15, "DL501"),
        ("resume.py", 9, "DL501"),
        ("resume.py", 11, "DL501"),
    ]
    assert found[1][3] == (
        "`C.restore(...)` leaves `map_location` `None`, which `checkpoints.restore` (checkpoints.py:6) hands to "
        "`torch.load` as `map_location`: a checkpoint saved on a GPU fails on a CPU-only machine or lands on the "
        'saving GPU; pass `map_location=device` (or "cpu")'
    )
    assert "leaves `device` `None`, which `checkpoints.restore_positional` (checkpoints.py:10)" in found[2][3]
    assert "leaves `map_location` `None`, which `load` hands to `torch.load`" in found[0][3]


# -- DL301: the scaler of a wrapper handed in as a parameter -------------------------------

AMP_OPTIMIZER = """
    import torch


    class AmpOptimizer:
        def __init__(self, optimizer):
            self.optimizer = optimizer
            self.grad_scaler = torch.amp.GradScaler("cuda")

        def scale_loss(self, loss):
            return self.grad_scaler.scale(loss)

        def step(self):
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()


    class PlainOptimizer:
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def scale_loss(self, loss):
            return loss

        def step(self):
            self.optimizer.step()
"""

STEPS = """
    import torch

    from amp_optimizer import AmpOptimizer, PlainOptimizer


    def step(model, batch, opt):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch.cuda()).mean()
        opt.scale_loss(loss).backward()
        opt.step()


    def plain_step(model, batch, opt):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch.cuda()).mean()
        opt.scale_loss(loss).backward()
        opt.step()


    def train(model, loader):
        wrapped = AmpOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        for batch in loader:
            step(model, batch, wrapped)
            plain_step(model, batch, PlainOptimizer(torch.optim.SGD(model.parameters(), lr=0.1)))
"""


def test_dl301_sees_the_scaler_of_an_imported_wrapper_handed_in(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"amp_optimizer.py": AMP_OPTIMIZER, "steps.py": STEPS}, "DL301")
    assert _where(found) == [("steps.py", 17, "DL301")]


# -- DL117: a model a plain class keeps on `self`, handed to an imported runner ------------

NETS = """
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)

        def forward(self, x):
            return self.body(x)
"""

RUNNERS = """
    class Evaluator:
        def __init__(self, net, device="cuda"):
            self.net = net
            self.device = device

        def run(self, batches):
            outs = []
            for batch in batches:
                feats = {k: v.to(self.device) for k, v in batch.items()}
                outs.append(self.net(feats))
            return outs


    def predict(model, xs, device):
        moved = [x.to(device) for x in xs]
        return model(moved)
"""

SESSIONS = """
    import torch

    from nets import Net
    from runners import Evaluator, predict


    class Session:
        def __init__(self, path):
            self.path = path
            self.net = None

        def restore(self):
            self.net = Net()
            self.net.load_state_dict(torch.load(self.path, map_location="cpu"))

        def score(self, batches):
            return Evaluator(self.net).run(batches)


    class Service:
        def __init__(self):
            self.model = Net()

        def answer(self, xs):
            return predict(self.model, xs, "cuda")


    class MovedSession:
        def __init__(self, path):
            self.path = path
            self.weights = None

        def restore(self):
            self.weights = Net()
            self.weights.load_state_dict(torch.load(self.path, map_location="cpu"))
            self.weights.to("cuda")

        def score(self, batches):
            return Evaluator(self.weights).run(batches)


    class TwoBuilders:
        def __init__(self):
            self.backbone = Net().cuda()

        def reset(self):
            self.backbone = Net()

        def score(self, batches):
            return Evaluator(self.backbone).run(batches)
"""


def test_dl117_follows_a_model_a_class_keeps_into_an_imported_runner(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"nets.py": NETS, "runners.py": RUNNERS, "sessions.py": SESSIONS}, "DL117")
    assert _where(found) == [("sessions.py", 18, "DL117"), ("sessions.py", 26, "DL117")]
    assert found[0][3] == (
        "`self.net` is built on the CPU and never moved, but `runners.Evaluator` (runners.py:11) runs it on "
        "inputs it moves to the device, and never moves it; move the model first: `self.net.to(device)`"
    )
    assert "`runners.predict` (runners.py:17)" in found[1][3]


# -- DL308: two methods of an imported optimizer wrapper that both unscale -----------------

WRAPPERS = """
    import torch


    class AmpWrapper:
        def __init__(self, optimizer):
            self.optim = optimizer
            self.loss_scaler = torch.amp.GradScaler("cuda")

        def clip_grads(self, params):
            self.loss_scaler.unscale_(self.optim)
            torch.nn.utils.clip_grad_norm_(params, 1.0)

        def apply(self, params):
            self.clip_grads(params)
            self.loss_scaler.step(self.optim)
            self.loss_scaler.update()

        def finish(self):
            self.loss_scaler.step(self.optim)
            self.loss_scaler.update()


    class GanWrapper:
        def __init__(self, opt_g, opt_d):
            self.opt_g = opt_g
            self.opt_d = opt_d
            self.scaler = torch.amp.GradScaler("cuda")

        def unscale_generator(self):
            self.scaler.unscale_(self.opt_g)

        def step_discriminator(self):
            self.scaler.unscale_(self.opt_d)
            self.scaler.step(self.opt_d)
            self.scaler.update()
"""

LOOPS = """
    import torch

    from wrappers import AmpWrapper, GanWrapper


    def train(model, loader, cfg):
        w = AmpWrapper(torch.optim.AdamW(model.parameters()))
        for x in loader:
            w.loss_scaler.scale(model(x.cuda()).mean()).backward()
            w.clip_grads(model.parameters())
            w.apply(model.parameters())


    def train_clipping_sometimes(model, loader, cfg):
        w = AmpWrapper(torch.optim.AdamW(model.parameters()))
        for x in loader:
            w.loss_scaler.scale(model(x.cuda()).mean()).backward()
            if cfg.clip:
                w.clip_grads(model.parameters())
            w.apply(model.parameters())


    def train_right(model, loader, cfg):
        w = AmpWrapper(torch.optim.AdamW(model.parameters()))
        for x in loader:
            w.loss_scaler.scale(model(x.cuda()).mean()).backward()
            if cfg.clip:
                w.clip_grads(model.parameters())
                w.finish()
            else:
                w.apply(model.parameters())


    def train_gan(gen, disc, loader):
        g = GanWrapper(torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters()))
        for x in loader:
            g.scaler.scale(disc(gen(x.cuda())).mean()).backward()
            g.unscale_generator()
            g.step_discriminator()
"""


def test_dl308_two_unscaling_methods_of_an_imported_wrapper(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"wrappers.py": WRAPPERS, "loops.py": LOOPS}, "DL308")
    assert _where(found) == [("loops.py", 12, "DL308"), ("loops.py", 21, "DL308")]
    assert found[0][3] == (
        "`w.apply(model.parameters())` unscales `w.optim` a second time since the last `update()` (first at "
        "`w.clip_grads(model.parameters())`): it raises `RuntimeError: unscale_() has already been called on this "
        "optimizer since the last update()`; unscale once per step"
    )


# -- DL102: a list of tensors cached on the first input's device ---------------------------

CACHES = """
    import torch
    from torch import nn


    class Anchors(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.sizes = sizes
            self.cell_anchors = None

        def _make(self, size, device):
            return torch.tensor([-size, -size, size, size], dtype=torch.float32, device=device) / 2

        def _set(self, device):
            if self.cell_anchors is not None:
                return
            self.cell_anchors = [self._make(s, device) for s in self.sizes]

        def forward(self, feats):
            self._set(feats[0].device)
            return [f.flatten(1)[:, :4] + a for f, a in zip(feats, self.cell_anchors)]


    class Grids(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
            self.grids = None

        def forward(self, x):
            if self.grids is None:
                self.grids = [torch.zeros(4, device=x.device), torch.ones(4, device=x.device)]
            return x + self.grids[0] * self.grids[1]


    class CheckedAnchors(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.sizes = sizes
            self.anchors = None

        def forward(self, feats):
            device = feats[0].device
            if self.anchors is not None and self.anchors[0].device == device:
                pass
            else:
                self.anchors = [torch.full((4,), float(s), device=device) for s in self.sizes]
            return [f.flatten(1)[:, :4] + a for f, a in zip(feats, self.anchors)]
"""


def test_dl102_a_list_cached_on_the_first_inputs_device(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"caches.py": CACHES}, "DL102")
    assert _where(found) == [("caches.py", 10, "DL102"), ("caches.py", 29, "DL102")]
    assert found[0][3] == (
        "`self.cell_anchors` starts empty and caches a list of tensors made on the inputs' device the first time "
        "a method runs (while `self.cell_anchors` is None), as a plain attribute: moving the model afterwards "
        "(`.to()`, `.cpu()` for inference) never moves the cache, which stays on the old device; rebuild it when "
        "the device changes (`if self.cell_anchors is None or self.cell_anchors[0].device != device:`)"
    )
