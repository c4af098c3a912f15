"""Packed variable-length sequences: host launchers for the portable kernels' `packed` specs.

A training batch of documents packed one after another (FlashAttention's varlen API, document
masking) needs neither padding nor an N x N mask: each sequence is one contiguous range of rows
of q [Tq, Hq, D] and of k/v [Tk, Hkv, D], given by cumulative offsets `cu_seqlens` ([N + 1],
int32, starting at 0). The padded-batch kernels (`KernelSpec.lengths`) already walk one valid
range per batch entry, counting the causal mask and the window from its start; the packed specs
(`KernelSpec.packed`) read their range from the same SeqBounds rows, with the inputs' batch
stride 0 (every "batch entry" is a range of the one packed tensor), and store out/lse and the
gradients in the packed layout instead of per batch entry. So one program of the grid is one
(sequence, head, query block) and blocks past a sequence's end do nothing: the work is that of
the real tokens, never that of the longest sequence times N.

Tensors here are the kernels' 4-D views: q [1, Hq, Tq, D] (any strides, last dim contiguous;
`flashgen.ops.attention_varlen` passes a transposed view of the user's [Tq, Hq, D]), k/v
[1, Hkv, Tk, D]. Launches go through Triton's JIT (no launch plans: packed batches are training
shapes, where the kernel, not the host, costs). The Hopper families take no packed spec.
TMA: the forward loads Q/K/V through descriptors where `flashgen.kernels.fwd` would
(FLASHGEN_FWD_TMA=0/1 forces; out goes through pointers), the backward takes the split
kernels' TMA builds where `flashgen.kernels.bwd` would (16-bit, head dim <= 128;
FLASHGEN_BWD_TMA=0/1 forces). On the H200 (B2, pointer builds) the packed forward took 0.44 ms
and the backward 1.73 ms where the same sequences padded took 0.31 and 1.11 ms.
"""

from __future__ import annotations

import math

import torch

from ..core.config import TileConfig
from ..core.spec import cdiv, dtype_name, spec_for
from . import tma
from .codegen import load
from .plans import LOG2E, fixed_max


def check_cu_seqlens(name: str, cu, total: int, device) -> torch.Tensor:
    """`cu` (cumulative sequence offsets, [N + 1], integer, cu[0] = 0, non-decreasing, last <=
    `total`) as int32 on `device`; ValueError naming the argument otherwise. Values of a CUDA
    tensor are not read on the host (no sync); the kernels clamp nothing there, so a wrong one
    is the caller's bug, as in FlashAttention's varlen API."""
    if not isinstance(cu, torch.Tensor):
        raise ValueError(f"{name} must be a 1-D integer tensor, got {type(cu).__name__}")
    if cu.dtype.is_floating_point or cu.dtype.is_complex or cu.dtype == torch.bool:
        raise ValueError(f"{name} must have an integer dtype, got {cu.dtype}")
    if cu.dim() != 1 or cu.shape[0] < 2:
        raise ValueError(f"{name} must be 1-D with at least 2 entries, got {tuple(cu.shape)}")
    if cu.device.type == "cpu" and not torch.compiler.is_compiling():
        values = cu.tolist()
        steps = [b - a for a, b in zip(values, values[1:], strict=False)]
        if values[0] != 0 or min(steps) < 0 or values[-1] > total:
            raise ValueError(
                f"{name} must start at 0, never decrease and end at most at {total} (the packed "
                f"length), got {values}"
            )
    return cu.to(device=device, dtype=torch.int32)


def packed_bounds(cu_q: torch.Tensor, cu_k: torch.Tensor) -> torch.Tensor:
    """The kernels' SeqBounds for packed sequences: int32 [N, 4] = (q offset, q length, k
    offset, k length) per sequence, from the two cumulative-offset tensors (plain torch ops on
    their device)."""
    if cu_q.shape != cu_k.shape:
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must have the same shape (one entry per sequence "
            f"plus one), got {tuple(cu_q.shape)} and {tuple(cu_k.shape)}"
        )
    starts_q, starts_k = cu_q[:-1], cu_k[:-1]
    cols = (starts_q, cu_q[1:] - starts_q, starts_k, cu_k[1:] - starts_k)
    return torch.stack(cols, 1).to(torch.int32).contiguous()


def _spec(q, causal, direction, window, softcap):
    return spec_for(
        q.shape[-1], causal, dtype_name(q.dtype), direction, window is not None,
        softcap is not None, True, packed=True,
    )  # fmt: skip


def _config(config, spec) -> TileConfig:
    if isinstance(config, TileConfig):
        return config
    from ..hardware.tiles import default_config

    return default_config(spec)


def _extras(window, softcap, scale) -> tuple:
    extra = () if window is None else (int(window[0]), int(window[1]))
    if softcap is not None:
        extra = (*extra, float(softcap) / scale)  # the kernels cap raw scores: cap / scale
    return extra


def _strides(t) -> tuple:
    """Head and row strides after a batch stride of 0: every sequence reads the one tensor."""
    return (0, t.stride(1), t.stride(2))


