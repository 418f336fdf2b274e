"""Set rx's general shapes, each in spellings its fixture does not use, with a clean twin:
a checkpoint loaded whether or not an `if` wrapped the model (DL204), and a hard-coded
`.cuda()` in a function of a script that keeps its tensors on the CPU when a flag says so
(DL107)."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _findings(source: str, path: str = "train.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


# -- a load after an `if` that may have wrapped the model -------------------------------------

WHOLE_MODEL = """
    import torch
    import torch.nn as nn
    from torchvision.models import resnet50


    def build(args, checkpoint_path):
        model = resnet50(num_classes=args.num_classes)
        if args.n_gpu > 1:
            model = nn.DataParallel(model)
        model = model.cuda()
        model.load_state_dict(torch.load(checkpoint_path, map_location="cpu"))
        return model
"""

SUBMODULE_DDP = """
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Runner:
        def setup(self, net, state, rank):
            if torch.distributed.get_world_size() > 1:
                net.backbone = DDP(net.backbone.to(rank), device_ids=[rank])
            net.eval()
            net.load_state_dict(state["weights"], strict=True)
            self.net = net
"""


def test_load_after_a_wrap_on_one_path_is_reported() -> None:
    assert _findings(WHOLE_MODEL) == [
        (
            12,
            "DL204",
            "`model.load_state_dict(...)` runs whether or not "
            "`if args.n_gpu > 1:` above it wrapped `model` in `DataParallel`, and the wrapper adds `module.` to "
            "the keys it expects, so one checkpoint cannot load on both paths (missing and unexpected keys); "
            "load the state dict into the bare model before wrapping it (or into `model.module` when wrapped)",
        )
    ]


def test_load_after_a_submodule_wrapped_on_one_path_is_reported() -> None:
    assert _findings(SUBMODULE_DDP) == [
        (
            11,
            "DL204",
            '`net.load_state_dict(state["weights"], strict=True)` runs whether or not `if torch.distributed.get_world_size() > 1:` above it '
            "wrapped `net.backbone` in `DistributedDataParallel`, and the wrapper adds `backbone.module.` to the "
            "keys it expects, so one checkpoint cannot load on both paths (missing and unexpected keys); load the "
            "state dict into the bare model before wrapping it (or into `net.backbone.module` when wrapped)",
        )
    ]


def test_load_before_the_wrap_or_on_every_path_is_clean() -> None:
    before = WHOLE_MODEL.replace(
        """        if args.n_gpu > 1:
            model = nn.DataParallel(model)
        model = model.cuda()
        model.load_state_dict(torch.load(checkpoint_path, map_location="cpu"))""",
        """        model.load_state_dict(torch.load(checkpoint_path, map_location="cpu"))
        if args.n_gpu > 1:
            model = nn.DataParallel(model)
        model = model.cuda()""",
    )
    assert _findings(before) == []
    rebuilt = SUBMODULE_DDP.replace("net.eval()", "net = Net()").replace(
        "    import torch\n", "    import torch\n    from nets import Net\n"
    )
    assert _findings(rebuilt) == []  # a model built anew after the `if` is not the one wrapped
    type_test = WHOLE_MODEL.replace("if args.n_gpu > 1:", "if not isinstance(model, nn.DataParallel):")
    assert _findings(type_test) == []  # a test of the wrapper type knows what the name holds
    saved_wrapped = WHOLE_MODEL.replace("if args.n_gpu > 1:", "if args.checkpoint_from_data_parallel:")
    assert _findings(saved_wrapped) == []  # a flag that may say how the checkpoint was saved


# -- a hard-coded `.cuda()` in a script that runs on the CPU when a flag says so --------------

FLAG_SCRIPT = """
    import argparse

    import torch


    def nearest_labels(bank, bank_labels, queries, k):
        votes = torch.zeros(queries.shape[0], 10){buffer}
        scores = queries @ bank.t()
        top = scores.topk(k, dim=1).indices
        votes.scatter_add_(1, bank_labels[top], torch.ones_like(top, dtype=votes.dtype))
        return votes.argmax(dim=1)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu", action="store_true")
        args = parser.parse_args()
        bank, labels, queries = torch.load("bank.pt", map_location="cpu")
        {move}
        print(nearest_labels(bank, labels, queries, 5))
