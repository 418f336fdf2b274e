"""The parallelism rules (DL201-DL208): exact findings on one bad snippet each, silence on near-misses."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES
from fixture_markers import expected_findings, matches

from devicelint.checks.dataparallel_as_model_parallelism import DataParallelAsModelParallelism, split_intent
from devicelint.checks.dataparallel_attribute_without_module import DataParallelAttributeWithoutModule
from devicelint.checks.dataparallel_model_not_on_first_device import DataParallelModelNotOnFirstDevice
from devicelint.checks.dataparallel_prefer_ddp import DataParallelPreferDdp
from devicelint.checks.ddp_device_setup import DdpDeviceSetup
from devicelint.checks.model_parallel_activation_not_moved import ModelParallelActivationNotMoved
from devicelint.checks.removed_parallel_api import RemovedParallelApi
from devicelint.checks.wrapped_state_dict_prefix import WrappedStateDictPrefix
from devicelint.engine import EngineOptions, lint_source
from devicelint.project.index import ProjectIndex
from devicelint.registry import all_rules

DL2 = tuple(rule for rule in all_rules() if rule.code.startswith("DL2"))
EXAMPLE = FIXTURES / "dp_model_parallel_example"

SPLIT_CLASS = """import torch.nn as nn
from torch.nn import DataParallel as DP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8).to("cuda:0")
        self.dec = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x):
        return self.dec(self.enc(x.to("cuda:0")).to("cuda:1"))


