"""Values of another head dim than the queries' and keys' (multi-head latent attention:
DeepSeek-V2/V3 attend with keys of 128 + 64 rotary dims and values of 128).

The kernels take one head dim, so the smaller side is padded with zeros to the larger one and
the output sliced back: zero columns appended to V give zero output columns (sliced off);
zero columns appended to both Q and K leave every product q . k unchanged, with the softmax
scale given explicitly from the keys' own dim (the default 1 / sqrt(d_qk) would otherwise
follow the padded width). Gradients flow through the pad and the slice by autograd (the padded
columns' gradients are dropped), and in a compiled graph the pad is one more op of the graph.
What it costs: a copy of the padded tensor(s), and the kernels' work at the larger head dim
(DeepSeek-V3: V at 192 instead of 128, half again of the P V product). HF's DeepSeek-V3 pads
its values the same way for FlashAttention-2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def differs(q, k, v) -> bool:
    """Whether q, k, v are 4-D tensors whose values alone have another head dim (q's and k's
    equal): the case `pad` handles. Anything else is left to the input checks."""
    return (
        isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
        and isinstance(v, torch.Tensor) and q.dim() == k.dim() == v.dim() == 4
        and q.shape[-1] == k.shape[-1] and v.shape[-1] != q.shape[-1]
    )  # fmt: skip


def pad(q, k, v, scale):
    """(q, k, v, scale, value dim): the side with the smaller head dim zero-padded to the
    other's, `scale` None made the keys' default 1 / sqrt(d_qk). The caller slices the output
    to `[..., :value dim]` (a no-op width when the values were the wider side)."""
    dqk, dv = q.shape[-1], v.shape[-1]
    if scale is None:
        scale = float(dqk) ** -0.5
    if dv < dqk:
        v = F.pad(v, (0, dqk - dv))
    else:
        q, k = F.pad(q, (0, dv - dqk)), F.pad(k, (0, dv - dqk))
    return q, k, v, scale, dv
