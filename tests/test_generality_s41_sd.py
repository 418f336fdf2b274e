"""Shapes behind the misses of re-created set sd (session 41), each tested in two spellings
other than the pair's (a helper, a kept attribute, another class layout) with a clean twin;
exact code, line and message."""

from __future__ import annotations

import textwrap

import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, path: str = "train/loop.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


# -- a settings object's `.device` handed to a factory as `device=` is a setting, not a tensor's device (sd12) ---

SETTINGS_DDPM = """
import torch


class NoiseSchedule:
    def __init__(self, steps, sigma_max):
        self.sigmas = torch.linspace(1e-3, sigma_max, steps)

    def noise(self, x, t):
        return x + self.sigmas[t].to(x.device).view(-1, 1) * torch.randn_like(x)


def train_step(model, x, hp):
    schedule = NoiseSchedule(hp.steps, hp.sigma_max)
    t = torch.randint(0, hp.steps, (x.shape[0],), device=hp.device)
    return model(schedule.noise(x.to(hp.device), t), t)
"""

SETTINGS_DDPM_CLEAN = """
import torch


class NoiseSchedule:
    def __init__(self, steps, sigma_max):
        self.sigmas = torch.linspace(1e-3, sigma_max, steps)

    def noise(self, x, t):
        return x + self.sigmas.to(t.device)[t].view(-1, 1) * torch.randn_like(x)


def train_step(model, x, hp):
    schedule = NoiseSchedule(hp.steps, hp.sigma_max)
    t = torch.randint(0, hp.steps, (x.shape[0],), device=hp.device)
    return model(schedule.noise(x.to(hp.device), t), t)
"""

SETTINGS_JITTER = """
import torch


class Jitter:
    def __init__(self, levels):
        self.scales = torch.linspace(0.5, 1.5, levels)

    def pick(self, idx):
        return self.scales[idx]


def augment(batch, run):
    jitter = Jitter(run.levels)
    idx = torch.randint(0, run.levels, (batch.shape[0],), device=run.device)
    scales = jitter.pick(idx)
    return batch.to(run.device), scales.to(run.device), run.seed
"""

SETTINGS_JITTER_CLEAN = """
import torch


class Jitter:
    def __init__(self, levels):
        self.scales = torch.linspace(0.5, 1.5, levels)

    def pick(self, idx):
        return self.scales[idx.cpu()].to(idx.device)


def augment(batch, run):
    jitter = Jitter(run.levels)
    idx = torch.randint(0, run.levels, (batch.shape[0],), device=run.device)
    scales = jitter.pick(idx)
    return batch.to(run.device), scales.to(run.device), run.seed
"""


# -- an object `__init__` keeps whole and reads only for its `.device` is where the author runs (sd01) ---

HOLDER_AGENT = """
import numpy as np
import torch
from torch import nn


class Critic:
    def __init__(self, agent, obs_dim):
        self.agent = agent
        self.value = nn.Linear(obs_dim, 1).to(agent.device)

    def evaluate(self, observations):
        obs = torch.as_tensor(np.stack(observations), dtype=torch.float32)
        return self.value(obs)
"""

HOLDER_AGENT_CLEAN = """
import numpy as np
import torch
from torch import nn


class Critic:
    def __init__(self, agent, obs_dim):
        self.agent = agent
        self.value = nn.Linear(obs_dim, 1).to(agent.device)

    def evaluate(self, observations):
        obs = torch.as_tensor(np.stack(observations), dtype=torch.float32, device=self.agent.device)
        return self.value(obs)
"""

HOLDER_RUNNER = """
import torch
from torch import nn


class Probe(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, 2)

    def forward(self, x):
        return self.proj(x)


class ProbeRunner:
    def __init__(self, runner, width, labels):
        self.runner = runner
        self.labels = labels
        self.probe = Probe(width).to(runner.device)

    def score(self, rows):
        feats = torch.tensor(rows)
        return self.probe(feats).argmax(-1)
"""

HOLDER_RUNNER_CLEAN = """
import torch
from torch import nn


class Probe(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, 2)

    def forward(self, x):
        return self.proj(x)


class ProbeRunner:
    def __init__(self, runner, width, labels):
        self.runner = runner
        self.labels = labels
        self.probe = Probe(width).to(runner.device)

    def score(self, rows):
        feats = torch.tensor(rows, device=self.runner.device)
        return self.probe(feats).argmax(-1)
"""


