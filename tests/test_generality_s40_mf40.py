"""Multi-file shapes of session 40 (helper mf40): a CUDA default set by an imported function
(DL114), a device parameter left at an imported function's "cuda" default (DL107), a wrapper
returned by a method of an imported class and a helper that unwraps through an attribute
(DL203), and a host table an imported helper indexes with what it is handed (DL116). Each is
tested in other spellings than the re-created projects that showed it
(`fixtures/projects/loader_shuffles_after_imported_env_setup_sets_cuda_default`,
`anchor_grid_takes_cuda_default_from_imported_generator`,
`ddp_strategy_save_model_reads_inner_attribute`, `segmap_decoder_indexes_host_palette`), with
a clean twin."""

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


# -- DL114: a CUDA default set by a function of another module, called before the sampler ----

SETUP = """
    import torch


    def prepare(seed):
        torch.manual_seed(seed)
        torch.set_default_tensor_type(torch.cuda.FloatTensor)


    def prepare_then_reset(seed):
        torch.set_default_device("cuda:0")
        torch.set_default_device("cpu")


    def prepare_device(name):
        torch.set_default_device(name)
"""

SPLIT_SCRIPT = """
    import torch
    from torch.utils.data import TensorDataset, random_split

    import setup as S


    def main():
        S.prepare(0)
        ds = TensorDataset(torch.arange(100.0))
        return random_split(ds, [80, 20])
"""

LOADER_TRAINER = """
    import torch
    from torch.utils.data import DataLoader

    from setup import prepare, prepare_device, prepare_then_reset


    class Fitter:
        def __init__(self, ds):
            self.ds = ds

        def fit(self):
            prepare(1)
            return DataLoader(self.ds, batch_size=8, shuffle=True)

        def fit_with_generator(self):
            prepare(1)
            return DataLoader(self.ds, batch_size=8, shuffle=True, generator=torch.Generator(device="cuda"))

        def fit_reset(self):
            prepare_then_reset(1)
            return DataLoader(self.ds, batch_size=8, shuffle=True)

        def fit_named(self, name):
            prepare_device(name)
            return DataLoader(self.ds, batch_size=8, shuffle=True)

        def fit_before(self):
            loader = DataLoader(self.ds, batch_size=8, shuffle=True)
            prepare(1)
            return loader
"""


def test_a_cuda_default_set_by_an_imported_function_reaches_the_samplers_built_after(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"setup.py": SETUP, "split.py": SPLIT_SCRIPT, "fitter.py": LOADER_TRAINER}, "DL114")
    assert _where(found) == [("fitter.py", 14, "DL114"), ("split.py", 11, "DL114")]
    assert found[1][3] == (
        "`random_split(...)` draws with the CPU `torch.default_generator` (none given) after `S.prepare(0)`, which makes `cuda` the "
        "default device, so it fails with `Expected a 'cuda' device type for generator but found 'cpu'`; pass "
        '`generator=torch.Generator(device="cuda")`'
    )


# -- DL107: a module's call that leaves an imported device parameter at its "cuda" default ------

GRIDS = """
    import torch


    def make_grid(h, w, device="cuda"):
        ys, xs = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
        return torch.stack([xs, ys], dim=-1).float()


    def unused_default(h, device="cuda"):
        return torch.zeros(h)


    class BoxCoder:
        def decode(self, deltas, anchors, *, device=torch.device("cuda:0")):
            return deltas + anchors.to(device)
"""

HEADS = """
    import torch.nn as nn

    from grids import BoxCoder, make_grid, unused_default


    class FlowHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 2, 3, padding=1)
            self.coder = BoxCoder()

        def forward(self, x):
            grid = make_grid(x.shape[2], x.shape[3])
            return self.conv(x) + grid.permute(2, 0, 1)

        def boxes(self, deltas, anchors):
            return self.coder.decode(deltas, anchors)

        def placed(self, x):
            grid = make_grid(x.shape[2], x.shape[3], device=x.device)
            fixed = self.coder.decode(x, x, device=x.device)
            return grid, fixed, unused_default(3)
"""


def test_a_module_leaving_an_imported_device_parameter_at_cuda_is_reported(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"grids.py": GRIDS, "heads.py": HEADS}, "DL107")
    assert _where(found) == [("heads.py", 14, "DL107"), ("heads.py", 18, "DL107")]
    assert found[1][3] == (
        "`self.coder.decode(...)` leaves `device` at its default `torch.device('cuda:0')` (grids.py:15) in "
        "`boxes`: it breaks CPU-only runs, other GPUs (`cuda:1`, DDP ranks) and MPS; use the input's device "
        "(`device=next(self.parameters()).device`)"
    )


