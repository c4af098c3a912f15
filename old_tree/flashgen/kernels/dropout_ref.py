"""The dropout draw (`keep_tile`), shared by the attention kernels and the reference.

`keep_tile` is the one definition of which probabilities are kept: the generated forward and
backward kernels import it from here (templates/attn_fwd.py.jinja, attn_bwd.py.jinja), and
`keep_mask_kernel` writes its flags out for references and tests
(`flashgen.kernels.dropout.keep_mask`). Its own module so that importing
`flashgen.kernels.dropout` does not import Triton.

Why 16-bit draws: one Philox call (`tl.randint4x`, ten rounds of 32-bit multiplies) yields four
32-bit words, and an attention tile needs one draw per score. `tl.rand` per score uses one word
of each call and computes the other three for nothing; the integer work of the rounds was then
several times the tensor-core work of the score (head dim 128: ~80 integer operations against
512 multiply-adds on units of 1/32 the throughput). Splitting each call's four words into eight
16-bit draws, one per key of a group of eight, cuts the Philox calls eightfold. The price is
the resolution of the drop probability: a score is dropped iff its 16 bits are below
p * 2**16, i.e. with probability ceil(p * 2**16) / 2**16, within 2**-16 of p (the kept ones are
still scaled by 1 / (1 - p)).
"""

import triton
import triton.language as tl


@triton.jit
def keep_tile(seed, rows, start_n, k_groups, threshold, BLOCK_N: tl.constexpr):
    """Keep flags [len(rows), BLOCK_N] for the flat query rows `rows` (int64; bh * Sq + i) and
    the keys start_n + [0, BLOCK_N) (start_n a multiple of 8, keys counted from the sequence's
    first key). Key j of row r takes 16 bits of the Philox block of counter
    r * k_groups + j // 8 (k_groups = cdiv(Sk, 8): one block per group of eight keys): word
    j % 4, the low half for j % 8 < 4, the high half otherwise; it is kept iff those bits are
    >= threshold (= p * 2**16, a float)."""
    groups = start_n // 8 + tl.arange(0, BLOCK_N // 8)
    r0, r1, r2, r3 = tl.randint4x(seed, rows[:, None] * k_groups + groups[None, :])
    # [R, G, 2] per word: (low, high) half
    p0 = tl.join(r0 & 0xFFFF, r0 >> 16)
    p1 = tl.join(r1 & 0xFFFF, r1 >> 16)
    p2 = tl.join(r2 & 0xFFFF, r2 >> 16)
    p3 = tl.join(r3 & 0xFFFF, r3 >> 16)
    # [R, G, half, w1, w0] = word 2 * w1 + w0's half: flattened, key 8g + 4 * half + word
    bits = tl.join(tl.join(p0, p2), tl.join(p1, p3))
    bits = tl.reshape(bits, [rows.shape[0], BLOCK_N])
    return bits.to(tl.float32) >= threshold


@triton.jit(do_not_specialize=["seed"])
def keep_mask_kernel(Out, seed, p, ROWS, SEQ_K, BLOCK: tl.constexpr):
    """Out[r, j] (int8, flat rows r = bh * Sq + i, keys j counted from the sequence's first
    key) = whether the kernels keep that probability (`keep_tile`). BLOCK: a multiple of 8."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    start_n = tl.program_id(1) * BLOCK
    cols = start_n + tl.arange(0, BLOCK)
    keep = keep_tile(seed, rows.to(tl.int64), start_n, (SEQ_K + 7) // 8, p * 65536.0, BLOCK)
    ok = (rows[:, None] < ROWS) & (cols[None, :] < SEQ_K)
    tl.store(Out + rows.to(tl.int64)[:, None] * SEQ_K + cols[None, :], keep.to(tl.int8), mask=ok)