# -- a submodule of a placed instance of a module class of the file is where the instance is (sd01) ---

PART_OF_PLACED_FUNCTION = """
import numpy as np
import torch
from torch import nn


class AutoEncoder(nn.Module):
    def __init__(self, width, code):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(width, code), nn.Tanh())
        self.decoder = nn.Linear(code, width)

    def forward(self, x):
        return self.decoder(self.encoder(x))


def embed(rows, device):
    model = AutoEncoder(rows.shape[1], 8).to(device)
    codes = model.encoder(torch.from_numpy(rows.astype(np.float32)))
    return codes.detach().cpu().numpy()
"""

PART_OF_PLACED_FUNCTION_CLEAN = """
import numpy as np
import torch
from torch import nn


class AutoEncoder(nn.Module):
    def __init__(self, width, code):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(width, code), nn.Tanh())
        self.decoder = nn.Linear(code, width)

    def forward(self, x):
        return self.decoder(self.encoder(x))


def embed(rows, device):
    model = AutoEncoder(rows.shape[1], 8).to(device)
    codes = model.encoder(torch.from_numpy(rows.astype(np.float32)).to(device))
    return codes.detach().cpu().numpy()
"""

PART_OF_PLACED_KEPT = """
import torch
from torch import nn


class Heads(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.cls = nn.Linear(width, 10)
        self.box = nn.Linear(width, 4)


class Detector:
    def __init__(self, width):
        self.heads = Heads(width).cuda()

    def boxes(self, pooled):
        anchors = torch.zeros(pooled.shape[0], 4)
        return self.heads.box(pooled) + anchors
"""

PART_OF_PLACED_KEPT_CLEAN = """
import torch
from torch import nn


class Heads(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.cls = nn.Linear(width, 10)
        self.box = nn.Linear(width, 4)


class Detector:
    def __init__(self, width):
        self.heads = Heads(width).cuda()

    def boxes(self, pooled):
        anchors = torch.zeros(pooled.shape[0], 4, device=pooled.device)
        return self.heads.box(pooled) + anchors
"""


# -- a plain instance's constructor state reaches the methods its methods call (sd03) ---

STATE_EVALUATOR = """
import torch
from torch import nn


class Popularity(nn.Module):
    def __init__(self, n_items):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n_items))

    def predict(self, users):
        return torch.rand(users.shape[0])


class Evaluator:
    def __init__(self, model, device):
        self.model = model
        self.device = device

    def _scores(self, users, items):
        scores = torch.zeros(users.shape[0], 100, device=self.device)
        scores[torch.arange(users.shape[0], device=self.device), items] = self.model.predict(users)
        return scores

    def run(self, batches):
        return [self._scores(users.to(self.device), items.to(self.device)) for users, items in batches]


def evaluate(batches, device):
    model = Popularity(100).to(device)
    return Evaluator(model, device).run(batches)
"""

STATE_EVALUATOR_CLEAN = """
import torch
from torch import nn


class Popularity(nn.Module):
    def __init__(self, n_items):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n_items))

    def predict(self, users):
        return torch.rand(users.shape[0], device=users.device)


class Evaluator:
    def __init__(self, model, device):
        self.model = model
        self.device = device

    def _scores(self, users, items):
        scores = torch.zeros(users.shape[0], 100, device=self.device)
        scores[torch.arange(users.shape[0], device=self.device), items] = self.model.predict(users)
        return scores

    def run(self, batches):
        return [self._scores(users.to(self.device), items.to(self.device)) for users, items in batches]


def evaluate(batches, device):
    model = Popularity(100).to(device)
    return Evaluator(model, device).run(batches)
"""

STATE_RANKER = """
import numpy as np
import torch
from torch import nn


class Ranker(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.score = nn.Linear(width, 1)

    def prior(self, n):
        return torch.from_numpy(np.linspace(1.0, 0.0, n).astype(np.float32))

    def forward(self, x):
        return self.score(x).squeeze(-1)


class Reranker:
    def __init__(self, ranker):
        self.ranker = ranker

    def _fuse(self, feats):
        return self.ranker(feats) * self.ranker.prior(feats.shape[0])

    def rerank(self, feats, device):
        return self._fuse(feats.to(device)).argsort(descending=True)


def serve(feats, device):
    ranker = Ranker(feats.shape[1]).to(device)
    return Reranker(ranker).rerank(feats, device)
"""

