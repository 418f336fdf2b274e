"""DL120 (device-attribute-left-behind), the one shape behind the re-created misses ro10, ry07,
rw08 and rs12: each spelling differs in structure from the pairs (a metric class moved by a
helper's caller, a preprocessor held by a parent, a custom `to()` that records the device on the
parent only, a helper that builds and moves), each with a clean twin; exact code, line and
message."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, path: str = "models/metric.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings if f.code == "DL120"]


def _message(use: str, attr: str, owner: str, move: str, where: str, parent: str | None = None) -> str:
    what = (
        f"moves it inside `{parent}` through `_apply` (never its own `to()`/`cuda()`)"
        if parent
        else "moves its parameters and buffers"
    )
    return (
        f"`{use}` sends data to `self.{attr}`, which `{owner}` fixes to the CPU when it is built; "
        f"`{move}` {where} {what}, which never updates that attribute; read the device "
        "from a parameter or buffer (`next(self.parameters()).device`) or refresh it in `_apply`"
    )


# -- 1. a metric module whose `device` parameter defaults to None, built and moved by a helper --

METRIC_BUILT_BY_HELPER = """
    import torch
    import torch.nn as nn


    class PerceptualScore(nn.Module):
        def __init__(self, width=16, dev=None):
            super().__init__()
            self._dev = dev or torch.device("cpu")
            self.proj = nn.Linear(width, 1)

        def score(self, a, b):
            a = a.to(self._dev)
            b = b.to(self._dev)
            return self.proj(a - b).abs().mean()

        def forward(self, a, b):
            return self.score(a, b)


    def build_scorer(width):
        scorer = PerceptualScore(width)
        scorer = scorer.cuda()
        return scorer
"""


def test_metric_built_and_moved_by_a_helper() -> None:
    move = "scorer.cuda()"
    assert _found(METRIC_BUILT_BY_HELPER) == [
        (13, "DL120", _message("a.to(self._dev)", "_dev", "PerceptualScore", move, "in `build_scorer`")),
        (14, "DL120", _message("b.to(self._dev)", "_dev", "PerceptualScore", move, "in `build_scorer`")),
    ]


def test_metric_reading_its_parameters_is_clean() -> None:
    fixed = METRIC_BUILT_BY_HELPER.replace(
        "a = a.to(self._dev)", "dev = self.proj.weight.device\n            a = a.to(dev)"
    ).replace("b = b.to(self._dev)", "b = b.to(dev)")
    assert _found(fixed) == []


def test_metric_built_on_the_device_it_moves_to_is_clean() -> None:
    same = METRIC_BUILT_BY_HELPER.replace(
        "def build_scorer(width):\n        scorer = PerceptualScore(width)\n        scorer = scorer.cuda()",
        "def build_scorer(width, device):\n        scorer = PerceptualScore(width, dev=device)\n        scorer = scorer.to(device)",
    )
    assert "dev=device" in same
    assert _found(same) == []


def test_metric_moved_to_a_dtype_only_is_clean() -> None:
    assert _found(METRIC_BUILT_BY_HELPER.replace("scorer.cuda()", "scorer.to(torch.float16)")) == []


# -- 2. a preprocessor held by a parent: its own to() records the device, the parent's move never calls it --

PREPROCESSOR_IN_PARENT = """
    import torch
    import torch.nn as nn


    class Normalizer(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.device = "cpu"
            self.register_buffer("mean", torch.tensor(mean))
            self.register_buffer("std", torch.tensor(std))

        def to(self, device, *args, **kwargs):
            self.device = device
            return super().to(device, *args, **kwargs)

        def forward(self, batch):
            stacked = torch.stack([item.to(self.device) for item in batch])
            return (stacked - self.mean) / self.std


    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3)
            self.prep = Normalizer((0.5, 0.5, 0.5), (0.2, 0.2, 0.2))

        def forward(self, batch):
            return self.stem(self.prep(batch))


    class Runner:
        def __init__(self, device):
            self.detector = Detector()
            self.detector.to(device)

        def run(self, batches):
            return [self.detector(b) for b in batches]
