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

Attention dropout runs on the rows and keys the plan keeps, its draws numbered as the kernels
number a call of those rows and keys (`flashgen.kernels.dropout_ref`: flat row, key index), so
the forward and every backward, which run the same plan, draw the same mask; `keep_mask` gives
it at the whole call's positions for references.

A causal sliding window counted from that diagonal (`left` keys before it: query i sees
i + c - left <= j <= i + c, a KV cache under Mistral's window) is the band (left - c, c) while
c <= left. Past that, keys j < c - left are seen by no query: the kernels run on the keys from
there (a view; their gradients are zeros), where the offset is left again. The rows of a
negative c are dropped as above, the rest being a top-left causal window.
"""

from __future__ import annotations

import torch

from . import bias_grad, bwd, fwd
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


def first_key(seq_q: int, seq_k: int, left: int) -> int:
    """The first key any query sees under a bottom-right causal window of `left` keys before
    the diagonal (0 when the offset is within the window)."""
    return max(0, offset(seq_q, seq_k) - left)


def _plan(seq_q: int, seq_k: int, left: int | None = None):
    """(query rows that see no key, the first key any row sees, causal, the window for the
    rest: None for top-left causal; `left`: a causal window's keys before the diagonal)."""
    c = offset(seq_q, seq_k)
    if c < 0:  # rows i < -c see nothing; the rest are top-left over every key
        return -c, 0, True, (None if left is None else (left, 0))
    if left is None:
        return 0, 0, c == 0, (None if c == 0 else (seq_q + seq_k, c))
    start = first_key(seq_q, seq_k, left)  # keys before it are seen by no query
    c -= start
    return 0, start, c == 0, (left - c, c)


def _keys(t, start: int):
    return t if start == 0 else t[:, :, start:]


def _part(mask, skip: int, start: int):
    """The [B, H, Sq, Sk] mask view of the rows from `skip` and the keys from `start`."""
    if mask is None or (skip == 0 and start == 0):
        return mask
    return mask[:, :, skip:, start:]


def _alibi_shift(alibi, skip: int, start: int):
    """What to add to the lse of the rows the plan runs for it to be the call's (None: nothing):
    the kernels count ALiBi's slope * (j - i) from the plan's first row and key, which is the
    call's slope * (j - i) less slope * (start - skip), a constant per entry and head. The
    softmax does not see it, but the lse does, and attention sinks read the lse beside their
    own logit (`flashgen.runtime.sinks`): so the lse the forward returns is the call's, and the
    backward, whose kernels recompute the plan's scores, takes the shift off again.
    `alibi`: the checked slopes, float32 [B, Hq]."""
    if alibi is None or start == skip:
        return None
    return (alibi * float(start - skip)).unsqueeze(-1)


def forward(
    q, k, v, *, scale, softcap=None, config=None, left=None, mask=None, alibi=None, dropout=None
):  # fmt: skip
    """(out, lse) of bottom-right causal attention (`flashgen.kernels.fwd.forward`'s contract;
    `softcap`, `config`, `mask` (the expanded [B, H, Sq, Sk] view), `alibi` and `dropout` ((p,
    seed), drawn on the plan's rows and keys: `keep_mask`) as there:
    `flashgen.kernels.plans`; `left`: a causal window of left + 1 keys ending at the diagonal,
    or None). Every path passes the cap on: the cap applies to the scores before the mask, so
    it commutes with the band and the rows this plan drops. The mask is sliced with the rows
    and keys; ALiBi's slope * (j - i) is counted on the kept ones, a shift by a constant per
    row, which the softmax does not see; the lse returned is the call's (`_alibi_shift`)."""
    skip, start, causal, band = _plan(q.shape[2], k.shape[2], left)
    k, v = _keys(k, start), _keys(v, start)
    mask = _part(mask, skip, start)
    shift = _alibi_shift(alibi, skip, start)
    if skip == 0:
        out, lse = fwd.forward(
            q, k, v, causal=causal, scale=scale, window=band, softcap=softcap, config=config,
            mask=mask, alibi=alibi, dropout=dropout,
        )  # fmt: skip
        return out, (lse if shift is None or lse is None else lse + shift)
    out = new_out(q, zeros=True)  # the layout `fwd.forward` gives (`flashgen.kernels.layout`)
    lse = torch.full(q.shape[:3], float("inf"), dtype=torch.float32, device=q.device)
    if skip < q.shape[2]:
        rows_out, rows_lse = fwd.forward(
            q[:, :, skip:], k, v, causal=True, scale=scale, window=band, softcap=softcap,
            config=config, mask=mask, alibi=alibi, dropout=dropout,
        )  # fmt: skip
        out[:, :, skip:] = rows_out
        lse[:, :, skip:] = rows_lse if shift is None else rows_lse + shift
    return out, lse


def backward(
    do, q, k, v, out, lse, *, scale, needs, softcap=None, config=None, left=None, mask=None,
    alibi=None, dropout=None,
):  # fmt: skip
    """(dq, dk, dv) of bottom-right causal attention (`flashgen.kernels.bwd.backward`'s
    contract: None where `needs` says a gradient is not wanted; `softcap`, `left`, `mask`,
    `alibi` and `dropout` as `forward`)."""
    skip, start, causal, band = _plan(q.shape[2], k.shape[2], left)
    mask = _part(mask, skip, start)
    if skip == 0 and start == 0:
        return bwd.backward(
            do, q, k, v, out, lse, causal=causal, scale=scale, needs=needs, window=band,
            softcap=softcap, config=config, mask=mask, alibi=alibi, dropout=dropout,
        )  # fmt: skip
    if skip >= q.shape[2]:  # no row sees a key: no gradient anywhere
        return tuple(
            torch.zeros_like(t) if n else None for t, n in zip((q, k, v), needs, strict=True)
        )
    rows = slice(skip, None)
    shift = _alibi_shift(alibi, skip, start)
    lse_rows = lse[:, :, rows] if shift is None else lse[:, :, rows] - shift
    gq, gk, gv = bwd.backward(
        do[:, :, rows], q[:, :, rows], _keys(k, start), _keys(v, start), out[:, :, rows],
        lse_rows, causal=causal, scale=scale, needs=needs, window=band, softcap=softcap,
        config=config, mask=mask, alibi=alibi, dropout=dropout,
    )  # fmt: skip
    return _padded(gq, q.shape, skip), _padded(gk, k.shape, start), _padded(gv, v.shape, start)


def _padded(g, shape, start: int, end: int = 0):
    """A gradient of the rows (dim 2) from `start`, and with `end` of the columns (dim 3) from
    `end` too, as one of the whole `shape`: zeros before them; `g` itself when it is whole."""
    if g is None or (start == 0 and end == 0):
        return g
    full = torch.zeros(shape, dtype=g.dtype, device=g.device)
    full[:, :, start:, end:] = g
    return full


def bias_backward(
    do, q, k, v, out, lse, mask, *, scale, softcap=None, config=None, left=None, alibi=None,
    dropout=None,
):  # fmt: skip
    """(dq, dbias float32 [B, Hq, Sq, Sk]) of bottom-right causal attention with the additive
    `mask` (the expanded view) that requires grad (`flashgen.kernels.bias_grad.dq_dbias` on
    the rows and keys `forward` ran, with its `dropout`; zeros for the rest: no row saw those
    keys, and the rows that see none have no gradient)."""
    skip, start, causal, band = _plan(q.shape[2], k.shape[2], left)
    rows = slice(skip, None)
    if skip >= q.shape[2]:
        return torch.zeros_like(q), torch.zeros(mask.shape, dtype=torch.float32, device=q.device)
    shift = _alibi_shift(alibi, skip, start)
    gq, gb = bias_grad.dq_dbias(
        do[:, :, rows], q[:, :, rows], _keys(k, start), _keys(v, start), out[:, :, rows],
        lse[:, :, rows] if shift is None else lse[:, :, rows] - shift,
        _part(mask, skip, start), causal=causal, scale=scale, window=band,
        softcap=softcap, config=config, alibi=alibi, dropout=dropout,
    )  # fmt: skip
    return _padded(gq, q.shape, skip), _padded(gb, mask.shape, skip, start)


def keep_mask(seed: int, p: float, batch: int, heads: int, seq_q: int, seq_k: int, device,
              left: int | None = None):  # fmt: skip
    """The boolean keep mask [B, H, Sq, Sk] that bottom-right causal attention with dropout
    (p, seed) applies (`forward`): `flashgen.kernels.dropout.keep_mask` of the rows and keys
    the plan runs, placed at their positions; False where the plan runs nothing (rows that see
    no key, keys no row sees). For references and tests."""
    from .dropout import keep_mask as drawn

    skip, start, _, _ = _plan(seq_q, seq_k, left)
    keep = torch.zeros(batch, heads, seq_q, seq_k, dtype=torch.bool, device=device)
    if skip < seq_q:
        keep[:, :, skip:, start:] = drawn(
            seed, p, batch, heads, seq_q - skip, seq_k - start, device
        )
    return keep
