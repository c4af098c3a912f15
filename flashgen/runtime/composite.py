"""The composite `flashgen::attention` op (CompositeImplicitAutograd): check the inputs, let the
run-time choice send the call to an SDPA backend (`flashgen.runtime.vendor.route`), else run
flashgen's kernels through `flashgen.runtime.autograd` (a gradient is wanted) or the forward op
alone. Dynamo records this op as one node; AOTAutograd decomposes it. `_attention` is also the
body of the eager public function (`flashgen.ops.attention`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core.impls import FLASHGEN, check_impl
from ..kernels import dropout
from ..kernels.alibi import check_slopes
from ..kernels.aligned import check_align
from ..kernels.validate import (
    check_inputs,
    check_kernel_device,
    check_softcap,
    input_signature,
    mask_shape,
    normalize_window,
)
from . import value_dim
from .autograd import _attention_apply, _plain_apply
from .dispatch import settled_impls
from .eager import plain_eager
from .library import _LIB
from .primitives import _check_extras, _fwd_op, plain_forward
from .sinks import apply_sinks, check_sinks
from .vendor import (
    LAUNCH_BOUND_FLASHGEN,
    MIX,
    MIXED_BACKWARD,
    launch_bound_flashgen,
    launch_bound_key,
    needs_backward,
    remember_launch_bound,
    route,
)


def _attention(
    q, k, v, causal=False, scale=None, window=None, softcap=None, causal_align="top_left",
    deterministic=None, seq_bounds=None, attn_mask=None, dropout_p=0.0, dropout_seed=None,
    alibi_slopes=None, sinks=None, impl=None,
):  # fmt: skip
    """The body shared by the eager function and the composite op: check, let the run-time
    choice send the call to an SDPA backend (`flashgen.runtime.vendor.route`), else flashgen's forward
    with autograd when a gradient is wanted, or the forward op alone (no autograd node; with
    `sinks`, its output scaled by `flashgen.runtime.sinks.apply_sinks`). Values of another head
    dim than q's and k's run padded to the larger one, the output sliced back
    (`flashgen.runtime.value_dim`)."""
    try:
        checked = check_inputs(q, k, v, causal=causal, scale=scale)
    except ValueError:
        if not value_dim.differs(q, k, v):
            raise
        # values of another head dim (off the common path: asked only when the checks refuse)
        q, k, v, scale, dv = value_dim.pad(q, k, v, scale)
        return _attention(
            q, k, v, causal, scale, window, softcap, causal_align, deterministic, seq_bounds,
            attn_mask, dropout_p, dropout_seed, alibi_slopes, sinks, impl,
        )[..., :dv]  # fmt: skip
    scale = checked
    if window is not None:
        window = list(
            normalize_window(tuple(window) if isinstance(window, list) else window, causal)
        )
    softcap = check_softcap(softcap)
    deterministic = check_deterministic(deterministic)
    bottom_right = check_align(causal, causal_align)
    dropout_p = dropout.check_dropout(dropout_p)
    if dropout_p > 0.0 and dropout_seed is None:
        dropout_seed = dropout.new_seed()  # PyTorch's generator: manual_seed reproduces it
    # (the seed is not read here: under tracing it is a value of the graph)
    alibi = alibi_slopes is not None
    extras = seq_bounds is not None or attn_mask is not None or dropout_p > 0.0 or alibi
    if extras or sinks is not None:
        if attn_mask is not None:
            mask_shape(attn_mask, q, k)  # its checks, naming attn_mask (the primitive expands it)
        if alibi:
            check_slopes(alibi_slopes, q)  # the checks, naming alibi_slopes
        if sinks is not None:
            check_sinks(sinks, q)
            if dropout_p > 0.0:
                raise ValueError("sinks: dropout_p > 0 with attention sinks is not supported")
        if extras:
            _check_extras(q, seq_bounds, attn_mask, bottom_right)
        if impl is not None and check_impl(impl) != FLASHGEN:
            raise ValueError(
                f"impl={impl!r}: key_lengths/query_lengths, attn_mask, dropout_p, sinks and "
                "alibi_slopes run flashgen's kernels only; use impl='flashgen' or None"
            )
        impl = FLASHGEN
    if bottom_right and _same_as_sdpa(q, k, window):
        # One query row sees every key; equal lengths are top-left causal: SDPA's own masks.
        causal, causal_align, bottom_right = q.shape[2] == k.shape[2], "top_left", False
    backward = needs_backward(q, k, v)  # asked once: for the routing and for autograd
    mix = False  # flashgen's forward with cuDNN's backward (`route` says MIX)
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        backward = True  # a learned additive bias: its gradient (flashgen's kernels only)
    if sinks is not None and sinks.requires_grad and torch.is_grad_enabled():
        backward = True  # learned sinks: their gradient
    if impl != "flashgen":
        # SDPA's is_causal is top-left only. Whatever reaches flashgen's forward with a short
        # query runs the split-KV decode kernels there (`_attention_fwd`).
        keep = bottom_right
        if keep and impl is not None and check_impl(impl) != FLASHGEN:
            raise ValueError(
                f"impl={impl!r}: PyTorch's SDPA has no bottom-right causal alignment; use "
                "impl='flashgen' or None"
            )
        out = None if keep else route(q, k, v, causal, scale, impl, window, softcap, backward)
        if out is not None and out is not MIX:
            return out
        mix = out is MIX
    check_kernel_device(q.device)
    if backward:
        return _apply_with(
            mix, q, k, v, causal, scale, window, softcap, causal_align, deterministic, seq_bounds,
            attn_mask, dropout_p, dropout_seed, alibi_slopes, sinks,
        )  # fmt: skip
    out, lse = _fwd_op(
        q, k, v, causal, scale, window, softcap, causal_align, seq_bounds, attn_mask, dropout_p,
        dropout_seed, alibi_slopes,
    )  # fmt: skip
    return out if sinks is None else apply_sinks(out, lse, sinks)[0]


def _plain_attention(q, k, v, causal, scale, deterministic, impl):
    """`_attention` of a call without extras (no window, softcap, lengths, mask or dropout;
    top-left causal), the public function's eager path for them: the same checks, choice and
    kernels without the branches only the extras need. In a plain eager call without a
    gradient the forward op's body is called directly (`plain_forward`); anything traced,
    fake or under a dispatch mode goes through the op as in `_attention`. A launch-bound auto
    call whose signature `route` already sent to SDPA's own choice or to flashgen's forward
    goes there at once (`flashgen.runtime.vendor.launch_bound_key`: the checks passed for it
    then; `launch_bound_flashgen`)."""
    signature = input_signature(q, k, v, causal, scale)
    key = None
    if impl is None:
        key = launch_bound_key(signature, q, k, v)
        settled = None if key is None else settled_impls.get(key)
        if settled is not None and plain_eager(q):
            if deterministic is not None:
                check_deterministic(deterministic)
            if settled == LAUNCH_BOUND_FLASHGEN:
                scale = check_inputs(q, k, v, causal=causal, scale=scale, signature=signature)
                return plain_forward(q, k, v, causal, scale, keep_lse=False)[0]
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
            )
    try:
        checked = check_inputs(q, k, v, causal=causal, scale=scale, signature=signature)
    except ValueError:
        if not value_dim.differs(q, k, v):
            raise
        # values of another head dim (`_attention` pads them): off the common path
        return _attention(q, k, v, causal, scale, deterministic=deterministic, impl=impl)
    scale = checked
    if deterministic is not None:
        check_deterministic(deterministic)
    backward = needs_backward(q, k, v)
    mix = False  # flashgen's forward with cuDNN's backward (`route` says MIX)
    if impl != FLASHGEN:
        out = route(q, k, v, causal, scale, impl, None, None, backward)
        if out is not None and out is not MIX:
            remember_launch_bound(key, q)
            return out
        mix = out is MIX
        if out is None and key is not None and launch_bound_flashgen(q, k, backward):
            # (route's answer for this launch-bound signature, whatever the records say)
            remember_launch_bound(key, q, LAUNCH_BOUND_FLASHGEN)
    if not q.is_cuda:  # (CUDA tensors always pass; `is_cuda` is cheaper than `q.device`)
        check_kernel_device(q.device)
    if backward:
        if plain_eager(q):  # (`_PlainAttention`: the same node with fewer arguments)
            return _plain_apply(q, k, v, causal, scale, deterministic, mix)
        return _apply_with(
            mix, q, k, v, causal, scale, None, None, "top_left", deterministic, None, None, 0.0,
            None, None, None,
        )  # fmt: skip
    if plain_eager(q):
        return plain_forward(q, k, v, causal, scale, keep_lse=False)[0]
    return _fwd_op(q, k, v, causal, scale, None, None, "top_left", None, None, 0.0, None)[0]


def _apply_with(mix: bool, *args):
    """`_attention_apply(*args)`; `mix`: its backward is cuDNN's on flashgen's forward
    (`flashgen.runtime.vendor.hybrid_backward`)."""
    if not mix:
        return _attention_apply(*args)
    token = MIXED_BACKWARD.set(True)
    try:
        return _attention_apply(*args)
    finally:
        MIXED_BACKWARD.reset(token)


def check_deterministic(value):
    """None, True or False (the op's bool?); anything else is a ValueError naming it."""
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"deterministic must be True, False or None, got {value!r}")


def _same_as_sdpa(q, k, window=None) -> bool:
    """Whether a bottom-right causal call is also top-left (or, one query row without a
    window, no mask at all) at every size this call can have: static sizes (plain ints, also
    under tracing) with one query row (it sees every key: no mask) or equal lengths (top-left
    causal, the window as it is). With a window one query row sees its last keys only."""
    seq_q, seq_k = q.shape[2], k.shape[2]
    if not (type(seq_q) is int and type(seq_k) is int):
        return False
    return (seq_q == 1 and window is None) or seq_q == seq_k


_LIB.impl("attention", _attention, "CompositeImplicitAutograd")
_composite_op = torch.ops.flashgen.attention.default
