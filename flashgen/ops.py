"""The differentiable attention op: torch.library ops around the generated kernels.

Layers (Liger-style): generated kernels -> host launchers (`flashgen.kernels.fwd.forward`,
`flashgen.kernels.bwd.backward`) -> library ops with fake impls -> autograd -> public function.

Ops (namespace `flashgen`):

- `torch.ops.flashgen.attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale,
  int[]? window=None, float? softcap=None) -> (Tensor out, Tensor lse)`: opaque; `out` contiguous in q's dtype, `lse` float32
  [B, Hq, Sq] (natural log). Not differentiable by itself: autograd lives one level up.
- `torch.ops.flashgen.attention_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out,
  Tensor lse, bool causal, float scale, bool need_dq, bool need_dk, bool need_dv,
  int[]? window=None, float? softcap=None, str causal_align='top_left',
  bool? deterministic=None) -> (Tensor dq, Tensor dk, Tensor dv)`: a gradient that is not
  needed is not computed and comes back as an empty tensor of shape (0,) (ops cannot return
  None). `deterministic` picks the backward kind (`flashgen.kernels.bwd.resolve_kind`; None:
  torch's deterministic-algorithms flag).
- `torch.ops.flashgen.attention(Tensor q, Tensor k, Tensor v, bool causal=False,
  float? scale=None, int[]? window=None, float? softcap=None, str causal_align='top_left',
  bool? deterministic=None) -> Tensor`:
  CompositeImplicitAutograd. It validates its inputs
  (`flashgen.kernels.validate.check_inputs`), runs an SDPA backend where the run-time choice says so
  (`flashgen.runtime.vendor.route`), else `_Attention` (a `torch.autograd.Function` whose forward calls
  `attention_fwd` and whose backward calls `attention_bwd`), so Dynamo and AOTAutograd
  decompose it into `attention_fwd` (+ `attention_bwd` in the backward graph) or SDPA's op.

Which callable a graph rewrite should insert: `torch.ops.flashgen.attention.default` with
arguments `(q, k, v, causal, scale)` (scale a Python float or None), plus `window` (a list
[left, right] of ints, `flashgen.kernels.validate.normalize_window`) for a sliding window. In the
two primitives `window` is that normalised pair (query i sees keys i - left <= j <= i + right).
`softcap`: the scaled scores s become softcap * tanh(s / softcap) before the softmax.
`dropout_p` and `dropout_seed` (after those, in all three ops): the dropout probability and an
int64 CPU tensor of one element, the Philox seed (`flashgen.kernels.dropout`; the composite op
draws one from PyTorch's generator when it is None, and the backward gets the forward's).
`seq_bounds` and `attn_mask` (before those): None, or contiguous int32
[B, 4] on q's device, each batch entry's valid query rows and keys as (q_start, len_q, k_start,
len_k) (`flashgen.kernels.padding.bounds` builds it from lengths and a padding side; the public
function's key_lengths=/query_lengths=/padding= do, so a compiled graph records plain torch
ops), and a boolean or additive mask tensor broadcastable to [B, Hq, Sq, Sk] (the public
function's attn_mask=). The Python
function `flashgen.ops.attention(q, k, v, *, causal=False, scale=None, window=None,
softcap=None)` is the same thing for users
(eager, and inside functions given to `torch.compile(fullgraph=True)`, where it becomes that op).

Why library ops: their bodies run at run time with concrete sequence lengths even under
`torch.compile(dynamic=True)`, so the per-shape config lookup lives inside them and a
new length never recompiles. Why `Library.define`/`impl` and an autograd.Function outside the
op, not `torch.library.custom_op` + `register_autograd`: the eager call is the launch path of
every attention call, and the custom_op layers (Python dispatch wrapper, the autograd kernel
registered on the op, redispatch below autograd) cost more host time than the kernel takes on a
short sequence (benchmarks/RESULTS.md, host time). Here an eager call is one dispatcher hop to a
backend kernel, plus `_Attention.apply` only when a gradient is wanted.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .core.impls import FLASHGEN, check_impl
from .kernels import aligned, bwd, decode, dropout, fwd
from .kernels.aligned import check_align
from .kernels.padding import bounds as padding_bounds
from .kernels.padding import check_bounds, check_padding
from .kernels.plans import clear_all as _clear_plans
from .kernels.tma import env_reader
from .kernels.validate import (
    check_inputs,
    check_kernel_device,
    check_softcap,
    expand_mask,
    normalize_window,
)
from .runtime.dispatch import on_clear, plan_config
from .runtime.eager import direct, function_apply
from .runtime.vendor import needs_backward, route

__all__ = ["attention"]

_decode_env = env_reader("FLASHGEN_DECODE")


def _decode_off() -> bool:
    """FLASHGEN_DECODE=0: short queries take the forward kernels (and the SDPA routing)."""
    return _decode_env() in (b"0", "0")


_LIB = torch.library.Library("flashgen", "FRAGMENT")
_TAGS = (torch.Tag.pt2_compliant_tag,)
_LIB.define(
    "attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale, int[]? window=None, "
    "float? softcap=None, str causal_align='top_left', Tensor? seq_bounds=None, "
    "Tensor? attn_mask=None, float dropout_p=0.0, Tensor? dropout_seed=None) -> (Tensor, Tensor)",
    tags=_TAGS,
)
_LIB.define(
    "attention_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool causal, "
    "float scale, bool need_dq, bool need_dk, bool need_dv, int[]? window=None, "
    "float? softcap=None, str causal_align='top_left', bool? deterministic=None, "
    "Tensor? seq_bounds=None, Tensor? attn_mask=None, float dropout_p=0.0, "
    "Tensor? dropout_seed=None) -> (Tensor, Tensor, Tensor)",
    tags=_TAGS,
)
_LIB.define(
    "attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, "
    "int[]? window=None, float? softcap=None, str causal_align='top_left', "
    "bool? deterministic=None, Tensor? seq_bounds=None, Tensor? attn_mask=None, "
    "float dropout_p=0.0, Tensor? dropout_seed=None) -> Tensor",
    tags=_TAGS,
)


# The launchers' plans hold configs the run-time choice made: drop them when it drops its cache.
on_clear(_clear_plans)


def _window(window):
    """The op's int[]? as the launchers' (left, right) pair (checked: ops can be called raw)."""
    if window is None:
        return None
    if len(window) != 2 or min(window) < 0:
        raise ValueError(f"window must be [left, right] with both >= 0, got {list(window)}")
    return (int(window[0]), int(window[1]))


def _attention_fwd(
    q, k, v, causal, scale, window=None, softcap=None, causal_align="top_left", seq_bounds=None,
    attn_mask=None, dropout_p=0.0, dropout_seed=None,
):  # fmt: skip
    bottom_right = check_align(causal, causal_align)
    drop = dropout.launch_args(dropout.check_dropout(dropout_p), dropout_seed)
    if seq_bounds is not None or attn_mask is not None or drop is not None:
        _check_extras(q, seq_bounds, attn_mask, bottom_right)
        decodable = seq_bounds is None and drop is None and attn_mask is not None
        if decodable and not _decode_off() and decode.applies(q, k, window, softcap):
            # A short query with SDPA's attn_mask (HF generate()'s KV-cache masks): the split-KV
            # kernels read the mask tensor, so what runs is that mask, exactly.
            return decode.decode_forward(
                q, k, v, causal_offset=0 if causal else None, scale=scale,
                mask=expand_mask(attn_mask, q, k),
            )  # fmt: skip
        return fwd.forward(
            q, k, v, causal=causal, scale=scale, config=plan_config, window=_window(window),
            softcap=check_softcap(softcap), bounds=seq_bounds,
            mask=None if attn_mask is None else expand_mask(attn_mask, q, k), dropout=drop,
        )  # fmt: skip
    if not _decode_off() and decode.applies(q, k, window, softcap):
        off = None  # no mask
        if causal:  # query i sees keys j <= i + off
            off = aligned.offset(q.shape[2], k.shape[2]) if bottom_right else 0
        return decode.decode_forward(q, k, v, causal_offset=off, scale=scale)
    if bottom_right:
        return aligned.forward(q, k, v, scale=scale, config=plan_config)
    return fwd.forward(
        q, k, v, causal=causal, scale=scale, config=plan_config, window=_window(window),
        softcap=check_softcap(softcap),
    )  # fmt: skip


def _check_extras(q, seq_bounds, attn_mask, bottom_right) -> None:
    """What the primitives check about seq_bounds, attn_mask and dropout (they can be called
    raw)."""
    if seq_bounds is not None:
        check_bounds(seq_bounds, q.shape[0], q.device)
    if seq_bounds is not None and attn_mask is not None:
        raise ValueError("attn_mask together with key_lengths/query_lengths is not supported")
    if bottom_right:
        raise ValueError(
            "causal_align='bottom_right' takes no key_lengths/query_lengths, attn_mask or "
            "dropout_p yet"
        )


def _attention_fwd_fake(
    q, k, v, causal, scale, window=None, softcap=None, causal_align="top_left", seq_bounds=None,
    attn_mask=None, dropout_p=0.0, dropout_seed=None,
):  # fmt: skip
    batch, heads, seq_q, head_dim = q.shape
    out = q.new_empty((batch, heads, seq_q, head_dim))
    lse = q.new_empty((batch, heads, seq_q), dtype=torch.float32)
    return out, lse


def _attention_bwd(
    do, q, k, v, out, lse, causal, scale, need_dq, need_dk, need_dv, window=None, softcap=None,
    causal_align="top_left", deterministic=None, seq_bounds=None, attn_mask=None, dropout_p=0.0,
    dropout_seed=None,
):  # fmt: skip
    needs = (need_dq, need_dk, need_dv)
    bottom_right = check_align(causal, causal_align)
    drop = dropout.launch_args(dropout.check_dropout(dropout_p), dropout_seed)
    if seq_bounds is not None or attn_mask is not None or drop is not None:
        _check_extras(q, seq_bounds, attn_mask, bottom_right)
    if bottom_right:
        if window is not None or softcap is not None:
            raise ValueError("causal_align='bottom_right' takes no window or softcap")
        grads = aligned.backward(
            do, q, k, v, out, lse, scale=scale, needs=needs, config=plan_config
        )
    else:
        grads = bwd.backward(
            do,
            q,
            k,
            v,
            out,
            lse,
            causal=causal,
            scale=scale,
            config=plan_config,
            needs=needs,
            window=_window(window),
            softcap=check_softcap(softcap),
            deterministic=deterministic,
            bounds=seq_bounds,
            mask=None if attn_mask is None else expand_mask(attn_mask, q, k),
            dropout=drop,
        )
    return tuple(
        g if g is not None else t.new_empty((0,)) for g, t in zip(grads, (q, k, v), strict=True)
    )


def _attention_bwd_fake(
    do, q, k, v, out, lse, causal, scale, need_dq, need_dk, need_dv, window=None, softcap=None,
    causal_align="top_left", deterministic=None, seq_bounds=None, attn_mask=None, dropout_p=0.0,
    dropout_seed=None,
):  # fmt: skip
    return tuple(
        t.new_empty(t.shape) if need else t.new_empty((0,))
        for t, need in zip((q, k, v), (need_dq, need_dk, need_dv), strict=True)
    )


# Backend keys, not CompositeExplicitAutograd: a backend kernel is the shortest dispatch. The
# two primitives are not differentiable by themselves (`_Attention` is their autograd): the
# Autograd key falls through, so their outputs never carry a grad_fn of their own.
for _name, _kernel in (("attention_fwd", _attention_fwd), ("attention_bwd", _attention_bwd)):
    for _key in ("CPU", "CUDA"):
        _LIB.impl(_name, _kernel, _key)
    _LIB.impl(_name, torch.library.fallthrough_kernel, "Autograd")
torch.library.register_fake("flashgen::attention_fwd", _attention_fwd_fake, lib=_LIB)
torch.library.register_fake("flashgen::attention_bwd", _attention_bwd_fake, lib=_LIB)
# In a plain eager call the primitives' Python kernels are called without the dispatcher hop
# (flashgen.runtime.eager); anything traced, fake or under a dispatch mode goes through the ops.
_fwd_op = direct(torch.ops.flashgen.attention_fwd.default, _attention_fwd)
_bwd_op = direct(torch.ops.flashgen.attention_bwd.default, _attention_bwd)


class _Attention(torch.autograd.Function):
    """out = attention(q, k, v): forward through `attention_fwd`, gradients through
    `attention_bwd` (only those autograd asks for)."""

    @staticmethod
    def forward(
        ctx, q, k, v, causal, scale, window, softcap, causal_align, deterministic, seq_bounds,
        attn_mask, dropout_p, dropout_seed,
    ):  # fmt: skip
        out, lse = _fwd_op(
            q, k, v, causal, scale, window, softcap, causal_align, seq_bounds, attn_mask,
            dropout_p, dropout_seed,
        )  # fmt: skip
        # optional tensors saved only when given (a None saved under AOTAutograd is no tensor)
        ctx.extras = (seq_bounds is not None, attn_mask is not None, dropout_seed is not None)
        ctx.dropout_p = dropout_p
        extras = [t for t in (seq_bounds, attn_mask, dropout_seed) if t is not None]
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
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, *rest = ctx.saved_tensors
        seq_bounds = rest.pop(0) if ctx.extras[0] else None
        attn_mask = rest.pop(0) if ctx.extras[1] else None
        dropout_seed = rest.pop(0) if ctx.extras[2] else None
        need_dq, need_dk, need_dv = ctx.needs_input_grad[:3]
        dq, dk, dv = _bwd_op(
            dout,
            q,
            k,
            v,
            out,
            lse,
            ctx.causal,
            ctx.scale,
            need_dq,
            need_dk,
            need_dv,
            ctx.window,
            ctx.softcap,
            ctx.causal_align,
            ctx.deterministic,
            seq_bounds,
            attn_mask,
            ctx.dropout_p,
            dropout_seed,
        )
        return (
            dq if need_dq else None,
            dk if need_dk else None,
            dv if need_dv else None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        )


# `_Attention.apply` without Function.apply's Python layer (flashgen.runtime.eager).
_attention_apply = function_apply(_Attention, (0, 1, 2, 9, 10, 12))


def _attention(
    q, k, v, causal=False, scale=None, window=None, softcap=None, causal_align="top_left",
    deterministic=None, seq_bounds=None, attn_mask=None, dropout_p=0.0, dropout_seed=None,
    impl=None,
):  # fmt: skip
    """The body shared by the eager function and the composite op: check, let the run-time
    choice send the call to an SDPA backend (`flashgen.runtime.vendor.route`), else flashgen's forward
    with autograd when a gradient is wanted, or the forward op alone (no autograd node)."""
    scale = check_inputs(q, k, v, causal=causal, scale=scale)
    if window is not None:
        window = list(
            normalize_window(tuple(window) if isinstance(window, list) else window, causal)
        )
    softcap = check_softcap(softcap)
    deterministic = check_deterministic(deterministic)
    bottom_right = check_align(causal, causal_align)
    if bottom_right and window is not None:
        raise ValueError("causal_align='bottom_right' does not take a window yet")
    dropout_p = dropout.check_dropout(dropout_p)
    if dropout_p > 0.0 and dropout_seed is None:
        dropout_seed = dropout.new_seed()  # PyTorch's generator: manual_seed reproduces it
    # (the seed is not read here: under tracing it is a value of the graph)
    if seq_bounds is not None or attn_mask is not None or dropout_p > 0.0:
        if attn_mask is not None:
            expand_mask(attn_mask, q, k)  # the checks, naming attn_mask
            if attn_mask.requires_grad and torch.is_grad_enabled():
                raise ValueError(
                    "attn_mask requires grad: the gradient of an additive bias is not supported "
                    "yet (detach it, or leave this call to SDPA)"
                )
        _check_extras(q, seq_bounds, attn_mask, bottom_right)
        if impl is not None and check_impl(impl) != FLASHGEN:
            raise ValueError(
                f"impl={impl!r}: key_lengths/query_lengths, attn_mask and dropout_p run "
                "flashgen's kernels only; use impl='flashgen' or None"
            )
        impl = FLASHGEN
    if bottom_right and _same_as_sdpa(q, k):
        # One query row sees every key; equal lengths are top-left causal: SDPA's own masks.
        causal, causal_align, bottom_right = q.shape[2] == k.shape[2], "top_left", False
    backward = needs_backward(q, k, v)  # asked once: for the routing and for autograd
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
        if out is not None:
            return out
    check_kernel_device(q.device)
    if backward:
        return _attention_apply(
            q, k, v, causal, scale, window, softcap, causal_align, deterministic, seq_bounds,
            attn_mask, dropout_p, dropout_seed,
        )  # fmt: skip
    return _fwd_op(
        q, k, v, causal, scale, window, softcap, causal_align, seq_bounds, attn_mask, dropout_p,
        dropout_seed,
    )[0]  # fmt: skip


def check_deterministic(value):
    """None, True or False (the op's bool?); anything else is a ValueError naming it."""
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"deterministic must be True, False or None, got {value!r}")


