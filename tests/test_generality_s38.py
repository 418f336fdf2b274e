"""Shapes found by rewriting the re-created bugs with the metamorphic operators (session 38:
`python -m tests.metamorphic.report --cases recreated`): a bug the rules found in its thread's
words was lost once its names, helpers or containers changed. Each is tested here in another
form than the variant that showed it, with its one-fix twin clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "tools/score.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


# -- a discarded move of a value only a tensor method could have made, whatever it is called ----

UNNAMED_TENSOR_MOVE = """
    import torch
    from PIL import Image


    def score(p, q, w):
        r = torch.device("cuda")
        s = w(Image.open(p)).permute(2, 0, 1)
        s.to(r)
        u = load_scorer(q)
        u.to(r)
        u.eval()
        with torch.no_grad():
            return u(s)
"""


def test_a_discarded_move_of_a_tensor_method_result_is_found_without_telling_names() -> None:
    assert _found(UNNAMED_TENSOR_MOVE) == [(9, "DL104")]


def test_the_assigned_move_is_clean() -> None:
    assert _found(UNNAMED_TENSOR_MOVE.replace("        s.to(r)", "        s = s.to(r)")) == []


# -- a parameter read only for plain fields is a settings object --------------------------------

SETTINGS_WITHOUT_A_SETTINGS_NAME = """
    import torch


    def refine(net, o, memory, picks):
        net.to(o.device)
        bank = torch.zeros(o.slots, o.width).to(o.device)
        for step in range(o.rounds):
            for ids, feats in memory:
                ids = ids.to(o.device)
                bank[ids] = net(feats.to(o.device))
                hit = picks[ids]
        return bank, hit
"""


def test_a_cpu_table_indexed_by_indices_moved_to_a_settings_device_is_found() -> None:
    source = SETTINGS_WITHOUT_A_SETTINGS_NAME.replace(
        "def refine(net, o, memory, picks):", "def refine(net, o, memory, n):\n        picks = torch.randperm(n)"
    )
    assert _found(source) == [(13, "DL116")]


def test_the_table_moved_with_them_is_clean() -> None:
    source = SETTINGS_WITHOUT_A_SETTINGS_NAME.replace(
        "def refine(net, o, memory, picks):",
        "def refine(net, o, memory, n):\n        picks = torch.randperm(n).to(o.device)",
    )
    assert _found(source) == []


# -- a callable handed in computes where the tensors it is given were made -----------------------

HANDED_CALLABLE = """
    import torch


    def greedy(step_fn, memory, steps):
        device = memory.device
        n = memory.size(0)
        origin = torch.arange(n)
        tokens = torch.zeros(n, 1, dtype=torch.long, device=device)
        for _ in range(steps):
            scores = step_fn(tokens, memory)
            best = scores.argmax(-1)
            done = best.eq(0).nonzero().view(-1)
            origin = origin[done]
            tokens = torch.cat([tokens[done], best[done, None]], 1)
        return origin
"""


def test_a_cpu_index_table_narrowed_by_a_handed_callables_results_is_found() -> None:
    assert _found(HANDED_CALLABLE) == [(14, "DL116")]


def test_the_table_made_on_the_memorys_device_is_clean() -> None:
    fixed = HANDED_CALLABLE.replace("origin = torch.arange(n)", "origin = torch.arange(n, device=device)")
    assert _found(fixed) == []


# -- a builder handed the instance returns another builder's plain list -------------------------

LIST_THROUGH_TWO_BUILDERS = """
    from torch import nn


    class Tower(nn.Module):
        def __init__(self, width, depth):
            super().__init__()
            self.stages = Tower._stages(self, width, depth)
            self.out = nn.Linear(width, 1)

        @staticmethod
        def _stages(tower, width, depth):
            return tower._blocks(width, depth)

        def _blocks(self, width, depth):
            made = []
            for _ in range(depth):
                made.append(nn.Linear(width, width))
            return made

        def forward(self, x):
            for stage in self.stages:
                x = stage(x)
            return self.out(x)
