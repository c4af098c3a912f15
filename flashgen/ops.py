"""The differentiable attention op: torch.library custom ops around the generated kernels.

Layers (Liger-style): generated kernels -> host launchers (`flashgen.fwd.forward`,
`flashgen.bwd.backward`) -> custom ops with fake impls and autograd -> public function.

Ops (namespace `flashgen`):

- `torch.ops.flashgen.attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale)
  -> (Tensor out, Tensor lse)`: opaque custom op; `out` contiguous in q's dtype, `lse` float32
  [B, Hq, Sq] (natural log). Differentiable in q, k, v (`register_autograd`); lse is marked
  non-differentiable.
- `torch.ops.flashgen.attention_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out,
  Tensor lse, bool causal, float scale, bool need_dq, bool need_dk, bool need_dv)
  -> (Tensor dq, Tensor dk, Tensor dv)`: a gradient that is not needed is not computed and comes
  back as an empty tensor of shape (0,) (custom ops cannot return None).
- `torch.ops.flashgen.attention(Tensor q, Tensor k, Tensor v, bool causal=False,
  float? scale=None) -> Tensor`: CompositeImplicitAutograd. It validates its inputs
  (`flashgen.validate.check_inputs`) and calls `attention_fwd`, so Dynamo/AOTAutograd decompose
  it into `attention_fwd` (+ `attention_bwd` in the backward graph).

Which callable a graph rewrite should insert: `torch.ops.flashgen.attention.default` with
arguments `(q, k, v, causal, scale)` (scale a Python float or None). It is traceable by
Dynamo, make_fx and AOTAutograd, and `compile_fx` handles its backward. The Python function
`flashgen.ops.attention(q, k, v, *, causal=False, scale=None)` is the same thing for users
(eager, and inside functions given to `torch.compile(fullgraph=True)`).

Why custom ops: their bodies run at run time with concrete sequence lengths even under
`torch.compile(dynamic=True)` (FACTS.md), so the per-shape config lookup
(`flashgen.dispatch.choose_config`) lives inside them and a new length never recompiles.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["attention", "attention_fwd", "attention_bwd"]


@torch.library.custom_op("flashgen::attention_fwd", mutates_args=())
def attention_fwd(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float
) -> tuple[Tensor, Tensor]:
    from .fwd import forward

    return forward(q, k, v, causal=causal, scale=scale)


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, causal, scale):
    batch, heads, seq_q, head_dim = q.shape
    out = q.new_empty((batch, heads, seq_q, head_dim))
    lse = q.new_empty((batch, heads, seq_q), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("flashgen::attention_bwd", mutates_args=())
def attention_bwd(
    do: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    causal: bool,
    scale: float,
    need_dq: bool,
    need_dk: bool,
    need_dv: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    from .bwd import backward

    dq, dk, dv = backward(
        do, q, k, v, out, lse, causal=causal, scale=scale, needs=(need_dq, need_dk, need_dv)
    )
    return (
        dq if dq is not None else q.new_empty((0,)),
        dk if dk is not None else k.new_empty((0,)),
        dv if dv is not None else v.new_empty((0,)),
    )


@attention_bwd.register_fake
def _attention_bwd_fake(do, q, k, v, out, lse, causal, scale, need_dq, need_dk, need_dv):
    return tuple(
        t.new_empty(t.shape) if need else t.new_empty((0,))
        for t, need in zip((q, k, v), (need_dq, need_dk, need_dv), strict=True)
    )


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal = causal
    ctx.scale = scale
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    need_dq, need_dk, need_dv = ctx.needs_input_grad[:3]
    dq, dk, dv = torch.ops.flashgen.attention_bwd(
        dout, q, k, v, out, lse, ctx.causal, ctx.scale, need_dq, need_dk, need_dv
    )
    return (
        dq if need_dq else None,
        dk if need_dk else None,
        dv if need_dv else None,
        None,
        None,
    )


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    impl: str | None = None,
):
    """FlashAttention with SDPA semantics: q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] -> [B, Hq, Sq, D].

    `causal` is SDPA's is_causal (top-left aligned), `scale` defaults to 1/sqrt(D), GQA when
    Hq is a multiple of Hkv. Differentiable in q, k and v. Raises ValueError (naming the
    argument) for inputs the kernels do not support, and RuntimeError for CPU tensors when
    Triton's interpreter is off (TRITON_INTERPRET=1 runs the kernels on the CPU).

    `impl` None runs the faster implementation for this shape: flashgen's kernels or one of
    PyTorch's SDPA backends, by the tuning records and defaults (`flashgen.vendor`); a name from
    `flashgen.impls.IMPLS` ("flashgen", "sdpa_cudnn", ...) forces that one.
    """
    from .validate import check_inputs, check_kernel_device
    from .vendor import route

    scale = check_inputs(q, k, v, causal=causal, scale=scale)
    if impl != "flashgen":
        out = route(q, k, v, causal, scale, impl)
        if out is not None:
            return out
    check_kernel_device(q.device)
    out, _lse = torch.ops.flashgen.attention_fwd(q, k, v, causal, scale)
    return out


def _attention_composite(q, k, v, causal=False, scale=None):
    return attention(q, k, v, causal=causal, scale=scale)


_LIB = torch.library.Library("flashgen", "FRAGMENT")
_LIB.define(
    "attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None) -> Tensor"
)
_LIB.impl("attention", _attention_composite, "CompositeImplicitAutograd")
