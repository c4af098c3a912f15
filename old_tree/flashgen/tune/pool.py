"""The tuner's compile pool: worker processes that compile upcoming candidates into Triton's
on-disk cache while the timing process checks and times the current one.

`warm_compile` runs in the workers: it calls the real host launchers with every Triton launch
turned into a `warmup` (compile only, nothing runs), so the kernel for exactly the
specialisation the timing process will use lands in Triton's cache ahead of time. The workers
only fill that cache: the timing process compiles again on a miss, so a worker problem never
decides a candidate's fate. The `*_ready` helpers move one-off start-up costs (driver helpers,
cuBLAS, the first Triton compile) out of the first candidate's time.
"""

from __future__ import annotations

import contextlib
import time

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from ..hardware.costmodel import Shape
from . import bench

_WARMUP_PATCHED: set[str] = set()


def _compile_only(module) -> None:
    """Turn every Triton launch of a generated module into a compile-only warmup (this process)."""
    from triton.runtime.jit import JITFunction

    for name, obj in vars(module).items():
        if isinstance(obj, JITFunction) and f"{module.__name__}.{name}" not in _WARMUP_PATCHED:
            original = obj.run

            def run(*args, grid, warmup, _original=original, **kwargs):
                kernel = _original(*args, grid=grid, warmup=True, **kwargs)
                _load_handles(kernel)
                return kernel

            obj.run = run
            _WARMUP_PATCHED.add(f"{module.__name__}.{name}")


def _load_handles(kernel) -> None:
    """Load the compiled kernel into this worker's CUDA context, which also builds its host-side
    launcher where Triton compiles one: it lands in the shared Triton cache, so the timing
    process does not build it serially later. Best effort: the timing process redoes anything
    this step fails at (and reports the real error, e.g. out of resources)."""
    init = getattr(kernel, "_init_handles", None)
    if init is None:
        return
    try:
        import torch

        if torch.cuda.is_available():
            init()
    except Exception:  # noqa: BLE001 - the timing process owns the real outcome
        pass


def warm_compile(spec: KernelSpec, cfg: TileConfig, shapes: tuple[Shape, ...]) -> float:
    """Compile the candidate for each shape's specialisation into Triton's cache (worker side).

    Runs in a worker process of the tuner's pool: nothing is launched, so the GPU stays free for
    the timing process. Returns the seconds it took. Raises whatever the compiler raises.
    """
    import torch

    from ..kernels.codegen import load

    start = time.perf_counter()
    _compile_only(load(spec))
    for shape in shapes:
        q, k, v, do = bench.make_inputs(spec, shape, "cuda", empty=True)
        out = lse = None
        if spec.direction == "bwd":
            out = q.new_empty(q.shape)
            lse = q.new_empty(q.shape[:3], dtype=torch.float32)
        bench.launcher(spec, cfg, q, k, v, do, out, lse)()
    return time.perf_counter() - start


def pool_init() -> None:
    """Worker start-up: load torch and Triton once, bind the GPU, before the first candidate."""
    import torch
    import triton  # noqa: F401

    if torch.cuda.is_available():
        torch.cuda.init()
        driver_ready()
        triton_ready(launch=False)


def triton_ready(*, launch: bool) -> None:
    """One trivial compile in this process, so that Triton's one-off first-compile costs are
    start-up, not the first candidate's (`flashgen.kernels.warm`)."""
    try:
        from ..kernels.warm import warm_triton

        warm_triton(launch=launch)
    except Exception:  # noqa: BLE001 - only costs time later if it fails
        pass


def driver_ready() -> None:
    """Make Triton set up its CUDA driver helpers now (it builds a small C module on first use
    in a fresh cache): start-up cost, not a candidate's."""
    try:
        from triton.runtime import driver

        driver.active.get_current_target()
        driver.active.utils  # noqa: B018 - the attribute access is what builds it
    except Exception:  # noqa: BLE001 - only costs time later if it fails
        pass


def torch_ready() -> None:
    """Load what the first candidate's check would otherwise load on the clock: cuBLAS (the
    float64 reference), the autograd engine's CUDA thread (the backward's float64 reference: its
    first run sets up a CUDA context and cuBLAS handle for that thread, seconds on the H200) and
    PyTorch's attention kernels (the half-precision yardstick)."""
    import torch
    import torch.nn.functional as F

    from ..kernels.reference import attention_ref

    with contextlib.suppress(Exception):
        for dtype in (torch.float64, torch.float32):
            ones = torch.ones(16, 16, dtype=dtype, device="cuda")
            (ones @ ones).sum().item()
        x = torch.randn(1, 2, 32, 16, dtype=torch.float64, device="cuda", requires_grad=True)
        for causal in (False, True):
            out, _lse = attention_ref(x, x, x, causal=causal)
            out.sum().backward()
        torch.cuda.synchronize()
        for dtype in (torch.bfloat16, torch.float16):
            for d in (64, 128):
                q = torch.ones(1, 2, 64, d, dtype=dtype, device="cuda")
                for causal in (False, True):
                    F.scaled_dot_product_attention(q, q, q, is_causal=causal).sum().item()


def ready(delay: float) -> int:
    """A no-op pool task (keeps a worker busy briefly so that every worker gets started)."""
    import os

    time.sleep(delay)
    return os.getpid()
