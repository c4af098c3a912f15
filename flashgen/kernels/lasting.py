"""Device buffers kept for the life of the process (the Hopper family's work-item counters, the
forward's scratch logsumexp), allocated where no CUDA-graph memory pool takes them.

While Inductor's CUDA-graph trees (`mode="reduce-overhead"`, `flashgen.backend(cudagraphs=True)`)
warm a graph up before recording it, the caching allocator hands every allocation of the calling
thread to the trees' private pool (`torch._C._cuda_beginAllocateCurrentThreadToPool`), though
no capture is under way. A buffer kept from there is memory the trees do not know about: they
stop with "tensor(s) in the cudagraph pool not tracked as outputs" (HF Llama and ModernBERT at
2k tokens on an H100, benchmarks/RESULTS.md session 53), and could hand that memory to a later
graph's tensors. So `lasting` makes the buffer on a short-lived helper thread, whose allocations
no such filter routes, on a side stream that it waits for before handing the buffer over.

During a capture itself the buffer is made in place: it then comes from the capture's pool,
which a plain `torch.cuda.graph` keeps for as long as the buffer lives; the trees capture only
after warming up on the same stream, so their buffers were made by then. (A helper thread's
CUDA calls during another thread's capture could break it.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch


def lasting(make: Callable[[], torch.Tensor], device: torch.device) -> torch.Tensor:
    """`make()`, a new tensor on CUDA `device`, made outside any CUDA-graph memory pool that the
    calling thread allocates into (see the module docstring); its contents are ready (its
    stream waited for) when this returns."""
    if torch.cuda.is_current_stream_capturing():
        return make()
    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device()
    made: list = []

    def run() -> None:
        try:
            torch.cuda.set_device(index)
            stream = torch.cuda.Stream(index)
            with torch.cuda.stream(stream):
                made.append(make())
            stream.synchronize()
        except BaseException as exc:  # handed to the caller's thread below
            made.append(exc)

    helper = threading.Thread(target=run, name="flashgen-lasting", daemon=True)
    helper.start()
    helper.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]
