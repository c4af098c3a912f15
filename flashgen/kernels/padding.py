"""Per-sequence valid ranges (key and query padding) as the kernels take them.

A padded batch needs no N x N mask: each batch entry's valid query rows and keys are one
contiguous range each, so the kernels read four int32 per entry (`SeqBounds`, [B, 4]: q_start,
len_q, k_start, len_k), skip the key blocks outside and never store the rows outside (the
launchers zero-fill the output first). This module turns what users have, lengths and a padding
side, into that tensor with plain torch ops: no host sync (values are read on the device), so it
works eagerly, under torch.compile and in CUDA graphs.

Semantics (FlashAttention's varlen convention): the causal mask and a window count positions
from each range's start, so with queries and keys padded alike (a decoder batch: the same
lengths, the same side) causal attention is exactly the padded batch's absolute causal mask.
"""

from __future__ import annotations

import functools

import torch

from ..core.spec import DENSE_KEYS, next_pow2

PADDING_SIDES = ("right", "left")


def check_padding(padding) -> str:
    if padding not in PADDING_SIDES:
        raise ValueError(f"padding must be 'right' or 'left', got {padding!r}")
    return padding


def check_lengths(name: str, lengths, batch: int, device) -> torch.Tensor | None:
    """`lengths` (None, a sequence of ints or an integer tensor [B]) as an int32 tensor on
    `device`; ValueError naming the argument for anything else.

    Values are checked here when they are host data (a list, a CPU tensor); values of a CUDA
    tensor are not read (that would sync every call) and are clamped to [0, seq] by `bounds`,
    so a wrong one can never address memory outside the inputs.
    """
    if lengths is None:
        return None
    if isinstance(lengths, (list, tuple)):
        for n in lengths:
            if isinstance(n, bool) or not isinstance(n, int):
                raise ValueError(f"{name} must hold ints, got {n!r}")
        lengths = torch.tensor(lengths, dtype=torch.int32)
    if not isinstance(lengths, torch.Tensor):
        raise ValueError(
            f"{name} must be a 1-D integer tensor [batch] or a list of ints, got "
            f"{type(lengths).__name__}"
        )
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError(f"{name} must have an integer dtype, got {lengths.dtype}")
    if lengths.dim() != 1 or lengths.shape[0] != batch:
        raise ValueError(f"{name} must have shape [batch] = [{batch}], got {tuple(lengths.shape)}")
    host = lengths.device.type == "cpu" and not torch.compiler.is_compiling()
    if host and lengths.numel() and bool((lengths < 0).any()):
        raise ValueError(f"{name} must be >= 0, got {lengths.tolist()}")
    return lengths.to(device=device, dtype=torch.int32, non_blocking=True)


def bounds(
    batch: int, seq_q: int, seq_k: int, key_lengths, query_lengths, padding: str, device
) -> torch.Tensor:
    """The kernels' SeqBounds: int32 [B, 4] = (q_start, len_q, k_start, len_k) per entry.

    `key_lengths` / `query_lengths`: the valid keys / query rows per entry (None: all of them),
    `padding` "right" (valid first, padding after) or "left" (padding first). Lengths past the
    sequence are clamped to it.
    """
    padding = check_padding(padding)
    k_len = check_lengths("key_lengths", key_lengths, batch, device)
    q_len = check_lengths("query_lengths", query_lengths, batch, device)
    if k_len is None:
        k_len = torch.full((batch,), seq_k, dtype=torch.int32, device=device)
    if q_len is None:
        q_len = torch.full((batch,), seq_q, dtype=torch.int32, device=device)
    if k_len.device.type == "cpu" and not torch.compiler.is_compiling():
        for name, n, seq in (("key_lengths", k_len, seq_k), ("query_lengths", q_len, seq_q)):
            if n.numel() and bool((n > seq).any()):
                raise ValueError(f"{name} must be <= the sequence length {seq}, got {n.tolist()}")
    k_len = k_len.clamp(0, seq_k)
    q_len = q_len.clamp(0, seq_q)
    if padding == "right":
        q_start, k_start = torch.zeros_like(q_len), torch.zeros_like(k_len)
    else:
        q_start, k_start = seq_q - q_len, seq_k - k_len
    return torch.stack((q_start, q_len, k_start, k_len), 1).to(torch.int32).contiguous()


def check_bounds(seq_bounds, batch: int, device) -> None:
    """What the ops take as `seq_bounds`: contiguous int32 [B, 4] on q's device."""
    if not isinstance(seq_bounds, torch.Tensor):
        raise ValueError(f"seq_bounds must be a tensor, got {type(seq_bounds).__name__}")
    if seq_bounds.dtype != torch.int32 or tuple(seq_bounds.shape) != (batch, 4):
        raise ValueError(
            f"seq_bounds must be int32 [batch, 4] = [{batch}, 4], got {seq_bounds.dtype} "
            f"{tuple(seq_bounds.shape)}"
        )
    if seq_bounds.device != torch.device(device) or not seq_bounds.is_contiguous():
        raise ValueError(f"seq_bounds must be contiguous and on {device}, got {seq_bounds.device}")


# An additive bias at or below this (float16's finfo.min, the least of HF's padding values:
# float32's and bfloat16's lie far below) hides its key beside any key above HIDDEN_BIAS / 2:
# its weight exp(score + bias - row max) is exactly 0 in float32 unless two scores of the row
# differ by more than ~32,000 (`key_hull`).
HIDDEN_BIAS = -65504.0


