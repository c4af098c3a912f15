"""The key ranges a boolean mask tensor leaves visible, per block of 64 query rows, for the Hopper
forward (templates/attn_fwd_hopper.py.jinja, MASK_RANGES).

Why: that kernel reads a general [Sq, Sk] mask tile by tile over every key tile, visible or
not: it is not told that HF's [B, 1, N, N] causal-and-padding mask hides the upper triangle and
the padding (session 30 B1: 0.46x the unmasked kernel's TFLOP/s on the visible pairs, against
0.94x for the same mask as causal flag plus key-padding mask). Most rows of such a mask see one
contiguous run of keys, all of whose keys many rows see whole. So per block of RANGE_ROWS query
rows the table holds (kv_lo, kv_hi): every key any row of the block sees lies in [kv_lo,
kv_hi); and (fv_lo, fv_hi): every row of the block sees every key of it (the longest such run;
empty where none). The kernel, as it does with a window's band, walks only the key tiles within
[kv_lo, kv_hi) and reads the mask only on tiles not inside [fv_lo, fv_hi). The bounds are
exact for the tiles the kernel skips or runs unmasked whatever the mask (a hole inside [kv_lo,
kv_hi), a second fully visible run: those tiles are masked as before), so any mask gives the
same result; structured masks gain.

Built on the mask's device by tensor reductions (no host sync: capturable), once per call: one
pass over the mask (64 MB at 4 x 4k x 4k) and a few [B, H, Sq / 64, Sk] ones.
"""

from __future__ import annotations

import os

import torch

ENV = "FLASHGEN_MASK_RANGES"
RANGE_ROWS = 64  # query rows a table entry covers: every Hopper config's rows come in 64s


def enabled() -> bool:
    """Opt-in (FLASHGEN_MASK_RANGES=1, read when a launch plan is made). On the H200 (benchmarks/
    RESULTS.md, session 31 B1) it beat the default family only at head dim 128 on a mask with
    long visible runs (1.08x; 0.85x at head dim 64); without ranges that family read every
    tile of the same mask at 2.5x the default's time, and a mask without long runs leaves the
    ranges nothing to skip (not measured): not a default choice."""
    return os.environ.get(ENV) == "1"


def key_ranges(mask: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(table, stride_b, stride_h) for `mask`, a boolean [B, H, Sq, Sk] view with 0 strides
    along broadcast dims (what the kernel reads; a table is built once for what is shared):
    table int32 [Bm, Hm, cdiv(Sq, RANGE_ROWS), 4] holding (kv_lo, kv_hi, fv_lo, fv_hi) in keys
    (see the module docstring; a block whose rows see no key gets (0, 0, 0, 0)), and its
    strides along the batch and head dims in elements (0 where the mask broadcasts)."""
    if mask.dtype != torch.bool or mask.dim() != 4:
        raise ValueError(f"key_ranges takes a boolean [B, H, Sq, Sk] mask, got {mask.dtype} "
                         f"{tuple(mask.shape)}")  # fmt: skip
    b, h, sq, sk = mask.shape
    m = mask[:1] if mask.stride(0) == 0 or b == 1 else mask
    m = m[:, :1] if mask.stride(1) == 0 or h == 1 else m
    bm, hm = m.shape[0], m.shape[1]
    blocks = -(-sq // RANGE_ROWS)
    pad = blocks * RANGE_ROWS - sq
    # rows past Sq are not stored: "sees nothing" for the any-reduction, "sees everything" for
    # the all-reduction, so they constrain neither
    rows_any = _rows(m, pad, False, bm, hm, blocks, sk).any(3)
    rows_all = _rows(m, pad, True, bm, hm, blocks, sk).all(3)
    keys = torch.arange(sk, device=m.device, dtype=torch.int32)
    kv_hi = torch.where(rows_any, keys + 1, 0).amax(-1)
    # a block that sees no key: kv_hi = 0, and kv_lo (Sk) comes down to it
    kv_lo = torch.minimum(torch.where(rows_any, keys, sk).amin(-1), kv_hi)
    # the longest run of keys every row sees: at each key, the length of the run ending there
    last_gap = torch.where(rows_all, -1, keys).cummax(-1).values
    run = keys - last_gap
    fv_len, fv_end = run.max(-1)
    fv_hi = torch.where(fv_len > 0, fv_end + 1, 0)
    table = torch.stack([kv_lo, kv_hi, fv_hi - fv_len, fv_hi], -1).to(torch.int32).contiguous()
    stride_b = hm * blocks * 4 if bm > 1 else 0
    stride_h = blocks * 4 if hm > 1 else 0
    return table, stride_b, stride_h


def _rows(m, pad: int, fill: bool, bm: int, hm: int, blocks: int, sk: int) -> torch.Tensor:
    """m [bm, hm, Sq, sk] padded with `pad` rows of `fill` and cut in blocks of RANGE_ROWS."""
    if pad:
        extra = torch.full((bm, hm, pad, sk), fill, dtype=torch.bool, device=m.device)
        m = torch.cat([m, extra], 2)
    return m.reshape(bm, hm, blocks, RANGE_ROWS, sk)
