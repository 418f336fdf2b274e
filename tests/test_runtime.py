"""The runtime checker (`devicelint.runtime`), exercised on the CPU through its simulated GPU."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import FIXTURES, ROOT  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import devicelint.runtime as rt  # noqa: E402
from devicelint.runtime import records  # noqa: E402
from devicelint.runtime.checker import DeviceConsistencyError, DeviceWarning  # noqa: E402

EXAMPLE = FIXTURES / "runtime_example"
# Tests of the simulation itself (its numbers, its limits): devicelint refuses to simulate where
# CUDA is present, and there the same code runs on the real GPU in the other tests.
simulation_only = pytest.mark.skipif(torch.cuda.is_available(), reason="simulation is used only without CUDA")
if not torch.cuda.is_available():
    # The simulated device must be registered before this process's first backward pass;
    # collection imports every test module before any test runs.
    from devicelint.runtime import simulate

    simulate.install()


def _example(name: str):  # noqa: ANN202
    sys.path.insert(0, str(EXAMPLE))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLE))


def _planted_markers(path: Path) -> set[tuple[int, str]]:
    found = set()
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        match = re.search(r"# planted: (DL6\d\d)", text)
        if match:
            found.add((number, match.group(1)))
    return found


def _summary(findings) -> set[tuple[str, str, int, str | None]]:  # noqa: ANN001
    return {(f.code, Path(f.path).name, f.line, f.module_path) for f in findings}


def test_planted_model_one_finding_per_bug() -> None:
    planted = _example("planted_model")
    with rt.check(syncs="error") as report:
        planted.train("cuda", steps=3)
    expected = {(code, "planted_model.py", line) for line, code in _planted_markers(EXAMPLE / "planted_model.py")}
    assert len(expected) == 5
    assert {(c, p, line) for c, p, line, _ in _summary(report.findings)} == expected
    modules = {(f.code, f.line): f.module_path for f in report.findings}
    by_code = {code: line for line, code in _planted_markers(EXAMPLE / "planted_model.py") if code != "DL601"}
    assert modules[("DL605", by_code["DL605"])] == "TinyGPT.blocks.0.attn"
    assert modules[("DL606", by_code["DL606"])] == "TinyGPT.blocks.0.mlp"
    arange_line = next(
        n for n, t in enumerate((EXAMPLE / "planted_model.py").read_text().splitlines(), 1) if "torch.arange(T)" in t
    )
    assert modules[("DL601", arange_line)] == "TinyGPT.blocks.0.attn"
    messages = {f.code + ":" + str(f.line): f.message for f in report.findings}
    assert "also in `TinyGPT.blocks.1.attn`" in messages[f"DL605:{by_code['DL605']}"]
    assert "`blocks.0.mlp.layers` is a plain list holding modules" in messages[f"DL606:{by_code['DL606']}"]
    assert "made here by `torch.arange`" in messages[f"DL601:{arange_line}"]
    assert "(3 times in the checked region)" in messages[f"DL602:{by_code['DL602']}"]
    assert all(f.severity == "error" for f in report.findings)


def test_fixed_model_is_clean() -> None:
    fixed = _example("fixed_model")
    with rt.check(syncs="error") as report:
        losses = fixed.train("cuda", steps=3)
    assert report.findings == []
    assert len(losses) == 3 and all(isinstance(v, float) for v in losses)


# -- clean real models ------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class TinyResNet(nn.Module):
    """torchvision's ResNet layout, shrunk."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class TransformerClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.pos = nn.Parameter(torch.zeros(1, 12, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, idx: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx) + self.pos
        causal = nn.Transformer.generate_square_subsequent_mask(idx.shape[1], device=idx.device)
        h = self.encoder(h, mask=causal, src_key_padding_mask=padding)
        return self.head(h.mean(1))


