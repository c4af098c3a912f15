"""Where the forward+backward host time goes beyond (forward with grad) + (retained backward).

host_time.py (session 38 B2) read flashgen's fwd_bwd at 303.6 µs against fwd_grad 32.7 plus a
retained backward 166.8: ~104 µs more than the parts, where SDPA's parts leave ~45. This times,
on one launch-bound input (1x1x128x64 bf16, flashgen's kernels forced), in alternating rounds:
  sdpa / ours              forward + autograd.grad (the graph freed by the backward)
  ours_retain              the same with retain_graph=True (the graph freed when out is dropped)
  ident_save5 / ident0     a Python autograd.Function, identity forward (a copy), backward
                           returning do three times, saving 5 tensors / none: the engine's
                           round trip for a Python node on CUDA tensors
  mul                      q * 2 (a C++ node) forward + grad
  ours_bwd_retained        the retained backward alone (host_time.py's bwd)
  *_1thread                forward + grad under autograd.set_multithreading_enabled(False)
                           (the backward on the calling thread, no device-thread handoff)
µs per call, medians of the rounds (host time: issue to return, then one sync per round).
"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import flashgen

CALLS, ROUNDS = 200, 7
q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
do = torch.randn_like(q)


class Ident(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, c, save):
        out = a * 1.0
        lse = torch.empty(a.shape[:3], device=a.device)
        if save:
            ctx.save_for_backward(a, b, c, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        if ctx.saved_tensors:
            pass
        return g, g, g, None


def ours(a, b, c):
    return flashgen.attention(a, b, c, impl="flashgen")


def sdpa(a, b, c):
    return F.scaled_dot_product_attention(a, b, c)


def fb(fn, retain=False):
    def run():
        out = fn(qg, kg, vg)
        torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=retain)

    return run


def single_thread(fn):
    def run():
        with torch.autograd.set_multithreading_enabled(False):
            fn()

    return run


def mul():
    out = qg * 2.0 + kg + vg
    torch.autograd.grad(out, (qg, kg, vg), do)


def retained(fn):
    out = fn(qg, kg, vg)
    return lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)


cases = {
    "sdpa": fb(sdpa),
    "ours": fb(ours),
    "ours_retain": fb(ours, True),
    "ident_save5": fb(lambda a, b, c: Ident.apply(a, b, c, True)),
    "ident0": fb(lambda a, b, c: Ident.apply(a, b, c, False)),
    "mul": mul,
    "ours_bwd_retained": retained(ours),
    "sdpa_bwd_retained": retained(sdpa),
    "ours_1thread": single_thread(fb(ours)),
    "sdpa_1thread": single_thread(fb(sdpa)),
    "ours_fwd_grad": lambda: ours(qg, kg, vg),
    "sdpa_fwd_grad": lambda: sdpa(qg, kg, vg),
}
for fn in cases.values():
    for _ in range(50):
        fn()
torch.cuda.synchronize()
samples = {n: [] for n in cases}
for _ in range(ROUNDS):
    for name, fn in cases.items():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples[name].append((time.perf_counter() - t0) / CALLS * 1e6)
        torch.cuda.synchronize()
for name, xs in samples.items():
    print(
        f"{name:20s} {statistics.median(xs):8.2f} µs  (rounds {' '.join(f'{x:.1f}' for x in xs)})"
    )
print("torch", torch.__version__, "python", sys.version.split()[0])
