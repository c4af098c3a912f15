"""Session 37 B5: where a forward+backward call's host time goes (1x1x128x64 bf16, flashgen's
own kernels forced, as host_time.py's fwd_bwd case), against its fwd_grad and bwd cases:
cProfile of N calls of each, top functions by own time and by cumulative time."""

import cProfile
import io
import pstats
import sys
import time

import torch

import flashgen

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
do = torch.randn_like(q)


def ours(a, b, c):
    return flashgen.attention(a, b, c, causal=False, impl="flashgen")


def fwd_bwd():
    out = ours(qg, kg, vg)
    torch.autograd.grad(out, (qg, kg, vg), do)


def fwd_grad():
    ours(qg, kg, vg)


held = ours(qg, kg, vg)


def bwd():
    torch.autograd.grad(held, (qg, kg, vg), do, retain_graph=True)


def sdpa_fwd_bwd():
    out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg)
    torch.autograd.grad(out, (qg, kg, vg), do)


for name, fn in (
    ("fwd_bwd", fwd_bwd),
    ("fwd_grad", fwd_grad),
    ("bwd", bwd),
    ("sdpa_fwd_bwd", sdpa_fwd_bwd),
):
    for _ in range(300):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(N):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"{name}: {(t1 - t0) / N * 1e6:.1f} us/call host (no profiler)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(N):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(22)
        print(f"--- {name} by {key}\n" + "\n".join(s.getvalue().splitlines()[:50]))
