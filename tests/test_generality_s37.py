"""Shapes found by writing device bugs apart from any thread or fixture (session 37): each tested
in a form other than the probe that found it, with its one-fix twin clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "agents/explore.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


# -- a method called on an instance moved to a stated accelerator runs there --------------------

PLACED_INSTANCE_METHOD = """
    import torch
    from torch import nn


    class ActionSampler(nn.Module):
        def __init__(self, n_obs, n_act):
            super().__init__()
            self.policy = nn.Sequential(nn.Linear(n_obs, 32), nn.Tanh(), nn.Linear(32, n_act))
            self.rng = torch.Generator()
            self.rng.manual_seed(1234)

        def explore(self, obs, temperature=1.0):
            weights = (self.policy(obs) / temperature).exp()
            return torch.multinomial(weights, num_samples=1, generator=self.rng)


    def rollout(env_obs):
        sampler = ActionSampler(6, 3).to("cuda:0")
        return sampler.explore(env_obs.to("cuda:0"))
"""


def test_a_cpu_generator_drawn_in_a_method_of_an_instance_moved_to_cuda() -> None:
    assert _found(PLACED_INSTANCE_METHOD) == [(15, "DL115")]


def test_the_same_method_on_an_instance_left_on_the_cpu_is_clean() -> None:
    on_host = PLACED_INSTANCE_METHOD.replace('.to("cuda:0")', "")
    assert _found(on_host) == []


def test_a_generator_made_where_the_weights_are_is_clean() -> None:
    fixed = PLACED_INSTANCE_METHOD.replace(
        "self.rng = torch.Generator()", 'self.rng = torch.Generator(device="cuda:0")'
    )
    # (the hard-coded device is DL107's hint, not a placement bug)
    assert _found(fixed) == [(10, "DL107")]


# -- a settings mapping's device entry (`opts["device"]`) is a device, as `opts.device` is ---------

MAPPING_DEVICE = """
    import torch
    import torch.nn.functional as F


    class Fitter:
        def __init__(self, network, opts):
            self.opts = opts
            self.network = network.to(opts["device"])
            self.optim = torch.optim.SGD(self.network.parameters(), lr=opts["lr"])

        def epoch(self, batches):
            for inputs, targets in batches:
                scores = self.network(inputs.to(self.opts["device"]))
                loss = F.nll_loss(scores.log_softmax(-1), targets)
                self.optim.zero_grad()
                loss.backward()
                self.optim.step()
"""


def test_a_target_left_behind_while_inputs_go_to_the_mappings_device() -> None:
    assert _found(MAPPING_DEVICE) == [(15, "DL105")]


def test_the_target_moved_to_the_mappings_device_is_clean() -> None:
    fixed = MAPPING_DEVICE.replace(
        "F.nll_loss(scores.log_softmax(-1), targets)",
        'F.nll_loss(scores.log_softmax(-1), targets.to(self.opts["device"]))',
    )
    assert _found(fixed) == []


# -- a dict attribute filled in `__init__` keeps its entries' places for the other methods --------

DICT_FILLED_IN_INIT = """
    import torch
    import torch.nn as nn


    class RecurrentScorer:
        def __init__(self, core: nn.GRUCell, width: int, device: str = "cuda"):
            self.device = device
            self.core = core.to(device)
            self.carry = {}
            self.carry["state"] = torch.zeros(1, width)

        def score(self, frames):
            state = self.carry["state"]
            for frame in frames:
                state = self.core(frame.to(self.device), state)
            return state
