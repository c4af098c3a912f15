"""Which key tiles a boolean mask tensor leaves whole, in part or not at all, per query block.

Why: a forward reading a [Sq, Sk] boolean mask tile by tile pays a tile load and a few
operations a score on every tile, visible or not (on the H200 HF's [B, 1, N, N] causal-and-
padding mask at 4k ran the portable forward at 1.74 ms against 0.98 for no mask at all, and it
walks every tile: the kernel is not told the mask is causal). Most tiles of a structured mask
are all hidden (skipped) or all visible (run without the mask, as the unmasked kernel does);
only the rest need the mask. `tile_lists` says which, once per call, in two small kernel
launches over the mask (`flashgen.kernels.tile_kinds`; FlexAttention's block masks are the same
idea); the portable forward and the split backward's dQ kernel, which walk key tiles per query
block, then walk the whole tiles and the partial ones as two lists, and the dK/dV kernel, which
walks query tiles per key block, the lists of those (`per="key"`) for each query head of its
group (templates/attn_fwd.py.jinja and attn_bwd.py.jinja, BLOCK_SPARSE; each kernel the lists of
its own tiles).

Used for a boolean mask that varies along query rows, without causal, window or lengths (those
bound the walk their own way) and on calls large enough (`MIN_SCORES`) that the lists' host
work and their pass over the mask (`flashgen.kernels.tile_kinds`) are small beside the forward
they shorten. FLASHGEN_BLOCK_SPARSE=0 (`ENV`, read when a launch plan is made) turns it off:
every tile then reads the mask. On the H200 HF's [4, 1, 4096, 4096] causal-and-padding mask
ran its forward+backward in 4.2-4.3 ms with the walk against 6.2 tile by tile, its forward in
1.32 ms against 1.75, with the lists built by tensor reductions that alone took 1.5 ms of it
(benchmarks/RESULTS.md, session 14 B1); the walk's forward and backward match float64 in the
bf16 GPU tests and the CPU interpreter's.
"""

from __future__ import annotations

import os

import torch

ENV = "FLASHGEN_BLOCK_SPARSE"

# Sq * Sk below which the lists are not built (their two launches and the kernels' second walk
# cost more than they save). Since the lists are one kernel launched directly, 1k x 1k dense
# masks gain from them on an H100: 8 and 16 x 16 heads of 64, forward 1.87-1.95x SDPA against
# 1.08x without, forward+backward 1.36-1.56x against 0.93-0.95x; at 512 x 512 no size was
# measured (benchmarks/RESULTS.md, session 47).
MIN_SCORES = 1 << 20


def eligible(mask, causal: bool, window, bounds, per_key: bool, *, sq: int, sk: int) -> bool:
    """Whether a forward call walks block-sparse lists (see the module docstring)."""
    return (
        os.environ.get(ENV) != "0"
        and mask is not None
        and mask.dtype == torch.bool
        and not per_key
        and not causal
        and window is None
        and bounds is None
        and sq * sk >= MIN_SCORES
    )


