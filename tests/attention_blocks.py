"""Attention blocks that several GPU tests compile (imported by name: pytest puts this folder,
the conftest's, on sys.path)."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F


class GroupedSdpa(nn.Module):
    """SDPA with grouped-query attention between two projections: width // head_dim query heads
    over `kv_heads` key/value heads, causal or not."""

    def __init__(self, width: int = 256, head_dim: int = 64, kv_heads: int = 2, causal=False):
        super().__init__()
        self.h, self.hkv, self.d = width // head_dim, kv_heads, head_dim
        self.causal = causal
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * head_dim, bias=False)
        self.out = nn.Linear(width, width, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q = self.q(x).view(b, t, self.h, self.d).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.hkv, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=True)
        return self.out(y.transpose(1, 2).reshape(b, t, c))