"""


def test_a_cpu_entry_of_a_dict_filled_in_init_meets_device_frames() -> None:
    assert _found(DICT_FILLED_IN_INIT) == [(11, "DL101")]


def test_the_entry_made_on_the_device_is_clean() -> None:
    fixed = DICT_FILLED_IN_INIT.replace("torch.zeros(1, width)", "torch.zeros(1, width, device=device)")
    assert _found(fixed) == []


def test_an_entry_another_method_replaces_is_not_read_from_init() -> None:
    reset = DICT_FILLED_IN_INIT.replace(
        "        def score(self, frames):",
        "        def reset(self):\n"
        '            self.carry["state"] = self.carry["state"].to(self.device)\n\n'
        "        def score(self, frames):",
    )
    assert _found(reset) == []


# -- a default device taken from the program's settings is the GPU run's default ---------------

SETTINGS_DEFAULT = """
    import torch
    from torch.utils.data import DataLoader


    class DataModule:
        def __init__(self, hparams, corpus):
            self.hparams = hparams
            self.corpus = corpus

        def setup(self):
            torch.set_default_device(self.hparams["device"])

        def train_dataloader(self):
            return DataLoader(self.corpus, batch_size=self.hparams["batch"], shuffle=True)
"""


def test_a_shuffling_loader_under_a_default_device_read_from_settings() -> None:
    assert _found(SETTINGS_DEFAULT) == [(15, "DL114")]


def test_a_loader_that_does_not_shuffle_under_that_default_is_clean() -> None:
    assert _found(SETTINGS_DEFAULT.replace("shuffle=True", "shuffle=False")) == []


def test_a_default_taken_from_an_object_that_is_no_settings_is_not_judged() -> None:
    assert _found(SETTINGS_DEFAULT.replace('self.hparams["device"]', "self.backbone.device")) == []


# -- a CUDA default that every loader of the file is given a matching generator for ------------

DEFAULT_WITH_MATCHING_GENERATORS = """
    import torch
    from torch.utils.data import DataLoader, random_split

    torch.set_default_device("cuda")


    def loaders(dataset, batch):
        train, held = random_split(dataset, [0.8, 0.2], generator=torch.Generator(device="cuda"))
        shuffled = DataLoader(train, batch_size=batch, shuffle=True, generator=torch.Generator(device="cuda"))
        return shuffled, DataLoader(held, batch_size=batch, generator=torch.Generator(device="cuda"))
"""


def test_a_default_the_files_loaders_are_given_generators_for_is_kept_knowingly() -> None:
    assert _found(DEFAULT_WITH_MATCHING_GENERATORS) == []


def test_one_loader_left_with_the_cpu_generator_still_reports_the_default() -> None:
    one_left = DEFAULT_WITH_MATCHING_GENERATORS.replace(
        'shuffle=True, generator=torch.Generator(device="cuda")', "shuffle=True"
    )
    assert _found(one_left) == [(5, "DL110"), (10, "DL114")]


# -- a plain wrapper's in-place mover, called as a statement by the file ------------------------

IN_PLACE_WRAPPER = """
    import torch
    import torch.nn as nn


    class Pipeline:
        def __init__(self, encoder: nn.Module, scale: float):
            self.encoder = encoder
            self.scale = scale

        def gpu(self):
            pass

        def cuda(self):
            self.encoder = self.encoder.cuda()


    def prepare(encoder, use_cuda):
        pipe = Pipeline(encoder, 0.5)
        if use_cuda:
            pipe.cuda()
        return pipe
"""


def test_a_plain_wrappers_mover_used_in_place_is_not_reported() -> None:
    assert _found(IN_PLACE_WRAPPER) == []


def test_the_same_mover_whose_result_is_kept_is_reported_at_the_override_and_the_use() -> None:
    kept = IN_PLACE_WRAPPER.replace("            pipe.cuda()", "            pipe = pipe.cuda()")
    assert _found(kept) == [(14, "DL112"), (21, "DL112")]


# -- a branch on `arg is None` that every call decides by handing a tensor ----------------------

NONE_BRANCH_DECIDED_BY_CALLS = """
    import torch


    def gaussian_noise(rows, cols, like=None):
        if like is not None:
            return torch.randn(rows, cols, dtype=like.dtype, device=like.device)
        return torch.randn(rows, cols)


    def perturb(points, sigma, device):
        points = points.to(device)
        noise = gaussian_noise(points.shape[0], points.shape[1], like=points)
        return points + sigma * noise
