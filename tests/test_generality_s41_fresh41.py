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
