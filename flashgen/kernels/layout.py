"""The memory layout of the forward's output: q's own dimension order, as SDPA's backends give it.

Models write attention as `q = proj(x).view(B, S, H, D).transpose(1, 2)` (HF, nanoGPT, Llama)
and undo it after: `out.transpose(1, 2).reshape(B, S, H * D)`. When `out` is a contiguous
[B, H, S, D] tensor that reshape is a copy (a clone kernel in a compiled graph: the whole output
read and written once more); when `out` is laid out as [B, S, H, D] in memory, as q is, it is
a view. PyTorch's SDPA backends (cuDNN, flash) return an output whose strides follow q's
order, so Inductor's graph around SDPA has no copy there, and until session 37 the graph
around flashgen's op had one (benchmarks/RESULTS.md: a compiled Llama block's forward at
4 x 32 x 4096, head dim 64, read 0.967x Inductor with flashgen's faster kernel, 1.016x after).

`new_out(q)` is the one rule, used by every forward path and by the ops' fake (meta) function,
which must give the strides the real call returns: `torch.empty_like(q)` (preserve_format), a
dense tensor whose strides follow q's dimension order: q's own strides when q is dense (a
[B, S, H, D] view gives a [B, S, H, D]-dense output), a dense tensor of the same order when it
is not (q sliced from a packed [B, S, 3, H, D] projection, rows sliced off, a head-dim slice of
a wider tensor: contiguous there). PyTorch's fake tensors apply the same rule, stride for stride
(a size-1 dim's stride may differ, which Inductor's stride asserts ignore). The kernels take the
output's strides (the pointer kernel as arguments, the descriptor kernels through their TMA
descriptors, the tail split's merge as arguments), so no layout costs a copy; only the decode
kernel's single-split path, which writes contiguous rows, copies into a non-contiguous output.
"""

from __future__ import annotations

import torch


def new_out(q, zeros: bool = False):
    """An output like q (shape, dtype, device, dimension order: module docstring), zero-filled
    when `zeros` (kernels that store only the valid rows)."""
    return torch.zeros_like(q) if zeros else torch.empty_like(q)
