"""Engine shapes of issue 23, each on code written apart from the re-created bugs: the shape is
found under other names and containers, and the one-fix twin is clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules, find_rule

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


# -- a parameter used only as the target of `.to(...)` is a device, whatever it is called --------

PLACED_BY_USE = """
    import torch


    def score_batches(net, batches, where):
        net.to(where)
        total = 0.0
        for images, labels in batches:
            logits = net(images.to(where))
            weights = torch.linspace(0.5, 1.0, logits.shape[1])
            total += (logits * weights).sum().item()
        return total


    def cast(values: torch.Tensor, kind=torch.float16):
        return values.to(kind) + torch.ones(3)


    def handed_on(values: torch.Tensor, target):
        print(target)
        return values.to(target) + torch.ones(3)
"""


def test_a_parameter_only_moved_to_is_a_device_whatever_its_name() -> None:
    assert _found(PLACED_BY_USE) == [(10, "DL101")]
    assert _messages(PLACED_BY_USE)[0].startswith(
        "`torch.linspace(...)` creates a CPU tensor in `score_batches` that meets the device tensor `logits`"
    )


def test_placed_by_use_twin_is_clean() -> None:
    fixed = PLACED_BY_USE.replace("logits.shape[1])", "logits.shape[1], device=logits.device)")
    assert _found(fixed) == []


# -- what `self.helper()` leaves on `self` is what the caller reads after the call ----------------

SELF_WRITES = """
    import torch
    import torch.nn as nn


    class Smoother(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.mix = nn.Linear(width, width)

        def _reset_kernel(self, width):
            self.kernel = torch.full((width,), 1.0 / width)

        def forward(self, seq):
            mixed = self.mix(seq)
            self._reset_kernel(mixed.shape[-1])
            return mixed * self.kernel
"""


def test_a_tensor_a_method_stores_on_self_is_read_after_the_call() -> None:
    assert _found(SELF_WRITES) == [(12, "DL102"), (12, "DL101")]
    assert _messages(SELF_WRITES)[1].startswith(
        "`torch.full(...)` creates a CPU tensor in `_reset_kernel` that meets the device tensor `mixed`"
    )


def test_self_writes_twin_that_builds_on_the_input_s_device_is_clean() -> None:
    fixed = SELF_WRITES.replace(
        "def _reset_kernel(self, width):\n            self.kernel = torch.full((width,), 1.0 / width)",
        "def _reset_kernel(self, like):\n            self.kernel = torch.full((like.shape[-1],), 1.0 / like.shape[-1], device=like.device)",
    ).replace("self._reset_kernel(mixed.shape[-1])", "self._reset_kernel(mixed)")
    assert _found(fixed) == []


# -- an optimizer built by a helper of the file holds what the call hands it ----------------------

OPTIMIZER_HELPERS = """
    import torch


    def make_sgd(tensors, rate):
        return torch.optim.SGD(tensors, lr=rate)


    def fit_scale(data, device):
        scale = torch.ones(1, requires_grad=True)
        shift = torch.zeros(1, requires_grad=True)
        opt = make_sgd([scale, shift], 0.01)
        scale = scale.to(device)
        shift = shift.to(device)
        data = data.to(device)
        for _ in range(10):
            loss = (data * scale + shift).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


    class Tuner:
        def __init__(self, model, device):
            self.model = model
            self.opt = self._adagrad()
            self.model.to(device)

        def _adagrad(self):
            return torch.optim.Adagrad(self.model.parameters(), lr=0.1)
"""


def test_an_optimizer_built_by_a_helper_holds_the_tensors_the_call_passes() -> None:
    assert _found(OPTIMIZER_HELPERS) == [(12, "DL111"), (26, "DL111")]
    messages = _messages(OPTIMIZER_HELPERS)
    assert messages[0].startswith("`make_sgd([scale, shift], 0.01)` holds the CPU tensors of `scale`")
    assert messages[1].startswith("`self._adagrad()` creates Adagrad's `sum` state in its constructor")


def test_optimizer_helpers_twin_that_moves_first_is_clean() -> None:
    fixed = OPTIMIZER_HELPERS.replace(
        "opt = make_sgd([scale, shift], 0.01)\n        scale = scale.to(device)\n        shift = shift.to(device)",
        "scale = scale.to(device).detach().requires_grad_()\n        shift = shift.to(device).detach().requires_grad_()\n        opt = make_sgd([scale, shift], 0.01)",
    ).replace(
        "self.opt = self._adagrad()\n            self.model.to(device)",
        "self.model.to(device)\n            self.opt = self._adagrad()",
    )
    assert _found(fixed) == []


# -- a holder's attribute set from a helper that makes a tensor is a tensor -----------------------

HOLDER_HELPERS = """
    import torch


    def _as_weights(values):
        return torch.as_tensor(values, dtype=torch.float32)


    class Transition:
        def __init__(self, states, costs, weights):
            self.states = torch.as_tensor(states)
            self.costs = self._costs(costs)
            self.weights = _as_weights(weights)

        def _costs(self, raw):
            return torch.tensor(raw, dtype=torch.float32)

        def to(self, device):
            self.states = self.states.to(device)
            return self
"""


def test_attributes_a_helper_builds_with_a_factory_are_tensors_to_move() -> None:
    assert _found(HOLDER_HELPERS) == [(12, "DL112"), (13, "DL112")]
    assert _messages(HOLDER_HELPERS)[1].startswith(
        "`self.weights` holds a tensor that `Transition.to()` does not move (it moves `self.states`)"
    )


def test_holder_helpers_twin_that_moves_every_tensor_is_clean() -> None:
    fixed = HOLDER_HELPERS.replace(
        "self.states = self.states.to(device)\n",
        "self.states = self.states.to(device)\n            self.costs = self.costs.to(device)\n"
        "            self.weights = self.weights.to(device)\n",
    )
    assert _found(fixed) == []


# -- a value of unknown kind moved to the GPU and handed to a placed model's method -------------

MOVED_UNKNOWN_INPUT = """
    import torch


    @torch.no_grad()
    def collect_codes(encoder, shards):
        encoder = encoder.cuda().eval()
        codes = []
        for shard in shards:
            latent = encoder.quantize(shard.cuda())
            codes.append(latent.argmax(-1).numpy())
        return codes
"""


def test_a_placed_model_s_method_on_a_moved_input_computes_on_the_device() -> None:
    assert _found(MOVED_UNKNOWN_INPUT) == [(11, "DL108")]
    assert _messages(MOVED_UNKNOWN_INPUT)[0].startswith(
        "`latent.argmax(-1).numpy()` converts a tensor that is on the device"
    )


def test_moved_unknown_input_twin_that_copies_to_the_host_is_clean() -> None:
    assert _found(MOVED_UNKNOWN_INPUT.replace("argmax(-1).numpy()", "argmax(-1).cpu().numpy()")) == []


# -- a helper that wraps the model it is handed: the caller's model is the wrapped one -------------

HANDED_WRAPPER = """
    import torch.nn as nn
    from transformers import AutoModelForSeq2SeqLM


    def replicate(net):
        return nn.DataParallel(net)


    def load_translator(name):
        model = AutoModelForSeq2SeqLM.from_pretrained(name, device_map="balanced")
        model = replicate(model)
        return model
"""


def test_a_helper_wrapping_its_parameter_wraps_what_the_caller_hands_it() -> None:
    assert _found(HANDED_WRAPPER) == [(12, "DL201")]
    assert _messages(HANDED_WRAPPER)[0].startswith(
        '`replicate(model)` wraps a model that `device_map="balanced"` spreads over the visible GPUs'
    )


def test_handed_wrapper_twin_loaded_on_one_device_is_clean() -> None:
    fixed = HANDED_WRAPPER.replace('device_map="balanced"', 'device_map={"": 0}')
    assert _found(fixed) == []


# -- a training loop in a helper handed the trainer reads the trainer's attributes ---------------

HANDED_TRAINER = """
    import torch


    class EpochRunner:
        def run(self, owner, batches):
            for inputs, targets in batches:
                with torch.autocast("cuda", dtype=owner.half_type):
                    loss = owner.criterion(owner.net(inputs), targets)
                owner.amp.scale(loss).backward()
                owner.amp.step(owner.optimizer)
                owner.amp.update()
                owner.optimizer.zero_grad()


    class Experiment:
        def __init__(self, net, optimizer, use_fp16):
            self.net = net
            self.optimizer = optimizer
            self.criterion = torch.nn.CrossEntropyLoss()
            self.half_type = torch.float16 if use_fp16 else torch.float32
            self.amp = torch.amp.GradScaler("cuda", enabled=False)
            self.runner = EpochRunner()

        def fit(self, batches):
            self.runner.run(self, batches)
"""


def test_a_loop_handed_the_trainer_reads_its_dtype_and_its_disabled_scaler() -> None:
    assert _found(HANDED_TRAINER) == [(10, "DL301")]
    assert _messages(HANDED_TRAINER)[0].startswith(
        '`owner.amp.scale(loss).backward()` backpropagates a loss computed under `torch.autocast("cuda", '
        "dtype=owner.half_type)` (`owner.amp` is a `GradScaler` built with `enabled=False`"
    )


def test_handed_trainer_twin_with_an_enabled_scaler_is_clean() -> None:
    assert (
        _found(HANDED_TRAINER.replace('GradScaler("cuda", enabled=False)', 'GradScaler("cuda", enabled=use_fp16)'))
        == []
    )


# -- a helper that only an optimizer's methods call is part of the optimizer ---------------------

OPTIMIZER_PIECE = """
    import torch
    from torch import nn


    def _fresh_momentum(param):
        return torch.zeros_like(param, memory_format=torch.preserve_format).cuda()


    class SignSGD(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3):
            super().__init__(params, dict(lr=lr))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for param in group["params"]:
                    state = self.state[param]
                    if "momentum" not in state:
                        state["momentum"] = _fresh_momentum(param)
                    param.add_(state["momentum"].add_(param.grad).sign(), alpha=-group["lr"])


    if __name__ == "__main__":
        device = "cuda" if torch.cuda.is_available() else "cpu"
        net = nn.Linear(2, 2).to(device)
        SignSGD(net.parameters()).step()
"""


def test_cuda_in_a_helper_only_an_optimizer_calls_is_reported() -> None:
    assert _found(OPTIMIZER_PIECE) == [(7, "DL107")]
    assert _messages(OPTIMIZER_PIECE)[0].startswith("`.cuda()` hard-codes CUDA in `_fresh_momentum`")


def test_optimizer_piece_twin_that_follows_the_parameter_is_clean() -> None:
    fixed = OPTIMIZER_PIECE.replace(
        "torch.zeros_like(param, memory_format=torch.preserve_format).cuda()",
        "torch.zeros_like(param, memory_format=torch.preserve_format)",
    )
    assert _found(fixed) == []


# -- a helper's helper: the callers further up say where the value is ----------------------------

HELPER_CHAIN = """
    import torch


    def _to_hwc(frame):
        return frame.permute(1, 2, 0).contiguous().numpy()


    def render(frame):
        return _to_hwc(frame)


    def preview(generator, noise_batches, device):
        generator.to(device)
        for noise in noise_batches:
            fake = generator(noise.to(device))
            render(fake[0])
"""


def test_a_helper_two_calls_down_sees_what_the_top_caller_moved() -> None:
    assert _found(HELPER_CHAIN) == [(6, "DL108")]
    assert _messages(HELPER_CHAIN)[0].startswith("`frame.permute(1, 2, 0).contiguous().numpy()` converts a tensor")


def test_helper_chain_twin_that_copies_to_the_host_is_clean() -> None:
    assert _found(HELPER_CHAIN.replace("render(fake[0])", "render(fake[0].cpu())")) == []


# -- a loss built by a helper of the file, in a function that moves the model --------------------

LOSS_HELPER = """
    import torch
    from torch import nn


    def weighted_bce(pos):
        return nn.BCEWithLogitsLoss(pos_weight=pos)


    def setup(detector, device, ratio):
        detector = detector.to(device)
        imbalance = torch.tensor([ratio])
        loss_fn = weighted_bce(imbalance)
        return detector, loss_fn
"""


def test_a_loss_a_helper_builds_with_a_cpu_weight_is_never_moved() -> None:
    assert _found(LOSS_HELPER) == [(7, "DL106")]
    assert _messages(LOSS_HELPER)[0].startswith(
        "`nn.BCEWithLogitsLoss` gets a CPU `pos_weight` tensor and `loss_fn` is never moved, while `detector` is"
    )


def test_loss_helper_twin_that_moves_the_loss_is_clean() -> None:
    assert _found(LOSS_HELPER.replace("weighted_bce(imbalance)", "weighted_bce(imbalance).to(device)")) == []


# -- a metric a helper builds and returns, or one taken out of a dict of metrics ---------------

METRIC_HELPERS = """
    import torchmetrics


    def make_auroc(classes):
        return torchmetrics.AUROC(task="multiclass", num_classes=classes)


    def score(model, batches, device, classes):
        model.to(device)
        auroc = make_auroc(classes)
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            auroc.update(model(x).softmax(-1), y)
        return auroc.compute()


    class Tracker:
        def __init__(self):
            table = {"f1": torchmetrics.F1Score(task="binary")}
            self.f1 = table["f1"]

        def add(self, probs, labels):
            self.f1.update(probs, labels)


    def track(model, batches, device):
        model.to(device)
        tracker = Tracker()
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            tracker.add(model(x).sigmoid(), y)
"""


def test_metrics_from_a_helper_or_from_a_dict_entry_are_on_the_cpu() -> None:
    assert _found(METRIC_HELPERS) == [(6, "DL113"), (20, "DL113")]
    messages = _messages(METRIC_HELPERS)
    assert messages[0].startswith(
        '`torchmetrics.AUROC(task="multiclass", num_classes=classes)` is created on the CPU and never moved'
    )
    # the entry read back from the dict is the metric that was put in
    assert messages[1].startswith('`torchmetrics.F1Score(task="binary")` is created on the CPU and never moved')


def test_metric_helpers_twin_that_moves_them_is_clean() -> None:
    fixed = METRIC_HELPERS.replace("auroc = make_auroc(classes)", "auroc = make_auroc(classes).to(device)").replace(
        'self.f1 = table["f1"]', 'self.f1 = table["f1"].to("cuda")'
    )
    assert _found(fixed) == []


# -- a helper that updates the scaler it is handed updates the caller's scaler --------------------

HANDED_SCALER = """
    import torch


    def finish_step(amp_scaler, optimizer):
        amp_scaler.step(optimizer)
        amp_scaler.update()
        optimizer.zero_grad()


    def adversarial_step(gen, disc, opt_gen, opt_disc, amp_scaler, noise, real, adv_loss):
        with torch.autocast("cuda", dtype=torch.float16):
            fake = gen(noise)
            loss_gen = adv_loss(disc(fake), True)
        amp_scaler.scale(loss_gen).backward()
        finish_step(amp_scaler, opt_gen)
        with torch.autocast("cuda", dtype=torch.float16):
            loss_disc = adv_loss(disc(real), True) + adv_loss(disc(fake.detach()), False)
        amp_scaler.scale(loss_disc).backward()
        finish_step(amp_scaler, opt_disc)
"""


def test_a_helper_updating_the_scaler_it_is_handed_updates_the_caller_s() -> None:
    assert _found(HANDED_SCALER) == [(16, "DL307")]
    assert _messages(HANDED_SCALER)[0].startswith(
        "`finish_step(amp_scaler, opt_gen)` (which calls `amp_scaler.update()` in `finish_step`) steps and updates "
        "`amp_scaler`, and it is updated again"
    )


def test_handed_scaler_twin_with_one_update_per_iteration_is_clean() -> None:
    fixed = HANDED_SCALER.replace("        amp_scaler.update()\n", "").replace(
        "finish_step(amp_scaler, opt_disc)", "finish_step(amp_scaler, opt_disc)\n        amp_scaler.update()"
    )
    assert _found(fixed) == []


# -- a static method handed the trainer reads the trainer's attributes ---------------------------

STATIC_HANDED_TRAINER = """
    import torch


    class NormLimiter:
        def __init__(self, limit):
            self.limit = limit

        def apply(self, net):
            torch.nn.utils.clip_grad_norm_(net.parameters(), self.limit)


    class Runner:
        def __init__(self, net, optimizer):
            self.net = net
            self.optimizer = optimizer
            self.amp = torch.amp.GradScaler("cuda")
            self.limiter = NormLimiter(5.0)

        @staticmethod
        def _limit(runner):
            runner.limiter.apply(runner.net)

        def step(self, batch):
            with torch.autocast("cuda"):
                loss = self.net(batch).mean()
            self.amp.scale(loss).backward()
            Runner._limit(self)
            self.amp.step(self.optimizer)
            self.amp.update()
            self.optimizer.zero_grad()
"""


def test_a_static_method_handed_the_trainer_clips_its_scaled_gradients() -> None:
    found = _found(STATIC_HANDED_TRAINER)
    assert found == [(28, "DL304")]
    assert _messages(STATIC_HANDED_TRAINER)[0].startswith("`Runner._limit(self)`")


def test_static_handed_trainer_twin_that_unscales_first_is_clean() -> None:
    fixed = STATIC_HANDED_TRAINER.replace(
        "Runner._limit(self)", "self.amp.unscale_(self.optimizer)\n            Runner._limit(self)"
    )
    assert _found(fixed) == []


# -- a loop that moves what it yields to the device iterates host batches, whatever it is called --

MOVING_LOOP = """
    import torch


    def compare(net, pairs, dev="cuda"):
        net.to(dev)
        for left, right in pairs:
            left, right = left.to(dev), right.to(dev)
            gate = right.cpu()
            print((net(left) * gate).sum().item())
"""


def test_a_loop_moving_its_targets_iterates_host_batches() -> None:
    assert _found(MOVING_LOOP) == [(10, "DL116")]
    assert _messages(MOVING_LOOP)[0].startswith(
        "`(net(left) * gate)` needs its tensors on one device, but `gate` is a copy"
    )


def test_moving_loop_twin_that_keeps_the_gate_on_the_device_is_clean() -> None:
    assert _found(MOVING_LOOP.replace("gate = right.cpu()", "gate = right")) == []


# -- a callable handed in and fed an input moved to the GPU computes there, whatever its name ---

FED_MOVED_INPUT = """
    import torch


    def noisy_scores(scorer, batch: torch.Tensor, target):
        jitter = torch.randn(batch.shape[0], 1) * 0.01
        return scorer(batch.to(target)) + jitter


    def through_a_cpu_function(convert, batch: torch.Tensor):
        return convert(batch) + torch.ones(1, 3)
"""


def test_a_parameter_called_on_a_moved_input_computes_on_the_device() -> None:
    assert _found(FED_MOVED_INPUT) == [(6, "DL101")]
    assert _messages(FED_MOVED_INPUT)[0].startswith(
        "`torch.randn(...)` creates a CPU tensor in `noisy_scores` that meets the device tensor `scorer(batch.to(target))`"
    )


def test_fed_moved_input_twin_that_makes_the_jitter_there_is_clean() -> None:
    fixed = FED_MOVED_INPUT.replace(
        "jitter = torch.randn(batch.shape[0], 1) * 0.01",
        "jitter = torch.randn(batch.shape[0], 1, device=target) * 0.01",
    )
    assert _found(fixed) == []


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


# -- optimizers kept in an attribute stored from a parameter of any name ----------------------------

OPTIMIZERS_FROM_ANY_PARAMETER = """
    import torch


    class Trainer:
        def __init__(self, net, a):
            self.net = net
            self.optimizers = a
            self.seen = {}

        def run(self, x, y):
            parts = self.net.losses(x.cuda(), y.cuda())
            for o in self.optimizers:
                o.zero_grad()
            sum(parts.values()).backward()
            for o in self.optimizers:
                o.step()
            for key in parts:
                self.seen[key] = parts[key].item()
"""


def test_optimizers_stored_from_a_parameter_of_any_name_make_a_training_step() -> None:
    assert _found(OPTIMIZERS_FROM_ANY_PARAMETER) == [(19, "DL401")]


def test_optimizers_twin_reading_once_is_clean() -> None:
    fixed = OPTIMIZERS_FROM_ANY_PARAMETER.replace(
        "            for key in parts:\n                self.seen[key] = parts[key].item()\n",
        "            self.seen = {k: v.detach() for k, v in parts.items()}\n",
    )
    assert _found(fixed) == []


ENTRYWISE = """
    import torch
    from transformers import AutoModel, AutoProcessor


    class Captioner:
        def __init__(self, name, device):
            self.prep = AutoProcessor.from_pretrained(name)
            self.net = AutoModel.from_pretrained(name).to(device)
            self.where = device

        def every_entry(self, texts):
            enc = self.prep(texts, padding=True, return_tensors="pt")
            for field in enc:
                enc[field] = enc[field].to(self.where)
            return self.net(**enc).last_hidden_state

        def only_entry(self, pictures):
            enc = self.prep(images=pictures, return_tensors="pt")
            enc["pixel_values"] = enc["pixel_values"].to(self.where)
            return self.net(**enc).pooler_output

        def host_entry_added(self, pictures):
            enc = self.prep(images=pictures, return_tensors="pt")
            enc["labels"] = torch.zeros(len(pictures))
            return self.net(**enc).pooler_output
"""


def test_a_batch_moved_entry_by_entry_reaches_the_model_moved() -> None:
    assert _found(ENTRYWISE) == [(26, "DL105")]
    assert _messages(ENTRYWISE)[0].startswith("`enc` comes from a tokenizer")


PLACEHOLDER = """
    import torch
    import torch.nn.functional as F
    import lightning.pytorch as pl


    class Denoiser(pl.LightningModule):
        def __init__(self, net, alpha):
            super().__init__()
            self.net = net
            self.alpha = alpha

        def training_step(self, batch, batch_idx):
            noisy, clean = batch
            out = self.net(noisy)
            smooth = torch.tensor(0.0)
            if self.current_epoch > 1:
                smooth = out.diff(dim=-1).abs().mean()
            self.log("smooth", smooth)
            return F.l1_loss(out, clean) + self.alpha * smooth
"""


def test_a_path_dependent_zero_that_is_logged_is_reported() -> None:
    assert _found(PLACEHOLDER) == [(16, "DL101")]


def test_placeholder_twin_read_only_as_an_operand_is_clean() -> None:
    assert _found(PLACEHOLDER.replace('            self.log("smooth", smooth)\n', "")) == []


IMPORTED_LOADER = """
    import torch
    from torch import nn

    feats, target = torch.randn(64, 5), torch.randn(64, 1)
    stream = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(feats, target), batch_size=8)
    regressor = nn.Linear(5, 1)


    def fit(net, rounds):
        opt = torch.optim.Adam(net.parameters())
        for _ in range(rounds):
            running = 0.0
            for a, b in stream:
                err = nn.functional.l1_loss(net(a), b)
                opt.zero_grad()
                err.backward()
                opt.step()
                running += err.item()
            print(running)


    fit(regressor, 3)
"""


def test_a_loader_built_at_import_under_any_name_yields_host_batches_on_a_cpu_model() -> None:
    assert _found(IMPORTED_LOADER) == []


def test_imported_loader_twin_that_moves_model_and_batch_to_the_gpu_syncs() -> None:
    moved = IMPORTED_LOADER.replace(
        "            for a, b in stream:\n",
        "            for a, b in stream:\n                a, b = a.cuda(), b.cuda()\n",
    ).replace("    fit(regressor, 3)", "    fit(regressor.cuda(), 3)")
    assert _found(moved) == [(20, "DL401")]


# -- a loop over batches however it is written: `while True: x, y = next(it)` ----------------------

WHILE_NEXT_SCORING = """
    import torch

    BINS = [0.5, 1.0, 2.0, 4.0]


    def weighted(p, t):
        w = torch.as_tensor(BINS, device=p.device)
        return ((p - t).abs() * w).mean()


    def evaluate(stream, dev):
        acc = 0.0
        it = iter(stream)
        while True:
            try:
                p, t = next(it)
            except StopIteration:
                break
            acc += weighted(p.to(dev), t.to(dev))
        return acc
"""


def test_a_while_next_loop_that_moves_what_it_yields_is_per_step() -> None:
    assert _found(WHILE_NEXT_SCORING) == [(8, "DL405")]


def test_while_next_twin_that_moves_nothing_is_clean() -> None:
    assert _found(WHILE_NEXT_SCORING.replace("weighted(p.to(dev), t.to(dev))", "float(p.sum() - t.sum())")) == []


# -- a helper handed the instance under another name reads the class's attributes -------------

HANDED_INSTANCE = """
    import torch
    import torch.nn as nn


    def run_head(net, feats):
        pooled = feats.mean(dim=1)
        return net.head(pooled)


    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(16, 16).to("cuda:0")
            self.head = nn.Linear(16, 3).to("cuda:1")

        @staticmethod
        def _trunk(model, x):
            return model.body(x)

        def forward(self, x):
            h = Split._trunk(self, x.to("cuda:0"))
            return run_head(self, h.unsqueeze(1))
"""


def test_a_helper_handed_the_model_reads_its_placed_stages() -> None:
    assert _found(HANDED_INSTANCE) == [(8, "DL208")]


def test_handed_instance_twin_that_moves_the_activation_is_clean() -> None:
    assert _found(HANDED_INSTANCE.replace("net.head(pooled)", "net.head(pooled.to(net.head.weight.device))")) == []


HANDED_TO_CLASSMETHOD = """
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence


    class Reader(nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.table = nn.Embedding(vocab, 32)
            self.cell = nn.LSTM(32, 32, batch_first=True)

        @classmethod
        def _packed(cls, holder, ids, sizes):
            return pack_padded_sequence(holder.table(ids), sizes, batch_first=True, enforce_sorted=False)

        def forward(self, ids):
            sizes = (ids > 0).long().sum(-1)
            out, _ = self.cell(self._packed(self, ids, sizes))
            return out
"""


def test_a_classmethod_handed_the_module_packs_lengths_computed_on_the_device() -> None:
    assert _found(HANDED_TO_CLASSMETHOD) == [(14, "DL118")]


def test_handed_to_classmethod_twin_with_host_lengths_is_clean() -> None:
    assert _found(HANDED_TO_CLASSMETHOD.replace("sizes, batch_first", "sizes.cpu(), batch_first")) == []


HANDED_DEVICE_OBJECT = """
    import torch


    def _on_host(runner):
        return runner.where == "cpu"


    class Scorer:
        def __init__(self, where: torch.device):
            self.where = where
            self.half = not _on_host(self)

        def score(self, x):
            return x.to(self.where).half() if self.half else x.to(self.where)
"""


def test_a_helper_handed_the_instance_compares_its_device_object_with_a_string() -> None:
    assert _found(HANDED_DEVICE_OBJECT) == [(6, "DL502")]


def test_handed_device_object_twin_comparing_the_type_is_clean() -> None:
    assert _found(HANDED_DEVICE_OBJECT.replace('runner.where == "cpu"', 'runner.where.type == "cpu"')) == []


# -- a static or class method called on the class builds the container --------------------------

CLASS_LEVEL_BUILDER = """
    import torch.nn as nn


    class Ensemble(nn.Module):
        def __init__(self, width, count):
            super().__init__()
            self.members = Ensemble._members(width, count)
            self.gates = self._gates(width)

        @staticmethod
        def _members(width, count):
            return [nn.Linear(width, width) for _ in range(count)]

        @classmethod
        def _gates(cls, width):
            out = {}
            for key in ("a", "b"):
                out[key] = nn.Linear(width, 1)
            return out

        def forward(self, x):
            return sum(m(x) for m in self.members) * self.gates["a"](x)
"""


def test_a_builder_called_on_the_class_fills_a_plain_container() -> None:
    assert _found(CLASS_LEVEL_BUILDER) == [(8, "DL103"), (9, "DL103")]


def test_class_level_builder_twin_wrapping_in_module_containers_is_clean() -> None:
    fixed = CLASS_LEVEL_BUILDER.replace(
        "self.members = Ensemble._members(width, count)",
        "self.members = nn.ModuleList(Ensemble._members(width, count))",
    ).replace("self.gates = self._gates(width)", "self.gates = nn.ModuleDict(self._gates(width))")
    assert _found(fixed) == []


# -- a helper handed the module by `forward` writes state on every replica -----------------------

REPLICA_HELPER = """
    import torch
    import torch.nn as nn


    def _keep_stats(net, acts):
        net.history.extend(acts.mean(0).tolist())


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(32, 8)
            self.history = []

        def forward(self, x):
            acts = self.enc(x)
            _keep_stats(self, acts)
            return acts


    def build():
        return nn.DataParallel(Tagger()).cuda()
"""


def test_a_helper_handed_the_module_in_forward_writes_to_a_replica() -> None:
    assert _found(REPLICA_HELPER) == [(7, "DL203")]


def test_replica_helper_twin_that_returns_the_statistics_is_clean() -> None:
    fixed = REPLICA_HELPER.replace("net.history.extend(acts.mean(0).tolist())", "return acts.mean(0)").replace(
        "            _keep_stats(self, acts)\n            return acts",
        "            return acts, _keep_stats(self, acts)",
    )
    assert _found(fixed) == []


# -- a helper handed both the model and the loaded checkpoint ---------------------------------

HANDED_CHECKPOINT = """
    import torch
    import torch.nn as nn


    class Scorer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, x):
            return self.lin(x)


    def fit(batches):
        model = nn.DataParallel(Scorer()).cuda()
        torch.save({"net": model.state_dict()}, "scorer.ckpt")


    def apply_weights(target, blob):
        target.load_state_dict(blob["net"])
        return target


    def serve():
        bare = Scorer()
        saved = torch.load("scorer.ckpt", map_location="cpu")
        return apply_weights(bare, saved)
"""


def test_a_helper_loads_the_wrapper_s_checkpoint_its_caller_hands_in() -> None:
    assert _found(HANDED_CHECKPOINT) == [(21, "DL204")]
    assert "passed in by `apply_weights(bare, saved)`" in _messages(HANDED_CHECKPOINT)[0]


def test_handed_checkpoint_twin_saving_the_inner_model_is_clean() -> None:
    fixed = HANDED_CHECKPOINT.replace('{"net": model.state_dict()}', '{"net": model.module.state_dict()}')
    assert _found(fixed) == []


# -- a helper's update runs on every micro-batch, the step only under the accumulation test -----

HELPER_UPDATE_PER_MICRO_BATCH = """
    import torch


    def _rescale(amp):
        amp.update()


    def fit(model, opt, loader, every):
        amp = torch.amp.GradScaler("cuda")
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cuda"):
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()) / every
            amp.scale(loss).backward()
            if i % every == every - 1:
                amp.step(opt)
                opt.zero_grad()
            _rescale(amp)
"""


def test_a_helper_updating_the_scaler_each_micro_batch_is_found_at_its_call() -> None:
    assert _found(HELPER_UPDATE_PER_MICRO_BATCH) == [(18, "DL307")]


def test_helper_update_twin_called_with_the_step_is_clean() -> None:
    fixed = HELPER_UPDATE_PER_MICRO_BATCH.replace(
        "                opt.zero_grad()\n            _rescale(amp)",
        "                opt.zero_grad()\n                _rescale(amp)",
    )
    assert _found(fixed) == []


# -- a wrapper handed to a method of an instance of the file's classes ----------------------------

WRAPPER_TO_INSTANCE_METHOD = """
    import torch
    import torch.nn as nn


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(8, 8)

        def forward(self, x):
            return self.stem(x)


    class Probe:
        def summarize(self, net, sample):
            return net.stem.weight.norm() + net(sample).mean()


    def main(sample):
        net = nn.DataParallel(Encoder()).cuda()
        probe = Probe()
        print(probe.summarize(net, sample))
        print(Probe().summarize(net, sample))
"""


def test_a_wrapper_handed_to_a_method_of_a_local_instance_reads_the_model_s_attribute() -> None:
    assert _found(WRAPPER_TO_INSTANCE_METHOD) == [(17, "DL203")]


def test_wrapper_to_instance_method_twin_reading_through_module_is_clean() -> None:
    assert _found(WRAPPER_TO_INSTANCE_METHOD.replace("net.stem.weight", "net.module.stem.weight")) == []


# -- a loop whose items go to a helper that returns them moved, under any names -----------------

DROPPED_HELPER_MOVE = """
    import torch.nn.functional as F
    from tqdm import tqdm


    def both_on(a, b, where):
        return a.to(where, non_blocking=True), b.to(where, non_blocking=True)


    def fit(net, pairs, opt, where):
        net.to(where)
        for i, (a, b) in enumerate(tqdm(pairs)):
            both_on(a, b, where)
            err = F.mse_loss(net(a), b)
            opt.zero_grad()
            err.backward()
            opt.step()
"""


def test_items_handed_to_a_moving_helper_whose_result_is_dropped_stay_on_the_host() -> None:
    assert _found(DROPPED_HELPER_MOVE) == [(13, "DL104"), (14, "DL105"), (14, "DL105")]


def test_dropped_helper_move_twin_keeping_the_moved_pair_is_clean() -> None:
    assert (
        _found(
            DROPPED_HELPER_MOVE.replace("            both_on(a, b, where)", "            a, b = both_on(a, b, where)")
        )
        == []
    )


# -- a class is one unit: its methods run in the order the file calls them on an instance ----------

INSTANCE_ORDER = """
    import torch
    import torch.nn as nn


    class Experiment:
        def __init__(self, width):
            self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
            self.optim = torch.optim.AdamW(self.net.parameters(), lr=1e-4)

        def load(self, path):
            state = torch.load(path, map_location="cpu")
            self.net.load_state_dict(state["net"])
            self.optim.load_state_dict(state["optim"])

        def to_gpu(self):
            self.net = self.net.cuda()

        def train_on(self, batches):
            for x, y in batches:
                loss = (self.net(x.cuda()) - y.cuda()).pow(2).mean()
                self.optim.zero_grad()
                loss.backward()
                self.optim.step()


    def run(path, batches):
        experiment = Experiment(64)
        experiment.load(path)
        experiment.to_gpu()
        experiment.train_on(batches)
"""


def test_state_loaded_by_one_method_before_another_moves_the_model() -> None:
    assert _found(INSTANCE_ORDER) == [(14, "DL111")]


def test_instance_order_twin_that_moves_before_loading_is_clean() -> None:
    fixed = INSTANCE_ORDER.replace(
        "experiment.load(path)\n        experiment.to_gpu()", "experiment.to_gpu()\n        experiment.load(path)"
    )
    assert fixed != INSTANCE_ORDER and _found(fixed) == []


# -- a plain helper whose every caller in the file hands it CPU draws meets nothing ----------------

HOST_DRAWN_HELPER = """
    import math

    import torch


    def draw_angles(count, device="cpu"):
        return torch.empty(count, device=device).uniform_(-math.pi, math.pi)


    def spin(theta):
        rows = theta.shape[0]
        eye = torch.eye(2).unsqueeze(0)
        turn = torch.cos(theta).view(-1, 1, 1)
        return (turn * eye).reshape(rows, 4)


    def jitter_colours(images):
        mats = spin(draw_angles(images.shape[0]))
        return images * mats.to(images)[:, :1, None, None]
"""


def test_a_helper_only_called_with_cpu_draws_is_host_code() -> None:
    assert _found(HOST_DRAWN_HELPER) == []


def test_host_drawn_twin_whose_caller_draws_on_the_input_s_device_is_reported() -> None:
    on_device = HOST_DRAWN_HELPER.replace(
        "spin(draw_angles(images.shape[0]))", "spin(draw_angles(images.shape[0], device=images.device))"
    )
    assert _found(on_device) == [(13, "DL101")]


# -- padding widths and output sizes are numbers, whatever tensor they were computed in ----------

PAD_WIDTHS = """
    import torch
    import torch.nn.functional as F


    def margins(grid, height, width):
        corners = torch.tensor([[-1.0, -1.0], [1.0, 1.0]]) * torch.tensor([width / 2, height / 2])
        spread = (grid @ corners.T).abs().amax()
        extra = torch.tensor([2.0, 2.0, 2.0, 2.0]) + spread
        left, right, top, bottom = extra.ceil().to(torch.int64)
        return left, right, top, bottom


    def pad_for_warp(img, grid):
        left, right, top, bottom = margins(grid, img.shape[2], img.shape[3])
        padded = F.pad(img, (left, right, top, bottom), mode="reflect")
        return F.interpolate(padded, size=(top + bottom, left + right))


    def warp(img):
        return pad_for_warp(img.cuda(), torch.eye(2))
"""


def test_cpu_scalars_given_as_padding_widths_and_sizes_meet_nothing() -> None:
    assert _found(PAD_WIDTHS) == []


def test_pad_widths_twin_that_scales_the_image_by_them_is_reported() -> None:
    scaled = PAD_WIDTHS.replace(
        "        return F.interpolate(padded, size=(top + bottom, left + right))",
        "        return padded * torch.stack((left, right, top, bottom)).view(1, 4, 1, 1)",
    )
    assert _found(scaled) == [(9, "DL101")]


# -- a loss weighted by a settings field: the settings object is not the loss ----------------------

WEIGHTED_BY_SETTINGS = """
    import torch


    def fit(opts, critic, batches, optim):
        for step in range(opts.steps):
            tick = step + opts.first_step
            if tick > opts.steps:
                break
            real = next(batches)
            score = critic(real)
            penalty = score.pow(2).mean()
            optim.zero_grad()
            (opts.gamma / 2 * penalty * opts.every + 0 * score[0]).backward()
            optim.step()
