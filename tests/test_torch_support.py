"""Advice that needs a newer torch than the project supports says so (DL301, DL305)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicelint.analysis.training.torch_support import _folder_support
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=True)\n"
FP16 = """\
import torch

def train(model, loader, optimizer):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x.cuda())
        loss.backward()
        optimizer.step()
"""


def _lint(code: str, path: Path, source: str, torch_version: str | None = None):  # type: ignore[no-untyped-def]
    rule = find_rule(code)
    assert rule is not None
    path.write_text(source, encoding="utf-8")
    options = EngineOptions(rules=(rule,), fix_mode="unsafe", torch_version=torch_version)
    return lint_source(source, str(path), options).findings


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    _folder_support.cache_clear()


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pyproject.toml", '[project]\nname = "p"\ndependencies = ["numpy", "torch>=1.13,<3"]\n'),
        ("setup.cfg", "[options]\ninstall_requires =\n    numpy\n    torch>=1.13\n"),
        ("setup.py", 'from setuptools import setup\nsetup(install_requires=["torch >= 1.13"])\n'),
        ("requirements.txt", "numpy\ntorch>=1.13  # the CUDA 11.7 wheels\n"),
        ("pyproject.toml", '[tool.poetry.dependencies]\npython = "^3.9"\ntorch = "^1.13"\n'),
    ],
)
def test_old_torch_floor_is_read_from_project_metadata(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    [finding] = _lint("DL305", tmp_path / "train.py", DEPRECATED)
    assert "`torch.amp.GradScaler` needs torch 2.3, but" in finding.message
    assert "allows torch 1.13: keep the old spelling behind a torch version check" in finding.message
    assert finding.fix is not None and finding.fix.safe is False
    [fp16] = _lint("DL301", tmp_path / "train.py", FP16)
    assert "use `scaler = torch.cuda.amp.GradScaler()` (`torch.amp.GradScaler` needs torch 2.3" in fp16.message


def test_new_enough_floor_keeps_the_modern_advice(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["torch>=2.4"]\n', encoding="utf-8")
    [finding] = _lint("DL305", tmp_path / "train.py", DEPRECATED)
    assert finding.message == (
        '`torch.cuda.amp.GradScaler(...)` is deprecated since torch 2.4; use `torch.amp.GradScaler("cuda", ...)` instead'
    )
    assert finding.fix is not None and finding.fix.safe is True
    [fp16] = _lint("DL301", tmp_path / "train.py", FP16)
    assert 'use `scaler = torch.amp.GradScaler("cuda")` with' in fp16.message


def test_torch_without_a_lower_bound_allows_any_release(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("torch\n", encoding="utf-8")
    [finding] = _lint("DL305", tmp_path / "train.py", DEPRECATED)
    assert "allows any torch release" in finding.message


def test_the_torch_version_setting_wins(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n", encoding="utf-8")
    [fp16] = _lint("DL301", tmp_path / "train.py", FP16, torch_version="2.1")
    assert '`torch-version = "2.1"` allows torch 2.1' in fp16.message


def test_no_metadata_means_no_remark(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    sub = tmp_path / "src"
    sub.mkdir()
    [finding] = _lint("DL305", sub / "train.py", DEPRECATED)
    assert finding.message.endswith("instead")


@pytest.mark.parametrize("pin", ["torch>=2.1,<2.3", "torch>=2.0,<=2.2.2", "torch==2.2.*"])
def test_a_pin_below_the_replacement_is_not_told_to_use_it(tmp_path: Path, pin: str) -> None:
    # OpenNMT-py pins `torch>=2.1,<2.3`: `torch.amp.custom_fwd` (2.4) and `torch.amp.GradScaler`
    # (2.3) exist in none of the allowed releases, and none warns about the old spelling.
    (tmp_path / "requirements.txt").write_text(f"{pin}\n", encoding="utf-8")
    decorated = "import torch\n\n@torch.cuda.amp.custom_fwd\ndef f(x):\n    return x\n"
    assert list(_lint("DL305", tmp_path / "ops.py", decorated)) == []
    assert list(_lint("DL305", tmp_path / "train.py", DEPRECATED)) == []
    (tmp_path / "requirements.txt").write_text("torch>=2.1,<2.5\n", encoding="utf-8")
    _folder_support.cache_clear()
    [finding] = _lint("DL305", tmp_path / "ops.py", decorated)
    assert "`torch.amp.custom_fwd` needs torch 2.4, but" in finding.message


DDP_WITHOUT_IDS = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def wrap(local_rank):
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    net = torch.nn.Linear(8, 8).cuda()
    return DistributedDataParallel(net)
"""


@pytest.mark.parametrize(
    ("name", "text", "found"),
    [
        ("pyproject.toml", '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n', []),
        ("requirements.txt", "torch>=1.9.0\n", []),
        ("requirements.txt", "torch>=1.8\n", [10]),
        ("requirements.txt", "numpy\n", [10]),
    ],
)
def test_ddp_without_device_ids_reads_the_project_s_torch_floor(
    tmp_path: Path, name: str, text: str, found: list[int]
) -> None:
    # DL205's pre-1.9 case and DL305 read the same floor (fresh30 W6).
    (tmp_path / name).write_text(text, encoding="utf-8")
    findings = _lint("DL205", tmp_path / "launch.py", DDP_WITHOUT_IDS)
    assert [f.line for f in findings] == found
    assert all("without `device_ids`: before torch 1.9" in f.message for f in findings)


def test_ddp_torch_version_setting_wins_over_the_project_floor(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("torch>=2.0\n", encoding="utf-8")
    assert [f.line for f in _lint("DL205", tmp_path / "launch.py", DDP_WITHOUT_IDS, torch_version="1.8")] == [10]
