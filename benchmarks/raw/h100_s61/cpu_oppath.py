"""Session 61 (CPU, this repository's machine): the host path of `flashgen.attention`'s
forward+backward with its kernel launches stubbed out (Triton's interpreter set so CPU tensors
pass the device check; nothing runs in it), B8 H12 T512 d64 causal float32: the plain call, the
general path without extras, the general path with a window, the call with dropout 0.1; then
the forwards alone without a gradient. Best of three runs of 500 calls:
`TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/raw/h100_s61/cpu_oppath.py`."""

import time

import torch

import flashgen
from flashgen.kernels import launch
from flashgen.runtime import composite

launch.Launch.__call__ = lambda self, *a, **k: None  # no kernel runs: the host path alone
B, H, N, D = 8, 12, 512, 64
q, k, v = (torch.randn(B, H, N, D, requires_grad=True) for _ in range(3))
g = torch.randn(B, H, N, D)


def bench(name, fn, fwd_only=False):
    def f():
        o = fn()
        return o if fwd_only else torch.autograd.grad(o, (q, k, v), g)

    for _ in range(30):
        f()
    best = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(500):
            f()
        best.append((time.perf_counter() - t) / 500 * 1e6)
    print(f"{name}: {min(best):.1f} us")


bench("plain op fwd+bwd", lambda: flashgen.attention(q, k, v, causal=True))
bench("general p=0 fwd+bwd", lambda: composite._attention(q, k, v, causal=True))
bench("general window fwd+bwd", lambda: composite._attention(q, k, v, causal=True, window=(100, 0)))
bench("op dropout fwd+bwd", lambda: flashgen.attention(q, k, v, causal=True, dropout_p=0.1))
with torch.no_grad():
    bench("plain op fwd", lambda: flashgen.attention(q, k, v, causal=True), True)
    bench("op dropout fwd", lambda: flashgen.attention(q, k, v, causal=True, dropout_p=0.1), True)
