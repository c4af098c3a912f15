"""The memory layout of the forward's output: q's own when q is a head-transposed view.

Models write attention as `q = proj(x).view(B, S, H, D).transpose(1, 2)` (HF, nanoGPT, Llama)
and undo it after: `out.transpose(1, 2).reshape(B, S, H * D)`. When `out` is a contiguous
[B, H, S, D] tensor that reshape is a copy (a clone kernel in a compiled graph: the whole output
read and written once more); when `out` is laid out as [B, S, H, D] in memory, as q is, it is
a view. PyTorch's SDPA backends (cuDNN, flash) return such an output for such a q, so Inductor's
graph around SDPA has no copy there and, before this, the graph around flashgen's op had one
(benchmarks/RESULTS.md, session 37: a compiled Llama block's forward at 4 x 32 x 4096, head dim
64, read 0.967x Inductor with flashgen's faster kernel).

`new_out(q)` is the one rule, used by every forward path and by the ops' fake (meta) functions,
which must give the strides the real call returns: a [B, S, H, D]-dense q (`heads_inner(q)`)
gets a [B, S, H, D]-dense out, anything else a contiguous [B, H, S, D] one. The kernels take the
output's strides (the pointer kernel as arguments, the descriptor kernels through their TMA
descriptors, the tail split's merge as arguments), so neither layout costs a copy.
"""

from __future__ import annotations

import torch


def heads_inner(q) -> bool:
    """Whether q [B, H, S, D] is dense with heads inside sequence positions in memory
    ([B, S, H, D] transposed): strides (S*H*D, D, H*D, 1), with H > 1 and S > 1 (otherwise both
    layouts are the same memory and the contiguous one is taken)."""
    b, h, s, d = q.shape
    if h == 1 or s == 1:
        return False
    st = q.stride()
    return st[3] == 1 and st[1] == d and st[2] == h * d and (b == 1 or st[0] == s * h * d)


def new_out(q, zeros: bool = False):
    """An output [B, H, S, D] in q's dtype and device, laid out as `heads_inner` says (module
    docstring); zero-filled when `zeros` (kernels that store only the valid rows)."""
    b, h, s, d = q.shape
    make = torch.zeros if zeros else torch.empty
    if heads_inner(q):
        return make((b, s, h, d), dtype=q.dtype, device=q.device).transpose(1, 2)
    return make((b, h, s, d), dtype=q.dtype, device=q.device)
