"""The two primitive ops' bodies (schemas: `flashgen.runtime.library`): which kernels run a call
and with which config. `attention_fwd` sends a short query to the split-KV decode kernels, a
bottom-right causal call to `flashgen.kernels.aligned`, the rest (lengths, masks, dropout,
windows, softcap) to the forward launcher (a call without extras through the eager path's
`plain_forward`, a masked call's repeated signature through its route, `routes`);
`attention_bwd` likewise to the backward launchers.
The config is the run-time choice (`flashgen.runtime.dispatch.plan_config`). Their fake impls
(shapes only) are registered too. Not differentiable by themselves: the Autograd key falls
through, and `flashgen.runtime.autograd` is their autograd. `_fwd_op` / `_bwd_op` are how the
layers above call them (`flashgen.runtime.eager.direct`).
"""

from __future__ import annotations

import functools
import logging

import torch

from ..kernels import aligned, bias_grad, bwd, decode, dropout, fwd, hopper
from ..kernels.alibi import check_slopes
from ..kernels.aligned import check_align
from ..kernels.launch import keep
from ..kernels.layout import new_out
from ..kernels.padding import check_bounds, key_hull
from ..kernels.plans import clear_all as _clear_plans
from ..kernels.tma import device_has_tma, env_reader
from ..kernels.validate import check_softcap, expand_mask
from . import routes
from .dispatch import on_clear, plan_config
from .eager import direct
from .library import register_primitive

_decode_env = env_reader("FLASHGEN_DECODE")
log = logging.getLogger("flashgen")


def _decode_off() -> bool:
    """FLASHGEN_DECODE=0: short queries take the forward kernels (and the SDPA routing)."""
    return _decode_env() in (b"0", "0")


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
    attn_mask=None, dropout_p=0.0, dropout_seed=None, alibi_slopes=None,
):  # fmt: skip
    if (
        attn_mask is None and window is None and softcap is None and seq_bounds is None
        and not dropout_p and alibi_slopes is None and causal_align == "top_left"
    ):  # fmt: skip
        # no extras (what a compiled graph's SDPA `is_causal` or plain call becomes): the
        # eager path's launcher, without the extras' branches and checks
        return plain_forward(q, k, v, causal, scale)
    key = None  # a masked call's route (`routes`): its decisions kept per call signature
    extras = seq_bounds is not None or alibi_slopes is not None or dropout_p
    if attn_mask is not None and not extras and not decode.applies(q, k, window, softcap):
        key = routes.route_key(q, k, v, causal, window, softcap, causal_align, attn_mask)
        route = routes.find(key)
        if route is not None:
            done = route.run(q, k, v, attn_mask, scale)
            if done is not None:
                return done
    bottom_right = check_align(causal, causal_align)
    drop = dropout.launch_args(dropout.check_dropout(dropout_p), dropout_seed)
    if alibi_slopes is not None:  # flashgen's kernels only (never SDPA)
        _check_extras(q, seq_bounds, attn_mask, bottom_right)
        alibi = check_slopes(alibi_slopes, q)
        short = not _decode_off() and decode.applies(q, k, window, softcap)
        if short and seq_bounds is None and drop is None:
            off = None  # query i sees keys j <= i + off
            if causal:
                off = aligned.offset(q.shape[2], k.shape[2]) if bottom_right else 0
            if decode.takes_alibi(attn_mask, off):
                # (a KV cache's decode step of an ALiBi model: the decode kernels add it and
                # check the mask once per call signature, as `decode_forward` does)
                return decode.decode_forward(
                    q, k, v, causal_offset=off, scale=scale, mask=attn_mask, alibi=alibi
                )
            _log_no_decode(q.shape[-1])
        mask = None if attn_mask is None else expand_mask(attn_mask, q, k)
        if bottom_right:
            return _aligned_fwd(q, k, v, scale, window, softcap, mask, alibi, drop)
        flags = (causal, window, softcap, drop, alibi)
        return fwd.forward(
            q, k, v, causal=causal, scale=scale, config=plan_config, window=_window(window),
            softcap=check_softcap(softcap), mask=mask, dropout=drop, alibi=alibi,
            bounds=_bounds(seq_bounds, mask, lambda: _forward_hull(q, k, v, mask, *flags), window),
            rows_whole=seq_bounds is None,  # a mask's key range (`_bounds`) or no bounds
        )  # fmt: skip
    if seq_bounds is not None or attn_mask is not None or drop is not None:
        _check_extras(q, seq_bounds, attn_mask, bottom_right)
        decodable = seq_bounds is None and drop is None and attn_mask is not None
        if decodable and not _decode_off() and decode.applies(q, k, window, softcap):
            # A short query with SDPA's attn_mask (HF generate()'s KV-cache masks): the split-KV
            # kernels read the mask tensor, so what runs is that mask, exactly.
            # decode_forward checks the mask once per call signature (`expand_mask`).
            off = None
            if causal:  # query i sees keys j <= i + off
                off = aligned.offset(q.shape[2], k.shape[2]) if bottom_right else 0
            return decode.decode_forward(q, k, v, causal_offset=off, scale=scale, mask=attn_mask)
        mask = None if attn_mask is None else expand_mask(attn_mask, q, k)
        if bottom_right:  # (a mask and dropout: _check_extras refused lengths)
            return _aligned_fwd(q, k, v, scale, window, softcap, mask, None, drop)
        flags = (causal, window, softcap, drop, None)
        bounds = _bounds(seq_bounds, mask, lambda: _forward_hull(q, k, v, mask, *flags), window)
        pair, cap = _window(window), check_softcap(softcap)
        done = fwd.forward(
            q, k, v, causal=causal, scale=scale, config=plan_config, window=pair, softcap=cap,
            mask=mask, dropout=drop, bounds=bounds,
            rows_whole=seq_bounds is None,  # a mask's key range (`_bounds`) or no bounds
        )  # fmt: skip
        if key is not None and q.numel():  # (an empty output: nothing launched, no plan)
            routes.remember(key, q, k, v, attn_mask, mask, causal, pair, cap, bounds)
        return done
    one_row = bottom_right and window is not None and q.shape[2] == 1
    if one_row and not _decode_off() and decode.applies(q, k, None, softcap):
        # A decode step under a sliding window: its one row sees the window's last keys, all
        # of them: the decode kernels on those keys, without a mask.
        start = aligned.first_key(1, k.shape[2], _window(window)[0])
        k, v = k[:, :, start:], v[:, :, start:]
        return decode.decode_forward(q, k, v, causal_offset=None, scale=scale)
    if not _decode_off() and decode.applies(q, k, window, softcap):
        off = None  # no mask
        if causal:  # query i sees keys j <= i + off
            off = aligned.offset(q.shape[2], k.shape[2]) if bottom_right else 0
        return decode.decode_forward(q, k, v, causal_offset=off, scale=scale)
    if bottom_right:
        return _aligned_fwd(q, k, v, scale, window, softcap, None, None, None)
    return fwd.forward(
        q, k, v, causal=causal, scale=scale, config=plan_config, window=_window(window),
        softcap=check_softcap(softcap),
    )  # fmt: skip


