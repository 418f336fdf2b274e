"""Generality, forty-first stop (the lead's own changes): a module moved to the accelerator under
any device test (a user's flag as well as an availability check) is on the accelerator after the
`if`, so what no path moves and the module meets is reported, and nothing is certainly on the
device on the branch the test takes without one; groups of layers added to a plain container;
nested functions reading their enclosing function's places; the move of a spread loader batch;
a thrown-away move of an item just made a tensor."""

from __future__ import annotations

import textwrap

import pytest

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import REGISTRY, all_rules


def _findings(source: str, code: str) -> list[tuple[str, int, str]]:
    all_rules()
    result = lint_source(textwrap.dedent(source), "case.py", EngineOptions(rules=(REGISTRY[code],)))
    return [(f.code, f.line, f.message) for f in result.findings]


_UNMOVED_UNDER_A_FLAG = [
    # a built module moved in place under an index flag; a helper runs the unmoved batches
    """
    import torch
    import torch.nn as nn

    def evaluate(net, loader):
        for x, y in loader:
            out = net(x)
            print(out.sum().item())

    def main(args, loader):
        net = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
        if args.gpu_id >= 0:
            net.cuda(args.gpu_id)
        evaluate(net, loader)
    """,
    # a checkpoint's model (of no known class) rebound under a boolean option, the loop inline
    """
    import torch

    def run(opts, loader):
        model = torch.load(opts.path, map_location="cpu")["net"]
        if opts.use_gpu:
            model = model.to("cuda")
        model.eval()
        for x, y in loader:
            out = model(x)
            print(out.sum().item())
    """,
    # the flag in an else branch, the CPU explicitly on the other path
    """
    import torch.nn as nn

    def fit(cfg, loader):
        model = nn.Linear(8, 4)
        if cfg.cpu_only:
            model = model.cpu()
        else:
            model = model.cuda()
        for x, y in loader:
            out = model(x)
            print(out.sum().item())
    """,
]


@pytest.mark.parametrize("source", _UNMOVED_UNDER_A_FLAG)
def test_batches_no_path_moves_meet_a_module_moved_under_a_flag(source: str) -> None:
    found = _findings(source, "DL105")
    assert [(code, "`x` comes from a DataLoader" in message) for code, _, message in found] == [("DL105", True)]
    line = next(n for n, text in enumerate(textwrap.dedent(source).splitlines(), 1) if "out = " in text)
    assert found[0][1] == line


_MOVED_ON_SOME_PATH = [
    # the same flag moves the batch
    """
    import torch.nn as nn

    def main(args, loader):
        net = nn.Linear(8, 4)
        if args.cuda:
            net.cuda()
        for x, y in loader:
            if args.cuda:
                x = x.cuda()
            print(net(x).sum().item())
    """,
    # another spelling of the flag moves it (the engine does not know they agree: quiet)
    """
    import torch.nn as nn

    def main(args, loader):
        use_gpu = args.gpu_id >= 0
        net = nn.Linear(8, 4)
        if args.gpu_id >= 0:
            net.cuda(args.gpu_id)
        for x, y in loader:
            if use_gpu:
                x = x.cuda(args.gpu_id)
            print(net(x).sum().item())
    """,
    # a flag that is not about the device moves nothing to it
    """
    import torch.nn as nn

    def main(args, loader):
        net = nn.Linear(8, 4)
        if args.verbose:
            net = net.train()
        for x, y in loader:
            print(net(x).sum().item())
    """,
]


@pytest.mark.parametrize("source", _MOVED_ON_SOME_PATH)
def test_a_batch_moved_on_any_path_or_a_module_left_alone_is_quiet(source: str) -> None:
    assert _findings(source, "DL105") == []


_GROUPS_IN_A_PLAIN_CONTAINER = [
    # pairs of layers appended to a plain list, unpacked in forward
    """
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.hids = []
            for n_in, n_out in zip(sizes, sizes[1:]):
                self.hids.append([nn.Linear(n_in, n_out), nn.ReLU()])

        def forward(self, x):
            for lin, act in self.hids:
                x = act(lin(x))
            return x
    """,
    # tuples of (conv, norm) written into a plain dict by key, a member of no known kind beside them
    """
    import torch.nn as nn

    def make_act(name):
        return getattr(nn, name)()

    class Backbone(nn.Module):
        def __init__(self, names, act):
            super().__init__()
            self.stages = {}
            for name in names:
                self.stages[name] = (nn.Conv2d(3, 3, 3), nn.BatchNorm2d(3), make_act(act))

        def forward(self, x):
            for conv, norm, act in self.stages.values():
                x = act(norm(conv(x)))
            return x
    """,
]


