"""Shapes behind the misses and false alarms of re-created set rt (session 39), each tested in
spellings other than the fixture's (renamed, through a helper, another method or container),
with its one-fix twin clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _findings(source: str, path: str = "pkg/losses.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


def _found(source: str, path: str = "pkg/losses.py") -> list[tuple[int, str]]:
    return [(line, code) for line, code, _ in _findings(source, path)]


# -- DL102: a hand move to a constructor device that no construction gives ---------------------

MOVED_TO_UNGIVEN_DEVICE = """
    import torch
    from torch import nn


    class SpectralLoss(nn.Module):
        def __init__(self, bins, device=None):
            super().__init__()
            self.device = device
            self.basis = torch.randn(bins, bins)
            if device is not None:
                self.basis = self.basis.to({target})

        def forward(self, x):
            return torch.matmul(self.basis, x)


    def fit(net, x, device):
        loss = {built}.to(device)
        return loss(net(x.to(device)))
"""


def test_a_table_moved_only_to_a_device_no_construction_gives_is_found() -> None:
    for target in ("self.device", "device"):
        source = MOVED_TO_UNGIVEN_DEVICE.format(target=target, built="SpectralLoss(8)")
        found = _findings(source)
        assert [(line, code) for line, code, _ in found] == [(10, "DL102")]
        assert found[0][2].startswith("`self.basis` holds a CPU tensor that is not a parameter or buffer")


SUBCLASS_FORWARDS_KWARGS = """
    import torch
    from torch import nn


    class Projection(nn.Module):
        def __init__(self, n, device=None):
            super().__init__()
            self.table = torch.eye(n)
            if device is not None:
                self.table = self.table.to(device)

        def forward(self, x):
            return x @ self.table


    class WideProjection(Projection):
        def __init__(self, n, **options):
            super().__init__(2 * n, **options)


    def run(x, device):
        head = {built}.to(device)
        return head(x.to(device))
"""


def test_a_subclass_forwarding_its_keywords_without_a_device_is_found() -> None:
    assert _found(SUBCLASS_FORWARDS_KWARGS.format(built="WideProjection(4)")) == [(9, "DL102")]


def test_a_construction_that_gives_the_device_is_clean() -> None:
    assert _found(MOVED_TO_UNGIVEN_DEVICE.format(target="self.device", built='SpectralLoss(8, device="cuda")')) == []
    assert _found(SUBCLASS_FORWARDS_KWARGS.format(built="WideProjection(4, device=device)")) == []


# -- DL107: a bare `.cuda()` under a test that a tensor is on a GPU --------------------------------

CUDA_UNDER_TENSOR_TEST = """
    import numpy as np
    import torch
    from torch import nn


    class Inverse(nn.Module):
        def forward(self, spec):
            out = spec.flip(-1)
            norm = torch.from_numpy(np.hanning(spec.size(-1)).astype(np.float32))
            {line}
            return out / norm
"""


def test_a_bare_cuda_under_a_tensors_gpu_test_is_found() -> None:
    for line, reported in (
        ("norm = norm.cuda() if spec.is_cuda else norm", 11),
        ('if out.device.type == "cuda":\n                norm = norm.cuda()', 12),
    ):
        found = _findings(CUDA_UNDER_TENSOR_TEST.format(line=line))
        assert [(f[0], f[1]) for f in found] == [(reported, "DL107")]
        assert "not to the GPU the tested tensor is on" in found[0][2]


def test_a_move_to_the_tested_tensors_device_is_clean() -> None:
    assert _found(CUDA_UNDER_TENSOR_TEST.format(line="norm = norm.to(spec.device)")) == []
    # under a machine check (not a tensor's) a bare `.cuda()` stays the author's choice
    machine = "norm = norm.cuda() if torch.cuda.is_available() else norm"
    assert _found(CUDA_UNDER_TENSOR_TEST.format(line=machine)) == []


# -- placement: `isinstance(x, torch.Tensor)` of a tensor the code placed always holds ------------

MOVED_UNDER_TENSOR_TEST = """
    import torch


    def batch_index(n, sizes, device):
        {test}
            sizes = sizes.to(device)
        return torch.repeat_interleave(torch.arange(n, device=device), sizes)


    def group(xs, device):
        sizes = torch.tensor([len(x) for x in xs])
        index = batch_index(len(xs), sizes, device)
        return torch.cat([torch.as_tensor(x) for x in xs]).to(device), index
"""


def test_a_tensor_moved_under_a_tensor_type_test_is_clean() -> None:
    for test in ("if isinstance(sizes, torch.Tensor):", "if torch.is_tensor(sizes):"):
        assert _found(MOVED_UNDER_TENSOR_TEST.format(test=test), "pkg/batching.py") == []


def test_the_same_helper_moving_under_another_test_is_found() -> None:
    found = _found(MOVED_UNDER_TENSOR_TEST.format(test="if n > 1:"), "pkg/batching.py")
    assert found == [(12, "DL101")]


# -- DL401: a helper handed a batch before the step moves the name ---------------------------------

HANDED_BEFORE_THE_MOVE = """
    import torch
    import torch.nn.functional as F


    class Corruptor:
        def __init__(self, num_entities):
            self.num_entities = num_entities

        def corrupt(self, triples):
            rows = triples.tolist()
            return torch.tensor([[h, r, (t + 1) % self.num_entities] for h, r, t in rows])


    class Loop:
        def __init__(self, model, optimizer, num_entities, device):
            self.model = model.to(device)
            self.optimizer = optimizer
            self.device = device
            self.corruptor = Corruptor(num_entities)

        def step(self, batch):
            {first}
            {second}
            loss = F.softplus(self.model(negatives) - self.model(batch)).mean()
            loss.backward()
            self.optimizer.step()

        def train(self, loader):
            for batch in loader:
                self.optimizer.zero_grad()
                self.step(batch)
