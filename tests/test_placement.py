"""The placement analysis and the DL1xx rules: exact findings on bad snippets, silence on clean ones."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from devicelint.analysis.facts import file_facts
from devicelint.analysis.placement import file_placement
from devicelint.analysis.placement_facts import ACCELERATOR, CPU, DEVICE, FOLLOWS, MODULE, UNKNOWN
from devicelint.analysis.placement_values import NUMBER
from devicelint.context import FileContext
from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def _context(source: str) -> FileContext:
    source = textwrap.dedent(source)
    return FileContext(path="x.py", source=source, module=cst.parse_module(source))


def _function(ctx: FileContext, name: str) -> cst.FunctionDef:
    return next(f for f in ctx.index.of_type(cst.FunctionDef) if f.name.value == name)


def _findings(code: str, source: str):
    rule = find_rule(code)
    assert rule is not None
    result = lint_source(textwrap.dedent(source), "x.py", EngineOptions(rules=(rule,)))
    return [(f.code, f.line, f.column, f.message) for f in result.findings]


# -- the analysis ------------------------------------------------------------------------------


def test_facts_flow_through_assignments_moves_and_unpacking() -> None:
    ctx = _context(
        """
        import torch
        from torch import nn

        def train(model, loader, device):
            model.to(device)
            made = torch.zeros(3)
            placed = torch.zeros(3, device=device)
            followed = torch.ones(3).to(placed)
            for x, y in loader:
                x = x.to(device)
            explicit = torch.zeros(3).cpu()
            return made
        """
    )
    facts = file_facts(ctx).scope(_function(ctx, "train")).facts
    assert facts["made"].kind == CPU and facts["made"].factory == "torch.zeros"
    assert (facts["placed"].kind, facts["placed"].where) == (DEVICE, ACCELERATOR)
    assert facts["followed"].kind == DEVICE
    assert facts["model"].kind == MODULE and facts["model"].where == ACCELERATOR
    assert facts["placed"].device_expr == "device"  # the name a fix can pass as `device=`
    assert facts["explicit"].kind == CPU and not facts["explicit"].from_factory
    assert file_facts(ctx).scope(_function(ctx, "train")).returns.factory == "torch.zeros"


def test_forward_inputs_follow_and_unknown_stays_unknown() -> None:
    ctx = _context(
        """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x, n: int, flag=False):
                h = self.fc(x)
                return h + n
        """
    )
    forward = _function(ctx, "forward")
    placement = file_facts(ctx).scope(forward)
    assert placement.facts["x"].kind == DEVICE and placement.facts["x"].where == FOLLOWS
    assert placement.facts["h"].kind == DEVICE
    # an `int` parameter is a number (a 0-dim tensor of it may meet device tensors); an
    # unannotated one stays unknown
    assert placement.facts["n"] == NUMBER and "flag" not in placement.facts
    ret = next(iter(ctx.index.of_type(cst.Return)))
    assert file_facts(ctx).value(ret.value).kind == DEVICE
    number = next(iter(ctx.index.of_type(cst.Integer)))
    assert file_facts(ctx).value(number).kind == UNKNOWN


def test_meetings_are_memoised_per_file() -> None:
    ctx = _context("import torch\n")
    assert file_placement(ctx) is file_placement(ctx)


# -- DL101 -------------------------------------------------------------------------------------


def test_dl101_attention_mask() -> None:
    source = """
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.qk = nn.Linear(d, d)

        def forward(self, x):
            n = x.size(1)
            mask = torch.ones(n, n).tril()
            return self.qk(x).masked_fill(mask == 0, 0.0)
    """
    assert _findings("DL101", source) == [
        (
            "DL101",
            12,
            16,
            "`torch.ones(...)` creates a CPU tensor in `forward` that meets the device tensor `self.qk(x)` in "
            "`self.qk(x).masked_fill(mask == 0, 0.0)`; pass `device=x.device`",
        )
    ]


def test_dl101_silent_on_placed_and_moved_tensors() -> None:
    source = """
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.qk = nn.Linear(d, d)

        def forward(self, x):
            n = x.size(1)
            a = torch.ones(n, n, device=x.device).tril()
            b = torch.zeros(n).to(x)
            c = torch.tensor(2.0)
            d = x.new_zeros(n)
            idx = torch.arange(n)
            return self.qk(x).masked_fill(a == 0, 0.0) + b * c + d + x[:, idx].sum()
    """
    assert _findings("DL101", source) == []


def test_dl101_constant_factory_suggests_a_buffer_and_numpy_arrays_are_moved() -> None:
    source = """
    import numpy as np
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(16, 4)

        def forward(self, x):
            table = torch.from_numpy(np.ones(4, dtype=np.float32))
            return self.emb(torch.arange(16)) * table
    """
    assert _findings("DL101", source) == [
        (
            "DL101",
            12,
            17,
            "`torch.from_numpy(...)` creates a CPU tensor in `forward` that meets the device tensor "
            "`self.emb(torch.arange(16))` in `self.emb(torch.arange(16)) * table`; move it with "
            "`.to(next(self.parameters()).device)`",
        ),
        (
            "DL101",
            13,
            25,
            "`torch.arange(...)` creates a CPU tensor in `forward` that is passed to the module `self.emb`, which "
            "lives on the model's device; pass `device=next(self.parameters()).device` or register it as a buffer "
            "in `__init__`",
        ),
    ]


# -- DL102 -------------------------------------------------------------------------------------


def test_dl102_plain_tensor_attribute() -> None:
    source = """
    import torch
    from torch import nn

    class PE(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.pe = torch.zeros(512, d)

        def forward(self, x):
            return x + self.pe[: x.size(1)]
    """
    assert _findings("DL102", source) == [
        (
            "DL102",
            8,
            9,
            "`self.pe` holds a CPU tensor that is not a parameter or buffer: `model.to(device)` never moves it "
            'and `state_dict()` never saves it; use `self.register_buffer("pe", ...)` (or `nn.Parameter` if it is trained)',
        )
    ]


def test_dl102_silent_on_buffers_and_host_reads() -> None:
    source = """
    import torch
    from torch import nn

    class PE(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.register_buffer("pe", torch.zeros(512, d))
            self.sizes = torch.tensor([1, 2, 3])

        def forward(self, x):
            return x + self.pe[: x.size(1)] + len(self.sizes) + self.sizes.tolist()[0]
    """
    assert _findings("DL102", source) == []


# -- DL103 -------------------------------------------------------------------------------------


def test_dl103_list_of_modules() -> None:
    source = """
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(4, 4) for _ in range(3)]
    """
    assert _findings("DL103", source) == [
        (
            "DL103",
            7,
            23,
            "`self.layers` keeps submodules in a plain list: `model.to(device)` never moves them, `state_dict()` "
            "never saves them and `parameters()` skips them; use `nn.ModuleList`",
        )
    ]


def test_dl103_silent_on_module_list_and_plain_values() -> None:
    source = """
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
            self.sizes = [4, 4, 4]
            parts = [nn.Linear(4, 4)]
            self.seq = nn.Sequential(*parts)
    """
    assert _findings("DL103", source) == []


# -- DL104 -------------------------------------------------------------------------------------


def test_dl104_discarded_move() -> None:
    source = """
    import torch

    def f(device):
        mask = torch.ones(3)
        mask.to(device)
        return mask
    """
    assert _findings("DL104", source) == [
        (
            "DL104",
            6,
            5,
            "`mask.to(device)` returns a new tensor that is thrown away, so `mask` is not moved; assign it: "
            "`mask = mask.to(device)`",
        )
    ]


def test_dl104_fix_assigns_back() -> None:
    rule = find_rule("DL104")
    source = "import torch\n\ndef f(d):\n    m = torch.ones(3)\n    m.to(d)\n    return m\n"
    fixed = lint_source(source, "x.py", EngineOptions(rules=(rule,), fix_mode="unsafe")).fixed_source
    assert fixed == source.replace("    m.to(d)\n", "    m = m.to(d)\n")


def test_dl104_silent_on_modules_and_unknown_receivers() -> None:
    source = """
    import torch
    from torch import nn

    def f(model, batch, device):
        model.to(device)
        nn.Linear(2, 2).cuda()
        batch.to(device)
    """
    assert _findings("DL104", source) == []


# -- DL105 -------------------------------------------------------------------------------------


def test_dl105_unmoved_batch() -> None:
    source = """
    def train(model, loader, device):
        model.to(device)
        for x, y in loader:
            out = model(x)
    """
    assert _findings("DL105", source) == [
        (
            "DL105",
            5,
            21,
            "`x` comes from a DataLoader and is still on the CPU, but `model` was moved to the device; "
            "move it first: `x = x.to(device)`",
        )
    ]


def test_dl105_silent_when_moved_or_model_not_moved() -> None:
    source = """
    def train(model, loader, device):
        model.to(device)
        for x, y in loader:
            x = x.to(device)
            out = model(x)

    def infer(model, loader):
        for x, y in loader:
            model(x)
    """
    assert _findings("DL105", source) == []


def test_dl105_silent_for_gpu_datasets_and_custom_loaders() -> None:
    source = """
    from torch.utils.data import DataLoader, TensorDataset

    def train(model, X, y, device):
        model.to(device)
        for xb, yb in DataLoader(TensorDataset(X.to(device), y.to(device))):
            model(xb)

    class DeviceDataLoader:
        pass

    def fit(model, train_loader, device):
        model.to(device)
        for xb, yb in train_loader:
            model(xb)
    """
    assert _findings("DL105", source) == []


# -- DL106 -------------------------------------------------------------------------------------


def test_dl106_cpu_class_weight() -> None:
    source = """
    import torch
    from torch import nn

    def build(model, device):
        model.to(device)
        loss = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0]))
        return loss
    """
    assert _findings("DL106", source) == [
        (
            "DL106",
            7,
            39,
            "`nn.CrossEntropyLoss` gets a CPU `weight` tensor and `loss` is never moved, while `model` is: the loss "
            "fails on GPU logits; pass `device=` to the weight or use `loss = nn.CrossEntropyLoss(...).to(device)`",
        )
    ]


def test_dl106_silent_when_loss_moved() -> None:
    source = """
    import torch
    from torch import nn

    def build(model, device):
        model.to(device)
        loss = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0]))
        loss.to(device)
        return loss
    """
    assert _findings("DL106", source) == []


# -- DL107 -------------------------------------------------------------------------------------


def test_dl107_cuda_in_forward() -> None:
    source = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def forward(self, x):
            return x + torch.ones(3, device="cuda")
    """
    assert _findings("DL107", source) == [
        (
            "DL107",
            7,
            41,
            '`device="cuda"` hard-codes CUDA in `forward`: it breaks CPU-only runs, other GPUs (`cuda:1`, DDP '
            "ranks) and MPS; use the input's device (`next(self.parameters()).device`)",
        )
    ]