"""


def test_a_counter_built_from_the_settings_that_weight_the_loss_is_a_number() -> None:
    assert _found(WEIGHTED_BY_SETTINGS) == []


def test_weighted_twin_that_tests_the_penalty_itself_is_reported() -> None:
    tested = WEIGHTED_BY_SETTINGS.replace(
        "            optim.step()\n",
        "            optim.step()\n            if penalty > opts.limit:\n                break\n",
    )
    assert _found(tested) == [(16, "DL401")]


# -- values through containers: what a read gives back is what was put in ------------------------

NORMALIZE = """
    from typing import NamedTuple

    import torch
    import torch.nn as nn


    class Normalize(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.mean, self.std = torch.tensor(mean), torch.tensor(std)

        def forward(self, x):
            return (x - self.mean.view(1, -1, 1, 1)) / self.std.view(1, -1, 1, 1)


    class Tables(NamedTuple):
        freqs: torch.Tensor
        scale: float


    class Rotary(nn.Module):
        def __init__(self, dim):
            super().__init__()
            tables = Tables(torch.tensor([10000.0 ** (-i / dim) for i in range(0, dim, 2)]), dim**-0.5)
            self.freqs = tables.freqs
            self.scale = tables.scale

        def forward(self, x):
            return x * self.freqs * self.scale
"""


def test_tensors_unpacked_or_read_from_a_record_into_plain_attributes_are_not_moved() -> None:
    assert _found(NORMALIZE) == [(11, "DL102"), (11, "DL102"), (26, "DL102")]


def test_normalize_twin_with_buffers_is_clean() -> None:
    fixed = NORMALIZE.replace(
        "self.mean, self.std = torch.tensor(mean), torch.tensor(std)",
        'self.register_buffer("mean", torch.tensor(mean))\n            self.register_buffer("std", torch.tensor(std))',
    ).replace("self.freqs = tables.freqs", 'self.register_buffer("freqs", tables.freqs)')
    assert _found(fixed) == []


STAGES_IN_A_DICT = """
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc = nn.Linear(width, width)

        def forward(self, h):
            return self.fc(h).relu()


    class TwoGpuNet(nn.Module):
        def __init__(self, width=512):
            super().__init__()
            stages = {
                "head": nn.Linear(64, width).to("cuda:0"),
                "body": Block(width),
                "tail": nn.Linear(width, 10).to("cuda:1"),
            }
            self.head = stages["head"]
            self.body = stages["body"]
            self.tail = stages["tail"]

        def forward(self, x):
            h = self.body(self.head(x.to("cuda:0")))
            return self.tail(h.to("cuda:1"))
"""


def test_a_stage_read_back_from_a_dict_of_stages_is_never_placed() -> None:
    assert _found(STAGES_IN_A_DICT) == [(23, "DL208")]


def test_stages_twin_that_places_the_middle_stage_is_clean() -> None:
    assert _found(STAGES_IN_A_DICT.replace('"body": Block(width),', '"body": Block(width).to("cuda:0"),')) == []


RUNNER_TO = """
    import torch


    class Runner:
        def __init__(self, net, head):
            self.net = net
            self.head = head

        def to(self, device):
            self.head.to(device)
            moved = {"net": self.net.to(device)}
            return moved["net"]


    def prepare(net, head, device):
        runner = Runner(net, head).to(device)
        return runner
"""


def test_a_to_that_returns_a_part_read_back_from_a_dict_is_not_the_object() -> None:
    assert [code for _, code in _found(RUNNER_TO)] == ["DL112", "DL112"]


def test_runner_twin_that_returns_self_is_clean() -> None:
    fixed = RUNNER_TO.replace(
        'moved = {"net": self.net.to(device)}\n            return moved["net"]',
        "self.net.to(device)\n            return self",
    )
    assert _found(fixed) == []


SCALER_IN_A_PAIR = """
    import torch


    def train_one_epoch(model, batches, optimizer):
        scaler, seen = torch.amp.GradScaler("cuda"), 0
        for images, targets in batches:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(images.cuda()), targets.cuda())
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            seen += len(images)
        return seen


    def train(model, batches, optimizer, epochs):
        for _ in range(epochs):
            train_one_epoch(model, batches, optimizer)
