"""Shapes the lead found this session (39): each tested in at least two spellings, with the
one-fix twin clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "train/run.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


# -- a module class's own to() that hands back the base class's move keeps the class ---------------

OWN_TO_DELEGATES = """
    import torch
    from torch import nn


    class Spiking(nn.Module):
        def __init__(self):
            super().__init__()
            self._device = torch.device("cpu")
            self.fc = nn.Linear(4, 2)

        @property
        def device(self):
            return self._device

        def to(self, device, non_blocking=True):
            self._device = device
            return super().to(device, non_blocking=non_blocking)

        def forward(self, x):
            x = x.to(self.device)
            return self.fc(x)


    def main(loader):
        dev = torch.device("cuda")
        net = Spiking().to(dev)
        for x, y in loader:
            out = net(x)
            nn.functional.cross_entropy(out, y.to(dev)).backward()
"""


def test_a_model_whose_own_to_returns_super_to_and_whose_forward_moves_its_input_is_clean() -> None:
    assert _found(OWN_TO_DELEGATES) == []
    returns_self = OWN_TO_DELEGATES.replace(
        "return super().to(device, non_blocking=non_blocking)",
        "super(Spiking, self).to(device)\n            return self",
    )
    assert _found(returns_self) == []


def test_a_model_whose_own_to_delegates_is_still_on_the_device_for_its_unmoved_inputs() -> None:
    bad = OWN_TO_DELEGATES.replace("x = x.to(self.device)", "x = x.float()")
    assert _found(bad) == [(29, "DL105")]
    returns_self = bad.replace(
        "return super().to(device, non_blocking=non_blocking)",
        "super().to(device, non_blocking=non_blocking)\n            return self",
    )
    assert _found(returns_self) == [(30, "DL105")]


# -- a default device chosen at run time, an accelerator on one of its bindings -----------------------

DEFAULT_FROM_REBOUND_NAME = """
    import torch
    from torch.utils.data import DataLoader


    def pick_device():
        device = launcher.device()
        if torch.backends.mps.is_available():
            device = torch.device("mps")
        torch.set_default_device(device)
        return device


    def fit(model, data, epochs):
        device = pick_device()
        loader = DataLoader(data, batch_size=32, shuffle=True)
        for _ in range(epochs):
            for batch in loader:
                model(batch.to(device)).sum().backward()
"""


def test_a_default_device_one_of_whose_bindings_is_an_accelerator_makes_a_shuffling_loader_fail() -> None:
    assert _found(DEFAULT_FROM_REBOUND_NAME) == [(16, "DL114")]
    cuda_string = DEFAULT_FROM_REBOUND_NAME.replace('device = torch.device("mps")', 'device = f"cuda:{rank()}"')
    assert _found(cuda_string) == [(16, "DL114")]


def test_a_loader_with_a_generator_on_the_default_device_or_a_cpu_only_default_is_clean() -> None:
    fixed = DEFAULT_FROM_REBOUND_NAME.replace(
        "shuffle=True)", "shuffle=True, generator=torch.Generator(device=device))"
    )
    assert _found(fixed) == []
    cpu_only = DEFAULT_FROM_REBOUND_NAME.replace('device = torch.device("mps")', 'device = torch.device("cpu")')
    cpu_only = cpu_only.replace("device = launcher.device()", 'device = "cpu"')
    assert _found(cpu_only) == []


# -- a plain loss class is device code: its inputs are the model's outputs and the batch's targets ---

PLAIN_LOSS_CLASS = """
    import torch


    class DetectionLoss:
        def __init__(self, model):
            self.nl = model.nl

        def _candidates(self, preds, targets):
            scale = torch.tensor(preds[0].shape, device=targets.device)
            return [targets[:, 2:4] * scale for _ in range(self.nl)]

        def __call__(self, preds, targets):
            cands = self._candidates(preds, targets)
            layer_ids = []
            for i, c in enumerate(cands):
                layer_ids.append(torch.ones(len(c)) * i)
            layer_ids = torch.cat(layer_ids)
            keep = targets[:, 1] > 0.5
            return layer_ids[keep]