"""


def test_a_plain_list_of_layers_returned_through_two_builders_is_found() -> None:
    assert _found(LIST_THROUGH_TWO_BUILDERS) == [(8, "DL103")]


def test_the_same_list_wrapped_in_a_module_list_is_clean() -> None:
    fixed = LIST_THROUGH_TWO_BUILDERS.replace(
        "self.stages = Tower._stages(self, width, depth)",
        "self.stages = nn.ModuleList(Tower._stages(self, width, depth))",
    )
    assert _found(fixed) == []


# -- an autocast dtype picked by a helper --------------------------------------------------------

DTYPE_FROM_A_HELPER = """
    import torch


    def amp_dtype(name):
        if name == "half":
            return torch.float16
        return torch.bfloat16


    def train(model, opt, batches, precision="half"):
        model.cuda()
        for x, y in batches:
            with torch.autocast("cuda", dtype=amp_dtype(precision)):
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
            opt.zero_grad()
"""


def test_float16_autocast_whose_dtype_a_helper_may_return_needs_a_scaler() -> None:
    assert [code for _, code in _found(DTYPE_FROM_A_HELPER)] == ["DL301"]


def test_a_helper_that_only_returns_bfloat16_is_clean() -> None:
    fixed = DTYPE_FROM_A_HELPER.replace("return torch.float16", "return torch.bfloat16")
    assert _found(fixed) == []


# -- a draw on the device a helper picks from the generator itself ------------------------------

DRAW_DEVICE_FROM_A_HELPER = """
    import torch


    class Sampler:
        def __init__(self, device="cuda"):
            self.device = torch.device(device)

        def _where(self, gen, fallback):
            return gen.device if gen is not None else fallback

        def noise(self, n, gen=None):
            on = self._where(gen, self.device)
            return torch.randn(n, 4, device=on, generator=gen).to(self.device)


    def sample(n):
        return Sampler().noise(n, gen=torch.Generator().manual_seed(0))
"""


def test_a_draw_on_the_device_a_helper_takes_from_the_generator_is_clean() -> None:
    assert _found(DRAW_DEVICE_FROM_A_HELPER) == []


def test_a_draw_on_the_device_a_helper_ignores_the_generator_for_is_found() -> None:
    bad = DRAW_DEVICE_FROM_A_HELPER.replace("return gen.device if gen is not None else fallback", "return fallback")
    assert _found(bad) == [(14, "DL115")]


# -- a parameter a builder method returns is registered ------------------------------------------

PARAMETER_FROM_A_BUILDER = """
    import torch
    from torch import nn


    class Shift(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.bias = self._fresh(n)
            self.proj = nn.Linear(n, n)

        def _fresh(self, n):
            return nn.Parameter(torch.zeros(n))

        def forward(self, x):
            return self.proj(x + self.bias)


    net = Shift(8).cuda()
"""


def test_a_parameter_returned_by_a_builder_method_is_registered() -> None:
    assert _found(PARAMETER_FROM_A_BUILDER) == []


def test_a_parameter_moved_inside_the_builder_is_still_found() -> None:
    bad = PARAMETER_FROM_A_BUILDER.replace(
        "return nn.Parameter(torch.zeros(n))", "return nn.Parameter(torch.zeros(n)).cuda()"
    )
    # (and DL107's hint on the hard-coded device)
    assert _found(bad) == [(9, "DL102"), (13, "DL107")]


# -- a callee that reads through `.module` on the wrapped branch --------------------------------

WRAPPER_HANDED_TO_A_TRAINER_METHOD = """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 4)
            self.scale = 2.0

        def forward(self, x):
            return self.body(x) * self.scale


    class Loop:
        def run(self, opts, net, opt):
            for _ in range(opts.steps):
                loss = net(torch.randn(8, 4).cuda()).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                scale = net.module.scale if opts.multi_gpu else net.scale
                print(scale)


    def main(opts):
        net = Net().cuda()
        if opts.multi_gpu:
            net = nn.DataParallel(net)
        Loop().run(opts, net, torch.optim.SGD(net.parameters(), lr=0.1))