"""


def test_the_none_branch_no_call_takes_is_not_analysed_as_taken() -> None:
    assert _found(NONE_BRANCH_DECIDED_BY_CALLS) == []


def test_a_call_that_leaves_the_tensor_out_takes_the_cpu_branch() -> None:
    left_out = NONE_BRANCH_DECIDED_BY_CALLS.replace(", like=points)", ")")
    assert _found(left_out) == [(8, "DL101")]


# -- an entry written into a mapping the code knows nothing else about, lazily or not -----------

LAZY_OPTIMIZER_STATE = """
    import torch


    class SignumLite(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3, beta=0.9):
            super().__init__(params, {"lr": lr, "beta": beta})

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for weight in group["params"]:
                    slot = self.state[weight]
                    if "avg" not in slot:
                        slot["avg"] = torch.zeros(weight.size())
                    avg = slot["avg"]
                    avg.lerp_(weight.grad, 1 - group["beta"])
                    weight.sub_(group["lr"] * avg.sign())
"""


def test_a_lazily_made_cpu_state_entry_meets_the_parameters_gradient() -> None:
    assert _found(LAZY_OPTIMIZER_STATE) == [(15, "DL101")]


def test_the_state_entry_made_like_the_parameter_is_clean() -> None:
    fixed = LAZY_OPTIMIZER_STATE.replace("torch.zeros(weight.size())", "torch.zeros_like(weight)")
    assert _found(fixed) == []


# -- a host conversion of a helper's device result, written inline --------------------------------

INLINE_CONVERSION = """
    import torch
    import torch.nn.functional as F


    def dice(pred, mask, eps=1e-6):
        inter = (pred.sigmoid() * mask).sum()
        return 1 - (2 * inter + eps) / (pred.sigmoid().sum() + mask.sum() + eps)


    def fit_epoch(net, batches, optim, device):
        net = net.to(device)
        scores = []
        for image, mask in batches:
            image, mask = image.to(device), mask.to(device)
            logits = net(image)
            loss = F.binary_cross_entropy_with_logits(logits, mask)
            optim.zero_grad()
            loss.backward()
            optim.step()
            scores.append(float(dice(logits.detach(), mask)))
        return scores
"""


def test_float_of_a_helpers_device_result_on_every_step() -> None:
    assert _found(INLINE_CONVERSION) == [(21, "DL401")]


def test_the_helpers_result_kept_on_the_device_is_clean() -> None:
    fixed = INLINE_CONVERSION.replace(
        "scores.append(float(dice(logits.detach(), mask)))", "scores.append(dice(logits.detach(), mask))"
    )
    assert _found(fixed) == []


# -- a load a helper returns, judged by what every call of the helper does with it --------------

RETURNED_HOST_PAYLOAD = """
    import torch
    import torch.nn as nn


    class Quantizer(nn.Module):
        @staticmethod
        def _read_codebook(path):
            return torch.load(path)

        def __init__(self, codebook_path, level):
            super().__init__()
            table = self._read_codebook(codebook_path)
            table = torch.from_numpy(table[level])
            self.register_buffer("codebook", table)
"""


def test_a_returned_load_that_every_caller_reads_as_numpy_is_clean() -> None:
    assert _found(RETURNED_HOST_PAYLOAD) == []


def test_a_returned_load_a_caller_hands_to_the_model_is_reported() -> None:
    into_model = RETURNED_HOST_PAYLOAD.replace(
        "table = torch.from_numpy(table[level])", "self.load_state_dict(table)"
    ).replace('            self.register_buffer("codebook", table)\n', "")
    assert _found(into_model) == [(9, "DL501")]


# -- a lazy cache made by a constructor-chosen tensor type is no input-device cache ---------------

TYPE_CHOSEN_CACHE = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class HingeTargets(nn.Module):
        def __init__(self, tensor_type=torch.FloatTensor):
            super().__init__()
            self.make = tensor_type
            self.ones = None

        def forward(self, scores):
            if self.ones is None:
                self.ones = self.make(1).fill_(1.0)
            return F.relu(self.ones.expand_as(scores) - scores).mean()
"""


def test_a_cache_made_by_a_constructor_chosen_tensor_type_is_not_an_input_device_cache() -> None:
    assert _found(TYPE_CHOSEN_CACHE) == []


