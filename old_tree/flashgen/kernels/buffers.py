"""Output buffers that a kernel overwrites in full, allocated without the deterministic mode's fill.

Under `torch.use_deterministic_algorithms(True)` PyTorch fills every new `torch.empty*` tensor
with NaN (`torch.utils.deterministic.fill_uninitialized_memory`, on by default), so that a
program that reads uninitialised memory still behaves the same run to run. A buffer whose every
element a kernel writes before anything reads it cannot leak uninitialised memory, and for it
the fill is a pure cost: one extra pass over each output. On the H200 the deterministic
forward+backward ran 4-13% slower than the same kernels outside that mode at 1k-token shapes
(benchmarks/RESULTS.md, issue 14), the backward's dQ/dK/dV/delta being most of those bytes.

`pause_fill()` turns the fill off (only when it is on) and says whether it did; the caller
allocates its buffers, then calls `resume_fill()` if so. Not a context manager: the backward's
launch path counts microseconds, and outside the deterministic mode this costs one check.
"""

from __future__ import annotations

import torch


def pause_fill() -> bool:
    """Switch the deterministic mode's fill of new tensors off; True when it was on (then call
    `resume_fill()` once the buffers are allocated)."""
    if not torch.are_deterministic_algorithms_enabled():
        return False
    import torch.utils.deterministic as det

    if not det.fill_uninitialized_memory:
        return False
    det.fill_uninitialized_memory = False
    return True


def resume_fill() -> None:
    import torch.utils.deterministic as det

    det.fill_uninitialized_memory = True
