"""The one placement API (`analysis.facts.FileFacts`): what it answers for the shapes the
rules depend on, and the lattice's join."""

from __future__ import annotations

import textwrap

import libcst as cst

from devicelint.analysis.facts import Place, file_facts
from devicelint.analysis.placement_facts import CPU, DEVICE, UNKNOWN_FACT, Fact
from devicelint.analysis.placement_values import join
from devicelint.context import FileContext


def _context(source: str) -> FileContext:
    source = textwrap.dedent(source)
    return FileContext(path="x.py", source=source, module=cst.parse_module(source))


def _by_target(source: str, read):  # type: ignore[no-untyped-def]
    """`read(facts, value)` for every assignment target `name = ...` at its own statement,
    where it is not None."""
    ctx = _context(source)
    facts = file_facts(ctx)
    out = {}
    for assign in ctx.index.of_type(cst.Assign):
        target = assign.targets[0].target
        if isinstance(target, cst.Name):
            found = read(facts, assign.value)
            if found is not None:
                out[target.value] = found
    return out


def _places(source: str) -> dict[str, Place]:
    return _by_target(source, lambda facts, value: facts.place_of(value))


def test_one_answer_for_the_loop_that_two_models_used_to_disagree_on() -> None:
    places = _places(
        """
        import torch
        import torch.nn.functional as F

        def train(model, loader, optimizer, device):
            model.to(device)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = F.cross_entropy(model(x), y)
                correct = torch.zeros((), device=device)
                labels = y.to("cpu")
                arr = labels.numpy()
        """
    )
    assert places["correct"] is Place.DEVICE
    assert places["labels"] is Place.HOST
    assert places["loss"] is Place.DEVICE  # a moved model on a moved batch
    assert places["arr"] is Place.UNKNOWN  # a NumPy array is no tensor


def test_values_cross_methods_and_keep_their_place_through_operators() -> None:
    ctx = _context(
        """
        import math
        import torch
        from torch import nn

        class Cell(nn.Module):
            def __init__(self, hidden):
                super().__init__()
                self.hidden = hidden
                self.gates = nn.Linear(hidden, hidden)

            def zeros(self, n):
                return torch.zeros(n, self.hidden), torch.zeros(n, self.hidden)

            def forward(self, x, state=None):
                if state is None:
                    state = self.zeros(x.size(0))
                h, c = state
                scale = 2 * math.pi * torch.arange(self.hidden).float() ** 0.5
                return self.gates(x) + h * scale.t()
        """
    )
    facts = file_facts(ctx)
    meetings = {(m.cpu.factory, ctx.code_for(m.node)) for m in facts.meetings}
    assert ("torch.zeros", "self.gates(x) + h * scale.t()") in meetings
    forward = next(f for f in ctx.index.of_type(cst.FunctionDef) if f.name.value == "forward")
    assert facts.scope(forward).facts["scale"].kind == CPU


def test_construction_time_code_has_nothing_on_the_device() -> None:
    ctx = _context(
        """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Conv2d(3, 8, 3)
                self.head = nn.Linear(self._width(), 10)

            def _width(self):
                return self.body(torch.zeros(1, 3, 8, 8)).numel()

            def forward(self, x):
                return self.head(self.body(x).flatten(1))
        """
    )
    assert file_facts(ctx).meetings == []


def test_join_keeps_a_factory_tensor_and_marks_a_branch_conflict() -> None:
    cpu = Fact(CPU, where="cpu", factory="torch.tensor", scalar=True)
    device = Fact(DEVICE, where="accelerator")
    assert join(cpu, device, branches=True).conflict
    assert not join(cpu, device).conflict  # a loop back-edge is no conflict
    pair = Fact(elements=(cpu, cpu))
    assert join(UNKNOWN_FACT, pair).elements == (cpu, cpu)
    assert join(Fact(elements=()), pair) == pair  # an empty list, then `append`s


# ---------------------------------------------------------------------------- device identity