def test_the_cache_made_on_the_inputs_device_is_reported() -> None:
    on_input = TYPE_CHOSEN_CACHE.replace("self.make(1).fill_(1.0)", "torch.ones(1, device=scores.device)")
    assert _found(on_input) == [(11, "DL102")]


# -- a plain attribute read through a module-level helper handed the instance ---------------------

HELPER_HANDED_THE_INSTANCE = """
    import torch
    import torch.nn as nn


    def _angles(owner, positions):
        return owner.inv_freq[positions]


    class Rotary(nn.Module):
        def __init__(self, dim, max_len):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            self.inv_freq = 1.0 / (10000 ** (torch.arange(0, max_len).float() / max_len))

        def forward(self, x):
            positions = torch.arange(x.size(1), device=x.device)
            return self.proj(x) * _angles(self, positions).unsqueeze(-1).cos()
"""


def test_a_cpu_table_indexed_by_device_positions_in_a_helper_handed_the_module() -> None:
    assert _found(HELPER_HANDED_THE_INSTANCE) == [(7, "DL116")]


def test_the_table_registered_as_a_buffer_is_clean() -> None:
    fixed = HELPER_HANDED_THE_INSTANCE.replace(
        "self.inv_freq = 1.0 / (10000 ** (torch.arange(0, max_len).float() / max_len))",
        'self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, max_len).float() / max_len)))',
    )
    assert _found(fixed) == []


# -- an autocast dtype read from a settings object handed through a parameter ---------------------

DTYPE_THROUGH_CALLERS = """
    from dataclasses import dataclass

    import torch
    import torch.nn.functional as F


    @dataclass
    class RunSettings:
        precision: torch.dtype = torch.float16


    class Loop:
        def run(self, net, data, opt, settings):
            for xb, yb in data:
                with torch.autocast("cuda", dtype=settings.precision):
                    loss = F.mse_loss(net(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()


    def main(net, data, opt, settings: RunSettings):
        Loop().run(net, data, opt, settings)
"""


def test_a_float16_setting_handed_to_the_loop_needs_a_scaler() -> None:
    assert _found(DTYPE_THROUGH_CALLERS) == [(18, "DL301")]


def test_the_bfloat16_setting_handed_the_same_way_is_clean() -> None:
    assert _found(DTYPE_THROUGH_CALLERS.replace("torch.dtype = torch.float16", "torch.dtype = torch.bfloat16")) == []


# -- a list of numbers grown with `+=` in a loop is host data ---------------------------------------

GROWN_LIST_TABLE = """
    import torch
    import torch.nn as nn


    class AnchorHead(nn.Module):
        def __init__(self, channels, sizes=(16, 32)):
            super().__init__()
            self.sizes = sizes
            self.reg = nn.Conv2d(channels, 4 * len(sizes), 1)

        def anchors(self, rows, cols):
            flat = []
            for r in range(rows):
                for c in range(cols):
                    for s in self.sizes:
                        flat += [(c + 0.5) / cols, (r + 0.5) / rows, s, s]
            return torch.FloatTensor(flat).view(-1, 4)

        def forward(self, fmap):
            deltas = self.reg(fmap).permute(0, 2, 3, 1).reshape(fmap.size(0), -1, 4)
            return deltas + self.anchors(fmap.size(2), fmap.size(3))
"""


def test_a_table_built_from_a_list_grown_in_a_loop_is_a_cpu_tensor() -> None:
    assert _found(GROWN_LIST_TABLE) == [(18, "DL101")]


def test_the_table_made_on_the_inputs_device_is_clean() -> None:
    fixed = GROWN_LIST_TABLE.replace(
        "torch.FloatTensor(flat).view(-1, 4)", "torch.tensor(flat, device=self.reg.weight.device).view(-1, 4)"
    )
    assert _found(fixed) == []


# -- a script that runs its module on the CPU contradicts a module that hard-codes CUDA -------------