def _aligned_fwd(q, k, v, scale, window, softcap, mask, alibi, drop):
    """The bottom-right causal forward (`flashgen.kernels.aligned`), a causal window's left
    side as its `left` (its right side is 0), `mask` the expanded attn_mask or None, `drop`
    dropout's launch arguments or None."""
    return aligned.forward(
        q, k, v, scale=scale, softcap=check_softcap(softcap), config=plan_config,
        left=None if window is None else _window(window)[0], mask=mask, alibi=alibi,
        dropout=drop,
    )  # fmt: skip


@functools.cache
def _log_no_decode(head_dim: int) -> None:
    log.info(
        "flashgen: a short query with alibi_slopes (d%d) beside an additive attn_mask, or with "
        "more queries than keys under bottom-right causal, runs the forward kernels: the decode "
        "kernels take ALiBi alone or with a boolean mask", head_dim,
    )  # fmt: skip


def plain_forward(q, k, v, causal, scale, keep_lse=True):
    """`_attention_fwd` of a call without extras (no window, softcap, lengths, mask or
    dropout; top-left causal), called directly by the layers above in plain eager calls
    (`flashgen.runtime.eager.plain_eager`): the same kernels, without the branches and
    argument checks that only the extras need (a few microseconds of every short call,
    benchmarks/RESULTS.md, host time). `keep_lse` False: a forward no backward follows; lse
    may then be None (`flashgen.kernels.fwd.forward`)."""
    if decode.applies(q, k) and not _decode_off():
        return decode.decode_forward(q, k, v, causal_offset=0 if causal else None, scale=scale)
    return fwd.forward_plain(q, k, v, causal, scale, plan_config, keep_lse)


def plain_backward(do, q, k, v, out, lse, causal, scale, needs, deterministic):
    """`_attention_bwd` of a call without extras (as `plain_forward`), in plain eager calls:
    (dq, dk, dv) with None where `needs` (bools) says a gradient is not wanted.
    `deterministic` is a bool: the autograd nodes resolve it at the forward."""
    return bwd.backward_plain(
        do, q, k, v, out, lse, causal, scale, plan_config, needs, deterministic
    )  # fmt: skip