"""


def test_a_cpu_tensor_indexed_by_a_mask_of_a_plain_loss_classs_targets_is_found() -> None:
    assert _found(PLAIN_LOSS_CLASS) == [(20, "DL116")]
    renamed = PLAIN_LOSS_CLASS.replace("DetectionLoss", "HungarianCriterion").replace("_candidates", "_match")
    assert _found(renamed) == [(20, "DL116")]


def test_the_plain_loss_class_fixed_or_a_plain_class_that_is_no_loss_is_clean() -> None:
    fixed = PLAIN_LOSS_CLASS.replace("torch.ones(len(c))", "torch.ones(len(c), device=targets.device)")
    assert _found(fixed) == []
    not_a_loss = PLAIN_LOSS_CLASS.replace("DetectionLoss", "AnchorTable")
    assert _found(not_a_loss) == []


# -- a default device read from the command line, whatever the parsed options are called ----------

DEFAULT_FROM_PARSED_OPTIONS = """
    import argparse

    import torch
    from torch.utils.data import DataLoader, RandomSampler


    def loader_for(data):
        return DataLoader(data, batch_size=8, sampler=RandomSampler(data))


    def main(data, model):
        parser = argparse.ArgumentParser()
        parser.add_argument("--device", default="mps")
        cli = parser.parse_args()
        device = torch.device(cli.device)
        torch.set_default_device(device)
        for batch in loader_for(data):
            model(batch.to(device)).sum().backward()
"""


def test_a_default_device_from_parsed_options_makes_a_random_sampler_fail() -> None:
    rows = lint_source(textwrap.dedent(DEFAULT_FROM_PARSED_OPTIONS), "train/run.py", DEFAULT).findings
    assert [(f.line, f.code) for f in rows] == [(9, "DL114")]
    assert "Expected a 'mps' device type for generator" in rows[0].message
    known_args = DEFAULT_FROM_PARSED_OPTIONS.replace("cli = parser.parse_args()", "cli = parser.parse_known_args()[0]")
    known_args = known_args.replace("device = torch.device(cli.device)\n        ", "")
    known_args = known_args.replace("set_default_device(device)", "set_default_device(cli.device)")
    assert _found(known_args) == [(9, "DL114")]


def test_a_sampler_with_a_generator_on_the_configured_device_is_clean() -> None:
    fixed = DEFAULT_FROM_PARSED_OPTIONS.replace(
        "RandomSampler(data)", "RandomSampler(data, generator=torch.Generator(device=torch.get_default_device()))"
    )
    assert _found(fixed) == []


# -- a buffer made by a constructor that ignores the default device, in a model the default places ----

BUFFER_UNDER_DEFAULT = """
    import numpy as np
    import torch
    from torch import nn


    class Smoother(nn.Module):
        def __init__(self, n):
            super().__init__()
            weights = torch.from_numpy(np.hanning(n)).float()
            self.register_buffer("weights", weights)
            self.proj = nn.Linear(n, n)

        def forward(self, x):
            return self.proj(x * self.weights)


    if __name__ == "__main__":
        torch.set_default_device("cuda")
        net = Smoother(16)
        print(net(torch.randn(4, 16)))
"""


def test_a_from_numpy_buffer_of_a_model_placed_by_the_default_device_is_found() -> None:
    assert _found(BUFFER_UNDER_DEFAULT) == [(10, "DL101")]
    inline = BUFFER_UNDER_DEFAULT.replace(
        'weights = torch.from_numpy(np.hanning(n)).float()\n            self.register_buffer("weights", weights)',
        'self.register_buffer("weights", torch.from_numpy(np.hanning(n)))',
    ).replace('torch.set_default_device("cuda")', "torch.set_default_tensor_type(torch.cuda.FloatTensor)")
    assert _found(inline) == [(10, "DL101")]


def test_a_buffer_that_follows_the_default_or_a_model_moved_after_it_is_built_is_clean() -> None:
    follows = BUFFER_UNDER_DEFAULT.replace("torch.from_numpy(np.hanning(n))", "torch.tensor(np.hanning(n))")
    assert _found(follows) == []
    moved = BUFFER_UNDER_DEFAULT.replace("net = Smoother(16)", 'net = Smoother(16).to("cuda")')
    assert _found(moved) == []


# -- a trainer that builds its scaler anew in the loop and steps with it in another method -------------

SCALER_REBUILT_IN_TRAINER_LOOP = """
    import torch
    from torch import nn


    class Trainer:
        def __init__(self, model, opt):
            self.model = model.cuda()
            self.opt = opt

        def _loss(self, x, y):
            with torch.autocast("cuda", dtype=torch.float16):
                return nn.functional.cross_entropy(self.model(x), y)

        def _update(self, loss):
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()

        def fit(self, loader, epochs):
            for epoch in range(epochs):
                self.scaler = torch.amp.GradScaler("cuda")
                for x, y in loader:
                    self.opt.zero_grad()
                    self._update(self._loss(x.cuda(), y.cuda()))