def tile_lists(mask: torch.Tensor, block_m: int, block_n: int, per: str = "query"):
    """(idx, cnt, stride_b, stride_h) for boolean `mask`, an expanded [B, H, Sq, Sk] view (0
    strides along broadcast dims: the lists are built once for what is shared), cut in tiles
    of block_m query rows and block_n keys.

    per="query" (the forward's and the dQ kernel's walk): idx int32 [Bm, Hm, Sq / block_m, 2,
    Sk / block_n] (both rounded up): for query block m, row 0 lists the key tiles every one of
    its valid rows sees whole, ascending, row 1 the tiles some of its rows see; cnt int32
    [Bm, Hm, Sq / block_m, 2], how many of each. Rows past Sq do not count (they are never
    stored); a key tile past Sk in part is never whole.
    per="key" (the dK/dV kernel's walk): the same per key block: idx [Bm, Hm, Sk / block_n, 2,
    Sq / block_m] lists the query tiles that see the key block whole, then in part; a query
    tile past Sq in part is never whole (that kernel loads whole tiles without bounds).

    Tiles no row sees are in neither list; entries past a list's count are -1. Bm, Hm are 1
    along a broadcast dim. stride_b and stride_h count blocks of the walk (0 along a broadcast
    dim): block x of (b, h) is block j = b * stride_b + h * stride_h + x, its lists start at
    idx[j * 2 * L] (L the lists' length, the last dim of idx) and its counts at cnt[2 * j]."""
    if per not in ("query", "key"):
        raise ValueError(f"per must be 'query' or 'key', got {per!r}")
    batch, heads, sq, sk = mask.shape
    # what is shared is built once: an entry or a head of its own only where its stride is not 0
    bm_ = 1 if mask.stride(0) == 0 else batch
    hm_ = 1 if mask.stride(1) == 0 else heads
    nm, nn = -(-sq // block_m), -(-sk // block_n)
    blocks, length = (nm, nn) if per == "query" else (nn, nm)
    kinds = torch.empty(bm_ * hm_, nm, nn, dtype=torch.int8, device=mask.device)
    idx = torch.empty(bm_, hm_, blocks, 2, length, dtype=torch.int32, device=mask.device)
    cnt = torch.empty(bm_, hm_, blocks, 2, dtype=torch.int32, device=mask.device)
    if not kinds.numel():  # no tile: empty lists
        cnt.zero_()
    else:
        keys = mask.view(torch.uint8)
        ints = (*mask.stride(), hm_, sq, sk, nm, nn)
        aligned = not keys.data_ptr() & 15
        key = (keys.device, aligned, bm_ * hm_, ints, per, block_m, block_n)
        launches = _launches.get(key)
        if launches is None:
            launches = _keep(key, keys, aligned, bm_ * hm_, nm, nn, per == "key", block_m, block_n)
        kinds_run, lists_run, lists_ints = launches
        kinds_run(keys, kinds, *ints)  # each tile's kind in one read of the mask
        lists_run(kinds, idx, cnt, *lists_ints)
    stride_b = 0 if bm_ == 1 else hm_ * blocks
    stride_h = 0 if hm_ == 1 else blocks
    return idx, cnt, stride_b, stride_h


def _keep(key, keys, aligned: bool, entries: int, nm: int, nn: int, per_key: bool, bm, bn):
    """`tile_lists`'s two launches for `key`, kept (`flashgen.kernels.launch.keep`), with the
    lists kernel's int arguments: each tile's kind, then each walk block's lists, through
    Triton's JIT the first time and directly after."""
    from .launch import Launch, direct_device, keep
    from .tile_kinds import tile_kinds_kernel, tile_lists_kernel

    blocks, length = (nn, nm) if per_key else (nm, nn)
    flags = {"PAST_SQ_COUNTS": per_key, "BLOCK_M": bm, "BLOCK_N": bn}
    kinds = Launch(tile_kinds_kernel, (entries, nm, nn), flags, {}, direct_device(keys, aligned))
    chunk = min(max(1 << (length - 1).bit_length(), 16), 1024)
    # (the lists kernel reads and writes new tensors only: aligned)
    lists = Launch(
        tile_lists_kernel, (entries, blocks), {"CHUNK": chunk}, {}, direct_device(keys, True)
    )
    # per query block its row of kinds, per key block its column: (stride_x, stride_y, ...)
    steps = (1, nn) if per_key else (nn, 1)
    return keep(_launches, key, (kinds, lists, (*steps, blocks, length)))


# `tile_lists`'s launch pairs by what Triton specialises the kernels on (the mask's device and
# alignment, its shared shape, strides and tile counts, the walk and the tile sizes; the other
# tensors are new, so aligned). Why kept: each launch through the JIT and the PyTorch operations
# that built the lists before `tile_lists_kernel` were most of a dense mask's extra host time
# (benchmarks/RESULTS.md, session 47). Bounded by `launch.keep`.
_launches: dict = {}