def test_dl107_silent_under_device_check_and_in_scripts() -> None:
    guarded = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def forward(self, x):
            if torch.cuda.is_available():
                x = x.cuda()
            return x
    """
    script = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def forward(self, x):
            return x.cuda()

    if __name__ == "__main__":
        Net()
    """
    assert _findings("DL107", guarded) == []
    assert _findings("DL107", script) == []


# -- DL108 -------------------------------------------------------------------------------------


def test_dl108_numpy_on_model_output() -> None:
    source = """
    def predict(model, x, device):
        model.to(device)
        return model(x.to(device)).numpy()
    """
    assert _findings("DL108", source) == [
        (
            "DL108",
            4,
            12,
            "`model(x.to(device)).numpy()` converts a tensor that is on the device: it raises `TypeError: can't "
            "convert cuda:0 device type tensor to numpy`; call `.cpu()` first: `model(x.to(device)).cpu().numpy()`",
        )
    ]


def test_dl108_silent_after_cpu() -> None:
    source = """
    def predict(model, x, device):
        model.to(device)
        return model(x.to(device)).cpu().numpy(), x.numpy()
    """
    assert _findings("DL108", source) == []


# -- DL109 -------------------------------------------------------------------------------------


def test_dl109_cuda_in_getitem() -> None:
    source = """
    import torch
    from torch.utils.data import Dataset

    class D(Dataset):
        def __getitem__(self, i):
            return torch.tensor([i]).cuda()
    """
    assert _findings("DL109", source) == [
        (
            "DL109",
            7,
            16,
            "`torch.tensor([i]).cuda()` puts a tensor on the GPU in `D.__getitem__`; with `num_workers > 0` this "
            'fails ("Cannot re-initialize CUDA in forked subprocess"); return CPU tensors and move batches in the '
            "training loop",
        )
    ]


