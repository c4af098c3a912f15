"""A trivial Triton kernel that warms a process's Triton before it compiles real candidates.

The first JIT compile in a fresh process pays one-off costs that have nothing to do with the
kernel: loading the compiler backend, hashing Triton's own files for cache keys, finding ptxas,
building the host launcher machinery. The tuner's compile workers and its timing process pay them
at start-up through `warm_triton`, so that the first task's first candidates are not charged for
them (and a short search is not dominated by them).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _scale_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, x * 2.0, mask=mask)


def warm_triton(*, launch: bool) -> None:
    """Compile (and with `launch`, run) the kernel once on CUDA; does nothing without CUDA.

    Workers pass `launch=False`: they compile and load the kernel but leave the GPU alone.
    """
    import torch

    if not torch.cuda.is_available():
        return
    x = torch.randn(4, 48, device="cuda")
    y = torch.empty_like(x)
    if launch:
        _scale_rows[(4,)](x, y, 48, BLOCK=64)
        torch.cuda.synchronize()
        return
    kernel = _scale_rows.warmup(x, y, 48, BLOCK=64, grid=(4,))
    init = getattr(kernel, "_init_handles", None)
    if init is not None:
        init()