def key_hull(mask, fills_hide: bool = True) -> torch.Tensor | None:
    """SeqBounds that let the kernels skip the key tiles a key-padding mask hides at the end:
    for an expanded [B, Hq, Sq, Sk] view constant along heads and query rows (a `[B, 1, 1, Sk]`
    mask, HF's and `key_padding_mask`'s), boolean or additive, each entry's keys [0, last
    visible key + 1), every query row valid; None for any other mask. The starts stay 0, so
    positions (the causal mask, windows, dropout counters) are unchanged and the kernels still
    read the mask inside the range: exact for any mask, faster for a right-padded one.

    A key is hidden by False or -inf, and in an additive mask also by a bias <= HIDDEN_BIAS
    (HF's finfo.min padding) where every other key of the entry lies above HIDDEN_BIAS / 2 and
    one does: then such a key's weight is 0 (see HIDDEN_BIAS). An entry whose keys are all at
    finfo.min keeps them (PyTorch averages the values there), and so does one with a bias
    between HIDDEN_BIAS and HIDDEN_BIAS / 2 (no margin). That weight is 0 only for a row that
    also sees one of the entry's other keys: every row does when it sees a prefix of the keys
    (no window; causal either way), but under a window a row may see only trailing finfo.min
    keys, whose softmax is then theirs (PyTorch's), not nothing: `fills_hide` False (a window)
    trims only False / -inf keys.

    len_k carries a flag, DENSE_KEYS added, where the mask leaves every key of the range
    untouched (True, or a bias of exactly 0: right padding, which inside its range adds nothing
    to the lengths). Every kernel that takes a mask with bounds decodes it (the templates'
    `dense_keys`): the Hopper forward runs such a range's inside tiles unmasked and reads the
    mask only on its edge tiles, the split backward does not read a boolean mask there, the
    portable forward only strips it. Why: with the mask read on every tile the Hopper forward
    issued 71% more instructions than with the same padding as key lengths and ran 824 against
    586 µs (benchmarks/RESULTS.md, session 14 B3). None from DENSE_KEYS keys on (the flag's
    bit). One kernel launch (`flashgen.kernels.hull_kernel`, directly after its first:
    `_hull_launches`; on the CPU under Triton's interpreter, as every kernel there), no host
    sync."""
    if mask.stride(1) != 0 or mask.stride(2) != 0 or mask.shape[-1] >= DENSE_KEYS:
        return None
    out = torch.empty(mask.shape[0], 4, dtype=torch.int32, device=mask.device)
    if mask.shape[0] == 0:  # no launch of an empty grid
        return out
    launch, tail = hull_launch(mask, fills_hide)
    # a boolean mask as its bytes (as `block_mask` hands masks to `tile_kinds`)
    launch(mask if mask.dtype != torch.bool else mask.view(torch.uint8), out, *tail)
    return out


def hull_launch(mask, fills_hide: bool = True):
    """(the `launch.Launch` of `key_hull`'s kernel for masks of `mask`'s signature, the
    arguments after the keys and the output): for a non-empty batch that `key_hull` takes
    (`fills_hide` as there: False passes -inf thresholds, so only -inf hides). Also what a
    masked forward's route launches directly (`flashgen.kernels.flat`)."""
    batch, _, seq_q, seq_k = mask.shape
    additive = mask.dtype != torch.bool
    hidden, half = (0.0, 0.0)
    if additive:
        hidden, half = _thresholds(mask.dtype) if fills_hide else (float("-inf"),) * 2
    ints = (mask.stride(0), mask.stride(3), seq_q, seq_k)
    aligned = not mask.data_ptr() & 15
    key = (mask.dtype, mask.device, aligned, batch, ints)
    launch = _hull_launches.get(key)
    if launch is None:
        from .hull_kernel import key_hull_kernel
        from .launch import Launch, direct_device, keep

        block = min(max(next_pow2(seq_k), 16), 2048)  # (fixed by seq_k, in the key)
        constexprs = {"ADDITIVE": additive, "DENSE": DENSE_KEYS, "BLOCK": block}
        launch = Launch(key_hull_kernel, (batch,), constexprs, {}, direct_device(mask, aligned))
        keep(_hull_launches, key, launch)
    return launch, (*ints, hidden, half)


# `key_hull`'s launches by what Triton specialises the kernel on (the mask's dtype, device and
# alignment, the batch as its grid, its strides and lengths, which also fix BLOCK): after the
# first call through the JIT each is launched directly (`flashgen.kernels.launch`), since the
# JIT's own per-call work was most of a masked call's extra host time (benchmarks/RESULTS.md,
# session 46: ~80 µs a call under cProfile on an H100). Bounded by `launch.keep`.
_hull_launches: dict = {}


@functools.cache
def _thresholds(dtype) -> tuple[float, float]:
    """HIDDEN_BIAS and HIDDEN_BIAS / 2 as `dtype` rounds them: what a comparison of a tensor of
    that dtype with those Python floats compares against (PyTorch computes it in the tensor's
    dtype), which the kernel's float32 comparisons must equal."""
    hidden, half = (float(torch.tensor(t, dtype=dtype)) for t in (HIDDEN_BIAS, HIDDEN_BIAS / 2))
    return hidden, half


def dense_mask(seq_bounds, seq_q: int, seq_k: int, *, causal: bool, window=None):
    """The boolean [B, 1, Sq, Sk] mask the kernels apply for `seq_bounds` (tests, references,
    and SDPA comparisons): True where query row i may see key j."""
    qs, ql, ks, kl = (c[:, None, None] for c in seq_bounds.long().unbind(1))
    device = seq_bounds.device
    i = torch.arange(seq_q, device=device)[None, :, None] - qs
    j = torch.arange(seq_k, device=device)[None, None, :] - ks
    m = (i >= 0) & (i < ql) & (j >= 0) & (j < kl)
    if causal:
        m &= j <= i
    if window is not None:
        left, right = window
        m &= (j >= i - left) & (j <= i + right)
    return m[:, None]