def _bounds(seq_bounds, mask, hopper_hull=None, window=None):
    """The launchers' bounds: the caller's, or for a key-padding mask the range of keys it
    leaves visible (`padding.key_hull`: the key tiles past it are skipped, not read) where
    that is no loss. On a GPU with TMA it is for the portable kernels: bounds take their
    pointer-load kernels instead of the TMA builds, and on the H200 a right-padded mask (79% of
    the keys visible, B4 H16/4 4k hd128) ran its forward 1.19x SDPA with the skip against 1.47x
    without, forward+backward 1.17x against 1.22x (benchmarks/RESULTS.md, session 10 B5, same
    batch). So there the hull is taken only where the Hopper forward runs the call with it
    (`hopper_hull`: the forward's callable, asked only there, `_forward_hull`; that kernel
    loads through TMA at the bounds' starts). The backward takes `_backward_bounds`. `window`
    the call's window or None: under one, finfo.min keys past the last other key are kept
    (`key_hull`'s fills_hide: a row may see only them)."""
    portable_tma = (
        seq_bounds is None and mask is not None and mask.is_cuda
        and device_has_tma(mask.device.index or 0) and (hopper_hull is None or not hopper_hull())
    )  # fmt: skip
    return None if portable_tma else _backward_bounds(seq_bounds, mask, window)


def _backward_bounds(seq_bounds, mask, window=None):
    """The backward launchers' bounds: the caller's, or a key-padding mask's key range
    (`padding.key_hull`) on every GPU. Unlike the portable forward's, the split backward's TMA
    builds take bounds, so the key tiles past each entry's last visible key are skipped, not
    read, whichever family ran the forward (the hull hides only keys that the mask hides, so
    the forward's lse, with or without it, is the same; `window` as `_bounds`). None for any
    other mask."""
    if seq_bounds is not None or mask is None:
        return seq_bounds
    return key_hull(mask, fills_hide=window is None)


def _forward_hull(q, k, v, mask, causal, window, softcap, drop, alibi) -> bool:
    """Whether the forward of this call runs in the Hopper family with its key-padding mask's
    key range as lengths (`flashgen.kernels.hopper.takes_key_hull`), for `_bounds`, which asks
    on a TMA GPU only (elsewhere it takes the hull anyway).

    Asked once per call signature (`_hulls`): the answer depends only on what the key holds
    (shapes, strides and dtype, the device, the 16-byte alignment TMA needs, the flags, the two
    environment variables `hopper.choose` reads: `fwd.env_state`), and asking was a quarter of
    a masked forward's cProfile time on an H100 (benchmarks/RESULTS.md, session 52)."""
    key = (
        q.shape, k.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, mask.stride(),
        mask.dtype, not (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15, causal,
        window is not None, softcap is not None, drop is not None, alibi is not None,
        *fwd.env_state(),
    )  # fmt: skip
    hit = _hulls.get(key)
    if hit is None:
        hit = hopper.takes_key_hull(
            q, k, v, mask, causal=causal, window=window is not None,
            softcap=softcap is not None, dropout=drop is not None, alibi=alibi is not None,
        )  # fmt: skip
        keep(_hulls, key, hit)
    return hit


# `_forward_hull`'s answers by call signature, bounded by `launch.keep`; emptied with the
# run-time choice's caches (`on_clear`) so that a test or tool changing what `choose` sees
# starts over.
_hulls: dict = {}
on_clear(_hulls.clear)


def _check_extras(q, seq_bounds, attn_mask, bottom_right) -> None:
    """What the primitives check about seq_bounds and attn_mask beside each other and the
    alignment (they can be called raw). The bottom-right alignment takes an attn_mask, ALiBi
    and dropout (run on the rows and keys `flashgen.kernels.aligned` keeps: a mask sliced
    alike, ALiBi's per-row shift given back to the lse, dropout's draws numbered on those rows
    and keys in the forward and the backward alike), not lengths."""
    if seq_bounds is not None:
        check_bounds(seq_bounds, q.shape[0], q.device)
    if seq_bounds is not None and attn_mask is not None:
        raise ValueError("attn_mask together with key_lengths/query_lengths is not supported")
    if bottom_right and seq_bounds is not None:
        raise ValueError("causal_align='bottom_right' takes no key_lengths/query_lengths yet")


def _attention_fwd_fake(
    q, k, v, causal, scale, window=None, softcap=None, causal_align="top_left", seq_bounds=None,
    attn_mask=None, dropout_p=0.0, dropout_seed=None, alibi_slopes=None,
):  # fmt: skip
    batch, heads, seq_q, _ = q.shape
    out = new_out(q)  # the strides the kernels' output has (`flashgen.kernels.layout`)
    lse = q.new_empty((batch, heads, seq_q), dtype=torch.float32)
    return out, lse


def _attention_bwd(
    do, q, k, v, out, lse, causal, scale, need_dq, need_dk, need_dv, window=None, softcap=None,
    causal_align="top_left", deterministic=None, seq_bounds=None, attn_mask=None, dropout_p=0.0,
    dropout_seed=None, alibi_slopes=None,
):  # fmt: skip
    needs = (need_dq, need_dk, need_dv)
    bottom_right = check_align(causal, causal_align)
    drop = dropout.launch_args(dropout.check_dropout(dropout_p), dropout_seed)
    alibi = None if alibi_slopes is None else check_slopes(alibi_slopes, q)
    if seq_bounds is not None or attn_mask is not None or drop is not None or alibi is not None:
        _check_extras(q, seq_bounds, attn_mask, bottom_right)
    if bottom_right:
        grads = aligned.backward(
            do, q, k, v, out, lse, scale=scale, needs=needs, softcap=check_softcap(softcap),
            config=plan_config, left=None if window is None else _window(window)[0],
            mask=None if attn_mask is None else expand_mask(attn_mask, q, k), alibi=alibi,
            dropout=drop,
        )  # fmt: skip
    else:
        mask = None if attn_mask is None else expand_mask(attn_mask, q, k)
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
            bounds=_backward_bounds(seq_bounds, mask, window),
            rows_whole=seq_bounds is None,  # a mask's key range or no bounds
            mask=mask,
            dropout=drop,
            alibi=alibi,
        )
    return tuple(
        g if g is not None else t.new_empty((0,)) for g, t in zip(grads, (q, k, v), strict=True)
    )