"""


def test_a_callee_that_unwraps_on_the_wrapped_branch_is_clean() -> None:
    assert _found(WRAPPER_HANDED_TO_A_TRAINER_METHOD) == []


def test_a_callee_that_reads_the_wrapper_bare_is_found() -> None:
    bad = WRAPPER_HANDED_TO_A_TRAINER_METHOD.replace(
        "scale = net.module.scale if opts.multi_gpu else net.scale", "scale = net.scale"
    )
    assert [code for _, code in _found(bad)] == ["DL203"]


# -- optimizer state: placement by a helper around fabric.setup, an optimizer by its use ----------

STATE_RESTORED_BEFORE_A_SETUP_HELPER = """
    import lightning as L
    import torch
    from torch import nn


    def place(runner, net, opt):
        return runner.setup(net, opt)


    def run(ckpt_path):
        runner = L.Fabric(accelerator="cuda")
        net = nn.Linear(8, 8)
        opt = torch.optim.Adam(net.parameters())
        state = torch.load(ckpt_path, map_location="cpu")
        net.load_state_dict(state["net"])
        opt.load_state_dict(state["opt"])
        net, opt = place(runner, net, opt)
        return net, opt
"""


def test_state_loaded_before_a_helper_that_runs_fabric_setup_is_found() -> None:
    assert [code for _, code in _found(STATE_RESTORED_BEFORE_A_SETUP_HELPER)] == ["DL111"]


def test_state_loaded_after_the_setup_helper_is_clean() -> None:
    fixed = STATE_RESTORED_BEFORE_A_SETUP_HELPER.replace(
        '        net.load_state_dict(state["net"])\n        opt.load_state_dict(state["opt"])\n        net, opt = place(runner, net, opt)\n',
        '        net, opt = place(runner, net, opt)\n        net.load_state_dict(state["net"])\n        opt.load_state_dict(state["opt"])\n',
    )
    assert _found(fixed) == []


OPTIMIZER_KNOWN_BY_ITS_USE = """
    import torch
    from torch import nn


    def make(n):
        a = nn.Linear(n, n)
        return a, torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)


    def resume(path, a, b):
        saved = torch.load(path, map_location="cpu")
        a.load_state_dict(saved["a"])
        b.load_state_dict(saved["b"])


    def main(path, batches):
        a, b = make(16)
        resume(path, a, b)
        a.cuda()
        for x in batches:
            b.zero_grad()
            a(x.cuda()).sum().backward()
            b.step()
"""


def test_an_optimizer_known_only_by_zero_grad_restored_before_the_move_is_found() -> None:
    assert [code for _, code in _found(OPTIMIZER_KNOWN_BY_ITS_USE)] == ["DL111"]


def test_the_model_moved_before_the_restore_is_clean() -> None:
    fixed = OPTIMIZER_KNOWN_BY_ITS_USE.replace(
        "        resume(path, a, b)\n        a.cuda()\n", "        a.cuda()\n        resume(path, a, b)\n"
    )
    assert _found(fixed) == []


# -- a wrapper made by a helper --------------------------------------------------------------------

COUNTER_UNDER_A_HELPER_MADE_WRAPPER = """
    import torch
    from torch import nn


    class Annealed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return self.lin(x) / (1 + self.calls)


    def spread(module):
        return nn.DataParallel(module)


    def main(steps):
        net = spread(Annealed()).cuda()
        for _ in range(steps):
            net(torch.randn(8, 4).cuda()).sum().backward()
"""


def test_a_replica_write_under_a_wrapper_a_helper_makes_is_found() -> None:
    assert [code for _, code in _found(COUNTER_UNDER_A_HELPER_MADE_WRAPPER)] == ["DL203"]


def test_the_same_module_unwrapped_is_clean() -> None:
    assert _found(COUNTER_UNDER_A_HELPER_MADE_WRAPPER.replace("return nn.DataParallel(module)", "return module")) == []


WRAPPER_TO_A_CLASS_THROUGH_A_HELPER = """
    from torch import nn


    class Probe:
        def __init__(self, model):
            self.trunk = model.trunk


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Linear(4, 4)


    def probe_for(model):
        return Probe(model)


    def build(gpus):
        model = Net()
        if len(gpus) > 1:
            model = nn.DataParallel(model, device_ids=gpus)
        return probe_for(model)