STATE_RANKER_CLEAN = """
import numpy as np
import torch
from torch import nn


class Ranker(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.score = nn.Linear(width, 1)

    def prior(self, n):
        return torch.linspace(1.0, 0.0, n, device=self.score.weight.device)

    def forward(self, x):
        return self.score(x).squeeze(-1)


class Reranker:
    def __init__(self, ranker):
        self.ranker = ranker

    def _fuse(self, feats):
        return self.ranker(feats) * self.ranker.prior(feats.shape[0])

    def rerank(self, feats, device):
        return self._fuse(feats.to(device)).argsort(descending=True)


def serve(feats, device):
    ranker = Ranker(feats.shape[1]).to(device)
    return Reranker(ranker).rerank(feats, device)
"""


# -- a device given as `device or default` is the caller's device or the default (sd11) ---

OR_DEFAULT_SELF = """
import numpy as np
import torch
from torch import nn


class Tagger:
    def __init__(self, width, device=None):
        self.device = device or "cuda"
        self.head = nn.Linear(width, 5).to(self.device)

    def tag(self, feats):
        return self.head(torch.from_numpy(np.asarray(feats, dtype=np.float32)))
"""

OR_DEFAULT_SELF_CLEAN = """
import numpy as np
import torch
from torch import nn


class Tagger:
    def __init__(self, width, device=None):
        self.device = device or "cuda"
        self.head = nn.Linear(width, 5).to(self.device)

    def tag(self, feats):
        return self.head(torch.from_numpy(np.asarray(feats, dtype=np.float32)).to(self.device))
"""

OR_DEFAULT_LOCAL = """
import torch


def smooth(signal, kernel_size, device=None):
    device = device or torch.device("cuda:0")
    kernel = torch.ones(kernel_size) / kernel_size
    padded = torch.nn.functional.pad(signal.to(device), (kernel_size // 2, kernel_size // 2))
    return padded.unfold(-1, kernel_size, 1) @ kernel
"""

OR_DEFAULT_LOCAL_CLEAN = """
import torch


def smooth(signal, kernel_size, device=None):
    device = device or torch.device("cuda:0")
    kernel = torch.ones(kernel_size, device=device) / kernel_size
    padded = torch.nn.functional.pad(signal.to(device), (kernel_size // 2, kernel_size // 2))
    return padded.unfold(-1, kernel_size, 1) @ kernel
"""


# -- a class from another package built with `device=` an accelerator is a model there (sd11) ---

BUILT_WITH_DEVICE_KEPT = """
import numpy as np
import torch

from yolov6.layers.common import DetectBackend


class SlicedDetector:
    def __init__(self, weights, device="cuda:0"):
        self.device = device
        self.backend = DetectBackend(weights, device=self.device)

    def detect(self, tile):
        image = torch.from_numpy(np.ascontiguousarray(tile.transpose(2, 0, 1))).float() / 255
        return self.backend(image[None])
"""

BUILT_WITH_DEVICE_KEPT_CLEAN = """
import numpy as np
import torch

from yolov6.layers.common import DetectBackend


class SlicedDetector:
    def __init__(self, weights, device="cuda:0"):
        self.device = device
        self.backend = DetectBackend(weights, device=self.device)

    def detect(self, tile):
        image = torch.from_numpy(np.ascontiguousarray(tile.transpose(2, 0, 1))).to(self.device).float() / 255
        return self.backend(image[None])
"""

BUILT_WITH_DEVICE_LOCAL = """
import numpy as np
import torch

from speechkit.models import Encoder


def embed_utterances(waves, checkpoint):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    encoder = Encoder(checkpoint, device=device)
    batch = torch.stack([torch.from_numpy(np.asarray(w, dtype=np.float32)) for w in waves])
    return encoder(batch)
"""

BUILT_WITH_DEVICE_LOCAL_CLEAN = """
import numpy as np
import torch

from speechkit.models import Encoder


def embed_utterances(waves, checkpoint):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    encoder = Encoder(checkpoint, device=device)
    batch = torch.stack([torch.from_numpy(np.asarray(w, dtype=np.float32)) for w in waves])
    return encoder(batch.to(device))
"""


# -- a torchaudio transform with buffers is a layer built on the CPU (sd02) ---