"""


def lint(source: str, *rules, torch_version: str | None = None):  # type: ignore[no-untyped-def]
    options = EngineOptions(rules=tuple(rules) or DL2, torch_version=torch_version)
    return lint_source(source, "x.py", options).findings


def one(source: str, rule) -> tuple[int, int, str, str]:  # type: ignore[no-untyped-def]
    findings = lint(source, rule)
    assert len(findings) == 1, [f.message for f in findings]
    f = findings[0]
    return f.line, f.column, f.code, f.message


# ---------------------------------------------------------------------------- DL201


def test_dl201_split_class_wrapped_by_alias() -> None:
    source = SPLIT_CLASS + "model = DP(Net(), device_ids=[0, 1])\n"
    assert one(source, DataParallelAsModelParallelism) == (
        15,
        9,
        "DL201",
        "`DP(Net(), device_ids=[0, 1])` wraps `Net()`, whose `enc` is on cuda:0 and `dec` on cuda:1: "
        "DataParallel does not split layers across GPUs, it copies the whole model to every GPU in "
        "`device_ids` and splits the batch, and it needs every parameter on `device_ids[0]`; drop "
        "DataParallel and move activations between stages by hand, or use "
        "`torch.distributed.pipelining` or FSDP for a model too big for one GPU",
    )


def test_dl201_ddp_with_device_ids_over_split_model() -> None:
    source = (
        SPLIT_CLASS.replace("from torch.nn import DataParallel as DP", "import torch.nn.parallel as tp")
        + "def wrap(rank):\n    net = Net()\n    return tp.DistributedDataParallel(net, device_ids=[rank])\n"
    )
    line, _, code, message = one(source, DataParallelAsModelParallelism)
    assert (line, code) == (17, "DL201")
    assert message.startswith("`tp.DistributedDataParallel(net, device_ids=[rank])` passes `device_ids` for `net`")


def test_dl201_silent_on_ddp_without_device_ids_and_plain_dp() -> None:
    source = SPLIT_CLASS.replace(
        "from torch.nn import DataParallel as DP", "from torch.nn.parallel import DistributedDataParallel as DDP"
    )
    source += "ddp = DDP(Net())\nplain = nn.DataParallel(nn.Linear(2, 2).cuda())  # replicate on every GPU\n"
    assert lint(source, DataParallelAsModelParallelism) == ()


@pytest.mark.parametrize(
    "comment, fires",
    [
        ("DataParallel distributes the layers of the model across the specified GPUs", True),
        ("split the model across 2 GPUs", True),
        ("model parallel over all GPUs", True),
        ("DataParallel splits the batch across GPUs", False),
        ("data parallelism, not model parallelism", False),
        ("use all GPUs", False),
        ("distribute the model over the GPUs, one replica each", False),
    ],
)
def test_dl201_comment_intent(comment: str, fires: bool) -> None:
    assert (split_intent(comment) is not None) is fires


# ---------------------------------------------------------------------------- DL202


def test_dl202_model_on_another_gpu() -> None:
    source = (
        "import torch.nn as nn\n\nmodel = nn.Linear(8, 8).cuda(1)\nmodel = nn.DataParallel(model, device_ids=[0, 1])\n"
    )
    assert one(source, DataParallelModelNotOnFirstDevice) == (
        4,
        9,
        "DL202",
        "`nn.DataParallel(model, device_ids=[0, 1])` needs the model on cuda:0 (`device_ids[0]`), but "
        '`model` is moved to cuda:1; move it with `model.to("cuda:0")` before wrapping it',
    )


def test_dl202_never_moved_and_current_device() -> None:
    source = (
        "import torch.nn as nn\n\n\ndef run(batch):\n    model = nn.Linear(8, 8)\n"
        "    model = nn.DataParallel(model, device_ids=[0, 1])\n    return model(batch)\n\n\n"
        "def run2(batch):\n    model = nn.Linear(8, 8).cuda()\n"
        "    model = nn.DataParallel(model, device_ids=[1, 2])\n    return model(batch)\n"
    )
    findings = lint(source, DataParallelModelNotOnFirstDevice)
    assert [(f.line, f.code) for f in findings] == [(6, "DL202"), (12, "DL202")]
    assert '`model` is never moved off the CPU; call `model.to("cuda:0")`' in findings[0].message
    assert "current device, cuda:0" in findings[1].message


def test_dl202_silent_when_on_first_device() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n\n\ndef run(batch, device, gpus):\n"
        '    a = nn.DataParallel(nn.Linear(8, 8).to("cuda:1"), device_ids=[1, 2])\n'
        "    b = nn.DataParallel(nn.Linear(8, 8).cuda(), device_ids=[0, 1])\n"
        "    c = nn.DataParallel(nn.Linear(8, 8).to(device), device_ids=gpus)\n"
        "    d = nn.DataParallel(nn.Linear(8, 8), device_ids=[0, 1]).cuda()\n"
        "    return a(batch), b(batch), c(batch), d(batch)\n"
    )
    assert lint(source, DataParallelModelNotOnFirstDevice) == ()


# ---------------------------------------------------------------------------- DL203


def test_dl203_read_through_wrapper() -> None:
    source = "import torch.nn as nn\n\n\ndef run(model, batch):\n    model = nn.DataParallel(model)\n    return model.generate(batch)\n"
    assert one(source, DataParallelAttributeWithoutModule) == (
        6,
        12,
        "DL203",
        "`model.generate` reads `generate` from the `DataParallel` wrapper `model`, which does not "
        "forward its model's attributes (AttributeError); use `model.module.generate`",
    )


def test_dl203_replica_write_in_forward() -> None:
    source = (
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
        "        self.last = x\n        return x\n\n\nmodel = nn.DataParallel(Net())\n"
    )
    assert one(source, DataParallelAttributeWithoutModule) == (
        6,
        9,
        "DL203",
        "`self.last` is assigned in `Net.forward`, which `nn.DataParallel` runs on per-GPU replicas "
        "rebuilt every step, so the write is lost; return the value from `forward` (or keep it in a "
        "buffer updated in place)",
    )


def test_dl203_silent_on_module_and_nn_module_attributes() -> None:
    source = (
        "import torch.nn.parallel as P\n\n\ndef run(model, rank):\n"
        "    model = P.DistributedDataParallel(model, device_ids=[rank])\n"
        "    model.train()\n    model.to(rank)\n    opt = model.parameters()\n"
        "    sd = model.state_dict()\n    return model.module.generate, opt, sd\n"
    )
    assert lint(source, DataParallelAttributeWithoutModule) == ()


# ---------------------------------------------------------------------------- DL204


def test_dl204_wrapper_checkpoint_into_bare_model() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n\n\ndef train():\n"
        '    model = nn.DataParallel(nn.Linear(8, 8)).cuda()\n    torch.save(model.state_dict(), "best.pt")\n\n\n'
        "def evaluate():\n    net = nn.Linear(8, 8)\n"
        '    net.load_state_dict(torch.load("best.pt", map_location="cpu"))\n'
    )
    line, column, code, message = one(source, WrappedStateDictPrefix)
    assert (line, column, code) == (12, 5, "DL204")
    assert "loads into the bare model `net`" in message and "`DataParallel` wrapper `model`" in message
    assert "save `model.module.state_dict()` instead" in message


def test_dl204_silent_when_saving_module_or_stripping_prefix() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n\n\ndef train():\n"
        '    model = nn.DataParallel(nn.Linear(8, 8)).cuda()\n    torch.save(model.module.state_dict(), "best.pt")\n\n\n'
        "def evaluate():\n    net = nn.Linear(8, 8)\n"
        '    net.load_state_dict(torch.load("best.pt", map_location="cpu"))\n'
    )
    assert lint(source, WrappedStateDictPrefix) == ()
    stripped = source.replace("model.module.state_dict()", "model.state_dict()") + (
        '    sd = {k.replace("module.", ""): v for k, v in {}.items()}\n'
    )
    assert lint(stripped, WrappedStateDictPrefix) == ()


# ---------------------------------------------------------------------------- DL205


def test_dl205_cpu_model_with_device_ids() -> None:
    source = (
        "import torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        "def setup(local_rank):\n    model = nn.Linear(8, 8)\n    return DDP(model, device_ids=[local_rank])\n"
    )
    assert one(source, DdpDeviceSetup) == (
        7,
        12,
        "DL205",
        "`DDP(model, device_ids=[local_rank])` wraps `model`, which is still on the CPU, while "
        "`device_ids` asks for a GPU module; move it first with `model.to(local_rank)`",
    )


def test_dl205_every_rank_on_gpu0_unless_set_device() -> None:
    source = (
        "import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        "def setup():\n    model = nn.Linear(8, 8).cuda()\n    return DDP(model)\n"
    )
    line, _, code, message = one(source, DdpDeviceSetup)
    assert (line, code) == (8, "DL205")
    assert "cuda:0 in every process since nothing calls `torch.cuda.set_device`" in message
    fixed = source.replace("    model = nn.Linear", "    torch.cuda.set_device(3)\n    model = nn.Linear")
    assert lint(fixed, DdpDeviceSetup, torch_version="2.4") == ()
    # Without `device_ids`, torch before 1.9 spread each process's DDP over every visible GPU.
    old_torch = lint(fixed, DdpDeviceSetup, torch_version="1.8")
    assert [f.line for f in old_torch] == [9] and "before torch 1.9" in old_torch[0].message
    assert lint(fixed.replace("DDP(model)", "DDP(model, device_ids=[3])"), DdpDeviceSetup) == ()


def test_dl205_set_device_under_the_same_condition_as_the_wrapper_counts() -> None:
    source = (
        "import torch\nimport torch.distributed as dist\nimport torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        "def main(args):\n"
        "    if args.distributed:\n"
        "        torch.cuda.set_device(args.local_rank)\n"
        '        dist.init_process_group("nccl")\n'
        "    model = nn.Linear(8, 8).cuda()\n"
        "    if args.distributed:\n"
        "        model = DDP(model)\n"
        "    return model\n"
    )
    assert lint(source, DdpDeviceSetup, torch_version="2.4") == ()
    # under another condition the branches are not taken together
    other = source.replace("    if args.distributed:\n        model = DDP", "    if args.wrap:\n        model = DDP")
    assert [f.line for f in lint(other, DdpDeviceSetup, torch_version="2.4")] == [13]


def test_dl205_silent_on_rank_device_and_cpu_gloo() -> None:
    source = (
        "import torch.distributed as dist\nimport torch.nn as nn\nimport torch.nn.parallel as par\n\n\n"
        "def gpu(rank):\n    model = nn.Linear(8, 8).to(rank)\n    return par.DistributedDataParallel(model, device_ids=[rank])\n\n\n"
        'def cpu():\n    dist.init_process_group("gloo")\n    return par.DistributedDataParallel(nn.Linear(8, 8))\n'
    )
    assert lint(source, DdpDeviceSetup) == ()


# ---------------------------------------------------------------------------- DL206


def test_dl206_pipe_import() -> None:
    source = "import torch\nfrom torch.distributed.pipeline.sync import Pipe\n"
    assert one(source, RemovedParallelApi) == (
        2,
        1,
        "DL206",
        "`torch.distributed.pipeline.sync.Pipe` was removed in torch 2.4; use `torch.distributed.pipelining` "
        "(`pipeline(...)`, `PipelineStage`, `ScheduleGPipe`)",
    )


def test_dl206_torch_version_decides() -> None:
    source = "import torch\nfrom torch.distributed.pipeline.sync import Pipe\n"
    assert RemovedParallelApi.torch_versions == ">=2.4"
    assert lint(source, RemovedParallelApi, torch_version="2.3") == ()
    assert len(lint(source, RemovedParallelApi, torch_version="2.4")) == 1


def test_dl206_silent_on_pipelining_and_guarded_import() -> None:
    source = (
        "import torch\nfrom torch.distributed.pipelining import pipeline\n"
        "try:\n    from torch.distributed.pipeline.sync import Pipe\nexcept ImportError:\n    Pipe = None\n"
    )
    assert lint(source, RemovedParallelApi) == ()


# ---------------------------------------------------------------------------- DL207


def test_dl207_any_data_parallel_off_by_default() -> None:
    source = "import torch\n\n\ndef wrap(model):\n    return torch.nn.DataParallel(model)\n"
    assert DataParallelPreferDdp.default_enabled is False
    assert DataParallelPreferDdp.severity == "warning"
    assert one(source, DataParallelPreferDdp) == (
        5,
        12,
        "DL207",
        "`torch.nn.DataParallel(model)` uses DataParallel, which PyTorch recommends replacing with "
        "`DistributedDataParallel` even on one machine; launch one process per GPU with `torchrun` and "
        "wrap the model in `DistributedDataParallel(model, device_ids=[local_rank])`",
    )


def test_dl207_silent_on_ddp() -> None:
    source = "from torch.nn.parallel import DistributedDataParallel as DataParallel\n\nm = DataParallel(None)\n"
    assert lint(source, DataParallelPreferDdp) == ()


# ---------------------------------------------------------------------------- DL208


def test_dl208_activation_not_moved() -> None:
    source = SPLIT_CLASS.replace('.to("cuda:0")).to("cuda:1"))', '.to("cuda:0")))')
    assert one(source, ModelParallelActivationNotMoved) == (
        12,
        25,
        "DL208",
        '`self.enc(x.to("cuda:0"))` is on cuda:0 (the output of `self.enc`) but `self.dec` is on cuda:1; '
        'move it with `self.enc(x.to("cuda:0")).to("cuda:1")` first',
    )


def test_dl208_silent_when_moved() -> None:
    assert lint(SPLIT_CLASS, ModelParallelActivationNotMoved) == ()


# ---------------------------------------------------------------------------- the example


@pytest.mark.parametrize("path", sorted(EXAMPLE.glob("*.py")), ids=lambda p: p.name)
def test_example_markers(path: Path) -> None:
    # with the project index, as the CLI runs it: train.py wraps model.py's class
    view = ProjectIndex(EXAMPLE).view(path)
    result = lint_source(path.read_bytes(), str(path), EngineOptions(rules=tuple(all_rules()), project=view))
    missing, unexpected = matches(expected_findings(path), result.findings)
    assert not missing and not unexpected, (missing, unexpected)


def test_example_shows_the_three_mistakes() -> None:
    codes = set()
    for path in EXAMPLE.glob("*.py"):
        codes |= {code for _, code, _ in expected_findings(path)}
    # hand-split model wrapped (DL201) and crashing (DL208), state lost (DL203), checkpoint (DL204)
    assert {"DL201", "DL203", "DL204", "DL208"} <= codes


# ---------------------------------------------------------------------------- follow-ups


def test_dl203_other_methods_of_a_wrapping_class() -> None:
    source = (
        "import torch.nn as nn\n\n\nclass Trainer:\n    def __init__(self, net):\n"
        "        self.G = nn.DataParallel(net, device_ids=[0, 1]).cuda(0)\n\n"
        "    def renew(self):\n        self.G = self.G.cuda()\n\n"
        "    def grow(self):\n        self.G.grow_network(3)\n        self.G.module.flush()\n"
    )
    assert one(source, DataParallelAttributeWithoutModule) == (
        12,
        9,
        "DL203",
        "`self.G.grow_network` reads `grow_network` from the `DataParallel` wrapper `self.G`, which "
        "does not forward its model's attributes (AttributeError); use `self.G.module.grow_network`",
    )
    rebound = source.replace("self.G = self.G.cuda()", "self.G = make()")
    assert lint(rebound, DataParallelAttributeWithoutModule) == ()


def test_dl203_function_the_wrapper_is_passed_to() -> None:
    source = (
        "import torch.nn as nn\n\n\ndef train(net, data):\n    return net.init_hidden(len(data))\n\n\n"
        "def main(net, data):\n    net = nn.DataParallel(net)\n    return train(net, data)\n"
    )
    line, _, code, message = one(source, DataParallelAttributeWithoutModule)
    assert (line, code) == (5, "DL203")
    assert message == (
        "`net.init_hidden` reads `init_hidden` from the `DataParallel` wrapper that `main` passes to "
        "`train` as `net`, which does not forward its model's attributes (AttributeError); use "
        "`net.module.init_hidden`, or pass `net.module`"
    )


def test_dl203_unwrapped_on_the_spot_is_not_a_wrapper() -> None:
    source = (
        "import torch.nn as nn\n\nmodel = nn.DataParallel(nn.Linear(2, 2), device_ids=[0]).module\nw = model.weight\n"
    )
    assert lint(source, DataParallelAttributeWithoutModule) == ()


def test_dl202_device_chosen_by_availability() -> None:
    source = (
        'import torch\nimport torch.nn as nn\n\ndevice = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")\n\n\n'
        "def run(batch):\n    model = nn.Linear(8, 8).to(device)\n"
        "    model = nn.DataParallel(model, device_ids=[1, 2])\n    return model(batch)\n"
    )
    line, _, code, message = one(source, DataParallelModelNotOnFirstDevice)
    assert (line, code) == (9, "DL202")
    assert "`model` is moved to cuda:0" in message
    assert lint(source.replace("[1, 2]", "[0, 1]"), DataParallelModelNotOnFirstDevice) == ()


def test_dl206_version_gated_import_is_silent() -> None:
    source = 'import torch\n\nif torch.__version__ < "2.4":\n    from torch.distributed.pipeline.sync import Pipe\n'
    assert lint(source, RemovedParallelApi) == ()


def test_dl201_device_map_auto_then_data_parallel() -> None:
    source = (
        "import torch.nn as nn\nfrom transformers import AutoModel\n\n"
        'model = AutoModel.from_pretrained("bert-large", device_map="auto")\nmodel = nn.DataParallel(model)\n'
    )
    line, _, code, message = one(source, DataParallelAsModelParallelism)
    assert (line, code) == (5, "DL201")
    assert message.startswith(
        '`nn.DataParallel(model)` wraps a model that `device_map="auto"` spreads over the visible GPUs: '
    )
    single = source.replace('device_map="auto"', 'device_map={"": 0}')
    assert lint(single, DataParallelAsModelParallelism) == ()
