"""Session 59: where the eager op's forward+backward with dropout spends its host time (B8 H12
N512 d64 causal bf16): torch.profiler's CPU table, and the same without dropout beside."""

import time

import torch
from torch.profiler import ProfilerActivity, profile

import flashgen

q, k, v = (
    torch.randn(8, 12, 512, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(3)
)
g = torch.randn_like(q)
for p in (0.1, 0.0):

    def f(p=p):
        return torch.autograd.grad(
            flashgen.attention(q, k, v, causal=True, dropout_p=p), (q, k, v), g
        )

    for _ in range(20):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        f()
    torch.cuda.synchronize()
    print(f"p={p}: {(time.perf_counter() - t) / 200 * 1e6:.1f} us a call (synced after 200)")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            f()
        torch.cuda.synchronize()
    print(
        prof.key_averages().table(sort_by="cpu_time_total", row_limit=30, max_name_column_width=60)
    )
