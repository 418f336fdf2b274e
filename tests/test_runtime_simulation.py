"""Real training code under the simulated GPU: checkpointing, AMP, saving and loading, pinned
memory, Hugging Face models and the frameworks that pick their device by asking torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import devicelint.runtime as rt  # noqa: E402
from devicelint.runtime import simulate as sim  # noqa: E402

HERE = Path(__file__).name

# devicelint refuses to simulate where CUDA is present (the simulated backend would become
# torch's accelerator for the process): these tests of the simulation itself run without one.
simulation_only = pytest.mark.skipif(torch.cuda.is_available(), reason="simulation is refused where CUDA is present")


def _line_of(text: str) -> int:
    """The line of this file that contains `text` (a marker comment)."""
    for number, line in enumerate(Path(__file__).read_text().splitlines(), start=1):
        if text in line and "_line_of(" not in line:
            return number
    raise AssertionError(f"{text!r} is not in {HERE}")


class Block(nn.Module):
    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5), nn.GELU())
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if self.reentrant is None:
            return self.b(h)
        return checkpoint(self.b, h, use_reentrant=self.reentrant)


# -- activation checkpointing -----------------------------------------------------------------
@pytest.mark.parametrize("reentrant", [False, True])
@simulation_only
def test_checkpointing_runs_and_matches_the_plain_backward(reentrant: bool) -> None:
    grads = []
    for use in (None, reentrant):
        torch.manual_seed(0)
        model = Block(use)
        with rt.check(model, syncs="error", simulate="always") as report:
            model.cuda()
            x = torch.randn(4, 6, device="cuda", requires_grad=True)
            torch.manual_seed(1)  # the same dropout mask, recomputed or not
            model(x).sum().backward()
        assert report.findings == []
        assert model.a.weight.grad.device == sim.SIM_DEVICE
        grads.append(model.a.weight.grad.inner.clone())
    torch.testing.assert_close(grads[0], grads[1])


_FAILING_BACKWARDS = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
import devicelint.runtime as rt
from devicelint.runtime import simulate as sim

def bad(*args):
    raise KeyError("hook fails")

for case in ["tensor hook", "post-accumulate hook", "unpack hook", "module hook", "op", "recompute", "recompute reentrant"]:
    try:
        with rt.check(simulate="always"):
            x = torch.randn(3, device="cuda", requires_grad=True)
            w = torch.randn(3, device="cuda", requires_grad=True)
            y = x.sin()
            if case == "tensor hook":
                y.register_hook(bad)
            elif case == "post-accumulate hook":
                w.register_post_accumulate_grad_hook(bad)
            elif case == "unpack hook":
                with torch.autograd.graph.saved_tensors_hooks(lambda t: t, bad):
                    y = x.sin()
            elif case == "module hook":
                layer = nn.Linear(3, 3).cuda()
                layer.register_full_backward_hook(bad)
                y = layer(y)
            elif case == "op":
                original = sim.run_simulated
                def failing(func, args, kwargs):
                    if func is torch.ops.aten.cos.default:
                        raise ValueError("op fails in backward")
                    return original(func, args, kwargs)
                sim.run_simulated = failing
            elif case.startswith("recompute"):
                calls = []
                def f(t):
                    calls.append(1)
                    if len(calls) > 1:
                        raise KeyError("recompute fails")
                    return t.sin()
                y = checkpoint(f, x, use_reentrant=case.endswith("reentrant"))
            try:
                (y * w).sum().backward()
            finally:
                if case == "op":
                    sim.run_simulated = original
        print(case, "-> no error")
    except Exception as exc:
        print(case, "->", type(exc).__name__, exc)
print("process alive")
"""


@simulation_only
def test_errors_in_the_simulated_backward_are_raised_not_fatal(tmp_path: Path) -> None:
    # Run apart: torch would abort the whole process ("terminate called without an active
    # exception") if any of these reached the simulated device's backward thread.
    script = tmp_path / "failing_backwards.py"
    script.write_text(_FAILING_BACKWARDS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "tensor hook -> KeyError 'hook fails'",
        "post-accumulate hook -> KeyError 'hook fails'",
        "unpack hook -> KeyError 'hook fails'",
        "module hook -> KeyError 'hook fails'",
        "op -> ValueError op fails in backward",
        "recompute -> KeyError 'recompute fails'",
        "recompute reentrant -> KeyError 'recompute fails'",
        "process alive",
    ]