"""


def test_cuda_in_a_function_of_a_script_with_a_cpu_path_is_reported() -> None:
    statement = FLAG_SCRIPT.format(
        buffer=".cuda()",
        move="if args.gpu:\n            bank, labels, queries = bank.cuda(), labels.cuda(), queries.cuda()",
    )
    expression = FLAG_SCRIPT.format(buffer=".cuda()", move="queries = queries.cuda() if args.gpu else queries")
    message = (
        "`.cuda()` hard-codes CUDA in `nearest_labels`: it breaks CPU-only runs, other GPUs (`cuda:1`, DDP "
        "ranks) and MPS; use the input's device (`queries.device`)"
    )
    assert _findings(statement) == [(8, "DL107", message)]
    assert _findings(expression) == [(8, "DL107", message)]


def test_script_that_follows_its_inputs_or_never_leaves_the_gpu_is_clean() -> None:
    following = FLAG_SCRIPT.format(
        buffer=".to(queries.device)", move="if args.gpu:\n            queries = queries.cuda()"
    )
    assert _findings(following) == []
    gpu_only = FLAG_SCRIPT.format(buffer=".cuda()", move="queries = queries.cuda()")
    assert _findings(gpu_only) == []  # a GPU-only script picks the GPU for its own functions


# -- optimizer state made on the first step without a device ------------------------------------

OPTIMIZER = """
    import torch
    from torch.optim import Optimizer


    class Momentum(Optimizer):
        def __init__(self, params, lr=0.01, beta=0.9):
            super().__init__(params, dict(lr=lr, beta=beta))

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    {first_step}
                        state["step"] = 0
                        state["velocity"] = {make}
                    velocity = state["velocity"]
                    state["step"] += 1
                    velocity.mul_(group["beta"]).add_(p.grad)
                    p.add_(velocity, alpha=-group["lr"])
"""


def test_state_made_on_the_first_step_without_a_device_is_reported() -> None:
    by_length = OPTIMIZER.format(first_step="if len(state) == 0:", make="torch.zeros(p.size())")
    by_truth = OPTIMIZER.format(first_step="if not state:", make="torch.full(p.shape, 0.0)")
    assert _findings(by_length, "optim/momentum.py") == [
        (
            19,
            "DL101",
            "`torch.zeros(...)` creates a CPU tensor in `step` that accumulates device values in place "
            '(`velocity.mul_(group["beta"]).add_(p.g...`); pass `device=p.device`',
        )
    ]
    assert _findings(by_truth, "optim/momentum.py") == [
        (
            19,
            "DL101",
            "`torch.full(...)` creates a CPU tensor in `step` that accumulates device values in place "
            '(`velocity.mul_(group["beta"]).add_(p.g...`); pass `device=p.device`',
        )
    ]


def test_state_made_like_the_parameter_is_clean() -> None:
    assert (
        _findings(OPTIMIZER.format(first_step="if len(state) == 0:", make="torch.zeros_like(p)"), "optim/momentum.py")
        == []
    )
    assert (
        _findings(
            OPTIMIZER.format(first_step="if not state:", make="torch.zeros(p.shape, device=p.device)"),
            "optim/momentum.py",
        )
        == []
    )


# -- a model cast to float16 and trained with no loss scaling -----------------------------------

HALF_SCRIPT = """
    import torch
    import torch.nn as nn


    def main(loader, device):
        net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(device){cast}
        optimizer = torch.optim.Adam(net.parameters(), lr=3e-4)
        for x, y in loader:
            loss = (net(x.to(device){input}) - y.to(device){input}).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""

HALF_TRAINER = """
    import torch
    from torch import optim


    class Agent:
        def __init__(self, policy):
            self.model = policy
            self.model.half()

        def configure(self, lr):
            self.optimizer = optim.RMSprop(self.model.parameters(), lr=lr)

        def update(self, obs, returns):
            loss = -(self.model(obs.half()).log_softmax(-1).max(-1).values * returns).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
"""