"""


def test_a_scaler_rebuilt_every_epoch_and_stepped_by_another_method_is_found() -> None:
    assert _found(SCALER_REBUILT_IN_TRAINER_LOOP) == [(22, "DL303")]
    per_step = SCALER_REBUILT_IN_TRAINER_LOOP.replace(
        '                self.scaler = torch.amp.GradScaler("cuda")\n                for x, y in loader:\n',
        '                for x, y in loader:\n                    self.scaler = torch.amp.GradScaler("cuda")\n',
    )
    assert _found(per_step) == [(23, "DL303")]


def test_a_scaler_built_once_or_only_when_missing_is_clean() -> None:
    once = SCALER_REBUILT_IN_TRAINER_LOOP.replace(
        '            for epoch in range(epochs):\n                self.scaler = torch.amp.GradScaler("cuda")\n',
        '            self.scaler = torch.amp.GradScaler("cuda")\n            for epoch in range(epochs):\n',
    )
    assert _found(once) == []
    lazily = SCALER_REBUILT_IN_TRAINER_LOOP.replace(
        '                self.scaler = torch.amp.GradScaler("cuda")\n',
        '                if getattr(self, "scaler", None) is None:\n                    self.scaler = torch.amp.GradScaler("cuda")\n',
    )
    assert _found(lazily) == []


# -- a state through list(t) unpacking or a starred argument tuple keeps its place -------------------

STATE_THROUGH_LIST = """
    import torch
    from torch import nn


    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = nn.LSTMCell(8, 16)

        def forward(self, xs):
            state = torch.zeros(2, xs.size(1), 16)
            h, c = list(state)
            outs = []
            for x in xs:
                h, c = self.cell(x, (h, c))
                outs.append(h)
            return torch.stack(outs)
"""


def test_a_cpu_state_split_by_list_or_handed_as_a_starred_tuple_is_found() -> None:
    assert _found(STATE_THROUGH_LIST) == [(12, "DL101")]
    as_tuple = STATE_THROUGH_LIST.replace("h, c = list(state)", "h, c = tuple(state)")
    assert _found(as_tuple) == [(12, "DL101")]
    starred = STATE_THROUGH_LIST.replace(
        "h, c = self.cell(x, (h, c))", "step_args = (x, (h, c))\n                h, c = self.cell(*step_args)"
    ).replace("h, c = list(state)", "h, c = state.unbind(0)")
    assert _found(starred) == [(12, "DL101")]


def test_the_state_made_on_the_inputs_device_is_clean_however_it_is_split_or_handed() -> None:
    fixed = STATE_THROUGH_LIST.replace("xs.size(1), 16)", "xs.size(1), 16, device=xs.device)")
    assert _found(fixed) == []
    starred = fixed.replace(
        "h, c = self.cell(x, (h, c))", "step_args = (x, (h, c))\n                h, c = self.cell(*step_args)"
    )
    assert _found(starred) == []


# -- a hook the training file registers runs on every step -----------------------------------------

HOOK_READS_ITEM = """
    import torch
    from torch import nn


    def train(model, loader, opt):
        model.cuda()
        stats = []

        def record(module, inputs, output):
            stats.append(output.abs().mean().item())

        model.register_forward_hook(record)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_forward_hook_or_a_method_hook_that_reads_item_in_a_training_file_is_found() -> None:
    assert _found(HOOK_READS_ITEM) == [(11, "DL401")]
    as_method = """
        import torch
        from torch import nn


        class Watch:
            def __init__(self, model):
                self.norms = []
                for p in model.parameters():
                    p.register_hook(self._grad)

            def _grad(self, grad):
                self.norms.append(grad.norm().item())


        def train(model, loader, opt):
            model.cuda()
            Watch(model)
            for x, y in loader:
                loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
    """
    assert _found(as_method) == [(13, "DL401")]


