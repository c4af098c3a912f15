"""Packed variable-length attention (`flashgen.ops.attention_varlen`) as two library ops and
their autograd: `flashgen::attention_varlen_fwd` / `_bwd` (schemas in `flashgen.runtime.library`)
run the launchers of `flashgen.kernels.varlen`, and `_VarlenAttention` ties them together.

Why ops: under `torch.compile` the call is one opaque node per direction (fake impls give the
shapes), so a compiled model with packed sequences keeps its graph and its backward; eagerly
the ops' bodies run directly (`flashgen.runtime.eager.direct`)."""

from __future__ import annotations

import torch

from ..kernels import varlen
from .eager import direct
from .library import register_primitive


def _window(window):
    return None if window is None else (int(window[0]), int(window[1]))


def _varlen_fwd(q, k, v, seq_bounds, max_q, max_k, causal, scale, window=None, softcap=None):
    return varlen.forward(
        q, k, v, seq_bounds, max_q, max_k, causal=causal, scale=scale, window=_window(window),
        softcap=softcap,
    )  # fmt: skip


def _varlen_fwd_fake(q, k, v, seq_bounds, max_q, max_k, causal, scale, window=None, softcap=None):
    out = q.new_empty(q.shape)
    return out, q.new_empty(q.shape[:3], dtype=torch.float32)


def _varlen_bwd(
    do, q, k, v, out, lse, seq_bounds, max_q, max_k, causal, scale, window=None, softcap=None
):
    return varlen.backward(
        do, q, k, v, out, lse, seq_bounds, max_q, max_k, causal=causal, scale=scale,
        window=_window(window), softcap=softcap,
    )  # fmt: skip


def _varlen_bwd_fake(
    do, q, k, v, out, lse, seq_bounds, max_q, max_k, causal, scale, window=None, softcap=None
):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


register_primitive("attention_varlen_fwd", _varlen_fwd, _varlen_fwd_fake)
register_primitive("attention_varlen_bwd", _varlen_bwd, _varlen_bwd_fake)
_fwd_op = direct(torch.ops.flashgen.attention_varlen_fwd.default, _varlen_fwd)
_bwd_op = direct(torch.ops.flashgen.attention_varlen_bwd.default, _varlen_bwd)


class _VarlenAttention(torch.autograd.Function):
    """out = packed attention(q, k, v) over 4-D views [1, H, T, D]; gradients for q, k, v."""

    @staticmethod
    def forward(ctx, q, k, v, bounds, max_q, max_k, causal, scale, window, softcap):
        out, lse = _fwd_op(q, k, v, bounds, max_q, max_k, causal, scale, window, softcap)
        ctx.save_for_backward(q, k, v, out, lse, bounds)
        ctx.args = (max_q, max_k, causal, scale, window, softcap)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, bounds = ctx.saved_tensors
        dq, dk, dv = _bwd_op(dout, q, k, v, out, lse, bounds, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None


def packed_attention(q, k, v, bounds, max_q, max_k, causal, scale, window, softcap):
    """`_VarlenAttention.apply` when a gradient is wanted, else the forward op alone.
    `window`: None or the kernels' (left, right) pair."""
    window = None if window is None else list(window)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _VarlenAttention.apply(q, k, v, bounds, max_q, max_k, causal, scale, window, softcap)
    return _fwd_op(q, k, v, bounds, max_q, max_k, causal, scale, window, softcap)[0]
