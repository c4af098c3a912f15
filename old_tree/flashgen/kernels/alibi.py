"""ALiBi (attention with linear biases) computed in the kernels: the checks of the slopes.

ALiBi adds slope_h * (j - i) to the scaled score of query i and key j in head h (BLOOM, MPT,
Falcon-RW). The bias is a function of two positions and one number per head, so the kernels
compute it tile by tile (KernelSpec.alibi, templates/attn_*.py.jinja) instead of reading a
[B, H, Sq, Sk] tensor: no N x N memory traffic. HF BLOOM writes the bias as slope_h * j, which
differs from slope_h * (j - i) by a constant per row: the softmax is the same (the logsumexp
is not; flashgen's is that of slope * (j - i)). With causal=True the bias is -slope * (i - j),
HF's and the ALiBi paper's form.

The slopes are constants of the model, never learned here: the kernels compute no gradient
for them, so a tensor that requires grad is refused (not silently detached).
"""

from __future__ import annotations

import torch


def check_slopes(alibi_slopes, q):
    """`alibi_slopes` as the kernels read it: float32 [B, Hq] with the last stride 1 (a [Hq]
    tensor becomes an expanded view, batch stride 0, nothing copied); ValueError naming the
    argument for anything else."""
    if not isinstance(alibi_slopes, torch.Tensor):
        raise ValueError(
            f"alibi_slopes must be a tensor or None, got {type(alibi_slopes).__name__}"
        )
    if alibi_slopes.dtype != torch.float32:
        raise ValueError(
            f"alibi_slopes must be float32, got {str(alibi_slopes.dtype).removeprefix('torch.')}"
        )
    if alibi_slopes.device != q.device:
        raise ValueError(
            f"alibi_slopes must be on q's device {q.device}, got {alibi_slopes.device}"
        )
    if alibi_slopes.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "alibi_slopes requires grad: the kernels treat ALiBi slopes as constants and "
            "compute no gradient for them; pass alibi_slopes.detach()"
        )
    batch, heads = q.shape[0], q.shape[1]
    shape = tuple(alibi_slopes.shape)
    if shape == (heads,):
        return alibi_slopes.contiguous().expand(batch, heads)
    if shape == (batch, heads):
        return alibi_slopes if alibi_slopes.stride(1) == 1 else alibi_slopes.contiguous()
    raise ValueError(
        f"alibi_slopes must have shape [heads] = [{heads}] or [batch, heads] = "
        f"[{batch}, {heads}] (one slope per query head), got {list(shape)}"
    )


def standard_slopes(heads: int) -> torch.Tensor:
    """The ALiBi paper's (and BLOOM's) slopes for `heads` heads, float32 [heads]: the geometric
    sequence 2^(-8 / n), 2^(-16 / n), ... for n the largest power of two <= heads, then every
    other one of the sequence for 2n for the remaining heads."""
    n = 1 << (heads.bit_length() - 1)
    slopes = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    slopes += [2.0 ** (-4.0 * (i + 1) / n) for i in range(0, 2 * (heads - n), 2)]
    return torch.tensor(slopes[:heads], dtype=torch.float32)


def bias_ref(slopes, seq_q: int, seq_k: int):
    """float64 [B or 1, H, Sq, Sk] bias slope * (j - i) (the tests' and benchmarks' reference;
    `slopes` [H] or [B, H])."""
    s = slopes.double()
    s = s[None] if s.dim() == 1 else s
    i = torch.arange(seq_q, dtype=torch.float64, device=s.device)[:, None]
    j = torch.arange(seq_k, dtype=torch.float64, device=s.device)[None, :]
    return s[:, :, None, None] * (j - i)


__all__ = ["bias_ref", "check_slopes", "standard_slopes"]