def test_a_hook_that_keeps_its_values_on_the_device_or_a_hook_in_a_file_that_does_not_train_is_clean() -> None:
    on_device = HOOK_READS_ITEM.replace("output.abs().mean().item()", "output.abs().mean().detach()")
    assert _found(on_device) == []
    no_training = HOOK_READS_ITEM.split("        for x, y in loader:")[0] + "        return model(loader)\n"
    assert _found(no_training) == []


# -- a helper handed the instance moves its model after the optimizer was built (DL111) ---------------

HELPER_MOVES_OWNERS_MODEL = """
    import torch
    from torch import nn


    class Regressor:
        def __init__(self, n):
            self.model = nn.Sequential(nn.Linear(n, 1))
            self.optim = torch.optim.Adagrad(self.model.parameters(), lr=0.1)

        @staticmethod
        def _place(owner, device):
            return owner.model.to(device=device)

        def fit(self, x, y, device="cuda"):
            Regressor._place(self, device)
            for _ in range(10):
                self.optim.zero_grad()
                nn.functional.mse_loss(self.model(x.to(device)), y.to(device)).backward()
                self.optim.step()
"""


def test_an_optimizer_built_before_a_helper_handed_the_instance_moves_its_model_is_found() -> None:
    assert _found(HELPER_MOVES_OWNERS_MODEL) == [(9, "DL111")]
    module_level = HELPER_MOVES_OWNERS_MODEL.replace(
        "        @staticmethod\n        def _place(owner, device):\n            return owner.model.to(device=device)\n\n",
        "",
    ).replace("Regressor._place(self, device)", "place(self, device)")
    module_level += "\n\n    def place(trainer, device):\n        trainer.model.to(device)\n"
    assert _found(module_level) == [(9, "DL111")]


def test_an_optimizer_built_after_the_helper_moved_the_model_is_clean() -> None:
    fixed = HELPER_MOVES_OWNERS_MODEL.replace(
        "            self.optim = torch.optim.Adagrad(self.model.parameters(), lr=0.1)\n", ""
    ).replace(
        "            Regressor._place(self, device)\n",
        "            Regressor._place(self, device)\n            self.optim = torch.optim.Adagrad(self.model.parameters(), lr=0.1)\n",
    )
    assert _found(fixed) == []


# -- a generator read back from a container keeps its device (DL115) ------------------------------

GENERATOR_IN_A_BOX = """
    import torch


    def jitter(n, generator=None):
        return torch.rand(n, 2, generator=generator)


    class Augment:
        def __init__(self, device, seed=0):
            self.device = device
            box = (torch.Generator(device=device).manual_seed(seed), None)
            gen, _ = box
            self.gen = gen

        def __call__(self, points):
            points = points.to(self.device)
            return points + jitter(points.shape[0], self.gen).to(points.device)[:, None, :]


    def run(batches):
        aug = Augment(torch.device("cuda"), seed=3)
        return [aug(p) for p in batches]
"""


def test_a_cuda_generator_read_back_from_a_tuple_or_a_list_is_found_where_it_draws_on_the_cpu() -> None:
    assert _found(GENERATOR_IN_A_BOX) == [(6, "DL115")]
    as_list = GENERATOR_IN_A_BOX.replace(
        "box = (torch.Generator(device=device).manual_seed(seed), None)\n            gen, _ = box",
        "box = [torch.Generator(device=device).manual_seed(seed)]\n            gen = box[0]",
    )
    assert _found(as_list) == [(6, "DL115")]


def test_a_generator_from_a_box_that_matches_the_draw_is_clean() -> None:
    fixed = GENERATOR_IN_A_BOX.replace("generator=generator)", "generator=generator, device=generator.device)")
    assert _found(fixed) == []
