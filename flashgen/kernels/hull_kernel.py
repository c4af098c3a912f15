"""The kernel behind `flashgen.kernels.padding.key_hull`: a key-padding mask's SeqBounds in one
launch.

Why a kernel: the same answer from tensor ops (tests/kernels/test_attn_mask.py keeps them as the
reference) took about 12 small PyTorch kernels for a boolean mask and 25 for an additive one
(HF's 0 / finfo.min), a few microseconds of GPU time each, on every forward and again on every
backward of a masked call; on the H200 the additive key-padding forward ran 0.785 ms against
0.735 for the same padding as a boolean mask (benchmarks/RESULTS.md, session 18 B3), about that
difference (not measured with the kernel yet). One program per batch entry reads the entry's
keys once and writes its four int32. Its own module so that importing `padding` does not import
Triton.
"""

import triton
import triton.language as tl


@triton.jit
def key_hull_kernel(
    Keys, Out, stride_b, stride_n, SEQ_Q, SEQ_K, HIDDEN, HALF,
    ADDITIVE: tl.constexpr, DENSE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Out[b] (int32 [B, 4] contiguous) = (0, SEQ_Q, 0, len_k) for entry b of Keys ([B, SEQ_K]
    with these strides): len_k = the last visible key + 1 (0 if none), plus DENSE where every
    key before it is untouched (True / a bias of exactly 0). Boolean keys: visible where
    nonzero. Additive (ADDITIVE): visible where not -inf; where no key lies in (HIDDEN, HALF]
    and one lies above HIDDEN, the keys at or below HIDDEN are hidden too (len_k ends after
    the last key above HIDDEN). HIDDEN and HALF come as the mask's dtype rounds them
    (`padding._thresholds`), so the comparisons are those of the mask's own dtype."""
    b = tl.program_id(0)
    base = Keys + b.to(tl.int64) * stride_b
    k_end = 0
    k_above = 0
    no_margin = 0
    plain = 0
    for start in range(0, SEQ_K, BLOCK):
        idx = start + tl.arange(0, BLOCK)
        inside = idx < SEQ_K
        pos = idx + 1  # a key's position counted from 1 (0: no key)
        if ADDITIVE:
            x = tl.load(base + idx.to(tl.int64) * stride_n, mask=inside, other=0.0)
            x = x.to(tl.float32)
            visible = inside & (x != float("-inf"))
            above = inside & (x > HIDDEN)
            k_above = tl.maximum(k_above, tl.max(tl.where(above, pos, 0), 0))
            no_margin = tl.maximum(no_margin, tl.max((above & (x <= HALF)).to(tl.int32), 0))
            untouched = inside & (x == 0.0)
        else:
            x = tl.load(base + idx.to(tl.int64) * stride_n, mask=inside, other=0)
            visible = inside & (x != 0)
            untouched = visible
        k_end = tl.maximum(k_end, tl.max(tl.where(visible, pos, 0), 0))
        plain += tl.sum(untouched.to(tl.int32), 0)
    if ADDITIVE:
        k_end = tl.where((no_margin == 0) & (k_above > 0), k_above, k_end)
    len_k = k_end + tl.where(plain == k_end, DENSE, 0)
    slot = tl.arange(0, 4)
    row = tl.where(slot == 1, SEQ_Q, tl.where(slot == 3, len_k, 0))
    tl.store(Out + b * 4 + slot, row.to(tl.int32))
