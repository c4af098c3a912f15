"""Session 46: torch.profiler's kernel table of masked flashgen calls whose back-to-back wall
time read long in masked_sweep.py (dense 4x16x2048 d64, per-key 8x16x1024 d64), 20 calls each
after a warm-up, forward without grad; SDPA with the same mask beside them."""

import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
import flashgen  # noqa: E402


def inputs(b, h, s, d, kind):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(3)
    )
    lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
    keep = torch.arange(s, device="cuda")[None, :] < lengths[:, None]
    if kind == "key":
        return q, k, v, keep[:, None, None, :]
    tri = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
    return q, k, v, (tri[None] & keep[:, None, :])[:, None]


for b, h, s, d, kind in ((4, 16, 2048, 64, "dense"), (8, 16, 1024, 64, "key")):
    q, k, v, mask = inputs(b, h, s, d, kind)
    for name, fn in (
        ("flashgen", lambda: flashgen.attention(q, k, v, attn_mask=mask)),  # noqa: B023
        ("sdpa", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)),  # noqa: B023
    ):
        with torch.no_grad():
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
        print(f"=== {kind} {b}x{h}x{s} d{d} {name}")
        print(
            prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=12, max_name_column_width=60
            )
        )