# -- indexing and membership ------------------------------------------------------------------
@simulation_only
def test_membership_and_tuple_indexing() -> None:
    with rt.check(syncs="ignore", simulate="always") as report:
        x = torch.arange(6, device="cuda").reshape(2, 3)
        assert 0 in x and 7 not in x
        assert x[(1, 0), :].tolist() == [[3, 4, 5], [0, 1, 2]]
        assert x[:, (2, 0)].device == sim.SIM_DEVICE
    assert report.findings == []


# -- mixed precision ----------------------------------------------------------------------------
def _amp_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4))


@simulation_only
def test_float16_autocast_casts_and_the_scaler_scales_and_skips_on_inf() -> None:
    model = _amp_model()
    with rt.check(model, simulate="always") as report:
        model.cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
        assert scaler.is_enabled()
        x = torch.randn(5, 8, device="cuda")
        y = torch.randint(0, 4, (5,), device="cuda")
        scales, changed = [], []
        for step in range(3):
            with torch.autocast("cuda", dtype=torch.float16):
                assert torch.is_autocast_enabled() and torch.get_autocast_gpu_dtype() == torch.float16
                hidden = model[0](x)
                normed = model[1](hidden)
                out = model(x)
                loss = nn.functional.cross_entropy(out, y)
            assert (hidden.dtype, normed.dtype, out.dtype, loss.dtype) == (
                torch.float16,
                torch.float32,
                torch.float16,
                torch.float32,
            )
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            assert model[0].weight.grad.dtype == torch.float32
            if step == 1:
                model[0].weight.grad.fill_(float("inf"))
            before = model[0].weight.detach().clone()
            scaler.step(optimizer)
            scaler.update()
            scales.append(scaler.get_scale())
            changed.append(not torch.equal(before, model[0].weight))
    assert scales == [1024.0, 512.0, 512.0]
    assert changed == [True, False, True]
    assert [f for f in report.findings if f.code != "DL602"] == []


@simulation_only
def test_bfloat16_autocast_and_the_legacy_spellings() -> None:
    model = _amp_model()
    with rt.check(model, simulate="always"):
        model.cuda()
        assert torch.cuda.amp.GradScaler().is_enabled()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            out = model(torch.randn(2, 8, device="cuda"))
        with torch.cuda.amp.autocast():
            half = model(torch.randn(2, 8, device="cuda"))
    assert (out.dtype, half.dtype) == (torch.bfloat16, torch.float16)


@simulation_only
def test_autocast_refuses_binary_cross_entropy_as_cuda_does() -> None:
    with rt.check(simulate="always"):
        probs = torch.rand(4, device="cuda")
        with torch.autocast("cuda"), pytest.raises(RuntimeError, match="unsafe to autocast"):
            nn.functional.binary_cross_entropy(probs, torch.ones(4, device="cuda"))


@simulation_only
def test_amp_and_cuda_entry_points_are_restored_outside_the_region() -> None:
    originals = (torch.is_autocast_enabled, torch.cuda.is_available, torch.load, torch.Generator)
    with rt.check(simulate="always"):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.accelerator.is_available()
    assert (torch.is_autocast_enabled, torch.cuda.is_available, torch.load, torch.Generator) == originals
    assert not torch.accelerator.is_available() or torch.cuda.is_available()


# -- saving, loading, generators, pinned memory ------------------------------------------------------
@simulation_only
def test_save_then_load_with_map_location_cuda(tmp_path: Path) -> None:
    model = nn.Linear(4, 4)
    path = tmp_path / "model.pt"
    with rt.check(model, simulate="always") as report:
        model.cuda()
        torch.save(model.state_dict(), path)
        state = torch.load(path, map_location="cuda")
        assert {v.device for v in state.values()} == {sim.SIM_DEVICE}
        fresh = nn.Linear(4, 4).cuda()
        fresh.load_state_dict(state)
        assert torch.equal(fresh.weight, model.weight)
        assert next(iter(torch.load(path, map_location=torch.device("cuda", 0)).values())).device == sim.SIM_DEVICE
        assert next(iter(torch.load(path, map_location="cpu").values())).device.type == "cpu"
    assert report.findings == []
    # A plain file: loadable with weights_only, without devicelint.
    assert set(torch.load(path, weights_only=True)) == {"weight", "bias"}


@simulation_only
def test_cuda_generator_draws_reproducibly() -> None:
    with rt.check(simulate="always"):
        draws = []
        for _ in range(2):
            generator = torch.Generator(device="cuda")
            assert isinstance(generator, torch.Generator)
            generator.manual_seed(7)
            draws.append(torch.randn(3, device="cuda", generator=generator))
        assert draws[0].device == sim.SIM_DEVICE and torch.equal(draws[0], draws[1])