def _train(model: nn.Module, batch, optimizer: type, steps: int = 2, **options) -> torch.Tensor:  # noqa: ANN001
    model = model.to("cuda")
    opt = optimizer(model.parameters(), lr=1e-3, **options)
    schedule = torch.optim.lr_scheduler.StepLR(opt, 1)
    for _ in range(steps):
        *inputs, target = batch()
        loss = F.cross_entropy(model(*inputs), target, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
    model.eval()
    with torch.no_grad():
        *inputs, target = batch()
        return (model(*inputs).argmax(-1) == target).float().mean()


def test_clean_cnn_has_no_findings() -> None:
    def batch():  # noqa: ANN202
        return torch.randn(2, 3, 32, 32, device="cuda"), torch.randint(0, 10, (2,), device="cuda")

    with rt.check(syncs="error") as report:
        accuracy = _train(TinyResNet(), batch, torch.optim.SGD, momentum=0.9, nesterov=True)
    assert report.findings == []
    assert accuracy.device == report.device


def test_clean_transformer_has_no_findings() -> None:
    def batch():  # noqa: ANN202
        idx = torch.randint(0, 50, (2, 12), device="cuda")
        padding = torch.zeros(2, 12, dtype=torch.bool, device="cuda")
        return idx, padding, torch.randint(0, 5, (2,), device="cuda")

    with rt.check(syncs="error") as report:
        _train(TransformerClassifier(), batch, torch.optim.AdamW)
        _train(TransformerClassifier(), batch, torch.optim.Adam, foreach=False)
    assert report.findings == []


# -- one op shape per code ----------------------------------------------------------------
def _line_of(fn, needle: str) -> int:  # noqa: ANN001
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return next(start + i for i, text in enumerate(lines) if needle in text)


def _one(report, code: str):  # noqa: ANN001, ANN202
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, report.format()
    return found[0]


def test_cpu_scalar_and_cpu_index_are_reported() -> None:
    def body() -> None:
        x = torch.randn(4, 3, device="cuda")
        for _ in range(2):
            y = x * torch.tensor(2.0)  # 0-dim
            z = x[torch.tensor([0, 2])]  # index
        assert y.device == z.device == x.device

    with rt.check() as report:
        body()
    scalar, index = sorted((f for f in report.findings if f.code == "DL601"), key=lambda f: f.line)
    assert scalar.line == _line_of(body, "# 0-dim")
    assert scalar.message == (
        f"`aten.mul` mixed the cpu tensor made here by `torch.tensor` with tensors on {report.device} (2 times): "
        "torch accepts a 0-dim CPU tensor silently but copies it to the device on every call; create it "
        "on the input's device (`device=x.device`) or register it as a buffer"
    )
    assert index.line == _line_of(body, "# index")
    assert "torch accepts a CPU index silently" in index.message


def test_mix_with_a_tensor_from_outside_is_reported_at_the_op_and_its_backward() -> None:
    weight = torch.randn(3)  # made before the check: no origin, so the op's line is used

    def body() -> None:
        x = torch.randn(4, 3, device="cuda", requires_grad=True)
        for _ in range(2):
            loss = (x * weight).sum()  # the op
            loss.backward()

    with rt.check() as report:
        body()
    finding = _one(report, "DL601")
    assert finding.line == _line_of(body, "# the op")  # backward attributed to the forward line
    assert finding.message.startswith(f"`aten.mul` mixed a cpu tensor with tensors on {report.device} (4 times)")
    assert finding.message.endswith("(also in the backward pass)")
    assert "CUDA raises `Expected all tensors to be on the same device`" in finding.message


def test_host_syncs_are_counted_per_call_site() -> None:
    def body() -> None:
        x = torch.randn(8, device="cuda")
        for _ in range(3):
            x.sum().item()  # item
            x[x > 0]  # mask
            x.cpu()  # copy
            torch.nonzero(x)  # nonzero
            if x.sum() > 0:  # if
                pass
        x.mean().item()  # once: fine

    with rt.check(syncs="error") as report:
        body()
    lines = {f.line: f for f in report.findings}
    assert {f.code for f in report.findings} == {"DL602"}
    for needle in ("# item", "# mask", "# copy", "# nonzero", "# if"):
        assert _line_of(body, needle) in lines, needle
    assert _line_of(body, "# once") not in lines
    item = lines[_line_of(body, "# item")]
    assert item.message == (
        "`.item()`, `float()`, `int()` or `bool()` waits for the device here (3 times in the checked "
        "region); keep the value on the device (accumulate tensors, log every N steps) or move it out "
        "of the step"
    )
    assert "boolean-mask indexing" in lines[_line_of(body, "# mask")].message


def test_sync_policies() -> None:
    def body() -> None:
        x = torch.ones(2, device="cuda")
        for _ in range(2):
            x.sum().item()

    with pytest.warns(DeviceWarning, match="DL602"):
        with rt.check(syncs="warn") as report:
            body()
    assert [f.severity for f in report.findings] == ["warning"] and report.errors == []
    with rt.check(syncs="ignore") as report:
        body()
    assert report.findings == []
    with rt.check(syncs="error", min_syncs=3) as report:
        body()
    assert report.findings == []


def test_cpu_tensor_made_in_forward_and_copied_each_step() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale = torch.tensor([0.5, 2.0, 1.0, 1.0]).to(x.device)  # per-step copy
            return self.lin(x) * scale

    with rt.check() as report:
        model = Scaled().to("cuda")
        for _ in range(3):
            batch = torch.randn(2, 4).to("cuda")  # a batch: made outside forward, fine
            model(batch)
    finding = _one(report, "DL603")
    assert finding.line == _line_of(Scaled.forward, "# per-step copy")
    assert finding.module_path == "Scaled"
    assert finding.message == (
        f"a tensor made on the CPU by `torch.tensor` inside `forward` is copied to {report.device} (3 times); "
        "create it there directly (`device=x.device`) or register it once as a buffer"
    )
    assert len(report.findings) == 1


def test_raise_on_exit_lists_every_error_grouped_by_site() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.offset = torch.ones(3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + self.offset + torch.arange(3)

    with pytest.raises(DeviceConsistencyError) as info:
        with rt.check(raise_on_exit=True):
            Net().to("cuda")(torch.randn(2, 3, device="cuda"))
    error = info.value
    assert [f.code for f in error.findings] == ["DL605", "DL601"]
    text = str(error)
    assert text.startswith("devicelint runtime: 2 finding(s)")
    assert "DL605 `offset` is a plain tensor attribute on cpu" in text
    assert "[module `Net`]" in text


def test_decorator_form_and_no_nesting() -> None:
    @rt.check(raise_on_exit=True)
    def step() -> torch.Tensor:
        return torch.ones(2, device="cuda") + torch.ones(2)

    with pytest.raises(DeviceConsistencyError, match="DL601"):
        step()
    with rt.check():
        with pytest.raises(RuntimeError, match="do not nest"):
            with rt.check():
                pass


def test_cpu_only_check_without_simulation_reports_nothing_for_cpu_code() -> None:
    with rt.check(expect_device="cpu") as report:
        model = nn.Linear(3, 3)
        for _ in range(2):
            model(torch.randn(2, 3)).sum().item()
    assert report.findings == [] and not report.simulated and report.device == torch.device("cpu")


def test_a_model_run_wholly_on_the_cpu_is_consistent() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.offset = torch.ones(3)  # would be DL605 on a GPU run

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + self.offset

    device = "cuda" if torch.cuda.is_available() else "cpu"  # picks the CPU here
    with rt.check() as report:
        Net().to(device)(torch.randn(2, 3, device=device))
    expected = [] if device == "cpu" else ["DL605"]
    assert [f.code for f in report.findings] == expected


def test_cpu_tensors_torch_takes_by_design_are_not_mixes() -> None:
    from torch.nn.utils.rnn import pack_padded_sequence

    with rt.check(syncs="error") as report:
        x = torch.randn(3, 5, 4, device="cuda")
        packed = pack_padded_sequence(x, torch.tensor([5, 3, 2]), batch_first=True)  # CPU lengths
        assert packed.batch_sizes.device.type == "cpu"
        log_probs = torch.randn(10, 2, 5, device="cuda").log_softmax(-1).requires_grad_()
        targets = torch.randint(1, 5, (2, 4), device="cuda")
        F.ctc_loss(log_probs, targets, torch.tensor([10, 10]), torch.tensor([4, 3])).backward()
        parts = torch.tensor_split(torch.arange(10, device="cuda"), torch.tensor([2, 5]))
        assert len(parts) == 3
        data = torch.tensor([[1.0, 2.0]], device="cuda", requires_grad=True)
        assert data.is_leaf and data.requires_grad and data.device == report.device
        assert data.new_tensor([3.0]).device == report.device
    assert report.findings == []


@simulation_only
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_fused_rnn_cells_run_in_simulation_with_the_cpu_numbers(cell: str) -> None:
    import copy

    torch.manual_seed(0)
    reference = getattr(nn, cell)(4, 6, num_layers=2, bidirectional=True, batch_first=True)
    checked = copy.deepcopy(reference)
    x = torch.randn(3, 5, 4)
    expected = reference(x)[0]
    expected.pow(2).sum().backward()
    with rt.check(syncs="ignore") as report:
        checked.to("cuda")
        out = checked(x.to("cuda"))[0]
        out.pow(2).sum().backward()
        got, grads = out.cpu(), [p.grad.cpu() for p in checked.parameters()]
    assert report.findings == []
    assert out.device == report.device and out.shape == expected.shape
    torch.testing.assert_close(got, expected.detach())
    for grad, param in zip(grads, reference.parameters()):
        torch.testing.assert_close(grad, param.grad, atol=1e-5, rtol=1e-4)


# -- audit ------------------------------------------------------------------------------------
def test_audit_reports_attribute_paths() -> None:
    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2)
            self.both = [self.a, self.b]  # alias of registered modules: fine
            self.extra = [nn.Linear(2, 2)]  # noqa: DL103 (not registered)
            self.table = torch.zeros(3)  # unregistered tensor

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(2, 2))
            self.head = Head()

    model = Model()
    findings = rt.audit(model, "cuda")
    assert sorted((f.code, f.module_path) for f in findings) == [
        ("DL604", "Model"),
        ("DL605", "Model.head"),
        ("DL606", "Model.head"),
    ]
    by_code = {f.code: f for f in findings}
    assert by_code["DL606"].line == _line_of(Head, "(not registered)")
    assert by_code["DL606"].message.startswith("`head.extra` is a plain list holding modules")
    assert by_code["DL605"].line == _line_of(Head, "# unregistered tensor")
    assert by_code["DL604"].message == (
        "`Model.body.0.weight`, `Model.body.0.bias`, `Model.head.a.weight` and 3 more are on cpu, expected cuda "
        "(6 parameters and buffers); move `Model` with `.to(device)` before running it"
    )
    assert [(f.code, f.line) for f in rt.audit(model, "cpu")] == [("DL606", by_code["DL606"].line)]


