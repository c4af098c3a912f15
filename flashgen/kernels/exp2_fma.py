"""2**x without the special-function unit: the constants of the Hopper forward's `_exp2_fma`
(templates/attn_fwd_hopper.py.jinja) and its float32 twin.

Why: on sm_90 an SM retires 16 MUFU results a clock (ex2, tanh) against 128 FP32 FMAs. The
forward's softmax takes one exponential a score; at head dim 64 that MUFU time equals the two
GEMMs' tensor-core time, and with logit softcapping (a tanh a score too) it exceeds it at head
dim 128. Computing one consumer's exponentials with FMAs instead (HopperConfig.fma_exp) moves
about half of that load to a pipe with room to spare, at about nine FP32/integer operations an
exponential.

How: x is clamped to -127, split as x = j + f with j an integer and f in [-1/2, 1/2] by adding
and subtracting ROUND_MAGIC (1.5 * 2**23: the sum's low mantissa bits hold j, rounded to
nearest), 2**f comes from a degree-3 polynomial with constant term 1, and j is added to its
exponent field as an integer (t's bits shifted left by 23 are j << 23 modulo 2**32). The
polynomial's coefficients minimise the largest relative error over [-1/2, 1/2] (a Lawson-
weighted least-squares fit): 1.23e-4 in float32, against bf16's half ulp of 2**-9 = 1.95e-3
where P is rounded for the PV product. x = -127 (and -inf) gives exactly +0.0 (j = -127, f = 0:
1.0's bits minus 127 << 23), so a hidden key contributes nothing, as exp2(-inf) does; every x
above it gives a non-negative float (f > 0 there, so 2**f >= 1).
"""

from __future__ import annotations

ROUND_MAGIC = 12582912.0  # 1.5 * 2**23
CLAMP = -127.0
# 2**f ~ 1 + f * (C1 + f * (C2 + f * C3)), f in [-1/2, 1/2]; float32 values
COEFFS = (0.6932254433631897, 0.24229750037193298, 0.05533519387245178)
MAX_REL_ERROR = 1.23e-4


def exp2_ref(x):
    """The kernel's arithmetic on a float32 numpy array, step by step (tests check its error
    and edge cases against float64; the GPU tests check the kernel's output)."""
    import numpy as np

    f32 = np.float32
    x = np.maximum(np.asarray(x, dtype=f32), f32(CLAMP))
    t = (x + f32(ROUND_MAGIC)).astype(f32)
    f = (x - (t - f32(ROUND_MAGIC))).astype(f32)
    c1, c2, c3 = (f32(c) for c in COEFFS)
    p = (c3 * f + c2).astype(f32)
    p = (p * f + c1).astype(f32)
    p = (p * f + f32(1.0)).astype(f32)
    bits = p.view(np.int32) + (t.view(np.int32) << np.int32(23))
    return bits.view(f32)