@simulation_only
def test_pinned_memory_and_a_pinning_data_loader() -> None:
    model = nn.Linear(4, 2)
    data = torch.utils.data.TensorDataset(torch.randn(8, 4))
    with rt.check(model, simulate="always") as report:
        model.cuda()
        pinned = torch.randn(3).pin_memory()
        assert pinned.is_pinned() and pinned.to("cuda", non_blocking=True).device == sim.SIM_DEVICE
        for (batch,) in torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True):
            assert batch.is_pinned()
            model(batch.cuda(non_blocking=True))
    assert report.findings == []


@simulation_only
def test_code_outside_a_region_behaves_as_on_this_cpu_machine() -> None:
    sim.install()  # what the pytest plugin does at collection
    data = torch.utils.data.TensorDataset(torch.randn(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own "no accelerator" warning
        batches = list(torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True))
    assert len(batches) == 2 and not batches[0][0].is_pinned()
    if not torch.cuda.is_available():
        assert not torch.accelerator.is_available()


# -- findings the user can act on --------------------------------------------------------------
@simulation_only
def test_a_loss_module_off_device_is_named_by_its_class() -> None:
    weight = torch.tensor([1.0, 2.0])
    with rt.check(simulate="always") as report:
        loss_fn = nn.CrossEntropyLoss(weight=weight)
        loss_fn(torch.randn(3, 2, device="cuda"), torch.tensor([0, 1, 0], device="cuda"))  # loss call
    dl604 = [f for f in report.findings if f.code == "DL604"]
    assert [(f.line, f.module_path, f.message) for f in dl604] == [
        (
            _line_of("# loss call"),
            "CrossEntropyLoss",
            "`CrossEntropyLoss.weight` is on cpu, expected vgpu:0; move `CrossEntropyLoss` with `.to(device)` before running it",
        )
    ]


@simulation_only
def test_a_head_replaced_after_the_move_is_said_to_be() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(4, 4)
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.body(x))

    net = Net()
    with rt.check(net, simulate="always") as report:
        net.to("cuda")
        net.fc = nn.Linear(4, 3)  # replaced after the move
        net(torch.randn(2, 4, device="cuda"))
    dl604 = [f for f in report.findings if f.code == "DL604"]
    assert [(f.path, f.line, f.module_path, f.message) for f in dl604] == [
        (
            f"tests/{HERE}" if Path.cwd().joinpath("tests", HERE).exists() else dl604[0].path,
            _line_of("# replaced after the move"),
            "Net.fc",
            "`Net.fc` is on cpu while the rest of `Net` is on vgpu:0: `fc` was replaced after the model was "
            "moved; move the new module too (`.to(device)`), or move the model after replacing it",
        )
    ]


@simulation_only
def test_simulation_unavailable_names_the_op_and_why() -> None:
    with rt.check(simulate="always"):
        x = torch.randn(4, device="cuda")
        with pytest.raises(sim.SimulationUnavailable) as caught:
            torch._fused_dropout(x, 0.5)
    assert str(caught.value).startswith(
        "devicelint's simulated GPU cannot run `aten._fused_dropout`: `aten::_fused_dropout` exists for CUDA "
        "only, and there is no CPU version to run in its place"
    )


# -- Hugging Face models -------------------------------------------------------------------------
def _gpt2(**config: object) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    settings = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, bos_token_id=1, eos_token_id=2)
    settings.update(config)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**settings))


@simulation_only
def test_gpt2_training_step_with_padding_and_no_attention_mask() -> None:
    model = _gpt2(pad_token_id=0)
    with rt.check(model, syncs="error", simulate="always") as report:
        model.to("cuda").train()
        ids = torch.randint(3, 100, (2, 10), device="cuda")
        ids[0, :3] = 0
        model(ids, labels=ids).loss.backward()
        assert model.lm_head.weight.grad.device == sim.SIM_DEVICE
    assert report.errors == []


@simulation_only
def test_gpt2_gradient_checkpointing() -> None:
    model = _gpt2()
    with rt.check(model, syncs="error", simulate="always") as report:
        model.to("cuda").train()
        model.gradient_checkpointing_enable()
        ids = torch.randint(3, 100, (2, 8), device="cuda")
        model(ids, labels=ids).loss.backward()
        assert model.transformer.h[0].attn.c_attn.weight.grad.device == sim.SIM_DEVICE
    assert report.errors == []


