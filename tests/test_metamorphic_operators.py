"""Each metamorphic operator on a tiny input: the expected text and line map."""

from __future__ import annotations

import pytest
from metamorphic.cst_tools import Analysis, NotApplicable
from metamorphic.tags import add_tags, strip_tags
from metamorphic.variants import BY_NAME

SOURCE = "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        h = torch.zeros(x.size(0), 4)\n        return x + h\n\n\ndef train(model, loader, device):\n    for batch in loader:\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n"
# Line 6 makes the CPU tensor (tag 1); line 14 syncs with .item() (tag 2).
TAGS = {6: 1, 14: 2}

EXPECTED = {
    "rename_locals": (
        None,
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, v1):\n        v2 = torch.zeros(v1.size(0), 4)\n        return v1 + v2\n\n\ndef train(v3, v4, v5):\n    for v6 in v4:\n        v7 = v3(v6.to(v5)).sum()\n        v7.backward()\n        print(v7.item())\n",
        {1: [6], 2: [14]},
    ),
    "alias_imports": (
        None,
        "import torch as th\n\n\nclass Net(th.nn.Module):\n    def forward(self, x):\n        h = th.zeros(x.size(0), 4)\n        return x + h\n\n\ndef train(model, loader, device):\n    for batch in loader:\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n",
        {1: [6], 2: [14]},
    ),
    "from_import_factories": (
        None,
        "import torch\nfrom torch import zeros\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        h = zeros(x.size(0), 4)\n        return x + h\n\n\ndef train(model, loader, device):\n    for batch in loader:\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n",
        {1: [7], 2: [15]},
    ),
    "extract_function": (
        1,
        "import torch\n\ndef _compute_1(x):\n    return torch.zeros(x.size(0), 4)\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        h = _compute_1(x)\n        return x + h\n\n\ndef train(model, loader, device):\n    for batch in loader:\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n",
        {1: [4, 9], 2: [17]},
    ),
    "extract_staticmethod": (
        1,
        "import torch\n\n\nclass Net(torch.nn.Module):\n    \n    @staticmethod\n    def _compute_1(x):\n        return torch.zeros(x.size(0), 4)\n    def forward(self, x):\n        h = Net._compute_1(x)\n        return x + h\n\n\ndef train(model, loader, device):\n    for batch in loader:\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n",
        {1: [8, 10], 2: [18]},
    ),
    "self_attribute": (
        1,
        "import torch\n\n\nclass Net(torch.nn.Module):\n    \n    def _store_1(self, x):\n        self._cached_1 = torch.zeros(x.size(0), 4)\n    def forward(self, x):\n        self._store_1(x)\n        h = self._cached_1\n        return x + h\n\n\ndef train(model, loader, device):\n    for batch in loader:\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n",
        {1: [7, 10], 2: [18]},
    ),
    "container_list": (
        1,
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        _box_1 = [torch.zeros(x.size(0), 4)]\n        h = _box_1[0]\n        return x + h\n\n\ndef train(model, loader, device):\n    for batch in loader:\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n",
        {1: [6, 7], 2: [15]},
    ),
    "loop_while_next": (
        None,
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        h = torch.zeros(x.size(0), 4)\n        return x + h\n\n\ndef train(model, loader, device):\n    batches_1 = iter(loader)\n    while True:\n        try:\n            batch = next(batches_1)\n        except StopIteration:\n            break\n        loss = model(batch.to(device)).sum()\n        loss.backward()\n        print(loss.item())\n",
        {1: [6], 2: [19]},
    ),
    "wrap_trainer_method": (
        None,
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        h = torch.zeros(x.size(0), 4)\n        return x + h\n\nclass _Trainer:\n    def train_epoch(self, loader, model, device):\n        for batch in loader:\n            loss = model(batch.to(device)).sum()\n            loss.backward()\n            print(loss.item())\n\n\ndef train(model, loader, device):\n    _Trainer().train_epoch(loader, model, device)\n",
        {1: [6], 2: [14]},
    ),
}


def _run(name: str, tag: int | None) -> tuple[str, dict[int, list[int]]]:
    text, refused = add_tags(SOURCE, TAGS)
    assert not refused
    op = BY_NAME[name]
    module = op.apply(Analysis(text), tag) if op.targeted else op.apply(Analysis(text))
    clean, lines = strip_tags(module.code)
    compile(clean, name, "exec")
    return clean, {k: sorted(v) for k, v in lines.items()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_operator(name: str) -> None:
    tag, text, lines = EXPECTED[name]
    assert _run(name, tag) == (text, lines)


def test_tags_round_trip() -> None:
    text, _ = add_tags("x = 1  # expect: DL101\ny = 2\n", {1: 1, 2: 2})
    assert text == "x = 1  # expect: DL101 @@T1@@\ny = 2  # @@T2@@\n"
    assert strip_tags(text) == ("x = 1  # expect: DL101\ny = 2\n", {1: {1}, 2: {2}})


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("device_argparse", "no `device = <device value>`"),
        ("loop_nested_epochs", None),
    ],
)
def test_not_applicable_or_applies(name: str, why: str | None) -> None:
    text, _ = add_tags(SOURCE, TAGS)
    if why is None:
        BY_NAME[name].apply(Analysis(text))
        return
    with pytest.raises(NotApplicable, match=why.replace("(", "\\(")):
        BY_NAME[name].apply(Analysis(text))


def test_method_rewrites_need_a_class() -> None:
    text, _ = add_tags(SOURCE, TAGS)
    with pytest.raises(NotApplicable, match="not made inside a method"):
        BY_NAME["extract_method"].apply(Analysis(text), 2)
