"""Recognisers: hand-written attention (walked from its softmax) and
F.scaled_dot_product_attention. Each returns a Match or raises Skip with a reason."""

from __future__ import annotations

from typing import Any

import torch

from .alibi import prove_alibi
from .core import (
    SOFTMAX_FNS,
    Match,
    Site,
    Skip,
    dropout_prob,
    example_value,
    is_fn,
    known_eq,
    location,
    node_arg,
)
from .mask_reading import (
    additive_split,
    causal_and_key_mask,
    key_row,
    mask_tensor,
    read_masks,
    take_alibi,
)
from .mask_values import Values
from .masks import prove_structure
from .softmax_walk import SoftmaxWalk


def is_softmax(n: Any) -> bool:
    return is_fn(n, SOFTMAX_FNS, ("softmax",))


def softmax_dim_ok(n: Any) -> bool:
    dim = node_arg(n, 1, "dim")
    nd = example_value(n).dim()
    return isinstance(dim, int) and dim % nd == nd - 1


def autocast_dtype(products: tuple, operands: tuple) -> torch.dtype | None:
    """float16 or bfloat16 where autocast cast this attention's operands for its products: every
    product's value (Q K^T and P V; SDPA's output) is of that dtype while q, k or v is float32.
    Nothing else makes such a graph: without autocast a matmul or SDPA of float32 operands is
    float32, and one of mixed dtypes fails. Under autocast each product casts its floating
    operands to that dtype first, so the kernels given q, k and v cast to it compute what eager
    does (their scores and probabilities in float32, where eager's products round the scores
    to that dtype). None otherwise (the operands' own dtypes decide)."""
    out = {getattr(example_value(p), "dtype", None) for p in products}
    ins = {getattr(example_value(t), "dtype", None) for t in operands}
    if len(out) != 1:
        return None
    (low,) = out
    if low not in (torch.float16, torch.bfloat16) or not ins <= {low, torch.float32}:
        return None
    return low if torch.float32 in ins else None


def match_softmax(sm: Any, values: Values) -> Match | None:
    """Walk up from a softmax to Q K^T and down to P V (`softmax_walk`), then read the masks
    met on the way: ALiBi, a causal structure, a window, or a tensor the kernels read. None if
    this is not attention; Skip with the first problem met where it is but cannot run."""
    w = SoftmaxWalk(sm)
    if not (w.up() and w.product() and w.down()):
        return None
    site = Site(kind=w.kind, location=location(sm))
    q, k, v = w.operands()
    alibi, not_alibi = take_alibi(w)
    r = read_masks(w, values, not_alibi)
    m = Match(
        site, q, k, v, w.out, r.causal, w.terms, interior=w.interior, window=r.window,
        align=r.align,
    )  # fmt: skip
    m.attn_mask = r.tensor_mask
    m.mask_row = r.mask_row
    m.mask_fill = r.fill
    if r.hides is not None:
        m.mask_hides, m.empty_rows, m.rows_from = r.hides, v, r.rows_from
    m.mask_negated = r.tensor_mask is not None and w.masks[0][0] == "sub"
    m.alibi = alibi
    m.key_bias = r.key_bias
    m.dropout_p = w.drop_p
    m.softcap = w.softcap
    m.head_scales = w.head_scales
    m.sinks = w.sinks
    m.three_d = example_value(q).dim() == 3
    m.flat_out = w.unflat is not None
    m.autocast = autocast_dtype((w.scores, w.out), (q, k, v))
    if w.problems:
        raise Skip(w.problems[0])
    return m


