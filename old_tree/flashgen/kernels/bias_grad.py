"""The gradient of an additive attention bias that requires grad (T5's relative position bias,
a learned ALiBi-like bias): dQ and dBias from one walk of the dQ kernel.

The bias enters the scaled scores, s = scale * q k^T (+ softcap) + bias, so its gradient is
dS = P o (dP - Delta) (with the dropout mask in dP when there is dropout), the very tile the dQ
kernel computes at every visited (query block, key block) pair of a head; `attn_bwd_dq_dbias`
(templates/attn_bwd.py.jinja, additive-mask kernels only) stores it as it goes. Pairs the walk
never visits (above the causal diagonal, outside a window) have dS = 0 and stay as allocated.
The result is float32 [B, Hq, Sq, Sk]; `reduce_to` sums it over the dims the user's bias was
broadcast along, as autograd's broadcasting rule wants. The dK/dV kernel is untouched (the
caller runs it as usual, `flashgen.kernels.bwd.backward` with need_dq=False).

Cost: one float32 plane per (batch, head) written once; SDPA's memory-efficient backward
materialises the same [B, Hq, Sq, Sk] gradient. Launches go through Triton's JIT (no launch
plan): a bias gradient is a training call, where the kernel, not the host, costs.
"""

from __future__ import annotations

import torch

from ..core.spec import cdiv, dtype_name, spec_for
from .codegen import load
from .plans import plan_config


def _strides3(t) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def dq_dbias(
    do, q, k, v, out, lse, mask, *, causal: bool, scale: float, window=None, softcap=None,
    dropout=None, config=None, alibi=None,
):  # fmt: skip
    """(dq like q, dbias float32 [B, Hq, Sq, Sk]) for the forward call with the additive
    `mask` (the expanded [B, Hq, Sq, Sk] view, `flashgen.kernels.validate.expand_mask`) and the
    same causal / scale / window / softcap / dropout ((p, seed)) / alibi (checked slopes)
    arguments; `config` as the launchers take it (`flashgen.kernels.plans`)."""
    if window is not None and causal:
        window = (window[0], 0)
    batch, heads_q, seq_q, dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]
    spec = spec_for(
        dim, causal, dtype_name(q.dtype), "bwd", window is not None, softcap is not None,
        attn_mask="add", dropout=dropout is not None, alibi=alibi is not None,
    )  # fmt: skip
    cfg, _ = plan_config(config, spec, seq_q, seq_k, q)
    dq = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    dbias = torch.zeros((batch, heads_q, seq_q, seq_k), dtype=torch.float32, device=q.device)
    if dq.numel() == 0 or dbias.numel() == 0:
        return dq, dbias
    module = load(spec)
    lse = lse.contiguous()
    delta = torch.empty_like(lse)
    module.attn_bwd_preprocess[(cdiv(seq_q, cfg.block_m), batch * heads_q)](
        out, do, delta, *_strides3(out), *_strides3(do), heads_q, seq_q, BLOCK_M=cfg.block_m
    )
    extra = () if window is None else (int(window[0]), int(window[1]))
    if softcap is not None:
        extra = (*extra, float(softcap) / scale)  # the kernels cap raw scores: cap / scale
    extra = (*extra, mask, *mask.stride(), dbias)
    if alibi is not None:
        extra = (*extra, alibi, alibi.stride(0))
    if dropout is not None:
        extra = (*extra, float(dropout[0]), int(dropout[1]))
    module.attn_bwd_dq_dbias[(cdiv(seq_q, cfg.block_m), batch * heads_q)](
        q, k, v, do, lse, delta, dq, *_strides3(q), *_strides3(k), *_strides3(v),
        *_strides3(do), heads_q, heads_kv, seq_q, seq_k, float(scale), *extra,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, MASK_PER_KEY=mask.stride(2) == 0,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return dq, dbias


def reduce_to(dbias: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`dbias` [B, Hq, Sq, Sk] summed over the dims `bias` (broadcastable to it, at most 4 dims)
    was broadcast along, in `bias`'s shape and dtype."""
    shape = (1,) * (4 - bias.dim()) + tuple(bias.shape)
    dims = tuple(i for i, (n, full) in enumerate(zip(shape, dbias.shape, strict=True)) if n != full)
    if dims:
        dbias = dbias.sum(dims, keepdim=True)
    return dbias.reshape(bias.shape).to(bias.dtype)
