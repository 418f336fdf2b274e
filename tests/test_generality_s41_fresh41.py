"""Shapes judged wrong on the sixteenth precision reading (projects nobody had linted): each in
two spellings the corpus did not use, with the true positive next to it that must stay found."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from click.testing import CliRunner

from devicelint.cli import cli
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _findings(source: str, path: str = "train.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


def _project(root: Path, files: dict[str, str], code: str) -> list[tuple[str, int, str]]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")
    old = Path.cwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, ["check", "--no-cache", "--output-format", "json", "."])
    finally:
        os.chdir(old)
    assert result.exit_code in (0, 1), result.output
    rows = [r for r in json.loads(result.stdout) if r["code"] == code]
    return [(Path(r["path"]).name, r["line"], r["message"]) for r in rows]


# -- DL303: `p.step(x)` in a helper of another module is a scaler's only if a scaler is handed --

ROLLOUTS = """
    import torch


    def run_episode(env, policy, max_steps):
        state, total = env.reset(), 0.0
        for _ in range(max_steps):
            with torch.no_grad():
                action = policy(torch.as_tensor(state).float().cuda()).cpu().numpy()
            state, reward, done, _ = env.step(action)
            total += reward
            if done:
                break
        return total


    def end_epoch(lr_schedule, val_loss):
        lr_schedule.step(val_loss)


    def amp_step(optimizer, loss, grad_scaler):
        grad_scaler.scale(loss).backward()
        grad_scaler.step(optimizer)
        optimizer.zero_grad()
"""

FIT = """
    import gym
    import torch

    from rollouts import amp_step, end_epoch, run_episode


    def evaluate(policy, episodes):
        env = gym.make("Hopper-v3")
        returns = []
        for _ in range(episodes):
            returns.append(run_episode(env, policy, 1000))
        return returns


    def fit_plain(model, loader, opt, epochs):
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        for epoch in range(epochs):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                loss.backward()
                opt.step()
                opt.zero_grad()
            end_epoch(plateau, loss.detach())


    def fit_amp(model, loader, opt, epochs):
        scaler = torch.amp.GradScaler("cuda")
        for epoch in range(epochs):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                amp_step(opt, loss, scaler)
"""


def test_a_helper_stepping_an_environment_or_a_scheduler_is_no_scaler_step(tmp_path: Path) -> None:
    # decision-transformer: `evaluate_episode_rtg(env, ...)` of another module calls
    # `env.step(action)`; the summary read it as a scaler stepped and never updated (DL303)
    found = _project(tmp_path, {"rollouts.py": ROLLOUTS, "fit.py": FIT}, "DL303")
    assert found == [
        (
            "fit.py",
            33,
            "`amp_step(opt, loss, scaler)` steps `scaler` through a function of another module that never "
            "updates it, and nothing here does: the loss scale never adapts and the next `scaler.step` "
            "raises; call `scaler.update()` after it on every step",
        )
    ]


# -- DL117: a module whose weights are swapped for another module's is where those are ------------

TIED_HEADS = """
    import torch
    from torch import nn


    def tied_head(embed):
        head = nn.Linear(embed.embedding_dim, embed.num_embeddings, bias=False)
        head.weight = embed.weight
        return head


    def named_head(embed):
        head = nn.Linear(embed.embedding_dim, embed.num_embeddings, bias=False)
        head.name = "lm_head"
        return head


    def main():
        embed = nn.Embedding(100, 16).cuda()
        tokens = torch.randint(0, 100, (4,)).cuda()
        hidden = embed(tokens)
        return tied_head(embed)(hidden), named_head(embed)(hidden)
"""

STEPPED_CELL = """
    import torch
    from torch import nn


    class Decoder(nn.Module):
        def __init__(self, dims):
            super().__init__()
            self.lstm = nn.LSTM(dims, dims, batch_first=True)
            self.dims = dims

        def sample(self, steps, batch):
            cell = nn.LSTMCell(self.dims, self.dims)
            cell.weight_ih.data = self.lstm.weight_ih_l0.data
            cell.weight_hh.data = self.lstm.weight_hh_l0.data
            cell.bias_ih.data = self.lstm.bias_ih_l0.data
            cell.bias_hh.data = self.lstm.bias_hh_l0.data
            scratch = nn.LSTMCell(self.dims, self.dims)
            scratch.bias_ih.data = torch.zeros(4 * self.dims)
            h = c = x = torch.zeros(batch, self.dims).cuda()
            for _ in range(steps):
                h, c = cell(x, (h, c))
                x, _ = scratch(x, (h, c))
            return h


    def main():
        return Decoder(64).cuda().sample(10, 2)
"""


def test_a_module_whose_weights_are_another_modules_is_not_on_the_host() -> None:
    # WaveRNN's notebook: `get_gru_cell` builds an `nn.GRUCell` and points its weights at the
    # moved GRU's (`gru_cell.weight_hh.data = gru.weight_hh_l0.data`): the cell runs on the GPU
    assert [f for f in _findings(TIED_HEADS) if f[1] == "DL117"] == [
        (
            22,
            "DL117",
            "`named_head(embed)` is built on the CPU by `nn.Linear(...)` and never moved, but is called with "
            '`hidden`, which is on the device; move the model first: `named_head(embed).to("cuda")`',
        )
    ]
    assert [f for f in _findings(STEPPED_CELL) if f[1] == "DL117"] == [
        (
            23,
            "DL117",
            "`scratch` is built on the CPU by `nn.LSTMCell(...)` and never moved, but is called with `x`, "
            'which is on the device; move the model first: `scratch.to("cuda")`',
        )
    ]


# -- DL401: a helper that turns a tensor into NumPy data for host code is a conversion -----------

CONVERTERS = """
    import numpy as np
    import torch


    def as_array(t):
        return t.detach().float().cpu().numpy()


    def loss_value(loss):
        return loss.detach().cpu().numpy()


    def plot_alignment(alignment, path):
        np.save(path, alignment)


    def train(model, loader, opt, device, out):
        total = 0.0
        for step, (x, y) in enumerate(loader):
            pred, attn = model(x.to(device))
            loss = torch.nn.functional.mse_loss(pred, y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            plot_alignment(as_array(attn[0]), f"{out}/{step}.npy")
            total += loss_value(loss)
        return total
"""

TRAINER = """
    import matplotlib.pyplot as plt
    import torch


    class Trainer:
        def __init__(self, model, opt, out):
            self.model, self.opt, self.out = model, opt, out

        def _host(self, t):
            return t.cpu().numpy()

        def fit(self, loader):
            for step, (x, y) in enumerate(loader):
                out = self.model(x.cuda())
                loss = torch.nn.functional.cross_entropy(out, y.cuda())
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                plt.imsave(f"{self.out}/{step}.png", self._host(out[0]))
"""


def test_a_helper_returning_numpy_data_for_host_code_is_no_per_step_return() -> None:
    # WaveRNN's `def np_now(x): return x.detach().cpu().numpy()`, whose calls hand the array to
    # `save_attention(...)`/`save_spectrogram(...)`: the host needs the array, the helper only converts
    assert [f for f in _findings(CONVERTERS) if f[1] == "DL401"] == [
        (
            11,
            "DL401",
            "`loss.detach().cpu()` copies a device tensor to the host and returns it from a function that runs once "
            "per training step, which stalls the GPU until the step's kernels finish; return the tensor "
            "(`loss.detach()`) and let the caller call `.item()` when it logs",
        )
    ]
    assert [f for f in _findings(TRAINER) if f[1] == "DL401"] == []