@pytest.mark.parametrize("source", _GROUPS_IN_A_PLAIN_CONTAINER)
def test_groups_of_layers_added_to_a_plain_container(source: str) -> None:
    all_rules()
    result = lint_source(textwrap.dedent(source), "case.py", EngineOptions(rules=(REGISTRY["DL103"],)))
    assert [(f.code, f.message.split(":")[0]) for f in result.findings] == [
        (
            "DL103",
            f"`self.{'hids' if 'hids' in source else 'stages'}` keeps submodules in a plain "
            f"{'list' if 'hids' in source else 'dict'}",
        )
    ]
    line = next(
        n for n, text in enumerate(textwrap.dedent(source).splitlines(), 1) if ".append(" in text or "] = (" in text
    )
    assert result.findings[0].line == line
    assert result.findings[0].fix is None  # each group needs its own ModuleList: no one-line fix


_GROUPS_REGISTERED_OR_PLAIN_DATA = [
    """
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.hids = nn.ModuleList()
            for n_in, n_out in zip(sizes, sizes[1:]):
                self.hids.append(nn.ModuleList([nn.Linear(n_in, n_out), nn.ReLU()]))

        def forward(self, x):
            for lin, act in self.hids:
                x = act(lin(x))
            return x
    """,
    """
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.body = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])
            self.specs = []
            for n_in, n_out in zip(sizes, sizes[1:]):
                self.specs.append([n_in, n_out, "relu"])

        def forward(self, x):
            return self.body(x)
    """,
]


@pytest.mark.parametrize("source", _GROUPS_REGISTERED_OR_PLAIN_DATA)
def test_registered_groups_and_groups_of_plain_data_are_quiet(source: str) -> None:
    assert _findings(source, "DL103") == []


_CLOSURES_READING_PLACED_NAMES = [
    # the indices moved in the enclosing attack, read by the nested objective it calls
    (
        "DL116",
        """
        import torch

        def attack(model, images, labels, device):
            labels = labels.to(device)

            def objective(x):
                one_hot = torch.eye(10)[labels]
                return (one_hot * x).sum()

            return objective(images)
        """,
        "one_hot = ",
    ),
    # an optimizer's closure, never called by the file itself: it reads the moved model and batch
    (
        "DL101",
        """
        import torch

        def fit(model, x, y, steps):
            model = model.cuda()
            x, y = x.cuda(), y.cuda()
            opt = torch.optim.LBFGS(model.parameters())

            def closure():
                opt.zero_grad()
                noise = torch.randn(x.shape[0], 1)
                loss = ((model(x) + noise - y) ** 2).mean()
                loss.backward()
                return loss

            for _ in range(steps):
                opt.step(closure)
        """,
        "noise = ",
    ),
]


@pytest.mark.parametrize(("code", "source", "marker"), _CLOSURES_READING_PLACED_NAMES)
def test_a_nested_function_reads_the_places_of_its_enclosing_names(code: str, source: str, marker: str) -> None:
    found = _findings(source, code)
    line = next(n for n, text in enumerate(textwrap.dedent(source).splitlines(), 1) if marker in text)
    assert [(c, n) for c, n, _ in found] == [(code, line)]


_CLOSURES_THAT_AGREE = [
    (
        "DL116",
        """
        import torch

        def attack(model, images, labels, device):
            labels = labels.to(device)

            def objective(x):
                one_hot = torch.eye(10, device=labels.device)[labels]
                return (one_hot * x).sum()

            return objective(images)
        """,
    ),
    (
        "DL101",
        """
        import torch

        def fit(model, x, y, steps):
            model = model.cuda()
            x, y = x.cuda(), y.cuda()
            opt = torch.optim.LBFGS(model.parameters())

            def closure():
                opt.zero_grad()
                noise = torch.randn(x.shape[0], 1, device=x.device)
                loss = ((model(x) + noise - y) ** 2).mean()
                loss.backward()
                return loss

            for _ in range(steps):
                opt.step(closure)
        """,
    ),
    # the enclosing function keeps everything on the host
    (
        "DL101",
        """
        import torch

        def fit(model, x, y, steps):
            opt = torch.optim.LBFGS(model.parameters())

            def closure():
                opt.zero_grad()
                noise = torch.randn(x.shape[0], 1)
                loss = ((model(x) + noise - y) ** 2).mean()
                loss.backward()
                return loss

            for _ in range(steps):
                opt.step(closure)
        """,
    ),
]


@pytest.mark.parametrize(("code", "source"), _CLOSURES_THAT_AGREE)
def test_closures_whose_tensors_agree_are_quiet(code: str, source: str) -> None:
    assert _findings(source, code) == []


