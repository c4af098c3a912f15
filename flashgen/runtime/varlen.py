"""The autograd of packed variable-length attention (`flashgen.ops.attention_varlen`): the
forward and backward launchers of `flashgen.kernels.varlen` as one `torch.autograd.Function`.

Not a library op yet: the maximum sequence lengths are host ints the grids need, and the call
runs eagerly (`flashgen.ops.attention_varlen` is excluded from Dynamo's tracing, so a compiled
model breaks its graph there instead of tracing the launchers)."""

from __future__ import annotations

import torch

from ..kernels import varlen


class _VarlenAttention(torch.autograd.Function):
    """out = packed attention(q, k, v) over 4-D views [1, H, T, D]; gradients for q, k, v."""

    @staticmethod
    def forward(ctx, q, k, v, bounds, max_q, max_k, causal, scale, window, softcap):
        out, lse = varlen.forward(
            q, k, v, bounds, max_q, max_k, causal=causal, scale=scale, window=window,
            softcap=softcap,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse, bounds)
        ctx.args = (max_q, max_k, causal, scale, window, softcap)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, bounds = ctx.saved_tensors
        max_q, max_k, causal, scale, window, softcap = ctx.args
        dq, dk, dv = varlen.backward(
            dout, q, k, v, out, lse, bounds, max_q, max_k, causal=causal, scale=scale,
            window=window, softcap=softcap,
        )  # fmt: skip
        return dq, dk, dv, None, None, None, None, None, None, None


def packed_attention(q, k, v, bounds, max_q, max_k, causal, scale, window, softcap):
    """`_VarlenAttention.apply` when a gradient is wanted, else the forward launcher alone."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _VarlenAttention.apply(q, k, v, bounds, max_q, max_k, causal, scale, window, softcap)
    out, _ = varlen.forward(
        q, k, v, bounds, max_q, max_k, causal=causal, scale=scale, window=window, softcap=softcap
    )
    return out