AUDIO_MEL_IN_HELPER = """
import torch
import torchaudio


def log_mel(wave, sample_rate, device):
    wave = wave.to(device)
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=sample_rate, n_mels=80)
    return torch.log(mel(wave) + 1e-6)
"""

AUDIO_MEL_IN_HELPER_CLEAN = """
import torch
import torchaudio


def log_mel(wave, sample_rate, device):
    wave = wave.to(device)
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=sample_rate, n_mels=80).to(device)
    return torch.log(mel(wave) + 1e-6)
"""


# -- near misses that must stay quiet ---

HOLDER_TENSOR_CLEAN = """
import torch


class Table:
    def __init__(self, mask):
        self.mask = mask
        self.codes = torch.zeros(4, device=mask.device)

    def lookup(self, idx):
        return torch.arange(4)[idx] + self.mask.sum()
"""

BUILT_WITH_DEVICE_FUNCTION_CLEAN = """
import torch

from speechkit.models import load_encoder


def embed(batch):
    encoder = load_encoder("base", device="cuda")
    return encoder(torch.as_tensor(batch))
"""

AUDIO_STATELESS_CLEAN = """
import torchaudio


def to_db(spec, device):
    spec = spec.to(device)
    amplitude_to_db = torchaudio.transforms.AmplitudeToDB(top_db=80.0)
    return amplitude_to_db(spec)
"""


