"""Public attention op. TEMPORARY forward-only version; the backward issue replaces this
module with the `flashgen::attention` custom op (autograd, fake impls).

Contract to keep: `attention(q, k, v, *, causal=False, scale=None) -> Tensor`.
"""

from __future__ import annotations


def attention(q, k, v, *, causal: bool = False, scale: float | None = None):
    from .fwd import forward
    from .validate import check_inputs

    scale = check_inputs(q, k, v, causal=causal, scale=scale)
    out, _lse = forward(q, k, v, causal=causal, scale=scale)
    return out
