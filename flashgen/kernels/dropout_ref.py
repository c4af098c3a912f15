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
without its last xorshift; that round's first xorshift is linear over xor, so it is applied to
the row key once a row (`row_keys`) and to the key's product once a column (`key_code`),
leaving one xor, two 32-bit multiplies, one shift and xor and a compare a score (`draw_of`,
`keep_of`), in registers, no reshape. On the H200 (session 16 B1, with all three xorshifts per
score) the dropout forward ran at 0.48x the unmasked kernel: by estimate from the units' issue
rates, the draw's ~10 integer instructions a score cost about what the tile's two matrix
products do at head dim 128. Where kept probabilities go into a 16-bit matrix product, `kept`
zeroes the dropped ones with a select that stays on the fp32 value (see there). The
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
def _mix32_tail(x):
    """lowbias32 after its first xorshift and without its last (see `keep_of`): that last step
    (x ^= x >> 16) leaves the top 16 bits as they are, and a compare with a threshold is
    decided by them except when they equal the threshold's own (probability 2**-16), so
    leaving it out changes no keep rate by more than that and saves two integer instructions a
    score. Each remaining step is a bijection, so a uniform input stays uniform."""
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    return x


@triton.jit
def _xorshift16(x):
    """lowbias32's first step, x ^ (x >> 16): linear over xor, so applied to the row key and
    to the key's code separately (`keep_of`) it gives what it gives applied to their xor."""
    return x ^ (x >> 16)


@triton.jit
def row_keys(seed, rows):
    """uint32 keys of the flat query rows `rows` (int64; bh * Sq + i) for `seed` (int64): the
    per-row half of the draw, hashed once per row of a tile (two lowbias32 rounds, then the
    third round's first xorshift, which `keep_of` would otherwise apply to every score)."""
    rows = rows.to(tl.int64)
    seed = seed.to(tl.int64)
    lo = rows.to(tl.uint32)  # (the casts keep the low 32 bits)
    hi = (rows >> 32).to(tl.uint32)
    s_lo = seed.to(tl.uint32)
    s_hi = (seed >> 32).to(tl.uint32)
    return _xorshift16(_mix32(_mix32(lo ^ s_lo) ^ hi ^ s_hi))


@triton.jit
def keep_tile(seed, rows, start_n, threshold, BLOCK_N: tl.constexpr):
    """Keep flags [len(rows), BLOCK_N] for the flat query rows `rows` (int64; bh * Sq + i) and
    the keys start_n + [0, BLOCK_N) (keys counted from the sequence's first key): key j of row
    r draws lowbias32 (without its last xorshift) of R ^ (j * 0x9E3779B9), R = two lowbias32
    rounds of the seed and r, and is kept iff that is >= threshold (uint32, `threshold_of`).
    The key is spread by the golden-ratio multiplier before the xor so that neighbouring keys
    of two rows with neighbouring row keys do not share inputs."""
    return keep_of(
        row_keys(seed, rows)[:, None], (start_n + tl.arange(0, BLOCK_N))[None, :], threshold
    )


@triton.jit
def keep_of(row_key, key, threshold):
    """Whether key index `key` (counted from the sequence's first key) of the row whose
    `row_keys` value is `row_key` is kept: elementwise, so a kernel whose tiles carry layouts
    (the Hopper backward, Gluon) broadcasts its own row keys and key indices into it. Pass
    `row_key` and `key` as a row and a column ([M, 1] and [1, N], or transposed): the key's
    half of the draw (`key_code`) is then computed once a column, not once a score."""
    return draw_of(row_key, key) >= threshold


@triton.jit
def draw_of(row_key, key):
    """The uint32 draw of (row, key) that `keep_of` compares with the threshold: lowbias32
    without its last xorshift (`_mix32_tail`) of R ^ (key * 0x9E3779B9), R the row's two-round
    hash. Its first xorshift is split between the two halves (`_xorshift16` is linear over
    xor): `row_keys` applies it to R, `key_code` to the key's product, so a score costs one
    xor, two multiplies, a shift and an xor, and the compare."""
    return _mix32_tail(row_key ^ key_code(key))


@triton.jit
def key_code(key):
    """The key's half of the draw: key * 0x9E3779B9 (the golden-ratio multiplier spreads
    neighbouring keys apart), then lowbias32's first xorshift (see `keep_of`)."""
    return _xorshift16(key.to(tl.uint32) * 0x9E3779B9)


@triton.jit
def _kept_asm(x, draw, threshold):
    return tl.inline_asm_elementwise(
        "{ .reg .pred k; setp.ge.u32 k, $2, $3; selp.f32 $0, $1, 0f00000000, k; }",
        "=r,r,r,r", [x, draw, threshold], dtype=tl.float32, is_pure=True, pack=1,
    )  # fmt: skip


@triton.jit
def _kept_where(x, draw, threshold):
    return tl.where(draw >= threshold, x, 0.0)


# `kept(x, draw, threshold)`: x (fp32) where `draw` (draw_of) >= threshold, else 0. For the
# probabilities that go into a matrix product in 16 bits: written as tl.where, LLVM moves the
# select past the conversion to 16 bits (a select of a constant commutes with a truncation),
# and ptxas then selects 16-bit halves of packed registers, unpacking and repacking them (one
# SEL and about two PRMT a score in the Hopper forward, static SASS); as inline PTX the select
# stays on the fp32 value (one FSEL). (Masking the value's bits with -keep instead compiles
# to the same select as tl.where: LLVM recognises it.) Triton's interpreter runs no PTX: there
# the same select as tl.where, chosen when this module is imported, as `triton.jit` chooses
# the interpreter for every function decorated here.
kept = _kept_where if triton.knobs.runtime.interpret else _kept_asm


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
