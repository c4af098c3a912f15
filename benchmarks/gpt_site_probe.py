"""Why the nanoGPT-style block of examples/backend_speed.py read 0.602 ms forward under the
backend in session 33 B2 against 0.206 ms in session 29 B4 (same shapes; the Llama block level):
what the site runs (explain), the compiled block's kernels (torch.profiler), and the op alone
on the block's strided q, k, v (slices of one [B, T, 3C] projection) against contiguous copies,
per implementation.

    python benchmarks/gpt_site_probe.py
"""

from __future__ import annotations

import os
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from backend_speed import GPTAttention  # noqa: E402

import flashgen  # noqa: E402


def bench(fn) -> float:
    return min(triton.testing.do_bench(fn, rep=50, return_mode="median") for _ in range(3))


def main() -> None:
    b, t, c, nh = 4, 2048, 1024, 16
    torch.manual_seed(0)
    m = GPTAttention(c, nh, t).cuda().to(torch.bfloat16)
    x = torch.randn(b, t, c, device="cuda", dtype=torch.bfloat16)
    print(flashgen.explain(m, x), flush=True)
    compiled = torch.compile(m, backend=flashgen.backend())
    with torch.no_grad():
        compiled(x)
        print(f"compiled block forward: {bench(lambda: compiled(x)):.4f} ms", flush=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                compiled(x)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12), flush=True)
        qkv = m.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, nh, c // nh).transpose(1, 2) for z in qkv)
        qc, kc, vc = (z.contiguous() for z in (q, k, v))
        for impl in (None, "flashgen", "sdpa_cudnn", "sdpa_flash"):
            for name, args in (("strided", (q, k, v)), ("contiguous", (qc, kc, vc))):
                fn = lambda a=args, i=impl: flashgen.attention(*a, causal=True, impl=i)  # noqa: E731
                try:
                    ms = bench(fn)
                except Exception as exc:  # a backend refusing the layout
                    print(f"impl={impl} {name}: {type(exc).__name__}: {exc}"[:200], flush=True)
                    continue
                print(f"impl={impl} {name}: {ms:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