def _devices(source: str) -> dict[str, str]:
    """The device (`DeviceId.text`) of every assignment target `name = ...`, where stated."""

    def read(facts, value):  # type: ignore[no-untyped-def]
        device = facts.value(value).device
        return None if device is None else device.text if device.literal else f"?{device.type}"

    return _by_target(source, read)


def test_device_identity_where_the_code_states_it() -> None:
    devices = _devices(
        """
        import torch

        SECOND = "cuda:1"

        def place(x, rank, cond):
            a = x.to("cuda:0")
            b = x.cuda(1)
            c = x.to(2)
            d = torch.device("cuda", 3)
            e = x.to(SECOND)
            f = torch.zeros(4, device=d)
            g = f * 2 + a.sum()
            h = x.to(f"cuda:{rank}")
            i = "cuda:0" if torch.cuda.is_available() else "cpu"
            j = x.cuda()
            k = b if cond else a
            m = a.device
        """
    )
    assert devices == {
        "SECOND": "cuda:1",
        "a": "cuda:0",
        "b": "cuda:1",
        "c": "cuda:2",
        "d": "cuda:3",
        "e": "cuda:1",
        "f": "cuda:3",
        "g": "cuda:3",
        "h": "?cuda",
        "i": "cuda:0",
        "j": "cuda",
        "m": "cuda:0",
    }  # `k` joins two devices: unknown


def test_device_identity_through_init_and_defaults() -> None:
    ctx = _context(
        """
        import torch
        import torch.nn as nn

        class Split(nn.Module):
            def __init__(self, devices=("cuda:0", "cuda:1")):
                super().__init__()
                self.out_device = torch.device(devices[1])
                self.enc = nn.Linear(4, 4).to(devices[0])
                self.dec = nn.Linear(4, 4).to(self.out_device)

            def forward(self, x):
                h = self.enc(x.to(self.enc.weight.device))
                return self.dec(h)
        """
    )
    facts = file_facts(ctx)
    cls = facts.class_model("Split")
    assert cls is not None
    assert {k: v.text for k, v in facts.placed_submodules(cls).items()} == {"enc": "cuda:0", "dec": "cuda:1"}
    (crossing,) = facts.crossings
    assert (ctx.code_for(crossing.value_node), crossing.value.device.text) == ("h", "cuda:0")  # type: ignore[union-attr]
    assert (ctx.code_for(crossing.other_node), crossing.other.device.text) == ("self.dec", "cuda:1")  # type: ignore[union-attr]


def test_the_current_device_and_a_callers_device_never_cross() -> None:
    ctx = _context(
        """
        import torch

        def pair(x, y, dev):
            return x.to("cuda:1") + y.cuda(), x.to("cuda:1") * y.to(dev)
        """
    )
    assert file_facts(ctx).crossings == []


def test_device_values_say_whether_they_are_objects_or_strings() -> None:
    ctx = _context(
        """
        import torch

        def f(x, rank):
            a = torch.device("cuda")
            b = "cuda"
            c = x.device
            d = f"cuda:{rank}"
        """
    )
    facts = file_facts(ctx)
    spelled = {a.targets[0].target.value: facts.value(a.value).spelled for a in ctx.index.of_type(cst.Assign)}  # type: ignore[union-attr]
    assert spelled == {"a": "object", "b": "string", "c": "object", "d": "string"}


def test_fact_equality_sees_every_field() -> None:
    # Fact writes its own __eq__ for speed: two facts that differ in any one field are unequal.
    import dataclasses

    base = Fact()
    for field in dataclasses.fields(Fact):
        value = getattr(base, field.name)
        other = True if value is False else ("x" if value is None else ("other" if isinstance(value, str) else None))
        changed = dataclasses.replace(base, **{field.name: other})
        assert changed != base, field.name
        assert changed == dataclasses.replace(base, **{field.name: other})
    assert Fact(CPU, where="cpu") == Fact(CPU, where="cpu") and hash(Fact(CPU)) == hash(Fact(CPU))