def _attention_bwd_bias(
    do, q, k, v, out, lse, attn_mask, causal, scale, window=None, softcap=None, dropout_p=0.0,
    dropout_seed=None, alibi_slopes=None, causal_align="top_left",
):  # fmt: skip
    if not attn_mask.is_floating_point():
        raise ValueError("attn_mask: only an additive (floating) mask has a gradient")
    drop = dropout.launch_args(dropout.check_dropout(dropout_p), dropout_seed)
    alibi = None if alibi_slopes is None else check_slopes(alibi_slopes, q)
    if check_align(causal, causal_align):
        dq, dbias = aligned.bias_backward(
            do, q, k, v, out, lse, expand_mask(attn_mask, q, k), scale=scale,
            left=None if window is None else _window(window)[0],
            softcap=check_softcap(softcap), config=plan_config, alibi=alibi, dropout=drop,
        )  # fmt: skip
        return dq, bias_grad.reduce_to(dbias, attn_mask)
    dq, dbias = bias_grad.dq_dbias(
        do, q, k, v, out, lse, expand_mask(attn_mask, q, k), causal=causal, scale=scale,
        window=_window(window), softcap=check_softcap(softcap), dropout=drop, config=plan_config,
        alibi=alibi,
    )  # fmt: skip
    return dq, bias_grad.reduce_to(dbias, attn_mask)


def _attention_bwd_bias_fake(
    do, q, k, v, out, lse, attn_mask, causal, scale, window=None, softcap=None, dropout_p=0.0,
    dropout_seed=None, alibi_slopes=None, causal_align="top_left",
):  # fmt: skip
    return q.new_empty(q.shape), attn_mask.new_empty(attn_mask.shape)


def _attention_bwd_fake(
    do, q, k, v, out, lse, causal, scale, need_dq, need_dk, need_dv, window=None, softcap=None,
    causal_align="top_left", deterministic=None, seq_bounds=None, attn_mask=None, dropout_p=0.0,
    dropout_seed=None, alibi_slopes=None,
):  # fmt: skip
    return tuple(
        t.new_empty(t.shape) if need else t.new_empty((0,))
        for t, need in zip((q, k, v), (need_dq, need_dk, need_dv), strict=True)
    )


# The primitives' registration (why backend keys and a falling-through Autograd key: there).
register_primitive("attention_fwd", _attention_fwd, _attention_fwd_fake)
register_primitive("attention_bwd", _attention_bwd, _attention_bwd_fake)
register_primitive("attention_bwd_bias", _attention_bwd_bias, _attention_bwd_bias_fake)
# In a plain eager call the primitives' Python kernels are called without the dispatcher hop
# (flashgen.runtime.eager); anything traced, fake or under a dispatch mode goes through the ops.
_fwd_op = direct(torch.ops.flashgen.attention_fwd.default, _attention_fwd)
_bwd_op = direct(torch.ops.flashgen.attention_bwd.default, _attention_bwd)
_bias_op = direct(torch.ops.flashgen.attention_bwd_bias.default, _attention_bwd_bias)
