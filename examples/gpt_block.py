"""A GPT block compiled with the flashgen backend, and what `flashgen.explain` says about it.

    python examples/gpt_block.py            # GPU if present, else Triton's CPU interpreter

The attention below is written by hand the way nanoGPT does it (tril buffer, masked_fill, softmax,
dropout); the backend proves the mask causal, replaces the whole subgraph with the flashgen
kernel, and hands the rest of the model to Inductor. Training works through it.
"""

from __future__ import annotations

import logging
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import flashgen  # noqa: E402  (only for explain; torch.compile finds "flashgen" by itself)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.1):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        tril = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("bias", tril.view(1, 1, block_size, block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd: int = 64, n_head: int = 4, block_size: int = 256):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("torch").setLevel(logging.WARNING)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Block().to(device).eval()  # eval: dropout off, so the kernel may take the site
    x = torch.randn(2, 100, 64, device=device)

    print(flashgen.explain(model, x))

    compiled = torch.compile(model, backend="flashgen", dynamic=True)
    with torch.no_grad():
        for t in (100, 37, 150):  # new lengths reuse the compiled graph
            xt = torch.randn(2, t, 64, device=device)
            err = (compiled(xt) - model(xt)).abs().max().item()
            print(f"T={t}: max |compiled - eager| = {err:.2e}")

    # Training through the kernel (forward and backward are flashgen kernels).
    model.attn.attn_dropout.p = 0.0
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        opt.zero_grad()
        loss = compiled(x).pow(2).mean()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
