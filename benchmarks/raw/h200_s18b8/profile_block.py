"""Session 18 B8: which CUDA kernels the Llama block (benchmarks/llama_block.py's model, 4 x 2048,
width 1024, GQA 16/4, bf16) runs per forward+backward step compiled by Inductor and by flashgen's
backend, with their device time (torch.profiler, 20 steps after warm-up), to find what makes
flashgen's step 1-2% slower when both run cuDNN's attention (B4, B7)."""

import collections
import copy
import sys
from pathlib import Path

import torch

root = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(root / "examples"))
sys.path.insert(0, str(root))
from backend_speed import build  # noqa: E402

import flashgen  # noqa: E402

torch.manual_seed(0)
model = build("llama_sdpa", 1024, 2048).cuda().to(torch.bfloat16)
x = torch.randn(4, 2048, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
g = torch.randn_like(x)
runs = {
    "inductor": torch.compile(copy.deepcopy(model), backend="inductor"),
    "flashgen": torch.compile(copy.deepcopy(model), backend=flashgen.backend(fallback="inductor")),
}
for name, fn in runs.items():
    for _ in range(5):
        torch.autograd.grad(fn(x), x, g)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            torch.autograd.grad(fn(x), x, g)
        torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            a = agg[e.name[:110]]
            a[0] += 1
            a[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    total = sum(v[1] for v in agg.values())
    print(
        f"== {name}: {total / 20:.1f} us of kernels a step, {sum(v[0] for v in agg.values()) / 20:.1f} kernels a step"
    )
    for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"  {t / 20:9.1f} us  {n / 20:5.1f}x  {k}")
