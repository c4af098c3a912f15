"""Host launcher for the generated forward kernel.

`forward` runs on every attention call, so it does the minimum: pick the spec (cached), pick the
config (dispatch caches it), allocate out/lse and launch. Input validation is the caller's job
(`flashgen.validate.check_inputs`, which `flashgen.ops.attention` runs first); this function
assumes inputs that passed it.

Two kernels come from one template: `attn_fwd` (pointer loads, runs anywhere) and
`attn_fwd_tma` (Q/K/V/O through TMA tensor descriptors, Hopper and newer). On the H200 the
descriptor version measured 5-8% faster (../shared/anchors), and TMA's zero fill replaces the
ragged-edge masks. It needs 16-byte aligned bases and strides, so anything else (and any
pre-Hopper GPU) takes the pointer kernel. FLASHGEN_FWD_TMA=0 forces pointers, =1 forces
descriptors (also in the CPU interpreter, which is how the tests cover that path).

On an sm_90 GPU a second family, the warp-specialised Gluon kernel of `flashgen.hopper`, takes
the specs where it measured faster (`hopper.choose` says which, and logs why not); an explicit
`config` always means the portable family.
"""

from __future__ import annotations

import math

import torch

from . import hopper, tma
from .codegen import load
from .dispatch import choose_config
from .spec import dtype_name, spec_for

LOG2E = 1.4426950408889634


def use_tma(q, k, v, out=None) -> bool:
    """Whether `forward` takes the descriptor kernel: q, k, v and the output it writes must all
    be TMA-compatible (`out` None: the contiguous output `forward` would allocate)."""
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return tma.use_tma("FLASHGEN_FWD_TMA", (q, k, v, out))


def forward(q, k, v, *, causal: bool, scale: float | None, config=None):
    """Attention forward: returns (out, lse).

    q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] (Hq % Hkv == 0, last dim contiguous, any other
    strides). out is a new contiguous tensor in q's dtype; lse is float32 [B, Hq, Sq], the
    natural log of the softmax denominator over the keys each row sees (what the backward needs).
    `config` (a TileConfig) overrides the dispatch choice, e.g. for tuning and benchmarks.
    """
    batch, hq, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    out = torch.empty((batch, hq, sq, dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, hq, sq), dtype=torch.float32, device=q.device)
    if out.numel() == 0:  # nothing to launch: no config lookup, no pending record either
        return out, lse
    if scale is None:
        scale = 1.0 / math.sqrt(dim)
    spec = spec_for(dim, causal, dtype_name(q.dtype), "fwd")
    if config is None and hopper.choose(spec, q, k, v, sq):
        hopper.forward(q, k, v, out, lse, scale=scale, spec=spec)
        return out, lse
    if config is None:
        config = choose_config(spec, sq, sk)
    module = load(spec)
    grid = (-(-sq // config.block_m) * batch * hq,)
    launch = dict(
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    qk_scale = float(scale) * LOG2E
    if use_tma(q, k, v, out):
        bm, bn = config.block_m, config.block_n
        descs = tma.descriptors(((q, bm), (k, bn), (v, bn), (out, bm)), spec.block_d)
        module.attn_fwd_tma[grid](*descs, lse, hq, hq // hkv, sq, sk, qk_scale, **launch)
        return out, lse
    module.attn_fwd[grid](
        q, k, v, out, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        hq, hq // hkv, sq, sk, qk_scale, **launch,
    )  # fmt: skip
    return out, lse