"""


def test_preprocessor_held_by_a_moved_parent() -> None:
    assert _found(PREPROCESSOR_IN_PARENT) == [
        (
            18,
            "DL120",
            _message(
                "item.to(self.device)", "device", "Normalizer", "self.detector.to(device)", "in `__init__`", "Detector"
            ),
        )
    ]


def test_preprocessor_moved_directly_uses_its_own_to() -> None:
    direct = PREPROCESSOR_IN_PARENT.replace("self.prep = Normalizer", "self.prep = nn.Identity()  # ").replace(
        "self.detector = Detector()\n            self.detector.to(device)",
        "self.detector = Normalizer((0.5,), (0.2,))\n            self.detector.to(device)",
    )
    assert _found(direct) == []


def test_preprocessor_refreshed_in_apply_is_clean() -> None:
    refreshed = PREPROCESSOR_IN_PARENT.replace(
        "        def forward(self, batch):\n            stacked",
        "        def _apply(self, fn, *args, **kwargs):\n"
        "            out = super()._apply(fn, *args, **kwargs)\n"
        "            self.device = self.mean.device\n"
        "            return out\n\n"
        "        def forward(self, batch):\n            stacked",
        1,
    )
    assert _found(refreshed) == []


# -- 3. a custom to() on the parent that records the device there only; a device property and a factory in a child --

PARENT_TO_RECORDS_ITSELF = """
    import torch
    import torch.nn as nn


    class Cell(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.size = size
            self.__device = torch.device("cpu")
            self.weight = nn.Parameter(torch.randn(size, size))

        @property
        def device(self):
            return self.__device

        def initial_state(self, batch):
            return torch.zeros(batch, self.size, device=self.device)

        def forward(self, x, h=None):
            h = self.initial_state(x.shape[0]) if h is None else h
            return torch.tanh(x @ self.weight + h)


    class Stack(nn.Module):
        def __init__(self, cells, device="cpu"):
            super().__init__()
            self.cells = nn.ModuleList(cells)
            self.device = device

        def to(self, device):
            self.device = device
            return super().to(device)

        def forward(self, x):
            x = x.to(self.device)
            for cell in self.cells:
                x = cell(x)
            return x


    def train(loader):
        net = Stack([Cell(32), Cell(32)])
        net.to("cuda")
        for x in loader:
            net(x).sum().backward()
"""


def test_custom_to_on_the_parent_leaves_the_child_device() -> None:
    assert _found(PARENT_TO_RECORDS_ITSELF) == [
        (
            18,
            "DL120",
            _message(
                "torch.zeros(batch, self.size, device=self.device)",
                "__device",
                "Cell",
                'net.to("cuda")',
                "in `train`",
                "Stack",
            ),
        )
    ]


def test_child_device_refreshed_through_its_setter_is_clean() -> None:
    fixed = PARENT_TO_RECORDS_ITSELF.replace(
        "            return self.__device\n",
        "            return self.__device\n\n"
        "        @device.setter\n"
        "        def device(self, value):\n"
        "            self.__device = value\n",
    ).replace(
        "            self.device = device\n            return super().to(device)",
        "            self.device = device\n"
        "            for cell in self.cells:\n"
        "                cell.device = device\n"
        "            return super().to(device)",
    )
    assert _found(fixed) == []


def test_child_reading_its_parameter_is_clean() -> None:
    fixed = PARENT_TO_RECORDS_ITSELF.replace("return self.__device", "return self.weight.device")
    assert _found(fixed) == []


# -- 4. a device transform child built from the attribute --

TRANSFORM_CHILD = """
    import torch
    import torch.nn as nn


    class MoveTo(nn.Module):
        def __init__(self, target):
            super().__init__()
            self.device = target

        def forward(self, x):
            return x.to(self.device, non_blocking=True)


    class Encoder(nn.Module):
        def __init__(self, device=None):
            super().__init__()
            self.device = device if device is not None else "cpu"
            self.move = MoveTo(self.device)
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(self.move(x))


    encoder = Encoder().to("cuda:1")
"""


def test_transform_child_built_from_the_attribute() -> None:
    move, where = 'Encoder().to("cuda:1")', "at the module's top level"
    assert _found(TRANSFORM_CHILD) == [
        # the transform's own attribute, built from the encoder's, is left behind too
        (12, "DL120", _message("x.to(self.device, non_blocking=True)", "device", "MoveTo", move, where, "Encoder")),
        (23, "DL120", _message("self.move(x)", "device", "Encoder", move, where)),
    ]


def test_transform_child_built_on_the_move_target_is_clean() -> None:
    assert _found(TRANSFORM_CHILD.replace('Encoder().to("cuda:1")', 'Encoder("cuda:1").to("cuda:1")')) == []


def test_state_built_on_the_attribute_before_the_move_is_clean() -> None:
    # a buffer or parameter made on the attribute (in `__init__` or a helper only it calls) moves
    # with the module; only what is made after the move stays behind
    built = (
        METRIC_BUILT_BY_HELPER.replace(
            "            self.proj = nn.Linear(width, 1)\n",
            "            self.proj = nn.Linear(width, 1)\n            self._reset()\n\n"
            "        def _reset(self):\n"
            '            self.register_buffer("total", torch.zeros(1, device=self._dev))\n'
            "            self.scale = nn.Parameter(torch.ones(1, device=self._dev))\n",
        )
        .replace("a = a.to(self._dev)", "a = a.to(self.total.device)")
        .replace("b = b.to(self._dev)", "b = b * self.scale")
    )
    assert "register_buffer" in built
    assert _found(built) == []
