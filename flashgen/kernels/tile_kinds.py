"""The kernels behind `flashgen.kernels.block_mask.tile_lists`: what each tile of a boolean mask
holds (none, some or all of its scores visible), in one read of the mask, then each block's
lists of its whole and partial tiles.

Why a kernel: the same answer from tensor reductions (byte-wise max and min along each tile's
keys, then over its rows) took two PyTorch reduction kernels of ~0.76 ms each for HF's
[4, 1, 4096, 4096] mask on the H200 (benchmarks/RESULTS.md, session 14 B1), longer than the
block-sparse forward they served (0.69 ms): a reduction over a strided inner block is not what
those kernels are built for. One program per tile reads its [BLOCK_M, BLOCK_N] bytes once
and writes one byte. The lists were then a stack, a stable sort and a sum over those bytes,
about ten PyTorch operations a call, three calls a forward+backward: host time that made a dense
mask's forward on 4x16x2048 (head dim 64) run 0.67x SDPA's on an H100 for 0.17 ms of GPU time
(benchmarks/RESULTS.md, session 47); `tile_lists_kernel` writes them in one more launch. Their
own module so that importing `block_mask` does not import Triton.
"""

import triton
import triton.language as tl

NONE, SOME, ALL = 0, 1, 2  # a tile's kind: no score visible, some, every one
# (as the kernels read them: a global a Triton kernel reads must be a constexpr)
_NONE, _SOME, _ALL = tl.constexpr(NONE), tl.constexpr(SOME), tl.constexpr(ALL)


@triton.jit
def tile_kinds_kernel(
    Mask, Kinds, stride_b, stride_h, stride_m, stride_n, HEADS, SEQ_Q, SEQ_K, NUM_M, NUM_N,
    PAST_SQ_COUNTS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Kinds[bh, m, n] (int8, [B * H, NUM_M, NUM_N] contiguous) = the kind of the tile of query
    rows m * BLOCK_M + [0, BLOCK_M) and keys n * BLOCK_N + [0, BLOCK_N) of Mask (bytes, 0 =
    hidden; batch entry bh // HEADS, head bh % HEADS). Keys past SEQ_K are hidden: such a tile
    is never ALL. Rows past SEQ_Q see nothing; with PAST_SQ_COUNTS False they do not keep a
    tile from ALL (a walk per query block never stores them), with True they do (a walk per
    key block loads its query tiles whole)."""
    bh = tl.program_id(0)
    m = tl.program_id(1)
    n = tl.program_id(2)
    rows = m * BLOCK_M + tl.arange(0, BLOCK_M)
    keys = n * BLOCK_N + tl.arange(0, BLOCK_N)
    in_q = rows < SEQ_Q
    base = Mask + (bh // HEADS).to(tl.int64) * stride_b + (bh % HEADS).to(tl.int64) * stride_h
    ptrs = base + rows.to(tl.int64)[:, None] * stride_m + keys.to(tl.int64)[None, :] * stride_n
    seen = (tl.load(ptrs, mask=in_q[:, None] & (keys < SEQ_K)[None, :], other=0) != 0).to(tl.int32)
    any_seen = tl.max(tl.max(seen, 1), 0)
    row_all = tl.min(seen, 1)  # [BLOCK_M]: 1 where the row sees every key of the tile
    if not PAST_SQ_COUNTS:
        row_all = tl.where(in_q, row_all, 1)
    kind = tl.where(tl.min(row_all, 0) > 0, 2, any_seen)
    tl.store(Kinds + (bh * NUM_M + m).to(tl.int64) * NUM_N + n, kind.to(tl.int8))


@triton.jit
def tile_lists_kernel(
    Kinds, Idx, Cnt, stride_x, stride_y, NUM_X, NUM_Y, CHUNK: tl.constexpr,
):  # fmt: skip
    """Idx / Cnt of `block_mask.tile_lists` from the kinds: for walk block x of entry bh (one
    program each), Idx[bh, x, 0, :] lists the tiles y whose kind is ALL, ascending, and
    Idx[bh, x, 1, :] those whose kind is SOME, each list padded with -1 to NUM_Y; Cnt[bh, x]
    holds the two counts. The kind of tile y is Kinds[bh, x * stride_x + y * stride_y] ([B *
    H, NUM_M, NUM_N] int8: stride_x = NUM_N, stride_y = 1 walking per query block, swapped per
    key block). A running count places each chunk's tiles after the earlier ones (a prefix
    sum inside the chunk)."""
    bh = tl.program_id(0).to(tl.int64)
    x = tl.program_id(1)
    kinds = Kinds + bh * NUM_X * NUM_Y + x * stride_x
    out = Idx + (bh * NUM_X + x) * 2 * NUM_Y
    n_whole = 0
    n_part = 0
    for start in range(0, NUM_Y, CHUNK):
        ys = start + tl.arange(0, CHUNK)
        kind = tl.load(kinds + ys * stride_y, mask=ys < NUM_Y, other=_NONE)
        whole = (kind == _ALL).to(tl.int32)
        part = (kind == _SOME).to(tl.int32)
        tl.store(out + n_whole + tl.cumsum(whole, 0) - 1, ys, mask=whole > 0)
        tl.store(out + NUM_Y + n_part + tl.cumsum(part, 0) - 1, ys, mask=part > 0)
        n_whole += tl.sum(whole, 0)
        n_part += tl.sum(part, 0)
    for start in range(0, NUM_Y, CHUNK):  # past the counts: -1, so the output is defined
        ys = start + tl.arange(0, CHUNK)
        tl.store(out + ys, -1, mask=(ys >= n_whole) & (ys < NUM_Y))
        tl.store(out + NUM_Y + ys, -1, mask=(ys >= n_part) & (ys < NUM_Y))
    tl.store(Cnt + (bh * NUM_X + x) * 2, n_whole)
    tl.store(Cnt + (bh * NUM_X + x) * 2 + 1, n_part)
