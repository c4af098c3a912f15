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


def scores_ref(q, k, *, scale: float | None = None, softcap: float | None = None):
    """float64 scaled scores [B, Hq, Sq, Sk], kv heads expanded (GQA), capped as
    cap * tanh(s / cap) with `softcap`. The first half of every masked reference the tests
    write (boolean masks, biases, windows, lengths, dropout, decode offsets): they hide keys
    with -inf or add a bias, then `rows_ref` finishes."""
    import torch

    dim = q.shape[-1]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    scores = (q.double() @ expand_kv(k.double(), q.shape[1]).transpose(-1, -2)) * scale
    return scores if softcap is None else softcap * torch.tanh(scores / softcap)


def hidden_ref(sq: int, sk: int, *, causal: bool = False, window=None):
    """Boolean [sq, sk], True where query i must not see key j: j > i when causal, and outside
    the band i - left <= j <= i + right of a `window` (left, right); what `scores_ref`'s users
    fill with -inf."""
    import torch

    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    hide = torch.zeros_like(i == j)
    if causal:
        hide |= j > i
    if window is not None:
        hide |= (j < i - window[0]) | (j > i + window[1])
    return hide


def rows_ref(scores, v):
    """(out, lse) in float64 from `scores_ref`'s scores with hidden keys at -inf: softmax over
    the keys times v (kv heads expanded); a row that sees no key gives zeros and lse +inf, as
    flashgen's kernels do."""
    import torch

    lse = torch.logsumexp(scores, -1)
    out = torch.softmax(scores, -1).nan_to_num(0.0) @ expand_kv(v.double(), scores.shape[1])
    return out, torch.where(lse.isinf(), math.inf, lse)


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