CASES = [
    pytest.param(
        SETTINGS_DDPM,
        [
            (
                10,
                "DL116",
                "`self.sigmas` is a CPU tensor indexed by `t`, which is on the device (indices must be on the CPU or on the indexed tensor's device); move the table first: `self.sigmas.to(t.device)[...]`",
            )
        ],
        id="settings_ddpm",
    ),
    pytest.param(SETTINGS_DDPM_CLEAN, [], id="settings_ddpm_clean"),
    pytest.param(
        SETTINGS_JITTER,
        [
            (
                10,
                "DL116",
                "`self.scales` is a CPU tensor indexed by `idx`, which is on the device (indices must be on the CPU or on the indexed tensor's device); move the table first: `self.scales.to(idx.device)[...]`",
            )
        ],
        id="settings_jitter",
    ),
    pytest.param(SETTINGS_JITTER_CLEAN, [], id="settings_jitter_clean"),
    pytest.param(
        HOLDER_AGENT,
        [
            (
                13,
                "DL101",
                "`torch.as_tensor(...)` creates a CPU tensor in `evaluate` that is passed to the module `self.value`, which lives on the model's device; pass `device=device`",
            )
        ],
        id="holder_agent",
    ),
    pytest.param(HOLDER_AGENT_CLEAN, [], id="holder_agent_clean"),
    pytest.param(
        HOLDER_RUNNER,
        [
            (
                22,
                "DL101",
                "`torch.tensor(...)` creates a CPU tensor in `score` that is passed to the module `self.probe`, which lives on the model's device; pass `device=device`",
            )
        ],
        id="holder_runner",
    ),
    pytest.param(HOLDER_RUNNER_CLEAN, [], id="holder_runner_clean"),
    pytest.param(
        PART_OF_PLACED_FUNCTION,
        [
            (
                19,
                "DL101",
                "`torch.from_numpy(...)` creates a CPU tensor in `embed` that is passed to the module `model.encoder`, which lives on the model's device; move it with `.to(device)`",
            )
        ],
        id="part_of_placed_function",
    ),
    pytest.param(PART_OF_PLACED_FUNCTION_CLEAN, [], id="part_of_placed_function_clean"),
    pytest.param(
        PART_OF_PLACED_KEPT,
        [
            (
                18,
                "DL101",
                "`torch.zeros(...)` creates a CPU tensor in `boxes` that meets the device tensor `self.heads.box(pooled)` in `self.heads.box(pooled) + anchors`; pass `device=device`",
            )
        ],
        id="part_of_placed_kept",
    ),
    pytest.param(PART_OF_PLACED_KEPT_CLEAN, [], id="part_of_placed_kept_clean"),
    pytest.param(
        STATE_EVALUATOR,
        [
            (
                12,
                "DL101",
                "`torch.rand(...)` creates a CPU tensor in `predict` that meets the device tensor `scores` in `scores[torch.arange(users.shape[0], d...`; pass `device=users.device`",
            )
        ],
        id="state_evaluator",
    ),
    pytest.param(STATE_EVALUATOR_CLEAN, [], id="state_evaluator_clean"),
    pytest.param(
        STATE_RANKER,
        [
            (
                13,
                "DL101",
                "`torch.from_numpy(...)` creates a CPU tensor in `prior` that meets the device tensor `self.ranker(feats)` in `self.ranker(feats) * self.ranker.prio...`; move it with `.to(next(self.parameters()).device)`",
            )
        ],
        id="state_ranker",
    ),
    pytest.param(STATE_RANKER_CLEAN, [], id="state_ranker_clean"),
    pytest.param(
        OR_DEFAULT_SELF,
        [
            (
                13,
                "DL101",
                "`torch.from_numpy(...)` creates a CPU tensor in `tag` that is passed to the module `self.head`, which lives on the model's device; move it with `.to(device)`",
            )
        ],
        id="or_default_self",
    ),
    pytest.param(OR_DEFAULT_SELF_CLEAN, [], id="or_default_self_clean"),
    pytest.param(
        OR_DEFAULT_LOCAL,
        [
            (
                7,
                "DL101",
                "`torch.ones(...)` creates a CPU tensor in `smooth` that meets the device tensor `padded.unfold(-1, kernel_size, 1)` in `padded.unfold(-1, kernel_size, 1) @ k...`; pass `device=device`",
            )
        ],
        id="or_default_local",
    ),
    pytest.param(OR_DEFAULT_LOCAL_CLEAN, [], id="or_default_local_clean"),
    pytest.param(
        BUILT_WITH_DEVICE_KEPT,
        [
            (
                14,
                "DL101",
                "`torch.from_numpy(...)` creates a CPU tensor in `detect` that is passed to the module `self.backend`, which lives on the model's device; move it with `.to(self.device)`",
            )
        ],
        id="built_with_device_kept",
    ),
    pytest.param(BUILT_WITH_DEVICE_KEPT_CLEAN, [], id="built_with_device_kept_clean"),
    pytest.param(
        BUILT_WITH_DEVICE_LOCAL,
        [
            (
                11,
                "DL101",
                "`torch.from_numpy(...)` creates a CPU tensor in `embed_utterances` that is passed to the module `encoder`, which lives on the model's device; move it with `.to(device)`",
            )
        ],
        id="built_with_device_local",
    ),
    pytest.param(BUILT_WITH_DEVICE_LOCAL_CLEAN, [], id="built_with_device_local_clean"),
    pytest.param(
        AUDIO_MEL_IN_HELPER,
        [
            (
                9,
                "DL117",
                "`mel` is built on the CPU by `torchaudio.transforms.MelSpectrogram(...)` and never moved, but is called with `wave`, which is on the device; move the model first: `mel.to(device)`",
            )
        ],
        id="audio_mel_in_helper",
    ),
    pytest.param(AUDIO_MEL_IN_HELPER_CLEAN, [], id="audio_mel_in_helper_clean"),
    pytest.param(HOLDER_TENSOR_CLEAN, [], id="holder_tensor_clean"),
    pytest.param(BUILT_WITH_DEVICE_FUNCTION_CLEAN, [], id="built_with_device_function_clean"),
    pytest.param(AUDIO_STATELESS_CLEAN, [], id="audio_stateless_clean"),
]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_shape(source: str, expected: list[tuple[int, str, str]]) -> None:
    assert _found(source) == expected


# a test module builds such wrappers to probe what they accept (kornia's ONNX LightGlue tests
# hand a host image next to device keypoints): no claim there
WRAPPER_PROBED_IN_TEST = """
import torch

from kornia.feature import OnnxLightGlue


def test_forward(device):
    model = OnnxLightGlue(device=device)
    kpts = torch.zeros(1, 5, 2, device=device)
    image = torch.zeros(1, 3, 10, 10)
    outputs = model({"image0": {"keypoints": kpts, "image": image}, "image1": {"keypoints": kpts, "image": image}})
    assert "matches" in outputs
"""


def test_class_built_with_device_in_a_test_module_is_no_claim() -> None:
    assert _found(WRAPPER_PROBED_IN_TEST, "tests/feature/test_lightglue_onnx.py") == []
    assert _found(BUILT_WITH_DEVICE_LOCAL, "tests/test_embed.py") == []
