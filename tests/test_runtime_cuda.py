"""Runtime checks on a real GPU: skipped without CUDA.

The checker's verdict on each mixed-device op must match what CUDA itself does: raise, or
accept the mix silently (0-dim CPU tensors, CPU indices). Every op where they differ is
listed in the failure.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from conftest import FIXTURES  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import devicelint.runtime as rt  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _g(*shape: int) -> torch.Tensor:
    return torch.randn(shape, device="cuda")


def _c(*shape: int) -> torch.Tensor:
    return torch.randn(shape)


MIXED_OPS: dict[str, Callable[[], object]] = {
    "add": lambda: _g(3) + _c(3),
    "add 0-dim cpu": lambda: _g(3) + _c(),
    "mul 0-dim cpu": lambda: _g(3) * torch.tensor(2.0),
    "matmul": lambda: _g(3, 3) @ _c(3, 3),
    "linear cpu weight": lambda: F.linear(_g(2, 3), _c(4, 3)),
    "cat": lambda: torch.cat([_g(2), _c(2)]),
    "stack 0-dim": lambda: torch.stack([_g(), _c()]),
    "where cpu condition": lambda: torch.where(_c(3) > 0, _g(3), _g(3)),
    "masked_fill cpu mask": lambda: _g(3, 3).masked_fill(_c(3, 3) > 0, 0.0),
    "masked_fill 0-dim cpu value": lambda: _g(3).masked_fill(_g(3) > 0, torch.tensor(1.0)),
    "index cpu long": lambda: _g(5)[torch.tensor([0, 2])],
    "index cpu bool": lambda: _g(3)[torch.tensor([True, False, True])],
    "index_put cpu index": lambda: _g(5).index_put_((torch.tensor([0, 1]),), _g(2)),
    "index_select cpu index": lambda: torch.index_select(_g(5), 0, torch.tensor([0, 1])),
    "gather cpu index": lambda: torch.gather(_g(2, 3), 1, torch.zeros(2, 1, dtype=torch.long)),
    "embedding cpu index": lambda: F.embedding(torch.tensor([0, 1]), _g(4, 2)),
    "cross_entropy cpu weight": lambda: F.cross_entropy(
        _g(4, 3), torch.zeros(4, dtype=torch.long, device="cuda"), weight=_c(3)
    ),
    "cross_entropy cpu target": lambda: F.cross_entropy(_g(4, 3), torch.zeros(4, dtype=torch.long)),
    "lerp 0-dim cpu weight": lambda: torch.lerp(_g(3), _g(3), torch.tensor(0.5)),
    "clamp cpu min": lambda: torch.clamp(_g(3), min=_c(3)),
    "addcmul cpu": lambda: torch.addcmul(_g(3), _g(3), _c(3)),
    "layer_norm cpu weight": lambda: F.layer_norm(_g(2, 3), (3,), weight=_c(3)),
    "nll_loss cpu target": lambda: F.nll_loss(_g(4, 3).log_softmax(-1), torch.zeros(4, dtype=torch.long)),
    "embedding_bag cpu offsets": lambda: F.embedding_bag(
        torch.tensor([0, 1, 2], device="cuda"), _g(4, 3), torch.tensor([0, 1])
    ),
    "searchsorted cpu values": lambda: torch.searchsorted(_g(5).sort().values, _c(3)),
    "repeat_interleave cpu repeats": lambda: torch.repeat_interleave(_g(3), torch.tensor([1, 2, 3])),
}


def _cuda_verdict(op: Callable[[], object]) -> str:
    try:
        op()
        torch.cuda.synchronize()
    except RuntimeError as exc:
        if "device" in str(exc):
            return "raises"
        raise
    return "silent"


def _checker_verdict(op: Callable[[], object]) -> str:
    with rt.check(simulate="never", syncs="ignore") as report:
        op()
    mixed = [f for f in report.findings if f.code == "DL601"]
    if not mixed:
        return "no finding"
    return "raises" if any("CUDA raises" in f.message for f in mixed) else "silent"


def test_mixed_op_verdicts_match_cuda() -> None:
    differences = []
    for name, op in MIXED_OPS.items():
        cuda, checker = _cuda_verdict(op), _checker_verdict(op)
        if cuda != checker:
            differences.append(f"{name}: CUDA {cuda}, checker says {checker}")
    assert differences == [], "\n".join(differences)


def test_backward_ops_on_cuda_autograd_threads_are_seen() -> None:
    weight = torch.randn(3)  # a CPU tensor made outside the check

    def body() -> None:
        x = torch.randn(4, 3, device="cuda", requires_grad=True)
        for _ in range(2):
            (x * weight).sum().backward()  # forward line

    with rt.check(simulate="never") as report:
        body()
    (finding,) = [f for f in report.findings if f.code == "DL601"]
    assert finding.message.endswith("(also in the backward pass)")
    assert "(4 times)" in finding.message


def test_planted_example_on_cuda() -> None:
    sys.path.insert(0, str(FIXTURES / "runtime_example"))
    try:
        import fixed_model
        import planted_model
    finally:
        sys.path.pop(0)
    with rt.check(simulate="never", syncs="error") as report:
        planted_model.train("cuda", steps=3)
    assert sorted(f.code for f in report.findings) == ["DL601", "DL601", "DL602", "DL605", "DL606"], report.format()
    with rt.check(simulate="never", syncs="error") as report:
        fixed_model.train("cuda", steps=3)
    assert report.findings == [], report.format()


def _plain_and_checked(op: Callable[[], object]) -> tuple[str, list[str]]:
    with rt.check(simulate="never", syncs="ignore") as report:
        op()
    return _cuda_verdict(op), [f"{f.code} {f.message}" for f in report.findings]


def test_cpu_tensors_cuda_takes_by_design_run_unchanged_under_the_checker() -> None:
    def attention_with_dropout() -> None:
        # Its backward takes the philox seed and offset as CPU tensors; moving them to the GPU
        # (as the checker once did for every mix) crashed the process.
        q, k, v = (_g(2, 4, 12, 8).requires_grad_() for _ in range(3))
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.1).sum().backward()

    def ctc_with_cpu_lengths() -> None:
        # ATen's fast path reads CPU length tensors as lists; under a dispatch mode it would
        # take another path that CUDA refuses.
        log_probs = _g(10, 2, 5).log_softmax(-1).detach().requires_grad_()
        targets = torch.randint(1, 5, (2, 4), device="cuda")
        F.ctc_loss(log_probs, targets, torch.tensor([10, 10]), torch.tensor([4, 3])).backward()

    for op in (attention_with_dropout, ctc_with_cpu_lengths):
        assert _plain_and_checked(op) == ("silent", []), op.__name__


def test_a_transformer_with_attention_dropout_trains_under_the_checker() -> None:
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True).cuda()
    opt = torch.optim.AdamW(layer.parameters())
    with rt.check(simulate="never", syncs="error") as report:
        for _ in range(2):
            loss = layer(_g(2, 12, 32)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert report.findings == [], report.format()


def test_simulation_is_refused_where_cuda_is_present() -> None:
    from devicelint.runtime.simulate import SimulationUnavailable

    with pytest.raises(SimulationUnavailable, match="where CUDA is present"):
        with rt.check(simulate="always"):
            pass
    x = _g(3).requires_grad_()
    (x * 2).sum().backward()  # CUDA's autograd is untouched by the refusal
    assert x.grad is not None and x.grad.device.type == "cuda"