"""


def test_a_helper_handed_the_batch_before_its_move_is_not_a_device_sync() -> None:
    for first, second in (
        ("negatives = self.corruptor.corrupt(batch).to(self.device)", "batch = batch.to(self.device)"),
        ("negatives = self.corruptor.corrupt(triples=batch).cuda()", "batch = batch.cuda()"),
    ):
        found = _found(HANDED_BEFORE_THE_MOVE.format(first=first, second=second), "train.py")
        assert [f for f in found if f[1] == "DL401"] == []


def test_a_helper_handed_the_moved_batch_syncs_every_step() -> None:
    source = HANDED_BEFORE_THE_MOVE.format(
        first="batch = batch.to(self.device)", second="negatives = self.corruptor.corrupt(batch)"
    )
    assert [f for f in _found(source, "train.py") if f[1] == "DL401"] == [(11, "DL401")]


# -- DL111: an optimizer wrapper whose `load_state_dict` puts the loaded state back as it came ----

WRAPPER_PUTS_BACK_LOADED_STATE = """
    import torch


    class Lookahead:
        def __init__(self, inner, k=5):
            self.inner = inner
            self.k = k

        def step(self):
            self.inner.step()

        def load_state_dict(self, sd):
            self.inner.load_state_dict(sd)
            params = [p for g in self.inner.param_groups for p in g["params"]]
            for index, saved in sd["state"].items():
                {put_back}


    def resume(model, path):
        ckpt = {{}}
        if path:
            ckpt = torch.load(path, map_location="cpu")
        model.cuda()
        opt = Lookahead(torch.optim.Adam(model.parameters()))
        opt.load_state_dict(ckpt["optim"])
        return opt
"""


def test_a_wrapper_restoring_the_loaded_state_as_it_came_is_found() -> None:
    for put_back in (
        "self.inner.state[params[index]] = saved",
        'self.inner.state[params[index]]["exp_avg"] = saved["exp_avg"]',
    ):
        found = _findings(WRAPPER_PUTS_BACK_LOADED_STATE.format(put_back=put_back), "train.py")
        assert [(line, code) for line, code, _ in found] == [(26, "DL111")]
        assert "restores the state of `Lookahead`, whose own `load_state_dict` puts" in found[0][2]


def test_a_wrapper_moving_the_restored_state_to_each_parameter_is_clean() -> None:
    put_back = "self.inner.state[params[index]] = {k: v.to(params[index].device) for k, v in saved.items()}"
    assert _found(WRAPPER_PUTS_BACK_LOADED_STATE.format(put_back=put_back), "train.py") == []


# -- DL102: STFT windows are factories, also named through `getattr(torch, name)` ------------------

WINDOW_ATTRIBUTE = """
    import torch
    from torch import nn


    class SpectralLoss(nn.Module):
        def __init__(self, n_fft, win_length, window="hann_window"):
            super().__init__()
            self.n_fft = n_fft
            {store}

        def forward(self, x, y):
            sx = torch.stft(x, self.n_fft, window=self.win, return_complex=True).abs()
            sy = torch.stft(y, self.n_fft, window=self.win, return_complex=True).abs()
            return (sx - sy).abs().mean()
"""


def test_a_window_kept_as_a_plain_attribute_is_found_however_it_is_named() -> None:
    for store in (
        "self.win = torch.hann_window(win_length)",
        "self.win = getattr(torch, window)(win_length)",
        'self.win = getattr(torch, "blackman_window")(win_length)',
    ):
        found = _findings(WINDOW_ATTRIBUTE.format(store=store))
        assert [(line, code) for line, code, _ in found] == [(10, "DL102")]
        assert found[0][2].startswith("`self.win` holds a CPU tensor that is not a parameter or buffer")


def test_a_registered_window_is_clean() -> None:
    store = 'self.register_buffer("win", getattr(torch, window)(win_length))'
    assert _found(WINDOW_ATTRIBUTE.format(store=store)) == []


# -- DL102: a CPU tensor inside a plain helper object that a module keeps ----------------------

HELD_PLAIN_OBJECT = """
    import torch
    from torch import nn


    class Spectrogram:
        def __init__(self, n_fft):
            self.n_fft = n_fft
            self.window = torch.hamming_window(n_fft)

        def {method}(self, x):
            return torch.stft(x, self.n_fft, window={window}, return_complex=True).abs()


    class SpectralLoss(nn.Module):
        def __init__(self, n_fft):
            super().__init__()
            self.spec = Spectrogram(n_fft)

        def forward(self, x, y):
            return (self.spec{call}(x) - self.spec{call}(y)).abs().mean()
"""


def test_a_cpu_tensor_in_a_plain_object_a_module_keeps_is_found() -> None:
    for method, call in (("__call__", ""), ("magnitude", ".magnitude")):
        source = HELD_PLAIN_OBJECT.format(method=method, call=call, window="self.window")
        found = _findings(source)
        assert [(line, code) for line, code, _ in found] == [(9, "DL102")]
        assert "a plain class that the module `SpectralLoss` keeps as `self.spec`" in found[0][2]


def test_a_plain_object_that_moves_its_tensor_to_the_input_is_clean() -> None:
    source = HELD_PLAIN_OBJECT.format(method="__call__", call="", window="self.window.to(x.device)")
    assert _found(source) == []