def test_a_model_passed_to_check_is_audited_even_if_it_never_runs() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.scale = torch.ones(2)  # unregistered

    net = Net()
    with rt.check(model=net) as report:
        net.to("cuda")
    assert [(f.code, f.line, f.module_path) for f in report.findings] == [
        ("DL605", _line_of(Net, "# unregistered"), "Net")
    ]
    assert report.findings[0].message.startswith("`scale` is a plain tensor attribute on cpu")


def test_torch_modules_and_right_device_attributes_are_not_audited() -> None:
    class Cache(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.last = torch.zeros(2)  # on the expected device below

    assert rt.audit(nn.Transformer(16, 2, 1, 1, 32), "cpu") == []
    assert rt.audit(Cache(), "cpu") == []


# -- plumbing ------------------------------------------------------------------------------------
def test_runtime_rules_are_documentation_only() -> None:
    from devicelint.registry import find_rule

    for code, name in records.NAMES.items():
        rule = find_rule(code)
        assert rule is not None and rule.name == name
        assert rule.tokens == ()
        assert list(rule().check(None)) == []  # type: ignore[arg-type]


def test_static_side_and_plugin_import_without_torch() -> None:
    script = (
        "import sys; import devicelint.runtime, devicelint.runtime.pytest_plugin, devicelint.checks, "
        "devicelint.engine; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


@simulation_only
def test_simulated_device_behaves_like_cuda_for_user_code() -> None:
    with rt.check() as report:
        t = torch.ones(3).cuda()
        assert t.device.type == "vgpu"
        assert (t * 2).tolist() == [2.0, 2.0, 2.0]
        assert torch.zeros(2, device=torch.device("cuda")).device == t.device
    assert report.simulated and report.findings == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.ones(1).device.type == "cpu"  # nothing leaks out of the check


def _cpu_input_in_thread(model):  # noqa: ANN001, ANN202
    return model(torch.randn(2, 3))  # a CPU batch into a "cuda" model


def _cpu_input_watched(model):  # noqa: ANN001, ANN202
    with rt.watch_this_thread():
        return model(torch.randn(2, 3))


def test_threads_started_in_the_region_are_checked_and_others_can_opt_in() -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as earlier:  # its thread runs before the region opens
        earlier.submit(lambda: None).result()
        with rt.check(syncs="ignore") as report:
            model = nn.Linear(3, 3).to("cuda")
            thread = threading.Thread(target=_cpu_input_in_thread, args=(model,))
            thread.start()
            thread.join()
            earlier.submit(_cpu_input_watched, model).result()
    lines = {f.line for f in report.findings if f.code == "DL601"}
    assert lines == {_cpu_input_in_thread.__code__.co_firstlineno + 1, _cpu_input_watched.__code__.co_firstlineno + 2}


def test_a_thread_running_before_the_region_is_not_checked_unless_it_opts_in() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as earlier:
        earlier.submit(lambda: None).result()
        with rt.check(syncs="ignore") as report:
            model = nn.Linear(3, 3).to("cuda")
            unchecked = earlier.submit(_cpu_input_in_thread, model)
            if report.simulated:
                unchecked.result()
            else:  # a real GPU refuses the mix itself, unchecked
                with pytest.raises(RuntimeError, match="same device"):
                    unchecked.result()
    assert [f for f in report.findings if f.code == "DL601"] == []


@simulation_only
def test_to_sparse_csr_under_simulation_names_the_op() -> None:
    from devicelint.runtime.simulate import SimulationUnavailable

    with rt.check(syncs="ignore"):
        dense = torch.eye(3, device="cuda")
        assert dense.to_sparse().layout == torch.sparse_coo  # COO simulates
        with pytest.raises(SimulationUnavailable, match="cannot run `aten._to_sparse_csr`"):
            dense.to_sparse_csr()


def test_check_holds_its_model_weakly() -> None:
    import gc
    import weakref

    model = nn.Linear(3, 3)
    ref = weakref.ref(model)
    decorated = rt.check(model=model, syncs="ignore")(lambda: None)
    decorated()
    del model
    gc.collect()
    assert ref() is None


@simulation_only
def test_simulation_runs_list_indexing_and_dtype_changes_after_the_move_as_a_gpu_would() -> None:
    with rt.check(syncs="ignore") as report:
        x = torch.randn(3, 5, device="cuda")
        assert x[:, [4, 0]].shape == (3, 2) and x[[1, 0]].shape == (2, 5)
        x[[0, 2]] = 0.0
        assert x[0].abs().sum().item() == 0.0
        half = nn.Linear(5, 2).to("cuda").half()
        assert half.weight.dtype == torch.float16 and half(x.half()).dtype == torch.float16
        bf16 = nn.Linear(5, 2).to("cuda").to(torch.bfloat16)
        bf16(x.to(torch.bfloat16)).float().sum().backward()
        assert bf16.weight.grad.dtype == torch.bfloat16
    assert report.simulated and report.errors == []
    # The parameter swapping that makes this work is on inside the region only.
    assert torch.__future__.get_swap_module_params_on_conversion() is False


def test_numpy_on_a_simulated_gpu_tensor_raises_as_on_a_gpu() -> None:
    with rt.check(syncs="ignore"):
        x = torch.randn(3, device="cuda")
        with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
            x.numpy()
        assert x.tolist() == x.cpu().tolist()  # host reads that a GPU allows still work
