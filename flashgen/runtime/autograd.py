"""The autograd of flashgen's attention: a `torch.autograd.Function` whose forward is the
`attention_fwd` op and whose backward is `attention_bwd` (`flashgen.runtime.primitives`), so the
two primitives stay opaque to autograd and an eager call without a gradient pays for no node.
`_attention_apply` is its `apply` without `Function.apply`'s Python layer
(`flashgen.runtime.eager.function_apply`). `_PlainAttention` (`_plain_apply`) is the same node
for a plain eager call without extras, with only the arguments such a call has. A plain call's
backward may instead be cuDNN's, on this forward's out and logsumexp
(`flashgen.runtime.vendor.hybrid_backward`)."""

from __future__ import annotations

import functools
import inspect
import logging

import torch

from .eager import function_apply, plain_eager
from .primitives import _bias_op, _bwd_op, _fwd_op, plain_backward, plain_forward
from .sinks import apply_sinks, sink_grad
from .vendor import MIXED_BACKWARD, cudnn_backward, refuse_mix

# `_Attention.backward`'s gradients of the arguments after v where none of them gets one
_AFTER_V = (None,) * 12


class _Attention(torch.autograd.Function):
    """out = attention(q, k, v): forward through `attention_fwd`, gradients through
    `attention_bwd` (only those autograd asks for); an additive attn_mask that requires grad
    gets its gradient, with dq, from `attention_bwd_bias`. With `sinks` the forward's out and
    lse are those of the softmax with the sinks (`flashgen.runtime.sinks`), which is all the
    backward kernels need, and the sinks get their gradient from them."""

    @staticmethod
    def forward(
        ctx, q, k, v, causal, scale, window, softcap, causal_align, deterministic, seq_bounds,
        attn_mask, dropout_p, dropout_seed, alibi_slopes, sinks,
    ):  # fmt: skip
        plain = (
            alibi_slopes is None
            and sinks is None
            and _plain(window, softcap, causal_align, seq_bounds, attn_mask, dropout_p)
        )
        if plain and plain_eager(q):
            out, lse = plain_forward(q, k, v, causal, scale)
        else:
            out, lse = _fwd_op(
                q, k, v, causal, scale, window, softcap, causal_align, seq_bounds, attn_mask,
                dropout_p, dropout_seed, alibi_slopes,
            )  # fmt: skip
        if sinks is not None:
            out, lse = apply_sinks(out, lse, sinks)
        ctx.plain = plain
        # optional tensors saved only when given (a None saved under AOTAutograd is no tensor)
        ctx.extras = (
            seq_bounds is not None, attn_mask is not None, dropout_seed is not None,
            alibi_slopes is not None, sinks is not None,
        )  # fmt: skip
        ctx.dropout_p = dropout_p
        given = (seq_bounds, attn_mask, dropout_seed, alibi_slopes, sinks)
        extras = [t for t in given if t is not None]
        ctx.save_for_backward(q, k, v, out, lse, *extras)
        ctx.causal = causal
        ctx.scale = scale
        ctx.window = window
        ctx.softcap = softcap
        ctx.causal_align = causal_align
        # resolved now: torch's flag at backward time may differ from the caller's
        ctx.deterministic = (
            torch.are_deterministic_algorithms_enabled() if deterministic is None else deterministic
        )
        # cuDNN's backward on this forward, when the composite op chose the mix
        # (`flashgen.runtime.vendor.hybrid_backward`: plain calls only), unless this call asks
        # for a deterministic backward. Dynamo cannot read a ContextVar; it traces this function
        # only for a call that skipped the choice (`impl` forced), while AOTAutograd, which
        # decomposes the op, runs it as Python.
        ctx.mixed = (
            plain and not ctx.deterministic and not torch.compiler.is_dynamo_compiling()
            and MIXED_BACKWARD.get()
        )  # fmt: skip
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, *rest = ctx.saved_tensors
        seq_bounds = rest.pop(0) if ctx.extras[0] else None
        attn_mask = rest.pop(0) if ctx.extras[1] else None
        dropout_seed = rest.pop(0) if ctx.extras[2] else None
        alibi_slopes = rest.pop(0) if ctx.extras[3] else None  # constants: no gradient
        sinks = rest.pop(0) if ctx.extras[4] else None
        need_dq, need_dk, need_dv = needs = ctx.needs_input_grad[:3]
        if ctx.mixed:
            grads = _cudnn_grads(dout, q, k, v, out, lse, ctx.causal, ctx.scale, needs)
            if grads is not None:
                return (*grads, *_AFTER_V)
        if ctx.plain and plain_eager(dout):  # (no attn_mask or sinks: no other gradient)
            dq, dk, dv = plain_backward(
                dout, q, k, v, out, lse, ctx.causal, ctx.scale, needs, ctx.deterministic
            )
            return (dq, dk, dv, *_AFTER_V)
        dq = dk = dv = dbias = dsinks = None
        if sinks is not None and ctx.needs_input_grad[14]:
            dsinks = sink_grad(dout, out, lse, sinks)
        if attn_mask is not None and ctx.needs_input_grad[10]:
            # a learned additive bias: dq comes with its gradient (one walk of the dQ kernel)
            dq, dbias = _bias_op(
                dout, q, k, v, out, lse, attn_mask, ctx.causal, ctx.scale, ctx.window,
                ctx.softcap, ctx.dropout_p, dropout_seed, alibi_slopes, ctx.causal_align,
            )  # fmt: skip
            dq, need_dq = (dq if need_dq else None), False
        if need_dq or need_dk or need_dv:
            dq_, dk, dv = _bwd_op(
                dout, q, k, v, out, lse, ctx.causal, ctx.scale, need_dq, need_dk, need_dv,
                ctx.window, ctx.softcap, ctx.causal_align, ctx.deterministic, seq_bounds,
                attn_mask, ctx.dropout_p, dropout_seed, alibi_slopes,
            )  # fmt: skip
            dq = dq_ if need_dq else dq
        return (
            dq,
            dk if need_dk else None,
            dv if need_dv else None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            dbias,
            None,
            None,
            None,
            dsinks,
        )


