"""Shared by the decode tests (tests/kernels/test_decode.py, test_decode_masks.py): float64
references, inputs, the comparison, and HF generate()'s KV-cache mask."""

from __future__ import annotations

import torch

from flashgen.kernels.reference import rows_ref, scores_ref


def ref(q, k, v, offset=None, scale=None):
    """float64 attention, query i seeing keys j <= i + offset (all keys when offset is None);
    a row that sees nothing gives zeros and lse +inf."""
    return rows_ref(hide_after(scores_ref(q, k, scale=scale), offset), v)


def hide_after(s, offset):
    """Scores with keys j > i + offset hidden (none when offset is None)."""
    if offset is None:
        return s
    i = torch.arange(s.shape[2])[:, None]
    j = torch.arange(s.shape[3])[None, :]
    return s.masked_fill(j > i + offset, float("-inf"))


def inputs(b, hq, hkv, sq, sk, d, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, s, d, generator=gen).to(dtype)
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


def check(out, lse, want, want_lse, tol):
    assert not out.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(lse.double(), want_lse, atol=tol, rtol=tol)


def masked_ref(q, k, v, mask, offset=None):
    """float64 attention with SDPA's attn_mask (bool: True visible; float: added to the scaled
    scores) and the causal offset; rows that see no key give zeros and lse +inf."""
    s = scores_ref(q, k)
    s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return rows_ref(hide_after(s, offset), v)


def hf_cache_mask(b, sq, sk, pos, pad_left):
    """HF generate()'s KV-cache mask, [B, 1, Sq, Sk] bool: query i (at position pos + i) sees
    keys j <= pos + i, minus each entry's first pad_left[b] keys (left padding); keys past the
    current position (a static cache's empty slots) are masked."""
    i = torch.arange(sq)[:, None] + pos
    j = torch.arange(sk)[None, :]
    causal = (j <= i)[None, None]
    pad = torch.arange(sk)[None, :] >= torch.tensor(pad_left)[:, None]
    return causal & pad[:, None, None, :]
