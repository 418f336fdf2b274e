"""Overhead of the runtime checker on MLP training steps (a benchmark, not a test).

    python bench/runtime_overhead.py [--steps N]

Times one training step (forward, backward, AdamW step) unchecked, under
`devicelint.runtime.check` without simulation (the model on the CPU, as on a GPU machine
where the checker only watches), and with the simulated GPU (CPU-only machines), and prints
each as a ratio of the unchecked step, in one run. A third model adds 2,000 unused buffers to
the small one: the checker's per-step cost depends on the ops run, not on the tensors held.
"""

from __future__ import annotations

import argparse
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import devicelint.runtime as rt  # noqa: E402


def mlp(width: int, depth: int, classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    return nn.Sequential(*layers, nn.Linear(width, classes))


class WithManyBuffers(nn.Module):
    def __init__(self, core: nn.Module, count: int) -> None:
        super().__init__()
        self.core = core
        for i in range(count):
            self.register_buffer(f"unused_{i}", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.core(x)


CASES = {
    "small MLP (64 wide, 2 blocks, batch 32)": (lambda: mlp(64, 2), 64, 32),
    "small MLP + 2000 unused buffers": (lambda: WithManyBuffers(mlp(64, 2), 2000), 64, 32),
    "larger MLP (1024 wide, 4 blocks, batch 256)": (lambda: mlp(1024, 4), 1024, 256),
}


def time_steps(build, width: int, batch: int, device: str, steps: int) -> float:  # noqa: ANN001
    torch.manual_seed(0)
    model = build().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    # The minimum: the least disturbed step (shared CI machines are noisy).
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps timings stable)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not torch.cuda.is_available():
        from devicelint.runtime import simulate

        simulate.install()  # before the first backward pass in this process
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.steps} steps\n")
    # Warm up everything once (lazy imports, allocator, first-dispatch costs) before timing.
    for build, width, batch in CASES.values():
        time_steps(build, width, batch, "cpu", 2)
        with rt.check(expect_device="cpu", simulate="never"):
            time_steps(build, width, batch, "cpu", 2)
        if not torch.cuda.is_available():
            with rt.check(simulate="always"):
                time_steps(build, width, batch, "cuda", 2)
    print(f"{'case':48} {'unchecked':>10} {'checked':>9} {'ratio':>6} {'simulated':>10} {'ratio':>6}")
    for name, (build, width, batch) in CASES.items():
        base = time_steps(build, width, batch, "cpu", args.steps)
        with rt.check(expect_device="cpu", simulate="never") as report:
            checked = time_steps(build, width, batch, "cpu", args.steps)
        assert report.findings == [], report.format()
        simulated = float("nan")
        if not torch.cuda.is_available():
            with rt.check(simulate="always") as report:
                simulated = time_steps(build, width, batch, "cuda", args.steps)
            assert report.findings == [], report.format()
        print(
            f"{name:48} {base * 1e3:8.2f}ms {checked * 1e3:7.2f}ms {checked / base:5.2f}x "
            f"{simulated * 1e3:8.2f}ms {simulated / base:5.2f}x"
        )
    if torch.cuda.is_available():
        print("\nCUDA (checker watching real cuda:0):")
        for name, (build, width, batch) in CASES.items():
            base = time_steps(build, width, batch, "cuda", args.steps)
            with rt.check(simulate="never") as report:
                checked = time_steps(build, width, batch, "cuda", args.steps)
            print(f"{name:48} {base * 1e3:8.2f}ms {checked * 1e3:7.2f}ms {checked / base:5.2f}x")


if __name__ == "__main__":
    main()