"""


def test_a_scaler_built_in_a_tuple_of_an_epoch_helper_is_rebuilt_every_epoch() -> None:
    assert _found(SCALER_IN_A_PAIR) == [(6, "DL303")]


def test_scaler_twin_handed_in_by_the_caller_is_clean() -> None:
    fixed = (
        SCALER_IN_A_PAIR.replace('scaler, seen = torch.amp.GradScaler("cuda"), 0', "seen = 0")
        .replace(
            "def train_one_epoch(model, batches, optimizer):", "def train_one_epoch(model, batches, optimizer, scaler):"
        )
        .replace(
            "        for _ in range(epochs):\n            train_one_epoch(model, batches, optimizer)",
            '        scaler = torch.amp.GradScaler("cuda")\n        for _ in range(epochs):\n'
            "            train_one_epoch(model, batches, optimizer, scaler)",
        )
    )
    assert _found(fixed) == []


LOADERS_BY_SPLIT = """
    import torch
    import torchvision
    from torchvision import transforms

    tf = transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.ToTensor()])
    loaders = {
        "train": torch.utils.data.DataLoader(torchvision.datasets.CIFAR10("data", transform=tf), batch_size=128),
        "val": None,
    }
    net = torchvision.models.resnet18(num_classes=10).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(90):
        for images, labels in loaders["train"]:
            loss = torch.nn.functional.cross_entropy(net(images.cuda()), labels.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def _found_opt_in(source: str, code: str) -> list[tuple[int, str]]:
    rules = (*DEFAULT.rules, find_rule(code))
    result = lint_source(textwrap.dedent(source), "train.py", EngineOptions(rules=rules))  # type: ignore[arg-type]  # the code is registered
    return [(f.line, f.code) for f in result.findings]


def test_a_loader_read_from_a_dict_of_splits_loads_in_the_main_process() -> None:
    assert _found_opt_in(LOADERS_BY_SPLIT, "DL404") == [(8, "DL404")]


def test_loaders_twin_with_workers_is_clean() -> None:
    fixed = LOADERS_BY_SPLIT.replace("batch_size=128)", "batch_size=128, num_workers=8)")
    assert _found_opt_in(fixed, "DL404") == []


DEVICE_IN_SETTINGS = """
    import dataclasses

    import torch
    from torch.utils.data import DataLoader


    @dataclasses.dataclass
    class RunSettings:
        device: torch.device
        epochs: int = 1


    def run(dataset, make_model):
        settings = RunSettings(torch.device("cuda"), epochs=3)
        with settings.device:
            model = make_model()
            loader = DataLoader(dataset, batch_size=32, shuffle=True)
            for _ in range(settings.epochs):
                for x in loader:
                    model(x).sum().backward()
"""


def test_a_default_device_read_from_a_record_breaks_a_shuffling_loader() -> None:
    assert _found(DEVICE_IN_SETTINGS) == [(18, "DL114")]


def test_device_in_settings_twin_with_a_cuda_generator_is_clean() -> None:
    fixed = DEVICE_IN_SETTINGS.replace("shuffle=True)", 'shuffle=True, generator=torch.Generator(device="cuda"))')
    assert _found(fixed) == []


REPLICAS = """
    import torch
    import torch.nn as nn


    def train(model, batches, lr):
        placed = [model.to("cuda:1"), lr]
        net = placed[0]
        net = nn.DataParallel(net)
        opt = torch.optim.SGD(net.parameters(), lr=placed[1])
        for x, y in batches:
            loss = nn.functional.mse_loss(net(x.to("cuda:1")), y.to("cuda:1"))
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_model_read_back_from_a_list_after_a_move_to_cuda_1_is_not_on_device_ids_0() -> None:
    assert (9, "DL202") in _found(REPLICAS)


def test_replicas_twin_on_cuda_0_is_clean_of_dl202() -> None:
    assert all(code != "DL202" for _, code in _found(REPLICAS.replace('"cuda:1"', '"cuda:0"')))


PLACEHOLDER_IN_A_LIST = """
    import torch
    from torch import nn


    class Quantizer(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            self.register_buffer("beta", torch.tensor(0.25))

        def forward(self, x):
            q = self.proj(x)
            parts = [(q - x.detach()).pow(2).mean() if self.training else torch.tensor(0.0), q]
            commit, out = parts
            return out, self.beta * commit
"""


def test_a_scalar_placeholder_read_back_from_a_list_only_as_an_operand_is_clean() -> None:
    assert _found(PLACEHOLDER_IN_A_LIST) == []


def test_placeholder_twin_that_hands_the_value_on_is_reported() -> None:
    handed = PLACEHOLDER_IN_A_LIST.replace(
        "return out, self.beta * commit", "self.history.append(commit)\n            return out, self.beta * commit"
    )
    assert _found(handed) == [(14, "DL101")]


METRICS_UNPACKED = """
    import torchmetrics


    class Meters:
        def __init__(self, classes):
            self.top1, self.top5 = (
                torchmetrics.Accuracy(task="multiclass", num_classes=classes),
                torchmetrics.Accuracy(task="multiclass", num_classes=classes, top_k=5),
            )

        def add(self, logits, labels):
            self.top1.update(logits, labels)
            self.top5.update(logits, labels)


    def validate(model, batches, device):
        model.to(device)
        meters = Meters(100)
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            meters.add(model(x), y)
"""


def test_metrics_unpacked_into_a_helper_s_attributes_are_on_the_cpu() -> None:
    assert _found(METRICS_UNPACKED) == [(8, "DL113"), (9, "DL113")]


def test_metrics_unpacked_twin_moved_where_built_is_clean() -> None:
    fixed = METRICS_UNPACKED.replace("num_classes=classes),", "num_classes=classes).cuda(),").replace(
        "top_k=5),", "top_k=5).cuda(),"
    )
    assert _found(fixed) == []


LAYERS_AND_LOSS_IN_A_PAIR = """
    import torch
    import torch.nn as nn


    class Stack(nn.Module):
        def __init__(self, depth, width):
            super().__init__()
            blocks = [nn.Linear(width, width) for _ in range(depth)]
            built = (blocks, depth)
            self.blocks, self.depth = built

        def forward(self, x):
            for block in self.blocks:
                x = block(x).relu()
            return x


    def setup(model, counts, device):
        model.to(device)
        parts = {"loss": nn.CrossEntropyLoss(weight=torch.tensor(counts, dtype=torch.float32))}
        criterion = parts["loss"]
        return model, criterion
"""


def test_layers_unpacked_into_a_plain_list_and_a_loss_read_back_from_a_dict() -> None:
    assert _found(LAYERS_AND_LOSS_IN_A_PAIR) == [(10, "DL103"), (21, "DL106")]


def test_layers_and_loss_twin_registered_and_moved_is_clean() -> None:
    fixed = LAYERS_AND_LOSS_IN_A_PAIR.replace(
        "built = (blocks, depth)", "built = (nn.ModuleList(blocks), depth)"
    ).replace("dtype=torch.float32))}", "dtype=torch.float32)).to(device)}")
    assert _found(fixed) == []


WRAPPER_IN_A_RECORD = """
    import dataclasses

    import torch.nn as nn


    @dataclasses.dataclass
    class Built:
        net: nn.Module
        name: str


    def build(width, multi):
        net = nn.Sequential(nn.Linear(width, width), nn.ReLU())
        if multi:
            out = Built(nn.DataParallel(net), "mlp")
            net = out.net
        return net


    def run(batches):
        model = build(32, True)
        return [model(b.cuda()) for b in batches]
"""


def test_a_wrapper_read_back_from_a_record_and_returned_is_never_moved() -> None:
    assert _found(WRAPPER_IN_A_RECORD) == [(16, "DL202")]


def test_wrapper_in_a_record_twin_moved_first_is_clean_of_dl202() -> None:
    moved = WRAPPER_IN_A_RECORD.replace("nn.DataParallel(net)", "nn.DataParallel(net.cuda())")
    assert all(code != "DL202" for _, code in _found(moved))


HALT_TEST_IN_A_PAIR = """
    import torch


    def fit(model, loader, opt, limit):
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
            halt, why = torch.isnan(loss), "nan loss"
            if halt:
                print(why)
                break
"""


def test_a_device_test_unpacked_from_a_pair_syncs_every_step() -> None:
    assert _found(HALT_TEST_IN_A_PAIR) == [(12, "DL401")]


def test_halt_twin_testing_a_python_int_is_clean() -> None:
    assert _found(HALT_TEST_IN_A_PAIR.replace('torch.isnan(loss), "nan loss"', 'step >= limit, "step limit"')) == []


KEPT_BY_UNPACKING = """
    import torch.nn as nn


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(32, 64, batch_first=True)
            self.out = nn.Linear(64, 9)

        def forward(self, x):
            states, last = self.rnn(x)
            self.last_states, self.last_hidden = states.detach(), last
            return self.out(states)


    def run(batches):
        model = nn.DataParallel(Tagger().cuda())
        return [model(b.cuda()) for b in batches]
"""


def test_attributes_unpacked_in_forward_under_dataparallel_are_lost() -> None:
    assert _found(KEPT_BY_UNPACKING) == [(13, "DL203"), (13, "DL203")]  # each attribute


def test_kept_by_unpacking_twin_that_returns_the_states_is_clean() -> None:
    fixed = KEPT_BY_UNPACKING.replace(
        "            self.last_states, self.last_hidden = states.detach(), last\n", ""
    ).replace("return self.out(states)", "return self.out(states), last")
    assert _found(fixed) == []


LOADED_IN_A_PAIR = """
    import torch


    def restore(model, path, strict):
        state, options = torch.load(path), {"strict": strict}
        model.load_state_dict(state, **options)
        return model.cuda()
"""


def test_a_checkpoint_unpacked_from_a_pair_still_needs_a_map_location() -> None:
    assert _found(LOADED_IN_A_PAIR) == [(6, "DL501")]


def test_loaded_pair_twin_read_only_by_numpy_is_clean() -> None:
    host = LOADED_IN_A_PAIR.replace(
        "model.load_state_dict(state, **options)\n        return model.cuda()",
        "return torch.from_numpy(state[options['strict']])",
    )
    assert _found(host) == []


MOVED_BY_THE_HELPER = """
    import torch
    import torch.nn as nn


    def tint(image, palette):
        palette, scale = palette.to(image.device), 0.5
        return image * palette.view(1, 3, 1, 1) * scale


    class Tint(nn.Module):
        def __init__(self):
            super().__init__()
            self.palette = torch.tensor([0.2, 0.3, 0.5])

        def forward(self, image):
            return tint(image, self.palette)
"""


def test_a_helper_that_moves_its_parameter_by_unpacking_needs_no_buffer() -> None:
    assert _found(MOVED_BY_THE_HELPER) == []


def test_moved_by_the_helper_twin_that_forgets_the_move_is_reported() -> None:
    forgot = MOVED_BY_THE_HELPER.replace("palette.to(image.device), 0.5", "palette, 0.5")
    assert _found(forgot) == [(14, "DL102")]


# -- a one-`return` helper stands for the call it returns, in the caller's words ------------------

BUILT_BY_A_HELPER = """
    import torch


    def build_optimizer(first, second, lr):
        return torch.optim.Adam([first, second], lr=lr)


    def fit(x, y, device, steps=50):
        weight = torch.randn(x.size(1), 1, requires_grad=True)
        bias = torch.zeros(1, requires_grad=True)
        optimizer = build_optimizer(weight, bias, 1e-3)
        weight = weight.to(device)
        x, y = x.to(device), y.to(device)
        for _ in range(steps):
            loss = ((x @ weight + bias.to(device)) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_an_optimizer_built_by_a_helper_holds_what_the_caller_passed() -> None:
    assert _found(BUILT_BY_A_HELPER) == [(12, "DL111")]


def test_helper_built_optimizer_twin_on_device_tensors_is_clean() -> None:
    fixed = BUILT_BY_A_HELPER.replace(
        "weight = torch.randn(x.size(1), 1, requires_grad=True)",
        "weight = torch.randn(x.size(1), 1, device=device, requires_grad=True)",
    ).replace("        weight = weight.to(device)\n", "")
    assert fixed != BUILT_BY_A_HELPER and _found(fixed) == []


# -- a helper reached only under a TorchScript/tracing branch runs only there -------------------

SCRIPTED_HELPER = """
    import torch
    import torch.nn as nn


    def baked_offsets(x):
        return torch.tensor([[0.0, 1.0], [1.0, 0.0]], device=x.device)


    class Shift(nn.Module):
        def forward(self, x):
            if torch.jit.is_scripting():
                return x + baked_offsets(x).sum()
            return x + 1.0
"""


def test_a_constant_made_in_a_helper_only_scripting_calls_is_not_per_step() -> None:
    assert _found(SCRIPTED_HELPER) == []


def test_scripted_helper_twin_called_on_the_eager_path_copies_every_step() -> None:
    eager = SCRIPTED_HELPER.replace("return x + 1.0", "return x + baked_offsets(x).mean()")
    assert eager != SCRIPTED_HELPER and [code for _, code in _found(eager)] == ["DL405"]


# -- a load-or-build cache whose save sits in a one-line helper --------------------------------

CACHE_SAVED_BY_A_HELPER = """
    import os

    import numpy as np
    import torch


    def _write_cache(train_ids, val_ids, path):
        return torch.save((train_ids, val_ids), path)


    def split_ids(root, total, seed=0):
        path = os.path.join(root, "split.pt")
        if os.path.exists(path):
            train_ids, val_ids = torch.load(path)
        else:
            order = np.random.default_rng(seed).permutation(total)
            train_ids, val_ids = order[: total // 2], order[total // 2 :]
            _write_cache(train_ids, val_ids, path)
        return train_ids, val_ids
"""


def test_a_cache_saved_through_a_helper_reads_back_only_its_own_parts() -> None:
    assert _found(CACHE_SAVED_BY_A_HELPER) == []


def test_cache_helper_twin_that_saves_gpu_copies_is_a_checkpoint_load() -> None:
    # the cache now holds CUDA tensors: a machine without the GPU cannot read it back
    other = CACHE_SAVED_BY_A_HELPER.replace(
        "            _write_cache(train_ids, val_ids, path)",
        "            _write_cache(torch.as_tensor(train_ids).cuda(), val_ids, path)",
    )
    assert other != CACHE_SAVED_BY_A_HELPER and _found(other) == [(15, "DL501")]


# -- a DataParallel wrapper whose first call comes before the model is handed on --------------

WRAPPED_THEN_RETURNED = """
    import torch
    import torch.nn as nn


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(32, 64, batch_first=True)
            self.out = nn.Linear(64, 9)

        def forward(self, x):
            return self.out(self.rnn(x)[0])


    def fit_tagger(batches, gpus=(2, 3)):
        tagger = Tagger()
        tagger = nn.DataParallel(tagger, device_ids=list(gpus))
        opt = torch.optim.SGD(tagger.parameters(), lr=0.1)
        for words, tags in batches:
            scores = tagger(words.cuda(gpus[0]))
            loss = nn.functional.cross_entropy(scores.flatten(0, 1), tags.cuda(gpus[0]).flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        return tagger
"""


def test_dataparallel_called_before_the_wrapper_is_returned_still_needs_the_model_moved() -> None:
    # returning the wrapper after the loop hands it on too late: its first call already ran
    assert _found(WRAPPED_THEN_RETURNED) == [(18, "DL202")]


def test_dataparallel_twin_moved_before_wrapping_is_clean() -> None:
    fixed = WRAPPED_THEN_RETURNED.replace("tagger = Tagger()", "tagger = Tagger().cuda(gpus[0])")
    assert _found(fixed) == []


# -- a loop helper handed a moved model and the caller's own loader ---------------------------

HANDED_LOADER = """
    import torch
    import torch.nn as nn


    def score_epoch(net, val_loader, loss_fn):
        net.eval()
        total = 0.0
        with torch.no_grad():
            for batch in val_loader:
                feats, labels = batch["feats"], batch["labels"]
                total += loss_fn(net(feats), labels).item()
        return total


    def run(cfg, val_loader):
        net = nn.Sequential(nn.Linear(cfg.width, 64), nn.ReLU(), nn.Linear(64, cfg.classes))
        net = net.to(cfg.device)
        return score_epoch(net, val_loader, nn.CrossEntropyLoss())
"""


def test_a_loader_passed_on_from_the_callers_parameter_still_yields_host_batches() -> None:
    # the followed run binds `val_loader` to "nothing known": it is read as the helper's own
    # analysis reads it, a loader of host batches, now beside a model the caller moved
    assert _found(HANDED_LOADER) == [(12, "DL105"), (12, "DL105")]


def test_handed_loader_twin_that_moves_the_batch_is_clean() -> None:
    fixed = HANDED_LOADER.replace(
        'feats, labels = batch["feats"], batch["labels"]',
        'feats, labels = batch["feats"].to(cfg_device(net)), batch["labels"].to(cfg_device(net))',
    ).replace("def run(cfg", "def cfg_device(net):\n        return next(net.parameters()).device\n\n\n    def run(cfg")
    assert [code for _, code in _found(fixed) if code == "DL105"] == []


# -- a method of a module class called on an instance from outside the class -----------------

INSTANCE_METHOD_STATE = """
    import torch
    import torch.nn as nn


    class Speller(nn.Module):
        def __init__(self, vocab, width=320):
            super().__init__()
            self.width = width
            self.embed = nn.Embedding(vocab, width)
            self.cell = nn.LSTMCell(width, width)
            self.proj = nn.Linear(width, vocab)

        def blank_state(self, batch):
            h = torch.full((batch, self.width), 0.0)
            return h, h.clone()

        def forward(self, token, state):
            h, c = self.cell(self.embed(token), state)
            return self.proj(h), (h, c)


    def greedy_decode(vocab, first_tokens, steps, device):
        speller = Speller(vocab).to(device)
        token = first_tokens.to(device)
        state = speller.blank_state(token.size(0))
        out = []
        for _ in range(steps):
            logits, state = speller(token, state)
            token = logits.argmax(-1)
            out.append(token)
        return torch.stack(out, 1)
"""


def test_a_state_built_by_a_method_called_on_a_moved_instance_is_on_the_cpu() -> None:
    assert _found(INSTANCE_METHOD_STATE) == [(15, "DL101")]


def test_instance_method_state_twin_built_on_the_module_device_is_clean() -> None:
    fixed = INSTANCE_METHOD_STATE.replace(
        "torch.full((batch, self.width), 0.0)", "torch.full((batch, self.width), 0.0, device=self.proj.weight.device)"
    )
    assert _found(fixed) == []


STACKED_CELLS = """
    import torch
    import torch.nn as nn


    class GatedCell(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.size = size
            self.gates = nn.Linear(2 * size, 2 * size)

        def start_state(self, batch):
            return torch.randn(batch, self.size) * 0.01

        def forward(self, x, h):
            z, r = self.gates(torch.cat([x, h], -1)).sigmoid().chunk(2, -1)
            return (1 - z) * h + z * torch.tanh(r * x)


    class Stack(nn.Module):
        def __init__(self, size, depth):
            super().__init__()
            self.cells = nn.ModuleList(GatedCell(size) for _ in range(depth))

        def forward(self, seq):
            states = []
            for k in range(len(self.cells)):
                states.append(self.cells[k].start_state(seq.size(0)))
            for t in range(seq.size(1)):
                x = seq[:, t]
                for k in range(len(self.cells)):
                    states[k] = self.cells[k](x, states[k])
                    x = states[k]
            return x
"""


def test_a_state_from_a_method_of_a_cell_in_a_module_list_is_on_the_cpu() -> None:
    # `self.cells[k]` is an element of a ModuleList: its class is the one module class of the
    # file with that method, and calling the element is a module call on the model's device
    assert _found(STACKED_CELLS) == [(13, "DL101")]


def test_stacked_cells_twin_that_builds_the_state_beside_the_weights_is_clean() -> None:
    fixed = STACKED_CELLS.replace(
        "torch.randn(batch, self.size) * 0.01", "torch.randn(batch, self.size, device=self.gates.weight.device) * 0.01"
    )
    assert _found(fixed) == []


# -- host state of a plain class, fed device values by its caller ----------------------------

CONFUSION_BANK = """
    import torch


    class Confusion:
        def __init__(self, classes):
            self.classes = classes
            self.reset()

        def reset(self):
            self.table = torch.zeros(self.classes, self.classes, dtype=torch.long)

        def add(self, predicted, actual):
            flat = actual * self.classes + predicted
            self.table += torch.bincount(flat, minlength=self.classes**2).view(self.classes, self.classes)

        def recall(self):
            return (self.table.diag() / self.table.sum(1).clamp(min=1)).tolist()


    def validate(net, batches, classes, device):
        net.eval()
        bank = Confusion(classes)
        with torch.no_grad():
            for images, labels in batches:
                scores = net(images.to(device))
                bank.add(scores.argmax(1), labels.to(device))
        return bank.recall()
"""


def test_a_host_table_a_plain_class_builds_meets_the_device_values_its_caller_feeds() -> None:
    assert _found(CONFUSION_BANK) == [(11, "DL101")]


def test_host_table_twin_that_moves_what_it_is_fed_is_clean() -> None:
    fixed = CONFUSION_BANK.replace(
        "flat = actual * self.classes + predicted", "flat = (actual * self.classes + predicted).cpu()"
    )
    assert _found(fixed) == []


# -- a loader batch handed to a trainer object's method --------------------------------------

TRAINER_OBJECT = """
    import torch


    class Runner:
        def __init__(self, net, device):
            self.net = net.to(device)
            self.optim = torch.optim.SGD(self.net.parameters(), lr=0.01)

        def fit_step(self, batch):
            out = self.net(batch["pixels"])
            loss = torch.nn.functional.mse_loss(out, batch["target"])
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()


    def run(net, loader):
        runner = Runner(net, "cuda")
        for batch in loader:
            runner.fit_step(batch)
"""


def test_a_loader_batch_handed_to_a_trainer_objects_method_is_followed_as_a_batch() -> None:
    # the batch flowing in is known (it comes from a loader): the method is followed with it
    assert _found(TRAINER_OBJECT) == [(11, "DL105"), (12, "DL105")]


def test_trainer_object_twin_that_moves_the_batch_first_is_clean() -> None:
    fixed = TRAINER_OBJECT.replace(
        "            runner.fit_step(batch)", "            runner.fit_step({k: v.cuda() for k, v in batch.items()})"
    )
    assert _found(fixed) == []


# -- a DataLoader's collate_fn passed by the name a `partial(...)` was bound to ----------------

COLLATE_BOUND_TO_A_NAME = """
    import functools

    import torch
    from torch.utils.data import DataLoader


    def stack_pairs(dev, samples):
        xs = torch.stack([s[0] for s in samples])
        ys = torch.stack([s[1] for s in samples])
        return xs.to(dev), ys.to(dev)


    def main(samples):
        dev = torch.device("cuda")
        model = torch.nn.Linear(8, 1).to(dev)
        collate = functools.partial(stack_pairs, dev)
        loader = DataLoader(samples, batch_size=16, collate_fn=collate)
        for xs, ys in loader:
            loss = (model(xs) - ys).pow(2).mean()
            loss.backward()
"""


def test_a_collate_bound_to_a_name_that_moves_each_batch_yields_device_batches() -> None:
    assert _found(COLLATE_BOUND_TO_A_NAME) == []


def test_collate_by_name_twin_that_returns_host_tensors_leaves_the_batch_on_the_cpu() -> None:
    other = COLLATE_BOUND_TO_A_NAME.replace("return xs.to(dev), ys.to(dev)", "return xs, ys")
    assert other != COLLATE_BOUND_TO_A_NAME and _found(other) == [(20, "DL105"), (20, "DL105")]


# -- a module that is never moved, run on CPU inputs, keeps its buffers on the CPU too ----------

NEVER_MOVED_MODULE_ON_CPU_INPUTS = """
    import torch
    import torch.nn as nn


    class Scale(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.w = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return x * self.w


    class Clipped(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = nn.Linear(n, n)
            self.register_buffer("ceiling", torch.full((n,), 3.0))

        def forward(self, x):
            h = self.lin(x)
            return torch.minimum(h, self.ceiling)


    sample = torch.randn(4, 8)
    print(Scale(8)(sample))
    clip = Clipped(8)
    print(clip(sample))
"""


def test_a_never_moved_module_run_on_cpu_inputs_meets_no_device_buffer() -> None:
    # the call on CPU inputs says where `h` is in that run, not where the buffer is
    assert _found(NEVER_MOVED_MODULE_ON_CPU_INPUTS) == []


def test_never_moved_twin_with_a_plain_attribute_on_a_moved_module_still_mixes_devices() -> None:
    other = (
        NEVER_MOVED_MODULE_ON_CPU_INPUTS.replace(
            'self.register_buffer("ceiling", torch.full((n,), 3.0))', "self.ceiling = torch.full((n,), 3.0)"
        )
        .replace("clip = Clipped(8)", 'clip = Clipped(8).to("cuda")')
        .replace("print(clip(sample))", 'print(clip(sample.to("cuda")))')
    )
    assert _found(other) == [(19, "DL102"), (23, "DL116")]


# -- a load whose other branch, under the program's own device switch, maps to the host ---------

LOAD_UNDER_A_DEVICE_SWITCH = """
    import torch


    class Runner:
        def __init__(self, net, on_gpu):
            self.net = net.cuda() if on_gpu else net
            self.on_gpu = on_gpu

        def restore(self, path):
            state = torch.load(path) if self.on_gpu else torch.load(path, map_location=torch.device("cpu"))
            self.net.load_state_dict(state)
"""


def test_a_load_whose_switch_sibling_maps_to_the_host_was_placed_by_the_author() -> None:
    assert _found(LOAD_UNDER_A_DEVICE_SWITCH) == []


def test_device_switch_twin_whose_sibling_maps_to_a_gpu_still_lacks_a_host_mapping() -> None:
    other = LOAD_UNDER_A_DEVICE_SWITCH.replace('torch.device("cpu")', 'torch.device("cuda", 0)')
    assert other != LOAD_UNDER_A_DEVICE_SWITCH and _found(other) == [(11, "DL501")]


# -- a host copy on the code's own CPU path, chosen by a device test ----------------------------

HOST_COPY_ON_THE_CPU_PATH = """
    import torch
    import torch.nn as nn


    class SignedAngle(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.proj = nn.Linear(n, n)

        def forward(self, a, b):
            u = self.proj(a)
            v = self.proj(b)
            if not u.is_cuda:
                side = v.gt(0).type(torch.FloatTensor)
                return torch.atan2(u, v) * side
            side = v.gt(0).type(torch.cuda.FloatTensor)
            return torch.atan2(u, v) * side
"""


def test_a_host_copy_on_the_path_a_device_test_takes_without_a_gpu_meets_host_inputs() -> None:
    assert _found(HOST_COPY_ON_THE_CPU_PATH) == []


def test_cpu_path_twin_whose_test_is_not_about_the_device_still_mixes_devices() -> None:
    other = HOST_COPY_ON_THE_CPU_PATH.replace("if not u.is_cuda:", "if u.dim() > 1:")
    assert other != HOST_COPY_ON_THE_CPU_PATH and _found(other) == [(16, "DL116")]


# -- a cast of a Parameter to the dtype it already has returns the Parameter -------------------

PARAMETER_CAST_TO_ITS_OWN_DTYPE = """
    import torch
    import torch.nn as nn


    class Gate(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.scale = nn.Parameter(torch.zeros(n)).to(torch.float32)
            self.proj = nn.Linear(n, n)

        def forward(self, x):
            return self.proj(x) * torch.sigmoid(self.scale)
"""


def test_a_parameter_cast_to_the_dtype_it_has_is_still_registered() -> None:
    assert _found(PARAMETER_CAST_TO_ITS_OWN_DTYPE) == []


def test_parameter_cast_twin_to_another_dtype_leaves_a_plain_cpu_tensor() -> None:
    other = PARAMETER_CAST_TO_ITS_OWN_DTYPE.replace(".to(torch.float32)", ".half()")
    assert other != PARAMETER_CAST_TO_ITS_OWN_DTYPE and _found(other) == [(9, "DL102")]


# -- a plain dict that only offers submodules to pick one from while building -------------------

PLAIN_DICT_OF_CHOICES = """
    import torch.nn as nn


    class Encoder(nn.Module):
        def __init__(self, arch, dim):
            super().__init__()
            self.arch = arch
            self.choices = {"small": nn.Linear(dim, dim), "large": nn.Sequential(nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim))}
            self.net = self.choices[arch]

        def forward(self, x):
            return self.net(x)
"""


def test_a_plain_dict_only_offering_the_module_an_attribute_takes_loses_nothing() -> None:
    assert _found(PLAIN_DICT_OF_CHOICES) == []


def test_plain_dict_twin_read_in_forward_keeps_its_modules_off_the_device() -> None:
    other = PLAIN_DICT_OF_CHOICES.replace("return self.net(x)", "return self.choices[self.arch](x)")
    assert other != PLAIN_DICT_OF_CHOICES and _found(other) == [(9, "DL103")]


# -- a tensor made from a number bound once at module level is 0-dim ----------------------------

TENSOR_OF_A_MODULE_NUMBER = """
    import torch
    import torch.nn as nn

    MARGIN = 0.2


    class Hinge(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.proj = nn.Linear(n, 1)
            self.margin = torch.tensor(MARGIN)

        def forward(self, x, y):
            score = self.proj(x).squeeze(-1)
            return torch.clamp(self.margin - score * y, min=0).mean()
"""


def test_a_tensor_of_a_module_level_number_is_a_0_dim_value_any_device_takes() -> None:
    assert _found(TENSOR_OF_A_MODULE_NUMBER) == []


def test_module_number_twin_with_a_list_constant_is_a_cpu_tensor_left_behind() -> None:
    other = TENSOR_OF_A_MODULE_NUMBER.replace("MARGIN = 0.2", "MARGIN = [0.2, 0.1]")
    assert other != TENSOR_OF_A_MODULE_NUMBER and _found(other) == [(12, "DL102")]


# -- a program that never names an accelerator reads back what it saved ------------------------

CPU_PROGRAM_ROUND_TRIP = """
    import torch
    import torch.nn as nn


    def save_ckpt(net, path):
        torch.save({"state": net.state_dict()}, path)


    def restore(path):
        blob = torch.load(path)
        net = nn.Linear(4, 2)
        net.load_state_dict(blob["state"])
        return net


    if __name__ == "__main__":
        net = nn.Linear(4, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(10):
            opt.zero_grad()
            net(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
        save_ckpt(net, "linear.pt")
        print(restore("linear.pt"))
"""


def test_a_cpu_only_program_reading_back_its_own_checkpoint_needs_no_map_location() -> None:
    assert _found(CPU_PROGRAM_ROUND_TRIP) == []


def test_cpu_program_twin_that_trains_on_the_gpu_saves_device_tensors() -> None:
    other = CPU_PROGRAM_ROUND_TRIP.replace(
        "        net = nn.Linear(4, 2)\n        opt", "        net = nn.Linear(4, 2).cuda()\n        opt"
    )
    other = other.replace("torch.randn(8, 4)", 'torch.randn(8, 4, device="cuda")')
    assert other != CPU_PROGRAM_ROUND_TRIP and _found(other) == [(11, "DL501")]


CONVERTER_WITH_SAME_FILE_NAMES = """
    import os

    import torch


    def convert(src_path, dst_path):
        state = torch.load(src_path)
        state["version"] = 2
        torch.save(state, dst_path)


    def main(src_dir, dst_dir):
        convert(os.path.join(src_dir, "model.pt"), os.path.join(dst_dir, "model.pt"))
"""


def test_a_converter_handed_input_and_output_of_one_file_name_still_reads_a_checkpoint() -> None:
    # the names passed in match, the folders do not: this is no round trip of one file
    assert _found(CONVERTER_WITH_SAME_FILE_NAMES) == [(8, "DL501")]


# -- Fabric places the module it sets up, not the state an optimizer already loaded ---------------

FABRIC_RESUME = """
    from lightning.fabric import Fabric
    import torch
    from torch import nn


    class Runner:
        def __init__(self, net: nn.Module, lr: float):
            self.fabric = Fabric(accelerator="gpu", devices=1)
            self.net = net
            self.opt = torch.optim.SGD(self.net.parameters(), lr=lr, momentum=0.9)

        def restore(self, path):
            blob = torch.load(path, map_location="cpu")
            self.net.load_state_dict(blob["net"])
            self.opt.load_state_dict(blob["opt"])

        def prepare(self):
            self.net = self.fabric.setup_module(self.net)
            self.opt = self.fabric.setup_optimizers(self.opt)

        def run(self, path, batches):
            self.restore(path)
            self.prepare()
            for x, y in batches:
                loss = nn.functional.mse_loss(self.net(x), y)
                self.opt.zero_grad()
                self.fabric.backward(loss)
                self.opt.step()
"""


def test_optimizer_state_loaded_before_fabric_sets_the_module_up() -> None:
    assert _found(FABRIC_RESUME) == [(16, "DL111")]
    assert "`self.fabric.setup_module(self.net)`" in _messages(FABRIC_RESUME)[0]


def test_fabric_twin_that_restores_after_set_up_is_clean() -> None:
    fixed = FABRIC_RESUME.replace(
        "            self.restore(path)\n            self.prepare()\n",
        "            self.prepare()\n            self.restore(path)\n",
    )
    assert _found(fixed) == []


def test_accelerate_prepare_moves_the_optimizer_state_too() -> None:
    prepared = (
        FABRIC_RESUME.replace("from lightning.fabric import Fabric", "from accelerate import Accelerator")
        .replace('Fabric(accelerator="gpu", devices=1)', "Accelerator()")
        .replace("setup_module(self.net)", "prepare_model(self.net)")
        .replace("setup_optimizers(self.opt)", "prepare_optimizer(self.opt)")
    )
    assert _found(prepared) == []


# -- a call that spreads arguments (`tile(grid, *self.layout)`) binds those before the spread -----

SPREAD = """
    import torch
    import torch.nn as nn


    def tile(t, rows, cols):
        c = t.shape[0]
        return t.reshape(c, rows, t.shape[1] // rows, cols, t.shape[2] // cols).flatten(1, 2).flatten(2)


    def anchor_grid(height, width):
        ys = torch.linspace(0.0, 1.0, height)
        xs = torch.linspace(0.0, 1.0, width)
        return torch.stack(torch.meshgrid(ys, xs, indexing="ij"))


    class PatchSelector(nn.Module):
        def __init__(self, channels, layout=(2, 2), keep=0.3):
            super().__init__()
            self.layout = layout
            self.keep = keep
            self.score = nn.Conv2d(channels, 1, 3, padding=1)

        def forward(self, fmap):
            grid = anchor_grid(*fmap.shape[-2:])
            tiles = tile(grid, *self.layout)
            scores = tile(self.score(fmap)[0], *self.layout)
            chosen = torch.topk(scores[0].mean(-1), k=max(1, int(self.keep * scores.shape[1]))).indices
            return tiles.index_select(1, chosen)
"""


def test_spread_arguments_bind_the_leading_ones_and_topk_indices_stay_on_device() -> None:
    assert _found(SPREAD) == [(12, "DL101")]
    assert "meets the device tensor `chosen` in `tiles.index_select(1, chosen)`" in _messages(SPREAD)[0]


def test_spread_twin_that_builds_the_grid_on_the_feature_device_is_clean() -> None:
    fixed = (
        SPREAD.replace("def anchor_grid(height, width):", "def anchor_grid(height, width, device=None):")
        .replace("height)\n", "height, device=device)\n")
        .replace("width)\n", "width, device=device)\n")
        .replace("anchor_grid(*fmap.shape[-2:])", "anchor_grid(*fmap.shape[-2:], device=fmap.device)")
    )
    assert _found(fixed) == []


def test_a_spread_leaves_the_parameters_it_may_fill_unknown_not_defaulted() -> None:
    spread_device = """
        import torch


        def blank(n, device="cpu"):
            return torch.zeros(n, device=device)


        def pad_scores(scores, extra):
            return torch.cat([scores.cuda(), blank(4, *extra)])
    """
    assert _found(spread_device) == []
    assert _found(spread_device.replace("blank(4, *extra)", "blank(4)")) == [(6, "DL101")]


# -- a metric built in a module's method (or inline where it is fed) never follows the module ------

METRIC_IN_METHOD = """
    import torch
    from torch import nn
    from torchmetrics.classification import BinaryAUROC, MulticlassAccuracy


    class Scorer(nn.Module):
        def __init__(self, dim, classes):
            super().__init__()
            self.head = nn.Linear(dim, classes)
            self.classes = classes

        def forward(self, feats):
            return self.head(feats)

        def report(self, feats, labels):
            logits = self(feats)
            tracker = MulticlassAccuracy(num_classes=self.classes)
            tracker.update(logits.argmax(-1), labels)
            return tracker.compute()


    def auroc(scores, targets, device):
        return BinaryAUROC()(scores.to(device), targets.to(device))
"""


def test_a_metric_local_to_a_module_method_and_an_inline_one_are_never_moved() -> None:
    assert _found(METRIC_IN_METHOD) == [(18, "DL113"), (24, "DL113")]


def test_metric_twins_held_by_the_module_and_moved_inline_are_clean() -> None:
    fixed = (
        METRIC_IN_METHOD.replace(
            "            self.classes = classes\n",
            "            self.classes = classes\n            self.tracker = MulticlassAccuracy(num_classes=classes)\n",
        )
        .replace(
            "            tracker = MulticlassAccuracy(num_classes=self.classes)\n",
            "            tracker = self.tracker\n",
        )
        .replace("BinaryAUROC()(", "BinaryAUROC().to(device)(")
    )
    assert _found(fixed) == []


# -- the loss a helper backpropagates, and what is unpacked with it, are device values ------------

HANDED_LOSS = """
    import torch


    class Accumulator:
        def __init__(self, model, optimizer, accum_steps):
            self.model = model
            self.optimizer = optimizer
            self.accum_steps = accum_steps

        def _forward(self, batch):
            logits = self.model(batch["input"])
            loss = torch.nn.functional.cross_entropy(logits, batch["target"])
            correct = (logits.argmax(-1) == batch["target"]).sum()
            return loss, correct

        def _backprop(self, loss):
            (loss / self.accum_steps).backward()

        def fit(self, loader, epochs):
            for _ in range(epochs):
                for batches in loader:
                    hits = 0
                    for batch in batches:
                        loss, correct = self._forward(batch)
                        self._backprop(loss)
                        hits += correct.item()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
"""


def test_a_value_unpacked_with_a_loss_that_a_helper_backpropagates_syncs_per_micro_batch() -> None:
    assert _found(HANDED_LOSS) == [(27, "DL401")]


def test_handed_loss_twin_that_accumulates_on_the_device_is_clean() -> None:
    assert _found(HANDED_LOSS.replace("hits += correct.item()", "hits += correct")) == []


# -- forward returns a host tensor it knowingly keeps there (it moves a copy itself) ---------------

HOST_TABLE_RETURNED = """
    import torch
    from torch import nn


    class Detector(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.head = nn.Linear(dim, 4)

        def forward(self, feats):
            anchors = torch.arange(feats.shape[0]).float()
            boxes = self.head(feats) + anchors[:, None].to(feats.device)
            return boxes, anchors
"""


def test_forward_returning_a_host_table_it_moves_a_copy_of_is_clean() -> None:
    assert _found(HOST_TABLE_RETURNED) == []


def test_forward_returning_a_host_table_it_never_moves_is_reported() -> None:
    unmoved = HOST_TABLE_RETURNED.replace(" + anchors[:, None].to(feats.device)", "")
    assert _found(unmoved) == [(12, "DL101")]


# -- a host tensor built at import, read where device tensors are ----------------------------

IMPORT_TIME_TABLE = """
    import torch
    import torch.nn as nn

    GAMMA_TABLE = torch.linspace(0, 1, 256).pow(2.2)


    class ToLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Conv2d(3, 3, 1)

        def forward(self, codes):
            return self.proj(GAMMA_TABLE[codes.long()].permute(0, 3, 1, 2) * codes.float())
"""


def test_a_host_tensor_built_at_import_meets_the_device_inputs_it_is_read_with() -> None:
    # where it is built (DL101), and where device indices read it (DL116)
    assert _found(IMPORT_TIME_TABLE) == [(5, "DL101"), (14, "DL116")]


def test_import_time_table_twin_registered_as_a_buffer_is_clean() -> None:
    fixed = IMPORT_TIME_TABLE.replace(
        "self.proj = nn.Conv2d(3, 3, 1)",
        'self.proj = nn.Conv2d(3, 3, 1)\n            self.register_buffer("table", GAMMA_TABLE, persistent=False)',
    ).replace("GAMMA_TABLE[codes.long()]", "self.table[codes.long()]")
    assert _found(fixed) == []


# -- a `while` loop that takes its batches with `next()` walks the iterator's loader ---------------

RESTARTED_ITERATOR = """
    import torch
    from torch.utils.data import DataLoader


    def train_steps(model, dataset, optimizer, total_steps):
        train_loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2)
        stream = iter(train_loader)
        step = 0
        while step < total_steps:
            try:
                images, labels = next(stream)
            except StopIteration:
                stream = iter(train_loader)
                continue
            images = images.cuda(non_blocking=True)
            labels = labels.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
"""


def test_a_restarted_next_loop_copies_from_the_unpinned_loader() -> None:
    assert _found(RESTARTED_ITERATOR) == [(16, "DL402"), (17, "DL402")]


def test_restarted_next_loop_twin_with_pinned_memory_is_clean() -> None:
    fixed = RESTARTED_ITERATOR.replace("num_workers=2)", "num_workers=2, pin_memory=True)")
    assert fixed != RESTARTED_ITERATOR and _found(fixed) == []


PER_EPOCH_SCALER_NEXT_LOOP = """
    import torch


    def fit(net, loader, opt, epochs):
        for epoch in range(epochs):
            amp = torch.amp.GradScaler('cuda')
            batches = iter(loader)
            while True:
                try:
                    feats, target = next(batches)
                except StopIteration:
                    break
                with torch.autocast("cuda"):
                    loss = (net(feats.cuda()) - target.cuda()).abs().mean()
                amp.scale(loss).backward()
                amp.step(opt)
                amp.update()
                opt.zero_grad()
"""


def test_the_end_of_a_next_loop_is_no_retry_and_a_scaler_per_epoch_is_found() -> None:
    assert _found(PER_EPOCH_SCALER_NEXT_LOOP) == [(7, "DL303")]


def test_scaler_per_epoch_twin_built_once_is_clean() -> None:
    fixed = PER_EPOCH_SCALER_NEXT_LOOP.replace("            amp = torch.amp.GradScaler('cuda')\n", "").replace(
        "        for epoch in range(epochs):\n",
        "        amp = torch.amp.GradScaler('cuda')\n        for epoch in range(epochs):\n",
    )
    assert fixed != PER_EPOCH_SCALER_NEXT_LOOP and _found(fixed) == []


# -- a helper's return in the caller's words: a default device, a scaler, a wrapper ----------------

DEVICE_FROM_A_HELPER = """
    import torch
    from torch.utils.data import DataLoader


    def on(kind, index):
        return torch.device(kind, index)


    def run(dataset, make_model):
        with on("cuda", 0):
            model = make_model()
            loader = DataLoader(dataset, batch_size=16, shuffle=True)
            for batch in loader:
                model(batch)
"""


def test_a_with_block_on_a_helper_s_device_sets_the_default_for_the_sampler() -> None:
    assert _found(DEVICE_FROM_A_HELPER) == [(13, "DL114")]


def test_helper_device_twin_on_the_cpu_is_clean() -> None:
    fixed = DEVICE_FROM_A_HELPER.replace('with on("cuda", 0):', 'with on("cpu", 0):')
    assert fixed != DEVICE_FROM_A_HELPER and _found(fixed) == []


SCALER_FROM_A_METHOD = """
    import torch


    class Runner:
        def __init__(self, net, opt):
            self.net, self.opt = net, opt

        def _new_scaler(self, start):
            return torch.amp.GradScaler("cuda", init_scale=start)

        def fit(self, loader, epochs):
            for epoch in range(epochs):
                amp = self._new_scaler(2.0**14)
                for x, y in loader:
                    with torch.autocast("cuda"):
                        loss = (self.net(x.cuda()) - y.cuda()).pow(2).mean()
                    amp.scale(loss).backward()
                    amp.step(self.opt)
                    amp.update()
                    self.opt.zero_grad()
"""


def test_a_scaler_a_method_builds_on_every_epoch_is_found_whatever_its_name() -> None:
    assert _found(SCALER_FROM_A_METHOD) == [(14, "DL303")]


def test_scaler_from_a_method_twin_built_once_is_clean() -> None:
    fixed = SCALER_FROM_A_METHOD.replace("                amp = self._new_scaler(2.0**14)\n", "").replace(
        "            for epoch in range(epochs):\n",
        "            amp = self._new_scaler(2.0**14)\n            for epoch in range(epochs):\n",
    )
    assert fixed != SCALER_FROM_A_METHOD and _found(fixed) == []


NESTED_WRAPPER_BUILDERS = """
    import torch.nn as nn


    class Factory:
        @staticmethod
        def _spread(module):
            return nn.DataParallel(module)

        @classmethod
        def build(cls, width):
            head = nn.Sequential(nn.Linear(width, width), nn.Tanh())
            return cls._spread(head)


    def score(batches):
        scorer = Factory.build(8)
        return [scorer(b.cuda()) for b in batches]
"""


def test_a_wrapper_handed_back_through_two_builders_is_never_moved() -> None:
    assert _found(NESTED_WRAPPER_BUILDERS) == [(13, "DL202")]


def test_nested_builders_twin_that_moves_the_head_is_clean() -> None:
    fixed = NESTED_WRAPPER_BUILDERS.replace("nn.Tanh())", "nn.Tanh()).cuda()")
    assert fixed != NESTED_WRAPPER_BUILDERS and _found(fixed) == []


# -- a helper's step operations on an object it is handed, in the caller's words -----------------

UPDATED_THROUGH_A_HANDED_OBJECT = """
    import torch


    def settle(run):
        run.amp.update()


    class Accumulator:
        def __init__(self, net, opt, parts):
            self.net, self.opt, self.parts = net, opt, parts
            self.amp = torch.amp.GradScaler("cuda")

        def step(self, x, y):
            for xs, ys in zip(x.chunk(self.parts), y.chunk(self.parts)):
                with torch.autocast("cuda"):
                    loss = torch.nn.functional.mse_loss(self.net(xs), ys)
                self.amp.scale(loss).backward()
                settle(self)
            self.amp.step(self.opt)
            self.opt.zero_grad()
"""


def test_an_update_a_helper_runs_on_the_handed_trainer_per_micro_batch_is_found() -> None:
    assert _found(UPDATED_THROUGH_A_HANDED_OBJECT) == [(19, "DL307")]


def test_handed_update_twin_after_the_step_is_clean() -> None:
    fixed = UPDATED_THROUGH_A_HANDED_OBJECT.replace("                settle(self)\n", "").replace(
        "            self.amp.step(self.opt)\n", "            self.amp.step(self.opt)\n            settle(self)\n"
    )
    assert fixed != UPDATED_THROUGH_A_HANDED_OBJECT and _found(fixed) == []


SKIPPED_HANDED_UPDATE = """
    import torch


    class Loop:
        def __init__(self, net, opt):
            self.net, self.opt = net, opt
            self.amp = torch.amp.GradScaler("cuda")

        @classmethod
        def _settle(cls, owner):
            owner.amp.update()

        def train(self, loader):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = torch.nn.functional.l1_loss(self.net(x), y)
                self.amp.scale(loss).backward()
                self.amp.unscale_(self.opt)
                norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), 5.0)
                if torch.isfinite(norm):
                    self.amp.step(self.opt)
                    self._settle(self)
                self.opt.zero_grad()
"""


def test_an_update_a_class_method_runs_is_skipped_after_unscale() -> None:
    assert _found(SKIPPED_HANDED_UPDATE) == [(23, "DL303")]


def test_skipped_handed_update_twin_updating_every_pass_is_clean() -> None:
    fixed = SKIPPED_HANDED_UPDATE.replace(
        "                    self._settle(self)\n                self.opt.zero_grad()\n",
        "                self._settle(self)\n                self.opt.zero_grad()\n",
    )
    assert fixed != SKIPPED_HANDED_UPDATE and _found(fixed) == []


# -- a helper that hands back what it was given, and a scaler switched off by its own flag --------

HANDED_BACK_BLOCKS = """
    import torch.nn as nn


    def checked(block, name):
        assert isinstance(block, nn.Module), name
        return block


    class Heads(nn.Module):
        def __init__(self, names, width):
            super().__init__()
            self.heads = {}
            for name in names:
                self.heads[name] = checked(nn.Linear(width, 1), name)

        def forward(self, x):
            return {name: head(x) for name, head in self.heads.items()}
"""


def test_blocks_a_helper_hands_back_are_still_kept_in_a_plain_dict() -> None:
    assert _found(HANDED_BACK_BLOCKS) == [(15, "DL103")]


def test_handed_back_blocks_twin_in_a_module_dict_is_clean() -> None:
    fixed = HANDED_BACK_BLOCKS.replace("self.heads = {}", "self.heads = nn.ModuleDict()")
    assert fixed != HANDED_BACK_BLOCKS and _found(fixed) == []


SCALER_SWITCHED_BY_ITS_FLAG = """
    import torch


    def run(net, batches, opt, half):
        grads = torch.amp.GradScaler("cuda", enabled=half)
        for x, y in batches:
            with torch.autocast("cuda", enabled=half):
                loss = torch.nn.functional.mse_loss(net(x), y)
            grads.scale(loss).backward()
            grads.step(opt)
            if half:
                grads.update()
            opt.zero_grad()
"""


def test_an_update_under_the_scaler_s_own_enabled_flag_runs_whenever_it_matters() -> None:
    assert _found(SCALER_SWITCHED_BY_ITS_FLAG) == []


def test_scaler_flag_twin_whose_update_waits_for_another_test_is_reported() -> None:
    other = SCALER_SWITCHED_BY_ITS_FLAG.replace("            if half:\n", "            if warm:\n").replace(
        "opt, half):", "opt, half, warm):"
    )
    assert other != SCALER_SWITCHED_BY_ITS_FLAG and _found(other) == [(13, "DL303")]


# -- a helper handed the instance fills the class's containers, with its callers' arguments --------

STASHED_THROUGH_THE_INSTANCE = """
    import torch
    import torch.nn as nn


    class Codebook(nn.Module):
        def __init__(self, names, size, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            self.tables = {}
            for name in names:
                Codebook._stash(self, name, torch.randn(size, dim))

        @staticmethod
        def _stash(owner, key, table):
            owner.tables[key] = table

        def forward(self, x, name):
            return torch.cdist(self.proj(x), self.tables[name]).argmin(-1)
"""


def test_tensors_a_static_helper_stores_through_the_instance_stay_on_the_cpu() -> None:
    assert _found(STASHED_THROUGH_THE_INSTANCE) == [(16, "DL102")]


def test_stashed_twin_in_a_parameter_dict_is_clean() -> None:
    fixed = STASHED_THROUGH_THE_INSTANCE.replace("self.tables = {}", "self.tables = nn.ParameterDict()").replace(
        "owner.tables[key] = table", "owner.tables[key] = nn.Parameter(table)"
    )
    assert fixed != STASHED_THROUGH_THE_INSTANCE and _found(fixed) == []


ATTACHED_THROUGH_THE_INSTANCE = """
    import torch.nn as nn


    def attach(model, block):
        model.blocks.append(block)


    class Tower(nn.Module):
        def __init__(self, depth, width):
            super().__init__()
            self.blocks = []
            for _ in range(depth):
                attach(self, nn.Linear(width, width))

        def forward(self, x):
            for block in self.blocks:
                x = block(x).relu()
            return x
"""


def test_layers_a_helper_appends_through_the_instance_are_not_registered() -> None:
    assert _found(ATTACHED_THROUGH_THE_INSTANCE) == [(6, "DL103")]


def test_attached_twin_in_a_module_list_is_clean() -> None:
    fixed = ATTACHED_THROUGH_THE_INSTANCE.replace("self.blocks = []", "self.blocks = nn.ModuleList()")
    assert fixed != ATTACHED_THROUGH_THE_INSTANCE and _found(fixed) == []


# -- a trainer object's loss with class weights from a parameter -----------------------------

TRAINER_LOSS_WEIGHTS = """
    import torch
    from torch import nn


    class Learner:
        def __init__(self, net, counts, device="cuda"):
            self.device = device
            self.net = net
            freq = [c / sum(counts) for c in counts]
            self.loss_fn = nn.NLLLoss(weight=torch.FloatTensor([1.0 / f for f in freq]))

        def fit(self, batches):
            self.net.to(self.device)
            for feats, labels in batches:
                out = self.net(feats.to(self.device)).log_softmax(-1)
                self.loss_fn(out, labels.to(self.device)).backward()
"""


def test_a_trainers_loss_built_with_host_class_weights_meets_its_device_outputs() -> None:
    assert _found(TRAINER_LOSS_WEIGHTS) == [(11, "DL106")]


def test_trainer_loss_weights_twin_with_the_weights_on_the_device_is_clean() -> None:
    fixed = TRAINER_LOSS_WEIGHTS.replace("for f in freq]))", "for f in freq], device=device))")
    assert _found(fixed) == []


HOST_CONFUSION_TABLE = """
    import torch


    class Scorer:
        def __init__(self, net, labels, device):
            self.net = net.to(device)
            self.device = device
            self.hits = torch.zeros(labels, labels)

        def score(self, batches):
            for x, y in batches:
                guess = self.net(x.to(self.device)).argmax(-1)
                for truth, said in zip(y.to(self.device), guess):
                    self.hits[truth, said] += 1
            return self.hits
"""


def test_a_host_table_of_a_plain_class_meets_the_device_values_its_own_method_makes() -> None:
    # its own run reads `self.hits` as `__init__` built it: device indices into a host table
    assert _found(HOST_CONFUSION_TABLE) == [(15, "DL116")]


def test_host_table_twin_built_on_the_device_is_clean() -> None:
    fixed = HOST_CONFUSION_TABLE.replace("torch.zeros(labels, labels)", "torch.zeros(labels, labels, device=device)")
    assert _found(fixed) == []


# -- a class is one unit: a value one method leaves on `self.b`, kept as `self.a` in another ------


ALIASED_LEVELS = """
    import torch
    from torch import nn


    class Calibrator(nn.Module):
        def __init__(self, levels, width):
            super().__init__()
            self.head = nn.Linear(width, len(levels))
            self._load_levels(levels)
            self.levels = self._levels_t

        def _load_levels(self, values):
            self._levels_t = torch.as_tensor(values)

        def forward(self, feats):
            return self.head(feats) * self.levels
"""


def test_a_tensor_a_helper_method_leaves_on_self_and_init_keeps_under_another_name_is_reported() -> None:
    # `self.levels = self._levels_t`: what `_load_levels` built from the constructor's data
    assert _found(ALIASED_LEVELS) == [(11, "DL102")]


def test_aliased_levels_twin_moved_where_forward_uses_it_is_clean() -> None:
    fixed = ALIASED_LEVELS.replace("* self.levels", "* self.levels.to(feats.device)")
    assert _found(fixed) == []


RETURNED_TABLE = """
    import torch
    from torch import nn


    class Mixer(nn.Module):
        def __init__(self, weights, gain: float, width):
            super().__init__()
            self.proj = nn.Linear(width, width)
            self.weights = self._as_tensor(weights)
            self.gain = self._as_tensor(gain)

        def _as_tensor(self, values):
            return torch.tensor(values)

        def forward(self, x):
            return self.proj(x) * self.weights * self.gain
"""


def test_a_method_returning_a_tensor_of_its_parameter_is_read_in_the_callers_words() -> None:
    # `self._as_tensor(weights)` is `torch.tensor(weights)`; the float `gain` makes a 0-dim tensor
    assert _found(RETURNED_TABLE) == [(10, "DL102")]


def test_returned_table_twin_registered_as_a_buffer_is_clean() -> None:
    fixed = RETURNED_TABLE.replace(
        "self.weights = self._as_tensor(weights)", 'self.register_buffer("weights", self._as_tensor(weights))'
    )
    assert _found(fixed) == []


ALIASED_METRIC = """
    import torch
    import torchmetrics


    class Tracker:
        def __init__(self, classes):
            self._build(classes)
            self.f1 = self._made

        def _build(self, classes):
            self._made = torchmetrics.F1Score(task="multiclass", num_classes=classes)

        def step(self, logits, labels):
            self.f1.update(logits.argmax(-1), labels)


    def run(net, batches, device):
        net = net.to(device)
        tracker = Tracker(5)
        for feats, labels in batches:
            tracker.step(net(feats.to(device)), labels.to(device))
        return tracker.f1.compute()
"""


def test_a_metric_a_helper_method_builds_and_the_wrapper_keeps_under_another_name_is_reported() -> None:
    assert _found(ALIASED_METRIC) == [(12, "DL113")]


def test_aliased_metric_twin_built_on_the_device_is_clean() -> None:
    fixed = ALIASED_METRIC.replace("num_classes=classes)\n", 'num_classes=classes).to("cuda")\n')
    assert _found(fixed) == []


ALIASED_EMPTY_LIST = """
    import torch
    from torch import nn


    class Tower(nn.Module):
        def __init__(self, depth, width):
            super().__init__()
            self._reset()
            self.stages = self._fresh
            for _ in range(depth):
                self.stages.append(nn.Linear(width, width))

        def _reset(self):
            self._fresh = []

        def forward(self, x):
            for stage in self.stages:
                x = stage(x).relu()
            return x
"""


def test_a_list_a_helper_method_leaves_on_self_filled_with_layers_under_another_name_is_reported() -> None:
    assert _found(ALIASED_EMPTY_LIST) == [(12, "DL103")]


def test_aliased_empty_list_twin_made_a_module_list_is_clean() -> None:
    fixed = ALIASED_EMPTY_LIST.replace("self._fresh = []", "self._fresh = nn.ModuleList()")
    assert _found(fixed) == []


PASSED_THROUGH_LIST = """
    import torch
    from torch import nn


    class Pyramid(nn.Module):
        def __init__(self, widths):
            super().__init__()
            convs = []
            for a, b in zip(widths, widths[1:]):
                convs.append(nn.Conv2d(a, b, 3, padding=1))
            self.convs = Pyramid._checked(convs)

        @staticmethod
        def _checked(items):
            return items

        def forward(self, x):
            return [conv(x) for conv in self.convs]
"""


def test_a_local_list_of_layers_passed_through_a_static_method_is_still_the_callers_list() -> None:
    # `_checked(items)` only returns its parameter: the list is kept, not handed on
    assert _found(PASSED_THROUGH_LIST) == [(12, "DL103")]


def test_passed_through_list_twin_wrapped_in_a_module_list_is_clean() -> None:
    fixed = PASSED_THROUGH_LIST.replace(
        "self.convs = Pyramid._checked(convs)", "self.convs = nn.ModuleList(Pyramid._checked(convs))"
    )
    assert _found(fixed) == []


STORED_FLAG = """
    import torch


    class Loop:
        def __init__(self, model, opt):
            self.model = model
            self.opt = opt

        def _check(self, loss):
            self.bad = torch.isnan(loss)

        def fit(self, loader):
            self.model.cuda()
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
                self._check(loss)
                if self.bad:
                    continue
                loss.backward()
                self.opt.step()
                self.opt.zero_grad()
"""


def test_a_flag_a_helper_method_stores_from_the_loss_is_a_host_read_where_the_step_tests_it() -> None:
    # `self._check(loss)` leaves `self.bad = torch.isnan(loss)`: the caller's device loss
    assert _found(STORED_FLAG) == [(18, "DL401")]


def test_stored_flag_twin_testing_the_host_batch_is_clean() -> None:
    fixed = STORED_FLAG.replace("self._check(loss)", "self._check(x)")
    assert _found(fixed) == []


ALIASED_ROLLOUT = """
    import torch


    class Rollout:
        def __init__(self, obs, acts, rews):
            self.obs = torch.as_tensor(obs)
            self.acts = torch.as_tensor(acts)
            self._keep(rews)
            self.rews = self._r

        def _keep(self, values):
            self._r = torch.tensor(values, dtype=torch.float32)

        def to(self, device):
            self.obs = self.obs.to(device)
            self.acts = self.acts.to(device)
            return self
"""


def test_a_plain_holders_tensor_left_by_a_helper_method_and_forgotten_by_its_to_is_reported() -> None:
    assert _found(ALIASED_ROLLOUT) == [(10, "DL112")]


def test_aliased_rollout_twin_whose_to_moves_it_is_clean() -> None:
    fixed = ALIASED_ROLLOUT.replace(
        "self.acts = self.acts.to(device)\n",
        "self.acts = self.acts.to(device)\n            self.rews = self.rews.to(device)\n",
    )
    assert _found(fixed) == []


# -- a helper's step effects in the caller's words ---------------------------------------------

BACKWARD_HELPER_OF_HELPER_LOSS = """
    import torch


    def backprop(value):
        value.backward()


    class Runner:
        def __init__(self, net, opt):
            self.net = net
            self.opt = opt

        def _forward(self, x, y):
            with torch.autocast("cuda", dtype=torch.float16):
                return torch.nn.functional.cross_entropy(self.net(x), y)

        def run(self, loader):
            for x, y in loader:
                loss = self._forward(x.cuda(), y.cuda())
                backprop(loss)
                self.opt.step()
                self.opt.zero_grad()
"""


def test_a_module_function_backpropagating_a_loss_a_method_computes_under_fp16_is_reported() -> None:
    # `backprop(loss)` runs `value.backward()` on what `_forward` returns from under autocast
    assert _found(BACKWARD_HELPER_OF_HELPER_LOSS) == [(21, "DL301")]


def test_backward_helper_twin_under_bfloat16_is_clean() -> None:
    fixed = BACKWARD_HELPER_OF_HELPER_LOSS.replace("dtype=torch.float16", "dtype=torch.bfloat16")
    assert _found(fixed) == []


STEP_IN_A_FUNCTION_HANDED_THE_TRAINER = """
    import torch


    def apply_update(trainer):
        trainer.opt.step()
        trainer.opt.zero_grad()


    class Trainer:
        def __init__(self, net, opt):
            self.net = net
            self.opt = opt
            self.scaler = torch.amp.GradScaler("cuda")

        def backward_pass(self, batch):
            with torch.autocast("cuda"):
                loss = self.net(batch).mean()
            self.scaler.scale(loss).backward()

        def update(self):
            apply_update(self)
            self.scaler.update()

        def fit(self, loader):
            for batch in loader:
                self.backward_pass(batch)
                self.update()
"""


def test_a_function_handed_the_trainer_that_steps_its_optimizer_bypasses_the_classs_scaler() -> None:
    assert _found(STEP_IN_A_FUNCTION_HANDED_THE_TRAINER) == [(22, "DL302")]


def test_step_function_twin_stepping_through_the_scaler_is_clean() -> None:
    fixed = STEP_IN_A_FUNCTION_HANDED_THE_TRAINER.replace(
        "    trainer.opt.step()", "    trainer.scaler.step(trainer.opt)"
    )
    assert _found(fixed) == []


CLIP_IN_A_HELPER_METHOD = """
    import torch
    from torch import nn


    class Engine:
        def __init__(self, net, opt):
            self.net = net
            self.opt = opt
            self.scaler = torch.amp.GradScaler("cuda")

        def _limit(self):
            nn.utils.clip_grad_value_(self.net.parameters(), 0.5)

        def train_step(self, batch):
            with torch.autocast("cuda"):
                loss = self.net(batch).mean()
            self.scaler.scale(loss).backward()

        def apply(self):
            self._limit()
            self.scaler.step(self.opt)
            self.scaler.update()
            self.opt.zero_grad()

        def fit(self, loader):
            for batch in loader:
                self.train_step(batch)
                self.apply()
"""


def test_a_helper_method_clipping_between_the_callers_scaled_backward_and_the_step_is_reported() -> None:
    # the scaled backward is in `train_step`; `fit` calls `apply` after it, and `apply` clips in `_limit`
    assert _found(CLIP_IN_A_HELPER_METHOD) == [(21, "DL304")]


def test_clip_helper_twin_unscaling_first_is_clean() -> None:
    fixed = CLIP_IN_A_HELPER_METHOD.replace(
        "        self._limit()", "        self.scaler.unscale_(self.opt)\n            self._limit()"
    )
    assert _found(fixed) == []


TOKENS_HANDED_TO_A_METHOD = """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer


    class Judge:
        def __init__(self, checkpoint):
            self.device = "cuda"
            self.tok = AutoTokenizer.from_pretrained(checkpoint)
            self.net = AutoModelForSequenceClassification.from_pretrained(checkpoint).to(self.device)

        def _logits(self, inputs):
            return self.net(**inputs).logits

        @torch.no_grad()
        def predict(self, texts):
            inputs = self.tok(texts, padding=True, truncation=True, return_tensors="pt")
            return self._logits(inputs).argmax(-1)
"""


def test_a_tokenizers_output_handed_to_a_method_that_feeds_the_moved_model_is_reported() -> None:
    # `self._logits(inputs)` is followed with the caller's CPU tokens: they meet `self.net` there
    assert _found(TOKENS_HANDED_TO_A_METHOD) == [(13, "DL105")]


def test_tokens_handed_to_a_method_twin_moving_them_there_is_clean() -> None:
    fixed = TOKENS_HANDED_TO_A_METHOD.replace(
        "        return self.net(**inputs).logits",
        "        inputs = {k: v.to(self.device) for k, v in inputs.items()}\n            return self.net(**inputs).logits",
    )
    assert _found(fixed) == []


TEST_IN_A_HELPER = """
    import torch


    def too_large(value, limit):
        return value > limit


    def train(model, loader, opt, limit=10.0):
        model.cuda()
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            if too_large(loss, limit):
                continue
            loss.backward()
            opt.step()
            opt.zero_grad()
"""


def test_a_helper_returning_a_comparison_of_the_callers_device_loss_is_a_host_read_in_the_if() -> None:
    assert _found(TEST_IN_A_HELPER) == [(13, "DL401")]


def test_test_helper_twin_on_host_numbers_is_clean() -> None:
    assert _found(TEST_IN_A_HELPER.replace("if too_large(loss, limit):", "if too_large(len(x), 1):")) == []


METRIC_HANDED_TO_A_HOLDER_METHOD = """
    import torch
    import torchmetrics


    class Scorer:
        def __init__(self):
            self.bank = {}

        def add(self, name, metric):
            self.bank[name] = metric

        def update(self, preds, target):
            for metric in self.bank.values():
                metric.update(preds, target)


    def evaluate(net, loader, classes):
        net = net.to("cuda")
        scorer = Scorer()
        scorer.add("acc", torchmetrics.Accuracy(task="multiclass", num_classes=classes))
        for x, y in loader:
            scorer.update(net(x.cuda()).argmax(-1), y.cuda())
        return scorer
"""


def test_a_metric_handed_to_a_plain_holders_method_that_keeps_it_is_the_callers_metric() -> None:
    # `scorer.add("acc", Accuracy(...))` running `self.bank[name] = metric`, fed device predictions
    assert _found(METRIC_HANDED_TO_A_HOLDER_METHOD) == [(21, "DL113")]


def test_metric_handed_to_a_holder_twin_moved_when_built_is_clean() -> None:
    fixed = METRIC_HANDED_TO_A_HOLDER_METHOD.replace("num_classes=classes))", 'num_classes=classes).to("cuda"))')
    assert _found(fixed) == []


# -- set re: a number that `+=` turns into a host tensor -------------------------------------------

NUMBER_PLUS_HOST_TENSOR = """
    import torch
    from torch import nn


    def stochastic_depth(feats, rate, active):
        if not active:
            return feats
        survive = 1.0 - rate
        gate = survive
        gate += torch.rand((feats.size(0), 1, 1))
        return feats * gate.floor() / survive


    class Stage(nn.Module):
        def __init__(self, dim, rate):
            super().__init__()
            self.rate = rate
            self.mix = nn.Linear(dim, dim)

        def forward(self, tokens):
            return tokens + stochastic_depth(self.mix(tokens), self.rate, self.training)
"""


def test_a_number_grown_with_a_host_random_tensor_by_plus_equals_meets_device_features() -> None:
    # `gate` starts as a float (of a parameter) and `+=` rebinds it to the CPU tensor `torch.rand` makes
    assert _found(NUMBER_PLUS_HOST_TENSOR) == [(11, "DL101")]


def test_number_plus_host_tensor_twin_drawn_on_the_features_device_is_clean() -> None:
    fixed = NUMBER_PLUS_HOST_TENSOR.replace("1, 1))", "1, 1), device=feats.device)")
    assert _found(fixed) == []


def test_a_number_grown_with_a_host_tensor_that_stays_on_the_host_is_clean() -> None:
    # the same accumulation over host data only: nothing meets the device
    host_only = NUMBER_PLUS_HOST_TENSOR.replace("self.mix(tokens)", "tokens.cpu()").replace(
        "return tokens +", "return tokens.cpu() +"
    )
    assert _found(host_only) == []


# -- set re: a recording `to()` inherited by the object whose result the file uses ----------------

RECORDING_MOVER = """
    import torch


    class Corpus:
        def __init__(self, rows):
            self.rows = rows
            self.target = None

        def cuda(self, where=None):
            self.target = where

        def batches(self, size):
            for i in range(0, len(self.rows), size):
                yield torch.as_tensor(self.rows[i : i + size], device=self.target)


    class Reviews(Corpus):
        pass


    def prepare(rows, where):
        corpus = Reviews(rows)
        corpus = corpus.cuda(where)
        return list(corpus.batches(16))
"""


def test_an_inherited_mover_that_only_records_the_device_returns_none_where_its_result_is_used() -> None:
    assert _found(RECORDING_MOVER) == [(24, "DL112")]
    assert "`Corpus.cuda()` has no `return`" in _messages(RECORDING_MOVER)[0]


def test_recording_mover_twin_returning_self_is_clean() -> None:
    fixed = RECORDING_MOVER.replace("self.target = where\n", "self.target = where\n            return self\n")
    assert _found(fixed) == []


def test_recording_mover_called_as_a_statement_is_clean() -> None:
    # the override records the device in place, as designed, when nothing uses its result
    fixed = RECORDING_MOVER.replace("corpus = corpus.cuda(where)", "corpus.cuda(where)")
    assert _found(fixed) == []


def test_a_subclass_with_its_own_returning_mover_is_clean() -> None:
    fixed = RECORDING_MOVER.replace(
        "class Reviews(Corpus):\n        pass",
        "class Reviews(Corpus):\n        def cuda(self, where=None):\n            self.target = where\n            return self",
    )
    assert _found(fixed) == []


# -- set re: a metric class of the file, and a model output's fields ------------------------------

OWN_METRIC_CLASS = """
    import torch
    from torchmetrics.aggregation import SumMetric


    class Counted(SumMetric):
        pass


    class TokenErrors(Counted):
        def compute(self):
            return self.sum_value.long()


    class Report:
        def __init__(self):
            self.errors = TokenErrors()

        def add(self, model, tokens, where):
            guesses = model.to(where)(tokens.to(where)).argmax(-1)
            self.errors.update((guesses != tokens.to(where)).float())
"""


def test_a_metric_class_of_the_file_deriving_from_torchmetrics_is_a_metric() -> None:
    assert _found(OWN_METRIC_CLASS) == [(17, "DL113")]


def test_own_metric_class_twin_moved_to_the_device_is_clean() -> None:
    fixed = OWN_METRIC_CLASS.replace(
        "self.errors.update(", "self.errors = self.errors.to(where)\n            self.errors.update("
    )
    assert _found(fixed) == []


def test_a_plain_class_of_the_file_named_like_a_metric_is_not_one() -> None:
    plain = OWN_METRIC_CLASS.replace("class Counted(SumMetric):", "class Counted:").replace(
        "from torchmetrics.aggregation import SumMetric", "import torchmetrics"
    )
    assert _found(plain) == []


MODEL_OUTPUT_FIELDS = """
    import torch
    from torchmetrics import MeanMetric
    from transformers import AutoModel


    def embedding_norms(name, batches, device):
        encoder = AutoModel.from_pretrained(name).to(device).eval()
        norms = MeanMetric()
        with torch.no_grad():
            for ids in batches:
                states = encoder(ids.to(device)).last_hidden_state
                norms.update(states.norm(dim=-1))
        return norms.compute()
"""


def test_a_field_of_a_device_models_output_object_is_on_its_device() -> None:
    # `encoder(...)` returns an output object: no tensor has `last_hidden_state`
    assert _found(MODEL_OUTPUT_FIELDS) == [(9, "DL113")]


def test_model_output_fields_twin_with_the_metric_on_the_device_is_clean() -> None:
    fixed = MODEL_OUTPUT_FIELDS.replace("norms = MeanMetric()", "norms = MeanMetric().to(device)")
    assert _found(fixed) == []


# -- set re: `module.forward(x)` on a moved value of unknown kind ---------------------------------

EXPLICIT_FORWARD = """
    import numpy as np
    import torch


    class Ranker:
        def __init__(self, scorer, device):
            self.scorer = scorer.to(device)

        def features(self, rows):
            raise NotImplementedError

        def rank(self, rows):
            with torch.no_grad():
                scores = self.scorer.forward(self.features(rows)).squeeze(-1)
            return np.argsort(-scores.numpy())
"""


def test_an_explicit_forward_of_a_moved_model_is_its_call() -> None:
    # `scorer.to(device)` has a `forward`: a module on the device, whatever the (unknown) input
    assert _found(EXPLICIT_FORWARD) == [(16, "DL108")]


def test_explicit_forward_twin_copied_to_the_host_first_is_clean() -> None:
    fixed = EXPLICIT_FORWARD.replace("scores.numpy()", "scores.cpu().numpy()")
    assert _found(fixed) == []


# -- set re: a model moved two helpers down, after its optimizer's state was loaded ---------------

STATE_BEFORE_NESTED_MOVE = """
    import torch
    from torch import nn


    def place(net, where):
        if where is not None:
            net = net.to(where)
        return net


    def make_stepper(net, opt, where):
        net = place(net, where)

        def step(x, y):
            opt.zero_grad()
            nn.functional.mse_loss(net(x.to(where)), y.to(where)).backward()
            opt.step()

        return step


    def fit(net, opt, batches, where):
        step = make_stepper(net, opt, where)
        for x, y in batches:
            step(x, y)


    def main(ckpt, batches):
        net = nn.Linear(8, 1)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        opt.load_state_dict(torch.load(ckpt, map_location="cpu")["opt"])
        fit(net, opt, batches, torch.device("cuda"))
"""


def test_an_optimizer_state_loaded_before_a_move_two_helpers_down_is_found() -> None:
    assert _found(STATE_BEFORE_NESTED_MOVE) == [(32, "DL111")]


def test_state_before_nested_move_twin_moving_the_state_in_the_helper_is_clean() -> None:
    fixed = STATE_BEFORE_NESTED_MOVE.replace(
        "        net = place(net, where)\n",
        "        net = place(net, where)\n"
        "        for slot in opt.state.values():\n"
        "            for key, value in slot.items():\n"
        "                if torch.is_tensor(value):\n"
        "                    slot[key] = value.to(where)\n",
    )
    assert _found(fixed) == []


def test_state_before_nested_move_twin_moving_the_model_first_is_clean() -> None:
    fixed = STATE_BEFORE_NESTED_MOVE.replace(
        "net = nn.Linear(8, 1)\n", 'net = nn.Linear(8, 1).to(torch.device("cuda"))\n'
    )
    assert _found(fixed) == []


# -- set re: a script-wide default device, and a helper's explicit CPU default --------------------

SCRIPT_DEFAULT_DEVICE = """
    import torch


    class Pose:
        def __init__(self, turn=None, where="cpu"):
            self.matrix = torch.eye(3, device=where)
            if turn is not None:
                self.matrix = torch.mm(self.matrix, turn)


    def rotation(angle):
        c, s = torch.cos(angle), torch.sin(angle)
        return torch.stack([torch.stack([c, -s, c * 0]), torch.stack([s, c, c * 0]), torch.stack([c * 0, c * 0, c / c])])


    def chain(angles):
        return [Pose(turn=rotation(torch.tensor(a))) for a in angles]


    if __name__ == "__main__":
        torch.set_default_device("cuda")
        print(chain([0.1, 0.2])[0].matrix)
"""


def test_a_cpu_default_parameter_meets_tensors_the_scripts_default_device_builds() -> None:
    # the `__main__` block makes CUDA the default for what it runs: `torch.tensor(a)` is a CUDA
    # tensor, `torch.eye(3, device="cpu")` (the parameter's default) is not
    assert _found(SCRIPT_DEFAULT_DEVICE) == [(7, "DL101")]


def test_script_default_device_twin_building_on_the_turns_device_is_clean() -> None:
    fixed = SCRIPT_DEFAULT_DEVICE.replace(
        "return [Pose(turn=rotation(torch.tensor(a))) for a in angles]",
        "return [Pose(turn=(r := rotation(torch.tensor(a))), where=r.device) for a in angles]",
    )
    assert _found(fixed) == []


def test_a_default_set_under_a_condition_is_not_script_wide() -> None:
    # `if use_gpu:` may leave the CPU default: factories stay unknown, nothing is claimed
    conditional = SCRIPT_DEFAULT_DEVICE.replace(
        '        torch.set_default_device("cuda")\n',
        '        if torch.cuda.is_available():\n            torch.set_default_device("cuda")\n',
    )
    assert _found(conditional) == []  # (a default set in `__main__` is the script's own: no DL110)


def test_loader_batches_under_a_script_wide_default_are_not_known_host_tensors() -> None:
    # the dataset builds its items under the CUDA default: the batches may well be CUDA tensors
    source = """
    import torch
    from torch.utils.data import DataLoader, Dataset

    torch.set_default_tensor_type("torch.cuda.FloatTensor")


    class Rays(Dataset):
        def __init__(self, rays):
            self.rays = rays

        def __len__(self):
            return len(self.rays)

        def __getitem__(self, i):
            return torch.tensor(self.rays[i])


    def train(model, rays):
        near = torch.ones(1) * 2.0
        for batch in DataLoader(Rays(rays), batch_size=1024):
            model(batch[:, :3] + near).mean().backward()
    """
    assert [code for _, code in _found(source)] == ["DL110"]


# -- a script that never names an accelerator trains on the CPU (fresh33) ----------------------

HOST_ONLY_SCRIPT = """
    import numpy as np
    import torch
    import torch.nn as nn


    class Scorer(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(width, 16), nn.Tanh(), nn.Linear(16, 1))

        def forward(self, x):
            return self.body(x).squeeze(-1)


    def fit(build, width, rounds=100, record=print):
        net = build(width)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        xs = torch.as_tensor(np.random.randn(256, width), dtype=torch.float32)
        ys = xs.sum(-1)

        def one_round():
            opt.zero_grad()
            err = ((net(xs) - ys) ** 2).mean()
            err.backward()
            opt.step()
            record(err=err.item())

        for _ in range(rounds):
            one_round()


    if __name__ == "__main__":
        fit(Scorer, 8)
"""


def test_a_script_that_never_names_an_accelerator_reads_its_loss_on_the_host_freely() -> None:
    # the model comes from a constructor the function is handed, but nothing in the program can
    # put it or its batch on a device
    assert _found(HOST_ONLY_SCRIPT) == []


def test_host_only_script_twin_that_moves_its_model_and_batch_is_found() -> None:
    moved = HOST_ONLY_SCRIPT.replace("net = build(width)", "net = build(width).cuda()").replace(
        "ys = xs.sum(-1)", "xs = xs.cuda()\n        ys = xs.sum(-1)"
    )
    assert _found(moved) == [(28, "DL401")]


# -- a hard-coded CUDA default of a parameter the function never reads (fresh33) ----------------

UNREAD_CUDA_DEFAULT = """
    import torch
    import torch.nn as nn


    class Pool(nn.Module):
        def __init__(self, width, home=torch.device("cuda")):
            super().__init__()
            self.proj = nn.Linear(width, width)

        def forward(self, x):
            return self.proj(x).mean(1)
"""


def test_a_cuda_default_of_a_parameter_nothing_reads_places_nothing() -> None:
    assert _found(UNREAD_CUDA_DEFAULT) == []


def test_unread_cuda_default_twin_that_builds_on_it_is_found() -> None:
    used = UNREAD_CUDA_DEFAULT.replace(
        "self.proj = nn.Linear(width, width)",
        "self.proj = nn.Linear(width, width)\n            self.gain = nn.Parameter(torch.ones(width, device=home))",
    )
    assert _found(used) == [(7, "DL107")]


# -- a script without a `__main__` guard that never names an accelerator (fresh33) --------------

TOP_LEVEL_ROUND_TRIP = """
    import torch
    from torch import nn

    feats = torch.randn(64, 3)
    target = feats @ torch.tensor([1.0, -2.0, 0.5])


    def fit_and_keep(steps):
        reg = nn.Linear(3, 1)
        opt = torch.optim.Adam(reg.parameters())
        for _ in range(steps):
            opt.zero_grad()
            nn.functional.mse_loss(reg(feats).squeeze(1), target).backward()
            opt.step()
        torch.save({"weights": reg.state_dict()}, "reg_weights.pt")


    def reuse():
        reg = nn.Linear(3, 1)
        reg.load_state_dict(torch.load("reg_weights.pt")["weights"])
        return reg(feats)


    fit_and_keep(200)
    reuse()
"""


def test_a_top_level_script_that_never_names_an_accelerator_reloads_its_own_host_save() -> None:
    assert _found(TOP_LEVEL_ROUND_TRIP) == []


def test_top_level_round_trip_twin_trained_on_the_gpu_is_found() -> None:
    moved = (
        TOP_LEVEL_ROUND_TRIP.replace("torch.randn(64, 3)", 'torch.randn(64, 3, device="cuda")')
        .replace("0.5])", '0.5], device="cuda")')
        .replace("reg = nn.Linear(3, 1)\n        opt", "reg = nn.Linear(3, 1).cuda()\n        opt")
        .replace("reg = nn.Linear(3, 1)\n        reg.load", "reg = nn.Linear(3, 1).cuda()\n        reg.load")
    )
    assert _found(moved) == [(21, "DL501")]


# -- `other = model.to(device)` moves `model` in place (fresh33) --------------------------------

MOVED_THROUGH_ANOTHER_NAME = """
    import torch


    def resume(net, batches, path, device):
        runner = net.to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        opt.load_state_dict(torch.load(path, map_location=device)["opt"])
        for x, y in batches:
            opt.zero_grad()
            torch.nn.functional.mse_loss(runner(x.to(device)), y.to(device)).backward()
            opt.step()
        return net.to(device).eval()
"""


def test_an_optimizer_state_loaded_after_its_model_moved_through_another_name_is_on_the_device() -> None:
    assert _found(MOVED_THROUGH_ANOTHER_NAME) == []


def test_moved_through_another_name_twin_that_moves_only_after_the_load_is_found() -> None:
    late = MOVED_THROUGH_ANOTHER_NAME.replace("runner = net.to(device)", "runner = net")
    assert _found(late) == [(8, "DL111")]


# -- host copies the forward's own path made, gathered and returned (fresh33) -------------------

GATHERED_HOST_COPIES = """
    import torch
    import torch.nn as nn


    class Tagger(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.proj = nn.Linear(width, width)

        def _tops(self, h):
            return h.topk(2, dim=-1).values.cpu(), h.argmax(-1).float().cpu()

        def forward(self, x):
            h = self.proj(x)
            best, where = self._tops(h)
            return torch.cat([best, where[:, None]], dim=1)
"""


def test_host_copies_the_forward_made_itself_gathered_and_returned_are_its_choice() -> None:
    assert _found(GATHERED_HOST_COPIES) == []


def test_gathered_host_copies_twin_that_meets_the_device_output_is_found() -> None:
    mixed = GATHERED_HOST_COPIES.replace(
        "return torch.cat([best, where[:, None]], dim=1)", "return h[:, :3] * torch.cat([best, where[:, None]], dim=1)"
    )
    assert _found(mixed) == [(17, "DL101")]


# -- a discarded move of a tensor already built where it would go (fresh33) ---------------------

MOVE_TO_WHERE_IT_IS = """
    import torch


    def tally(net, batches, dev):
        totals = torch.zeros(net.classes, device=dev)
        totals.to(dev)
        for x in batches:
            totals += net(x.to(dev)).softmax(-1).sum(0)
        return totals
"""


def test_a_discarded_move_of_a_tensor_built_on_that_device_loses_nothing() -> None:
    assert _found(MOVE_TO_WHERE_IT_IS) == []


def test_move_to_where_it_is_twin_built_on_the_host_is_found() -> None:
    host = MOVE_TO_WHERE_IT_IS.replace("torch.zeros(net.classes, device=dev)", "torch.zeros(net.classes)")
    assert _found(host) == [(6, "DL101"), (7, "DL104")]


# -- the step counter tested against a set of chosen steps (fresh33) ----------------------------

COUNTER_IN_SCHEDULE = """
    import torch


    def train(model, loader, opt, device, keep_at):
        model.to(device)
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step in keep_at:
                print(f"step {step}: {loss.item():.3f}")
"""


def test_a_read_under_the_step_counter_in_a_schedule_runs_on_those_steps_only() -> None:
    assert _found(COUNTER_IN_SCHEDULE) == []


def test_counter_in_schedule_twin_testing_a_setting_instead_is_found() -> None:
    every_step = COUNTER_IN_SCHEDULE.replace("if step in keep_at:", 'if "loss" in keep_at:')
    assert _found(every_step) == [(13, "DL401")]


# -- set rf: generators, metrics, optimizer state and op arguments seen through helpers -------

SEEDED_SAMPLER = """
    import torch


    def perturb(points, scale, seed, device):
        rng = torch.manual_seed(seed)
        jitter = torch.rand(points.shape, generator=rng, device=device)
        return points + scale * jitter


    def run(points):
        return perturb(points.to("cuda:1"), 0.1, seed=3, device="cuda:1")
"""


def test_the_generator_torch_manual_seed_returns_is_the_cpu_one() -> None:
    # `torch.manual_seed(seed)` returns `torch.default_generator`, drawn here on the GPU
    assert _found(SEEDED_SAMPLER) == [(7, "DL115")]


def test_seeded_generator_twin_on_the_draws_device_is_clean() -> None:
    fixed = SEEDED_SAMPLER.replace("rng = torch.manual_seed(seed)", "rng = torch.Generator(device).manual_seed(seed)")
    assert _found(fixed) == []
    # a CUDA seed call returns nothing: not a generator the analysis claims
    cuda_seed = SEEDED_SAMPLER.replace("torch.manual_seed(seed)", "torch.cuda.manual_seed(seed)")
    assert _found(cuda_seed) == []


METRIC_HANDED_TO_HELPER = """
    import torch
    from torchmetrics.classification import BinaryAUROC


    def score_split(net, batches, auroc, dev):
        for feats, label in batches:
            logit = net(feats.to(dev)).squeeze(-1)
            auroc.update(logit.sigmoid(), label.to(dev))
        return auroc.compute()


    def report(net, splits, dev="cuda"):
        net = net.to(dev)
        auroc = BinaryAUROC()
        return {name: score_split(net, batches, auroc, dev) for name, batches in splits.items()}
"""


def test_a_metric_handed_to_a_helper_that_feeds_it_device_tensors_is_reported() -> None:
    assert _found(METRIC_HANDED_TO_HELPER) == [(15, "DL113")]


def test_metric_handed_to_helper_twin_moved_there_or_before_is_clean() -> None:
    moved_here = METRIC_HANDED_TO_HELPER.replace("auroc = BinaryAUROC()", "auroc = BinaryAUROC().to(dev)")
    assert _found(moved_here) == []
    moved_in_helper = METRIC_HANDED_TO_HELPER.replace(
        "        for feats, label in batches:\n",
        "        auroc = auroc.to(dev)\n        for feats, label in batches:\n",
    )
    assert _found(moved_in_helper) == []
    # a helper the file does not show may move it: not claimed
    elsewhere = METRIC_HANDED_TO_HELPER.replace("def score_split(", "def _unused(").replace(
        "    import torch\n", "    import torch\n    from evaluation import score_split\n"
    )
    assert _found(elsewhere) == []


METRIC_IN_A_RECORDER = """
    import torch
    import torchmetrics


    class Recorder:
        def __init__(self, n_labels):
            self.f1 = torchmetrics.F1Score(task="multiclass", num_classes=n_labels, average="macro")

        def log_step(self, scores, gold):
            self.f1(scores.softmax(-1), gold)

        def summary(self):
            return self.f1.compute()


    class Runner:
        def __init__(self, net, n_labels):
            self.dev = torch.device("cuda")
            self.net = net.to(self.dev)
            self.rec = Recorder(n_labels)

        def evaluate(self, loader):
            with torch.no_grad():
                for tokens, gold in loader:
                    scores = self.net(tokens.to(self.dev))
                    self.rec.log_step(scores, gold.to(self.dev))
            return self.rec.summary()
"""


def test_a_plain_recorders_metric_fed_through_its_method_from_the_device_is_reported() -> None:
    # the metric's update receives the method's parameters; the runner fills them with device tensors
    assert _found(METRIC_IN_A_RECORDER) == [(8, "DL113")]


def test_metric_recorder_twin_moving_the_metric_is_clean() -> None:
    fixed = METRIC_IN_A_RECORDER.replace('average="macro")', 'average="macro").to("cuda")')
    assert _found(fixed) == []
    # callers that hand host tensors only: the metric on the CPU is right
    host = METRIC_IN_A_RECORDER.replace(
        "self.rec.log_step(scores, gold.to(self.dev))", "self.rec.log_step(scores.cpu(), gold)"
    )
    assert _found(host) == []


INHERITED_FORWARD = """
    import torch
    from torch import nn


    class Augment(nn.Module):
        def forward(self, batch):
            return self.perturb(batch, self.draw(batch))

        def perturb(self, batch, noise):
            return batch + noise


    class ChannelJitter(Augment):
        def __init__(self, channels, scale=0.1):
            super().__init__()
            self.channels = channels
            self.scale = scale

        def draw(self, batch):
            spread = batch.std()
            return (torch.randn(self.channels) * spread * self.scale)[:, None, None]


    class Pipeline(nn.Module):
        def __init__(self):
            super().__init__()
            self.jitter = ChannelJitter(3)

        def forward(self, images):
            return self.jitter(images)


    def run(loader, device):
        aug = Pipeline().to(device)
        for images in loader:
            yield aug(images.to(device))
"""


def test_a_submodule_running_the_forward_its_base_class_defines_is_followed() -> None:
    # `ChannelJitter` has no forward of its own: `Augment.forward` runs, then the subclass's `draw`
    assert _found(INHERITED_FORWARD) == [(22, "DL101")]


def test_inherited_forward_twin_drawing_on_the_batchs_device_is_clean() -> None:
    fixed = INHERITED_FORWARD.replace("torch.randn(self.channels)", "torch.randn(self.channels, device=batch.device)")
    assert _found(fixed) == []


OPTIMIZER_BY_NAME = """
    import torch


    def pick_optimizer(kind, weights, rate):
        if kind == "sgd":
            return torch.optim.SGD(weights, lr=rate, momentum=0.9)
        elif kind == "adagrad":
            return torch.optim.Adagrad(weights, lr=rate, initial_accumulator_value=0.1)
        return torch.optim.AdamW(weights, lr=rate)


    def train(net, batches, kind="adagrad", rate=0.01):
        opt = pick_optimizer(kind, net.parameters(), rate)
        net.cuda()
        for inputs, labels in batches:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(inputs.cuda()), labels.cuda()).backward()
            opt.step()
"""


def test_an_optimizer_factory_with_an_adagrad_branch_built_before_the_move_is_reported() -> None:
    assert _found(OPTIMIZER_BY_NAME) == [(14, "DL111")]


def test_optimizer_by_name_twin_moving_the_net_first_is_clean() -> None:
    fixed = OPTIMIZER_BY_NAME.replace(
        "        opt = pick_optimizer(kind, net.parameters(), rate)\n        net.cuda()\n",
        "        net.cuda()\n        opt = pick_optimizer(kind, net.parameters(), rate)\n",
    )
    assert _found(fixed) == []
    # only lazy optimizers among the branches: nothing is created before the move
    lazy = OPTIMIZER_BY_NAME.replace(
        "torch.optim.Adagrad(weights, lr=rate, initial_accumulator_value=0.1)", "torch.optim.Adam(weights, lr=rate)"
    )
    assert _found(lazy) == []


STATE_RESTORED_THEN_MOVED = """
    import torch


    def restore(path, net, opt):
        blob = torch.load(path, map_location="cpu")
        net.load_state_dict(blob["net"])
        opt.load_state_dict(blob["opt"])


    def state_to(opt, dev):
        for per_param in opt.state.values():
            for key, val in per_param.items():
                if torch.is_tensor(val):
                    per_param[key] = val.to(dev)


    def main(net, path, dev="cuda"):
        opt = torch.optim.RMSprop(net.parameters(), lr=1e-3, momentum=0.9)
        restore(path, net, opt)
        net.to(dev)
        state_to(opt, dev)
        return net, opt
"""


def test_a_state_restored_by_a_helper_and_moved_by_another_after_the_model_is_clean() -> None:
    assert _found(STATE_RESTORED_THEN_MOVED) == []


def test_state_restored_then_moved_without_the_state_move_is_reported() -> None:
    bug = STATE_RESTORED_THEN_MOVED.replace("        state_to(opt, dev)\n", "")
    assert _found(bug) == [(20, "DL111")]


CONSTRUCTOR_DEVICE_DEFAULT = """
    import torch
    from torch import nn


    class Resonator(nn.Module):
        def __init__(self, bins, dev=None):
            super().__init__()
            self.dev = dev or "cpu"
            self.gain = nn.Parameter(torch.ones(bins, device=self.dev))
            self.window = torch.hann_window(bins, device=self.dev).sqrt() * torch.ones(bins, device=self.dev)


    class CombFilter(Resonator):
        def __init__(self, bins, delay, dev=None):
            super().__init__(bins, dev=dev)
            self.delay = delay

        def forward(self, spec):
            return spec * self.gain * self.window


    bank = CombFilter(257, delay=12).to("cuda")
"""


def test_a_factory_on_a_constructor_device_every_construction_leaves_at_the_cpu_is_reported() -> None:
    # `CombFilter(...)` leaves `dev=None`, handed to the base through `super().__init__`;
    # the subclass's forward reads the base's plain attribute
    assert _found(CONSTRUCTOR_DEVICE_DEFAULT) == [(11, "DL102")]


def test_constructor_device_twin_registering_the_window_is_clean() -> None:
    fixed = CONSTRUCTOR_DEVICE_DEFAULT.replace(
        "self.window = torch.hann_window(bins, device=self.dev).sqrt() * torch.ones(bins, device=self.dev)",
        'self.register_buffer("window", torch.hann_window(bins, device=self.dev).sqrt() * torch.ones(bins, device=self.dev))',
    )
    assert _found(fixed) == []
    # a construction that passes an unknown device: the CPU is not claimed
    given = CONSTRUCTOR_DEVICE_DEFAULT.replace(
        'bank = CombFilter(257, delay=12).to("cuda")',
        "def build(dev):\n        return CombFilter(257, delay=12, dev=dev)",
    )
    assert _found(given) == []


def test_a_parameterless_modules_advice_names_the_input_the_device_side_comes_from() -> None:
    # `ChannelJitter` has no parameters: `next(self.parameters())` would raise; its input has a device
    ranged = INHERITED_FORWARD.replace(
        "            spread = batch.std()\n            return (torch.randn(self.channels) * spread * self.scale)[:, None, None]",
        "            low, high = batch.min(), batch.max()\n"
        "            return (torch.randn(self.channels) * (high - low) * self.scale)[:, None, None]",
    )
    (message,) = _messages(ranged)
    assert "pass `device=batch.device`" in message and "parameters()" not in message


# -- a count kept in a Python number, handed to a collective through a helper ----------------
RANK_AVERAGE = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist


    def average_over_ranks(stat, world):
        buf = stat.detach().float()
        dist.all_reduce(buf)
        return buf / world


    class Evaluator:
        def __init__(self, net, world, device):
            self.net, self.world, self.device = net, world, device

        def run(self, batches):
            hits, seen = 0, 0
            for feats, labels in batches:
                logits = self.net(feats.cuda(non_blocking=True))
                hits += int((logits.argmax(-1).cpu() == labels).sum())
                seen += labels.numel()
            rate = average_over_ranks(torch.tensor([hits, seen], dtype=torch.float64), self.world)
            return (rate[0] / rate[1]).item()

        def loss_total(self, batches):
            total = 0.0
            for feats, labels in batches:
                total += torch.nn.functional.cross_entropy(self.net(feats.cuda()), labels.cuda()).item()
            summed = torch.tensor(total)
            dist.all_reduce(summed)
            return summed.item()
    """
)


def test_a_host_count_reaches_a_collective_directly_or_through_a_helper_that_copies_it() -> None:
    # `hits` and `total` are Python numbers (`int(...)`, `.item()`), so the tensors made of
    # them are on the CPU; `average_over_ranks` all-reduces a cast copy of its argument
    assert _found(RANK_AVERAGE) == [(21, "DL209"), (29, "DL209")]
    helper = next(m for m in _messages(RANK_AVERAGE) if "average_over_ranks" in m)
    assert "handed to `average_over_ranks`, which hands it to `dist.all_reduce`" in helper


def test_rank_average_twin_making_the_tensors_on_the_device_is_clean() -> None:
    fixed = RANK_AVERAGE.replace("dtype=torch.float64)", "dtype=torch.float64, device=self.device)").replace(
        "summed = torch.tensor(total)", "summed = torch.tensor(total, device=self.device)"
    )
    assert _found(fixed) == []
    # a helper that all-reduces something else than its argument says nothing about it
    other = RANK_AVERAGE.replace("buf = stat.detach().float()", "buf = torch.ones(1, device='cuda') * 0")
    assert [f for f in _found(other) if f[0] == 21] == []
    # nor one that rebinds what it was handed (to the GPU, through a function) before the collective
    moved = RANK_AVERAGE.replace("buf = stat.detach().float()", "stat, was_cpu = to_gpu(stat)\n    buf = stat.float()")
    assert moved != RANK_AVERAGE and [f for f in _found(moved) if f[0] in (21, 22)] == []


# -- a scaler updated by a trainer's method and again by the loop ----------------------------
UPDATED_AFTER_TRAINER = textwrap.dedent(
    """\
    import torch


    class Learner:
        def __init__(self, net, lr):
            self.net = net.cuda()
            self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)
            self.amp = torch.amp.GradScaler("cuda")

        def fit_batch(self, x, y):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(self.net(x.cuda()), y.cuda())
            self.amp.scale(loss).backward()
            self.amp.step(self.opt)
            self.amp.update()
            self.opt.zero_grad()
            return loss.detach()


    def run(net, batches):
        learner = Learner(net, 0.1)
        for x, y in batches:
            learner.fit_batch(x, y)
            learner.amp.update()
    """
)


def test_a_scaler_updated_again_right_after_a_method_that_stepped_and_updated_it() -> None:
    # no step between the two updates: the second `update()` finds no inf checks and raises
    assert _found(UPDATED_AFTER_TRAINER) == [(24, "DL307")]
    (message,) = _messages(UPDATED_AFTER_TRAINER)
    assert "with no `step(...)` between" in message and "`learner.amp`" in message


def test_updated_after_trainer_twin_leaving_the_update_to_the_method_is_clean() -> None:
    assert _found(UPDATED_AFTER_TRAINER.replace("        learner.amp.update()\n", "")) == []
    # a step of the loop's own between the two updates is the two-optimizer case, not this one
    stepped = UPDATED_AFTER_TRAINER.replace(
        "        learner.amp.update()\n", "        learner.amp.step(learner.opt)\n        learner.amp.update()\n"
    )
    assert stepped != UPDATED_AFTER_TRAINER
    assert not any("no `step(...)` between" in m for m in _messages(stepped))


# -- a loss scaled by a method, the optimizer stepped plainly by the loop ---------------------
SCALED_BY_METHOD = textwrap.dedent(
    """\
    import torch


    class Stepper:
        def __init__(self, net):
            self.net = net
            self.grad_scaler = torch.amp.GradScaler("cuda")

        def loss_backward(self, x, y):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.grad_scaler.scale(loss).backward()
            return loss.detach()


    def epoch(net, opt, batches):
        stepper = Stepper(net.cuda())
        for x, y in batches:
            stepper.loss_backward(x.cuda(), y.cuda())
            opt.step()
            opt.zero_grad()
    """
)


def test_a_plain_step_after_a_method_that_backpropagated_a_scaled_loss() -> None:
    assert _found(SCALED_BY_METHOD) == [(20, "DL302")]
    (message,) = _messages(SCALED_BY_METHOD)
    assert "that `stepper.loss_backward(x.cuda(), y.cuda())` scaled the loss with" in message


def test_scaled_by_method_twin_stepping_through_the_scaler_is_clean() -> None:
    fixed = SCALED_BY_METHOD.replace(
        "        opt.step()\n", "        stepper.grad_scaler.step(opt)\n        stepper.grad_scaler.update()\n"
    )
    assert fixed != SCALED_BY_METHOD
    assert _found(fixed) == []


# -- a clipper bound with functools.partial ---------------------------------------------------
PARTIAL_CLIPPER = textwrap.dedent(
    """\
    import functools

    import torch


    class Loop:
        def __init__(self, model, max_norm):
            self.model = model.cuda()
            self.opt = torch.optim.AdamW(self.model.parameters())
            self.scaler = torch.amp.GradScaler("cuda")
            self.clip = functools.partial(torch.nn.utils.clip_grad_norm_, max_norm=max_norm)

        def step(self, x, y):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.scaler.scale(loss).backward()
            self._clip_grads()
            self.scaler.step(self.opt)
            self.scaler.update()

        def _clip_grads(self):
            self.clip(self.model.parameters())
    """
)


def test_a_clipper_bound_with_partial_clips_scaled_gradients_in_a_helper_method() -> None:
    # `self.clip` is `functools.partial(clip_grad_norm_, ...)`, called by `_clip_grads`
    assert _found(PARTIAL_CLIPPER) == [(17, "DL304")]


def test_partial_clipper_twin_unscaling_first_is_clean() -> None:
    fixed = PARTIAL_CLIPPER.replace(
        "        self._clip_grads()\n",
        "        self.scaler.unscale_(self.opt)\n        self._clip_grads()\n",
    )
    assert fixed != PARTIAL_CLIPPER
    assert _found(fixed) == []


# -- fresh34: 0-dim values and frozen parameters are no stale device state --------------------------

FROZEN_SCALE = """
    import torch
    from torch import nn


    class LoudnessWeight(nn.Module):
        def __init__(self, bins, tilt=0.5):
            super().__init__()
            self.curve = nn.Parameter(torch.linspace(0.0, 1.0, bins) * tilt, requires_grad=False)
            self.gain = self.curve.norm()

        def forward(self, spectrum):
            return spectrum * self.curve / self.gain
"""


def test_a_whole_reduction_of_frozen_parameters_kept_in_init_is_a_0_dim_constant() -> None:
    # frozen: no graph; `norm()` of the whole tensor: 0-dim, which meets CUDA tensors as a number
    assert _found(FROZEN_SCALE) == []


def test_frozen_scale_twins_trainable_or_not_reduced_are_still_reported() -> None:
    trainable = FROZEN_SCALE.replace(", requires_grad=False)", ")")
    assert _found(trainable) == [(10, "DL102")]
    assert "graph reaches the CPU parameters" in _messages(trainable)[0]
    per_bin = FROZEN_SCALE.replace("self.gain = self.curve.norm()", "self.gain = self.curve.cumsum(0) + 1.0")
    assert _found(per_bin) == [(10, "DL102")]
    by_dim = FROZEN_SCALE.replace("self.curve.norm()", "self.curve.norm(dim=0, keepdim=True).expand(4)")
    assert _found(by_dim) == [(10, "DL102")]


SCORE_HISTORY = """
    import numpy as np
    import torch
    from torch import nn


    class Agent(nn.Module):
        def __init__(self, width, floor: float = -100.0, window=20):
            super().__init__()
            self.policy = nn.Linear(width, 2)
            self.scores = []
            for _ in range(window):
                self.scores.append(torch.tensor(floor))

        def forward(self, obs):
            return self.policy(obs)

        def smoothed(self):
            return float(np.mean(self.scores[-20:])) + self.policy.bias.sum()
"""


def test_0_dim_numbers_kept_in_a_plain_list_are_not_tensors_to_move() -> None:
    assert _found(SCORE_HISTORY) == []


def test_score_history_twin_keeping_whole_tensors_is_reported() -> None:
    vectors = SCORE_HISTORY.replace("torch.tensor(floor)", "torch.full((width,), floor)")
    assert _found(vectors) == [(13, "DL102")]


CACHED_SPLIT = """
    import os

    import torch
    from shards import ShardedDataset


    class Spectra(ShardedDataset):
        def __init__(self, root):
            self.root = root


    class SmallSpectra(Spectra):
        def prepare(self, limit):
            for name in ("train.pt", "valid.pt"):
                rows, labels = torch.load(os.path.join(self.root, name))
                torch.save((rows[:limit], labels[:limit]), os.path.join(self.root, "small_" + name))


    def restore(model, path):
        model.load_state_dict(torch.load(path))
"""


def test_a_subclass_of_a_dataset_class_of_the_file_reads_data_not_checkpoints() -> None:
    # the subclass's base is the file's own dataset class: its load reads data; a plain
    # function's load of a path still is a checkpoint
    assert _found(CACHED_SPLIT) == [(21, "DL501")]


def test_cached_split_twin_outside_any_dataset_is_reported() -> None:
    plain = CACHED_SPLIT.replace("class SmallSpectra(Spectra):", "class SmallSpectra:")
    assert _found(plain) == [(16, "DL501"), (21, "DL501")]


RECORDING_DOUBLE = """
    import torch


    class Recorder:
        def __init__(self):
            self.device = None

        def to(self, target):
            self.device = target
            return self


    def placed_on(name):
        probe = Recorder()
        probe.to(name)
        return probe.device == "cuda:1"
"""


def test_a_plain_object_s_device_is_what_its_own_methods_store() -> None:
    # `Recorder.device` holds whatever `to` was handed (a string here): no `torch.device`
    assert _found(RECORDING_DOUBLE) == []


def test_recording_double_twin_storing_a_torch_device_is_reported() -> None:
    built = RECORDING_DOUBLE.replace("self.device = None", "self.device = torch.device('cpu')").replace(
        "self.device = target", "self.device = torch.device(target)"
    )
    assert _found(built) == [(17, "DL502")]


def _notebook_found(*cells: str) -> list[tuple[int | None, int, str]]:
    import json

    from devicelint.notebook import lint_notebook

    notebook = {"cells": [{"cell_type": "code", "source": textwrap.dedent(c).lstrip("\n")} for c in cells]}
    result = lint_notebook(json.dumps(notebook).encode(), "lesson.ipynb", DEFAULT)
    return [(f.cell, f.line, f.code) for f in result.findings]


def test_a_move_left_as_a_cell_s_last_expression_is_displayed_not_discarded() -> None:
    setup = """
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        weights = torch.randn(4, 4)
    """
    assert _notebook_found(setup, "weights.to(device)", "weights.cuda()  # shows the copy\n# done\n") == []


def test_cell_output_twins_followed_in_the_cell_or_inside_a_block_are_reported() -> None:
    setup = """
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        weights = torch.randn(4, 4)
    """
    followed = "weights.to(device)\nprint(weights.device)\n"
    looped = "for _ in range(2):\n    weights.to(device)\n"
    hidden = "weights.to(device);\n"
    assert _notebook_found(setup, followed, looped, hidden) == [(2, 1, "DL104"), (3, 2, "DL104"), (4, 1, "DL104")]


LEGACY_TYPED_COPY = """
    import torch


    def canvas(frame, colour):
        colour = torch.DoubleTensor(colour)
        height, width = frame.size(1), frame.size(2)
        return torch.ones(3, height, width, dtype=torch.double) * colour.unsqueeze(1).unsqueeze(2)
"""


def test_a_legacy_typed_constructor_builds_on_the_cpu_whatever_it_is_handed() -> None:
    # `torch.DoubleTensor(colour)` of a parameter used as a tensor is still a CPU tensor (a CUDA
    # argument would raise), so it meets the CPU canvas, never a device tensor
    assert _found(LEGACY_TYPED_COPY) == []


def test_legacy_typed_copy_twin_meeting_a_device_canvas_is_reported() -> None:
    on_device = LEGACY_TYPED_COPY.replace("dtype=torch.double)", "dtype=torch.double, device=frame.device)")
    assert _found(on_device) == [(6, "DL101")]


FLAGGED_WRAPPER = """
    import torch
    from torch import nn


    class Runner:
        def __init__(self, net, gpus):
            self.net = net.cuda()
            self.split = gpus > 1
            if self.split:
                self.net = nn.DataParallel(self.net)

        def vocabulary(self):
            return self.net.module.vocab if self.split else self.net.vocab

        def step(self, batch):
            return self.net(batch.cuda())
"""


def test_a_read_whose_other_branch_unwraps_the_wrapper_holds_the_bare_model() -> None:
    # the code tells the wrapped model from the bare one on its own flag
    assert _found(FLAGGED_WRAPPER) == []


def test_flagged_wrapper_twin_reading_through_the_wrapper_on_both_paths_is_reported() -> None:
    unguarded = FLAGGED_WRAPPER.replace("self.net.module.vocab if self.split else self.net.vocab", "self.net.vocab")
    assert _found(unguarded) == [(14, "DL203")]


PADDED_BATCH = """
    import torch


    def pad_to_multiple(batch, multiple):
        tokens, lengths = batch
        extra = (-tokens.size(0)) % multiple
        tokens = torch.cat([tokens, torch.zeros(extra, tokens.size(1), dtype=torch.long)])
        steps = torch.arange(tokens.size(0), device=lengths.device)
        valid = steps[:, None] < lengths[None]
        return tokens.masked_fill(~valid, 0)
"""


def test_a_join_of_a_fresh_host_tensor_with_a_part_of_no_known_place_is_placed_nowhere() -> None:
    # the padded batch is where `tokens` was (the cat runs only there), like `lengths`: its
    # sibling from the same batch; the mask on `lengths.device` meets nothing known
    assert _found(PADDED_BATCH) == []


def test_padded_batch_twin_joining_a_moved_part_is_reported() -> None:
    moved = PADDED_BATCH.replace(
        "tokens, lengths = batch\n", "tokens, lengths = batch\n        tokens = tokens.cuda()\n"
    )
    assert _found(moved) == [(9, "DL101")]


TYPED_TABLE = """
    import torch


    def encode(index):
        table = torch.LongTensor(4, 10)
        table.fill_(0)
        table.scatter_(1, torch.LongTensor(index)[:, None], 1).long()
        return table
"""


def test_a_discarded_cast_to_the_dtype_a_legacy_constructor_built_returns_the_tensor_itself() -> None:
    assert _found(TYPED_TABLE) == []


def test_typed_table_twin_discarding_a_real_conversion_is_reported() -> None:
    converted = TYPED_TABLE.replace("[:, None], 1).long()", "[:, None], 1).float()")
    assert _found(converted) == [(8, "DL104")]


def test_a_join_of_a_fresh_host_tensor_with_a_computed_part_is_still_on_the_host() -> None:
    # the scored row is computed here, not an input: the stack stays a host tensor, which meets
    # the frame's device
    computed = """
        import torch


        def weighted(frame, score):
            rows = torch.stack([torch.zeros(frame.size(1)), score(frame)])
            return rows * torch.ones(1, device=frame.device)
    """
    assert _found(computed) == [(6, "DL101")]


LOSS_WEIGHT_THROUGH_A_NAME = """
    import torch
    from torch import nn


    class Tagger(nn.Module):
        def __init__(self, n_tags):
            super().__init__()
            self.proj = nn.Linear(64, n_tags)

        def forward(self, feats):
            return self.proj(feats)


    class Fitter:
        def __init__(self, cfg):
            self.net = Tagger(len(cfg.tag_balance)).to("cuda")
            balance = torch.as_tensor(cfg.tag_balance)
            self.steps = cfg.steps
            self.objective = nn.NLLLoss(weight=balance)

        def run(self, batches):
            for feats, tags in batches:
                scores = self.net(feats.to("cuda")).log_softmax(-1)
                self.objective(scores, tags.to("cuda")).backward()
"""


def test_a_loss_weight_bound_to_a_name_on_an_earlier_line_is_followed() -> None:
    # `balance = torch.as_tensor(cfg...)` (configuration data: on the CPU) then
    # `nn.NLLLoss(weight=balance)` kept on a plain class, called in another method on device tensors
    assert _found(LOSS_WEIGHT_THROUGH_A_NAME) == [(20, "DL106")]


def test_loss_weight_through_a_name_twins_are_clean() -> None:
    moved = LOSS_WEIGHT_THROUGH_A_NAME.replace(
        "balance = torch.as_tensor(cfg.tag_balance)", 'balance = torch.as_tensor(cfg.tag_balance, device="cuda")'
    )
    assert _found(moved) == []
    rebound = LOSS_WEIGHT_THROUGH_A_NAME.replace(
        "            self.objective", '            balance = balance.to("cuda")\n            self.objective'
    )
    assert _found(rebound) == []


MODULES_THROUGH_A_LOCAL_LAMBDA = """
    import torch
    from torch import nn


    def orthogonal(layer, gain=1.0):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
        return layer


    class Encoder(nn.Module):
        def __init__(self, channels, n_branches):
            super().__init__()
            make = lambda layer, g=2.0: orthogonal(layer, gain=g)
            self.stem = nn.Conv1d(1, channels, 3, padding=1)
            self.branches = []
            for k in range(n_branches):
                self.branches.append(make(nn.Conv1d(channels, channels, 2 * k + 1, padding=k)))

        def forward(self, signal):
            h = self.stem(signal)
            return torch.stack([branch(h) for branch in self.branches]).sum(0)


    encoder = Encoder(32, 3).cuda()
"""


def test_submodules_handed_through_a_local_lambda_into_a_plain_list_are_reported() -> None:
    # `make` is a lambda calling a helper that returns its `layer` argument: the element is the Conv1d
    assert _found(MODULES_THROUGH_A_LOCAL_LAMBDA) == [(19, "DL103")]


def test_modules_through_a_local_lambda_twins_are_clean() -> None:
    registered = MODULES_THROUGH_A_LOCAL_LAMBDA.replace("self.branches = []", "self.branches = nn.ModuleList()")
    assert _found(registered) == []
    # a lambda that gives back something else than its argument: no module known in the list
    weights = MODULES_THROUGH_A_LOCAL_LAMBDA.replace(
        "make = lambda layer, g=2.0: orthogonal(layer, gain=g)", "make = lambda layer, g=2.0: str(layer)"
    )
    assert _found(weights) == []


OPTIMIZER_FROM_A_BUILDER_THAT_MOVES_FIRST = """
    import torch
    from torch import nn


    from config import Config


    def make(cfg):
        enc = nn.GRU(cfg.dim, cfg.dim, batch_first=True)
        enc.cuda()
        optimizer = torch.optim.Adam(enc.parameters(), lr=cfg.lr)
        return enc, optimizer


    def resume(cfg, path):
        enc, optimizer = make(cfg)
        saved = torch.load(path, map_location="cpu")
        enc.load_state_dict(saved["enc"])
        optimizer.load_state_dict(saved["opt"])
        enc.cuda()
        return enc, optimizer


    if __name__ == "__main__":
        resume(Config(dim=64, lr=1e-3), "last.pt")
"""


def test_an_optimizer_a_builder_makes_after_moving_its_model_loads_onto_the_device() -> None:
    # `make` moves `enc` before building `opt` from it: the loaded state is cast to the GPU
    assert _found(OPTIMIZER_FROM_A_BUILDER_THAT_MOVES_FIRST) == []


def test_an_optimizer_a_builder_makes_from_an_unmoved_model_is_still_reported() -> None:
    unmoved = OPTIMIZER_FROM_A_BUILDER_THAT_MOVES_FIRST.replace(
        "        enc.cuda()\n        optimizer =", "        optimizer ="
    )
    assert _found(unmoved) == [(19, "DL111")]


GENERATOR_AND_DEVICE_FROM_A_BASE_CONSTRUCTOR = """
    import torch


    class Sampler:
        def __init__(self, seed_gen=None, where="cpu"):
            self.where = where
            self.seed_gen = seed_gen if seed_gen is not None else torch.Generator(device=where)


    class Dropper(Sampler):
        def __init__(self, p, seed_gen=None):
            super().__init__(seed_gen)
            self.p = p

        def mask(self, shape):
            return torch.rand(shape, generator=self.seed_gen, device=self.where) > self.p


    class Jitter(Sampler):
        def __init__(self, scale, where="cpu", seed_gen=None):
            super().__init__(seed_gen=seed_gen, where=where)
            self.scale = scale

        def noise(self, shape):
            return torch.randn(shape, generator=self.seed_gen, device=self.where) * self.scale


    shared = torch.Generator("cuda")
    drop = Dropper(0.1, seed_gen=shared)
    jitter = Jitter(0.5, where="cuda", seed_gen=shared)
"""


def test_a_generator_and_device_a_base_constructor_keeps_are_judged_per_subclass() -> None:
    # `Dropper` hands the CUDA generator to the base and leaves `where` at "cpu": its draw
    # mismatches; `Jitter`'s instances get "cuda" for both
    assert _found(GENERATOR_AND_DEVICE_FROM_A_BASE_CONSTRUCTOR) == [(17, "DL115")]


def test_base_constructor_generator_twins_are_clean() -> None:
    passed = GENERATOR_AND_DEVICE_FROM_A_BASE_CONSTRUCTOR.replace(
        "super().__init__(seed_gen)", 'super().__init__(seed_gen, where="cuda")'
    )
    assert _found(passed) == []
    # no generator handed in: the base makes one on `where`, the CPU, where the draw is
    own = GENERATOR_AND_DEVICE_FROM_A_BASE_CONSTRUCTOR.replace(
        "drop = Dropper(0.1, seed_gen=shared)", "drop = Dropper(0.1)"
    )
    assert _found(own) == []


DATAPARALLEL_ON_A_GPU_PICKED_AT_RUN_TIME = """
    import argparse

    import torch
    from torch import nn


    def run(opts):
        card = torch.device("cuda", opts.card)
        net = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).to(card)
        if torch.cuda.device_count() > 1:
            net = nn.DataParallel(net)
        for _ in range(opts.steps):
            net(torch.randn(8, 16, device=card)).sum().backward()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--card", type=int, default=1)
        parser.add_argument("--steps", type=int, default=10)
        run(parser.parse_args())
"""


def test_dataparallel_without_ids_over_a_model_on_a_gpu_picked_at_run_time_is_reported() -> None:
    # `torch.device("cuda", opts.card)`: whichever GPU was picked, DataParallel starts at cuda:0
    assert _found(DATAPARALLEL_ON_A_GPU_PICKED_AT_RUN_TIME) == [(12, "DL202")]


def test_dataparallel_on_a_gpu_picked_at_run_time_twins_are_clean() -> None:
    ids = DATAPARALLEL_ON_A_GPU_PICKED_AT_RUN_TIME.replace(
        "nn.DataParallel(net)", "nn.DataParallel(net, device_ids=[opts.card, *range(opts.card)])"
    )
    assert _found(ids) == []
    # only the single-GPU branch moves the model: the wrapped branch keeps it on the CPU until `.cuda()`
    branches = DATAPARALLEL_ON_A_GPU_PICKED_AT_RUN_TIME.replace(
        """        net = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).to(card)
        if torch.cuda.device_count() > 1:
            net = nn.DataParallel(net)""",
        """        net = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
        if torch.cuda.device_count() > 1:
            net = nn.DataParallel(net).cuda()
        else:
            net = net.to(card)""",
    )
    assert _found(branches) == []


LOSS_WEIGHT_ON_SELF_AFTER_A_CAST = """
    import torch
    from torch import nn


    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Conv2d(3, 1, 3, padding=1)

        def forward(self, image):
            return self.body(image)


    class Experiment:
        def __init__(self, cfg):
            self.net = Detector().cuda()
            self.pos_w = torch.from_numpy(cfg.pos_ratio).float()
            self.loss_fn = nn.BCEWithLogitsLoss(pos_weight=self.pos_w)

        def train_epoch(self, pairs):
            for image, target in pairs:
                logits = self.net(image.cuda())
                self.loss_fn(logits, target.cuda()).backward()
