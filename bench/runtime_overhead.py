"""Overhead of the runtime checker on small and realistic training steps (a benchmark, not a test).

    python bench/runtime_overhead.py [--steps N] [--only SUBSTRING]

Times one training step (forward, cross-entropy, backward, AdamW step) unchecked, under
`devicelint.runtime.check` without simulation ("watched": the model on the CPU, as on a GPU
machine where the checker only watches), and with the simulated GPU (CPU-only machines), and
prints each as a ratio of the unchecked step, in one run. One model adds 2,000 unused buffers
to the small MLP: the checker's per-step cost depends on the ops run, not on the tensors held.
The Hugging Face cases run when transformers is installed.
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


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        for c_in, c_out in ((3, 16), (16, 32), (32, 64)):
            blocks += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(64 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class LSTMLanguageModel(nn.Module):
    """pytorch/examples' word language model at a small size."""

    def __init__(self, vocab: int = 1000, size: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, size)
        self.rnn = nn.LSTM(size, size, num_layers=2, batch_first=True)
        self.decode = nn.Linear(size, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(tokens))
        return self.decode(out).flatten(0, 1)


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 1000, size: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, size)
        layer = nn.TransformerEncoderLayer(size, 4, 4 * size, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.decode = nn.Linear(size, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encoder(self.embed(tokens))).flatten(0, 1)


def hugging_face(kind: str) -> nn.Module | None:
    """A Hugging Face model from a small config, or None without transformers."""
    try:
        import transformers
    except ImportError:
        return None
    transformers.logging.set_verbosity_error()
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=64)
        )
    else:
        model = transformers.BertForMaskedLM(
            transformers.BertConfig(
                hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024, vocab_size=1000
            )
        )

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.model(tokens).logits.flatten(0, 1)

    return Logits()


def vectors(width: int, batch: int):  # noqa: ANN201
    return lambda device: (torch.randn(batch, width, device=device), torch.randint(0, 10, (batch,), device=device))


def images(batch: int):  # noqa: ANN201
    return lambda device: (torch.randn(batch, 3, 32, 32, device=device), torch.randint(0, 10, (batch,), device=device))


def tokens(batch: int, length: int, vocab: int = 1000):  # noqa: ANN201
    def make(device: str) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(0, vocab, (batch, length), device=device)
        return ids, torch.randint(0, vocab, (batch * length,), device=device)

    return make


# name -> (model builder, batch maker, realistic size?)
CASES = {
    "small MLP (64 wide, 2 blocks, batch 32)": (lambda: mlp(64, 2), vectors(64, 32), False),
    "small MLP + 2000 unused buffers": (lambda: WithManyBuffers(mlp(64, 2), 2000), vectors(64, 32), False),
    "small CNN (3 conv blocks, 32x32, batch 8)": (CNN, images(8), False),
    "2-layer LSTM LM (128, seq 35, batch 20)": (LSTMLanguageModel, tokens(20, 35), False),
    "tiny transformer (2x64, seq 32, batch 8)": (TinyTransformer, tokens(8, 32), False),
    "GPT-2 tiny (2x64, seq 32, batch 4)": (lambda: hugging_face("gpt2"), tokens(4, 32), False),
    "larger MLP (1024 wide, 4 blocks, batch 256)": (lambda: mlp(1024, 4), vectors(1024, 256), True),
    "BERT 256x4 (seq 128, batch 8)": (lambda: hugging_face("bert"), tokens(8, 128), True),
}


def time_steps(build, make_batch, device: str, steps: int) -> float:  # noqa: ANN001
    torch.manual_seed(0)
    model = build().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = make_batch(device)

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
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    simulating = not torch.cuda.is_available()
    if simulating:
        from devicelint.runtime import simulate

        simulate.install()  # before the first backward pass in this process
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.steps} steps\n")
    cases = {name: case for name, case in CASES.items() if args.only in name and case[0]() is not None}
    # Warm up everything once (lazy imports, allocator, first-dispatch costs) before timing.
    for build, make_batch, _ in cases.values():
        time_steps(build, make_batch, "cpu", 2)
        with rt.check(expect_device="cpu", simulate="never"):
            time_steps(build, make_batch, "cpu", 2)
        if simulating:
            with rt.check(simulate="always"):
                time_steps(build, make_batch, "cuda", 2)
    print(f"{'case':46} {'unchecked':>10} {'watched':>9} {'ratio':>6} {'simulated':>10} {'ratio':>6}")
    for name, (build, make_batch, realistic) in cases.items():
        base = time_steps(build, make_batch, "cpu", args.steps)
        with rt.check(expect_device="cpu", simulate="never") as report:
            watched = time_steps(build, make_batch, "cpu", args.steps)
        assert report.findings == [], report.format()
        simulated = float("nan")
        if simulating:
            with rt.check(simulate="always") as report:
                simulated = time_steps(build, make_batch, "cuda", args.steps)
            assert report.errors == [], report.format()
        size = "realistic" if realistic else "small"
        print(
            f"{name:46} {base * 1e3:8.2f}ms {watched * 1e3:7.2f}ms {watched / base:5.2f}x "
            f"{simulated * 1e3:8.2f}ms {simulated / base:5.2f}x  ({size})"
        )
    if not simulating:
        print("\nCUDA (checker watching real cuda:0):")
        for name, (build, make_batch, _) in cases.items():
            base = time_steps(build, make_batch, "cuda", args.steps)
            with rt.check(simulate="never"):
                watched = time_steps(build, make_batch, "cuda", args.steps)
            print(f"{name:46} {base * 1e3:8.2f}ms {watched * 1e3:7.2f}ms {watched / base:5.2f}x")


if __name__ == "__main__":
    main()
