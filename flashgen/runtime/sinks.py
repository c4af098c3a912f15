"""Attention sinks (GPT-OSS): one learned logit per query head that joins every row's softmax
as an extra key with no value. Query row i of head h then gets

    out_i = sum_j exp(s_ij) v_j / (sum_j exp(s_ij) + exp(sink_h)),

which is the plain attention's output scaled by w_i = L_i / (L_i + exp(sink_h)), L_i the plain
softmax's sum: w_i = exp(lse_i - lse'_i) with lse'_i = logaddexp(lse_i, sink_h), the
logsumexp of the row with its sink. So the kernels need no change:

- forward: the plain forward's (out, lse), then out * w and lse' (`apply_sinks`);
- backward: the plain backward given that out and lse'. It recomputes the probabilities as
  exp(s - lse'), which are the sink softmax's own (w times the plain ones), and its delta
  rowsum(dout * out) is the sink softmax's, so dq, dk and dv come out exact;
- the sink's gradient: d sink_h = -sum over batch and rows of p_sink * delta, p_sink =
  exp(sink_h - lse') (`sink_grad`): the sink's column of the softmax backward, whose value
  product is zero.

A row that sees no key (lse = +inf in the kernels' convention) gets w = 0: all of its
probability is on the sink, so its output is zeros, as eager attention with sinks gives. The
extra work is one kernel pass over the output (and one over dout and the output for the
sinks' gradient: `flashgen.kernels.sinks`); the attention kernels' epilogue could fold the
first in.
"""

from __future__ import annotations

import torch

from ..kernels import sinks as kernels
from .library import register_primitive


def check_sinks(sinks, q) -> None:
    """A floating tensor [Hq] on q's device: one logit per query head."""
    if not isinstance(sinks, torch.Tensor):
        raise ValueError(f"sinks must be a tensor [heads], got {type(sinks).__name__}")
    if sinks.dim() != 1 or sinks.shape[0] != q.shape[1]:
        raise ValueError(
            f"sinks must have one logit per query head, shape [{q.shape[1]}], got "
            f"{tuple(sinks.shape)}"
        )
    if not sinks.is_floating_point():
        raise ValueError(f"sinks must be a floating tensor, got {sinks.dtype}")
    if sinks.device != q.device:
        raise ValueError(f"sinks must be on q's device ({q.device}), got {sinks.device}")


def apply_sinks(out, lse, sinks):
    """(out, lse) of the plain forward -> (out, lse) of attention with `sinks` [Hq]: out
    scaled by each row's share of its softmax that is not the sink's, lse the row's
    logsumexp with the sink (float32). A row with no visible key (lse = +inf: inf - inf) has
    no share; rows the kernels leave unwritten (query padding, whose output is zeros) are kept
    finite the same way. One kernel pass (`flashgen.kernels.sinks.rescale`) through the
    `flashgen::sinks_fwd` op, so that a compiled graph traces it by its fake."""
    return torch.ops.flashgen.sinks_fwd(out, lse.contiguous(), sinks.detach().contiguous())


def sink_grad(dout, out, lse, sinks):
    """The gradient of `sinks` from the forward's `apply_sinks` output and logsumexp (the
    `flashgen::sinks_bwd` op: one pass over dout and out, `flashgen.kernels.sinks.grad`)."""
    grad = torch.ops.flashgen.sinks_bwd(dout, out, lse.contiguous(), sinks.detach().contiguous())
    return grad.to(sinks.dtype)


def _fwd_fake(out, lse, sinks):
    return torch.empty_like(out), torch.empty_like(lse)


def _bwd_fake(dout, out, lse, sinks):
    return out.new_empty((out.shape[1],), dtype=torch.float32)


register_primitive("sinks_fwd", kernels.rescale, _fwd_fake)
register_primitive("sinks_bwd", kernels.grad, _bwd_fake)