"""


def test_a_loss_weight_kept_on_self_and_cast_to_float_is_followed() -> None:
    # `self.pos_w = torch.from_numpy(...).float()`: the cast keeps the CPU tensor where it is
    assert _found(LOSS_WEIGHT_ON_SELF_AFTER_A_CAST) == [(19, "DL106")]


def test_loss_weight_on_self_after_a_cast_twin_is_clean() -> None:
    moved = LOSS_WEIGHT_ON_SELF_AFTER_A_CAST.replace(
        "torch.from_numpy(cfg.pos_ratio).float()", "torch.from_numpy(cfg.pos_ratio).float().cuda()"
    )
    assert _found(moved) == []


MODULES_THROUGH_A_MODULE_LEVEL_PARTIAL = """
    import functools

    import torch
    from torch import nn


    def orthogonal_init(layer, gain=1.0):
        nn.init.orthogonal_(layer.weight, gain=gain)
        return layer


    small = functools.partial(orthogonal_init, gain=0.01)


    class MultiHeadPolicy(nn.Module):
        def __init__(self, obs_dim, actions):
            super().__init__()
            self.body = nn.Linear(obs_dim, 64)
            self.heads = {name: small(nn.Linear(64, n)) for name, n in actions.items()}

        def forward(self, obs):
            h = torch.tanh(self.body(obs))
            return {name: head(h) for name, head in self.heads.items()}


    policy = MultiHeadPolicy(10, {"move": 4, "turn": 3}).to("cuda")