SCRIPT_RUNS_MODULE_ON_CPU = """
    import torch
    import torch.nn as nn


    class Denoiser(nn.Module):
        def __init__(self, width=64, target="cuda:0"):
            super().__init__()
            self.target = target
            self.body = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))

        def forward(self, noisy):
            return self.body(noisy.to(self.target))


    if __name__ == "__main__":
        net = Denoiser().to("cpu")
        print(net(torch.randn(4, 64)))
"""


def test_a_cuda_default_in_a_module_the_script_runs_on_the_cpu() -> None:
    assert _found(SCRIPT_RUNS_MODULE_ON_CPU) == [(7, "DL107")]


def test_the_same_script_running_it_on_the_gpu_is_gpu_only_by_design() -> None:
    on_gpu = SCRIPT_RUNS_MODULE_ON_CPU.replace('net = Denoiser().to("cpu")', 'net = Denoiser().to("cuda:0")').replace(
        "torch.randn(4, 64)", 'torch.randn(4, 64, device="cuda:0")'
    )
    assert _found(on_gpu) == []


def test_a_cuda_default_the_constructor_also_builds_on_is_the_authors_choice() -> None:
    built_there = SCRIPT_RUNS_MODULE_ON_CPU.replace("nn.Linear(width, width))", "nn.Linear(width, width)).to(target)")
    assert built_there != SCRIPT_RUNS_MODULE_ON_CPU and _found(built_there) == []


# -- a plain function that builds its own tensors on its input's device ----------------------------

BUILDS_ON_ITS_INPUTS = """
    import torch


    def greedy_prune(scores, keep, lengths):
        where = scores.device
        rows = torch.arange(scores.size(0))
        alive = torch.ones(scores.size(0), dtype=torch.bool, device=where)
        for _ in range(keep):
            best = scores.argmax(-1)
            alive &= best.ne(0)
            survivors = alive.nonzero().view(-1)
            rows = rows[survivors]
            scores = scores[survivors]
        return rows, lengths
"""


def test_a_cpu_table_indexed_by_positions_from_the_inputs_device() -> None:
    assert _found(BUILDS_ON_ITS_INPUTS) == [(13, "DL116")]


def test_the_table_made_where_the_inputs_are_is_clean() -> None:
    fixed = BUILDS_ON_ITS_INPUTS.replace("torch.arange(scores.size(0))", "torch.arange(scores.size(0), device=where)")
    assert _found(fixed) == []


def test_a_function_that_places_nothing_itself_keeps_its_inputs_unjudged() -> None:
    unplaced = BUILDS_ON_ITS_INPUTS.replace(", device=where)", ")")
    # (DL116 stays silent; DL101 reports the mask built without a device meeting the scores)
    assert _found(unplaced) == [(8, "DL101")]


def test_a_cuda_default_that_forward_replaces_with_the_inputs_device_is_clean() -> None:
    replaced = SCRIPT_RUNS_MODULE_ON_CPU.replace(
        "        def forward(self, noisy):\n",
        "        def forward(self, noisy):\n            self.target = noisy.device\n",
    )
    assert replaced != SCRIPT_RUNS_MODULE_ON_CPU and _found(replaced) == []


# -- a model whose constructor makes its own tensors with a legacy CUDA constructor ----------------

LEGACY_CUDA_PARAMETERS = """
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn


    class Scales(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.gain = nn.Parameter(torch.cuda.FloatTensor(n).fill_(1.0))

        def forward(self, x):
            return x * self.gain


    def main():
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        model = nn.parallel.DistributedDataParallel(Scales(16))
        return model
"""


def test_a_model_built_with_cuda_tensors_is_not_still_on_the_cpu() -> None:
    # (the hard-coded CUDA constructor is DL107's finding; DL205 stays silent)
    assert _found(LEGACY_CUDA_PARAMETERS) == [(12, "DL107")]


def test_the_same_model_built_with_cpu_tensors_is_reported_under_nccl() -> None:
    on_host = LEGACY_CUDA_PARAMETERS.replace("torch.cuda.FloatTensor(n)", "torch.FloatTensor(n)")
    assert _found(on_host) == [(21, "DL205")]
