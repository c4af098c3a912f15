"""Session 59 (CPU, this repository's machine, Triton's interpreter not used): the Python host
path of the backward alone, its launches stubbed out, B8 H12 T512 d64 causal float32 tensors:
the plain path (`plain_backward`), the general path without dropout, the general path with
dropout 0.1. RESULTS.md gives two runs: 15.0, 22.4, 32.3 µs a call (the first, from a /tmp copy,
beside a test run) and 9.8, 14.5, 29.7 (this file, the machine otherwise idle):
`PYTHONPATH=$PWD python benchmarks/raw/h100_s59/cpu_hostpath.py`."""

import time

import torch

from flashgen.kernels import launch
from flashgen.runtime import primitives

launch.Launch.__call__ = lambda self, *a, **k: None  # no kernel runs: the host path alone
B, H, N, D = 8, 12, 512, 64
q, k, v, do, out = (torch.randn(B, H, N, D) for _ in range(5))
lse = torch.randn(B, H, N)
seed = torch.tensor([123], dtype=torch.int64)


def plain():
    return primitives.plain_backward(do, q, k, v, out, lse, True, 0.125, (True,) * 3, False)


def general(p):
    return primitives._attention_bwd(
        do, q, k, v, out, lse, True, 0.125, True, True, True, deterministic=False,
        dropout_p=p, dropout_seed=seed if p else None,
    )  # fmt: skip


for name, f in (("plain", plain), ("general p=0", lambda: general(0.0)),
                ("general dropout", lambda: general(0.1))):  # fmt: skip
    for _ in range(50):
        f()
    t = time.perf_counter()
    for _ in range(2000):
        f()
    print(name, f"{(time.perf_counter() - t) / 2000 * 1e6:.1f} us")
