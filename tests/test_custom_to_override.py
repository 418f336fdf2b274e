"""DL112: what it reports on a `to()`/`cuda()` override, where, and what it leaves alone."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def findings(source: str) -> list[tuple[int, str]]:
    options = EngineOptions(rules=(find_rule("DL112"),))
    result = lint_source(textwrap.dedent(source), "pkg/learner.py", options)
    return [(f.line, f.message) for f in result.findings if f.code == "DL112"]


def test_module_override_without_return_and_the_assignment_that_gets_none() -> None:
    found = findings("""
        import torch.nn as nn

        class Learner(nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model

            def to(self, device):
                self.model.to(device)

        def build(model, device):
            learner = Learner(model)
            learner = learner.to(device)
            return learner
    """)
    assert found == [
        (
            9,
            "`Learner.to()` returns None, but `nn.Module.to()` returns the module, so `model = model.to(...)` and "
            "`model.to(...).eval()` get None; end it with `return self`",
        ),
        (
            14,
            "`learner.to(device)` is None: `Learner.to()` has no `return`; return `self` from `Learner.to()`, "
            "or call it as a statement",
        ),
    ]


def test_plain_class_forgetting_one_tensor_is_reported_at_that_attribute() -> None:
    found = findings("""
        import torch

        class Rollout:
            def __init__(self, n):
                self.states = torch.zeros(n, 4)
                self.returns = torch.zeros(n)

            def cuda(self):
                self.states = self.states.cuda()
                return self
    """)
    assert found == [
        (
            7,
            "`self.returns` holds a tensor that `Rollout.cuda()` does not move (it moves `self.states`), so it "
            "stays on the CPU; move `self.returns` in `cuda()` as well",
        ),
    ]


def test_silent_when_the_override_returns_or_is_a_stub_or_moves_generically() -> None:
    assert (
        findings("""
        import torch
        import torch.nn as nn

        class A(nn.Module):
            def to(self, *args, **kwargs):
                self.device = args[0]
                return super().to(*args, **kwargs)

        class B:
            def __init__(self, n):
                self.x = torch.zeros(n)
                self.y = torch.zeros(n)

            def to(self, device):
                for name, value in vars(self).items():
                    setattr(self, name, value.to(device))
                return self

        class C:
            def to(self, device):
                raise NotImplementedError("C cannot move")

        class D:
            def cuda(self, device=None):
                _raise_not_supported("cuda")

        def use(model, device):
            a = A().to(device)
            b = B(3).to(device)
            return a, b
    """)
        == []
    )


def test_plain_class_declaring_none_is_in_place_by_design_but_a_module_is_not() -> None:
    found = findings("""
        import torch.nn as nn

        class Shadow:
            def to(self, device) -> None:
                self.params = [p.to(device) for p in self.params]

        class Net(nn.Module):
            def cuda(self, device=None) -> None:
                self.body.cuda(device)
    """)
    assert [line for line, _ in found] == [9]


def test_odd_code_does_not_crash() -> None:
    assert findings("""
        class E:
            def to(self, *args, **kwargs): self.t = self.t.to(*args, **kwargs)

        def f(*a, **k):
            return E().to(*a, **k), E.to
    """) == [
        (
            3,
            "`E.to()` returns None, so the usual `obj = obj.to(...)` replaces the object with None; end it with "
            "`return self` (or return the moved copy)",
        ),
        (
            6,
            "`E().to(*a, **k)` is None: `E.to()` has no `return`; return `self` from `E.to()`, or call it as a "
            "statement",
        ),
    ]


def test_override_returning_a_part_or_falling_off_its_end() -> None:
    found = findings("""
        class Agent:
            def to(self, device):
                self.critic.to(device)
                return self.policy.to(device)

        class Sampler:
            def cuda(self, device=None):
                if self.device == device:
                    return self
                self.model.cuda(device)

        def build(device):
            sampler = Sampler().cuda(device)
            return Agent().to(device), sampler
    """)
    assert found == [
        (
            5,
            "`Agent.to()` returns `self.policy.to(device)`, not the object, so the usual `obj = obj.to(...)` "
            "replaces the object with `self.policy.to(device)`; return `self` (or a moved copy of the object)",
        ),
        (
            8,
            "`Sampler.cuda()` returns None when it reaches its end, so the usual `obj = obj.cuda(...)` replaces "
            "the object with None; end it with `return self` (or return the moved copy)",
        ),
        (
            14,
            "`Sampler().cuda(device)` may be None: `Sampler.cuda()` falls off its end without `return`; return "
            "`self` from `Sampler.cuda()`, or call it as a statement",
        ),
        (
            15,
            "`Agent().to(device)` is `self.policy.to(device)`, not the object: `Agent.to()` returns that; return "
            "`self` from `Agent.to()`, or call it as a statement",
        ),
    ]