HALF_MESSAGE = (
    "`{cast}` casts `{model}` to float16 and `{optimizer}` trains its float16 weights with no loss scaling: "
    "small gradients flush to zero and the optimizer's float16 state underflows or overflows (`nan` losses); "
    'keep the weights in float32 and run the forward under `torch.autocast("cuda", dtype=torch.float16)` '
    "with a `GradScaler`, or autocast to `torch.bfloat16`"
)


def test_model_cast_to_float16_and_trained_is_reported() -> None:
    script = HALF_SCRIPT.format(cast=".to(torch.float16)", input=".half()")
    cast = "nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(device).to(torch.float16)"
    assert _findings(script) == [(7, "DL309", HALF_MESSAGE.format(cast=cast, model="net", optimizer="optimizer"))]
    assert _findings(HALF_TRAINER, "rl/agent.py") == [
        (9, "DL309", HALF_MESSAGE.format(cast="self.model.half()", model="self.model", optimizer="self.optimizer"))
    ]


def test_float32_weights_or_a_float16_model_nothing_trains_is_clean() -> None:
    assert _findings(HALF_SCRIPT.format(cast="", input="")) == []
    frozen = HALF_TRAINER.replace("self.model.parameters()", "self.head.parameters()").replace(
        "self.model = policy", "self.model = policy\n            self.head = torch.nn.Linear(4, 4)"
    )
    assert _findings(frozen, "rl/agent.py") == []  # a float16 model no optimizer trains
    scaled = HALF_SCRIPT.format(cast=".to(torch.float16)", input=".half()").replace(
        "import torch.nn as nn", "import torch.nn as nn\n    from apex import amp"
    )
    assert _findings(scaled) == []  # apex keeps float32 master weights for it


# -- optimizer state stored without a device, however it is keyed -----------------------------

STATE_STORES = """
    import torch
    from torch.optim import Optimizer


    class Lion(Optimizer):
        def __init__(self, params, lr=1e-4, betas=(0.9, 0.99)):
            super().__init__(params, dict(lr=lr, betas=betas))

        def _buffer(self, p, key):
            if key not in self.state[p]:
                self.state[p][key] = {make}
            return self.state[p][key]

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    exp_avg = self._buffer(p, "exp_avg")
                    update = exp_avg * beta1 + p.grad * (1 - beta1)
                    p.add_(update.sign(), alpha=-group["lr"])
                    exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
"""

STATE_ALIAS = """
    import torch
    import torch.optim as optim


    class Shampoo(optim.Optimizer):
        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    for dim_id, dim in enumerate(p.grad.size()):
                        state["precond_{{}}".format(dim_id)] = {make}
                    self._precondition(p, state)
"""


def test_state_stored_without_a_device_is_reported() -> None:
    keyed = STATE_STORES.format(make="torch.randn(p.shape) * 0")
    aliased = STATE_ALIAS.format(make="1e-4 * torch.eye(dim)")
    assert _findings(keyed, "optim/lion.py") == [
        (
            12,
            "DL101",
            "`torch.randn(...)` creates a CPU tensor in `_buffer` that is kept as optimizer state "
            "(`self.state[p][key]`), which `step()` updates with `p` and its gradient on their device; "
            "pass `device=p.device`",
        )
    ]
    assert _findings(aliased, "optim/shampoo.py") == [
        (
            13,
            "DL101",
            "`torch.eye(...)` creates a CPU tensor in `step` that is kept as optimizer state "
            '(`state["precond_{}".format(dim_id)]`), which `step()` updates with `p` and its gradient on their '
            "device; pass `device=p.device`",
        )
    ]


def test_state_on_the_parameter_device_a_step_count_or_offloaded_is_clean() -> None:
    assert _findings(STATE_STORES.format(make="torch.zeros(p.shape, device=p.device)"), "optim/lion.py") == []
    assert _findings(STATE_STORES.format(make="torch.zeros(())"), "optim/lion.py") == []
    offloaded = STATE_ALIAS.format(make='torch.eye(dim, device="cpu", pin_memory=True)')
    assert _findings(offloaded, "optim/shampoo.py") == []