"""


def test_submodules_made_through_a_module_level_partial_into_a_plain_dict_are_reported() -> None:
    # `small(...)` is `functools.partial(orthogonal_init, gain=...)`, whose helper returns its layer
    assert _found(MODULES_THROUGH_A_MODULE_LEVEL_PARTIAL) == [(20, "DL103")]


def test_modules_through_a_module_level_partial_twin_is_clean() -> None:
    registered = MODULES_THROUGH_A_MODULE_LEVEL_PARTIAL.replace(
        "self.heads = {name: small(nn.Linear(64, n)) for name, n in actions.items()}",
        "self.heads = nn.ModuleDict({name: small(nn.Linear(64, n)) for name, n in actions.items()})",
    )
    assert _found(registered) == []


LABELS_FROM_A_NUMPY_ARCHIVE = """
    import numpy as np
    import pandas as pd
    import torch
    from torch import nn


    def evaluate(archive, table):
        bundle = np.load(archive)
        frame = pd.read_csv(table)
        scorer = nn.Sequential(nn.Linear(8, 2)).to("cuda")
        feats = torch.as_tensor(bundle["feats"]).float().to("cuda")
        gold = torch.as_tensor(bundle["gold"])
        weights = torch.tensor(frame["weight"].values)
        hits = (scorer(feats).argmax(-1) == gold).float()
        return (hits * weights.to("cuda")).sum()
"""


def test_a_tensor_made_from_part_of_a_numpy_result_is_on_the_cpu() -> None:
    # `bundle["gold"]` of `np.load(...)`: host data, so `torch.as_tensor` of it is a CPU tensor
    assert _found(LABELS_FROM_A_NUMPY_ARCHIVE) == [(13, "DL101")]


def test_labels_from_a_numpy_archive_twin_is_clean() -> None:
    moved = LABELS_FROM_A_NUMPY_ARCHIVE.replace(
        'gold = torch.as_tensor(bundle["gold"])', 'gold = torch.as_tensor(bundle["gold"]).to("cuda")'
    )
    assert _found(moved) == []


# -- the global rank as a GPU index in a program without DistributedDataParallel ----------------

SHARDED_EVAL_WORKER = """
    import os

    import torch
    import torch.distributed as dist


    class ShardedScorer:
        def __init__(self, table):
            dist.init_process_group("nccl")
            self.rank = dist.get_rank()
            self.world = dist.get_world_size()
            self.gpu = torch.device("cuda", self.rank)
            self.table = table.to(self.gpu)

        def score(self, queries):
            local = queries.to(self.gpu) @ self.table.T
            parts = [torch.empty_like(local) for _ in range(self.world)]
            dist.all_gather(parts, local)
            return torch.cat(parts, dim=1)
"""


def test_a_global_rank_gpu_index_is_reported_without_ddp_in_the_file() -> None:
    assert _found(SHARDED_EVAL_WORKER) == [(13, "DL205")]


def test_a_node_local_rank_gpu_index_without_ddp_is_clean() -> None:
    fixed = SHARDED_EVAL_WORKER.replace(
        'self.gpu = torch.device("cuda", self.rank)',
        'self.gpu = torch.device("cuda", int(os.environ["LOCAL_RANK"]))',
    )
    assert _found(fixed) == []


# -- a wrapper handed on in the statement that rebinds its name ----------------------------------

FREEZE_AFTER_WRAP = """
    import torch
    from torch import nn


    class Segmenter(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.backbone = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU())
            self.decode = nn.Conv2d(32, classes, 1)

        def forward(self, x):
            return self.decode(self.backbone(x))


    def freeze_backbone(net):
        for p in net.backbone.parameters():
            p.requires_grad = False
        return net


    def setup(classes):
        seg = Segmenter(classes).cuda()
        if torch.cuda.device_count() > 1:
            seg = nn.DataParallel(seg)
        seg = freeze_backbone(seg)
        return seg
"""


def test_a_wrapper_handed_to_a_helper_whose_result_rebinds_it_is_reported() -> None:
    assert _found(FREEZE_AFTER_WRAP) == [(17, "DL203")]
    # the right-hand side reads an attribute of the wrapper itself
    direct = FREEZE_AFTER_WRAP.replace("seg = freeze_backbone(seg)", "seg = seg.decode")
    assert _found(direct) == [(26, "DL203")]


def test_freezing_before_wrapping_is_clean() -> None:
    fixed = FREEZE_AFTER_WRAP.replace(
        "        if torch.cuda.device_count() > 1:\n            seg = nn.DataParallel(seg)\n        seg = freeze_backbone(seg)\n",
        "        seg = freeze_backbone(seg)\n        if torch.cuda.device_count() > 1:\n            seg = nn.DataParallel(seg)\n",
    )
    assert fixed != FREEZE_AFTER_WRAP
    assert _found(fixed) == []


# -- a discarded move of a name the function rebinds to a new tensor -----------------------------

REBOUND_TO_A_TENSOR = """
    import torch


    class DepthPredictor:
        def __init__(self, network, device):
            self.device = device
            self.network = network.to(device).eval()

        def __call__(self, frame):
            frame = torch.as_tensor(frame).permute(2, 0, 1).float()
            frame.to(self.device)
            with torch.no_grad():
                return self.network(frame[None] / 255.0)
"""


def test_a_parameter_rebound_to_a_new_tensor_then_moved_as_a_statement_is_reported() -> None:
    # `frame` may have been a tensor on any device: only that it is a tensor now is known
    assert _found(REBOUND_TO_A_TENSOR) == [(12, "DL104")]


def test_rebound_tensor_twin_assigning_the_move_is_clean() -> None:
    fixed = REBOUND_TO_A_TENSOR.replace("frame.to(self.device)", "frame = frame.to(self.device)")
    assert _found(fixed) == []
    # made on the device it is moved to: the copy would be the tensor itself
    there = REBOUND_TO_A_TENSOR.replace(
        "frame = torch.as_tensor(frame).permute(2, 0, 1).float()",
        "frame = torch.as_tensor(frame, device=self.device)",
    )
    assert _found(there) == []


# -- a discarded move of a tensor attribute in another method of its class -----------------------

BATCH_MOVE_FORGETS_ONE = """
    import torch


    class Collated:
        def __init__(self, ids, lengths, labels):
            self.ids = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True)
            self.lengths = torch.as_tensor(lengths, dtype=torch.long)
            self.labels = torch.tensor(labels)

        def to(self, device):
            self.ids = self.ids.to(device)
            self.lengths.to(device)
            self.labels = self.labels.to(device)
            return self
"""


def test_a_tensor_attribute_moved_as_a_statement_in_another_method_is_reported() -> None:
    assert _found(BATCH_MOVE_FORGETS_ONE) == [(13, "DL104")]


def test_tensor_attribute_twin_assigning_the_move_is_clean() -> None:
    fixed = BATCH_MOVE_FORGETS_ONE.replace("self.lengths.to(device)", "self.lengths = self.lengths.to(device)")
    assert _found(fixed) == []
    # an attribute that may hold something else (a list when no lengths are given) is not claimed
    maybe = BATCH_MOVE_FORGETS_ONE.replace(
        "self.lengths = torch.as_tensor(lengths, dtype=torch.long)",
        "self.lengths = torch.as_tensor(lengths) if lengths is not None else []",
    )
    assert _found(maybe) == []


# -- writes in the forward of a submodule class of a DataParallel-wrapped model ------------------

NESTED_REPLICA_WRITES = """
    import torch
    from torch import nn


    class GatedBlock(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.gate = nn.Linear(width, width)
            self.open_rates = []

        def forward(self, h):
            g = torch.sigmoid(self.gate(h))
            self.open_rates.append(g.mean())
            return h * g


    class Stack(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.first = GatedBlock(width)
            self.second = GatedBlock(width)

        def forward(self, h):
            return self.second(self.first(h))


    class Tagger(nn.Module):
        def __init__(self, vocab, width=128):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.body = Stack(width)
            self.out = nn.Linear(width, 9)

        def forward(self, tokens):
            return self.out(self.body(self.embed(tokens)))


    def build(vocab):
        return nn.DataParallel(Tagger(vocab).cuda())
"""


def test_a_write_in_a_nested_submodules_forward_under_dataparallel_is_reported() -> None:
    assert _found(NESTED_REPLICA_WRITES) == [(14, "DL203")]


def test_nested_submodule_twin_without_dataparallel_is_clean() -> None:
    single = NESTED_REPLICA_WRITES.replace(
        "return nn.DataParallel(Tagger(vocab).cuda())", "return Tagger(vocab).cuda()"
    )
    assert _found(single) == []


# -- submodules placed on two GPUs by a method the code calls before DataParallel ---------------

SHARD_METHOD_THEN_DP = """
    import torch


    class Seq2Seq(torch.nn.Module):
        def __init__(self, vocab, width=512):
            super().__init__()
            self.encoder = torch.nn.GRU(width, width, batch_first=True)
            self.decoder = torch.nn.GRU(width, width, batch_first=True)
            self.embed = torch.nn.Embedding(vocab, width)

        def shard(self):
            self.embed.to("cuda:0")
            self.encoder.to("cuda:0")
            self.decoder.to("cuda:1")

        def forward(self, src):
            out, h = self.encoder(self.embed(src.to("cuda:0")))
            dec, _ = self.decoder(out.to("cuda:1"), h.to("cuda:1"))
            return dec


    def prepare(vocab):
        net = Seq2Seq(vocab)
        net.shard()
        net = torch.nn.DataParallel(net, device_ids=[0, 1])
        return net
"""


def test_a_model_sharded_by_its_own_method_then_wrapped_in_dataparallel_is_reported() -> None:
    # (the literal devices in the module's own methods are DL107's to report)
    assert [f for f in _found(SHARD_METHOD_THEN_DP) if f[1] != "DL107"] == [(26, "DL201")]


def test_sharding_method_twin_without_dataparallel_is_clean() -> None:
    fixed = SHARD_METHOD_THEN_DP.replace("        net = torch.nn.DataParallel(net, device_ids=[0, 1])\n", "")
    assert [f for f in _found(fixed) if f[1] != "DL107"] == []
    # a method that moves nothing to a stated device splits nothing
    whole = SHARD_METHOD_THEN_DP.replace("        net.shard()\n", "        net.cuda()\n")
    assert [f for f in _found(whole) if f[1] != "DL107"] == []


# -- float16 autocast entered by a decorator on the model's forward --------------------------------

DECORATED_FORWARD_NO_SCALER = """
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Denoiser(nn.Module):
        def __init__(self, ch=64):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, ch, 3, padding=1), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))

        @torch.amp.autocast("cuda")
        def forward(self, noisy):
            return self.net(noisy)


    class Fitter:
        def __init__(self, lr=2e-4):
            self.model = Denoiser().cuda().train()
            self.optim = torch.optim.Adam(self.model.parameters(), lr=lr)

        def fit(self, loader):
            for clean in loader:
                clean = clean.cuda(non_blocking=True)
                noisy = clean + 0.1 * torch.randn_like(clean)
                restored = self.model(noisy)
                loss = F.l1_loss(restored.float(), clean)
                self.optim.zero_grad(set_to_none=True)
                loss.backward()
                self.optim.step()
"""


def test_a_plain_backward_of_a_loss_from_an_autocast_decorated_forward_is_reported() -> None:
    assert _found(DECORATED_FORWARD_NO_SCALER) == [(29, "DL301")]


def test_decorated_forward_twin_in_bfloat16_is_clean() -> None:
    fixed = DECORATED_FORWARD_NO_SCALER.replace(
        '@torch.amp.autocast("cuda")', '@torch.amp.autocast("cuda", dtype=torch.bfloat16)'
    )
    assert _found(fixed) == []


# -- the global rank stored on an options object, then used as the GPU index -----------------------

RANK_ON_OPTIONS = """
    import os

    import torch
    import torch.distributed as dist


    def init_distributed(cfg):
        cfg.rank = int(os.environ["RANK"])
        cfg.world = int(os.environ["WORLD_SIZE"])
        cfg.gpu = cfg.rank
        dist.init_process_group("nccl", rank=cfg.rank, world_size=cfg.world)
        torch.cuda.set_device(cfg.gpu)
        return cfg
"""


def test_a_global_rank_kept_on_an_options_object_used_as_the_gpu_is_reported() -> None:
    assert _found(RANK_ON_OPTIONS) == [(13, "DL205")]


def test_options_object_twin_with_the_local_rank_is_clean() -> None:
    fixed = RANK_ON_OPTIONS.replace("cfg.gpu = cfg.rank", 'cfg.gpu = int(os.environ["LOCAL_RANK"])')
    assert _found(fixed) == []


# -- a plain container of modules handed to the constructor and kept as it is -----------------------

EXPERTS_HANDED_IN = """
    import torch
    from torch import nn


    class Expert(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            return self.ff(x)


    class Router(nn.Module):
        def __init__(self, width, experts):
            super().__init__()
            self.gate = nn.Linear(width, len(experts))
            self.experts = experts

        def forward(self, x):
            weights = self.gate(x).softmax(-1)
            outs = torch.stack([self.experts[k](x) for k in sorted(self.experts)], -1)
            return (outs * weights.unsqueeze(-2)).sum(-1)


    def make_router(width, names):
        return Router(width, experts={name: Expert(width) for name in names}).cuda()
"""


def test_a_dict_of_modules_handed_to_the_constructor_and_kept_plain_is_reported() -> None:
    assert _found(EXPERTS_HANDED_IN) == [(19, "DL103")]


def test_experts_twin_registering_the_dict_is_clean() -> None:
    fixed = EXPERTS_HANDED_IN.replace("self.experts = experts", "self.experts = nn.ModuleDict(experts)")
    assert _found(fixed) == []
    # a constructor handed a list of numbers keeps no modules
    numbers = EXPERTS_HANDED_IN.replace("experts={name: Expert(width) for name in names}", "experts=[1.0, 2.0]")
    assert _found(numbers) == []
    # the constructor also registers them: the plain dict only holds modules registered elsewhere
    both = EXPERTS_HANDED_IN.replace(
        "self.experts = experts", "self.experts = experts\n            self.bank = nn.ModuleDict(experts)"
    )
    assert _found(both) == []


# -- a plain GPU tensor attribute that DataParallel's replicas share -------------------------------

SHARED_BY_REPLICAS = """
    import torch
    from torch import nn


    class RelativeBias(nn.Module):
        def __init__(self, window):
            super().__init__()
            self.table = nn.Parameter(torch.zeros(2 * window - 1))
            coords = torch.arange(window)
            self.index = (coords[:, None] - coords[None, :] + window - 1).cuda()

        def forward(self, scores):
            return scores + self.table[self.index]


    class Attention(nn.Module):
        def __init__(self, window=16):
            super().__init__()
            self.bias = RelativeBias(window)

        def forward(self, q, k):
            return self.bias(q @ k.transpose(-2, -1)).softmax(-1)


    model = nn.DataParallel(Attention().cuda(), device_ids=[0, 1, 2])
"""


def test_a_gpu_tensor_attribute_of_a_replicated_submodule_is_reported() -> None:
    found = _found(SHARED_BY_REPLICAS)
    assert (11, "DL102") in found
    (message,) = [m for m in _messages(SHARED_BY_REPLICAS) if "replicas" in m]
    assert "a submodule of `Attention`" in message


def test_replica_shared_twin_registering_the_index_is_clean() -> None:
    fixed = SHARED_BY_REPLICAS.replace(
        "self.index = (coords[:, None] - coords[None, :] + window - 1).cuda()",
        'self.register_buffer("index", coords[:, None] - coords[None, :] + window - 1)',
    )
    assert [f for f in _found(fixed) if f[1] == "DL102"] == []
    one_gpu = SHARED_BY_REPLICAS.replace("device_ids=[0, 1, 2]", "device_ids=[0]")
    assert (11, "DL102") not in _found(one_gpu)


def test_a_global_rank_gpu_index_in_a_test_file_without_ddp_is_left_alone() -> None:
    # a test's workers are spawned on one machine, where the global rank is the GPU index
    result = lint_source(textwrap.dedent(SHARDED_EVAL_WORKER), "tests/test_sharded_scorer.py", DEFAULT)
    assert [f.code for f in result.findings] == []


# -- a host tensor a plain class's __init__ keeps, read through its instance -----------------
HOLDER_LABELS = textwrap.dedent(
    """\
    import numpy as np
    import torch


    class Split:
        def __init__(self, npz, frac=0.9):
            arrays = np.load(npz)
            cut = int(len(arrays["t"]) * frac)
            self.inputs = torch.as_tensor(arrays["f"][cut:])
            self.targets = torch.from_numpy(arrays["t"][cut:])


    def score(net, npz):
        held_out = Split(npz)
        net = net.cuda()
        with torch.no_grad():
            guesses = net(held_out.inputs.cuda()).argmax(-1)
        return (guesses == held_out.targets).sum().item() / len(held_out.targets)
    """
)


def test_a_host_tensor_kept_by_a_plain_class_meets_device_values_through_its_instance() -> None:
    # `held_out.targets` is the CPU tensor `Split.__init__` built from NumPy; nothing moves it
    assert _found(HOLDER_LABELS) == [(10, "DL101")]
    (message,) = _messages(HOLDER_LABELS)
    assert message.endswith("move it where it is used (`.to(guesses.device)`)"), message


def test_holder_labels_twins_moving_the_labels_are_clean() -> None:
    moved_at_use = HOLDER_LABELS.replace("(guesses == held_out.targets)", "(guesses == held_out.targets.cuda())")
    assert moved_at_use != HOLDER_LABELS and _found(moved_at_use) == []
    # a class that also sets the attribute elsewhere (or moves itself) is not judged from __init__
    reset = HOLDER_LABELS.replace(
        "\n\n\ndef score", "\n\n    def to_gpu(self):\n        self.targets = self.targets.cuda()\n\n\ndef score"
    )
    assert reset != HOLDER_LABELS and _found(reset) == []


# -- arguments followed into every way the file runs a function (`call_sites`) ---------------
NOISE_BY_INSTANCE_CALL = textwrap.dedent(
    """\
    import torch


    class NoiseSchedule:
        def __init__(self, steps):
            self.steps = steps

        def __call__(self, shape, rng=None):
            return torch.rand(shape, generator=rng, device="cuda") * self.steps


    def add_noise(images, seed):
        schedule = NoiseSchedule(1000)
        rng = torch.Generator().manual_seed(seed)
        return images + schedule(images.shape, rng=rng)
    """
)

JITTER_BY_INSTANCE_METHOD = textwrap.dedent(
    """\
    import torch


    class Jitter:
        def offsets(self, count, source):
            return torch.randn(count, 2, device="cuda", generator=source)


    jitter = Jitter()
    shifts = jitter.offsets(16, torch.Generator())
    """
)

DRAW_IN_A_CLOSURE = textwrap.dedent(
    """\
    import torch


    def evaluate(model, batches):
        def perturb(x, g):
            return x + 0.01 * torch.randn(x.shape, generator=g, device="cuda")

        fixed = torch.Generator()
        fixed.manual_seed(0)
        return [model(perturb(b.cuda(), fixed)) for b in batches]
    """
)


def _generator_findings(source: str) -> list[tuple[int, str]]:
    # the draws also hard-code "cuda" (DL107's): only the generator's rule is asked here
    return [f for f in _found(source) if f[1] == "DL115"]


def test_a_cpu_generator_handed_to_an_instance_call_reaches_its_dunder_call() -> None:
    # `schedule(...)` runs `NoiseSchedule.__call__`, whose `rng` is the caller's CPU generator
    assert _generator_findings(NOISE_BY_INSTANCE_CALL) == [(9, "DL115")]


def test_a_cpu_generator_handed_to_a_method_of_an_instance_is_followed() -> None:
    assert _generator_findings(JITTER_BY_INSTANCE_METHOD) == [(6, "DL115")]


def test_a_cpu_generator_handed_to_a_nested_helper_is_followed() -> None:
    assert _generator_findings(DRAW_IN_A_CLOSURE) == [(6, "DL115")]


def test_instance_call_twins_with_a_cuda_generator_are_clean() -> None:
    for source, old in (
        (NOISE_BY_INSTANCE_CALL, "torch.Generator()"),
        (JITTER_BY_INSTANCE_METHOD, "torch.Generator()"),
        (DRAW_IN_A_CLOSURE, "torch.Generator()"),
    ):
        fixed = source.replace(old, 'torch.Generator(device="cuda")')
        assert fixed != source and _generator_findings(fixed) == [], fixed


# -- a property read as an attribute; a parameter annotated with a class of the file ----------
RENDERER_PROPERTY_DEVICE = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Renderer:
        def __init__(self, field: nn.Module):
            self.field = field

        @property
        def device(self):
            return next(self.field.parameters()).device

        def jitter(self, rays, rng=None):
            offsets = torch.rand(rays.shape[0], 1, device=self.device, generator=rng)
            return rays + offsets


    def render_views(renderer: Renderer, rays, seed):
        rng = torch.Generator()
        rng.manual_seed(seed)
        return renderer.jitter(rays, rng=rng)
    """
)


def test_a_cpu_generator_meets_a_device_a_property_reads_from_the_model() -> None:
    # `self.device` is the property's return; `renderer` is a `Renderer` by its annotation
    assert _generator_findings(RENDERER_PROPERTY_DEVICE) == [(14, "DL115")]


def test_renderer_twins_drawing_on_the_generators_device_are_clean() -> None:
    on_its_device = RENDERER_PROPERTY_DEVICE.replace(
        "offsets = torch.rand(rays.shape[0], 1, device=self.device, generator=rng)",
        "where = rng.device if rng is not None else self.device\n"
        "        offsets = torch.rand(rays.shape[0], 1, device=where, generator=rng).to(self.device)",
    )
    assert on_its_device != RENDERER_PROPERTY_DEVICE and _generator_findings(on_its_device) == []
    cuda_generator = RENDERER_PROPERTY_DEVICE.replace("rng = torch.Generator()", 'rng = torch.Generator("cuda")')
    assert cuda_generator != RENDERER_PROPERTY_DEVICE and _generator_findings(cuda_generator) == []


# -- a helper's untyped parameter that every caller fills with an Accelerator ------------------
LENGTHS_THROUGH_A_HELPER = textwrap.dedent(
    """\
    import torch
    from accelerate import Accelerator


    def _all_lengths(acc, lengths):
        return acc.gather(lengths)


    def length_report(accelerator: Accelerator, model, loader):
        seen = []
        for batch in loader:
            lengths = torch.tensor([len(text) for text in batch["text"]])
            seen.append(_all_lengths(accelerator, lengths))
        return torch.cat(seen).float().mean()
    """
)


def test_a_cpu_tensor_handed_to_a_helper_that_gathers_it_with_the_callers_accelerator() -> None:
    found = [f for f in _found(LENGTHS_THROUGH_A_HELPER) if f[1] == "DL209"]
    assert found == [(13, "DL209")]
    (message,) = [m for m in _messages(LENGTHS_THROUGH_A_HELPER) if "NCCL" in m]
    assert "handed to `_all_lengths`, which hands it to `acc.gather`" in message


def test_lengths_twins_made_on_the_accelerators_device_or_not_gathered_are_clean() -> None:
    on_device = LENGTHS_THROUGH_A_HELPER.replace(
        'for text in batch["text"]])', 'for text in batch["text"]], device=accelerator.device)'
    )
    assert on_device != LENGTHS_THROUGH_A_HELPER
    assert [f for f in _found(on_device) if f[1] == "DL209"] == []
    # a helper whose first parameter is no accelerator (a plain list's owner) gathers nothing
    not_an_accelerator = LENGTHS_THROUGH_A_HELPER.replace(
        "seen.append(_all_lengths(accelerator, lengths))", "seen.append(_all_lengths(model, lengths))"
    )
    assert [f for f in _found(not_an_accelerator) if f[1] == "DL209"] == []


# -- a loop that moves one entry of what it yields walks host batches, whatever it is called ---
EVAL_OVER_ANY_ITERABLE = textwrap.dedent(
    """\
    import torch


    def accuracy(classifier, val_dl):
        classifier.cuda().eval()
        hits = 0
        with torch.no_grad():
            for sample in val_dl:
                images = sample[0].cuda(non_blocking=True)
                labels = sample[1]
                hits += (classifier(images).argmax(-1) == labels).sum().item()
        return hits
    """
)


def test_the_unmoved_entry_of_a_batch_whose_other_entry_is_moved_is_reported() -> None:
    assert [f for f in _found(EVAL_OVER_ANY_ITERABLE) if f[1] == "DL105"] == [(11, "DL105")]


def test_eval_over_any_iterable_twins_are_clean() -> None:
    both_moved = EVAL_OVER_ANY_ITERABLE.replace("labels = sample[1]", "labels = sample[1].cuda(non_blocking=True)")
    assert both_moved != EVAL_OVER_ANY_ITERABLE and [f for f in _found(both_moved) if f[1] == "DL105"] == []
    # nothing of the item is moved: no evidence the loop walks host batches
    nothing_moved = EVAL_OVER_ANY_ITERABLE.replace("sample[0].cuda(non_blocking=True)", "sample[0]")
    assert nothing_moved != EVAL_OVER_ANY_ITERABLE and [f for f in _found(nothing_moved) if f[1] == "DL105"] == []


