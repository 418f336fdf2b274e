"""Engine shapes of issue 23, each on code written apart from the re-created bugs: the shape is
found under other names and containers, and the one-fix twin is clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "models/head.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


def _messages(source: str) -> list[str]:
    return [f.message for f in lint_source(textwrap.dedent(source), "models/head.py", DEFAULT).findings]


# -- a parameter that no call passes holds its default ------------------------------------------

DEFAULTS = """
    import torch
    import torch.nn as nn


    def ramp(length, device=torch.device("cpu")):
        return torch.arange(length, device=device).float()


    class AnchorHead(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.sizes = sizes
            self.proj = nn.Linear(4, 4)
            self.table = self._build_table(len(sizes))

        def _build_table(self, count, dtype=torch.float32, device="cpu"):
            rows = []
            for i in range(count):
                rows.append(torch.full((2,), float(self.sizes[i]), dtype=dtype, device=device))
            return rows

        def forward(self, x, level):
            anchors = self.table[level].expand(x.shape[0], 2)
            return self.proj(torch.cat([x[:, :2], anchors], dim=1)) + ramp(x.shape[1])
"""


def test_left_out_device_defaults_place_a_helper_s_tensors_on_the_cpu() -> None:
    assert _found(DEFAULTS) == [(7, "DL101"), (15, "DL102")]
    assert _messages(DEFAULTS)[1].startswith("`self.table` keeps tensors in a plain list")


def test_defaults_twin_that_passes_the_device_and_moves_at_use_is_clean() -> None:
    fixed = DEFAULTS.replace("ramp(x.shape[1])", "ramp(x.shape[1], device=x.device)").replace(
        "self.table[level].expand", "self.table[level].to(x.device).expand"
    )
    assert _found(fixed) == []


def test_a_default_some_call_overrides_says_nothing() -> None:
    # `_build_table` is also called with the input's device: its default is not its only value
    overridden = DEFAULTS.replace(
        "anchors = self.table[level].expand(x.shape[0], 2)",
        "anchors = self._build_table(len(self.sizes), device=x.device)[level].expand(x.shape[0], 2)",
    ).replace("ramp(x.shape[1])", "ramp(x.shape[1], x.device)")
    assert _found(overridden) == []


# -- a class deriving from a library model is a module; its inherited stages moved by hand -------

SPLIT_VGG = """
    import torch
    import torch.nn as nn
    import torchvision


    class TwoCardVGG(torchvision.models.VGG):
        def __init__(self, features):
            super().__init__(features, num_classes=10)
            self.features.to("cuda:0")
            self.classifier.to("cuda:1")

        def forward(self, images):
            h = torch.flatten(self.avgpool(self.features(images)), 1)
            return self.classifier(h.to("cuda:1"))


    def fit_step(net, batch, targets, criterion):
        logits = net(batch.to("cuda:0"))
        return criterion(logits, targets.to("cuda:0"))


    def run(make_features, batches):
        vgg = TwoCardVGG(make_features())
        for batch, targets in batches:
            fit_step(vgg, batch, targets, nn.CrossEntropyLoss())
"""


def test_inherited_stage_moved_by_hand_places_a_library_subclass_output() -> None:
    assert _found(SPLIT_VGG) == [(20, "DL208")]
    assert _messages(SPLIT_VGG) == [
        '`targets.to("cuda:0")` is on cuda:0 but `logits` is on cuda:1; move it with `targets.to("cuda:1")` first'
    ]


def test_split_library_subclass_twin_with_targets_on_the_last_stage_is_clean() -> None:
    assert _found(SPLIT_VGG.replace('targets.to("cuda:0")', 'targets.to("cuda:1")')) == []


def test_split_model_whose_output_the_file_does_not_show_is_on_no_stated_device() -> None:
    # the stages sit on two cards and the head is inherited, never moved here: the output's
    # device is unknown, not the input's
    assert (
        _found("""
            import torch.nn as nn
            from torchvision.models.resnet import Bottleneck, ResNet


            class Split(ResNet):
                def __init__(self):
                    super().__init__(Bottleneck, [3, 4, 6, 3])
                    self.front = nn.Sequential(self.conv1, self.layer1).to("cuda:0")
                    self.back = nn.Sequential(self.layer4, self.avgpool).to("cuda:1")

                def forward(self, x):
                    return self.fc(self.back(self.front(x).to("cuda:1")).flatten(1))


            def step(net, x, y, loss_fn):
                return loss_fn(net(x.to("cuda:0")), y.to("cuda:1"))


            def main(batches):
                net = Split()
                for x, y in batches:
                    step(net, x, y, nn.CrossEntropyLoss())
        """)
        == []
    )


# -- a class's own movers: any method that moves its attributes in place, and copies ------------

SAMPLE = """
    import torch


    class PointSample:
        def __init__(self, points: torch.Tensor, labels: torch.Tensor):
            self.points = points
            self.labels = labels
            self.weights = torch.ones(len(labels))

        def to_device(self, device):
            self.points = self.points.to(device)
            self.labels = self.labels.to(device)
            return self


    class Ragged:
        def __init__(self, values: torch.Tensor, lengths: torch.Tensor):
            self.values = values
            self.lengths = lengths

        def cuda(self):
            return type(self)(self.values.cuda(), self.lengths)
"""


def test_a_mover_of_any_name_and_a_copying_mover_forget_a_tensor() -> None:
    assert _found(SAMPLE) == [(9, "DL112"), (23, "DL112")]
    assert _messages(SAMPLE) == [
        "`self.weights` holds a tensor that `PointSample.to_device()` does not move (it moves `self.labels`), so "
        "it stays on the CPU; move `self.weights` in `to_device()` as well",
        "`Ragged.cuda()` hands `self.lengths` unmoved to the copy it builds (it moves `self.values`), so the copy "
        "keeps that tensor on the CPU; move `self.lengths` in `cuda()` as well",
    ]


def test_movers_twin_that_moves_every_tensor_is_clean() -> None:
    fixed = SAMPLE.replace(
        "            return self\n", "            self.weights = self.weights.to(device)\n            return self\n"
    ).replace("self.lengths)", "self.lengths.cuda())")
    assert _found(fixed) == []


def test_a_method_that_moves_one_attribute_is_no_mover() -> None:
    one = SAMPLE.replace("            self.labels = self.labels.to(device)\n", "")
    assert (9, "DL112") not in _found(one)


# -- a model from a builder of another package, loaded with weights, is on the CPU --------------

RESTORED = """
    import torch
    from segnets.zoo import make_unet


    def restore(path, depth):
        net = make_unet(depth=depth.levels, classes=3)
        net.load_state_dict(torch.load(path, map_location="cpu")["weights"])
        return net.eval()


    def segment(path, images, opts):
        net = restore(path, opts)
        masks = []
        for image in images:
            masks.append(net(image.cuda()).argmax(1))
        return masks
"""


def test_a_loaded_model_from_another_package_s_builder_is_never_moved() -> None:
    assert _found(RESTORED) == [(16, "DL117")]
    assert _messages(RESTORED) == [
        "`net` is built on the CPU by `make_unet(...)` and never moved, but is called with `image.cuda()`, "
        'which is on the device; move the model first: `net.to("cuda")`'
    ]


def test_restored_twins_moved_or_built_from_settings_are_clean() -> None:
    assert _found(RESTORED.replace("net = restore(path, opts)", "net = restore(path, opts).cuda()")) == []
    # the builder is handed a whole settings object or a device: it may place the model itself
    assert _found(RESTORED.replace("make_unet(depth=depth.levels, classes=3)", "make_unet(depth)")) == []
    assert _found(RESTORED.replace("classes=3)", "classes=3, gpu=depth.gpu)")) == []


def test_a_class_of_another_package_may_place_its_own_stages() -> None:
    # `SegNet.__init__` may put its halves on two cards: a class built elsewhere is not trusted
    source = RESTORED.replace("from segnets.zoo import make_unet", "from segnets.zoo import SegNet").replace(
        "make_unet(", "SegNet("
    )
    assert _found(source) == []


# -- a default device the function sets itself places its later factories ----------------------

DEFAULT_SET_HERE = """
    import numpy as np
    import torch


    def render(offsets: np.ndarray, steps: int):
        torch.set_default_tensor_type(torch.cuda.FloatTensor)
        grid = torch.linspace(0, 1, steps)
        shifted = grid + torch.from_numpy(offsets)
        return shifted.sum()
"""


def test_a_factory_after_the_function_s_own_default_device_meets_from_numpy() -> None:
    assert _found(DEFAULT_SET_HERE) == [(9, "DL101")]


def test_default_set_here_twin_that_copies_onto_the_default_device_is_clean() -> None:
    assert _found(DEFAULT_SET_HERE.replace("torch.from_numpy(offsets)", "torch.as_tensor(offsets)")) == []


# -- values through list(...), indexes past what the code shows, and *args ----------------------

ROWS_AND_STARS = """
    import torch


    def pick_row(x, k, device):
        rows = list(torch.randn(8, 4))
        x = x.to(device)
        return x @ rows[3]


    def concat(*parts):
        return torch.cat(parts, dim=0)


    def pad_batch(x, width, device):
        filler = torch.zeros(width, x.shape[1])
        return concat(x.to(device), filler)
"""


def test_rows_of_a_cpu_tensor_and_a_star_parameter_keep_their_places() -> None:
    assert _found(ROWS_AND_STARS) == [(6, "DL101"), (16, "DL101")]


def test_rows_and_stars_twin_on_one_device_is_clean() -> None:
    fixed = ROWS_AND_STARS.replace("torch.randn(8, 4)", "torch.randn(8, 4, device=device)").replace(
        "torch.zeros(width, x.shape[1])", "torch.zeros(width, x.shape[1], device=device)"
    )
    assert _found(fixed) == []


# -- an optimizer's own step(): its groups' params are the model's, its kept state is where made --

OPTIMIZER = """
    import torch


    class SignMomentum(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-4, beta=0.9):
            params = list(params)
            super().__init__(params, {"lr": lr, "beta": beta})
            self.averages = [torch.zeros(tuple(p.shape)) for p in params]

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for i, p in enumerate(group["params"]):
                    update = self.averages[i].lerp(p.grad, 1 - group["beta"])
                    p.add_(update.sign(), alpha=-group["lr"])
"""


def test_state_an_optimizer_keeps_on_the_cpu_meets_the_gradients_in_its_own_step() -> None:
    assert _found(OPTIMIZER) == [(9, "DL101")]


def test_optimizer_twin_with_state_like_its_params_is_clean() -> None:
    assert _found(OPTIMIZER.replace("torch.zeros(tuple(p.shape))", "torch.zeros_like(p)")) == []


def test_optimizer_state_moved_in_step_is_no_longer_init_s() -> None:
    moved = OPTIMIZER.replace(
        "            for group in self.param_groups:\n",
        "            self.averages = [a.to(self.param_groups[0]['params'][0].device) for a in self.averages]\n"
        "            for group in self.param_groups:\n",
    )
    assert _found(moved) == []


# -- submodules built by a helper of the file, or on one branch of a conditional -----------------

FUSED = """
    import torch
    import torch.nn as nn


    def norm_act(channels):
        return nn.Sequential(nn.BatchNorm1d(channels), nn.ReLU())


    class Residual(nn.Module):
        def __init__(self, channels, use_skip_norm=True):
            super().__init__()
            self.body = norm_act(channels)
            self.skip_norm = nn.BatchNorm1d(channels) if use_skip_norm else None

        def forward(self, x):
            return self.body(x) + (x if self.skip_norm is None else self.skip_norm(x))

        def fused_scale(self):
            norm = self.skip_norm
            identity = torch.eye(norm.num_features)
            return identity * (norm.weight / (norm.running_var + norm.eps).sqrt())
"""


def test_a_submodule_from_a_helper_or_a_conditional_lives_on_the_model_s_device() -> None:
    assert _found(FUSED) == [(21, "DL101")]


def test_fused_twin_that_builds_on_the_norm_s_device_is_clean() -> None:
    assert (
        _found(FUSED.replace("torch.eye(norm.num_features)", "torch.eye(norm.num_features, device=norm.weight.device)"))
        == []
    )


# -- writes into a list change its facts ---------------------------------------------------------

SLOTS = """
    import torch


    def unroll(cell, x, device, steps):
        outputs = [None] * steps
        x = x.to(device)
        for t in range(steps):
            outputs[t] = x * t
        first = [torch.zeros(4), None]
        first[1] = outputs[0]
        return torch.stack(outputs) + torch.ones(steps, 1, 1), first[0] * first[1]
"""


def test_slots_filled_in_a_loop_and_a_written_position_keep_what_was_written() -> None:
    assert _found(SLOTS) == [(10, "DL101"), (12, "DL101")]


def test_slots_twin_on_one_device_is_clean() -> None:
    fixed = SLOTS.replace("torch.zeros(4)", "torch.zeros(4, device=device)").replace(
        "torch.ones(steps, 1, 1)", "torch.ones(steps, 1, 1, device=device)"
    )
    assert _found(fixed) == []


# -- a LightningModule's own device while it is built is the CPU ---------------------------------

LIGHTNING_INIT = """
    import torch
    import torch.nn as nn
    import pytorch_lightning as pl


    class Denoiser(pl.LightningModule):
        def __init__(self, steps=1000):
            super().__init__()
            self.net = nn.Linear(16, 16)
            self.betas = torch.linspace(1e-4, 0.02, steps, device=self.device)

        def training_step(self, batch, batch_idx):
            t = torch.randint(0, len(self.betas), (batch.shape[0],), device=self.device)
            noise = torch.randn_like(batch)
            noisy = batch + self.betas[t].sqrt()[:, None] * noise
            return ((self.net(noisy) - noise) ** 2).mean()
"""


def test_a_table_built_on_self_device_in_a_lightning_init_stays_on_the_cpu() -> None:
    assert _found(LIGHTNING_INIT) == [(11, "DL102"), (16, "DL116")]


def test_lightning_init_twin_with_a_buffer_is_clean() -> None:
    fixed = LIGHTNING_INIT.replace(
        "self.betas = torch.linspace(1e-4, 0.02, steps, device=self.device)",
        'self.register_buffer("betas", torch.linspace(1e-4, 0.02, steps))',
    )
    assert _found(fixed) == []


# -- a parameter annotated with a plain class of the file is an instance of it ------------------

ANNOTATED = """
    import torch


    class Smoother:
        def __init__(self, width=3):
            self.width = width

        def apply(self, signal):
            kernel = torch.ones(1, 1, self.width) / self.width
            return torch.nn.functional.conv1d(signal, kernel, padding=self.width // 2)


    def denoise(smoother: Smoother, signal, device):
        return smoother.apply(signal.to(device))
"""


def test_a_method_of_an_annotated_instance_is_followed_with_the_caller_s_device() -> None:
    assert _found(ANNOTATED) == [(10, "DL101")]
    assert _messages(ANNOTATED) == [
        "`torch.ones(...)` creates a CPU tensor in `apply` that meets the device tensor `signal` in "
        "`torch.nn.functional.conv1d(signal, ke...`; pass `device=signal.device`"
    ]


def test_annotated_twin_that_builds_on_the_signal_s_device_is_clean() -> None:
    fixed = ANNOTATED.replace("torch.ones(1, 1, self.width)", "torch.ones(1, 1, self.width, device=signal.device)")
    assert _found(fixed) == []


# -- a comprehension's loop variable is what a `for` loop gives ----------------------------------

COMPREHENSION = """
    import torch
    import torch.nn as nn


    def score_chunks(device, count):
        head = nn.Linear(8, 2).to(device)
        chunks = [torch.randn(4, 8) for _ in range(count)]
        return [head(chunk).softmax(-1) for chunk in chunks]
"""


def test_elements_fed_to_a_moved_module_in_a_comprehension_keep_their_place() -> None:
    assert _found(COMPREHENSION) == [(8, "DL101")]


def test_comprehension_twin_that_moves_each_chunk_is_clean() -> None:
    assert _found(COMPREHENSION.replace("head(chunk)", "head(chunk.to(device))")) == []


# -- a name that only contains a device word is not a device guard -----------------------------

GUARDED_BY_NAME = """
    import torch
    import torch.nn as nn


    class Scorer(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, inputs, timestamps=None):
            out = self.proj(inputs)
            if timestamps is None:
                timestamps = torch.arange(inputs.size(1))
            return out + timestamps
"""


def test_names_holding_npu_or_mps_are_not_device_guards() -> None:
    # `inputs` holds "npu" and `timestamps` "mps"; neither makes the `if` a device test
    assert _found(GUARDED_BY_NAME) == [(14, "DL101")]


def test_a_real_device_guard_still_silences() -> None:
    assert _found(GUARDED_BY_NAME.replace("if timestamps is None:", "if not inputs.is_cuda:")) == []


# -- a factory that copies another tensor's device is not where a CPU tensor comes from ----------

COPIED_DEVICE = """
    import torch
    import torch.nn as nn


    def pad_rows(t, rows):
        if t.shape[0] == 0:
            return torch.zeros(rows, t.shape[1])
        return torch.nn.functional.pad(t, (0, 0, 0, rows - t.shape[0]))


    class Pooler(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, h):
            h = pad_rows(h, 16)
            scratch = torch.empty(h.shape, dtype=h.dtype, device=h.device)
            return self.proj(scratch)
"""


def test_a_cpu_tensor_is_reported_where_it_is_made_not_where_its_device_is_copied() -> None:
    # `torch.empty(..., device=h.device)` follows `h`; the CPU tensor comes from the helper's
    # `torch.zeros` without `device=`, and that is the line to fix.
    assert _found(COPIED_DEVICE) == [(8, "DL101")]


def test_copied_device_twin_with_the_helper_fixed_is_clean() -> None:
    fixed = COPIED_DEVICE.replace("torch.zeros(rows, t.shape[1])", "torch.zeros(rows, t.shape[1], device=t.device)")
    assert _found(fixed) == []


# -- a placeholder that a same-test `if` replaced before the same test reads it -------------------

SAME_TEST = """
    import torch
    import torch.nn as nn


    class TokenPool(nn.Module):
        def __init__(self, pool, keep_token, mix):
            super().__init__()
            self.pool = pool
            self.keep_token = keep_token
            self.mix = mix

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            token = torch.zeros(())
            if self.keep_token:
                token, x = x[:, :1], x[:, 1:]
            x = self.pool(x)
            if self.keep_token:
                x = torch.cat((token, x), dim=1)
            return x

        def pooled_or_plain(self, x: torch.Tensor) -> torch.Tensor:
            head = torch.tensor(0.0)
            if not self.keep_token:
                pass
            else:
                head = x[:, :1]
                x = x[:, 1:]
            x = self.pool(x)
            if not self.keep_token:
                return x
            return torch.cat([head, x], dim=1)

        def chained(self, x: torch.Tensor) -> torch.Tensor:
            head = torch.tensor(0.0)
            if self.keep_token:
                head = x[:, :1]
            x = self.pool(x)
            if self.mix:
                x = x * 2
            elif self.keep_token:
                x = torch.cat([head, x], dim=1)
            return x

        def other_test(self, x: torch.Tensor) -> torch.Tensor:
            token = torch.zeros(())
            if self.keep_token:
                token, x = x[:, :1], x[:, 1:]
            if self.mix:
                x = torch.cat((token, x), dim=1)
            return x
"""


def test_a_placeholder_replaced_under_the_same_test_meets_device_tensors_only_as_the_replacement() -> None:
    # `if not t: return`, `if not t: ... else:` and `elif t:` read the same test; a different
    # test (`self.mix`) may take the placeholder itself
    assert _found(SAME_TEST) == [(46, "DL101")]


def test_a_rebound_test_name_or_a_split_inside_another_branch_says_nothing() -> None:
    rebound = """
        import torch
        import torch.nn as nn


        class Pool(nn.Module):
            def __init__(self, keep, other):
                super().__init__()
                self.keep = keep
                self.other = other

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                token = torch.zeros(())
                flag = self.keep
                if flag:
                    token = x[:, :1]
                flag = self.other
                if flag:
                    x = torch.cat((token, x), dim=1)
                return x

            def nested(self, x: torch.Tensor) -> torch.Tensor:
                token = torch.zeros(())
                if self.other:
                    if self.keep:
                        token = x[:, :1]
                if self.keep:
                    x = torch.cat((token, x), dim=1)
                return x
    """
    assert _found(rebound) == [(13, "DL101"), (23, "DL101")]


# -- a module class the file only builds as a step of a sample pipeline -------------------------

PIPELINE_MODULES = """
    import torch
    import torch.nn as nn
    from torchvision import transforms as T


    class SplitRates(nn.Module):
        def __init__(self, step=4):
            super(SplitRates, self).__init__()
            self.step = step

        def forward(self, clip: torch.Tensor):
            picks = torch.arange(0, clip.shape[1], self.step)
            return [clip.index_select(1, picks), clip]


    class Jitter(nn.Module):
        def forward(self, clip: torch.Tensor):
            return clip + torch.randn(clip.shape) * 0.01


    prepare = T.Compose([T.Lambda(lambda c: c / 255.0), SplitRates(step=8)])
    augment = T.RandomApply([Jitter()], p=0.5)


    def run(model, clip, device):
        views = prepare(augment(clip))
        return model([v.to(device)[None] for v in views])
"""


def test_a_module_built_only_as_a_composed_transform_runs_on_host_tensors() -> None:
    assert _found(PIPELINE_MODULES) == []


def test_a_transform_module_bound_to_a_name_counts_where_the_name_is_only_a_step() -> None:
    named = PIPELINE_MODULES.replace(
        "prepare = T.Compose([T.Lambda(lambda c: c / 255.0), SplitRates(step=8)])",
        "split = SplitRates(step=8)\n    prepare = T.Compose([T.Lambda(lambda c: c / 255.0), split])",
    )
    assert _found(named) == []
    also_called = named.replace("views = prepare(augment(clip))", "views = split(clip.cuda())")
    assert _found(also_called) == [(13, "DL101")]


def test_a_transform_module_that_is_also_a_submodule_or_moved_is_device_code() -> None:
    nested = (
        PIPELINE_MODULES
        + """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.split = SplitRates()

        def forward(self, x):
            return self.split(x)
    """
    )
    assert _found(nested) == [(13, "DL101")]
    moved = PIPELINE_MODULES.replace(
        "augment = T.RandomApply([Jitter()], p=0.5)", "augment = T.RandomApply([Jitter()], p=0.5).to('cuda')"
    )
    assert _found(moved) == [(19, "DL101")]


def test_a_test_re_bound_in_a_loop_or_a_handler_before_the_if_says_nothing() -> None:
    later = """
        import torch
        import torch.nn as nn


        class Pool(nn.Module):
            def __init__(self, keep):
                super().__init__()
                self.keep = keep

            def forward(self, x: torch.Tensor, rounds: int) -> torch.Tensor:
                token = torch.zeros(())
                flag = self.keep
                if flag:
                    token = x[:, :1]
                for _ in range(rounds):
                    if flag:
                        x = torch.cat((token, x), dim=1)
                    flag = not flag
                return x

            def guarded(self, x: torch.Tensor) -> torch.Tensor:
                token = torch.zeros(())
                try:
                    x = x * 2
                    if self.keep:
                        token = x[:, :1]
                except RuntimeError:
                    if self.keep:
                        x = torch.cat((token, x), dim=1)
                return x
    """
    assert _found(later) == [(12, "DL101"), (23, "DL101")]


# -- a module on the device hands back host data in the tuple its forward returns -----------------

RETURNED_HOST_DATA = """
    import torch
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 16)
            self.out = nn.Linear(16, 5)

        def forward(self, tokens, token_counts):
            token_counts, perm = token_counts.sort(descending=True)
            scores = self.out(self.emb(tokens[perm]))
            steps = [int(c) - 1 for c in token_counts]
            return scores, (token_counts - 1).tolist(), steps, int(token_counts[0]), perm


    def fit(loader, device):
        tagger = Tagger().to(device)
        for tokens, counts in loader:
            scores, kept, steps, longest, perm = tagger(tokens.to(device), counts.to(device))
            a = pack_padded_sequence(scores, kept, batch_first=True)
            b = pack_padded_sequence(scores, steps, batch_first=True)
            c = pack_padded_sequence(scores, [longest] * scores.shape[0], batch_first=True)
            d = pack_padded_sequence(scores, perm, batch_first=True)
"""


def test_host_data_a_device_module_returns_is_not_a_device_tensor() -> None:
    # Only `perm`, a tensor the forward computes on the module's device, is no valid lengths.
    assert _found(RETURNED_HOST_DATA) == [(27, "DL118")]
    assert _messages(RETURNED_HOST_DATA) == [
        "`pack_padded_sequence` needs `lengths` on the CPU, but `perm` is on the device; pass `perm.cpu()`"
    ]


# -- a tensor parameter that the function hands to NumPy is a host tensor -------------------------

HANDED_TO_NUMPY = """
    import numpy as np
    import torch
    from torchvision.ops import box_convert


    def draw_boxes(canvas: np.ndarray, boxes: torch.Tensor, scores: torch.Tensor):
        height, width = canvas.shape[:2]
        scaled = boxes * torch.tensor([width, height, width, height])
        corners = box_convert(scaled, in_fmt="cxcywh", out_fmt="xyxy").numpy().astype(int)
        return corners, scores * torch.ones(len(scores))


    def spread(points: torch.Tensor, width):
        return points * torch.tensor([width, width])
"""


def test_a_parameter_the_function_turns_into_numpy_is_on_the_host() -> None:
    # `boxes` reaches `.numpy()` with no `.cpu()`: the function is written for host boxes. `scores`
    # and `points` are never handed to NumPy, so they may be on the device.
    assert _found(HANDED_TO_NUMPY) == [(11, "DL101"), (15, "DL101")]
    assert _messages(HANDED_TO_NUMPY)[0].startswith("`torch.ones(...)` creates a CPU tensor in `draw_boxes`")


def test_a_parameter_copied_to_the_host_before_numpy_may_still_be_on_the_device() -> None:
    moved = HANDED_TO_NUMPY.replace(
        'box_convert(scaled, in_fmt="cxcywh", out_fmt="xyxy").numpy()',
        'box_convert(scaled, in_fmt="cxcywh", out_fmt="xyxy").cpu().numpy()',
    )
    assert _found(moved) == [(9, "DL101"), (11, "DL101"), (15, "DL101")]


# -- the parts of a tuple from a module the file cannot see into are guesses ----------------------

HANDED_IN_CAPTIONER = """
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence

    from captioning.nets import Backbone, Captioner


    def fit_epoch(batches, backbone, captioner, device):
        for images, tokens, token_counts in batches:
            images, tokens, token_counts = images.to(device), tokens.to(device), token_counts.to(device)
            logits, tokens_sorted, steps, perm = captioner(backbone(images), tokens, token_counts)
            pred = pack_padded_sequence(logits, steps, batch_first=True)
            gold = pack_padded_sequence(tokens_sorted[:, 1:], token_counts, batch_first=True)



    def main(batches):
        device = torch.device("cuda")
        backbone = Backbone().to(device)
        captioner = Captioner(vocab_size=1000)
        captioner = captioner.to(device)
        fit_epoch(batches, backbone, captioner, device)
"""


def test_lengths_from_a_handed_in_module_are_not_taken_for_device_tensors() -> None:
    # `steps` may be a list the captioner built with `.tolist()`: no finding. `token_counts` was
    # moved here: still one.
    assert _found(HANDED_IN_CAPTIONER) == [(13, "DL118")]
    assert _messages(HANDED_IN_CAPTIONER)[0] == (
        "`pack_padded_sequence` needs `lengths` on the CPU, but `token_counts` is on the device; "
        "pass `token_counts.cpu()`"
    )


# -- a tensor computed in `__init__` from the module's own parameters --------------------------

PARAMETER_SNAPSHOT = """
    import torch
    from torch import nn


    class FactorisedMixer(nn.Module):
        def __init__(self, width, factors=8):
            super().__init__()
            self.left = nn.Parameter(torch.empty(width, factors).normal_())
            self.right = nn.Parameter(torch.zeros(factors, width))
            self.scale = nn.Parameter(torch.ones(width))
            self.mixing = torch.mm(self.left, self.right) * self.scale

        def forward(self, tokens):
            return tokens @ self.mixing.to(tokens.device).t()
"""

PARAMETER_SNAPSHOT_DETACHED = PARAMETER_SNAPSHOT.replace(
    "self.mixing = torch.mm(self.left, self.right) * self.scale",
    "self.register_buffer('mixing', (torch.mm(self.left, self.right) * self.scale).detach())",
)

PARAMETER_SNAPSHOT_IN_FORWARD = PARAMETER_SNAPSHOT.replace(
    "            self.mixing = torch.mm(self.left, self.right) * self.scale\n", ""
).replace("self.mixing.to(tokens.device)", "(torch.mm(self.left, self.right) * self.scale)")


def test_a_product_of_parameters_cached_in_init_is_a_stale_cpu_attribute() -> None:
    # moved in `forward` or not, the cached product holds the CPU parameters' old values and graph
    assert _found(PARAMETER_SNAPSHOT) == [(12, "DL102")]
    assert _messages(PARAMETER_SNAPSHOT)[0] == (
        "`self.mixing` holds a tensor computed in `__init__` from the parameters `self.left`, `self.right`, "
        "`self.scale`: `model.to(device)` leaves it on the CPU, and moving it later copies a stale value "
        "whose graph reaches the CPU parameters; compute it from the parameters in `forward` instead"
    )


def test_a_detached_buffer_or_a_product_made_in_forward_is_clean() -> None:
    assert _found(PARAMETER_SNAPSHOT_DETACHED) == []
    assert _found(PARAMETER_SNAPSHOT_IN_FORWARD) == []


# -- a loader built by a helper that forwards `**kwargs`, handed on as a parameter ---------------

FORWARDED_LOADER_OPTIONS = """
    import torch
    from torch.utils.data import DataLoader


    def make_loader(samples, **options):
        shuffle = options.get("shuffle", False)
        return DataLoader(samples, shuffle=shuffle, **options)


    def run_epoch(net, batches, device):
        for inputs, targets in batches:
            inputs = inputs.cuda(non_blocking=True)
            net(inputs).sum().backward()


    def main(net, samples):
        net = net.cuda()
        batches = make_loader(samples, batch_size=32, num_workers=4)
        run_epoch(net, batches, "cuda")
"""

FORWARDED_LOADER_PINNED = FORWARDED_LOADER_OPTIONS.replace("num_workers=4)", "num_workers=4, pin_memory=True)")
FORWARDED_LOADER_UNSEEN = FORWARDED_LOADER_OPTIONS.replace(
    "def main(net, samples):", "def main(net, samples, **settings):"
).replace("num_workers=4)", "**settings)")


def test_a_loader_whose_forwarded_options_never_pin_memory_is_found() -> None:
    assert _found(FORWARDED_LOADER_OPTIONS) == [(13, "DL402")]
    assert _messages(FORWARDED_LOADER_OPTIONS)[0].startswith(
        "`inputs.cuda(non_blocking=True)` asks for an asynchronous copy, but `batches` is a `DataLoader` "
        "without `pin_memory=True`"
    )


def test_forwarded_options_that_pin_or_cannot_be_read_are_clean() -> None:
    assert _found(FORWARDED_LOADER_PINNED) == []
    assert _found(FORWARDED_LOADER_UNSEEN) == []


# -- a CPU tensor handed to a submodule's constructor and kept as a plain attribute ------------

HANDED_CPU_TABLE = """
    import numpy as np
    import torch
    import pytorch_lightning as pl
    from torch import nn


    class CodebookDecoder(nn.Module):
        def __init__(self, width, codebook):
            super().__init__()
            self.proj = nn.Linear(width, width)
            self.codebook = codebook

        def forward(self, weights):
            return self.proj(weights @ self.codebook)


    class Tokenizer(pl.LightningModule):
        def __init__(self, path, width=64):
            super().__init__()
            self.decoder = CodebookDecoder(width, self._codebook(path))

        def _codebook(self, path):
            return torch.from_numpy(np.load(path)).float().to(self.device)

        def training_step(self, batch, batch_idx):
            return self.decoder(batch).pow(2).mean()
"""

HANDED_CPU_TABLE_REGISTERED = HANDED_CPU_TABLE.replace(
    "self.codebook = codebook", 'self.register_buffer("codebook", codebook, persistent=False)'
)


def test_a_cpu_tensor_every_construction_hands_in_is_an_unregistered_attribute() -> None:
    # the LightningModule's `self.device` is still the CPU while it is built
    assert _found(HANDED_CPU_TABLE) == [(12, "DL102")]
    assert _messages(HANDED_CPU_TABLE)[0].startswith(
        "`self.codebook` holds a CPU tensor that is not a parameter or buffer: `model.to(device)` never moves it"
    )


def test_a_handed_in_tensor_registered_as_a_buffer_is_clean() -> None:
    assert _found(HANDED_CPU_TABLE_REGISTERED) == []


# -- a tensor made on an example input's device while the model is built, moved later ----------

EXAMPLE_PLACED_STATE = """
    import torch
    from torch import nn


    class RunningNorm(nn.Module):
        def __init__(self, sample):
            super().__init__()
            width = sample.size(-1)
            self.scale = nn.Linear(width, width)
            self.center = torch.zeros(width, device=sample.device)

        def forward(self, x):
            return self.scale(x - self.center)


    def fit(batches, sample):
        net = RunningNorm(sample).cuda()
        for x in batches:
            net(x.cuda()).sum().backward()
"""

EXAMPLE_PLACED_BUFFER = EXAMPLE_PLACED_STATE.replace(
    "self.center = torch.zeros(width, device=sample.device)",
    'self.register_buffer("center", torch.zeros(width, device=sample.device))',
)
EXAMPLE_PLACED_NEVER_MOVED = EXAMPLE_PLACED_STATE.replace("RunningNorm(sample).cuda()", "RunningNorm(sample)").replace(
    "net(x.cuda())", "net(x)"
)


def test_state_made_on_an_example_inputs_device_is_left_behind_by_a_later_move() -> None:
    assert _found(EXAMPLE_PLACED_STATE) == [(11, "DL102")]
    assert _messages(EXAMPLE_PLACED_STATE)[0] == (
        "`self.center` holds a tensor made on the device of an input the constructor is given, and is not a "
        'parameter or buffer: moving the model later never moves it; use `self.register_buffer("center", ...)`'
    )


def test_example_placed_state_registered_or_never_moved_is_clean() -> None:
    assert _found(EXAMPLE_PLACED_BUFFER) == []
    assert _found(EXAMPLE_PLACED_NEVER_MOVED) == []


# -- a batch helper that tests the key, not the value, moves nothing ---------------------------

KEY_TESTED_MOVER = """
    import torch
    from torch.utils.data import DataLoader


    class Segmenter:
        def __init__(self, net):
            self.net = net.cuda()

        def _to_cuda(self, sample):
            for key, value in sample.items():
                if not isinstance(key, torch.Tensor):
                    continue
                sample[key] = value.cuda(non_blocking=True)
            return sample

        def fit(self, dataset):
            for pixels, target in DataLoader(dataset, batch_size=2):
                sample = self._to_cuda({"pixels": pixels, "target": target})
                logits = self.net(sample["pixels"])
                torch.nn.functional.cross_entropy(logits, sample["target"]).backward()
"""

KEY_TESTED_MOVER_FIXED = KEY_TESTED_MOVER.replace("isinstance(key, torch.Tensor)", "isinstance(value, torch.Tensor)")


def test_a_helper_whose_tensor_test_reads_the_key_moves_nothing() -> None:
    assert _found(KEY_TESTED_MOVER) == [(20, "DL105"), (21, "DL105")]
    assert _messages(KEY_TESTED_MOVER)[0].startswith(
        '`sample["pixels"]` comes from a DataLoader and is still on the CPU, but `self.net` was moved to the device'
    )


def test_a_helper_that_tests_the_value_moves_the_batch() -> None:
    assert _found(KEY_TESTED_MOVER_FIXED) == []


# -- a batch whose entries are moved in place is no longer the loader's ------------------------

IN_PLACE_MOVED_BATCH = """
    import torch
    from torch.utils.data import DataLoader


    def evaluate(net, dataset, device="cuda"):
        net = net.to(device)
        for sample in DataLoader(dataset, batch_size=8):
            for name in sample.keys():
                sample[name] = sample[name].to(device)
            scores = net(sample["audio"])
        for sample in DataLoader(dataset, batch_size=8):
            sample["audio"] = sample["audio"].to(device)
            scores = net(sample["audio"])
        for sample in DataLoader(dataset, batch_size=8):
            scores = net(sample["audio"])
"""


def test_entries_moved_in_place_are_not_reported_and_an_unmoved_batch_is() -> None:
    assert _found(IN_PLACE_MOVED_BATCH) == [(16, "DL105")]
