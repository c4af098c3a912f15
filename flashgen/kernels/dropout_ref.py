"""The dropout draw (`keep_tile`), shared by the attention kernels and the reference.

`keep_tile` (with `keep_of`, its elementwise core) is the one definition of which probabilities
are kept: the generated forward and backward kernels import it from here
(templates/attn_fwd.py.jinja, attn_bwd.py.jinja; the Hopper backward, attn_bwd_hopper.py.jinja,
calls `row_keys` and `keep_of` on its own layouts), and
`keep_mask_kernel` writes its flags out for references and tests
(`flashgen.kernels.dropout.keep_mask`). Its own module so that importing
`flashgen.kernels.dropout` does not import Triton.

Why a hash per score, not Philox: the draw runs once per score in the forward and again in
both backward kernels, beside two matrix products of head-dim multiply-adds on tensor cores,
so its integer work is what dropout costs. Philox (`tl.randint4x`, ten rounds of 32-bit
multiplies for four 32-bit words) was the first draw; even with each call's words split into
eight 16-bit draws (one per key of a group of eight, joined and reshaped into the tile through
shared memory), the dropout forward ran at 0.29x the unmasked kernel on the H200, bound by
integer work and by that reshape's shared memory (benchmarks/RESULTS.md, session 14). Here
each score takes one 32-bit integer hash of its own position: a row key (two hash rounds over
the seed and the flat row, once per row of a tile) mixed with the key index by one more round
without its last xorshift (`_mix32_high`), five shifts and xors, two 32-bit multiplies and a
compare a score, in registers, no reshape. On the H200 (session 16 B1, with the last xorshift)
the dropout forward ran at 0.48x the unmasked kernel: by estimate from the units' issue rates,
the draw's ~10 integer instructions a score cost about what the tile's two matrix products do
at head dim 128. The
mixing function is Chris Wellons' "lowbias32" (xorshift-multiply, constants found by search for
low avalanche bias); dropout needs draws that are uniform and unrelated between neighbouring
scores, which the tests check, not a cryptographic or a long-period generator.

A score is kept iff its 32-bit draw is >= threshold = p * 2**32 (so dropped with probability
within 2**-24 of p: the threshold is computed in float32), and the kept ones are scaled by
1 / (1 - p) by the caller.
"""

import triton
import triton.language as tl


@triton.jit
def _mix32(x):
    """lowbias32: a bijective avalanche of a uint32 (module docstring)."""
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    x ^= x >> 16
    return x


@triton.jit
def _mix32_high(x):
    """lowbias32 without its last xorshift, for draws compared against a threshold: that step
    (x ^= x >> 16) leaves the top 16 bits as they are, and a compare with a threshold is
    decided by them except when they equal the threshold's own (probability 2**-16), so
    leaving it out changes no keep rate by more than that and saves two integer instructions a
    score (of about ten). Each remaining step is a bijection, so a uniform input stays uniform."""
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    return x


@triton.jit
def row_keys(seed, rows):
    """uint32 keys of the flat query rows `rows` (int64; bh * Sq + i) for `seed` (int64): the
    per-row half of the draw, hashed once per row of a tile."""
    rows = rows.to(tl.int64)
    seed = seed.to(tl.int64)
    lo = rows.to(tl.uint32)  # (the casts keep the low 32 bits)
    hi = (rows >> 32).to(tl.uint32)
    s_lo = seed.to(tl.uint32)
    s_hi = (seed >> 32).to(tl.uint32)
    return _mix32(_mix32(lo ^ s_lo) ^ hi ^ s_hi)


@triton.jit
def keep_tile(seed, rows, start_n, threshold, BLOCK_N: tl.constexpr):
    """Keep flags [len(rows), BLOCK_N] for the flat query rows `rows` (int64; bh * Sq + i) and
    the keys start_n + [0, BLOCK_N) (keys counted from the sequence's first key): key j of row
    r draws _mix32_high(row_keys(seed, r) ^ (j * 0x9E3779B9)) and is kept iff that is >= threshold
    (uint32, `threshold_of`). The key is spread by the golden-ratio multiplier before the xor
    so that neighbouring keys of two rows with neighbouring row keys do not share inputs."""
    return keep_of(
        row_keys(seed, rows)[:, None], (start_n + tl.arange(0, BLOCK_N))[None, :], threshold
    )


@triton.jit
def keep_of(row_key, key, threshold):
    """Whether key index `key` (counted from the sequence's first key) of the row whose
    `row_keys` value is `row_key` is kept: elementwise, so a kernel whose tiles carry layouts
    (the Hopper backward, Gluon) broadcasts its own row keys and key indices into it."""
    return _mix32_high(row_key ^ (key.to(tl.uint32) * 0x9E3779B9)) >= threshold


@triton.jit
def threshold_of(p):
    """The uint32 threshold of drop probability `p` (a float in [0, 1)): p * 2**32."""
    return tl.cast(p * 4294967296.0, tl.uint32)


@triton.jit(do_not_specialize=["seed"])
def keep_mask_kernel(Out, seed, p, ROWS, SEQ_K, BLOCK: tl.constexpr):
    """Out[r, j] (int8, flat rows r = bh * Sq + i, keys j counted from the sequence's first
    key) = whether the kernels keep that probability (`keep_tile`)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    start_n = tl.program_id(1) * BLOCK
    cols = start_n + tl.arange(0, BLOCK)
    keep = keep_tile(seed, rows.to(tl.int64), start_n, threshold_of(p), BLOCK)
    ok = (rows[:, None] < ROWS) & (cols[None, :] < SEQ_K)
    tl.store(Out + rows.to(tl.int64)[:, None] * SEQ_K + cols[None, :], keep.to(tl.int8), mask=ok)