def test_dl109_silent_on_cpu_dataset() -> None:
    source = """
    import torch
    from torch.utils.data import Dataset

    class D(Dataset):
        def __getitem__(self, i):
            return torch.tensor([i])

    def step(x):
        return x.cuda()
    """
    assert _findings("DL109", source) == []


# -- DL110 -------------------------------------------------------------------------------------


def test_dl110_global_cuda_default() -> None:
    source = """
    import torch
    torch.set_default_device("cuda")
    """
    assert _findings("DL110", source) == [
        (
            "DL110",
            3,
            1,
            '`torch.set_default_device("cuda")` makes every new tensor a GPU tensor, which breaks shuffling '
            "DataLoaders, CPU generators and worker processes; create tensors and models on an explicit `device` instead",
        )
    ]


def test_dl110_silent_on_cpu_default_and_in_functions() -> None:
    source = """
    import torch
    torch.set_default_device("cpu")

    def f():
        torch.set_default_device("cuda")
    """
    assert _findings("DL110", source) == []


# -- DL111 -------------------------------------------------------------------------------------


def test_dl111_state_loaded_before_move() -> None:
    source = """
    import torch

    def resume(model, state, device):
        opt = torch.optim.Adam(model.parameters())
        opt.load_state_dict(state)
        model.to(device)
    """
    assert _findings("DL111", source) == [
        (
            "DL111",
            6,
            5,
            "`opt.load_state_dict(state)` loads the optimizer state while `model` is still on the CPU, so the state "
            "stays there after `model.to(device)`; move the model before building the optimizer and loading its state",
        )
    ]


