"""Host side of the FlashAttention backward: pick a config, launch the generated kernels.

Three launches: `attn_bwd_preprocess` (delta = rowsum(dO * O)), `attn_bwd_dkdv` (one program per
key block and kv head, summing over the query heads of its GQA group, so dK/dV are written once:
deterministic, no atomics) and `attn_bwd_dq` (one program per query block and head). The N x N
probability matrix is never stored; both kernels recompute it from the forward's logsumexp.
Gradients nobody asked for are not computed: `needs=(dq, dk, dv)` skips the dQ kernel, or the
dK/dV kernel when neither dK nor dV is wanted.

The dK/dV and dQ kernels come in two builds from one template: pointer loads (run anywhere) and
`*_tma`, which moves Q/K/V/dO through TMA tensor descriptors (Hopper and newer). Compiled ahead
of time for sm90 (triton 3.6), the descriptor build needs far fewer registers (no per-element
offset tensors): at d128 causal 64x64 4 warps, dK/dV spills 48 bytes instead of 328 and dQ uses
164 registers instead of 234. TMA needs 16-byte aligned bases and strides, so anything else
takes the pointer build; so do float32 (not a speed path) and head dims above 128 (with
256-wide tiles the descriptor dK/dV kernel spilled kilobytes, e.g. d192 64x32: 6,880 bytes of
stack against 384 for the pointer build). FLASHGEN_BWD_TMA=0 forces pointers, =1 forces
descriptors (also in the CPU interpreter, which is how the tests cover that path); the `tma`
argument of `backward` overrides both.
"""

from __future__ import annotations

import torch

from . import tma as _tma
from .codegen import load
from .config import TileConfig
from .dispatch import choose_config
from .spec import KernelSpec, dtype_name, spec_for


def bwd_spec(q, causal: bool) -> KernelSpec:
    """The backward KernelSpec for q's head dim and dtype (cached: this runs every call)."""
    return spec_for(q.shape[-1], causal, dtype_name(q.dtype), "bwd")


def _last_dim_contiguous(t):
    """The kernels take every stride but the last, which must be 1 (e.g. an expanded dO from
    `out.sum().backward()` has stride 0 everywhere)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def use_tma(*tensors) -> bool:
    """Whether `backward` takes the descriptor kernels for these (last-dim contiguous) tensors:
    the ones it makes descriptors of; only 16-bit inputs with head dim <= 128 (the builds that
    fit and measured faster)."""
    first = tensors[0]
    eligible = first.element_size() == 2 and first.shape[-1] <= 128
    return _tma.use_tma("FLASHGEN_BWD_TMA", tensors, eligible=eligible)


def _strides3(t) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def backward(
    do,
    q,
    k,
    v,
    out,
    lse,
    *,
    causal: bool,
    scale: float,
    config: TileConfig | None = None,
    needs: tuple[bool, bool, bool] = (True, True, True),
    tma: bool | None = None,
):
    """Gradients of `out = attention(q, k, v)` given `do = dL/d out`.

    Shapes as in `flashgen.fwd.forward`: q/do/out [B, Hq, Sq, D], k/v [B, Hkv, Sk, D],
    lse float32 [B, Hq, Sq] (natural log). Returns (dq, dk, dv), each a new contiguous tensor
    in the input's dtype shaped like its input, or None where `needs` says it is not wanted.
    `tma` picks the kernel build (None: `use_tma` decides); benchmarks use it to compare.
    """
    need_dq, need_dk, need_dv = (bool(n) for n in needs)
    if not (need_dq or need_dk or need_dv):
        return None, None, None
    batch, heads_q, seq_q, head_dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]
    if q.numel() == 0 or k.numel() == 0:  # empty batch or heads: nothing to launch
        grads = (torch.zeros_like(t) if n else None for t, n in zip((q, k, v), needs, strict=True))
        return tuple(grads)
    spec = bwd_spec(q, causal)
    if config is None:
        config = choose_config(spec, seq_q, seq_k)
    module = load(spec)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    do = _last_dim_contiguous(do)
    out = _last_dim_contiguous(out)
    lse = lse.contiguous()
    block_m, block_n = config.block_m, config.block_n
    launch = {"num_warps": config.num_warps, "num_stages": config.num_stages}

    delta = torch.empty((batch, heads_q, seq_q), dtype=torch.float32, device=q.device)
    module.attn_bwd_preprocess[(triton_cdiv(seq_q, block_m), batch * heads_q)](
        out, do, delta, *_strides3(out), *_strides3(do), heads_q, seq_q, BLOCK_M=block_m
    )
    dq = dk = dv = None
    if need_dk or need_dv:
        dk = torch.empty((batch, heads_kv, seq_k, head_dim), dtype=k.dtype, device=k.device)
        dv = torch.empty((batch, heads_kv, seq_k, head_dim), dtype=v.dtype, device=v.device)
    if need_dq:
        dq = torch.empty((batch, heads_q, seq_q, head_dim), dtype=q.dtype, device=q.device)
    dkdv_grid = (triton_cdiv(seq_k, block_n), batch * heads_kv)
    dq_grid = (triton_cdiv(seq_q, block_m), batch * heads_q)
    ints = (heads_q, heads_kv, seq_q, seq_k, float(scale))
    blocks = {"BLOCK_M": block_m, "BLOCK_N": block_n, **launch}
    if use_tma(q, k, v, do) if tma is None else tma:
        descs = _tma.descriptors(
            ((q, block_m), (k, block_n), (v, block_n), (do, block_m)), spec.block_d
        )
        if dk is not None:
            module.attn_bwd_dkdv_tma[dkdv_grid](*descs, lse, delta, dk, dv, *ints, **blocks)
        if dq is not None:
            module.attn_bwd_dq_tma[dq_grid](*descs, lse, delta, dq, *ints, **blocks)
    else:
        strides = (*_strides3(q), *_strides3(k), *_strides3(v), *_strides3(do))
        if dk is not None:
            module.attn_bwd_dkdv[dkdv_grid](
                q, k, v, do, lse, delta, dk, dv, *strides, *ints, **blocks
            )
        if dq is not None:
            module.attn_bwd_dq[dq_grid](q, k, v, do, lse, delta, dq, *strides, *ints, **blocks)
    return dq, (dk if need_dk else None), (dv if need_dv else None)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