def forward(
    q, k, v, bounds, max_q: int, max_k: int, *, causal: bool, scale: float | None = None,
    window=None, softcap=None, config: TileConfig | None = None,
):  # fmt: skip
    """(out [1, Hq, Tq, D] contiguous, lse float32 [1, Hq, Tq]) of packed attention.

    `bounds`: `packed_bounds`; `max_q`/`max_k`: at least the longest query / key range (the
    grid's extent; a smaller value leaves rows uncomputed). `window` (left, right) as the
    kernels take it (`flashgen.kernels.validate.normalize_window`), counted within each
    sequence; `softcap` a positive float. Rows of no sequence get zeros and lse = +inf, as a
    row that sees no key."""
    if window is not None and causal:
        window = (window[0], 0)
    heads_q, total_q, dim = q.shape[1:]
    heads_kv = k.shape[1]
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    spec = _spec(q, causal, "fwd", window, softcap)
    cfg = _config(config, spec)
    out = torch.zeros((1, heads_q, total_q, dim), dtype=q.dtype, device=q.device)
    lse = torch.full((1, heads_q, total_q), float("inf"), dtype=torch.float32, device=q.device)
    n_seq = bounds.shape[0]
    if out.numel() == 0 or n_seq == 0 or max_q <= 0:
        return out, lse
    grid = (cdiv(max_q, cfg.block_m) * n_seq * heads_q,)
    module = load(spec)
    ints = (
        heads_q, heads_q // heads_kv, max_q, max(max_k, 1), scale * LOG2E,
        *_extras(window, softcap, scale), bounds, total_q,
    )  # fmt: skip
    options = {
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
    }  # fmt: skip
    if fixed_max(spec, softcap):  # a cap that bounds the scores: no running max
        options["FIXED_MAX"] = True
    if tma.use_tma("FLASHGEN_FWD_TMA", (q, k, v)):
        # Q/K/V through descriptors at batch coordinate 0; out through pointers (a TMA store
        # of a block would write past its sequence's end)
        rows = (cfg.block_m, cfg.block_n, cfg.block_n)
        make = tma.descriptor_factory()
        descs = [
            make(t, *tma.descriptor_template(t, n, spec.block_d))
            for t, n in zip((q, k, v), rows, strict=True)
        ]
        module.attn_fwd_tma[grid](*descs, out, lse, *ints, **options)
    else:
        strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(out))
        module.attn_fwd[grid](q, k, v, out, lse, *strides, *ints, **options)
    return out, lse


def backward(
    do, q, k, v, out, lse, bounds, max_q: int, max_k: int, *, causal: bool,
    scale: float | None = None, window=None, softcap=None, config: TileConfig | None = None,
):  # fmt: skip
    """(dq [1, Hq, Tq, D], dk, dv [1, Hkv, Tk, D]), contiguous, of `forward`'s call with the
    same arguments; `out`/`lse` are its results, `do` the output's gradient (any strides, last
    dim contiguous). The split backward's two kernels: no atomics, deterministic. Rows of no
    sequence get zero gradients."""
    if window is not None and causal:
        window = (window[0], 0)
    heads_q, total_q, dim = q.shape[1:]
    heads_kv, total_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    spec = _spec(q, causal, "bwd", window, softcap)
    cfg = _config(config, spec)
    dq = torch.zeros((1, heads_q, total_q, dim), dtype=q.dtype, device=q.device)
    dk = torch.zeros((1, heads_kv, total_k, dim), dtype=k.dtype, device=k.device)
    dv = torch.zeros((1, heads_kv, total_k, dim), dtype=v.dtype, device=v.device)
    n_seq = bounds.shape[0]
    if dq.numel() == 0 or dk.numel() == 0 or n_seq == 0 or max_q <= 0:
        return dq, dk, dv
    module = load(spec)
    delta = torch.empty_like(lse)
    # Delta = rowsum(out * do) needs no sequences: one pass over the packed rows
    module.attn_bwd_preprocess[(cdiv(total_q, cfg.block_m), heads_q)](
        out, do, delta, *out.stride()[:3], *do.stride()[:3], heads_q, total_q,
        BLOCK_M=cfg.block_m,
    )  # fmt: skip
    ints = (
        heads_q, heads_kv, max_q, max(max_k, 1), scale, *_extras(window, softcap, scale),
        bounds, total_q, total_k,
    )  # fmt: skip
    options = {
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
    }  # fmt: skip
    eligible = q.element_size() == 2 and dim <= 128  # as `flashgen.kernels.bwd`'s TMA builds
    if tma.use_tma("FLASHGEN_BWD_TMA", (q, k, v, do), eligible=eligible):
        # Q/K/V/dO through descriptors over the packed [1, heads, T, D] views, loaded at batch
        # coordinate 0 (rows of the neighbouring sequences are masked like ragged rows)
        make = tma.descriptor_factory()
        rows = {"q": cfg.block_m, "k": cfg.block_n, "v": cfg.block_n, "do": cfg.block_m}
        descs = [
            make(t, *tma.descriptor_template(t, rows[name], spec.block_d))
            for name, t in (("q", q), ("k", k), ("v", v), ("do", do))
        ]
        dkdv, dq_kernel, head = module.attn_bwd_dkdv_tma, module.attn_bwd_dq_tma, tuple(descs)
        strides = ()
    else:
        dkdv, dq_kernel, head = module.attn_bwd_dkdv, module.attn_bwd_dq, (q, k, v, do)
        strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(do))
    dkdv[(cdiv(max(max_k, 1), cfg.block_n), n_seq * heads_kv)](
        *head, lse, delta, dk, dv, *strides, *ints, **options
    )
    dq_kernel[(cdiv(max_q, cfg.block_m), n_seq * heads_q)](
        *head, lse, delta, dq, *strides, *ints, **options
    )
    return dq, dk, dv
