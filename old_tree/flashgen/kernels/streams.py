"""A second CUDA stream per device, for a backward that runs two independent kernels side by
side (`flashgen.kernels.bwd`, the split kind's dQ and dK/dV kernels).

The two kernels read the same inputs and write disjoint outputs, so they may run at once: each
grid's last, partial wave of programs then shares the GPU with the other kernel's programs
instead of leaving SMs idle. The results are bit-identical either way. On the H200 (bf16, the
issue-14 grid, benchmarks/RESULTS.md) overlapping made forward+backward 1.6% faster by geometric
mean (up to 5% at 1k tokens, neutral at 16k), so it is on by default from `DEFAULT_MIN_ROWS`
query rows x heads (the smallest measured shapes); below that a call is short enough that the
stream switch's host time (events, a context) could cost more than it saves, unmeasured.

FLASHGEN_BWD_OVERLAP: "0" off; "1" on, the side stream's kernel (dQ) launched first; "2" on,
the current stream's (dK/dV) first (the block scheduler starts the kernel launched first
before the other); unset: "1" from DEFAULT_MIN_ROWS. Never inside CUDA-graph capture (the
capturing stream must see every launch).
"""

from __future__ import annotations

import torch

from .launch import capturing
from .tma import env_reader

DEFAULT_MIN_ROWS = 1 << 18  # batch * query heads * query rows, e.g. 16 x 16 x 1024
_overlap_env = env_reader("FLASHGEN_BWD_OVERLAP")
_side: dict[int, torch.cuda.Stream] = {}
_ON = ("1", "2", b"1", b"2")


def wanted(t) -> bool:
    """Whether FLASHGEN_BWD_OVERLAP (or, unset, the default rule) overlaps a backward whose
    query (or dO) tensor is `t` ([B, Hq, Sq, D]), whatever the device."""
    raw = _overlap_env()
    if not raw:
        return t.numel() >= DEFAULT_MIN_ROWS * t.shape[-1]
    return raw in _ON


def side_first() -> bool:
    """Whether the side stream's kernel is launched first (FLASHGEN_BWD_OVERLAP "1" or unset)."""
    return _overlap_env() not in ("2", b"2")


def side_stream(t):
    """The stream to run the second kernel on for tensors like `t`, or None for "one after the
    other on the current stream": not `wanted`, a CPU tensor, or graph capture. The caller
    makes the side stream wait for the current one before launching on it, and the current one
    wait for the side stream afterwards, so every tensor the side stream touched is safe to
    free or reuse on the current stream."""
    if not t.is_cuda or not wanted(t) or capturing(t):
        return None
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    stream = _side.get(index)
    if stream is None:
        stream = _side[index] = torch.cuda.Stream(t.device)
    return stream