def test_dl111_silent_when_moved_first() -> None:
    source = """
    import torch

    def resume(model, state, device):
        model.to(device)
        opt = torch.optim.Adam(model.parameters())
        opt.load_state_dict(state)
    """
    assert _findings("DL111", source) == []


@pytest.mark.parametrize("code", [f"DL1{n:02d}" for n in range(1, 12)])
def test_every_rule_is_registered(code: str) -> None:
    rule = find_rule(code)
    assert rule is not None and rule.code == code


def test_long_chains_of_helpers_do_not_exhaust_the_stack() -> None:
    source = "import torch\n" + "".join(f"def f{i}(x):\n    return f{i + 1}(x)\n" for i in range(300))
    source += "def f300(x):\n    return torch.zeros(3)\n"
    rules = tuple(find_rule(f"DL1{n:02d}") for n in range(1, 12))
    result = lint_source(source, "x.py", EngineOptions(rules=rules))  # type: ignore[arg-type]
    assert result.findings == ()


def test_numpy_data_makes_a_cpu_tensor_and_host_copies_stay_host_data() -> None:
    found = _findings(
        "DL101",
        """
        import numpy as np
        import torch
        import torch.nn.functional as F

        def train(model, loader, labels, optimizer):
            model = model.to("cuda")
            weights = torch.tensor(1.0 / np.bincount(labels), dtype=torch.float)
            for x, y in loader:
                x, y = x.to("cuda"), y.to("cuda")
                loss = F.cross_entropy(model(x), y, weight=weights)
                loss.backward()
    """,
    )
    assert [(code, line) for code, line, _, _ in found] == [("DL101", 8)]
    ctx = _context("""
        import numpy as np
        import torch

        def f(t, data):
            a = t.cpu().numpy()
            b = t.cpu().tolist()
            c = np.stack(data) * 2
            return torch.tensor(c)
    """)
    facts = file_placement(ctx).scopes[id(_function(ctx, "f"))].facts
    assert {name: facts[name].where for name in "abc"} == {"a": "data", "b": "data", "c": "data"}


def test_a_helper_returning_its_argument_on_one_device_path_is_not_a_cpu_source() -> None:
    # detectron2's export `to_device`: `return t` when already there, a copy op otherwise
    assert (
        _findings(
            "DL101",
            """
        import numpy as np
        import torch
        import torch.nn.functional as F

        def to_device(t, device_str):
            src, dst = t.device, torch.device(device_str)
            if src == dst:
                return t
            elif src.type == "cpu" and dst.type == "cuda":
                return torch.ops._caffe2.CopyCPUToGPU(t)
            raise RuntimeError("unsupported")

        def upsample(x, dim):
            kernel = np.zeros((dim, dim, 4, 4), dtype=np.float32)
            return F.conv_transpose2d(x, weight=to_device(torch.Tensor(kernel), x.device), stride=2)

        def run(model, x):
            return upsample(model.cuda()(x.cuda()), 8)
    """,
        )
        == []
    )
