"""Float64 reference attention: the ground truth every kernel test compares against.

Written the plain way (materialised scores, softmax) in float64 so its own rounding error is far
below any kernel's. Semantics are the contract's: causal is top-left aligned (row i sees keys
j <= i, as SDPA's is_causal), GQA maps query head h to kv head h // (Hq // Hkv), and the
logsumexp is the natural log over the keys each row sees.
"""

from __future__ import annotations

import math


def expand_kv(t, hq: int):
    """Repeat kv heads so head h of the result is kv head h // (hq // hkv)."""
    hkv = t.shape[1]
    return t.repeat_interleave(hq // hkv, dim=1) if hkv != hq else t


def causal_mask(sq: int, sk: int, device=None):
    """Boolean [sq, sk], True where query i may see key j (j <= i, top-left aligned)."""
    import torch

    rows = torch.arange(sq, device=device)[:, None]
    cols = torch.arange(sk, device=device)[None, :]
    return cols <= rows


def attention_ref(q, k, v, *, causal: bool, scale: float | None = None):
    """(out, lse) in float64: out [B, Hq, Sq, D], lse [B, Hq, Sq] (natural log)."""
    import torch

    hq, dim = q.shape[1], q.shape[-1]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    q64 = q.double()
    k64 = expand_kv(k.double(), hq)
    v64 = expand_kv(v.double(), hq)
    scores = torch.matmul(q64, k64.transpose(-1, -2)) * scale
    if causal:
        visible = causal_mask(q.shape[2], k.shape[2], q.device)
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse[..., None]), v64)
    return out, lse


def sdpa_same_dtype(q, k, v, *, causal: bool, scale: float | None = None):
    """PyTorch's own result in the inputs' dtype: the yardstick for half-precision tolerance."""
    import torch.nn.functional as F

    hq = q.shape[1]
    return F.scaled_dot_product_attention(
        q, expand_kv(k, hq), expand_kv(v, hq), is_causal=causal, scale=scale
    )


def max_abs_err(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def tolerance(dtype, sdpa_err: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for comparing a kernel's output in `dtype` with the float64 reference.

    float32: 1e-4 relative (computed with IEEE fp32 dots). Half types: twice the error of
    PyTorch's own result in that dtype (`sdpa_err`, max abs vs float64) plus a small floor, so
    the bound tracks what the dtype can achieve rather than a guessed constant.
    """
    import torch

    if dtype == torch.float32:
        return 1e-4, 1e-5
    floor = {torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    atol = 2.0 * (sdpa_err or 0.0) + floor
    return 0.0, atol