def test_the_same_call_outside_a_module_is_clean(tmp_path: Path) -> None:
    script = """
        from grids import make_grid


        def main():
            return make_grid(4, 4)
    """
    assert _lint(tmp_path, {"grids.py": GRIDS, "run.py": script}, "DL107") == []


# -- DL203: a wrapper returned by a method of an imported class; a helper that unwraps ---------

ENGINE = """
    import torch
    from torch import nn


    class Engine:
        def wrap(self, net):
            wrapped = nn.DataParallel(net)
            return wrapped

        def export(self, net, path):
            torch.save(net.backbone.state_dict(), path)
"""

SAVERS = """
    import torch


    def save_head(model, path):
        model = model.head.module
        torch.save(model.state_dict(), path)


    def save_unwrapped(model, path):
        model = model.module
        torch.save(model.state_dict(), path)


    def save_either(model, path):
        if hasattr(model, "module"):
            model = model.module.head
        torch.save(model.state_dict(), path)
"""

TRAIN = """
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    from engine import Engine
    from savers import save_either, save_head, save_unwrapped


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Linear(4, 4)
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.backbone(x))


    def run(rank):
        engine = Engine()
        net = engine.wrap(Net().cuda())
        engine.export(net, "backbone.pt")
        ddp = DistributedDataParallel(Net().cuda(rank), device_ids=[rank])
        save_head(ddp, "head.pt")
        save_unwrapped(ddp, "model.pt")
        save_either(ddp, "head.pt")
"""


def test_a_wrapper_from_an_imported_method_and_an_unwrapping_helper_are_reported(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"engine.py": ENGINE, "savers.py": SAVERS, "train.py": TRAIN}, "DL203")
    assert _where(found) == [("train.py", 22, "DL203"), ("train.py", 24, "DL203")]
    assert found[0][3] == (
        "`engine.Engine.export` reads `net.backbone` (engine.py:12) from the `DataParallel` wrapper (returned by "
        "`engine.wrap(Net().cuda())`, which wraps it in `DataParallel`) that `run` passes to it as `net`, which "
        "does not forward its model's attributes (AttributeError); pass `net.module`, or read "
        "`net.module.backbone` there"
    )


# -- DL116: an imported helper indexes a host table with what it is handed ---------------------

COLORS = """
    import torch

    PALETTE = [[0, 0, 0], [128, 0, 0], [0, 128, 0]]


    def colorize(mask):
        lut = torch.as_tensor(PALETTE, dtype=torch.uint8)
        return lut[mask.long()]


    def labels_to_rgb(logits):
        table = torch.tensor(PALETTE).float()
        idx = torch.argmax(logits, dim=1)
        return table[idx].permute(0, 3, 1, 2)


    def colorize_on_device(mask):
        lut = torch.as_tensor(PALETTE, device=mask.device)
        return lut[mask]
"""

VISUALIZE = """
    import torch

    from colors import colorize, colorize_on_device, labels_to_rgb
    from nets import SegNet


    def show(loader):
        net = SegNet().cuda()
        for x, _ in loader:
            x = x.cuda()
            logits = net.decoders[0](net.encode(x))
            rgb = labels_to_rgb(logits)
            seg = colorize(logits.argmax(1))
            host = colorize(logits.argmax(1).cpu())
            same = colorize_on_device(logits.argmax(1))
            yield rgb, seg, host, same
"""

NETS = """
    import torch.nn as nn


    class SegNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Conv2d(3, 8, 3, padding=1)
            self.decoders = nn.ModuleList([nn.Conv2d(8, 3, 1)])

        def encode(self, x):
            return self.encoder(x)

        def forward(self, x):
            return self.decoders[0](self.encode(x))
"""


def test_a_device_tensor_indexing_an_imported_helpers_host_table_is_reported(tmp_path: Path) -> None:
    found = _lint(tmp_path, {"colors.py": COLORS, "nets.py": NETS, "visualize.py": VISUALIZE}, "DL116")
    assert _where(found) == [("visualize.py", 13, "DL116"), ("visualize.py", 14, "DL116")]
    assert found[1][3] == (
        "`colors.colorize` indexes `lut`, a CPU tensor it builds (colors.py:9), with what its `mask` carries, and "
        "`logits.argmax(1)` handed in here is on the device (indices must be on the CPU or on the indexed "
        "tensor's device); build the table on `mask.device` there, or hand it `logits.argmax(1).cpu()`"
    )
