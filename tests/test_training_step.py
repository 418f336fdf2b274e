"""DL3xx (mixed precision) and DL4xx (host syncs): exact findings on snippets, silence on clean code."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from devicelint.analysis.training.step import training_scopes
from devicelint.analysis.training.values import possible_dtypes
from devicelint.context import FileContext
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def lint(code: str, source: str) -> list[tuple[int, str, str]]:
    rule = find_rule(code)
    assert rule is not None
    result = lint_source(textwrap.dedent(source), "x.py", EngineOptions(rules=(rule,)))
    return [(f.line, f.code, f.message) for f in result.findings]


def fix(code: str, source: str) -> str | None:
    rule = find_rule(code)
    assert rule is not None
    return lint_source(textwrap.dedent(source), "x.py", EngineOptions(rules=(rule,), fix_mode="unsafe")).fixed_source


TRAIN_FP16 = """\
import torch
import torch.nn.functional as F

def train(model, loader, optimizer, device):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast("cuda"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_dl301_default_cuda_dtype_is_float16() -> None:
    assert lint("DL301", TRAIN_FP16) == [
        (
            9,
            "DL301",
            '`loss.backward()` backpropagates a loss computed under `torch.autocast("cuda")`, which runs in '
            "float16 (autocast's default dtype on CUDA), with no `GradScaler`: small gradients underflow to zero and training silently stalls; use "
            '`scaler = torch.amp.GradScaler("cuda")` with `scaler.scale(loss).backward()`, '
            "`scaler.step(optimizer)`, `scaler.update()`, or autocast to `torch.bfloat16`",
        )
    ]


def test_dl301_config_driven_dtype_reports_its_float16_path() -> None:
    source = TRAIN_FP16.replace(
        'with torch.autocast("cuda"):',
        'with torch.autocast("cuda", dtype=amp_dtype):',
    ).replace(
        "    for x, y in loader:",
        "    amp_dtype = torch.float16 if cfg.fp16 else torch.bfloat16\n    for x, y in loader:",
    )
    source = source.replace("def train(model,", "def train(cfg, model,")
    [(line, code, message)] = lint("DL301", source)
    assert (line, code) == (10, "DL301")
    assert "which can run in float16 (one of its dtypes is `torch.float16`)" in message


@pytest.mark.parametrize(
    "change",
    [
        ('torch.autocast("cuda")', 'torch.autocast("cuda", dtype=torch.bfloat16)'),
        ('torch.autocast("cuda")', 'torch.autocast("cpu")'),
        ('torch.autocast("cuda")', 'torch.autocast("cuda", enabled=False)'),
        ('torch.autocast("cuda")', "torch.autocast(device_type, dtype=amp_dtype)"),  # unknown: silent
        ("        loss.backward()\n        optimizer.step()\n", "        print(loss)\n"),  # inference only
        (
            "        loss.backward()\n        optimizer.step()\n",
            "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n",
        ),
    ],
)
def test_dl301_silent(change: tuple[str, str]) -> None:
    source = TRAIN_FP16.replace(*change)
    assert source != TRAIN_FP16
    assert lint("DL301", source) == []


def test_dl301_bfloat16_from_variable_is_silent() -> None:
    source = TRAIN_FP16.replace('torch.autocast("cuda")', 'torch.autocast("cuda", dtype=half)').replace(
        "    for x, y", "    half = torch.bfloat16\n    for x, y"
    )
    assert lint("DL301", source) == []


SCALED = """\
import torch

def train(model, loader, optimizer, device):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x.to(device), y.to(device))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""


@pytest.mark.parametrize("code", ["DL301", "DL302", "DL303", "DL304", "DL305", "DL306", "DL401", "DL402", "DL403"])
def test_canonical_recipe_is_clean(code: str) -> None:
    assert lint(code, SCALED) == []


def test_dl302_plain_step_after_scaled_backward() -> None:
    source = SCALED.replace("scaler.step(optimizer)", "optimizer.step()")
    assert lint("DL302", source) == [
        (
            11,
            "DL302",
            "`optimizer.step()` bypasses the `GradScaler` that scaled the loss: it applies gradients multiplied by "
            "the loss scale (65536 by default) and never skips inf/NaN steps; call `scaler.step(optimizer)` and "
            "then `scaler.update()` instead",
        )
    ]


def test_dl302_second_step() -> None:
    source = SCALED.replace("        scaler.update()\n", "        scaler.update()\n        optimizer.step()\n")
    [(line, code, message)] = lint("DL302", source)
    assert (line, code) == (13, "DL302")
    assert message.startswith("`optimizer.step()` steps `optimizer` again after `scaler.step(optimizer)`")


def test_dl302_silent_on_amp_alternative() -> None:
    source = SCALED.replace(
        "        scaler.step(optimizer)\n",
        "        if use_amp:\n            scaler.step(optimizer)\n        else:\n            optimizer.step()\n",
    )
    assert lint("DL302", source) == []


def test_dl303_update_missing() -> None:
    source = SCALED.replace("        scaler.update()\n", "")
    assert lint("DL303", source) == [
        (
            11,
            "DL303",
            "`scaler.step(optimizer)` is never followed by `scaler.update()`: the loss scale never adapts and "
            "the next `scaler.step` raises; call `scaler.update()` right after `scaler.step(...)` on every step "
            "that steps",
        )
    ]


def test_dl303_update_on_some_steps() -> None:
    source = SCALED.replace("        scaler.update()\n", "        if i % 10 == 0:\n            scaler.update()\n")
    [(line, code, message)] = lint("DL303", source)
    assert (line, code) == (13, "DL303")
    assert "runs only when `i % 10 == 0`" in message


def test_dl304_clip_before_unscale() -> None:
    source = SCALED.replace("        scaler.unscale_(optimizer)\n", "")
    assert lint("DL304", source) == [
        (
            9,
            "DL304",
            "`torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)` clips gradients still multiplied by the "
            "loss scale, so the clip is about 65536 times too strong; call `scaler.unscale_(optimizer)` before it",
        )
    ]


def test_dl305_deprecated_and_fixed() -> None:
    source = """\
    import torch
    scaler = torch.cuda.amp.GradScaler(enabled=True)
    """
    assert lint("DL305", source) == [
        (
            2,
            "DL305",
            '`torch.cuda.amp.GradScaler(...)` is deprecated since torch 2.4; use `torch.amp.GradScaler("cuda", ...)` instead',
        )
    ]
    assert fix("DL305", source) == 'import torch\nscaler = torch.amp.GradScaler("cuda", enabled=True)\n'


def test_dl305_from_import_is_reported_without_fix() -> None:
    source = """\
    from torch.cuda.amp import autocast
    with autocast():
        pass
    """
    assert [(line, code) for line, code, _ in lint("DL305", source)] == [(2, "DL305")]
    assert fix("DL305", source) is None


def test_dl305_silent_on_new_api() -> None:
    assert lint("DL305", 'import torch\nwith torch.amp.autocast("cuda"):\n    pass\n') == []


def test_dl306_backward_inside_autocast() -> None:
    source = SCALED.replace("        scaler.scale(loss).backward()\n", "            scaler.scale(loss).backward()\n")
    assert lint("DL306", source) == [
        (
            8,
            "DL306",
            '`scaler.scale(loss).backward()` runs inside `torch.autocast("cuda")`: PyTorch recommends leaving the '
            "autocast region before the backward pass; dedent the backward (and the optimizer step) out of the "
            "`with` block",
        )
    ]


def test_dl401_item_every_step() -> None:
    source = TRAIN_FP16.replace("        optimizer.zero_grad()\n", "        total += loss.item()\n")
    assert lint("DL401", source) == [
        (
            11,
            "DL401",
            "`loss.item()` copies a device tensor to the host on every training step to accumulate it, which stalls "
            "the GPU until the step's kernels finish; accumulate on the device (`total += loss.detach()`) and call "
            "`.item()` once per log interval (`if step % log_every == 0:`)",
        )
    ]


@pytest.mark.parametrize(
    "line",
    [
        "        if step % 10 == 0:\n            print(loss.item())\n",
        "        lr = optimizer.param_groups[0]['lr']\n        print(lr)\n",
        "        total += loss.detach()\n",
    ],
)
def test_dl401_silent(line: str) -> None:
    source = TRAIN_FP16.replace("        optimizer.zero_grad()\n", line)
    assert lint("DL401", source) == []


def test_dl401_after_loop_is_silent() -> None:
    assert lint("DL401", TRAIN_FP16 + "    print(loss.item())\n") == []


LOADER = """\
from torch.utils.data import DataLoader

def run(dataset, model, device):
    loader = DataLoader(dataset, batch_size=8)
    for x in loader:
        model(x.to(device, non_blocking=True))
"""


def test_dl402_unpinned_loader() -> None:
    assert lint("DL402", LOADER) == [
        (
            6,
            "DL402",
            "`x.to(device, non_blocking=True)` asks for an asynchronous copy, but `loader` is a `DataLoader` "
            "without `pin_memory=True`, so the copy from pageable memory is synchronous anyway; pass "
            "`pin_memory=True` to the `DataLoader`",
        )
    ]


def test_dl402_pinned_is_silent() -> None:
    assert lint("DL402", LOADER.replace("batch_size=8", "batch_size=8, pin_memory=True")) == []
    assert lint("DL402", LOADER.replace("x.to(", "x.pin_memory().to(")) == []


def test_dl403_create_then_move_and_fix() -> None:
    source = "import torch\nmask = torch.ones(4, 4).to(device)\n"
    assert lint("DL403", source) == [
        (
            2,
            "DL403",
            "`torch.ones(4, 4).to(device)` allocates the tensor on the CPU and then copies it to the device; "
            "create it there with `torch.ones(..., device=device)`",
        )
    ]
    assert fix("DL403", source) == "import torch\nmask = torch.ones(4, 4, device=device)\n"
    assert lint("DL403", "import torch\nx = torch.ones(4).to(torch.float16)\n") == []


def test_dl403_is_off_by_default() -> None:
    rule = find_rule("DL403")
    assert rule is not None and rule.default_enabled is False and rule.severity == "warning"


def _ctx(source: str) -> FileContext:
    source = textwrap.dedent(source)
    return FileContext(path="x.py", source=source, module=cst.parse_module(source))


def test_possible_dtypes_follow_names_conditionals_and_dicts() -> None:
    ctx = _ctx("""\
    import torch
    dtype = "bfloat16" if fast else "float16"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    half = torch.half
    mixed = half if a else cfg.dtype
    """)
    names = {n.value: n for n in ctx.index.of_type(cst.Name)}
    assert possible_dtypes(ctx, names["ptdtype"], ctx.module) == {"float32", "bfloat16", "float16"}
    assert possible_dtypes(ctx, names["half"], ctx.module) == {"float16"}
    assert possible_dtypes(ctx, names["mixed"], ctx.module) == {"float16", "?"}


def test_training_scope_records_the_step_in_order() -> None:
    ctx = _ctx(SCALED)
    [scope] = training_scopes(ctx)
    assert isinstance(scope.node, cst.FunctionDef)
    assert sorted(scope.scaler_calls) == ["scale", "step", "unscale_", "update"]
    assert len(scope.backwards) == 1 and len(scope.clips) == 1 and len(scope.autocasts) == 1
    assert scope.autocasts[0].dtypes == {"float16"} and scope.autocasts[0].devices == {"cuda"}


def test_dl303_other_scaler_kinds_are_left_alone() -> None:
    source = """\
    import torch

    def train(model, loader, optimizer, warmup_scaler):
        for x in loader:
            loss = model(x.cuda())
            loss.backward()
            optimizer.step()
            warmup_scaler.step(optimizer)
    """
    assert lint("DL303", source) == []
    assert lint("DL302", source) == []


def test_dl401_host_values_read_only_to_be_moved_stay_host_values() -> None:
    source = (
        TRAIN_FP16.replace("        x, y = x.to(device), y.to(device)\n", "")
        .replace("F.cross_entropy(model(x), y)", "F.cross_entropy(model(x.to(device)), y.to(device))")
        .replace("        optimizer.zero_grad()\n", "        seen.extend(y.tolist())\n        total += loss.item()\n")
    )
    assert [(line, code) for line, code, _ in lint("DL401", source)] == [(11, "DL401")]


def test_dl301_explicit_float16_on_a_device_parameter() -> None:
    source = TRAIN_FP16.replace(
        'torch.autocast("cuda")', "torch.autocast(device_type=device.type, dtype=torch.float16)"
    )
    assert [(line, code) for line, code, _ in lint("DL301", source)] == [(9, "DL301")]
    # No dtype: float16 whenever the device is CUDA, which a training script is written for.
    no_dtype = TRAIN_FP16.replace('torch.autocast("cuda")', "torch.autocast(device_type=device.type)")
    assert [(line, code) for line, code, _ in lint("DL301", no_dtype)] == [(9, "DL301")]


def test_frameworks_that_scale_for_you_are_silent() -> None:
    source = """\
    import torch

    def train(accelerator, model, loader, optimizer):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x, y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            print(loss.item())
    """
    for code in ("DL301", "DL302", "DL303", "DL304", "DL306"):
        assert lint(code, source) == [], code
    # The framework backward still makes this a training loop with a per-step host read.
    assert [(line, code) for line, code, _ in lint("DL401", source)] == [(11, "DL401")]


def test_dl403_fix_keeps_comments_on_their_lines() -> None:
    source = "import torch\nmask = torch.ones(\n    4,  # rows\n).to(device)\n"
    assert [(line, code) for line, code, _ in lint("DL403", source)] == [(2, "DL403")]
    assert fix("DL403", source) == "import torch\nmask = torch.ones(\n    4,  # rows\n    device=device,\n)\n"
    # A comment between the last argument and the closing bracket: no edit keeps it readable.
    assert fix("DL403", "import torch\nm = torch.ones(4  # rows\n).to(device)\n") is None


def test_dl305_fix_keeps_multiline_arguments_valid() -> None:
    source = "import torch\nwith torch.cuda.amp.autocast(\n    dtype=torch.bfloat16,  # fast\n):\n    pass\n"
    fixed = fix("DL305", source)
    assert fixed is not None and 'torch.amp.autocast("cuda", dtype=torch.bfloat16,  # fast\n)' in fixed
    cst.parse_module(fixed)


def test_dl301_self_attribute_dtype_is_read_where_it_was_assigned() -> None:
    source = """\
    import torch

    class Trainer:
        def __init__(self, amp_dtype, half_dtype=torch.float16):
            self.amp_dtype = amp_dtype
            self.half = torch.float16

        def train(self, model, loader, optimizer):
            amp_dtype = torch.float16  # a local of the same name, not the attribute
            for x in loader:
                with torch.autocast("cuda", dtype=self.amp_dtype):
                    loss = model(x.cuda())
                loss.backward()
                optimizer.step()
    """
    assert lint("DL301", source) == []
    assert [(line, code) for line, code, _ in lint("DL301", source.replace("self.amp_dtype)", "self.half)"))] == [
        (13, "DL301")
    ]


@pytest.mark.parametrize(
    ("statement", "purpose"),
    [
        ("        total += loss.item()\n", "to accumulate it"),
        ("        history.append(loss.item())\n", "to accumulate it"),
        ("        stats['loss'] = loss.item()\n", "to keep it for a later log"),
        ("        pbar.set_postfix(loss=loss.item())\n", "to print or log it"),
        ("        value = loss.item()\n        print(f'{value:.3f}')\n", "to print or log it"),
        ("        if loss > 100:\n            lr = lr / 2\n", "to decide a branch"),
        (
            "        current = loss.item()\n        if abs(current - prev) < 1e-4:\n            break\n        prev = current\n",
            "to decide a branch",
        ),
    ],
)
def test_dl401_message_says_why_the_value_is_read(statement: str, purpose: str) -> None:
    source = TRAIN_FP16.replace("        optimizer.zero_grad()\n", statement)
    [(_, code, message)] = lint("DL401", source)
    assert code == "DL401" and f"on every training step {purpose}," in message


def test_dl401_step_function_returning_item_and_keyword_only_backward() -> None:
    source = """\
    import torch.nn.functional as F

    def train_step(model, x, y, optimizer):
        loss = F.cross_entropy(model(x), y)
        loss.backward(retain_graph=False)
        optimizer.step()
        return loss.item()
    """
    [(line, code, message)] = lint("DL401", source)
    assert (line, code) == (7, "DL401")
    assert "returns it from a function that runs once per training step" in message


def test_dl401_one_finding_per_statement() -> None:
    source = TRAIN_FP16.replace(
        "        optimizer.zero_grad()\n", "        print(loss.item(), loss.float().item(), float(loss))\n"
    )
    assert [(line, code) for line, code, _ in lint("DL401", source)] == [(11, "DL401")]


GRADIENT_CHECK = """\
import torch


class TestCompile:
    def test_losses_go_down(self):
        model = torch.nn.Linear(3, 1).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(4):
            loss = model(torch.rand(8, 3, device="cuda")).pow(2).mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0]
