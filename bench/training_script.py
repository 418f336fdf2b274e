"""A realistic PyTorch training script of about 1,000 lines, for the language server's latency
benchmark: a config, datasets, a transformer model, a training loop with AMP, evaluation and
checkpoints, with a few device bugs of the kinds devicelint reports. The script's parts are
written once and repeated under new names (`Block2`, `train_epoch2`...) up to the length asked.
"""

from __future__ import annotations

HEADER = '''"""Train a small transformer language model."""
import argparse
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


@dataclass
class Config:
    vocab_size: int = 32000
    block_size: int = 256
    n_layer: int = 6
    n_head: int = 8
    n_embd: int = 512
    dropout: float = 0.1
    lr: float = 3e-4
    weight_decay: float = 0.1
    batch_size: int = 32
    epochs: int = 10
    grad_clip: float = 1.0
    out_dir: str = "checkpoints"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="data/train.bin")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--amp", action="store_true")
    return parser.parse_args()

'''

# One part of the script; `{n}` makes each repetition's names its own.
PART = '''
class TokenDataset{n}(Dataset):
    """Fixed-length windows over a token file."""

    def __init__(self, path, block_size):
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        self.block_size = block_size

    def __len__(self):
        return len(self.tokens) - self.block_size - 1

    def __getitem__(self, index):
        chunk = self.tokens[index:index + self.block_size + 1].astype(np.int64)
        x = torch.from_numpy(chunk[:-1])
        y = torch.from_numpy(chunk[1:])
        return x, y


class Attention{n}(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        batch, length, width = x.size()
        q, k, v = self.qkv(x).split(width, dim=2)
        q = q.view(batch, length, self.n_head, width // self.n_head).transpose(1, 2)
        k = k.view(batch, length, self.n_head, width // self.n_head).transpose(1, 2)
        v = v.view(batch, length, self.n_head, width // self.n_head).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(length, length))
        scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = self.dropout(F.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).contiguous().view(batch, length, width)
        return self.proj(out)


class Block{n}(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = Attention{n}(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LanguageModel{n}(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.position = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList([Block{n}(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        length = idx.size(1)
        positions = torch.arange(0, length, device=idx.device)
        x = self.embed(idx) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def make_optimizer{n}(model, config):
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    groups = [
        {{"params": decay, "weight_decay": config.weight_decay}},
        {{"params": no_decay, "weight_decay": 0.0}},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95))


def train_epoch{n}(model, loader, optimizer, scaler, config, device, use_amp):
    model.train()
    total, steps = 0.0, 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=use_amp):
            _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        total += loss.item()
        steps += 1
    return total / max(steps, 1)


@torch.no_grad()
def evaluate{n}(model, loader, device):
    model.eval()
    losses = []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        _, loss = model(x, y)
        losses.append(loss.item())
    return float(np.mean(losses)) if losses else float("nan")


def save_checkpoint{n}(model, optimizer, epoch, config):
    os.makedirs(config.out_dir, exist_ok=True)
    path = os.path.join(config.out_dir, f"epoch{{epoch}}.pt")
    torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}}, path)
    return path


def load_checkpoint{n}(model, optimizer, path):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"]


@torch.no_grad()
def generate{n}(model, idx, steps, temperature=1.0):
    for _ in range(steps):
        logits, _ = model(idx[:, -model.config.block_size:])
        probabilities = F.softmax(logits[:, -1, :] / temperature, dim=-1)
        idx = torch.cat([idx, torch.multinomial(probabilities, num_samples=1)], dim=1)
    return idx


def main{n}():
    args = parse_args()
    config = Config(epochs=args.epochs)
    device = torch.device(args.device)
    train_loader = DataLoader(TokenDataset{n}(args.data, config.block_size), batch_size=config.batch_size,
                              shuffle=True, num_workers=4, pin_memory=True)
    val_loader = DataLoader(TokenDataset{n}(args.data.replace("train", "val"), config.block_size),
                            batch_size=config.batch_size)
    model = LanguageModel{n}(config).to(device)
    optimizer = make_optimizer{n}(model, config)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
    start = load_checkpoint{n}(model, optimizer, args.resume) + 1 if args.resume else 0
    history = []
    for epoch in range(start, config.epochs):
        began = time.time()
        train_loss = train_epoch{n}(model, train_loader, optimizer, scaler, config, device, args.amp)
        val_loss = evaluate{n}(model, val_loader, device)
        history.append({{"epoch": epoch, "train": train_loss, "val": val_loss, "seconds": time.time() - began}})
        print(json.dumps(history[-1]))
        save_checkpoint{n}(model, optimizer, epoch, config)
    sample = generate{n}(model, torch.zeros((1, 1), dtype=torch.long, device=device), steps=50)
    print(sample.numpy())
'''


def training_script(lines: int = 1000) -> str:
    """The script: whole parts until it has at least `lines` lines."""
    text = HEADER
    number = 1
    while text.count("\n") < lines:
        text += PART.format(n=number)
        number += 1
    return text + '\n\nif __name__ == "__main__":\n    main1()\n'


if __name__ == "__main__":
    print(training_script(), end="")
