"""Bottom-right causal alignment (FlashAttention's, a KV cache's) on top of the existing kernels.

`causal=True` means SDPA's is_causal: top-left aligned, query i sees keys j <= i. When the
query is the LAST seq_q positions of a sequence whose keys are all present (a KV-cache prefill
continuing a cache, chunked prefill, a speculative draft), query i sits at position
i + seq_k - seq_q and sees keys j <= i + (seq_k - seq_q): the bottom-right alignment.

Why no new kernel: with offset c = seq_k - seq_q,
- c == 0 is plain top-left causal;
- c > 0 is the two-sided band i - left <= j <= i + c with a left side longer than any sequence,
  which the windowed kernels (KernelSpec.window, forward and both backward walks) run with the
  band's tiles skipped or masked exactly as a causal kernel would;
- c < 0 (more queries than keys): rows i < -c see no key (zeros, lse = +inf, no gradient, as
  FlashAttention gives), and rows i >= -c are top-left causal over all keys, so the kernels run
  on those rows only.
The decode kernels take the offset directly (`flashgen.kernels.decode`).
"""

from __future__ import annotations

import torch

from . import bwd, fwd
from .layout import new_out

ALIGNS = ("top_left", "bottom_right")


def check_align(causal: bool, causal_align) -> bool:
    """Validate `causal_align`; True when the call is bottom-right causal."""
    if causal_align not in ALIGNS:
        raise ValueError(
            f"causal_align must be one of {', '.join(map(repr, ALIGNS))}, got {causal_align!r}"
        )
    if causal_align == "bottom_right" and not causal:
        raise ValueError(
            "causal_align='bottom_right' needs causal=True (it says where the causal diagonal "
            "lies when query and key lengths differ)"
        )
    return causal_align == "bottom_right"


def offset(seq_q: int, seq_k: int) -> int:
    """c such that query i sees keys j <= i + c under the bottom-right alignment."""
    return seq_k - seq_q


def _plan(seq_q: int, seq_k: int) -> tuple[int, tuple[int, int] | None]:
    """(query rows that see no key, the band for the rest or None for top-left causal)."""
    c = offset(seq_q, seq_k)
    if c < 0:
        return -c, None
    return 0, (None if c == 0 else (seq_q + seq_k, c))


def forward(q, k, v, *, scale, softcap=None, config=None):
    """(out, lse) of bottom-right causal attention (`flashgen.kernels.fwd.forward`'s contract;
    `softcap` and `config` as there: `flashgen.kernels.plans`). Every path passes the cap on:
    the cap applies to the scores before the mask, so it commutes with the band and the rows
    this plan drops."""
    skip, band = _plan(q.shape[2], k.shape[2])
    if skip == 0:
        if band is None:
            return fwd.forward(q, k, v, causal=True, scale=scale, softcap=softcap, config=config)
        return fwd.forward(
            q, k, v, causal=False, scale=scale, window=band, softcap=softcap, config=config
        )
    out = new_out(q, zeros=True)  # the layout `fwd.forward` gives (`flashgen.kernels.layout`)
    lse = torch.full(q.shape[:3], float("inf"), dtype=torch.float32, device=q.device)
    if skip < q.shape[2]:
        rows_out, rows_lse = fwd.forward(
            q[:, :, skip:], k, v, causal=True, scale=scale, softcap=softcap, config=config
        )
        out[:, :, skip:] = rows_out
        lse[:, :, skip:] = rows_lse
    return out, lse


def backward(do, q, k, v, out, lse, *, scale, needs, softcap=None, config=None):
    """(dq, dk, dv) of bottom-right causal attention (`flashgen.kernels.bwd.backward`'s
    contract: None where `needs` says a gradient is not wanted; `softcap` as `forward`)."""
    skip, band = _plan(q.shape[2], k.shape[2])
    if skip == 0:
        return bwd.backward(
            do, q, k, v, out, lse, causal=band is None, scale=scale, needs=needs, window=band,
            softcap=softcap, config=config,
        )  # fmt: skip
    dq = torch.zeros(q.shape, dtype=q.dtype, device=q.device) if needs[0] else None
    dk = torch.zeros(k.shape, dtype=k.dtype, device=k.device) if needs[1] else None
    dv = torch.zeros(v.shape, dtype=v.dtype, device=v.device) if needs[2] else None
    if skip >= q.shape[2]:
        return dq, dk, dv
    rows = slice(skip, None)
    gq, gk, gv = bwd.backward(
        do[:, :, rows], q[:, :, rows], k, v, out[:, :, rows], lse[:, :, rows],
        causal=True, scale=scale, needs=needs, softcap=softcap, config=config,
    )  # fmt: skip
    if dq is not None:
        dq[:, :, rows] = gq
    return dq, gk if needs[1] else dk, gv if needs[2] else dv
