"""The dropout keep mask as a kernel of its own (`flashgen.kernels.dropout.keep_mask`): the same
`tl.rand` counter the attention kernels use, written out for references and tests. Its own
module so that importing `flashgen.kernels.dropout` does not import Triton."""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["seed"])
def keep_mask_kernel(Out, seed, p, ROWS, SEQ_K, BLOCK: tl.constexpr):
    """Out[r, j] = tl.rand(seed, r * SEQ_K + j) >= p for the flat rows r = bh * Sq + i."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    counter = rows.to(tl.int64)[:, None] * SEQ_K + cols[None, :]
    keep = tl.rand(seed, counter) >= p
    ok = (rows[:, None] < ROWS) & (cols[None, :] < SEQ_K)
    tl.store(Out + counter, keep.to(tl.int8), mask=ok)