"""


def test_a_wrapper_a_helper_hands_to_a_class_that_reads_through_it_is_found() -> None:
    found = lint_source(textwrap.dedent(WRAPPER_TO_A_CLASS_THROUGH_A_HELPER), "tools/score.py", DEFAULT).findings
    assert [(f.line, f.code) for f in found] == [(7, "DL203")]
    assert "(which hands it on to `Probe`)" in found[0].message


def test_a_class_that_reads_through_module_is_clean() -> None:
    fixed = WRAPPER_TO_A_CLASS_THROUGH_A_HELPER.replace(
        "self.trunk = model.trunk", 'self.trunk = getattr(model, "module", model).trunk'
    )
    assert _found(fixed) == []


# -- a value read back out of a dict the function fills ------------------------------------------

GENERATOR_KEPT_IN_A_DICT = """
    import torch


    def jitter(points, seed):
        rng = {"gen": torch.Generator().manual_seed(seed), "seed": seed}
        gen = rng["gen"]
        return points + torch.randn(points.shape, device="cuda", generator=gen)
"""


def test_a_cpu_generator_read_back_out_of_a_dict_drawn_on_cuda_is_found() -> None:
    # (DL107's hints on the hard-coded device aside)
    assert [f for f in _found(GENERATOR_KEPT_IN_A_DICT) if f[1] != "DL107"] == [(8, "DL115")]


def test_a_cuda_generator_read_back_out_of_the_dict_is_clean() -> None:
    fixed = GENERATOR_KEPT_IN_A_DICT.replace("torch.Generator()", 'torch.Generator(device="cuda")')
    assert [f for f in _found(fixed) if f[1] != "DL107"] == []


# -- a dataset's static builder called through the class --------------------------------------------

DATASET_STATIC_BUILDER = """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Frames(Dataset):
        def __init__(self, n):
            self.n = n
            self.canvas = Frames._blank()

        @staticmethod
        def _blank():
            return torch.zeros(3, 64, 64).cuda()

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            return self.canvas + i


    loader = DataLoader(Frames(100), batch_size=8, num_workers=4)
"""


def test_a_gpu_tensor_made_by_a_static_builder_of_the_dataset_is_found() -> None:
    assert _found(DATASET_STATIC_BUILDER) == [(13, "DL109")]


def test_the_static_builder_on_the_host_is_clean() -> None:
    assert _found(DATASET_STATIC_BUILDER.replace("torch.zeros(3, 64, 64).cuda()", "torch.zeros(3, 64, 64)")) == []


# -- a scaler built per epoch and handed to a stepping helper --------------------------------------

SCALER_HANDED_TO_A_STEPPING_METHOD = """
    import torch
    from torch.amp import GradScaler, autocast


    class Steps:
        def run(self, net, opt, batches, amp):
            for x, y in batches:
                with autocast("cuda", dtype=torch.float16):
                    loss = torch.nn.functional.mse_loss(net(x.cuda()), y.cuda())
                opt.zero_grad()
                amp.scale(loss).backward()
                amp.step(opt)
                amp.update()


    def one_epoch(net, opt, batches):
        amp = GradScaler("cuda")
        Steps().run(net, opt, batches, amp)


    def fit(net, opt, batches, epochs):
        net.cuda()
        for _ in range(epochs):
            one_epoch(net, opt, batches)