"""


@pytest.mark.parametrize(
    ("path", "source", "lines"),
    [
        ("tests/test_compile.py", GRADIENT_CHECK, []),
        ("pkg/compile_test.py", GRADIENT_CHECK, []),
        ("pkg/compile.py", GRADIENT_CHECK, [13]),
        # a check script named as a test runs once, defining no test functions
        ("pkg/bottleneck/test.py", GRADIENT_CHECK.replace("def test_losses_go_down", "def losses_go_down"), []),
        # a training script kept under tests/, defining no tests, is still training
        ("tests/train_tp.py", GRADIENT_CHECK.replace("def test_losses_go_down", "def losses_go_down"), [13]),
    ],
)
def test_a_test_modules_loops_are_checks_not_training(path: str, source: str, lines: list[int]) -> None:
    rule = find_rule("DL401")
    assert rule is not None
    result = lint_source(source, path, EngineOptions(rules=(rule,)))
    assert [f.line for f in result.findings] == lines


WARMUP_BY_STEP = """\
import torch


def train(model, loader, optimizer, device, epochs, warmup):
    best = 0
    for epoch in range(best, epochs):
        for i, (x, y) in enumerate(loader):
            step = i + epoch * len(loader)
            if step <= warmup:
                optimizer.param_groups[0]["lr"] = 0.1 * step / warmup
            loss = model(x.to(device), y.to(device)).sum()
            loss.backward()
            optimizer.step()
            best = loss.detach()