# -- torch.tensor of data the file does not show is a CPU tensor --------------------------------
BALANCED_NLL = textwrap.dedent(
    """\
    import torch
    from torch import nn


    def class_balanced_loss(label_counts):
        inverse = 1.0 / torch.tensor(label_counts, dtype=torch.float32)
        return nn.NLLLoss(weight=inverse * len(label_counts) / inverse.sum())


    def fit(net, loader, label_counts, optimizer):
        net = net.cuda()
        loss_fn = class_balanced_loss(label_counts)
        for x, y in loader:
            log_probs = torch.log_softmax(net(x.cuda()), dim=-1)
            loss = loss_fn(log_probs, y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
)


def test_class_weights_from_counts_the_file_does_not_show_are_a_cpu_tensor() -> None:
    assert [f for f in _found(BALANCED_NLL) if f[1] == "DL106"] == [(7, "DL106")]


def test_balanced_nll_twins_moving_the_loss_or_the_weights_are_clean() -> None:
    moved_loss = BALANCED_NLL.replace(
        "loss_fn = class_balanced_loss(label_counts)", "loss_fn = class_balanced_loss(label_counts).cuda()"
    )
    on_device = BALANCED_NLL.replace(
        "torch.tensor(label_counts, dtype=torch.float32)",
        'torch.tensor(label_counts, dtype=torch.float32, device="cuda")',
    )
    for fixed in (moved_loss, on_device):
        assert fixed != BALANCED_NLL and [f for f in _found(fixed) if f[1] == "DL106"] == []


def test_a_tensor_of_a_dtypes_limit_is_a_0_dim_scalar_tensor() -> None:
    source = textwrap.dedent(
        """\
        import torch


        def clamp_scores(scores, mask):
            scores = scores.cuda() + mask.cuda()
            return torch.max(scores, torch.tensor(torch.finfo(scores.dtype).min))
        """
    )
    assert _found(source) == []
    # a tensor of data the file does not show is a real, full CPU tensor
    full = source.replace("torch.tensor(torch.finfo(scores.dtype).min)", "torch.tensor(mask.tolist())")
    assert [f for f in _found(full) if f[1] == "DL101"] == [(6, "DL101")]


def test_a_tensor_of_a_size_or_a_scaled_setting_is_a_0_dim_scalar_tensor() -> None:
    source = textwrap.dedent(
        """\
        import torch


        class Scaler(torch.nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.cfg = cfg
                self.embed = torch.nn.Embedding(cfg.vocab, cfg.width)

            def forward(self, ids):
                x = self.embed(ids)
                x = x * torch.tensor(self.cfg.width**0.5, dtype=x.dtype)
                return x / torch.sqrt(torch.tensor(x.shape[-1])) / self.temperature
        """
    )
    # a setting's entry scaled by a literal is a number too
    entry = 'x = x + torch.tensor(self.cfg.init["mean"] * 1.0)'
    source = source.replace("x = self.embed(ids)\n", f"x = self.embed(ids)\n        {entry}\n")
    assert entry in source
    # `width // heads` of two settings is an int: the attribute is a 0-dim tensor
    temperature = "self.temperature = torch.sqrt(torch.tensor(cfg.width // cfg.heads, dtype=torch.float32))"
    source = source.replace("self.cfg = cfg\n", f"self.cfg = cfg\n        {temperature}\n")
    assert temperature in source
    assert _found(source) == []


def test_a_tensor_of_a_parameter_annotated_as_a_number_is_0_dim() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from typing import Union


        def shift(values: torch.Tensor, offset: Union[int, torch.Tensor]) -> torch.Tensor:
            if not torch.is_tensor(offset):
                offset = torch.tensor(offset)
            return values.cuda() - offset
        """
    )
    assert [f for f in _found(source) if f[1] == "DL101"] == []
    listed = source.replace("offset: Union[int, torch.Tensor]", "offset")
    assert [f for f in _found(listed) if f[1] == "DL101"] == [(7, "DL101")]


# -- a collective program without DDP that never makes the rank's GPU current (set rj) ------------
GATHER_SCORES = textwrap.dedent(
    """\
    import os

    import torch
    import torch.distributed as dist


    def gather_scores(local_scores):
        world = dist.get_world_size()
        buckets = [torch.empty_like(local_scores) for _ in range(world)]
        dist.all_gather(buckets, local_scores)
        return torch.cat(buckets)


    def evaluate(shard, model):
        dist.init_process_group("nccl")
        model = model.cuda()
        with torch.no_grad():
            scores = model(shard.cuda()).softmax(-1)
        merged = gather_scores(scores)
        dist.destroy_process_group()
        return merged
    """
)


def test_collectives_on_the_current_device_without_set_device_put_every_rank_on_gpu0() -> None:
    # `scores` lives on the index-less current device, cuda:0 in every rank of the NCCL group
    assert _found(GATHER_SCORES) == [(15, "DL205")]


def test_gather_scores_twins_that_bind_each_rank_to_its_gpu_are_clean() -> None:
    bound = GATHER_SCORES.replace(
        '    dist.init_process_group("nccl")\n',
        '    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n    dist.init_process_group("nccl")\n',
    )
    assert bound != GATHER_SCORES and _found(bound) == []
    device_id = GATHER_SCORES.replace(
        'dist.init_process_group("nccl")',
        'dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))',
    )
    assert device_id != GATHER_SCORES and _found(device_id) == []
    per_rank = GATHER_SCORES.replace(".cuda()", ".to(f\"cuda:{os.environ['LOCAL_RANK']}\")")
    assert per_rank != GATHER_SCORES and _found(per_rank) == []
    gloo = GATHER_SCORES.replace('"nccl"', '"gloo"').replace(".cuda()", "")
    assert _found(gloo) == []


# -- a wrapper's state dict saved by one method, loaded by __init__ through the constructor (set rj) --
SUMMARIZER = textwrap.dedent(
    """\
    import copy

    import torch
    import torch.nn as nn


    class Seq2Seq(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.enc = nn.GRU(dim, dim, batch_first=True)
            self.dec = nn.Linear(dim, dim)

        def forward(self, x):
            return self.dec(self.enc(x)[0])


    class Summarizer:
        def __init__(self, opts, weights=None):
            self.opts = opts
            self.seq2seq = Seq2Seq(opts["dim"])
            if weights is not None:
                self.seq2seq.load_state_dict(weights)

        def use_all_gpus(self):
            self.seq2seq = nn.DataParallel(self.seq2seq.cuda())

        def checkpoint(self, path):
            torch.save({"opts": self.opts, "weights": copy.deepcopy(self.seq2seq.state_dict())}, path)

        @classmethod
        def restore(cls, path):
            blob = torch.load(path, map_location="cpu")
            return cls(blob["opts"], weights=blob["weights"])
    """
)


def test_a_wrapped_attribute_saved_by_a_method_is_loaded_bare_by_init_through_the_constructor() -> None:
    # `checkpoint` saves `self.seq2seq` after `use_all_gpus` wrapped it; `restore` hands the
    # keys (all `module.`-prefixed) to `__init__`, which loads them into the bare Seq2Seq
    assert _found(SUMMARIZER) == [(22, "DL204")]


def test_summarizer_twins_saving_the_wrapped_module_or_loading_elsewhere_are_clean() -> None:
    unwrapped = SUMMARIZER.replace(
        "copy.deepcopy(self.seq2seq.state_dict())",
        "copy.deepcopy(getattr(self.seq2seq, 'module', self.seq2seq).state_dict())",
    )
    assert unwrapped != SUMMARIZER and _found(unwrapped) == []
    # no wrapper anywhere: the keys match
    single = SUMMARIZER.replace("nn.DataParallel(self.seq2seq.cuda())", "self.seq2seq.cuda()")
    assert single != SUMMARIZER and _found(single) == []
    # another key than the one saved is not this checkpoint's state dict
    other_key = SUMMARIZER.replace('weights=blob["weights"]', 'weights=blob["ema_weights"]')
    assert other_key != SUMMARIZER and _found(other_key) == []


# -- a CPU table stored while the module is built: by a helper __init__ calls, or under dynamic names (set rj) --
ANCHOR_LEVELS = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn


    def grid_anchors(size, stride):
        ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        return torch.stack([xs, ys], -1).reshape(-1, 2).float() * stride


    class AnchorHead(nn.Module):
        def __init__(self, sizes=(80, 40, 20), strides=(8, 16, 32)):
            super().__init__()
            self.levels = len(sizes)
            self.cls = nn.Conv2d(64, 2, 1)
            self._make_anchors(sizes, strides)

        def _make_anchors(self, sizes, strides):
            for level, (size, stride) in enumerate(zip(sizes, strides)):
                setattr(self, f"anchors_l{level}", grid_anchors(size, stride))

        def forward(self, feats):
            out = []
            for lvl, feat in enumerate(feats):
                anchors = getattr(self, f"anchors_l{lvl}").to(feat.device)
                out.append((self.cls(feat), anchors))
            return out
    """
)


def test_a_cpu_table_set_under_dynamic_names_by_an_init_helper_is_copied_every_forward() -> None:
    assert _found(ANCHOR_LEVELS) == [(24, "DL405")]


def test_anchor_levels_twins_with_buffers_or_a_rewritten_family_are_clean() -> None:
    buffers = ANCHOR_LEVELS.replace(
        'setattr(self, f"anchors_l{level}", grid_anchors(size, stride))',
        'self.register_buffer(f"anchors_l{level}", grid_anchors(size, stride), persistent=False)',
    ).replace('getattr(self, f"anchors_l{lvl}").to(feat.device)', 'getattr(self, f"anchors_l{lvl}")')
    assert buffers != ANCHOR_LEVELS and _found(buffers) == []
    # a method that anyone may call rebuilds the anchors: not a constant of construction
    public = (
        ANCHOR_LEVELS.replace("_make_anchors", "make_anchors")
        + "\n\nhead = AnchorHead()\nhead.make_anchors((40,), (16,))\n"
    )
    assert _found(public) == []


INIT_HELPER_TABLE = textwrap.dedent(
    """\
    import math

    import torch
    import torch.nn as nn


    class RotaryAttention(nn.Module):
        def __init__(self, dim, max_len=4096):
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self._init_rotary(dim, max_len)

        def _init_rotary(self, dim, max_len):
            inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
            self.angles = torch.outer(torch.arange(max_len).float(), inv)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            angles = self.angles[: x.shape[1]].to(x.device)
            q = q * angles.cos().repeat_interleave(2, -1) / math.sqrt(q.shape[-1])
            return torch.softmax(q @ k.transpose(-1, -2), -1) @ v
    """
)


def test_a_cpu_table_a_helper_of_init_stores_is_judged_as_stored_by_init() -> None:
    # `self.angles` is written once, by `_init_rotary`, which only `__init__` calls
    assert _found(INIT_HELPER_TABLE) == [(19, "DL405")]
    buffer = INIT_HELPER_TABLE.replace(
        "self.angles = torch.outer(torch.arange(max_len).float(), inv)",
        'self.register_buffer("angles", torch.outer(torch.arange(max_len).float(), inv), persistent=False)',
    ).replace("self.angles[: x.shape[1]].to(x.device)", "self.angles[: x.shape[1]]")
    assert buffer != INIT_HELPER_TABLE and _found(buffer) == []
    # a second caller (a public re-init) makes it state that changes, not a constant
    recalled = INIT_HELPER_TABLE.replace(
        "    def forward(self, x):",
        "    def extend(self, max_len):\n        self._init_rotary(self.qkv.in_features, max_len)\n\n    def forward(self, x):",
    )
    assert recalled != INIT_HELPER_TABLE and _found(recalled) == []


# -- a hand-written network: an instance called through `__call__`, weights drawn by a helper ----
# `torch.normal(mean, std, size)` of two numbers builds on the CPU whatever the default device.
PLAIN_POLICY = textwrap.dedent(
    """\
    import torch

    torch.set_default_device("cuda")


    def gaussian_weights(rows, cols, scale=0.02):
        return torch.normal(0.0, scale, (rows, cols)).requires_grad_()


    class TinyPolicy:
        def __init__(self, sizes):
            self.mats = [gaussian_weights(a, b) for a, b in zip(sizes, sizes[1:])]

        def __call__(self, obs):
            out = obs
            for mat in self.mats:
                out = torch.relu(out @ mat)
            return out


    def rollout(steps):
        policy = TinyPolicy([8, 64, 4])
        obs = torch.zeros(1, 8)
        for _ in range(steps):
            obs = torch.cat([obs[:, 4:], policy(obs)], dim=1)
        return obs
    """
)


def test_a_plain_instance_called_directly_runs_its_call_method_with_host_weights() -> None:
    # (DL110 reports the module-level default device itself)
    assert [f for f in _found(PLAIN_POLICY) if f[1] != "DL110"] == [(7, "DL101")]


def test_plain_policy_twins_drawing_on_the_default_device_are_clean() -> None:
    fixed = PLAIN_POLICY.replace("torch.normal(0.0, scale, (rows, cols))", "torch.randn(rows, cols) * scale")
    assert fixed != PLAIN_POLICY and [f for f in _found(fixed) if f[1] != "DL110"] == []
    placed = PLAIN_POLICY.replace("(rows, cols)).requires_grad_()", "(rows, cols), device='cuda').requires_grad_()")
    assert placed != PLAIN_POLICY and [f for f in _found(placed) if f[1] != "DL110"] == []


APPENDED_STATE = textwrap.dedent(
    """\
    import torch


    class Scorer:
        def __init__(self, n_heads):
            self.bias = []
            for _ in range(n_heads):
                self.bias.append(torch.zeros(16))

        def __call__(self, feats):
            return [feats + b for b in self.bias]


    def evaluate(feats):
        scorer = Scorer(3)
        return scorer(feats.cuda())
    """
)


def test_a_list_an_instance_builds_with_append_holds_its_host_tensors() -> None:
    assert _found(APPENDED_STATE) == [(8, "DL101")]


def test_appended_state_twin_moving_each_tensor_is_clean() -> None:
    fixed = APPENDED_STATE.replace("torch.zeros(16)", "torch.zeros(16).cuda()")
    assert fixed != APPENDED_STATE and _found(fixed) == []


# -- a generator built on a device the constructor keeps, from a settings record -----------------
KEPT_DEVICE_GENERATOR = textwrap.dedent(
    """\
    from dataclasses import dataclass

    import torch


    @dataclass
    class JitterOptions:
        scale: float = 0.05
        device: str = "cuda"
        seed: int = 7


    class Jitter:
        def __init__(self, opts: JitterOptions):
            self.opts = opts
            self.dev = torch.device(opts.device)
            self.rng = torch.Generator(self.dev)
            self.rng.manual_seed(opts.seed)

        def perturb(self, poses):
            shake = torch.rand(poses.shape, generator=self.rng) * self.opts.scale
            return poses + shake.to(poses.device)


    def augment(poses):
        return Jitter(JitterOptions(scale=0.1)).perturb(poses)
    """
)


def test_a_generator_on_a_device_kept_from_a_settings_record_default() -> None:
    assert (21, "DL115") in _found(KEPT_DEVICE_GENERATOR)


def test_kept_device_generator_twins_are_clean() -> None:
    drawn_there = KEPT_DEVICE_GENERATOR.replace("generator=self.rng)", "generator=self.rng, device=self.dev)")
    assert drawn_there != KEPT_DEVICE_GENERATOR and [f for f in _found(drawn_there) if f[1] == "DL115"] == []
    on_cpu = KEPT_DEVICE_GENERATOR.replace("JitterOptions(scale=0.1)", 'JitterOptions(scale=0.1, device="cpu")')
    assert on_cpu != KEPT_DEVICE_GENERATOR and [f for f in _found(on_cpu) if f[1] == "DL115"] == []


KEPT_CALLABLE = textwrap.dedent(
    """\
    import torch


    class Projector:
        def __init__(self, dim_in, dim_out):
            self.proj = torch.randn(dim_in, dim_out) / dim_in**0.5

        def __call__(self, feats):
            return feats @ self.proj


    class Retriever:
        def __init__(self, encoder):
            self.encoder = encoder.cuda()
            self.head = Projector(768, 128)

        def embed(self, ids):
            return self.head(self.encoder(ids.cuda()))
    """
)


def test_an_instance_a_trainer_keeps_on_self_is_called_through_its_call_method() -> None:
    assert _found(KEPT_CALLABLE) == [(6, "DL101")]


def test_kept_callable_twin_moving_the_projection_is_clean() -> None:
    fixed = KEPT_CALLABLE.replace("return feats @ self.proj", "return feats @ self.proj.to(feats.device)")
    assert fixed != KEPT_CALLABLE and _found(fixed) == []


# -- a `?` that ends a trailing comment is not IPython's help syntax ------------------------------
def test_a_question_mark_ending_a_comment_in_a_notebook_is_python_not_help() -> None:
    # IPython reads `obj?` as help only when `?` is a token of its own; in a comment it is Python
    cell = """
        import torch
        net = torch.nn.Linear(4, 2).cuda()
        scores = net(torch.randn(3, 4).cuda(),  # still on the GPU?
                     )
        ranked = scores.numpy()
    """
    assert _notebook_found(cell) == [(1, 5, "DL108")]


def test_question_mark_twins_help_lines_stay_magics_and_strings_stay_python() -> None:
    asked = """
        import torch
        net = torch.nn.Linear(4, 2).cuda()
        net.forward?
        scores = net(torch.randn(3, 4).cuda())
        ranked = scores.numpy()
    """
    assert _notebook_found(asked) == [(1, 5, "DL108")]
    quoted = """
        import torch
        net = torch.nn.Linear(4, 2).cuda()
        label = "on the GPU?"  # and why #?
        ranked = net(torch.randn(3, 4).cuda()).numpy()
    """
    assert _notebook_found(quoted) == [(1, 4, "DL108")]


# -- a 1-D schedule read one step at a time by a Python int gives 0-dim values -------------------
NOISE_SCHEDULE = """
    from typing import Optional

    import torch
    from torch import nn


    class Denoiser(nn.Module):
        def __init__(self, steps: int):
            super().__init__()
            self.net = nn.Linear(8, 8)
            self.betas = torch.arange(steps) * 1e-3 + 1e-4
            self.gains = torch.logspace(-2, 0, steps)

        def forward(self, x, step: Optional[int] = None):
            if step is not None:
                x = x * (1 - self.betas[step]).sqrt() * self.gains[step]
            return self.net(x)
"""


def test_a_range_or_schedule_attribute_indexed_by_an_int_step_is_left_alone() -> None:
    # `torch.arange`/`torch.logspace` give 1-D tensors: one int index leaves a 0-dim CPU value,
    # which PyTorch lets meet device tensors; an `Optional[int]` counts under `is not None`
    assert [f for f in _found(NOISE_SCHEDULE) if f[1] == "DL102"] == []


def test_noise_schedule_twins_indexed_by_a_tensor_or_an_untested_optional_are_reported() -> None:
    by_tensor = NOISE_SCHEDULE.replace("step: Optional[int] = None", "step: torch.Tensor = None")
    assert by_tensor != NOISE_SCHEDULE
    assert [f for f in _found(by_tensor) if f[1] == "DL102"] == [(12, "DL102"), (13, "DL102")]
    untested = NOISE_SCHEDULE.replace("if step is not None:", "if x is not None:")
    assert untested != NOISE_SCHEDULE
    assert [f for f in _found(untested) if f[1] == "DL102"] == [(12, "DL102"), (13, "DL102")]


# -- a container of buffers that the method reading it builds first, on every call ---------------
BOUNDS_PER_CALL = """
    import torch
    from torch import nn


    class Clamp(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.register_buffer("low", torch.zeros(width))
            self.register_buffer("high", torch.ones(width))

        def forward(self, x):
            self.bounds = [self.low, self.high]
            return torch.maximum(torch.minimum(x, self.bounds[1]), self.bounds[0])
"""


def test_a_list_of_buffers_rebuilt_by_the_method_that_reads_it_is_not_stale() -> None:
    # each call gathers the buffers as they are then, after any `model.to(device)`
    assert _found(BOUNDS_PER_CALL) == []


def test_bounds_per_call_twin_built_once_in_init_is_reported() -> None:
    once = BOUNDS_PER_CALL.replace(
        'self.register_buffer("high", torch.ones(width))',
        'self.register_buffer("high", torch.ones(width))\n            self.bounds = [self.low, self.high]',
    ).replace("            self.bounds = [self.low, self.high]\n            return", "            return")
    assert once.count("self.bounds = [") == 1 and "def forward(self, x):\n            return" in once
    assert _found(once) == [(11, "DL102")]


# -- a per-step host read that sizes a crop is not accumulated, even inside an `append` -----------
CROP_TO_SHORTEST = """
    import torch
    from torch.utils.data import DataLoader


    def train(model, dataset, opt, device="cuda"):
        model.to(device)
        for feats, lengths in DataLoader(dataset, batch_size=16):
            feats, lengths = feats.to(device), lengths.to(device)
            shortest = int(lengths.min().item())
            crops = []
            for i in range(feats.size(0)):
                crops.append(feats[i, :shortest])
            loss = model(torch.stack(crops)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_per_step_size_read_used_to_slice_says_so() -> None:
    assert _found(CROP_TO_SHORTEST) == [(10, "DL401")]
    (message,) = _messages(CROP_TO_SHORTEST)
    assert "to index or slice tensors with it" in message and "accumulate" not in message, message


def test_crop_to_shortest_twin_summing_the_size_is_an_accumulation() -> None:
    summed = CROP_TO_SHORTEST.replace(
        "            crops = []\n", "            seen += shortest\n            crops = []\n"
    )
    summed = summed.replace("        model.to(device)\n", "        model.to(device)\n        seen = 0\n")
    assert summed.count("seen") == 2
    (message,) = _messages(summed)
    assert "to accumulate it" in message, message


# -- a 0-dim tensor made on the CPU on purpose (`device="cpu"`) is still 0-dim --------------------
HOST_HYPERPARAMETERS = """
    import torch
    from torch import nn


    class Tempered(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.proj = nn.Linear(width, width)
            # host scalars: changing their value does not recompile a compiled graph
            self.temperature = torch.tensor(1.0, dtype=torch.float32, device="cpu")
            self.floor = torch.zeros((), device=torch.device("cpu"))

        def set_temperature(self, value: float) -> None:
            self.temperature.fill_(value)

        def forward(self, x):
            return (self.proj(x) / self.temperature).clamp_min(self.floor)


    def run(batch):
        net = Tempered(8).cuda()
        return net(batch.cuda())
"""


def test_a_zero_dim_tensor_placed_on_the_cpu_explicitly_meets_device_tensors_freely() -> None:
    assert [f for f in _found(HOST_HYPERPARAMETERS) if f[1] in ("DL101", "DL102")] == []


def test_host_hyperparameters_twin_with_a_vector_is_reported() -> None:
    vector = HOST_HYPERPARAMETERS.replace("torch.tensor(1.0, dtype", "torch.tensor([1.0] * width, dtype")
    assert vector != HOST_HYPERPARAMETERS
    assert (11, "DL102") in _found(vector)


HOST_STEP_SIZE = """
    import torch


    def decay_(weights, grads, rate_t, decay_t):
        weights.mul_(1 - rate_t * decay_t).sub_(grads * rate_t)


    class PlainSGD(torch.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, {"lr": lr, "decay": 0.0})
            self.rate_t = torch.tensor(0.0, device="cpu")
            self.decay_t = torch.scalar_tensor(0.0, device="cpu")

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                self.rate_t.fill_(group["lr"])
                self.decay_t.fill_(group["decay"])
                for p in group["params"]:
                    decay_(p, p.grad, self.rate_t, self.decay_t)


    def fit(net, batches):
        net = net.cuda()
        opt = PlainSGD(net.parameters())
        for x in batches:
            net(x.cuda()).sum().backward()
            opt.step()
"""


def test_zero_dim_host_step_sizes_handed_to_an_update_helper_are_not_reported() -> None:
    assert _found(HOST_STEP_SIZE) == []


def test_host_step_size_twin_with_a_per_parameter_vector_is_reported() -> None:
    vector = HOST_STEP_SIZE.replace('torch.tensor(0.0, device="cpu")', 'torch.tensor([0.0, 0.0], device="cpu")')
    assert vector != HOST_STEP_SIZE
    assert [code for _, code in _found(vector)] == ["DL101"]


# -- a snapshot an object writes when it is built and restores later in its life -----------------
SNAPSHOT_AT_CONSTRUCTION = """
    import os

    import torch


    class WarmupProbe:
        def __init__(self, net, opt):
            self.net, self.opt = net, opt
            state = {"net": net.state_dict(), "opt": opt.state_dict()}
            torch.save(state, os.path.join("scratch", "probe_start.pt"))

        def run(self, batches, loss_fn):
            for x, y in batches:
                self.opt.zero_grad()
                loss_fn(self.net(x.cuda()), y.cuda()).backward()
                self.opt.step()
            start = torch.load(os.path.join("scratch", "probe_start.pt"))
            self.net.load_state_dict(start["net"])
            self.opt.load_state_dict(start["opt"])
"""


def test_a_load_of_what_the_object_s_constructor_saved_is_a_round_trip() -> None:
    # building the object always rewrites the file first: the load reads this process's tensors
    assert _found(SNAPSHOT_AT_CONSTRUCTION) == []


def test_snapshot_twin_saved_by_an_ordinary_method_is_reported() -> None:
    # `save()` may run in one run and `run()` in another (a test mode that restores a checkpoint)
    later = SNAPSHOT_AT_CONSTRUCTION.replace(
        "            self.net, self.opt = net, opt\n",
        "            self.net, self.opt = net, opt\n\n        def save(self, net, opt):\n",
    )
    assert later != SNAPSHOT_AT_CONSTRUCTION
    assert _found(later) == [(20, "DL501")]


# -- a plain trainer that builds its model itself, in a file that names no accelerator -----------
HOST_TRAINER = """
    import torch
    from torch import nn


    class Scorer(nn.Module):
        def __init__(self, users, items, dim=16):
            super().__init__()
            self.users = nn.Embedding(users, dim)
            self.items = nn.Embedding(items, dim)

        def forward(self, u, i):
            return (self.users(u) * self.items(i)).sum(-1)


    class Trainer:
        def __init__(self, users, items):
            self.net = None
            self.sizes = (users, items)

        def build(self):
            self.net = Scorer(*self.sizes)
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05)

        def step(self, u, i, rating):
            self.opt.zero_grad()
            loss = nn.functional.mse_loss(self.net(u, i), rating)
            loss.backward()
            self.opt.step()
            return loss.item()
"""


def test_a_plain_trainer_s_own_unmoved_model_in_a_host_only_file_makes_no_host_sync() -> None:
    assert [f for f in _found(HOST_TRAINER) if f[1] == "DL401"] == []


def test_host_trainer_twin_moving_its_model_is_reported() -> None:
    moved = HOST_TRAINER.replace("self.net = Scorer(*self.sizes)", "self.net = Scorer(*self.sizes).cuda()")
    assert moved != HOST_TRAINER
    assert [f for f in _found(moved) if f[1] == "DL401"] == [(30, "DL401")]


def test_snapshot_twin_at_module_level_with_a_later_save_is_still_reported() -> None:
    # a script that loads a checkpoint and later saves to the same path: no constructor wrote it first
    script = """
        import torch

        net = torch.nn.Linear(4, 4).cuda()
        net.load_state_dict(torch.load("weights.pt"))
        net(torch.randn(2, 4).cuda()).sum().backward()
        torch.save(net.state_dict(), "weights.pt")
    """
    assert _found(script) == [(5, "DL501")]


# -- `hasattr(self, ...)` after the model is built: what `__init__` set is there -----------------
REGROWN_TABLE = """
    import torch
    from torch import nn


    class Rotary(nn.Module):
        def __init__(self, dim, length=64):
            super().__init__()
            self.dim = dim
            self._grow(length)

        def _grow(self, length):
            freqs = torch.outer(torch.arange(length).float(), torch.ones(self.dim))
            if hasattr(self, "table"):
                freqs = freqs.to(self.table.device)
            self.table = nn.Parameter(freqs, requires_grad=False)

        def forward(self, x):
            if x.shape[1] > self.table.shape[0]:
                self._grow(x.shape[1])
            return x * self.table[: x.shape[1]]
"""


def test_a_table_regrown_from_forward_and_moved_to_the_old_table_s_device_is_clean() -> None:
    # `_grow` runs from `__init__` (no table yet: the CPU is right) and from `forward`, where
    # `hasattr(self, "table")` is true and the new table follows the old one
    assert _found(REGROWN_TABLE) == []


def test_regrown_table_twin_that_never_moves_the_new_table_is_reported() -> None:
    unmoved = REGROWN_TABLE.replace("freqs = freqs.to(self.table.device)", "freqs = freqs.float()")
    assert unmoved != REGROWN_TABLE
    assert [code for _, code in _found(unmoved)] == ["DL101"]


# -- DataParallel scatters every input: a host input beside a device one never meets it ----------
SCATTERED_INPUTS = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader


    def evaluate(encoder, dataset):
        loader = DataLoader(dataset, batch_size=8, pin_memory=True)
        encoder = encoder.cuda()
        wrapped = nn.DataParallel(encoder)
        total = 0.0
        with torch.no_grad():
            for images, masks in loader:
                logits = wrapped(images.cuda(non_blocking=True), masks)
                total += logits.float().mean()
        return total
"""


def test_a_host_input_beside_a_device_input_of_a_dataparallel_wrapper_is_scattered() -> None:
    assert _found(SCATTERED_INPUTS) == []


def test_scattered_inputs_twin_without_the_wrapper_is_reported() -> None:
    bare = SCATTERED_INPUTS.replace("wrapped = nn.DataParallel(encoder)", "wrapped = encoder")
    assert bare != SCATTERED_INPUTS
    assert _found(bare) == [(14, "DL105")]


def test_a_cpu_table_indexed_by_the_elements_of_a_device_index_tensor_is_clean() -> None:
    # the elements of a 1-D index tensor are 0-dim: PyTorch reads each one as an integer
    source = textwrap.dedent(
        """\
        import itertools
        import torch


        def best_orders(costs):
            orders = torch.tensor(list(itertools.permutations(range(costs.shape[1]))))
            winners = costs.cuda().argmin(dim=1)
            return torch.stack([orders[w] for w in winners])
        """
    )
    assert [f for f in _found(source) if f[1] == "DL116"] == []
    whole = source.replace("torch.stack([orders[w] for w in winners])", "orders[winners]")
    assert [f for f in _found(whole) if f[1] == "DL116"] == [(8, "DL116")]


def test_tensors_of_settings_that_read_as_numbers_are_0_dim() -> None:
    source = textwrap.dedent(
        """\
        from typing import Optional

        import torch
        from torch import nn


        class Contrast(nn.Module):
            def __init__(self, eps=1e-6, temperature=0.1):
                super().__init__()
                self.eps = eps
                self.temperature = temperature
                self.proj = nn.Linear(8, 8)

            def forward(self, a, b, temp: Optional[float] = None, margin=0.5, floor=None):
                if floor is not None and floor < 0:
                    raise ValueError("floor")
                sim = self.proj(a) @ self.proj(b).T
                sim = torch.maximum(sim, torch.tensor(self.eps))
                sim = sim / torch.tensor(temp if temp is not None else self.temperature)
                sim = sim - torch.tensor(margin) + torch.tensor(floor or 0.0)
                return sim.clamp(min=torch.tensor(floor))


        model = Contrast().cuda()
        """
    )
    assert [f for f in _found(source) if f[1] == "DL101"] == []


def test_a_tensor_of_a_bare_parameter_meeting_device_values_is_still_reported() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Pooler(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x, lengths):
                h = self.proj(x).sum(1)
                return h / torch.tensor(lengths).unsqueeze(-1)


        model = Pooler().cuda()
        """
    )
    assert [f for f in _found(source) if f[1] == "DL101"] == [(12, "DL101")]


def test_a_tensor_of_a_local_bound_to_a_signed_number_expression_is_0_dim() -> None:
    source = textwrap.dedent(
        """\
        import torch


        def spread(density, width):
            density = density.cuda()
            start = -width / 2
            return density * torch.tensor(start) + density * torch.tensor(-width / 2)
        """
    )
    assert [f for f in _found(source) if f[1] == "DL101"] == []


def test_a_tensor_of_names_bound_to_number_arithmetic_is_0_dim_through_a_dtype_view() -> None:
    source = textwrap.dedent(
        """\
        import torch

        SHIFT = 10


        def quantize(values, bits):
            values = values.to("cuda")
            offset = (SHIFT - bits) + 3
            packed = offset << SHIFT
            pattern = torch.tensor(packed, dtype=torch.int32).view(torch.float32)
            return values.float() + pattern


        def stretch(values, items):
            values = values.to("cuda")
            weights = torch.tensor(items).view(torch.float32)
            return values * weights
        """
    )
    assert [f for f in _found(source) if f[1] == "DL101"] == [(16, "DL101")]


KEPT_CALLABLE_IN_REPLICAS = """\
import torch
from torch import nn


class Mixer(nn.Module):
    def __init__(self, dim, gated):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)
        self.mix = self.gated_mix if gated else self.plain_mix
        self.scale = lambda t: t * 0.5

    def gated_mix(self, x):
        return self.plain_mix(x) * torch.sigmoid(self.gate(x))

    def plain_mix(self, x):
        return self.fc(x)

    def forward(self, x):
        return self.scale(self.mix(x))


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Mixer(64, True) for _ in range(4)])
        self.mixer = Mixer(64, False)

    def forward(self, x):
        return self.mixer(x)


net = {wrap}(Tower().cuda())
"""


def test_a_bound_method_kept_on_a_replicated_submodule_is_reported_where_it_is_kept() -> None:
    source = KEPT_CALLABLE_IN_REPLICAS.format(wrap="nn.DataParallel")
    assert _found(source) == [(10, "DL203")]
    assert _messages(source)[0].startswith(
        "`self.mix` keeps the method `self.gated_mix` bound to this `Mixer` instance; `nn.DataParallel` copies it "
        "into every GPU replica still bound to the original, so each replica runs the original's `self.fc` on the "
        "first GPU"
    )


def test_a_kept_bound_method_outside_dataparallel_replicas_is_clean() -> None:
    source = KEPT_CALLABLE_IN_REPLICAS.format(wrap="nn.parallel.DistributedDataParallel")
    assert [f for f in _found(source) if f[1] == "DL203"] == []


def test_a_tensor_wrapped_in_autograd_variable_is_the_tensor_itself() -> None:
    # torch 0.3-era scripts wrap every input in `Variable(...)`; since 0.4 it returns the
    # tensor itself, so a discarded move of the wrapped tensor moves nothing
    source = textwrap.dedent(
        """\
        import torch
        import torch.autograd as autograd


        def evaluate(net, rows, gold):
            feats = autograd.Variable(torch.FloatTensor(rows), requires_grad=False)
            target = autograd.Variable(torch.from_numpy(gold).long())
            if torch.cuda.is_available():
                feats.cuda()
                target.cuda()
            return (net(feats).argmax(1) == target).float().mean()
        """
    )
    assert [f for f in _found(source) if f[1] == "DL104"] == [(9, "DL104"), (10, "DL104")]
    clean = source.replace("feats.cuda()", "feats = feats.cuda()").replace("target.cuda()", "target = target.cuda()")
    assert [f for f in _found(clean) if f[1] == "DL104"] == []


def test_a_map_location_that_is_none_on_some_path_is_no_mapping() -> None:
    source = textwrap.dedent(
        """\
        import torch


        def restore(net, ckpt, args):
            target = None
            if args.resume_on_host:
                target = "cpu"
            net.load_state_dict(torch.load(ckpt, map_location=target))
            return torch.load(ckpt + ".opt", map_location=None)


        def restore_guarded(net, ckpt):
            # only where a GPU is available: the guarded load, left alone
            where = None
            if not torch.cuda.is_available():
                where = torch.device("cpu")
            net.load_state_dict(torch.load(ckpt, map_location=where))


        def restore_both(net, ckpt, gpu):
            where = None
            if gpu:
                where = f"cuda:{gpu}"
            else:
                where = "cpu"
            net.load_state_dict(torch.load(ckpt, map_location=where))
        """
    )
    assert [f for f in _found(source) if f[1] == "DL501"] == [(8, "DL501"), (9, "DL501")]


def test_a_setting_that_holds_a_device_string_never_equals_a_torch_device() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from types import SimpleNamespace

        settings = SimpleNamespace(accel=torch.device("cuda"), batch=8)


        def place(model):
            if settings.accel != torch.device("cpu"):
                model = model.to(settings.accel)
            return model


        def pin(x):
            target = "cuda"
            if torch.device("cuda") == target:
                return x.pin_memory()
            return x


        if __name__ == "__main__":
            settings.accel = "cpu"
            place(torch.nn.Linear(2, 2))
        """
    )
    assert [f for f in _found(source) if f[1] == "DL502"] == [(8, "DL502"), (15, "DL502")]
    clean = source.replace('settings.accel = "cpu"', 'settings.accel = torch.device("cpu")').replace(
        'target = "cuda"', 'target = torch.device("cuda")'
    )
    assert [f for f in _found(clean) if f[1] == "DL502"] == []


def test_tensors_in_dicts_kept_in_a_plain_container_are_not_moved() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class MemoryBanks(nn.Module):
            def __init__(self, sizes, dim=16):
                super().__init__()
                self.banks = []
                for n in sizes:
                    self.banks.append({"keys": torch.randn(n, dim), "values": torch.zeros(n, dim)})
                self.query = nn.Linear(dim, dim)

            def forward(self, x):
                q = self.query(x)
                out = 0
                for bank in self.banks:
                    att = (q @ bank["keys"].T).softmax(-1)
                    out = out + att @ bank["values"]
                return out


        model = MemoryBanks([4, 8]).cuda()
        """
    )
    assert [f for f in _found(source) if f[1] == "DL102"] == [(10, "DL102")]
    clean = (
        source.replace(
            '                    self.banks.append({"keys": torch.randn(n, dim), "values": torch.zeros(n, dim)})\n',
            '                    self.register_buffer(f"keys_{n}", torch.randn(n, dim))\n'
            '                    self.register_buffer(f"values_{n}", torch.zeros(n, dim))\n'
            "                    self.banks.append(n)\n",
        )
        .replace('bank["keys"]', 'getattr(self, f"keys_{bank}")')
        .replace('bank["values"]', 'getattr(self, f"values_{bank}")')
    )
    assert [f for f in _found(clean) if f[1] == "DL102"] == []


def test_a_wrapped_checkpoint_loaded_into_a_model_from_a_builder_of_the_file() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Encoder(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.body = nn.Linear(width, width)

            def forward(self, x):
                return self.body(x)


        def build_encoder(cfg):
            enc = Encoder(cfg["width"])
            enc.head = nn.Linear(cfg["width"], 1)
            return enc


        def fit(cfg, loader):
            enc = nn.DataParallel(build_encoder(cfg).cuda())
            for x in loader:
                enc(x.cuda()).sum().backward()
            torch.save({"weights": enc.state_dict()}, "enc.ckpt")


        def evaluate(cfg):
            enc = build_encoder(cfg)
            ckpt = torch.load("enc.ckpt", map_location="cpu")
            enc.load_state_dict(ckpt["weights"])
            return enc
        """
    )
    assert [f for f in _found(source) if f[1] == "DL204"] == [(30, "DL204")]
    clean = source.replace('{"weights": enc.state_dict()}', '{"weights": enc.module.state_dict()}')
    assert [f for f in _found(clean) if f[1] == "DL204"] == []


def test_modules_registered_by_hand_in_a_plain_list_under_dataparallel() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Tower(nn.Module):
            def __init__(self, widths):
                super().__init__()
                self.stages = []
                for i, (a, b) in enumerate(zip(widths, widths[1:])):
                    stage = nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.ReLU())
                    self.stages.append(stage)
                    setattr(self, "stage%d" % i, stage)

            def forward(self, x):
                for stage in self.stages:
                    x = stage(x)
                return x


        class Detector(nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone = Tower([3, 16, 32])
                self.cls = nn.Conv2d(32, 4, 1)

            def forward(self, x):
                return self.cls(self.backbone(x))


        net = nn.DataParallel(Detector().cuda())
        """
    )
    assert [f for f in _found(source) if f[1] == "DL103"] == [(11, "DL103")]
    one_gpu = source.replace("nn.DataParallel(Detector().cuda())", "nn.DataParallel(Detector().cuda(), device_ids=[0])")
    assert [f for f in _found(one_gpu) if f[1] == "DL103"] == []
    clean = source.replace("self.stages = []", "self.stages = nn.ModuleList()").replace(
        '                    setattr(self, "stage%d" % i, stage)\n', ""
    )
    assert [f for f in _found(clean) if f[1] == "DL103"] == []


def test_a_torch_device_set_on_the_parsed_arguments_reaches_a_constructor_comparing_strings() -> None:
    source = textwrap.dedent(
        """\
        import argparse

        import torch


        class Exporter:
            def __init__(self, model, device):
                self.model = model.to(device)
                self.half = device != "cpu"

            def run(self, x):
                return self.model(x.half() if self.half else x)


        def export(opts, model):
            return Exporter(model, opts.device)


        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="0")
            opts = parser.parse_args()
            opts.device = torch.device("cpu" if opts.device == "cpu" else f"cuda:{opts.device}")
            export(opts, torch.nn.Linear(2, 2))
        """
    )
    assert [f for f in _found(source) if f[1] == "DL502"] == [(9, "DL502")]
    clean = source.replace('self.half = device != "cpu"', 'self.half = torch.device(device).type != "cpu"')
    assert [f for f in _found(clean) if f[1] == "DL502"] == []


def test_an_assignment_value_reads_the_name_before_it_is_rebound() -> None:
    source = textwrap.dedent(
        """\
        import argparse

        import torch

        if __name__ == "__main__":
            opts = argparse.ArgumentParser().parse_args()
            opts.device = torch.device("cpu" if opts.device == "cpu" else "cuda:0")
        """
    )
    assert [f for f in _found(source) if f[1] == "DL502"] == []


# -- DL303: an if/else whose two arms both update the scaler updates on every path ----------------

AMP_SKIP_BAD_STEP = """
    import torch


    def fit(net, batches, opt, amp_scaler, max_norm=1.0):
        for images, labels in batches:
            with torch.autocast("cuda"):
                out = net(images.cuda())
                loss = torch.nn.functional.mse_loss(out, labels.cuda())
            amp_scaler.scale(loss).backward()
            amp_scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm)
            if torch.isnan(norm) or torch.isinf(norm):
                print("bad gradients, dropping this batch")
                {skip_branch}
            else:
                amp_scaler.step(opt)
                amp_scaler.update()
            opt.zero_grad(set_to_none=True)
"""


def test_an_update_in_both_arms_of_the_skip_test_is_not_reported_as_skipped() -> None:
    clean = AMP_SKIP_BAD_STEP.format(skip_branch="amp_scaler.update()")
    assert [f for f in _found(clean) if f[1] == "DL303"] == []


def test_an_update_only_in_the_stepping_arm_is_still_reported() -> None:
    bad = AMP_SKIP_BAD_STEP.format(skip_branch="pass")
    assert [f for f in _found(bad) if f[1] == "DL303"] == [(18, "DL303")]


# -- the default device: an f-string accelerator, a helper of the caller, a `with` block, main() ---

DEFAULT_SET_BY_CONFIGURE = """
    import os

    import torch
    from torch.utils.data import DataLoader, TensorDataset


    def configure(rank):
        torch.set_default_device(f"cuda:{{rank}}")


    def make_batches(dataset):
        return DataLoader(dataset, batch_size=8, shuffle=True)


    def run():
        rank = int(os.environ.get("RANK", "0"))
        {first}
        {second}
        for (ids,) in loader:
            print(ids.sum())
"""


def test_a_default_set_with_an_f_string_by_a_helper_the_caller_ran_first_is_in_force() -> None:
    bad = DEFAULT_SET_BY_CONFIGURE.format(
        first="configure(rank)", second="loader = make_batches(TensorDataset(torch.arange(100)))"
    )
    assert [f for f in _found(bad) if f[1] == "DL114"] == [(13, "DL114")]


def test_a_default_set_after_the_loader_is_built_is_not_in_force_there() -> None:
    clean = DEFAULT_SET_BY_CONFIGURE.format(
        first="loader = make_batches(TensorDataset(torch.arange(100)))", second="configure(rank)"
    )
    assert [f for f in _found(clean) if f[1] == "DL114"] == []


DDP_UNDER_DEVICE_BLOCK = """
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel


    def make_encoder(width):
        return nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, 16))


    def worker(rank, world):
        dist.init_process_group("nccl", rank=rank, world_size=world)
        torch.cuda.set_device(rank)
        {build}
        ddp = DistributedDataParallel(encoder, device_ids=[rank])
        feats = torch.randn(32, 512).to(rank)
        ddp(feats).sum().backward()
"""


def test_a_model_built_inside_a_device_block_is_on_the_gpu_for_ddp() -> None:
    clean = DDP_UNDER_DEVICE_BLOCK.format(
        build='with torch.device(f"cuda:{rank}"):\n            encoder = make_encoder(512)'
    )
    assert [f for f in _found(clean) if f[1] == "DL205"] == []


def test_a_model_built_outside_any_device_block_is_still_reported_for_ddp() -> None:
    bad = DDP_UNDER_DEVICE_BLOCK.format(build="encoder = make_encoder(512)")
    assert [f for f in _found(bad) if f[1] == "DL205"] == [(16, "DL205")]


DEFAULT_SET_IN_MAIN = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    def fit(net, table, epochs):
        criterion = nn.NLLLoss(){move}
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(epochs):
            for feats, target in DataLoader(table, batch_size=32):
                loss = criterion(net(feats).log_softmax(-1), target)
                loss.backward()
                opt.step()
                opt.zero_grad()


    def main():
        {setter}
        table = TensorDataset(torch.randn(256, 12), torch.randint(0, 3, (256,)))
        fit(nn.Linear(12, 3), table, 2)


    if __name__ == "__main__":
        main()
"""


def test_loader_batches_under_a_default_set_by_the_scripts_main_are_not_known_host_tensors() -> None:
    clean = DEFAULT_SET_IN_MAIN.format(setter='torch.set_default_tensor_type("torch.cuda.FloatTensor")', move="")
    assert [f for f in _found(clean) if f[1] == "DL105"] == []


def test_loader_batches_without_a_default_are_still_host_tensors() -> None:
    bad = DEFAULT_SET_IN_MAIN.format(setter="torch.manual_seed(0)", move=".cuda()\n        net = net.cuda()")
    assert {f for f in _found(bad) if f[1] == "DL105"} == {(13, "DL105")}


# -- DL111: optimizer state that Optimizer.load_state_dict cannot move, loaded onto the CPU ----------

GROUP_TENSOR_OPTIMIZER = """
    import torch
    from torch import nn


    class TrustSGD(torch.optim.Optimizer):
        def __init__(self, params, lr=0.1, decay=0.9):
            super().__init__(params, dict(lr=lr, decay=decay))
        {restore}
        @torch.no_grad()
        def step(self):
            for pg in self.param_groups:
                if "norm_avg" not in pg:
                    pg["norm_avg"] = torch.zeros(len(pg["params"]), device=pg["params"][0].device)
                for k, w in enumerate(pg["params"]):
                    pg["norm_avg"][k].mul_(pg["decay"]).add_(w.grad.norm())
                    w.add_(w.grad / (1e-6 + pg["norm_avg"][k]), alpha=-pg["lr"])


    def resume(path):
        net = nn.Linear(16, 4).cuda()
        opt = TrustSGD(net.parameters())
        saved = torch.load(path, map_location=torch.device("cpu"))
        net.load_state_dict(saved["net"])
        opt.load_state_dict(saved["opt_state"])
        return net, opt
"""

RESTORE = """
        def load_state_dict(self, state_dict):
            super().load_state_dict(state_dict)
            for pg in self.param_groups:
                if "norm_avg" in pg:
                    pg["norm_avg"] = pg["norm_avg"].to(pg["params"][0].device)
"""


def test_a_tensor_kept_in_param_groups_and_loaded_onto_the_cpu_is_reported() -> None:
    bad = GROUP_TENSOR_OPTIMIZER.format(restore="")
    assert [f for f in _found(bad) if f[1] == "DL111"] == [(25, "DL111")]


def test_an_optimizer_that_moves_its_group_tensors_when_loading_is_clean() -> None:
    clean = GROUP_TENSOR_OPTIMIZER.format(restore=RESTORE)
    assert [f for f in _found(clean) if f[1] == "DL111"] == []


OBJECT_STATE_OPTIMIZER = """
    import torch
    from torch import nn


    class KFactor:
        def __init__(self, weight):
            self.a = torch.zeros(weight.shape[1], weight.shape[1], device=weight.device)
            self.g = torch.zeros(weight.shape[0], weight.shape[0], device=weight.device)


    class KFAC(torch.optim.Optimizer):
        def __init__(self, params, lr=0.01):
            super().__init__(params, dict(lr=lr))

        def step(self):
            for group in self.param_groups:
                for w in group["params"]:
                    entry = self.state[w]
                    if "factors" not in entry:
                        entry["factors"] = KFactor(w)
                    f = entry["factors"]
                    f.g.add_(w.grad @ w.grad.T)
                    w.data.add_(f.g @ w.grad, alpha=-group["lr"])


    def restart(ckpt_file, device):
        net = nn.Linear(8, 8).to(device)
        opt = KFAC(net.parameters())
        blob = torch.load(ckpt_file, map_location={where})
        opt.load_state_dict(blob["kfac"])
        return opt
"""


def test_tensors_inside_objects_of_the_state_loaded_onto_the_cpu_are_reported() -> None:
    bad = OBJECT_STATE_OPTIMIZER.format(where='"cpu"')
    assert [f for f in _found(bad) if f[1] == "DL111"] == [(31, "DL111")]


def test_the_same_state_loaded_onto_the_parameters_device_is_clean() -> None:
    clean = OBJECT_STATE_OPTIMIZER.format(where="device")
    assert [f for f in _found(clean) if f[1] == "DL111"] == []


# -- DL101: `device=self.device`, the constructor's CPU snapshot, read after the module moved --------

KEPT_DEVICE = """
    import torch
    from torch import nn


    class RayCaster(nn.Module):
        def __init__(self, steps, dev="cpu"):
            super().__init__()
            self.dev = torch.device(dev)
            self.steps = steps
            self.register_buffer("density", torch.rand(32, 32, 32))

        def _depths(self):
            return torch.linspace(0.0, 1.0, self.steps, device={where})

        def forward(self, origins):
            t = self._depths()
            return self.density.mean() * t


    caster = RayCaster(64)
    caster.cuda()
"""


def test_a_factory_on_the_device_the_constructor_kept_is_on_the_cpu_after_the_move() -> None:
    bad = KEPT_DEVICE.format(where="self.dev")
    found = [(line, code) for line, code in _found(bad) if code == "DL101"]
    assert found == [(14, "DL101")]
    assert any("the constructor stored" in m for m in _messages(bad))


def test_a_factory_on_a_registered_buffers_device_follows_the_move() -> None:
    clean = KEPT_DEVICE.format(where="self.density.device")
    assert [f for f in _found(clean) if f[1] == "DL101"] == []


def test_a_kept_device_that_a_construction_sets_to_the_gpu_is_not_claimed() -> None:
    clean = KEPT_DEVICE.format(where="self.dev").replace("RayCaster(64)", 'RayCaster(64, dev="cuda")')
    assert [f for f in _found(clean) if f[1] == "DL101"] == []


def test_a_submodule_s_bound_method_or_a_partial_of_a_submodule_kept_on_a_replicated_module_is_reported() -> None:
    source = textwrap.dedent(
        """\
        import functools

        import torch
        from torch import nn


        class Captioner(nn.Module):
            def __init__(self, vocab, dim):
                super().__init__()
                self.embed = nn.Embedding(vocab, dim)
                self.decoder = nn.GRU(dim, dim, batch_first=True)
                self.lookup = self.embed.forward
                self.decode = functools.partial(self.decoder, hx=None)
                self.alias = self.decoder

            def forward(self, tokens):
                out, _ = self.decode(self.lookup(tokens))
                return self.alias(out)[0]


        captioner = nn.DataParallel(Captioner(1000, 64)).cuda()
        """
    )
    assert [f for f in _found(source) if f[1] == "DL203"] == [(12, "DL203"), (13, "DL203")]
    assert "keeps the method `self.embed.forward` of a submodule bound" in _messages(source)[0]


# -- DL109: what a dataset's __init__ does on the GPU matters only where its workers read it ------

INIT_PRECOMPUTES = """
    import torch
    from torch.utils.data import Dataset


    def load_encoder(path, device):
        encoder = torch.jit.load(path)
        return encoder.to(device)


    class Embedded(Dataset):
        def __init__(self, texts, tokenizer, path, device="cuda"):
            encoder = load_encoder(path, device)
            self.vectors = {}
            with torch.no_grad():
                for i, text in enumerate(texts):
                    ids = torch.tensor(tokenizer(text), device=device)
                    self.vectors[i] = encoder(ids).mean(0).tolist()
            self.centre = torch.zeros(16).cuda()
            self.texts = texts

        def __len__(self):
            return len(self.texts)

        def __getitem__(self, index):
            return self._pair(index)

        def _pair(self, index):
            return self.texts[index], torch.tensor(self.vectors[index])
"""


def test_a_dataset_init_that_keeps_only_host_results_of_gpu_work_is_clean() -> None:
    # the encoder runs once in the main process; workers read `vectors` (lists) and `texts`;
    # `centre` stays on the GPU but no item code reads it
    assert [f for f in _found(INIT_PRECOMPUTES) if f[1] == "DL109"] == []


def test_a_gpu_value_of_init_that_item_code_reads_is_still_reported() -> None:
    twin = INIT_PRECOMPUTES.replace(
        "return self.texts[index], torch.tensor(self.vectors[index])",
        "return self.texts[index], torch.tensor(self.vectors[index]), self.centre",
    ).replace(
        "self.vectors[i] = encoder(ids).mean(0).tolist()",
        "self.vectors[i] = encoder(ids).mean(0)",
    )
    assert [f for f in _found(twin) if f[1] == "DL109"] == [(8, "DL109"), (19, "DL109")]


# -- DL401: a comparison with a string is a Python test, never a tensor's -----------------------

TAGGED_PARAMETERS = """
    import torch


    class Tagged(torch.optim.Optimizer):
        def __init__(self, params, lr=0.01):
            super().__init__(params, dict(lr=lr))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                weights = group["params"]
                for i, w in enumerate(weights):
                    d = w.grad
                    if f"{w.role}" != "norm":
                        d = d * 0.5
                    if w.role == "matrix":
                        d = d * 2
                    size = d.norm()
                    if size > 10.0:
                        d = d / size
                    w.add_(d, alpha=-group["lr"])
"""


def test_an_optimizer_step_testing_a_string_tag_of_a_parameter_reads_no_tensor() -> None:
    # lines 15 and 17 compare a Python attribute with strings; line 20 tests a device tensor
    assert [f for f in _found(TAGGED_PARAMETERS) if f[1] == "DL401"] == [(20, "DL401")]


# -- a whole program in one file that names no accelerator runs on the CPU -----------------------

LESSON = """
    import torch
    from torch import nn


    def fit(model, batches, epochs, lr):
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(epochs):
            seen, total = 0, 0.0
            for xb, yb in batches:
                loss = nn.functional.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(yb)
                seen += len(yb)
            print(total / seen)


    data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(10)]
    fit(nn.Linear(4, 3), data, 3, 0.1)