@simulation_only
def test_library_syncs_point_at_the_users_call_and_stay_warnings() -> None:
    model = _gpt2(pad_token_id=0)
    with rt.check(model, syncs="error", simulate="always") as report:
        model.to("cuda").eval()
        prompt = torch.randint(3, 100, (2, 4), device="cuda")
        generated = model.generate(prompt, max_new_tokens=4, do_sample=False)  # generate call
    assert generated.shape == (2, 8) and generated.device == sim.SIM_DEVICE
    syncs = [f for f in report.findings if f.code == "DL602"]
    assert syncs and report.errors == []
    for finding in syncs:
        assert (Path(finding.path).name, finding.line, finding.severity) == (
            HERE,
            _line_of("# generate call"),
            "warning",
        )
        assert "(in `transformers` at transformers/" in finding.message
    with rt.check(model, syncs="error", simulate="always", library_syncs=True) as strict:
        model.generate(prompt, max_new_tokens=2, do_sample=False)
    assert strict.errors and all(f.code == "DL602" for f in strict.errors)


@simulation_only
def test_an_attribute_attached_to_a_library_module_points_at_the_users_line() -> None:
    model = _gpt2()
    with rt.check(model, simulate="always") as report:
        model.to("cuda")
        model.transformer.h[0].attn.extra_scale = torch.ones(3)  # attached by the user
        model(torch.randint(3, 100, (1, 5), device="cuda"))
    [finding] = [f for f in report.findings if f.code == "DL605"]
    assert (Path(finding.path).name, finding.line, finding.module_path) == (
        HERE,
        _line_of("# attached by the user"),
        "GPT2LMHeadModel.transformer.h.0.attn",
    )
    assert finding.message.endswith('use `transformer.h.0.attn.register_buffer("extra_scale", ...)` instead')


# -- frameworks that choose the device by asking torch ---------------------------------------------------
class Planted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        position = torch.arange(x.shape[1])  # planted CPU tensor
        return self.fc(x + position)


def _loader() -> torch.utils.data.DataLoader:
    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,)))
    return torch.utils.data.DataLoader(data, batch_size=4)


@simulation_only
def test_accelerate_prepares_onto_the_simulated_gpu() -> None:
    accelerate = pytest.importorskip("accelerate")
    model = Planted()
    with rt.check(model, simulate="always") as report:
        accelerator = accelerate.Accelerator()
        assert accelerator.device.type == "cuda"
        prepared, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), _loader())
        for x, y in loader:
            accelerator.backward(nn.functional.cross_entropy(prepared(x), y))
            optimizer.step()
            optimizer.zero_grad()
        assert next(prepared.parameters()).device == sim.SIM_DEVICE
    assert [(f.code, f.line, f.module_path) for f in report.errors] == [
        ("DL601", _line_of("# planted CPU tensor"), "Planted")
    ]


@simulation_only
def test_lightning_fits_on_the_simulated_gpu() -> None:
    lightning = pytest.importorskip("lightning")

    class LitPlanted(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = Planted()
            self.seen: list[torch.device] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: tuple, index: int) -> torch.Tensor:
            x, y = batch
            self.seen.append(x.device)
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = LitPlanted()
    with rt.check(model, simulate="always") as report, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = lightning.Trainer(
            accelerator="gpu",
            devices=1,
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, _loader())
    assert model.seen == [sim.SIM_DEVICE, sim.SIM_DEVICE]
    assert [(f.code, f.line, f.module_path) for f in report.errors] == [
        ("DL601", _line_of("# planted CPU tensor"), "LitPlanted.net")
    ]


@simulation_only
def test_timm_gradient_checkpointing() -> None:
    try:
        import timm
    except ImportError as exc:  # timm needs torchvision, which PyPI builds for one torch only
        pytest.skip(f"timm is not importable here: {exc}")
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=3
    )
    model.set_grad_checkpointing(True)
    with rt.check(model, syncs="error", simulate="always") as report:
        model.cuda().train()
        model(torch.randn(2, 3, 32, 32, device="cuda")).sum().backward()
    assert report.errors == []


