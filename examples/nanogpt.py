"""nanoGPT's model (Karpathy's model.py, trimmed to what training needs), shared by the examples
`train_nanogpt.py` and `distributed_train.py`.

Its attention is nanoGPT's manual path, the point of using it here: a `tril` buffer,
`masked_fill(-inf)`, softmax, dropout, `att @ v`, no SDPA call. flashgen's backend proves that
mask causal and replaces the subgraph with its own op; with attention dropout in training the
op draws the dropout in its kernels (forward and backward alike; the drawn mask is not eager's,
so such a run's loss matches eager's in distribution only). The examples keep nanoGPT's default,
dropout 0, so the loss curves compare step by step.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, block_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_head = heads
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(dropout)
        t = block_size
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

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
    def __init__(self, width: int, heads: int, block_size: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, block_size)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and position embeddings, `layers` blocks (`self.h`, what regional compilation
    and FSDP wrap one by one), a final LayerNorm and the vocabulary head.

    `forward(idx)` returns the logits; `forward(idx, targets)` the mean cross-entropy
    (computed in float32). `tie_weights` shares the embedding with the head, as nanoGPT does."""

    def __init__(self, vocab: int, width: int, heads: int, layers: int, block_size: int,
                 tie_weights: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block_size, width)
        self.h = nn.ModuleList(Block(width, heads, block_size) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        if tie_weights:
            self.wte.weight = self.lm_head.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