@pytest.mark.parametrize(
    ("loop", "moved"),
    [
        # a loader's dict batch spread into the model: a plain dict has no `.to()`
        (
            "for batch in loader:\n        out = model(**batch)",
            'batch = {k: v.to("cuda") if hasattr(v, "to") else v for k, v in batch.items()}',
        ),
        # a tokenizer's encoding has one
        (
            'for texts in loader:\n        batch = tok(texts, return_tensors="pt")\n        out = model(**batch)',
            'batch = batch.to("cuda")',
        ),
    ],
)
def test_the_move_of_a_spread_batch_works_on_what_the_batch_is(loop: str, moved: str) -> None:
    source = (
        "def train(model, loader, tok, opt):\n"
        '    model.to("cuda")\n'
        f"    {loop}\n"
        "        out.loss.backward()\n"
        "        opt.step()\n"
    )
    all_rules()
    result = lint_source(source, "case.py", EngineOptions(rules=(REGISTRY["DL105"],)))
    (finding,) = result.findings
    assert finding.message.endswith(f"move it first: `{moved}`")
    assert finding.fix is not None and finding.fix.description == f"Move it first: `{moved}`"
    fixed = lint_source(source, "case.py", EngineOptions(rules=(REGISTRY["DL105"],), fix_mode="unsafe"))
    assert fixed.fixed_source is not None and f"        {moved}\n        out = model(**batch)" in fixed.fixed_source
    assert lint_source(fixed.fixed_source, "case.py", EngineOptions(rules=(REGISTRY["DL105"],))).findings == ()


_EVALUATION_UNDER_A_GPU_FLAG = """
import numpy as np
import torch
import torch.nn as nn

train_on_gpu = torch.cuda.is_available()
model = nn.Linear(4, 2)
if train_on_gpu:
    model.cuda()

for data, target in loader:
    if train_on_gpu:
        data, target = data.cuda(), target.cuda()
    _, pred = torch.max(model(data), 1)
    correct_tensor = pred.eq(target.view_as(pred))
    CONVERT
"""


@pytest.mark.parametrize(
    "convert",
    [
        "correct = correct_tensor.numpy() if not train_on_gpu else correct_tensor.cpu().numpy()",
        "correct = correct_tensor.cpu().numpy() if train_on_gpu else correct_tensor.numpy()",
        "if not train_on_gpu:\n        correct = correct_tensor.numpy()\n    else:\n        correct = correct_tensor.cpu().numpy()",
        "if args.cpu:\n        correct = correct_tensor.numpy()",
    ],
)
def test_numpy_on_the_branch_a_device_test_takes_without_a_device_is_quiet(convert: str) -> None:
    assert _findings(_EVALUATION_UNDER_A_GPU_FLAG.replace("CONVERT", convert), "DL108") == []


@pytest.mark.parametrize(
    "convert",
    [
        "correct = correct_tensor.numpy()",
        "correct = correct_tensor.numpy() if train_on_gpu else correct_tensor.cpu().numpy()",
    ],
)
def test_numpy_where_the_model_is_on_the_gpu_is_reported(convert: str) -> None:
    found = _findings(_EVALUATION_UNDER_A_GPU_FLAG.replace("CONVERT", convert), "DL108")
    assert [(code, line) for code, line, _ in found] == [("DL108", 16)]


@pytest.mark.parametrize(
    ("loop", "line"),
    [
        # a dict's items, keyed by a loop over names
        (
            'for key in ["ids", "mask"]:\n        parts[key] = torch.tensor(parts[key]).unsqueeze(0)\n'
            "        parts[key].to(device)",
            7,
        ),
        # a list's items, by index
        (
            "for i in range(len(parts)):\n        parts[i] = torch.from_numpy(parts[i]).float()\n"
            "        parts[i].cuda()",
            7,
        ),
    ],
)
def test_a_move_of_an_item_just_made_a_tensor_is_reported_when_thrown_away(loop: str, line: int) -> None:
    source = f"import torch\n\n\ndef prepare(parts, device):\n    {loop}\n    return parts\n"
    found = _findings(source, "DL104")
    assert [(code, n) for code, n, _ in found] == [("DL104", line)]
    assert "is not moved; assign it:" in found[0][2]


@pytest.mark.parametrize(
    "loop",
    [
        'for key in ["ids", "mask"]:\n        parts[key] = torch.tensor(parts[key])\n'
        "        parts[key] = parts[key].to(device)",
        # what the item holds is not known to be a tensor (a module moves in place)
        'for key in ["enc", "dec"]:\n        parts[key] = build(key)\n        parts[key].to(device)',
    ],
)
def test_an_item_assigned_its_move_or_of_no_known_kind_is_quiet(loop: str) -> None:
    source = f"import torch\n\n\ndef prepare(parts, device):\n    {loop}\n    return parts\n"
    assert _findings(source, "DL104") == []


def test_a_group_whose_modules_are_registered_by_hand_is_quiet() -> None:
    # detectron2's RegNet: each stage is registered with add_module, then kept with its name
    source = """
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, widths):
            super().__init__()
            self.stages_and_names = []
            for i, w in enumerate(widths):
                stage = nn.Linear(w, w)
                name = f"s{i}"
                self.add_module(name, stage)
                self.stages_and_names.append((stage, name))

        def forward(self, x):
            for stage, _ in self.stages_and_names:
                x = stage(x)
            return x
    """
    assert _findings(source, "DL103") == []
    unregistered = source.replace("                self.add_module(name, stage)\n", "")
    assert [code for code, _, _ in _findings(unregistered, "DL103")] == ["DL103"]
