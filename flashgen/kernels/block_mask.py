"""Which key tiles a boolean mask tensor leaves whole, in part or not at all, per query block.

Why: a forward reading a [Sq, Sk] boolean mask tile by tile pays a tile load and a few
operations a score on every tile, visible or not (on the H200 HF's [B, 1, N, N] causal-and-
padding mask at 4k ran the portable forward at 1.74 ms against 0.98 for no mask at all, and it
walks every tile: the kernel is not told the mask is causal). Most tiles of a structured mask
are all hidden (skipped) or all visible (run without the mask, as the unmasked kernel does);
only the rest need the mask. `tile_lists` says which, once per call, with a few tensor
operations over the mask (FlexAttention's block masks are the same idea); the portable forward
and the split backward's dQ kernel, which also walk key tiles per query block, then walk the
whole tiles and the partial ones as two lists (templates/attn_fwd.py.jinja and
attn_bwd.py.jinja, BLOCK_SPARSE; each with the lists of its own tiles). The dK/dV kernel, which
walks query blocks per key block, still reads the mask tile by tile.

Used for a boolean mask that varies along query rows, without causal, window or lengths (those
bound the walk their own way) and on calls large enough (`MIN_SCORES`) that the lists' host
work and their pass over the mask are small beside the forward they shorten; and only when
FLASHGEN_BLOCK_SPARSE=1 (`ENV`, read when a launch plan is made): the walk matches float64 in
the CPU interpreter's tests and the forward's ran on the H200 (HF's [4, 1, 4096, 4096] mask:
1.17 ms against 1.74 for the tile-by-tile forward, and its outputs under five tile configs
agreed within 1e-3), but its bf16 GPU test against float64 has not run yet (nor has the dQ
kernel's walk run on a GPU), so it is not on by default.
"""

from __future__ import annotations

import os

import torch

ENV = "FLASHGEN_BLOCK_SPARSE"

# Sq * Sk below which the lists are not built: at 1k x 1k a forward is ~tens of µs, about
# what building them costs on the host.
MIN_SCORES = 1 << 21


def eligible(mask, causal: bool, window, bounds, per_key: bool, *, sq: int, sk: int) -> bool:
    """Whether a forward call walks block-sparse lists (see the module docstring)."""
    return (
        os.environ.get(ENV) == "1"
        and mask is not None
        and mask.dtype == torch.bool
        and not per_key
        and not causal
        and window is None
        and bounds is None
        and sq * sk >= MIN_SCORES
    )


def tile_lists(mask: torch.Tensor, block_m: int, block_n: int):
    """(idx, cnt, stride_b, stride_h) for boolean `mask`, an expanded [B, H, Sq, Sk] view (0
    strides along broadcast dims: the lists are built once for what is shared).

    idx: int32 [Bm, Hm, Sq / block_m, 2, Sk / block_n] (both rounded up): for query block m,
    row 0 lists the key tiles every one of its valid rows sees whole, ascending, row 1 the
    tiles some of its rows see; cnt: int32 [Bm, Hm, Sq / block_m, 2], how many of each. Tiles no
    row sees are in neither. A key tile past Sk in part is never whole. Bm, Hm are 1 along a
    broadcast dim. stride_b and stride_h count query blocks (0 along a broadcast dim): query
    block m of (b, h) is block j = b * stride_b + h * stride_h + m, its lists start at
    idx[j * 2 * (Sk / block_n)] and its counts at cnt[2 * j]."""
    b_str, h_str = mask.stride(0), mask.stride(1)
    compact = mask[: 1 if b_str == 0 else None, : 1 if h_str == 0 else None]
    bm_, hm_, sq, sk = compact.shape
    nm, nn = -(-sq // block_m), -(-sk // block_n)
    if nm * block_m != sq or nn * block_n != sk:  # ragged: pad with hidden rows and keys
        padded = compact.new_zeros(bm_, hm_, nm * block_m, nn * block_n)
        padded[:, :, :sq, :sk] = compact
        compact = padded
    # Per (row, key tile) whether any / every key is visible: byte-wise max and min along the
    # contiguous keys (one read of the mask each, no wider copy of it: B7 on the H200 counted
    # with a bool -> int32 sum, which copied the mask to int32 first, 0.44 ms for a
    # [4, 1, 4096, 4096] mask), then over each tile's rows.
    rows = compact.view(torch.uint8).reshape(bm_, hm_, nm * block_m, nn, block_n)
    any_row, all_row = rows.amax(-1), rows.amin(-1)  # [Bm, Hm, rows, nn]
    if nm * block_m != sq:  # rows past Sq are never stored: they do not spoil a whole tile
        all_row[:, :, sq:] = 1
    seen = any_row.reshape(bm_, hm_, nm, block_m, nn).amax(3) > 0  # [Bm, Hm, nm, nn]
    # (a key tile past Sk in part has hidden padding keys: never whole)
    whole = all_row.reshape(bm_, hm_, nm, block_m, nn).amin(3) > 0
    kinds = torch.stack((whole, seen & ~whole), dim=3)  # [Bm, Hm, nm, 2, nn]
    # each list ascending, its tiles first: a stable sort on "not in the list"
    idx = torch.sort((~kinds).to(torch.uint8), dim=-1, stable=True).indices.to(torch.int32)
    cnt = kinds.sum(dim=-1, dtype=torch.int32)
    stride_b = 0 if bm_ == 1 else hm_ * nm
    stride_h = 0 if hm_ == 1 else nm
    return idx.contiguous(), cnt.contiguous(), stride_b, stride_h
