"""Attention dropout: the probability, the seed, and the keep mask the kernels draw.

Why counter-based: the backward must drop exactly what the forward dropped without storing an
N x N mask, so every probability's fate is a pure function of (seed, its position): the kernels
of templates/attn_fwd.py.jinja and attn_bwd.py.jinja decide it for query row i and key j of
flat head bh = b * H + h with `flashgen.kernels.dropout_ref.keep_tile` (a 32-bit hash of the
seed, the flat row bh * Sq + i and the key j; rows counted in the tensor, padding included,
keys from the sequence's first key), dropping it when the hash is below p * 2**32, and scale
kept ones by 1 / (1 - p). `keep_mask` draws the same numbers for references and tests.

The seed comes from PyTorch's default CPU generator (`new_seed`), so `torch.manual_seed`
reproduces a run; drawn on the CPU, reading it costs no device sync, and under
`torch.compile` the draw is an op of the graph (a fresh seed every call, not one baked in).
"""

from __future__ import annotations

import torch

# Seeds are drawn in [2**31, 2**62): always a 64-bit kernel argument of one type.
SEED_LOW, SEED_HIGH = 2**31, 2**62


def check_dropout(dropout_p) -> float:
    """`dropout_p` as a float in [0, 1); ValueError naming the argument otherwise."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise ValueError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    p = float(dropout_p)
    if not 0.0 <= p < 1.0:  # NaN fails it too (plain comparisons: Dynamo traces them)
        raise ValueError(f"dropout_p must be in [0, 1) (1 would drop everything), got {p!r}")
    return p


def new_seed() -> torch.Tensor:
    """A fresh seed from PyTorch's default CPU generator: an int64 tensor of shape (1,)."""
    return torch.randint(SEED_LOW, SEED_HIGH, (1,), dtype=torch.int64)


def check_seed(seed) -> torch.Tensor:
    """The op's dropout_seed: an int64 CPU tensor of one element."""
    if not isinstance(seed, torch.Tensor) or seed.dtype != torch.int64 or seed.numel() != 1:
        raise ValueError(f"dropout_seed must be an int64 tensor of one element, got {seed!r}")
    if seed.device.type != "cpu":
        raise ValueError(
            f"dropout_seed must be on the CPU (read without a sync), got {seed.device}"
        )
    return seed


def launch_args(dropout_p: float, seed: torch.Tensor | None):
    """(p, seed as int) for the launchers, or None when nothing is dropped (p == 0)."""
    if dropout_p == 0.0:
        return None
    if seed is None:
        raise ValueError("dropout_p > 0 needs dropout_seed (flashgen.kernels.dropout.new_seed)")
    return (dropout_p, int(check_seed(seed).item()))


def keep_mask(
    seed: int, p: float, batch: int, heads: int, seq_q: int, seq_k: int, device, key_starts=None
):
    """The boolean keep mask [B, H, Sq, Sk] the kernels apply for (seed, p)
    (`flashgen.kernels.dropout_ref.keep_tile`). Keys are counted from each sequence's first key:
    `key_starts` (ints, one per batch entry; None: all 0) gives it for calls with key lengths,
    whose kernels count from there; keys before it (never visible) are False."""
    import triton

    from .dropout_ref import keep_mask_kernel

    out = torch.empty(batch * heads * seq_q, seq_k, dtype=torch.int8, device=device)
    rows = out.shape[0]
    block = 64
    keep_mask_kernel[(triton.cdiv(rows, block), triton.cdiv(seq_k, block))](
        out, int(seed), float(p), rows, seq_k, BLOCK=block
    )
    keep = out.view(batch, heads, seq_q, seq_k).bool()
    if key_starts is None:
        return keep
    shifted = torch.zeros_like(keep)
    for b, start in enumerate(int(s) for s in key_starts):
        shifted[b, :, :, start:] = keep[b, :, :, : seq_k - start]
    return shifted
