"""The merge of the Hopper forward's stream-K launch (templates/attn_fwd_hopper.py.jinja,
STREAM_K): where one program's share of the key tiles ends inside an item, that item's two runs
were stored as parts (O / l in float32 and the base-2 lse of each run's keys), and this kernel
combines each such pair by log-sum-exp into out and lse.

Why a kernel of its own, not the decode family's combine: the split items are spread over the
output (one per boundary between programs), not the contiguous rows the combine walks; and it
is plain Triton, so its numerics are tested on the CPU in the interpreter.
"""

from __future__ import annotations

import triton
import triton.language as tl

LN2 = tl.constexpr(0.6931471805599453)


def runs(total: int, grid: int, n_kt: int) -> list[list[tuple[int, int, int, int]]]:
    """Program p's runs, [(item, first key tile, tiles, slot or -1)], as the kernel walks them
    (`_stream_range` and `_unit` of the template): program p takes the key tiles
    [p * total // grid, (p + 1) * total // grid) of the items' tiles in order, one item's at a
    time; a run starting inside an item is stored in slot 2 (p - 1) + 1, one ending inside an
    item in slot 2 p, whole items go to out. For the tests and the host's checks."""
    out = []
    for p in range(grid):
        t, end, mine = p * total // grid, (p + 1) * total // grid, []
        while t < end:
            item, k_lo = divmod(t, n_kt)
            n_k = min(n_kt - k_lo, end - t)
            slot = 2 * (p - 1) + 1 if k_lo > 0 else (2 * p if n_k < n_kt else -1)
            mine.append((item, k_lo, n_k, slot))
            t += n_k
        out.append(mine)
    return out


@triton.jit
def stream_merge_kernel(
    Part, PartLse, Out, Lse, TOTAL, GRID, N_KT, NUM_M, SEQ_Q,
    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    """Boundary b = program_id(0) + 1 (between programs b - 1 and b), rows program_id(1) *
    ROWS + [0, ROWS) of its item: if the boundary's tile lies inside an item, that item's
    start (slot 2 (b - 1), from program b - 1) and end (slot 2 (b - 1) + 1, from program b)
    are merged: out = (w0 o0 + w1 o1) / (w0 + w1), w = 2^(lse - max), lse = max +
    log2(w0 + w1) in natural log. Out contiguous [B * H * SEQ_Q, HEAD_DIM], Lse [B * H *
    SEQ_Q]; Part [2 (GRID - 1) * BLOCK_M, HEAD_DIM], PartLse [2 (GRID - 1) * BLOCK_M]. Both
    runs see at least one key (the first from key 0, the second from a tile start below the
    keys' end), so every lse is finite."""
    b = tl.program_id(0).to(tl.int64) + 1
    t_b = b * TOTAL // GRID
    k_lo = t_b % N_KT
    if k_lo != 0:
        item = t_b // N_KT
        m0 = (item % NUM_M) * BLOCK_M
        r = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
        d = tl.arange(0, HEAD_DIM)
        ok = (m0 + r < SEQ_Q) & (r < BLOCK_M)
        s0 = 2 * (b - 1) * BLOCK_M + r
        s1 = s0 + BLOCK_M
        l0 = tl.load(PartLse + s0, mask=ok, other=0.0)
        l1 = tl.load(PartLse + s1, mask=ok, other=0.0)
        m = tl.maximum(l0, l1)
        w0 = tl.math.exp2(l0 - m)
        w1 = tl.math.exp2(l1 - m)
        total = w0 + w1
        o0 = tl.load(Part + s0[:, None] * HEAD_DIM + d[None, :], mask=ok[:, None], other=0.0)
        o1 = tl.load(Part + s1[:, None] * HEAD_DIM + d[None, :], mask=ok[:, None], other=0.0)
        o = (o0 * w0[:, None] + o1 * w1[:, None]) / total[:, None]
        row = (item // NUM_M) * SEQ_Q + m0 + r
        tl.store(Out + row[:, None] * HEAD_DIM + d[None, :], o.to(Out.dtype.element_ty),
                 mask=ok[:, None])  # fmt: skip
        tl.store(Lse + row, (m + tl.log2(total)) * LN2, mask=ok)