class _PlainAttention(torch.autograd.Function):
    """`_Attention` for an eager call without extras whose tensors are plain (`plain_eager`),
    the path of `flashgen.runtime.composite._plain_attention`: six arguments instead of
    fourteen and nothing else to save, test or unpack, because on a short call the autograd
    node's own host time is most of what the forward with a gradient costs beyond the one
    without. `mixed` (the composite op's choice, as `MIXED_BACKWARD` tells `_Attention`):
    cuDNN's backward on this forward."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, deterministic, mixed):
        out, lse = plain_forward(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        ctx.scale = scale
        if deterministic is None:  # resolved now, as `_Attention` does
            deterministic = torch.are_deterministic_algorithms_enabled()
        ctx.deterministic = deterministic
        ctx.mixed = mixed and not deterministic
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        needs = ctx.needs_input_grad[:3]
        if ctx.mixed:
            grads = _cudnn_grads(dout, q, k, v, out, lse, ctx.causal, ctx.scale, needs)
            if grads is not None:
                return (*grads, None, None, None, None)
        if plain_eager(dout):
            dq, dk, dv = plain_backward(
                dout, q, k, v, out, lse, ctx.causal, ctx.scale, needs, ctx.deterministic
            )
        else:  # a dispatch mode around the backward: through the op, as `_Attention` does
            grads = _bwd_op(
                dout, q, k, v, out, lse, ctx.causal, ctx.scale, *needs, None, None, "top_left",
                ctx.deterministic, None, None, 0.0, None, None,
            )  # fmt: skip
            dq, dk, dv = (g if n else None for g, n in zip(grads, needs, strict=True))
        return dq, dk, dv, None, None, None, None


def _cudnn_grads(dout, q, k, v, out, lse, causal, scale, needs):
    """(dq, dk, dv) by cuDNN's backward on flashgen's forward (None where `needs` says not
    wanted), or None when cuDNN refuses the input (then flashgen's own backward runs, and no
    more mixing for inputs like these)."""
    try:
        grads = cudnn_backward(dout, q, k, v, out, lse, causal, scale)
    except RuntimeError as exc:
        _log_refused(str(exc).splitlines()[0] if str(exc) else "")
        refuse_mix(q, k, causal)
        return None
    return tuple(g if n else None for g, n in zip(grads, needs, strict=True))


@functools.cache
def _log_refused(why: str) -> None:
    logging.getLogger("flashgen").warning(
        "flashgen: cuDNN's backward refused flashgen's forward (%s); flashgen's backward runs", why
    )


def _plain(window, softcap, causal_align, seq_bounds, attn_mask, dropout_p) -> bool:
    """Whether a call has none of the extras (`flashgen.runtime.primitives.plain_forward`)."""
    return (
        window is None
        and softcap is None
        and causal_align == "top_left"
        and seq_bounds is None
        and attn_mask is None
        and dropout_p == 0.0
    )


def tensor_positions(schema: torch.FunctionSchema, forward) -> tuple[int, ...]:
    """The positions of `forward`'s arguments (after ctx) that can be tensors, read from the op
    `schema` whose arguments `forward` takes in the same order. Raises RuntimeError when the two
    argument lists differ, so a new argument added to one and not the other fails at import
    instead of leaving a tensor unseen by `function_apply`."""
    names = [a.name for a in schema.arguments]
    params = list(inspect.signature(forward).parameters)[1:]
    if params != names:
        raise RuntimeError(
            f"{forward.__qualname__} takes {params}, but the op {schema.name} takes {names}"
        )
    tensor = torch._C.OptionalType.ofTensor()
    return tuple(i for i, a in enumerate(schema.arguments) if a.type.isSubtypeOf(tensor))


# `_Attention.apply` without Function.apply's Python layer (flashgen.runtime.eager); its
# arguments are the composite op's, in the op's order.
_attention_apply = function_apply(
    _Attention,
    tensor_positions(torch.ops.flashgen.attention.default._schema, _Attention.forward),
)
# `_PlainAttention.apply` likewise (q, k, v are its only tensors).
_plain_apply = function_apply(_PlainAttention, (0, 1, 2))