@simulation_only
def test_checkpoint_script_survives_in_a_fresh_process(tmp_path: Path) -> None:
    # The abort used to come at interpreter exit too, after the script's last line.
    script = tmp_path / "ckpt.py"
    script.write_text(
        textwrap.dedent(
            """
        import torch
        from torch import nn
        from torch.utils.checkpoint import checkpoint
        import devicelint.runtime as rt
        layer = nn.Linear(4, 4)
        with rt.check(layer, simulate="always"):
            layer.cuda()
            x = torch.randn(2, 4, device="cuda", requires_grad=True)
            checkpoint(layer, x, use_reentrant=False).sum().backward()
        print(layer.weight.grad.device)
        """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "vgpu:0"), done.stderr[-2000:]


@simulation_only
def test_a_process_exits_cleanly_when_its_last_backward_ran_on_the_simulated_device(tmp_path: Path) -> None:
    # Autograd's device thread frees the last graph (and the context torch hands each backward)
    # after `backward()` returns; with the GIL never handed over (a long switch interval) it used
    # to do so after finalization began and abort the finished process, 3 runs in 5.
    script = tmp_path / "last_backward.py"
    script.write_text(
        textwrap.dedent(
            """
        import sys
        import torch
        from devicelint.runtime import simulate
        simulate.install()
        sys.setswitchinterval(5.0)
        w = simulate.SimTensor(torch.ones(3)).requires_grad_(True)
        (w * w).sum().backward()
        print(w.grad.device)
        """
        )
    )
    for _ in range(3):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stdout.strip()) == (0, "vgpu:0"), done.stderr[-2000:]


# -- recurrent layers and in-place shape changes --------------------------------------------------
@simulation_only
def test_packed_sequences_and_amp_through_an_lstm() -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 5)
    x = torch.randn(6, 3, 4)
    lengths = torch.tensor([6, 4, 2])
    expected, _ = nn.utils.rnn.pad_packed_sequence(lstm(nn.utils.rnn.pack_padded_sequence(x, lengths))[0])
    expected.sum().backward()
    reference = lstm.weight_hh_l0.grad.clone()
    lstm.zero_grad()
    with rt.check(lstm, simulate="always") as report:
        lstm.cuda()
        packed = nn.utils.rnn.pack_padded_sequence(x.cuda(), lengths)  # lengths stay on the CPU, as on a GPU
        got, _ = nn.utils.rnn.pad_packed_sequence(lstm(packed)[0])
        got.sum().backward()
        with torch.autocast("cuda"):
            half, _ = lstm(x.cuda())
    assert report.findings == []
    torch.testing.assert_close(got.cpu(), expected.detach())
    torch.testing.assert_close(lstm.weight_hh_l0.grad.cpu(), reference, atol=1e-5, rtol=1e-4)
    assert half.dtype == torch.float16


@simulation_only
def test_a_cpu_hidden_state_raises_as_cuda_does() -> None:
    lstm = nn.LSTM(4, 5)
    with rt.check(lstm, simulate="always"):
        lstm.cuda()
        with pytest.raises(RuntimeError, match="Input and hidden tensors are not at the same device"):
            lstm(torch.randn(3, 2, 4, device="cuda"), (torch.zeros(1, 2, 5), torch.zeros(1, 2, 5)))


@simulation_only
def test_in_place_shape_changes_keep_the_simulated_tensor_right() -> None:
    with rt.check(simulate="always", syncs="ignore"):
        x = torch.arange(6.0, device="cuda").reshape(2, 3)
        x.transpose_(0, 1)
        assert (x.shape, x.stride()) == ((3, 2), (1, 3))
        assert x.cpu().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
        x.unsqueeze_(0)
        assert x.shape == (1, 3, 2)
        grown = torch.empty(0, device="cuda")
        torch.cat([torch.ones(2, 3, device="cuda")] * 2, out=grown)  # `out=` resizes it
        assert grown.shape == (4, 3) and grown.sum().item() == 12.0
        small = torch.zeros(1, device="cuda")
        with pytest.raises(sim.SimulationUnavailable, match="grew a simulated tensor in place"):
            torch.cat([torch.ones(2, 3, device="cuda")] * 2, out=small)


@simulation_only
def test_a_region_that_fails_to_start_leaves_torch_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    from devicelint.runtime import function_mode

    original = (torch.cuda.is_available, torch.load, torch.__future__.get_swap_module_params_on_conversion())

    def refuse(self: object) -> None:
        raise RuntimeError("mode refused")

    monkeypatch.setattr(function_mode.FunctionMode, "__enter__", refuse)
    with pytest.raises(RuntimeError, match="mode refused"), rt.check(simulate="always"):
        pass
    assert (torch.cuda.is_available, torch.load, torch.__future__.get_swap_module_params_on_conversion()) == original
    monkeypatch.undo()
    with rt.check(simulate="always") as report:  # and the next region starts normally
        torch.ones(2, device="cuda")
    assert report.findings == []