"""


def test_range_and_enumerate_indices_are_python_ints() -> None:
    # `epoch` iterates `range(best, ...)` and `i` is enumerate's index: ints, whatever `best` and
    # the batches later hold, so the warm-up test reads no device value.
    assert lint("DL401", WARMUP_BY_STEP) == []
    tensor_bound = WARMUP_BY_STEP.replace("for epoch in range(best, epochs):", "for epoch in best:")
    assert [line for line, _, _ in lint("DL401", tensor_bound)] == [9]


SHADOWED_BY_COMPREHENSION = """\
import torch


def train(model, loader, optimizer, device, sizes, warmup, log):
    for step, (images, labels) in enumerate(loader):
        size, test_size = [max(x, 32) for x in sizes]
        if size <= warmup:
            optimizer.param_groups[0]["lr"] = 0.1
        loss = model(images.to(device), labels.to(device)).sum()
        loss.backward()
        optimizer.step()
        for x, tag in zip([loss.detach()], ["loss"]):
            log(tag, x)
        values = [v.item() for v in (loss, loss * 2)]
"""


def test_a_comprehension_variable_is_its_own_name() -> None:
    # `x` in `[max(x, 32) for x in sizes]` is not the loop's device `x`: `size` is a number,
    # while `v.item()` on the comprehension's device values is still a sync.
    assert [line for line, _, _ in lint("DL401", SHADOWED_BY_COMPREHENSION)] == [14]


AMP_OR_FULL = """\
import torch


def train_one_epoch(model, criterion, loader, optimizer, loss_scaler, use_amp, device):
    for samples, targets in loader:
        samples, targets = samples.to(device), targets.to(device)
        if use_amp:
            with torch.autocast("cuda"):
                loss = criterion(model(samples), targets)
        else:
            loss = criterion(model(samples), targets)
        if use_amp:
            loss_scaler(loss, optimizer)
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
"""


def test_a_backward_in_the_else_of_the_autocast_test_never_sees_an_autocast_loss() -> None:
    # `if use_amp: with autocast(): loss = ...` and, under the same test, `else: loss.backward()`:
    # the plain backward only runs on the full-precision path.
    assert lint("DL301", AMP_OR_FULL) == []
    other_test = AMP_OR_FULL.replace(
        "        if use_amp:\n            loss_scaler", "        if scaled:\n            loss_scaler"
    )
    other_test = other_test.replace("use_amp, device", "use_amp, device, scaled=True")
    assert [line for line, _, _ in lint("DL301", other_test)] == [15]
