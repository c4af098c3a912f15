"""A second CUDA stream per device, for a backward that runs two independent kernels side by
side (FLASHGEN_BWD_OVERLAP=1 or 2, `flashgen.kernels.bwd`).

The split backward's dK/dV and dQ kernels read the same inputs and write disjoint outputs, so
they may run at once: each grid's last, partial wave of programs then shares the GPU with the
other kernel's programs instead of leaving SMs idle. The block scheduler starts the kernel
launched first before the other, so the order matters: "1" launches the side stream's kernel
first, "2" the current stream's. The results are bit-identical either way.
Off by default until measured faster (benchmarks/bwd_grid.py); never inside CUDA-graph capture
(the capturing stream must see every launch).
"""

from __future__ import annotations

import torch

from .launch import capturing
from .tma import env_reader

_overlap_env = env_reader("FLASHGEN_BWD_OVERLAP")
_side: dict[int, torch.cuda.Stream] = {}
_ON = ("1", "2", b"1", b"2")


def side_first() -> bool:
    """Whether the side stream's kernel is launched first (FLASHGEN_BWD_OVERLAP=1)."""
    return _overlap_env() in ("1", b"1")


def side_stream(t):
    """The stream to run the second kernel on for tensors like `t`, or None for "one after the
    other on the current stream": FLASHGEN_BWD_OVERLAP not "1" or "2", a CPU tensor, or graph
    capture. The caller makes the side stream wait for the current one before launching on it,
    and the current one wait for the side stream afterwards, so every tensor the side stream
    touched is safe to free or reuse on the current stream."""
    if _overlap_env() not in _ON or not t.is_cuda or capturing(t):
        return None
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    stream = _side.get(index)
    if stream is None:
        stream = _side[index] = torch.cuda.Stream(t.device)
    return stream