"""


def _found_at(source: str, path: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code) for f in result.findings]


def test_a_module_that_runs_its_own_training_and_names_no_accelerator_trains_on_the_cpu() -> None:
    assert [f for f in _found_at(LESSON, "lesson.py") if f[1] == "DL401"] == []
    assert [f for f in _found_at(LESSON, "lesson.ipynb") if f[1] == "DL401"] == []


def test_the_same_program_on_a_gpu_is_still_reported() -> None:
    twin = LESSON.replace("fit(nn.Linear(4, 3), data, 3, 0.1)", 'fit(nn.Linear(4, 3).to("cuda"), data, 3, 0.1)')
    assert [f for f in _found_at(twin, "lesson.py") if f[1] == "DL401"] == [(15, "DL401")]
    library = LESSON.replace("fit(nn.Linear(4, 3), data, 3, 0.1)", "")  # a helper others call: may be on a GPU
    assert [f for f in _found_at(library, "lesson.py") if f[1] == "DL401"] == [(15, "DL401")]


# -- DL401: a host copy the step hands to host code through host arithmetic is needed now ----------

PRIORITIZED = """
    import numpy as np
    import torch
    from torch import nn


    class Learner:
        def __init__(self, replay, alpha=0.6):
            self.net = nn.Linear(4, 2).cuda()
            self.opt = torch.optim.Adam(self.net.parameters())
            self.replay = replay
            self.alpha = alpha
            self.history = []

        def learn(self, obs, target, idx, weights):
            q = self.net(obs.cuda())
            td = (q - target.cuda()).abs().sum(1)
            loss = (td * weights.cuda()).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            errors = td.detach().cpu().numpy()
            prios = (errors + 1e-6) ** self.alpha
            self.replay.set_priorities(idx, prios)
"""


def test_priorities_made_from_the_host_copy_by_host_arithmetic_are_needed_now() -> None:
    assert [f for f in _found(PRIORITIZED) if f[1] == "DL401"] == []


def test_a_host_copy_only_kept_for_statistics_is_still_reported() -> None:
    twin = PRIORITIZED.replace("self.replay.set_priorities(idx, prios)", "self.history.append(prios.mean())")
    assert [f for f in _found(twin) if f[1] == "DL401"] == [(22, "DL401")]


# -- DL501: a module's state dict taken after moving it to the host is host data ------------------

HOST_SNAPSHOTS = """
    import os
    import torch


    class Snapshots:
        def __init__(self, root, device):
            self.root = root
            self.device = device

        def store(self, net, step):
            where = os.path.join(self.root, f"{step}_weights.pt")
            torch.save(net.to("cpu").state_dict(), where)
            net.to(self.device)

        def restore(self, net, step):
            where = os.path.join(self.root, f"{step}_weights.pt")
            net.load_state_dict(torch.load(where))
            return net.to(self.device)
"""


def test_a_class_that_saves_state_dicts_of_modules_moved_to_the_host_reloads_host_data() -> None:
    assert [f for f in _found(HOST_SNAPSHOTS) if f[1] == "DL501"] == []


def test_a_class_that_saves_device_state_dicts_still_needs_map_location() -> None:
    twin = HOST_SNAPSHOTS.replace(
        'torch.save(net.to("cpu").state_dict(), where)', "torch.save(net.state_dict(), where)"
    )
    assert [f for f in _found(twin) if f[1] == "DL501"] == [(18, "DL501")]


def test_a_dataset_handing_itself_whole_to_its_item_helper_keeps_its_gpu_init_reported() -> None:
    source = """
        import torch
        from torch.utils.data import Dataset


        def row_of(dataset, index):
            return dataset.table[index]


        class Table(Dataset):
            def __init__(self, rows, device):
                self.table = torch.tensor(rows).to(device)

            def __len__(self):
                return len(self.table)

            def __getitem__(self, index):
                return row_of(self, index)
    """
    assert [f for f in _found(source) if f[1] == "DL109"] == [(12, "DL109")]


def test_a_lazy_constant_default_set_where_a_replica_lacks_the_attribute_is_not_a_lost_write() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Detector(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.Conv2d(3, 3, 1) for _ in range(3)])

            def forward(self, x):
                if not hasattr(self, "exported"):
                    self.exported = False
                if not hasattr(self, "steps"):
                    self.steps = x.shape[0]
                for layer in self.layers:
                    x = layer(x)
                    if self.exported:
                        break
                return x


        detector = nn.DataParallel(Detector().cuda())
        """
    )
    assert [f for f in _found(source) if f[1] == "DL203"] == [(14, "DL203")]


CPU_SCRIPT_WITH_A_TOP_LEVEL_LOOP = """\
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 8, batch_first=True)

    def forward(self, x):
        h0 = torch.zeros(1, x.size(0), 8)
        out, _ = self.rnn(x, h0)
        return out


tagger = Tagger(){move}
optimizer = torch.optim.SGD(tagger.parameters(), lr=0.1)
for step in range(10):
    loss = tagger(torch.randn(2, 5, 8){move}).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_script_that_trains_in_a_top_level_loop_and_never_names_a_device_is_a_cpu_program() -> None:
    assert [f for f in _found(CPU_SCRIPT_WITH_A_TOP_LEVEL_LOOP.format(move="")) if f[1] == "DL101"] == []
    moved = CPU_SCRIPT_WITH_A_TOP_LEVEL_LOOP.format(move=".cuda()")
    assert [f for f in _found(moved) if f[1] == "DL101"] == [(11, "DL101")]


APEX_DDP_LAUNCH = """\
import os

import torch
import torch.distributed as dist
from apex import amp
from apex.parallel import DistributedDataParallel


def launch(build, lr):
    gpu = int(os.environ["SLURM_LOCALID"])
    dist.init_process_group("nccl", init_method="env://")
{set_device}    net = build()
    net.cuda()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    net, opt = amp.initialize(net, opt, opt_level="O2")
    return DistributedDataParallel(net), opt
"""


def test_apex_ddp_over_a_model_every_rank_moves_to_the_current_gpu_through_amp_initialize() -> None:
    bad = APEX_DDP_LAUNCH.format(set_device="")
    assert [f for f in _found(bad) if f[1] == "DL205"] == [(16, "DL205")]
    assert any("set_device(local_rank)` before moving the model" in m for m in _messages(bad))
    # with the rank's GPU made current, apex's wrapper needs no `device_ids` (it has none)
    fixed = APEX_DDP_LAUNCH.format(set_device="    torch.cuda.set_device(gpu)\n")
    assert [f for f in _found(fixed) if f[1] in ("DL205", "DL202")] == []


def test_torch_compile_keeps_the_placement_of_the_module_it_compiles() -> None:
    source = textwrap.dedent(
        """\
        import os

        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        def wrap(encoder, rank):
            torch.distributed.init_process_group("nccl")
            encoder = encoder.to("cuda:0")
            encoder = torch.compile(encoder, mode="max-autotune")
            return DDP(encoder, device_ids=[rank])
        """
    )
    assert [f for f in _found(source) if f[1] == "DL205"] == [(11, "DL205")]


PARAMETER_MOVED_BY_HAND = """\
import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self, width, device):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.build(width, device)

    def build(self, width, device):
        self.temperature = nn.Parameter(torch.ones(1){init}){move}
        self.scale = nn.Parameter(torch.ones(width)).to(torch.float32)

    def forward(self, x):
        return self.proj(x) * self.scale / self.temperature
"""


def test_a_parameter_moved_by_hand_is_a_plain_tensor_that_the_module_never_registers() -> None:
    bad = PARAMETER_MOVED_BY_HAND.format(init="", move=".to(device)")
    assert [f for f in _found(bad) if f[1] == "DL102"] == [(12, "DL102")]
    assert any("`.to()` returns for an `nn.Parameter`" in m for m in _messages(bad))
    created_there = PARAMETER_MOVED_BY_HAND.format(init="", move="").replace(
        "torch.ones(1)", "torch.ones(1, device=device)"
    )
    assert [f for f in _found(created_there) if f[1] == "DL102"] == []
    cast = PARAMETER_MOVED_BY_HAND.format(init="", move=".to(dtype=torch.float32)")
    assert [f for f in _found(cast) if f[1] == "DL102"] == []


WRAPPING_OPTIMIZER = """\
import torch
from torch import nn
from torch.optim import Optimizer


class SlowFast(Optimizer):
    def __init__(self, inner, sync_every=6):
        self.inner = inner
        self.sync_every = sync_every
        self.param_groups = inner.param_groups
        self.state = inner.state
        self.anchors = {{}}
        for group in self.param_groups:
            for weight in group["params"]:
                self.anchors[weight] = torch.clone(weight).detach()

    def step(self, closure=None):
        return self.inner.step(closure)


def fit(net: nn.Module, batches, device):
{early}    sgd = torch.optim.SGD(net.parameters(), lr=0.05)
    opt = SlowFast(sgd)
    schedule = torch.optim.lr_scheduler.StepLR(sgd, step_size=10)
{late}    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(net(x.to(device)), y.to(device)).backward()
        opt.step()
        schedule.step()
"""


def test_an_optimizer_wrapping_another_copies_its_parameters_before_the_model_moves() -> None:
    late = WRAPPING_OPTIMIZER.format(early="", late="    net.to(device)\n")
    assert [f for f in _found(late) if f[1] == "DL111"] == [(23, "DL111")]
    early = WRAPPING_OPTIMIZER.format(early="    net.to(device)\n", late="")
    assert [f for f in _found(early) if f[1] == "DL111"] == []


NESTED_PLAIN_CONTAINERS = """\
import torch
from torch import nn
from torchmetrics.classification import BinaryAUROC, BinaryF1Score


class Scorer(nn.Module):
    def __init__(self, splits=("fit", "holdout")):
        super().__init__()
        self.body = nn.Linear(16, 1)
        self.trackers = {wrap}[
            [BinaryAUROC(), BinaryF1Score()] for _ in splits
        ]{close}
        self.heads = [{{"mean": nn.Linear(16, 1)}}, {{"mean": nn.ReLU()}}]

    def forward(self, x, y, split=0):
        logits = self.body(x).squeeze(-1)
        for tracker in self.trackers[split]:
            tracker.update(logits.sigmoid(), y)
        return logits + self.heads[0]["mean"](x).squeeze(-1)
"""


def test_modules_in_containers_nested_in_a_plain_container_are_unregistered() -> None:
    plain = NESTED_PLAIN_CONTAINERS.format(wrap="", close="")
    found = [f for f in _found(plain) if f[1] == "DL103"]
    assert found == [(10, "DL103"), (13, "DL103")]
    registered = NESTED_PLAIN_CONTAINERS.format(wrap="nn.ModuleList(", close=")").replace(
        "[BinaryAUROC(), BinaryF1Score()]", "nn.ModuleList([BinaryAUROC(), BinaryF1Score()])"
    )
    assert [f for f in _found(registered) if f[1] == "DL103"] == [(13, "DL103")]


LOOPED_TRACKERS = """\
import torch
from torch import nn


class Mean:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, value):
        self.total += value{read}
        self.count += 1


class Last:
    def __init__(self):
        self.values = []

    def add(self, value):
        self.values.append(value{read})


class Trainer:
    def __init__(self, net: nn.Module, device):
        self.net = net.to(device)
        self.device = device
        self.opt = torch.optim.AdamW(self.net.parameters())
        self.trackers = [Mean(), Last()]

    def run(self, loader):
        for inputs, labels in loader:
            loss = nn.functional.cross_entropy(self.net(inputs.to(self.device)), labels.to(self.device))
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            for tracker in self.trackers:
                tracker.add(loss.detach())
"""


def test_a_method_of_each_object_a_training_loop_iterates_runs_on_every_step() -> None:
    synced = [f for f in _found(LOOPED_TRACKERS.format(read=".item()")) if f[1] == "DL401"]
    assert synced == [(10, "DL401"), (19, "DL401")]
    assert [f for f in _found(LOOPED_TRACKERS.format(read="")) if f[1] == "DL401"] == []


LAZY_DEVICE_CACHE = """\
import math

import torch
from torch import nn


class RotaryTable(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self._angles = None

    def _table(self, length, device):
        if {test}:
            steps = torch.arange(length, device=device, dtype=torch.float32)
            freqs = torch.exp(torch.arange(0, self.dim, 2, device=device) * (-math.log(10000.0) / self.dim))
            self._angles = torch.outer(steps, freqs)
        return self._angles[:length]

    def forward(self, q):
        angles = self._table(q.size(1), q.device)
        return q * angles.cos().repeat_interleave(2, dim=-1)
"""


def test_a_cache_filled_once_on_the_inputs_device_is_left_behind_when_the_model_moves() -> None:
    once = LAZY_DEVICE_CACHE.format(test="self._angles is None or self._angles.size(0) < length")
    assert [f for f in _found(once) if f[1] == "DL102"] == [(11, "DL102")]
    assert any("starts empty and caches a tensor made on the inputs' device" in m for m in _messages(once))
    follows = LAZY_DEVICE_CACHE.format(test="self._angles is None or self._angles.device != device")
    assert [f for f in _found(follows) if f[1] == "DL102"] == []
    registered = once.replace("self._angles = None", 'self.register_buffer("_angles", None, persistent=False)')
    assert [f for f in _found(registered) if f[1] == "DL102"] == []


def test_a_factory_placed_by_a_name_bound_to_an_inputs_device_is_made_where_that_input_is() -> None:
    # `where = seed.device` (also as part of a tuple assignment): the factory copies `seed`'s place;
    # a host `seed` handed in by a caller that built it on the CPU is the caller's choice, not a
    # CPU tensor made here
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Sampler(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(6, 6)

            def run(self, seed):
                count, where = seed.size(0), seed.device
                steps = torch.full((count,), 3, device=where, dtype=torch.long)
                return self.proj(torch.rand(count, 6, device=where) * steps[:, None])

            def dry_run(self):
                return self.run(torch.ones(2, 6).cpu())
        """
    )
    assert [f for f in _found(source) if f[1] == "DL101"] == []


def test_a_factory_placed_by_a_name_bound_to_a_host_tensors_device_is_reported_where_that_tensor_is_made() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Sampler(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(6, 6)

            def forward(self, feats):
                grid = torch.linspace(0, 1, 6)
                where = grid.device
                return self.proj(feats * torch.rand(feats.size(0), 6, device=where))
        """
    )
    assert [f for f in _found(source) if f[1] == "DL101"] == [(11, "DL101")]


DTYPE_CAST_AFTER_A_LOADED_OPTIMIZER = """\
import torch


def restore(path, model, optimizer=None):
    blob = torch.load(path, map_location="cpu")
    if optimizer is not None:
        optimizer.load_state_dict(blob["optim"])
    weights = blob["weights"]
    model = model.to({target})
    model.load_state_dict(weights)
    return model
"""


def test_a_cast_to_a_dtype_is_no_move_of_the_model_after_its_optimizer_state_is_loaded() -> None:
    # `Tensor.to(dtype)` / `Module.to(dtype)` keep the values where they are: only a move towards
    # the device leaves the loaded optimizer state behind on the host
    for cast in ("next(iter(weights.values())).dtype", "torch.bfloat16", "dtype=torch.float16"):
        source = DTYPE_CAST_AFTER_A_LOADED_OPTIMIZER.format(target=cast)
        assert [f for f in _found(source) if f[1] == "DL111"] == [], cast
    moved = DTYPE_CAST_AFTER_A_LOADED_OPTIMIZER.format(target='torch.device("cuda")')
    assert [f for f in _found(moved) if f[1] == "DL111"] == [(7, "DL111")]


def test_an_optional_parameter_cast_to_the_inputs_dtype_is_no_per_call_constant_copy() -> None:
    # `nn.Parameter(...) if bias else None` is a parameter (it moves with the module), and
    # `.to(x.dtype)` is a cast on the device; a plain CPU tensor attribute moved per call still is one
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Dense(nn.Module):
            def __init__(self, n, m, bias=True):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(m, n)) if n else None
                self.bias = nn.Parameter(torch.zeros(m)) if bias else None
                self.scale = torch.ones(m)

            def forward(self, x):
                y = x @ self.weight.to(x.device).t()
                if self.bias is not None:
                    y = y + self.bias.to(x.dtype)
                y = y * self.scale.to(x.dtype)
                return y * self.scale.to(x.device)
        """
    )
    assert [f for f in _found(source) if f[1] == "DL405"] == [(17, "DL405")]


SCORER_THAT_TAKES_A_MODULE_OR_A_FUNCTION = """\
import torch
from torch import nn


def score(loader, scorer):
    total = 0.0
    for feats, labels in loader:
        if not isinstance(scorer, nn.Module):
            total += (scorer(feats).argmax(1) == labels).sum().item()
            continue
        total += (scorer(feats{move}).argmax(1) == labels{move}).sum().item()
    return total


def fit(model, loader, device):
    model = model.to(device)
    for feats, labels in loader:
        loss = nn.functional.cross_entropy(model(feats.to(device)), labels.to(device))
        loss.backward()
    return score(loader, model)
"""


def test_the_path_where_isinstance_of_a_module_fails_does_not_call_the_moved_model() -> None:
    # the helper scores a hand-written function on the host under `not isinstance(scorer,
    # nn.Module)`; the module path is where the moved model runs, and there unmoved batches are a bug
    moved = SCORER_THAT_TAKES_A_MODULE_OR_A_FUNCTION.format(move=".to(next(scorer.parameters()).device)")
    assert [f for f in _found(moved) if f[1] == "DL105"] == []
    unmoved = SCORER_THAT_TAKES_A_MODULE_OR_A_FUNCTION.format(move="")
    assert [f for f in _found(unmoved) if f[1] == "DL105"] == [(11, "DL105"), (11, "DL105")]


DATASET_WITH_AN_OPTIONAL_DEVICE_CACHE = """\
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __init__(self, paths, device="cpu"):
        self.items = []
        for path in paths:
            feats = torch.from_numpy(np.load(path)).float().to(device)
            self.items.append(feats)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def loaders(cfg):
    train = Frames(cfg.train_paths, device=cfg.cache_device)
    fit = DataLoader(train, batch_size=8, shuffle=True, num_workers={workers})
    check = Frames(cfg.valid_paths)
    held = DataLoader(check, batch_size=1, num_workers=0)
    return fit, held
"""


def test_a_dataset_cached_on_the_gpu_on_request_with_workers_only_for_the_host_is_not_a_forked_cuda_use() -> None:
    for workers in (
        'cfg.workers if cfg.cache_device == "cpu" else 0',
        '0 if cfg.cache_device != "cpu" else cfg.workers',
    ):
        source = DATASET_WITH_AN_OPTIONAL_DEVICE_CACHE.format(workers=workers)
        assert [f for f in _found(source) if f[1] == "DL109"] == [], workers
    forked = DATASET_WITH_AN_OPTIONAL_DEVICE_CACHE.format(workers="cfg.workers")
    assert [f for f in _found(forked) if f[1] == "DL109"] == [(10, "DL109")]


def test_a_discarded_move_of_a_value_the_function_calls_is_a_module_moved_in_place() -> None:
    # what `.to("cpu")` of an object the file cannot see gives is read as a host tensor, but a
    # value the code then calls (`stage(x)`) is no tensor: `Module.cuda()` moves it in place
    source = textwrap.dedent(
        """\
        import torch


        def build(kind, where="cpu"):
            stage = make_stage(kind)
            stage = stage.to(where)
            return stage


        def run_levels(kinds, x):
            stages = [build(k) for k in kinds]
            outs = []
            for i in range(len(stages)):
                stage = stages[i]
                stage.cuda()
                outs.append(stage(x.cuda(), fast=True))
                stage.cpu()
            return outs


        def run_values(kinds, x):
            stages = [build(k) for k in kinds]
            outs = []
            for i in range(len(stages)):
                stage = stages[i]
                stage.cuda()
                outs.append(stage + x)
            return outs
        """
    )
    assert [f for f in _found(source) if f[1] == "DL104"] == [(26, "DL104")]


CHECKPOINT_WRITTEN_TWICE = """\
import torch
from torch import nn


def export(width):
    net = nn.DataParallel(nn.Linear(width, 2).cuda())
    torch.save(net.{first}state_dict(), "weights.pt")
    torch.save(net.{second}state_dict(), "weights.pt")
    plain = nn.Linear(width, 2)
    plain.load_state_dict(torch.load("weights.pt", map_location="cpu"))
    return plain
"""


def test_a_load_reads_what_the_last_save_to_its_path_before_it_wrote() -> None:
    # the second save overwrites the file: the load reads the bare model's keys (a notebook that
    # shows the failing save in one cell and the fix in the next has the same shape)
    overwritten = CHECKPOINT_WRITTEN_TWICE.format(first="", second="module.")
    assert [f for f in _found(overwritten) if f[1] == "DL204"] == []
    wrapped_last = CHECKPOINT_WRITTEN_TWICE.format(first="module.", second="")
    assert [f for f in _found(wrapped_last) if f[1] == "DL204"] == [(10, "DL204")]


def test_a_removed_parallel_api_on_the_path_where_a_feature_test_of_torch_fails_is_a_compatibility_path() -> None:
    source = textwrap.dedent(
        """\
        import torch
        import torch.distributed as dist

        if not hasattr(dist, "ReduceOp"):
            SUM = dist.deprecated.reduce_op.SUM
        else:
            SUM = dist.ReduceOp.SUM

        if hasattr(torch.distributed, "ReduceOp"):
            MAX = torch.distributed.ReduceOp.MAX
        else:
            MAX = torch.distributed.deprecated.reduce_op.MAX

        MIN = torch.distributed.deprecated.reduce_op.MIN
        """
    )
    assert [f for f in _found(source) if f[1] == "DL206"] == [(14, "DL206")]


CPU_SCRIPT_THAT_ONLY_SHOWS_ITS_DEVICE = """\
import os

import torch
from torch import nn

os.environ["CUDA_VISIBLE_DEVICES"] = "0"
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print("running on", device)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 8, batch_first=True)

    def forward(self, x):
        h0 = torch.zeros(1, x.size(0), 8)
        out, _ = self.rnn(x, h0)
        return out


tagger = Tagger(){move}
optimizer = torch.optim.SGD(tagger.parameters(), lr=0.1)
for step in range(10):
    loss = tagger(torch.randn(2, 5, 8){move}).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_script_that_only_prints_the_device_it_chose_is_a_cpu_program() -> None:
    # the device is chosen and shown, never used to place anything: everything runs on the CPU
    assert [f for f in _found(CPU_SCRIPT_THAT_ONLY_SHOWS_ITS_DEVICE.format(move="")) if f[1] == "DL101"] == []
    moved = CPU_SCRIPT_THAT_ONLY_SHOWS_ITS_DEVICE.format(move=".to(device)")
    assert [f for f in _found(moved) if f[1] == "DL101"] == [(17, "DL101")]


# -- only DistributedDataParallel keeps a `device`: DataParallel raises on it -------------------

WRAPPED_DEVICE_READ = """\
import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(16, 1)

    @property
    def device(self):
        return self.head.weight.device

    def forward(self, x):
        return self.head(x)


def score_all(net, rows):
    return [net(row.to(net.device)) for row in rows]


def run(rows, gpus):
    net = Scorer().cuda()
    if gpus > 1:
        net = {wrapper}(net)
    return score_all(net, rows)
"""


def test_a_dataparallel_wrapper_read_for_its_device_in_a_helper_raises() -> None:
    dp = WRAPPED_DEVICE_READ.format(wrapper="nn.DataParallel")
    assert [f for f in _found(dp) if f[1] == "DL203"] == [(19, "DL203")]
    ddp = WRAPPED_DEVICE_READ.format(wrapper="nn.parallel.DistributedDataParallel")
    assert [f for f in _found(ddp) if f[1] == "DL203"] == []
    unwrapped = dp.replace("return score_all(net, rows)", "return score_all(getattr(net, 'module', net), rows)")
    assert [f for f in _found(unwrapped) if f[1] == "DL203"] == []


# -- a module moved in place by a statement stays what it was ----------------------------------

WRAPPER_MOVED_BY_A_STATEMENT = """\
import torch
from torch import nn


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.body(x)


def fit(network, batches, loss_fn, opt):
    for features, labels in batches:
        labels = labels.to("cuda", non_blocking=True)
        scores = network(features)
        opt.zero_grad()
        loss_fn(scores, labels).backward()
        opt.step()


def launch(batches):
    tower = {wrap}
    tower.to("cuda")
    opt = torch.optim.Adam(tower.parameters())
    fit(tower, batches, nn.CrossEntropyLoss(), opt)
"""


def test_a_dataparallel_wrapper_moved_by_a_statement_still_scatters_its_inputs() -> None:
    wrapped = WRAPPER_MOVED_BY_A_STATEMENT.format(wrap="nn.DataParallel(Tower(), device_ids=[0, 1, 2])")
    assert [f for f in _found(wrapped) if f[1] == "DL105"] == []
    bare = WRAPPER_MOVED_BY_A_STATEMENT.format(wrap="Tower()")
    assert [f for f in _found(bare) if f[1] == "DL105"] == [(17, "DL105")]


# -- a forward that rebuilds an attribute and returns it loses nothing under DataParallel ------

PER_CALL_SCRATCH = """\
import torch
from torch import nn


class PyramidHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.levels = nn.ModuleList([nn.Conv2d(8, 8, 3, padding=1) for _ in range(3)])

    def forward(self, x):
        self.maps = {{}}
        for index, level in enumerate(self.levels):
            x = level(x)
            self.maps[index] = x
        self.maps = [self.maps[i] for i in sorted(self.maps)]
        return self.maps
{reader}

head = nn.DataParallel(PyramidHead().cuda())
"""


def test_an_attribute_rebuilt_and_returned_by_forward_is_scratch_space_for_the_call() -> None:
    assert [f for f in _found(PER_CALL_SCRATCH.format(reader="")) if f[1] == "DL203"] == []
    kept = PER_CALL_SCRATCH.format(reader="\n    def last_maps(self):\n        return self.maps\n")
    assert [f for f in _found(kept) if f[1] == "DL203"] == [(11, "DL203"), (15, "DL203")]


# -- OpenMMLab's wrappers are DataParallel / DDP; a set-up `if` whose other arms raise is the way on

MM_LAUNCH = """\
import os

import torch
import torch.distributed as dist
from mmcv.parallel import MMDataParallel, MMDistributedDataParallel


def bring_up(mode):
    if mode == "none":
        raise RuntimeError("single-process runs use MMDataParallel")
    elif mode == "torchrun":
        gpu = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(gpu)
        dist.init_process_group("nccl")
    else:
        raise ValueError(mode)


def fit(segmentor, loaders, runner_cls, mode):
    bring_up(mode)
    segmentor = MMDistributedDataParallel(segmentor.cuda(){ids})
    runner = runner_cls(segmentor)
    segmentor.train_step(next(iter(loaders[0])), None)
    runner.run(loaders)
"""


def test_openmmlab_ddp_is_judged_as_ddp_with_its_own_steps_and_a_raising_setup_branch() -> None:
    found = _found(MM_LAUNCH.format(ids=""))
    assert [f for f in found if f[1] in ("DL203", "DL205")] == [(21, "DL205")]
    fixed = _found(MM_LAUNCH.format(ids=", device_ids=[torch.cuda.current_device()]"))
    assert [f for f in fixed if f[1] in ("DL203", "DL205")] == []


# -- OpenMMLab's checkpoint loaders hand map_location=None on to torch.load ---------------------

MM_RESTORE = """\
import torch
from mmcv.runner import load_checkpoint
from mmengine.runner.checkpoint import _load_checkpoint as read_weights


def restore(detector, args):
    meta = load_checkpoint(detector, args.checkpoint{first})
    teacher = read_weights(args.teacher{second})
    detector.load_state_dict(teacher["state_dict"], strict=False)
    return detector.cuda().eval(), meta
"""


def test_openmmlab_checkpoint_loaders_without_map_location_restore_to_the_saving_gpu() -> None:
    bare = _found(MM_RESTORE.format(first="", second=""))
    assert [f for f in bare if f[1] == "DL501"] == [(7, "DL501"), (8, "DL501")]
    mapped = _found(MM_RESTORE.format(first=", map_location='cpu'", second=", 'cpu'"))
    assert [f for f in mapped if f[1] == "DL501"] == []


# -- a torchvision model picked by name is a bare model ----------------------------------------

PICKED_BY_NAME = """\
import torch
import torchvision


def export_weights(net, where):
    torch.save({{"weights": {saved}, "epoch": 3}}, where)


def fine_tune(name, where, rank):
    backbone = getattr(torchvision.models, name)(weights=None)
    blob = torch.load(where, map_location="cpu")
    backbone.load_state_dict(blob["weights"])
    net = torch.nn.parallel.DistributedDataParallel(backbone.cuda(rank), device_ids=[rank])
    export_weights(net, where)
"""


def test_a_torchvision_model_picked_by_name_is_bare_when_it_loads_a_wrapper_checkpoint() -> None:
    wrapped = PICKED_BY_NAME.format(saved="net.state_dict()")
    assert [f for f in _found(wrapped) if f[1] == "DL204"] == [(12, "DL204")]
    unwrapped = PICKED_BY_NAME.format(saved="net.module.state_dict()")
    assert [f for f in _found(unwrapped) if f[1] == "DL204"] == []


SLICED_CONSTANT_COPY = """\
import torch
from torch import nn


class PositionTable(nn.Module):
    def __init__(self, width, longest=4096):
        super().__init__()
        grid = torch.arange(longest, dtype=torch.float32)[:, None] * torch.ones(width)
        self.sines = grid.sin()[None, :, :]

    def forward(self, tokens):
        return tokens + self.sines{index}.to(device=tokens.device, dtype=tokens.dtype)