def match_sdpa(n: Any, values: Values) -> Match:
    """F.scaled_dot_product_attention: accepted with is_causal/scale/enable_gqa, a causal or
    tensor attn_mask, and a constant dropout_p (the kernels' dropout)."""
    q, k, v = (node_arg(n, i, name) for i, name in enumerate(("query", "key", "value")))
    mask = node_arg(n, 3, "attn_mask")
    dropout_p = node_arg(n, 4, "dropout_p", 0.0)
    is_causal = node_arg(n, 5, "is_causal", False)
    scale = node_arg(n, 6, "scale")
    enable_gqa = node_arg(n, 7, "enable_gqa", False)
    site = Site(kind="sdpa", location=location(n))
    if not isinstance(is_causal, bool):
        raise Skip("is_causal is not a Python constant")
    if not isinstance(enable_gqa, bool):
        raise Skip("enable_gqa is not a Python constant")
    # SDPA's dropout_p applies whatever the module's mode: the graph's constant is the rate.
    dropout_p = dropout_prob(dropout_p, True, "SDPA")
    window = None
    align = "top_left"
    tensor_mask = None
    rows_from = None  # (an additive mask split: the whole mask, for the rows it hides whole)
    mask_row = False  # (`mask_reading.key_row`)
    alibi = None
    qe, ke = example_value(q), example_value(k)
    tq, tk = qe.shape[-2], ke.shape[-2]
    if mask is not None and is_causal:
        raise Skip("attn_mask together with is_causal=True is not supported")
    me = example_value(mask)
    if isinstance(me, torch.Tensor) and me.is_floating_point():
        try:  # ALiBi: the kernels compute the bias from the slopes
            alibi = prove_alibi(mask, example_value(k).shape[-2], 4)
            mask = None
        except Skip:
            pass
    if mask is not None:
        try:
            is_causal, window, align = prove_structure(
                mask, values, example_value(q).shape[-2], example_value(k).shape[-2], keep=True
            )
        except Skip:
            split = causal_and_key_mask(
                mask, values, example_value(q).shape[-2], example_value(k).shape[-2]
            )
            added = None
            if split is None and (not enable_gqa or known_eq(qe.shape[-3], ke.shape[-3])):
                # a float mask `where(causal & keep, 0, finfo.min)`: as it, split (rows it
                # hides whole: eager's mean of v, which takes v's heads equal to q's)
                added = additive_split(("add", mask, None), 0, dropout_p, None, values, tq, tk)
            if split is not None:  # HF's padded decoder batch: causal (or a band) + a key mask
                (is_causal, window, align), tensor_mask = split
            elif added is not None:
                (is_causal, window, align), tensor_mask, rows_from = added
            else:
                # Not a causal mask: the kernel reads the tensor itself (exact by
                # construction, at every shape the graph accepts), its first row alone where
                # every row is the same (a float padding mask beside dropout)
                tensor_mask = mask_tensor(mask)
                mask_row = key_row(("add", mask, None), 0, values, tq, tk)
    terms: list[Any] = [None] if scale is None else [(scale, 1)]
    m = Match(site, q, k, v, n, is_causal, terms, interior=[n], window=window, align=align)
    m.attn_mask = tensor_mask
    m.mask_row = mask_row
    if rows_from is not None:
        m.empty_rows, m.rows_from = v, rows_from
    m.alibi = alibi
    m.dropout_p = dropout_p
    m.three_d = example_value(q).dim() == 3
    m.autocast = autocast_dtype((n,), (q, k, v))
    read = tensor_mask is not None or rows_from is not None
    if m.autocast is not None and read and me.dtype not in (torch.bool, m.autocast):
        # (autocast casts SDPA's floating attn_mask too: a finfo(float32).min fill is -inf in
        # float16 and bfloat16, so a row it hides entirely is NaN in eager)
        raise Skip(
            f"under autocast SDPA casts its {str(me.dtype).replace('torch.', '')} attn_mask to "
            f"{str(m.autocast).replace('torch.', '')} as well; left to PyTorch"
        )
    if not enable_gqa and not known_eq(example_value(q).shape[-3], example_value(k).shape[-3]):
        raise Skip("query and key head counts differ without enable_gqa=True")
    return m
