"""Session 47: the kernels of a dense boolean mask's forward+backward at 4x16x2048 and
8x16x2048 (head dim 64), whose wall times read alike though one has twice the work.
Usage: python dense_prof.py"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
import flashgen  # noqa: E402

for b in (4, 8):
    s, h, d = 2048, 16, 64
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn_like(q)
    lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
    keep = torch.arange(s, device="cuda")[None, :] < lengths[:, None]
    tri = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
    mask = (tri[None] & keep[:, None, :])[:, None]

    def step(q=q, k=k, v=v, mask=mask, do=do):
        torch.autograd.grad(flashgen.attention(q, k, v, attn_mask=mask), (q, k, v), do)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    print(f"=== dense {b}x{h}x{s} d{d} forward+backward, 10 calls")
    print(
        prof.key_averages().table(sort_by="cuda_time_total", row_limit=16, max_name_column_width=60)
    )