"""


def test_a_constant_sliced_with_ellipsis_or_none_before_its_per_call_copy_is_still_a_constant_copy() -> None:
    for index in ("[..., : tokens.size(1), :]", "[0, : tokens.size(1)][None]", "[None, 0, ...]"):
        assert [f for f in _found(SLICED_CONSTANT_COPY.format(index=index)) if f[1] == "DL405"] == [(12, "DL405")]
    gathered = SLICED_CONSTANT_COPY.format(index="[:, tokens.argmax(-1)]")  # rows that vary per call
    assert [f for f in _found(gathered) if f[1] == "DL405"] == []
    registered = SLICED_CONSTANT_COPY.format(index="[..., : tokens.size(1), :]").replace(
        "self.sines = grid.sin()[None, :, :]", 'self.register_buffer("sines", grid.sin()[None, :, :], persistent=False)'
    )
    assert [f for f in _found(registered) if f[1] == "DL405"] == []


RESUMED_THEN_WRAPPED = """\
import torch
from torch import nn


def fit(encoder: nn.Module, snapshot_file: str, loader, resume: bool = True):
    opt = torch.optim.AdamW(encoder.parameters(), lr=3e-4)
    if resume:
        snapshot = torch.load(snapshot_file, map_location="cpu")
        encoder.load_state_dict(snapshot["weights"])
        opt.load_state_dict(snapshot["opt"])
    {wrap}
    for inputs, targets in loader:
        loss = nn.functional.mse_loss(runner(inputs.cuda()), targets.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_an_optimizer_state_loaded_before_its_model_is_wrapped_and_moved_stays_on_the_cpu() -> None:
    for wrap in (
        "runner = nn.DataParallel(encoder, device_ids=[0, 1]).cuda()",
        "runner = torch.nn.parallel.DistributedDataParallel(encoder).to('cuda')",
    ):
        assert [f for f in _found(RESUMED_THEN_WRAPPED.format(wrap=wrap)) if f[1] == "DL111"] == [(10, "DL111")]
    moved_first = RESUMED_THEN_WRAPPED.replace("    opt = torch", "    encoder.cuda()\n    opt = torch").format(
        wrap="runner = nn.DataParallel(encoder)"
    )
    assert [f for f in _found(moved_first) if f[1] == "DL111"] == []
    other = RESUMED_THEN_WRAPPED.format(wrap="runner = nn.DataParallel(nn.Linear(4, 4)).cuda()")
    assert [f for f in _found(other) if f[1] == "DL111"] == []


SKIPPED_AFTER_STEP = """\
import math

import torch


def fit(net, batches, opt, amp_scaler, log_every=20):
    for i, (x, y) in enumerate(batches):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.l1_loss(net(x.cuda()), y.cuda())
        opt.zero_grad()
        amp_scaler.scale(loss).backward()
        amp_scaler.step(opt)
{between}
        amp_scaler.update()
"""


def test_an_update_that_a_continue_after_the_scaler_step_skips_is_partial() -> None:
    scaler_made = "    amp_scaler = torch.amp.GradScaler('cuda')\n"
    for between in (
        "        if i % log_every == 0:\n            value = loss.item()\n            if value != value:\n"
        "                print('nan at', i)\n                continue",
        "        bad = not math.isfinite(loss.float().sum().item())\n        if bad:\n            continue",
    ):
        src = SKIPPED_AFTER_STEP.format(between=between).replace("    for i,", scaler_made + "    for i,", 1)
        assert [f for f in _found(src) if f[1] == "DL303"] == [
            (src.count("\n", 0, src.index("amp_scaler.update")) + 1, "DL303")
        ]
    # the update placed before the check, or a check that ends the training (`break`), is fine
    ok = SKIPPED_AFTER_STEP.format(between="        if loss.isnan().item():\n            break").replace(
        "    for i,", scaler_made + "    for i,", 1
    )
    assert [f for f in _found(ok) if f[1] == "DL303"] == []
    first = SKIPPED_AFTER_STEP.replace("{between}\n        amp_scaler.update()\n", "{between}\n").format(
        between="        amp_scaler.update()\n        if i % log_every == 0:\n            continue"
    )
    first = first.replace("    for i,", scaler_made + "    for i,", 1)
    assert first.count("amp_scaler.update()") == 1
    assert [f for f in _found(first) if f[1] == "DL303"] == []


WRAPPER_HANDED_TO_HELPER = """\
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 5)

    def forward(self, feats):
        return self.proj(feats)


def profile(steps, runner):
    total = 0.0
    for _ in range(steps):
        {use}
    return total


def main():
    tagger = Tagger(){move}
    parallel = nn.DataParallel(tagger, device_ids=[0, 1])
    print(profile({args}))
"""


def test_a_wrapper_handed_to_a_helper_of_the_file_that_runs_it_counts_as_run() -> None:
    run = "total += runner(torch.randn(64, 32)).sum().item()"
    for args in ("10, parallel", "steps=10, runner=parallel"):
        src = WRAPPER_HANDED_TO_HELPER.format(use=run, move="", args=args)
        assert [f for f in _found(src) if f[1] == "DL202"] == [(23, "DL202")]
    # the model moved to device_ids[0] first; a helper that moves the wrapper before running it;
    # a helper that only hands it on to code the file does not show
    moved = WRAPPER_HANDED_TO_HELPER.format(use=run, move='.to("cuda:0")', args="10, parallel")
    assert [f for f in _found(moved) if f[1] == "DL202"] == []
    helper_moves = WRAPPER_HANDED_TO_HELPER.format(
        use='runner.to("cuda:0")\n        ' + run, move="", args="10, parallel"
    )
    assert [f for f in _found(helper_moves) if f[1] == "DL202"] == []
    handed_on = WRAPPER_HANDED_TO_HELPER.format(use="total += trainer.fit(runner)", move="", args="10, parallel")
    assert [f for f in _found(handed_on) if f[1] == "DL202"] == []


ALIAS_LAMBDA_IN_CONTAINED_STAGE = """\
import torch
from torch import nn


class Stage(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, width)
        {keep}

    def forward(self, x):
        return x + self.proj(self.post(x))


class Net(nn.Module):
    def __init__(self, width=64, depth=3):
        super().__init__()
        self.stages = {container}
        self.out = nn.Linear(width, 2)

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return self.out(x)


net = nn.DataParallel(Net().cuda())
"""


def test_a_lambda_over_a_local_alias_of_a_layer_in_a_class_held_in_a_module_container_is_replicated() -> None:
    keep = "norm = self.norm\n        self.post = lambda t: torch.relu(norm(t))"
    for container in (
        "nn.ModuleList([Stage(width) for _ in range(depth)])",
        "nn.Sequential(*[Stage(width) for _ in range(depth)])",
        "nn.ModuleDict(dict(main=nn.ModuleList([Stage(width)]), extra=nn.Identity()))",
    ):
        src = ALIAS_LAMBDA_IN_CONTAINED_STAGE.format(keep=keep, container=container)
        if "ModuleDict" in container:
            src = src.replace("for stage in self.stages:", 'for stage in self.stages["main"]:')
        assert [f for f in _found(src) if f[1] == "DL203"] == [(11, "DL203")]
    # the alias read when the method runs (each replica's own layer), or a name bound twice
    method = ALIAS_LAMBDA_IN_CONTAINED_STAGE.format(
        keep="\n    def post(self, t):\n        norm = self.norm\n        return torch.relu(norm(t))",
        container="nn.ModuleList([Stage(width) for _ in range(depth)])",
    )
    assert [f for f in _found(method) if f[1] == "DL203"] == []
    plain = ALIAS_LAMBDA_IN_CONTAINED_STAGE.format(
        keep="scale = 2.0\n        self.post = lambda t: torch.relu(t * scale)",
        container="nn.ModuleList([Stage(width) for _ in range(depth)])",
    )
    assert [f for f in _found(plain) if f[1] == "DL203"] == []


OPERATORS_HANDED_TO_REPLICATED_MODULE = """\
import torch
from torch import nn


class GraphDecoder(nn.Module):
    def __init__(self, width, adjacency, pools):
        super().__init__()
        self.adjacency = adjacency
        self.pools = pools
        self.lin = nn.Linear(width, width)

    def forward(self, h):
        for level, pool in enumerate(self.pools):
            h = torch.sparse.mm(pool, self.lin(h))
            h = h[:, self.adjacency[level]].mean(-1)
        return h


def build(levels, width, gpus):
    adjacency = {adj}
    pools = {pools}
    net = GraphDecoder(width, adjacency, pools).cuda()
    return nn.DataParallel(net, device_ids=gpus)
"""


def test_gpu_operators_a_caller_hands_a_replicated_module_are_shared_by_its_replicas() -> None:
    adj = "[torch.tensor(l.neighbours).cuda() for l in levels]"
    pools = "tuple(torch.from_numpy(l.pool).to_sparse().cuda() for l in levels)"
    src = OPERATORS_HANDED_TO_REPLICATED_MODULE.format(adj=adj, pools=pools)
    assert [f for f in _found(src) if f[1] == "DL102"] == [(8, "DL102"), (9, "DL102")]
    assert "handed to `__init__`" in _messages(src)[0]
    one_gpu = src.replace("device_ids=gpus", "device_ids=[0]")
    assert [f for f in _found(one_gpu) if f[1] == "DL102"] == []
    registered = (
        src.replace(
            "        self.adjacency = adjacency\n        self.pools = pools\n",
            "        self.n = len(pools)\n        for i, (a, p) in enumerate(zip(adjacency, pools)):\n"
            '            self.register_buffer(f"adj_{i}", a)\n            self.register_buffer(f"pool_{i}", p)\n',
        )
        .replace(
            "        for level, pool in enumerate(self.pools):\n",
            '        for level in range(self.n):\n            pool = getattr(self, f"pool_{level}")\n',
        )
        .replace("self.adjacency[level]", 'getattr(self, f"adj_{level}")')
    )
    assert [f for f in _found(registered) if f[1] == "DL102"] == []


SPREAD_MODEL_HANDED_TO_WRAPPING_CLASS = """\
import torch
from peft import get_peft_model
from transformers import AutoModelForSeq2SeqLM


class Finetuner:
    def __init__(self, loader, net, lr=1e-4):
        self.loader = loader
        self.net = net
        if torch.cuda.device_count() > 1:
            self.net = torch.nn.DataParallel(self.net)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=lr)


def main(path, loader, adapters):
    lm = AutoModelForSeq2SeqLM.from_pretrained(path, {placement})
    lm = get_peft_model(lm, adapters)
    Finetuner(loader, net=lm{moved})
"""


def test_a_model_its_loader_spread_over_gpus_handed_to_a_class_that_wraps_it_in_dataparallel() -> None:
    for placement in ('device_map="balanced"', 'device_map={"encoder": 0, "decoder": 1}'):
        src = SPREAD_MODEL_HANDED_TO_WRAPPING_CLASS.format(placement=placement, moved="")
        assert [f for f in _found(src) if f[1] == "DL201"] == [(11, "DL201")]
    one_device = SPREAD_MODEL_HANDED_TO_WRAPPING_CLASS.format(placement='device_map={"": 0}', moved="")
    assert [f for f in _found(one_device) if f[1] == "DL201"] == []
    moved = SPREAD_MODEL_HANDED_TO_WRAPPING_CLASS.format(placement='device_map="auto"', moved='.to("cuda:0")')
    assert [f for f in _found(moved) if f[1] == "DL201"] == []


WRAPPED_PARAMETER_OF_A_RUNNER = """\
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 16)
        self.steps = 0

    def forward(self, x):
        self.steps += 1
        return self.body(x)


class Runner:
    def __init__(self, net, device):
        self.net = net.to(device)
        if torch.cuda.device_count() > 1:
            self.net = nn.DataParallel(self.net)

    def run(self, batch):
        return self.net(batch)


def main(batches):
    {calls}
"""


def test_the_class_of_a_model_handed_to_a_runner_that_wraps_it_is_the_one_its_callers_build() -> None:
    for calls in ('Runner(Encoder(), "cuda").run(batches[0])', 'enc = Encoder()\n    Runner(enc, device="cuda")'):
        src = WRAPPED_PARAMETER_OF_A_RUNNER.format(calls=calls)
        assert [f for f in _found(src) if f[1] == "DL203"] == [(12, "DL203")]
    two_kinds = WRAPPED_PARAMETER_OF_A_RUNNER.format(
        calls='Runner(Encoder(), "cuda")\n    Runner(nn.Linear(16, 16), "cuda")'
    )
    assert [f for f in _found(two_kinds) if f[1] == "DL203"] == []
    unseen = WRAPPED_PARAMETER_OF_A_RUNNER.format(calls="pass")
    assert [f for f in _found(unseen) if f[1] == "DL203"] == []


CURRENT_DEVICE_SET_THEN_WRAPPED = """\
import torch
from torch import nn


def make_model(place):
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    net = net.to(place)
    return nn.DataParallel(net{ids})


class Service:
    def load(self):
        torch.cuda.set_device({chosen})
        self.place = "cuda"
        self.model = make_model(self.place)

    def __call__(self, x):
        return self.model(x.to(self.place))
"""


def test_a_model_moved_to_the_current_device_a_literal_set_device_chose_is_not_on_device_ids_0() -> None:
    for chosen in ('"cuda:2"', "2", 'torch.device("cuda:2")'):
        src = CURRENT_DEVICE_SET_THEN_WRAPPED.format(chosen=chosen, ids="")
        assert [f for f in _found(src) if f[1] == "DL202"] == [(8, "DL202")]
    # the current device is the first of device_ids, or cuda:0; the GPU is chosen at run time;
    # the caller moves the wrapper again
    for chosen, ids in (('"cuda:2"', ", device_ids=[2, 3]"), ("0", ""), ("rank", "")):
        src = CURRENT_DEVICE_SET_THEN_WRAPPED.format(chosen=chosen, ids=ids)
        assert [f for f in _found(src) if f[1] == "DL202"] == []
    moved_again = CURRENT_DEVICE_SET_THEN_WRAPPED.format(chosen='"cuda:2"', ids="").replace(
        "        self.model = make_model(self.place)\n",
        '        self.model = make_model(self.place)\n        self.model.to("cuda:0")\n',
    )
    assert [f for f in _found(moved_again) if f[1] == "DL202"] == []


CLASS_BODY_TABLE = """\
import torch
import torch.nn as nn


class Tokenizer(nn.Module):
    {table}

    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, feats, ids):
        return self.proj(feats) + self.OFFSETS[ids]


def run(batch, ids):
    net = Tokenizer(8).cuda()
    return net(batch.cuda(), ids.cuda())
"""


def test_a_cpu_tensor_bound_in_a_module_class_body_is_an_unregistered_tensor() -> None:
    for table in ("OFFSETS = torch.arange(16.0).view(16, 1)", "OFFSETS: torch.Tensor = torch.zeros(16, 8)"):
        assert [f for f in _found(CLASS_BODY_TABLE.format(table=table)) if f[1] == "DL102"] == [(6, "DL102")]
    # the same table made per call, registered, kept as Python data, or replaced on the instance
    clean = (
        CLASS_BODY_TABLE.format(table="OFFSETS = [0.5] * 16"),
        CLASS_BODY_TABLE.format(table="SCALE = 2").replace(
            "super().__init__()", 'super().__init__()\n        self.register_buffer("OFFSETS", torch.zeros(16, 8))'
        ),
        CLASS_BODY_TABLE.format(table="OFFSETS = torch.zeros(16, 8)").replace(
            "super().__init__()", "super().__init__()\n        self.OFFSETS = nn.Parameter(torch.zeros(16, 8))"
        ),
        CLASS_BODY_TABLE.format(table="OFFSETS = torch.zeros(16, 8)").replace(
            "self.OFFSETS[ids]", "self.OFFSETS.to(feats.device)[ids]"
        ),
    )
    for source in clean:
        assert [f for f in _found(source) if f[1] == "DL102"] == []


RUN_TIME_DEVICE_SCRIPT = """\
import argparse

import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)

    def forward(self, x):
        bias = torch.ones(4).cuda()
        return self.body(x) + bias


if __name__ == "__main__":
    opts = argparse.ArgumentParser()
    opts.add_argument("--card", default="cuda:1")
    opts.add_argument("--gpu", type=int, default=1)
    opt = opts.parse_args()
    {choose}
    net = Scorer().to(where)
    print(net(torch.randn(2, 4, device=where)))
"""


def test_a_bare_cuda_in_a_module_contradicts_a_script_that_builds_its_device_at_run_time() -> None:
    for choose in ("where = torch.device(opt.card)", 'where = torch.device(f"cuda:{opt.gpu}")'):
        found = _found(RUN_TIME_DEVICE_SCRIPT.format(choose=choose))
        assert [f for f in found if f[1] == "DL107"] == [(13, "DL107")]
    # a GPU-only script, or one that makes the chosen GPU the current one: `.cuda()` follows it
    for choose in (
        'where = torch.device("cuda")',
        "torch.cuda.set_device(opt.gpu)\n    where = torch.device(opt.card)",
    ):
        assert [f for f in _found(RUN_TIME_DEVICE_SCRIPT.format(choose=choose)) if f[1] == "DL107"] == []


def test_an_index_option_spelled_into_a_device_string_is_named_as_such_by_dl119() -> None:
    used = RUN_TIME_DEVICE_SCRIPT.format(choose='where = f"cuda:{opt.gpu}"')
    assert [f for f in _found(used) if f[1] == "DL119"] == [(13, "DL119")]
    assert any("only in a device string" in m for m in _messages(used))
    # only reported in a message: the option never reaches a placement
    printed = RUN_TIME_DEVICE_SCRIPT.format(choose='print(f"cuda:{opt.gpu}")\n    where = "cuda"')
    assert [f for f in _found(printed) if f[1] == "DL119"] == [(13, "DL119")]
    assert any("never uses it to place anything" in m for m in _messages(printed))


RESTORED_EXTRA_STATE = """\
import torch
from torch.optim import Optimizer


class ScaledSign(Optimizer):
    def __init__(self, params, lr=1e-4):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for w in group["params"]:
                slot = self.state[w]
                if "scale" not in slot:
                    slot["scale"] = torch.ones_like(w)
                w.sub_(group["lr"] * slot["scale"] * w.grad.sign())

    def load_state_dict(self, snapshot):
        extra = snapshot.pop("scales")
        super().load_state_dict(snapshot)
        weights = [w for group in self.param_groups for w in group["params"]]
        for position, scale in enumerate(extra):
            self.state[weights[position]]["scale"] = {put_back}


def resume(net, path):
    net = net.cuda()
    opt = ScaledSign(net.parameters())
    blob = torch.load(path, map_location={where})
    opt.load_state_dict(blob["opt"])
    return opt
"""


def test_an_optimizer_whose_own_load_state_dict_puts_loaded_tensors_back_unmoved_keeps_them_on_the_cpu() -> None:
    for put_back in ("scale", "scale.float()"):
        source = RESTORED_EXTRA_STATE.format(put_back=put_back, where='"cpu"')
        assert [f for f in _found(source) if f[1] == "DL111"] == [(30, "DL111")]
    clean = (
        RESTORED_EXTRA_STATE.format(put_back="scale.to(weights[position].device)", where='"cpu"'),
        RESTORED_EXTRA_STATE.format(put_back="torch.ones_like(weights[position])", where='"cpu"'),
        RESTORED_EXTRA_STATE.format(put_back="scale", where='"cuda"'),
    )
    for source in clean:
        assert [f for f in _found(source) if f[1] == "DL111"] == []


DEFAULT_BEFORE_INSTANCE_METHODS = """\
import torch
from torch.utils.data import DataLoader


class Fitter:
    def __init__(self, rows, size):
        self.rows = rows
        self.size = size

    def _batches(self):
        return DataLoader(self.rows, batch_size=self.size, shuffle=True{generator})

    def _epoch(self, net):
        for xb in self._batches():
            net(xb).sum().backward()

    def fit(self, net, epochs):
        for _ in range(epochs):
            self._epoch(net)


def launch(rows, net):
    {before}
    fitter = Fitter(rows, 32)
    fitter.fit(net, 3)
    {after}
"""


def test_a_default_device_set_before_an_instance_method_call_reaches_the_sampler_three_calls_down() -> None:
    source = DEFAULT_BEFORE_INSTANCE_METHODS.format(generator="", before='torch.set_default_device("cuda")', after="")
    assert [f for f in _found(source) if f[1] == "DL114"] == [(11, "DL114")]
    clean = (
        DEFAULT_BEFORE_INSTANCE_METHODS.format(
            generator=', generator=torch.Generator(device="cuda")', before='torch.set_default_device("cuda")', after=""
        ),
        DEFAULT_BEFORE_INSTANCE_METHODS.format(generator="", before="pass", after='torch.set_default_device("cuda")'),
    )
    for variant in clean:
        assert [f for f in _found(variant) if f[1] == "DL114"] == []


DEVICE_TENSOR_TO_NUMPY_LIBRARY = """\
import numpy as np
import torch
from scipy import stats
from sklearn.metrics import mean_absolute_error


def report(regressor, x, y):
    regressor = regressor.cuda()
    with torch.no_grad():
        guess = regressor(x.cuda()).squeeze(-1){host}
    gap = (guess - y.cuda(){host}).abs()
    return {{"mae": mean_absolute_error(y.numpy(), gap * 0 + guess), "r": stats.pearsonr(guess, y.numpy())[0]}}
"""


def test_a_device_tensor_handed_to_numpy_or_scipy_functions_is_converted_on_the_device() -> None:
    found = _found(DEVICE_TENSOR_TO_NUMPY_LIBRARY.format(host=""))
    assert [f for f in found if f[1] == "DL108"] == [(12, "DL108"), (12, "DL108")]
    # NumPy's own functions are not checked (they take other libraries' arrays as often)
    only_numpy = DEVICE_TENSOR_TO_NUMPY_LIBRARY.format(host="").replace(
        '"mae": mean_absolute_error(y.numpy(), gap * 0 + guess), "r": stats.pearsonr(guess, y.numpy())[0]',
        '"p95": np.percentile(gap, 95)',
    )
    assert [f for f in _found(only_numpy) if f[1] == "DL108"] == []
    assert [f for f in _found(DEVICE_TENSOR_TO_NUMPY_LIBRARY.format(host=".cpu()")) if f[1] == "DL108"] == []


OPTIONAL_TENSOR_ATTRIBUTE_MOVE = """\
import torch


class Recorder:
    def __init__(self, capacity):
        self.capacity = capacity
        self.history = None

    def remember(self, observations: torch.Tensor):
        self.history = observations.float()

    def cuda(self, index=None):
        {move}
        return self
"""


def test_a_discarded_move_of_an_optional_tensor_attribute_set_from_a_tensor_parameter_is_reported() -> None:
    assert [
        f for f in _found(OPTIONAL_TENSOR_ATTRIBUTE_MOVE.format(move="self.history.cuda(index)")) if f[1] == "DL104"
    ] == [(13, "DL104")]
    rebound = OPTIONAL_TENSOR_ATTRIBUTE_MOVE.format(move="self.history = self.history.cuda(index)")
    assert [f for f in _found(rebound) if f[1] == "DL104"] == []
    # an unannotated parameter may be a module, whose own `.cuda()` works in place
    untyped = OPTIONAL_TENSOR_ATTRIBUTE_MOVE.replace("observations: torch.Tensor", "observations").format(
        move="self.history.cuda(index)"
    )
    assert [f for f in _found(untyped) if f[1] == "DL104"] == []


DEFAULT_SET_BY_AN_OBJECTS_METHOD = """\
import torch
from torch.utils.data import DataLoader


class Environment:
    def __init__(self, use_gpu):
        self.use_gpu = use_gpu

    def configure(self):
        if self.use_gpu:
            torch.set_default_device("{device}")


class Reporter:
    def configure(self):
        print("ready")


def make_loader(dataset, batch):
    return DataLoader(dataset, batch_size=batch, shuffle=True)


def run(dataset, use_gpu):
    env = {maker}(use_gpu)
    env.configure()
    return make_loader(dataset, 32)
"""


def test_a_default_device_set_by_a_method_of_an_object_built_in_the_caller_is_in_force_in_later_helpers() -> None:
    found = _found(DEFAULT_SET_BY_AN_OBJECTS_METHOD.format(device="cuda", maker="Environment"))
    assert [f for f in found if f[1] == "DL114"] == [(20, "DL114")]
    on_cpu = DEFAULT_SET_BY_AN_OBJECTS_METHOD.format(device="cpu", maker="Environment")
    assert [f for f in _found(on_cpu) if f[1] == "DL114"] == []
    # the same method name on another class of the file, which sets no default
    other = DEFAULT_SET_BY_AN_OBJECTS_METHOD.format(device="cuda", maker="Reporter").replace(
        "Reporter(use_gpu)", "Reporter()"
    )
    assert [f for f in _found(other) if f[1] == "DL114"] == []


SUBMODULE_METHOD_OF_A_PLACED_MODEL = """\
import torch


def encode_all(autoencoder, frames, device):
    autoencoder.to(device)
    codes = []
    with torch.no_grad():
        for clip in frames:
            z = autoencoder.stages.encoder.embed({clip})
            codes.append(z)
    stacked = torch.cat(codes)
    return stacked{tail}
"""


def test_a_method_of_a_part_of_a_placed_model_handed_a_device_input_computes_on_the_device() -> None:
    found = _found(SUBMODULE_METHOD_OF_A_PLACED_MODEL.format(clip="clip.to(device)", tail=".numpy()"))
    assert [f for f in found if f[1] == "DL108"] == [(12, "DL108")]
    copied = SUBMODULE_METHOD_OF_A_PLACED_MODEL.format(clip="clip.to(device)", tail=".cpu().numpy()")
    assert [f for f in _found(copied) if f[1] == "DL108"] == []
    # handed a CPU input, the part's method shows nothing about where its result is
    host_input = SUBMODULE_METHOD_OF_A_PLACED_MODEL.format(clip="clip", tail=".numpy()")
    assert [f for f in _found(host_input) if f[1] == "DL108"] == []


OPTIMIZER_FROM_A_MODEL_METHOD = """\
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Linear(width, 3)

    def build_optimizer(self, lr):
        opt = torch.optim.{kind}(self.parameters(), lr=lr)
        return opt


def train(net, loader, lr=0.05):
    {first}
    {second}
    for x, y in loader:
        loss = nn.functional.cross_entropy(net(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_an_eager_optimizer_built_by_a_method_of_the_model_before_the_model_moves_is_reported() -> None:
    build, move = "optimizer = net.build_optimizer(lr)", "net.cuda()"
    found = _found(OPTIMIZER_FROM_A_MODEL_METHOD.format(kind="Adagrad", first=build, second=move))
    assert [f for f in found if f[1] == "DL111"] == [(16, "DL111")]
    moved_first = OPTIMIZER_FROM_A_MODEL_METHOD.format(kind="Adagrad", first=move, second=build)
    assert [f for f in _found(moved_first) if f[1] == "DL111"] == []
    lazy = OPTIMIZER_FROM_A_MODEL_METHOD.format(kind="Adam", first=build, second=move)
    assert [f for f in _found(lazy) if f[1] == "DL111"] == []


CPU_ROUND_TRIP_UNDER_A_GPU_CHECK = """\
import torch


def stable_order(scores: torch.Tensor) -> torch.Tensor:
    if scores.device.type == "cuda":
        {line}
    return torch.argsort(scores, dim=-1, stable=True)
"""


def test_a_cpu_round_trip_sent_back_with_a_bare_cuda_under_a_gpu_check_is_reported() -> None:
    bad = CPU_ROUND_TRIP_UNDER_A_GPU_CHECK.format(line="return scores.cpu().argsort(dim=-1, stable=True).cuda()")
    assert [f for f in _found(bad) if f[1] == "DL107"] == [(6, "DL107")]
    assert "scores.device" in next(m for m in _messages(bad) if "DL107" in m or "hard-codes" in m)
    back = CPU_ROUND_TRIP_UNDER_A_GPU_CHECK.format(
        line="return scores.cpu().argsort(dim=-1, stable=True).to(scores.device)"
    )
    assert [f for f in _found(back) if f[1] == "DL107"] == []
    # a new tensor sent with a bare `.cuda()` under the check that `scores` is on a GPU lands on
    # the current GPU, not on `scores`'s (NVIDIA/DeepLearningExamples#1432): reported too (set rt)
    guarded = CPU_ROUND_TRIP_UNDER_A_GPU_CHECK.format(
        line="return torch.argsort(scores + torch.ones(1).cuda(), dim=-1)"
    )
    assert [f for f in _found(guarded) if f[1] == "DL107"] == [(6, "DL107")]


# -- a program's comments name no accelerator -----------------------------------------------------

COMMENTED_OUT_ACCELERATOR = """\
import torch

kind = torch.DoubleTensor
{placement}
feats = torch.linspace(-1, 1, 50).unsqueeze(1).type(kind)
target = 2 * feats - 0.5
slope = torch.zeros(1, 1).type(kind).requires_grad_()
shift = torch.zeros(1).type(kind).requires_grad_()
for it in range(100):
    err = (feats @ slope + shift - target).abs().mean()
    err.backward()
    with torch.no_grad():
        for w in (slope, shift):
            w -= 0.05 * w.grad
            w.grad.zero_()
    print(it, err.item())
"""


def _program(source: str, path: str = "fit_curve.py") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(source, path, DEFAULT).findings]


def test_a_program_whose_only_accelerator_is_in_a_comment_trains_on_the_cpu() -> None:
    for comment in ("# kind = torch.cuda.DoubleTensor  # on a GPU machine", "# a GPU run would need .to(device)"):
        assert [f for f in _program(COMMENTED_OUT_ACCELERATOR.format(placement=comment)) if f[1] == "DL401"] == []
    # the bug twin: the same line as code puts every tensor on the GPU, and the per-step `.item()` stalls it
    moved = COMMENTED_OUT_ACCELERATOR.format(placement="kind = torch.cuda.DoubleTensor")
    assert [f for f in _program(moved) if f[1] == "DL401"] == [(16, "DL401")]


NUMPY_OF_A_HELD_MODEL = """\
import torch
from torch import nn


class Worker:
    def __init__(self):
        self.policy = nn.Linear(4, 2)


crew = [Worker(), Worker()]
{placement}
for member in crew:
    w = next(member.policy.parameters()).flatten().detach().numpy()
    print(w.mean())
"""


def test_numpy_of_a_parameter_in_a_program_that_never_names_an_accelerator_is_host_data() -> None:
    assert [f for f in _program(NUMPY_OF_A_HELD_MODEL.format(placement="")) if f[1] == "DL108"] == []
    # the bug twin: the same program moving each worker's model to the GPU
    moved = NUMPY_OF_A_HELD_MODEL.format(placement="for member in crew:\n    member.policy.cuda()")
    assert [f for f in _program(moved) if f[1] == "DL108"] == [(14, "DL108")]


# -- IPython's prefix help and notebooks of other languages ---------------------------------------


def _notebook_with(metadata: dict[str, object], *cells: str) -> list[tuple[int | None, int, str]]:
    import json

    from devicelint.notebook import lint_notebook

    notebook = {
        "metadata": metadata,
        "cells": [{"cell_type": "code", "source": textwrap.dedent(c).lstrip("\n")} for c in cells],
    }
    result = lint_notebook(json.dumps(notebook).encode(), "lesson.ipynb", DEFAULT)
    return [(f.cell, f.line, f.code) for f in result.findings]


def test_prefix_help_lines_are_ipython_not_syntax_errors() -> None:
    setup = "import torch\nfrom torch import nn\n"
    asked = "??nn.Conv2d\n"
    indented = "for name in ('a', 'b'):\n    ?torch.nn.functional.pad\n"
    assert _notebook_found(setup, asked, indented) == []
    # the bug twin: a device bug after the help cell is still found (the notebook is analysed)
    bug = "model = nn.Linear(4, 2).cuda()\nout = model(torch.randn(8, 4))\n"
    assert _notebook_found(setup, asked, bug) == [(3, 2, "DL101")]
    # a `?` inside an expression is still Python's syntax error
    assert [f[2] for f in _notebook_found(setup, "x = ?torch\n")] == ["DL000"]


def test_a_notebook_whose_kernel_runs_another_language_is_not_python() -> None:
    julia = {"kernelspec": {"display_name": "Julia 1.9", "language": "julia", "name": "julia-1.9"}}
    cells = ("f(x) = 3x^2 + 1\n", "derivative(x->1+x+3x^2, 1)\n")
    assert _notebook_with(julia, *cells) == []
    r_info = {"language_info": {"name": "R"}}
    assert _notebook_with(r_info, *cells) == []
    # the twin: the same cells in a Python notebook are Python's syntax errors
    python = {"kernelspec": {"language": "python", "name": "python3"}, "language_info": {"name": "python"}}
    assert [f[2] for f in _notebook_with(python, *cells)] == ["DL000"]


# -- a parameter's size read in `__init__` is a number, not a snapshot of the parameter ------------

SIZE_OF_A_PARAMETER = """\
import torch
from torch import nn


class TokenGate(nn.Module):
    def __init__(self, table=None, n_tokens=30522):
        super().__init__()
        init = table if table is not None else torch.full((n_tokens,), 0.5)
        self.gate = nn.Parameter(init)
        self.n_tokens = {read}

    def forward(self, ids):
        counts = torch.zeros(ids.size(0), self.n_tokens, device=ids.device)
        counts.scatter_add_(1, ids, torch.ones_like(ids, dtype=counts.dtype))
        return counts * self.gate
"""


def test_a_shape_read_of_a_parameter_in_init_is_no_parameter_snapshot() -> None:
    for read in ("self.gate.shape[0]", "self.gate.numel()", "int(self.gate.size(-1))", "len(self.gate.shape) and 7"):
        assert [f for f in _found(SIZE_OF_A_PARAMETER.format(read=read)) if f[1] == "DL102"] == []
    # the bug twin: a product of the parameter cached in `__init__` is a snapshot that stays on the CPU
    snapshot = SIZE_OF_A_PARAMETER.format(read="self.gate.sigmoid()").replace(
        "torch.zeros(ids.size(0), self.n_tokens, device=ids.device)",
        "torch.zeros(ids.size(0), self.gate.shape[0], device=ids.device) + self.n_tokens",
    )
    assert [f for f in _found(snapshot) if f[1] == "DL102"] == [(10, "DL102")]


# -- a dataset every loader of the file reads in the main process --------------------------------

DATASET_READ_IN_THE_MAIN_PROCESS = """\
import random

import torch
from torch.utils.data import DataLoader, Dataset


class Transitions(Dataset):
    def __init__(self, rows, target):
        self.rows = rows
        self.target = target

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, k):
        return torch.as_tensor(self.rows[k]).cuda(self.target)


def make_loader(rows, batch, target=0, **options):
    return DataLoader(Transitions(rows, target), batch_size=batch, shuffle=True, **options)


def sweep(rows, policy):
    for batch in make_loader(rows, 64{extra}):
        policy.update(batch)
    probe = Transitions(rows, 1)
    sample = random.choice(probe)
    return policy.score(sample), len(probe), DataLoader(probe, batch_size=8{probe_workers})
"""


def test_a_dataset_whose_every_loader_forks_no_workers_makes_its_items_in_the_main_process() -> None:
    quiet = DATASET_READ_IN_THE_MAIN_PROCESS.format(extra="", probe_workers="")
    assert [f for f in _found(quiet) if f[1] == "DL109"] == []
    zero = DATASET_READ_IN_THE_MAIN_PROCESS.format(extra=", drop_last=True", probe_workers=", num_workers=0")
    assert [f for f in _found(zero) if f[1] == "DL109"] == []
    # the bug twins: one loader forks workers, through the factory's keywords or its own argument
    for extra, probe in ((", num_workers=4", ""), ("", ", num_workers=2")):
        forked = DATASET_READ_IN_THE_MAIN_PROCESS.format(extra=extra, probe_workers=probe)
        assert [f for f in _found(forked) if f[1] == "DL109"] == [(16, "DL109")], (extra, probe)


# -- an object whose attributes the loop writes is no tensor --------------------------------------

GRAPH_BATCH_TAGGED_THEN_MOVED = """\
import torch


def run(stream, gnn, opt, where):
    for g in stream:
        g.{attribute} = {value}
        g.to(torch.device(where))
        out = gnn(g)
        loss = out.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_loop_value_whose_attribute_the_code_sets_is_an_object_moved_in_place() -> None:
    for attribute, value in (("split", '"train"'), ("stage", "2"), ("chunk", "None")):
        source = GRAPH_BATCH_TAGGED_THEN_MOVED.format(attribute=attribute, value=value)
        assert [f for f in _found(source) if f[1] == "DL104"] == [], attribute
    # the bug twin: a tensor's own settable attribute says nothing against it being a tensor
    twin = GRAPH_BATCH_TAGGED_THEN_MOVED.format(attribute="requires_grad", value="True")
    assert [f for f in _found(twin) if f[1] == "DL104"] == [(7, "DL104")]


# -- tensor methods PyTorch runs only on CPU tensors ----------------------------------------------

PEAKS_WITH_A_PYTHON_CALLBACK = """\
import torch


def peaks(heat, width):
    scores, flat = torch.max(heat.view(heat.size(0), heat.size(1), -1), 2)
    coords = flat.unsqueeze(-1).repeat(1, 1, 2).float()
    coords[..., 0]{host_only}
    coords[..., 1] = coords[..., 1].div(width).floor()
    for b in range(coords.size(0)):
        nudge = torch.tensor([0.25, -0.25])
        coords[b, 0].add_(nudge)
    return coords, scores
"""


def test_a_function_that_runs_a_python_callback_per_element_works_on_host_tensors() -> None:
    for host_only in (".apply_(lambda v: v % width)", ".map_(coords[..., 1], lambda a, b: a - b)"):
        source = PEAKS_WITH_A_PYTHON_CALLBACK.format(host_only=host_only)
        assert [f for f in _found(source) if f[1] == "DL101"] == [], host_only
    # the bug twin: the same function without the CPU-only method may get device heatmaps
    twin = PEAKS_WITH_A_PYTHON_CALLBACK.format(host_only=".remainder_(width)")
    assert [f for f in _found(twin) if f[1] == "DL101"] == [(10, "DL101")]


# -- a static method every call of the file hands host data ---------------------------------------

STATIC_ENCODER_CALLED_WITH_ARRAYS = """\
import numpy as np
import torch
from torch import nn


class Featurizer(nn.Module):
    def __init__(self, n_bins):
        super().__init__()
        self.n_bins = n_bins
        self.proj = nn.Linear(n_bins, 8)

    @staticmethod
    def encode(levels, width):
        levels = torch.tensor(levels)
        if levels.dim() != 1:
            raise ValueError("one level per node")
        table = torch.zeros(levels.numel(), width)
        table.scatter_(1, levels.unsqueeze(1), 1.0)
        return table

    def prepare(self, values, edges):
        bins = {bins}
        return Featurizer.encode(bins, self.n_bins)
"""


def test_a_static_method_that_every_call_hands_host_data_meets_no_device_value() -> None:
    quiet = STATIC_ENCODER_CALLED_WITH_ARRAYS.format(bins="np.digitize(np.asarray(values), edges) - 1")
    assert [f for f in _found(quiet) if f[1] == "DL101"] == []
    # the bug twin: the same encoder handed a device tensor
    device = STATIC_ENCODER_CALLED_WITH_ARRAYS.format(bins="torch.bucketize(values.cuda(), edges.cuda())")
    assert [f for f in _found(device) if f[1] == "DL101"] == [(17, "DL101")]