"""


def test_a_scaler_built_each_epoch_and_handed_to_a_stepping_method_is_found() -> None:
    assert _found(SCALER_HANDED_TO_A_STEPPING_METHOD) == [(18, "DL303")]


def test_a_scaler_built_once_and_handed_down_is_clean() -> None:
    fixed = (
        SCALER_HANDED_TO_A_STEPPING_METHOD.replace(
            "def one_epoch(net, opt, batches):", "def one_epoch(net, opt, batches, amp):"
        )
        .replace('        amp = GradScaler("cuda")\n', "")
        .replace("        net.cuda()\n", '        net.cuda()\n        amp = GradScaler("cuda")\n')
        .replace("one_epoch(net, opt, batches)\n", "one_epoch(net, opt, batches, amp)\n")
    )
    assert _found(fixed) == []


# -- DistributedDataParallel imported from torch.nn.parallel -----------------------------------------

DDP_STEP = """
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(rank, loader, steps):
        model = nn.Linear(16, 4).cuda(rank)
        model = DDP(model, device_ids=[rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_targets_left_on_the_cpu_beside_a_ddp_models_output_are_found() -> None:
    # DDP moves the inputs it is called with to its device, not the targets
    assert _found(DDP_STEP) == [(13, "DL105")]


def test_targets_moved_to_the_rank_are_clean() -> None:
    assert _found(DDP_STEP.replace("cross_entropy(out, y)", "cross_entropy(out, y.cuda(rank))")) == []


def test_inputs_of_a_ddp_wrapper_without_device_ids_are_not_moved_for_it() -> None:
    no_ids = DDP_STEP.replace("DDP(model, device_ids=[rank])", "DDP(model)").replace(
        "cross_entropy(out, y)", "cross_entropy(out, y.cuda(rank))"
    )
    # (and DL205 asks for device_ids)
    assert _found(no_ids) == [(9, "DL205"), (12, "DL105")]


# -- the same bug under other import spellings and a progress bar ------------------------------------

ALIASED_TENSOR_ANNOTATION = """
    import torch as th
    from torch import Tensor as T


    def split_rows(rows: T, sizes: T):
        pos = th.arange(rows.shape[1])
        return [row[pos < n] for row, n in zip(rows, sizes)]
"""


def test_a_tensor_parameter_annotated_with_an_aliased_class_is_a_tensor() -> None:
    assert [code for _, code in _found(ALIASED_TENSOR_ANNOTATION)] == ["DL101"]


def test_the_index_made_on_the_rows_device_is_clean() -> None:
    fixed = ALIASED_TENSOR_ANNOTATION.replace(
        "th.arange(rows.shape[1])", "th.arange(rows.shape[1], device=rows.device)"
    )
    assert _found(fixed) == []


PREPARED_LOADER_UNDER_A_PROGRESS_BAR = """
    import torch
    from accelerate import Accelerator
    from tqdm import tqdm


    def fit(loader, steps):
        accelerator = Accelerator()
        weight = torch.zeros(4, 1, requires_grad=True)
        opt = torch.optim.SGD([weight], lr=0.1)
        weight, opt, loader = accelerator.prepare(weight, opt, loader)
        for step, (x, y) in enumerate(tqdm(loader)):
            loss = ((x @ weight) - y).pow(2).mean()
            accelerator.backward(loss)
            opt.step()
"""


def test_a_bare_tensor_weight_meeting_a_prepared_loaders_batches_under_tqdm_is_found() -> None:
    assert [code for _, code in _found(PREPARED_LOADER_UNDER_A_PROGRESS_BAR)] == ["DL101"]


def test_the_weight_made_on_the_accelerators_device_is_clean() -> None:
    fixed = PREPARED_LOADER_UNDER_A_PROGRESS_BAR.replace(
        "torch.zeros(4, 1, requires_grad=True)", "torch.zeros(4, 1, requires_grad=True, device=accelerator.device)"
    )
    assert _found(fixed) == []


# -- a model whose own forward moves its input -------------------------------------------------------

FORWARD_MOVES_ITS_INPUT = """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 2)

        def forward(self, x):
            x = x.to(self.lin.weight.device)
            return self.lin(x)


    def train(loader, device="cuda"):
        net = Net().to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x, y in loader:
            loss = nn.functional.cross_entropy(net(x), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_an_input_the_models_own_forward_moves_is_clean() -> None:
    assert _found(FORWARD_MOVES_ITS_INPUT) == []


def test_an_input_a_forward_only_casts_is_found() -> None:
    bad = FORWARD_MOVES_ITS_INPUT.replace("x = x.to(self.lin.weight.device)", "x = x.to(torch.float32)")
    assert [code for _, code in _found(bad)] == ["DL105"]
