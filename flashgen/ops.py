"""The public attention function: validate -> run-time choice -> kernels.

Layers (Liger-style): generated kernels -> host launchers (`flashgen.kernels.fwd.forward`,
`flashgen.kernels.bwd.backward`) -> library ops with fake impls -> autograd -> this function.
The op's parts, one job a module, under `flashgen/runtime/`: `library.py` (the three
`flashgen::` op schemas and what their arguments mean), `primitives.py` (the forward and backward
ops' bodies: which kernels run, with the run-time choice's config), `autograd.py` (their
autograd.Function), `composite.py` (the composite op: checks, SDPA routing, autograd or not).
Eagerly this function calls the composite op's body; under `torch.compile` it records the
composite op (`torch.ops.flashgen.attention.default`), one graph node.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .kernels import dropout
from .kernels.padding import bounds as padding_bounds
from .kernels.padding import check_padding
from .kernels.validate import check_softcap, normalize_window
from .runtime.composite import (
    _attention,
    _composite_op,
    _plain_attention,
    check_deterministic,
)

__all__ = ["attention", "attention_varlen"]

# Whether autocast is on for any device: one C call (torch's private helper; where a torch lacks
# it, every call asks `_autocast`'s per-device question instead).
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


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
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
    impl: str | None = None,
):
    """FlashAttention with SDPA semantics: q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] -> [B, Hq, Sq, D].
    Under `torch.autocast` q, k and v are cast to its dtype first, as SDPA's are (`_autocast`).

    `causal` is SDPA's is_causal (top-left aligned), `scale` defaults to 1/sqrt(D), GQA when
    Hq is a multiple of Hkv. v may have its own head dim Dv (latent attention, DeepSeek's):
    the output is then [B, Hq, Sq, Dv] and the scale defaults to q's 1/sqrt(D); the kernels run
    the narrower side zero-padded to the wider (`flashgen.runtime.value_dim`).
    Differentiable in q, k and v. Raises ValueError (naming the
    argument) for inputs the kernels do not support, and RuntimeError for CPU tensors when
    Triton's interpreter is off (TRITON_INTERPRET=1 runs the kernels on the CPU).

    `window` restricts each query to a band of keys (sliding-window / local attention; tiles
    outside the band are skipped, not masked): an int w with causal=True is Mistral's window,
    query i sees keys i - w < j <= i; a pair (left, right) sees i - left <= j <= i + right (with
    causal=True, right is 0). A query whose band holds no key (possible with a two-sided band
    and Sq > Sk) gets zeros. With causal_align="bottom_right" the window ends at that diagonal
    (a KV cache's sliding window). SDPA has no window, so windowed calls always run flashgen's
    kernels.

    `softcap` (a positive float, Gemma-2's 50.0): logit softcapping, the scaled scores s become
    softcap * tanh(s / softcap) before the softmax, forward and backward; flashgen's kernels
    only (SDPA has no softcap).

    `causal_align` says where the causal diagonal lies when Sq != Sk: "top_left" (SDPA's
    is_causal: query i sees keys j <= i) or "bottom_right" (FlashAttention's and a KV cache's:
    the queries are the last Sq positions, query i sees keys j <= i + Sk - Sq; a query that
    sees no key, possible when Sq > Sk, gets zeros). It needs causal=True; equal lengths make
    the two the same. SDPA has no bottom-right alignment, so such calls run flashgen's kernels.
    It combines with a window, softcap, attn_mask (a learned bias too), ALiBi and dropout
    (drawn on the rows and keys the kernels run: `flashgen.kernels.aligned.keep_mask`), not
    with key_lengths.

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
    every visible score lies below about -45,000 under such a bias gets the softmax of those
    scores (their values' mean where the bias absorbs them: float32's and bfloat16's
    finfo.min), but no gradient. A floating mask that
    requires grad (T5's relative position bias, a learned bias) gets its gradient, summed over
    the dims it was broadcast along (`flashgen.kernels.bias_grad`).
    Flashgen's kernels only.

    `dropout_p` (SDPA's): attention dropout with this probability, for training (pass 0.0 in
    eval mode, as `F.scaled_dot_product_attention` callers do). The kernels draw the mask from
    a seed taken from PyTorch's default generator at each call (`torch.manual_seed`
    reproduces a run) and the backward draws the same mask again; kept probabilities are
    scaled by 1 / (1 - dropout_p). Flashgen's kernels only (not the decode kernels).

    `alibi_slopes` (ALiBi: BLOOM, MPT): a float32 tensor [Hq] or [B, Hq], one slope per query
    head (and batch entry); the kernels add slope * (j - i) to the scaled score of query i and
    key j (key index minus query index, positions local to key_lengths' ranges; with
    causal=True that is HF's -slope * (i - j)), after a softcap, computed from the positions
    (no N x N tensor). The slopes are constants: no gradient, and one that requires grad is a
    ValueError (pass `.detach()`). Combines with causal (either alignment), window, softcap,
    GQA, attn_mask, key_lengths and dropout. Flashgen's own kernels only
    (never an SDPA backend or the one-pass backward; the Hopper forward family without
    key_lengths; a query of at most 16 rows the decode kernels, alone or beside a boolean
    attn_mask; `flashgen.kernels.alibi`).

    `sinks` (attention sinks, GPT-OSS's): a floating tensor [Hq], one logit per query head
    that joins every row's softmax as a key without a value, so a row's probabilities sum to
    less than one (exp(s_ij - logsumexp(s_i, sink_h))); differentiable (its gradient comes
    from dout, the output and the row's logsumexp, one pass over them). Combines with every other
    argument except dropout_p; a row that sees no key gets zeros, and so does a row whose
    visible keys all carry a huge finite bias (the sink's logit outweighs them, as in the
    softmax written out; without sinks such a row gets their mean). Flashgen's kernels only
    (SDPA has no sinks): their output is rescaled by each row's share
    (`flashgen.runtime.sinks`).

    `deterministic`: True gives bit-identical gradients run to run (flashgen's two-kernel
    backward); False allows the faster one-pass backward, whose fp32 dQ atomics add in a
    varying order; None (the default) follows `torch.are_deterministic_algorithms_enabled()`
    at the forward call. It applies to flashgen's kernels; an SDPA backend chosen for the
    call follows torch's own flag.

    `impl` None runs the faster implementation for this shape: flashgen's kernels or one of
    PyTorch's SDPA backends, by the tuning records and defaults (`flashgen.runtime.vendor`); a name from
    `flashgen.core.impls.IMPLS` ("flashgen", "sdpa_cudnn", ...) forces that one.
    """
    if _any_autocast():
        q, k, v = _autocast(q, k, v)
    if (
        window is None
        and softcap is None
        and attn_mask is None
        and key_lengths is None
        and query_lengths is None
        and type(dropout_p) is float
        and dropout_p == 0.0
        and alibi_slopes is None
        and sinks is None
        and causal_align == "top_left"
        and padding == "right"
        and not torch.compiler.is_compiling()
    ):
        # The common eager call: none of the extras' checks and branches (host time).
        return _plain_attention(q, k, v, causal, scale, deterministic, impl)
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
        # alibi_slopes and sinks likewise only when given
        given = {"alibi_slopes": alibi_slopes, "sinks": sinks}
        named = {name: t for name, t in given.items() if t is not None}
        return _composite_op(
            q, k, v, causal, scale, window, check_softcap(softcap), causal_align,
            check_deterministic(deterministic), seq_bounds, attn_mask, *drop, **named,
        )  # fmt: skip
    return _attention(
        q, k, v, causal, scale, window, softcap, causal_align, deterministic, seq_bounds,
        attn_mask, dropout_p, None, alibi_slopes, sinks, impl,
    )  # fmt: skip


def _autocast(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k and v as SDPA gets them under `torch.autocast` for q's device: each floating one but
    float64 cast to autocast's dtype. So a float32 model trained under autocast runs the kernels
    in float16/bfloat16, and q and k left in float32 beside a low-precision v (rotary embeddings
    with float32 tables do that) are one dtype again, as in `F.scaled_dot_product_attention`.
    Masks, ALiBi slopes and sinks are not cast (the kernels read them in float32)."""
    device = q.device.type
    if not torch.is_autocast_enabled(device):
        return q, k, v
    low = torch.get_autocast_dtype(device)

    def cast(t: Tensor) -> Tensor:
        if t.is_floating_point() and t.dtype not in (low, torch.float64):
            return t.to(low)
        return t

    return cast(q), cast(k), cast(v)


def attention_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: int | tuple[int, int] | None = None,
    softcap: float | None = None,
) -> Tensor:
    """Attention over packed variable-length sequences (FlashAttention's varlen layout).

    q [Tq, Hq, D], k/v [Tk, Hkv, D] hold N sequences one after another: sequence b's queries
    are rows cu_seqlens_q[b]:cu_seqlens_q[b + 1], its keys cu_seqlens_k[b]:cu_seqlens_k[b + 1]
    (integer tensors [N + 1] starting at 0), and each attends only within itself, so a packed
    training batch runs without padding or an N x N mask. Returns [Tq, Hq, D] (a transposed
    view of a contiguous [Hq, Tq, D] buffer: `.reshape` it, not `.view`). Differentiable in q, k
    and v (deterministic: no atomics).

    `causal` (each sequence top-left aligned from its own start), `scale`, `window` and
    `softcap` as in `attention`, counted within each sequence; GQA when Hq is a multiple of
    Hkv. `max_seqlen_q`/`max_seqlen_k`: the longest query / key sequence (None: read from the
    offsets, one host sync; under torch.compile pass them, or that read breaks the graph).
    Query rows past cu_seqlens_q[-1] get zeros. Flashgen's portable kernels only (no SDPA
    backend, no Hopper family; no dropout, no attn_mask). Under torch.compile the call is two
    opaque ops, forward and backward (`flashgen.runtime.varlen`). Under `torch.autocast` q, k
    and v are cast as `attention` casts them.
    """
    from .kernels import varlen as _varlen
    from .kernels.validate import check_inputs, check_kernel_device
    from .runtime.varlen import packed_attention

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 3:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 3-D tensor [total, heads, head_dim], got {shape}")
    if _any_autocast():
        q, k, v = _autocast(q, k, v)
    # the kernels' 4-D views [1, heads, total, D]; check_inputs applies every other rule
    q4, k4, v4 = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    scale = check_inputs(q4, k4, v4, causal=causal, scale=scale)
    check_kernel_device(q.device)
    cu_q = _varlen.check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], q.device)
    cu_k = _varlen.check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], q.device)
    bounds = _varlen.packed_bounds(cu_q, cu_k)
    max_q = _max_len("max_seqlen_q", max_seqlen_q, cu_q)
    max_k = _max_len("max_seqlen_k", max_seqlen_k, cu_k)
    out = packed_attention(
        q4, k4, v4, bounds, max_q, max_k, causal, scale, normalize_window(window, causal),
        check_softcap(softcap),
    )  # fmt: skip
    return out[0].transpose(0, 1)


def _max_len(name: str, given, cu: Tensor) -> int:
    if given is None:
        return int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
    if isinstance(given, bool) or not isinstance(given, (int, torch.SymInt)) or given < 0:
        raise ValueError(f"{name} must be an int >= 0 or None, got {given!r}")
    return given
