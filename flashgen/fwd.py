"""Host launcher for the generated forward kernel.

`forward` runs on every attention call, so it does the minimum: pick the spec (cached), pick the
config (dispatch caches it), allocate out/lse and launch. Input validation is the caller's job
(`flashgen.validate.check_inputs`, which `flashgen.ops.attention` runs first); this function
assumes inputs that passed it.
"""

from __future__ import annotations

import functools
import math

LOG2E = 1.4426950408889634


@functools.cache
def _spec(head_dim: int, causal: bool, dtype_name: str):
    from .spec import KernelSpec

    return KernelSpec(head_dim, causal, dtype_name, "fwd")


def kernel_spec(q, *, causal: bool):
    """The forward KernelSpec for q's head dim and dtype."""
    return _spec(q.shape[-1], bool(causal), str(q.dtype).removeprefix("torch."))


def forward(q, k, v, *, causal: bool, scale: float | None, config=None):
    """Attention forward: returns (out, lse).

    q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] (Hq % Hkv == 0, last dim contiguous, any other
    strides). out is a new contiguous tensor in q's dtype; lse is float32 [B, Hq, Sq], the
    natural log of the softmax denominator over the keys each row sees (what the backward needs).
    `config` (a TileConfig) overrides the dispatch choice, e.g. for tuning and benchmarks.
    """
    import torch

    from .codegen import load

    batch, hq, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(dim)
    spec = kernel_spec(q, causal=causal)
    if config is None:
        from .dispatch import choose_config

        config = choose_config(spec, sq, sk)
    out = torch.empty((batch, hq, sq, dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, hq, sq), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    grid = (-(-sq // config.block_m) * batch * hq,)
    load(spec).attn_fwd[grid](
        q, k, v, out, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        hq, hq // hkv, sq, sk,
        float(scale) * LOG2E,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )  # fmt: skip
    return out, lse