def _same_as_sdpa(q, k) -> bool:
    """Whether a bottom-right causal call is also one of SDPA's masks at every size this call
    can have: static sizes (plain ints, also under tracing) with one query row (it sees every
    key: no mask) or equal lengths (top-left causal)."""
    seq_q, seq_k = q.shape[2], k.shape[2]
    if not (type(seq_q) is int and type(seq_k) is int):
        return False
    return seq_q == 1 or seq_q == seq_k


_LIB.impl("attention", _attention, "CompositeImplicitAutograd")
_composite_op = torch.ops.flashgen.attention.default


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: int | tuple[int, int] | None = None,
    softcap: float | None = None,
    causal_align: str = "top_left",
    deterministic: bool | None = None,
    key_lengths=None,
    query_lengths=None,
    padding: str = "right",
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    impl: str | None = None,
):
    """FlashAttention with SDPA semantics: q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] -> [B, Hq, Sq, D].

    `causal` is SDPA's is_causal (top-left aligned), `scale` defaults to 1/sqrt(D), GQA when
    Hq is a multiple of Hkv. Differentiable in q, k and v. Raises ValueError (naming the
    argument) for inputs the kernels do not support, and RuntimeError for CPU tensors when
    Triton's interpreter is off (TRITON_INTERPRET=1 runs the kernels on the CPU).

    `window` restricts each query to a band of keys (sliding-window / local attention; tiles
    outside the band are skipped, not masked): an int w with causal=True is Mistral's window,
    query i sees keys i - w < j <= i; a pair (left, right) sees i - left <= j <= i + right (with
    causal=True, right is 0). A query whose band holds no key (possible with a two-sided band
    and Sq > Sk) gets zeros. SDPA has no window, so windowed calls always run flashgen's kernels.

    `softcap` (a positive float, Gemma-2's 50.0): logit softcapping, the scaled scores s become
    softcap * tanh(s / softcap) before the softmax, forward and backward; flashgen's kernels
    only (SDPA has no softcap).

    `causal_align` says where the causal diagonal lies when Sq != Sk: "top_left" (SDPA's
    is_causal: query i sees keys j <= i) or "bottom_right" (FlashAttention's and a KV cache's:
    the queries are the last Sq positions, query i sees keys j <= i + Sk - Sq; a query that
    sees no key, possible when Sq > Sk, gets zeros). It needs causal=True; equal lengths make
    the two the same. SDPA has no bottom-right alignment, so such calls run flashgen's kernels.

    When flashgen's kernels run a short query (Sq <= 16: a decoding step, a speculative draft)
    without window or softcap, they are the split-KV decode kernels (`flashgen.kernels.decode`;
    FLASHGEN_DECODE=0: the forward kernels). Which implementation runs is the usual run-time
    choice below: bottom-right calls always run flashgen's kernels, except one query row or
    equal lengths, which are SDPA's no-mask and is_causal cases.

    `key_lengths` / `query_lengths` (an integer tensor [B] or a list of ints; None: all valid)
    give each batch entry's valid keys / query rows, padded on the `padding` side ("right":
    valid first; "left": padding first), without an N x N mask: key blocks outside are skipped,
    padded query rows are not computed and come back as zeros (their gradients too), a row that
    sees no key gives zeros, never NaN. The causal mask and a window count positions from the
    start of each valid range (FlashAttention's varlen convention), so queries and keys padded
    alike (a decoder batch: same lengths, same side) get exactly the padded batch's causal mask;
    causal=True with padding="left" therefore needs query_lengths. Lengths of a CUDA tensor are
    not read on the host (no sync): values past the sequence are clamped to it. Flashgen's
    kernels only (never an SDPA backend, never the decode kernels).

    `attn_mask` (SDPA's): a tensor broadcastable to [B, Hq, Sq, Sk], boolean (True: the key
    is visible) or floating (added to the scaled scores, after a softcap), read by the kernels
    tile by tile with stride 0 along broadcast dims (a [B, 1, 1, Sk] padding mask is B * Sk
    values); combines with causal and window, not with key_lengths. A row that sees no key
    gets zeros; a huge finite bias (HF's finfo.min) is no hiding, as in SDPA: a row whose
    visible keys all carry it gets their values' mean, and no gradient. No gradient for the
    mask: a floating mask that requires grad is a ValueError.
    Flashgen's kernels only.

    `dropout_p` (SDPA's): attention dropout with this probability, for training (pass 0.0 in
    eval mode, as `F.scaled_dot_product_attention` callers do). The kernels draw the mask from
    a seed taken from PyTorch's default generator at each call (`torch.manual_seed`
    reproduces a run) and the backward draws the same mask again; kept probabilities are
    scaled by 1 / (1 - dropout_p). Flashgen's kernels only (not the decode kernels).

    `deterministic`: True gives bit-identical gradients run to run (flashgen's two-kernel
    backward); False allows the faster one-pass backward, whose fp32 dQ atomics add in a
    varying order; None (the default) follows `torch.are_deterministic_algorithms_enabled()`
    at the forward call. It applies to flashgen's kernels; an SDPA backend chosen for the
    call follows torch's own flag.

    `impl` None runs the faster implementation for this shape: flashgen's kernels or one of
    PyTorch's SDPA backends, by the tuning records and defaults (`flashgen.runtime.vendor`); a name from
    `flashgen.core.impls.IMPLS` ("flashgen", "sdpa_cudnn", ...) forces that one.
    """
    seq_bounds = None
    if key_lengths is not None or query_lengths is not None:
        if causal and padding == "left" and query_lengths is None:
            raise ValueError(
                "query_lengths: causal=True with padding='left' needs the query rows' lengths "
                "too (the causal mask counts positions from each valid range's start; pass "
                "query_lengths=key_lengths for a decoder batch padded alike)"
            )
        seq_bounds = padding_bounds(
            q.shape[0], q.shape[2], k.shape[2], key_lengths, query_lengths, padding, q.device
        )
    else:
        check_padding(padding)
    if impl is None and torch.compiler.is_compiling():
        # Dynamo records the composite op (one node; AOTAutograd decomposes it and makes the
        # implementation choice there, `flashgen.runtime.vendor.route`) instead of tracing the check
        # cache and the autograd.Function.
        if window is not None:
            window = list(normalize_window(window, causal))
        # dropout_p only when given: the plain call's graph stays exactly what it was
        drop = () if dropout_p == 0.0 else (dropout.check_dropout(dropout_p),)
        return _composite_op(
            q, k, v, causal, scale, window, check_softcap(softcap), causal_align,
            check_deterministic(deterministic), seq_bounds, attn_mask, *drop,
        )  # fmt: skip
    return _attention(
        q, k, v, causal, scale, window, softcap, causal_align, deterministic, seq_bounds,
        attn_mask, dropout_p, None, impl,
    )  # fmt: skip
