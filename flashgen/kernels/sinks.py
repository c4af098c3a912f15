"""Launchers of attention sinks' two passes (`flashgen.kernels.sinks_kernel`; the math is in
`flashgen.runtime.sinks`): `rescale` after the forward, `grad` for the sinks' gradient.

Each launch is kept per call signature (dtypes, device, alignment, sizes and strides: all
that Triton specialises the kernel on; and the grid) and, after its first call through the
JIT, launched directly (`flashgen.kernels.launch`), as `padding.key_hull`'s: a decode step with
sinks pays one direct launch, not the JIT's per-call work. Triton is imported on the first
launch only.
"""

from __future__ import annotations

import torch

from ..core.spec import cdiv, next_pow2

_F32 = torch.float32


def _blocks(dim: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_D): every head-dim column of a row in one tile, rows filling ~8k
    elements (128 rows at head dim 64, 32 at 256)."""
    block_d = max(next_pow2(dim), 16)
    return max(16, min(128, 8192 // block_d)), block_d


def _launch(cache: dict, name: str, tensors: tuple, ints: tuple, grid: tuple, blocks: tuple):
    """The kept Launch of kernel `name` for these tensors, ints and grid (a Launch holds its
    grid: two calls that differ only in the batch size share every int, not the grid)."""
    aligned = not any(t.data_ptr() & 15 for t in tensors)
    key = (tuple(t.dtype for t in tensors), tensors[0].device, aligned, ints, grid)
    launch = cache.get(key)
    if launch is None:
        from . import sinks_kernel
        from .launch import Launch, direct_device, keep

        kernel = getattr(sinks_kernel, name)
        constexprs = {"BLOCK_M": blocks[0], "BLOCK_D": blocks[1]}
        launch = Launch(kernel, grid, constexprs, {}, direct_device(tensors[0], aligned))
        keep(cache, key, launch)
    return launch


def rescale(out, lse, sinks):
    """(out, lse) of the plain forward -> new (out, lse) with the sinks: out [B, H, N, D]
    scaled by each row's share (`runtime.sinks`), lse float32 [B, H, N] contiguous with the
    sink joined; sinks [H] contiguous. The new out has out's strides."""
    batch, heads, seq, dim = out.shape
    new_out = torch.empty_like(out)
    new_lse = torch.empty_like(lse)
    if out.numel() == 0:
        return new_out, new_lse
    blocks = _blocks(dim)
    ints = (*out.stride(), *new_out.stride(), heads, seq, dim)
    grid = (cdiv(seq, blocks[0]), batch * heads)
    tensors = (out, lse, sinks, new_out, new_lse)
    _launch(_fwd_launches, "sinks_fwd_kernel", tensors, ints, grid, blocks)(*tensors, *ints)
    return new_out, new_lse


def grad(dout, out, lse, sinks):
    """The sinks' gradient (float32 [H]) from dout, the forward's output and its lse with the
    sinks (`rescale`'s): per program a partial sum, summed here in a fixed order."""
    batch, heads, seq, dim = out.shape
    if out.numel() == 0:
        return torch.zeros(heads, dtype=_F32, device=out.device)
    blocks = _blocks(dim)
    grid = (cdiv(seq, blocks[0]), batch * heads)
    partial = torch.empty(batch, heads, grid[0], dtype=_F32, device=out.device)
    ints = (*dout.stride(), *out.stride(), heads, seq, dim)
    tensors = (dout, out, lse, sinks, partial)
    _launch(_bwd_launches, "sinks_bwd_kernel", tensors, ints, grid, blocks)(*tensors, *ints)
    return partial.sum((0, 2))


# Kept launches by signature (`launch.keep` bounds them).
_fwd_launches: dict = {}
_bwd_launches: dict = {}
