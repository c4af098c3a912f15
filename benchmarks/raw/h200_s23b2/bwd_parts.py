"""The backward's kernels one by one (session 23 B2): torch.profiler over warm forward+backward
calls of flashgen.attention (impl="flashgen": the default kinds) on grid shapes, the average
device time of each kernel a call (the delta pre-pass, the fp32 dQ buffer's zero-fill, the
main backward, the dQ conversion, the forward), to see what the 1k shapes pay beside the main
kernel. Usage: python3 bwd_parts.py [B,H,N,D[,causal]] ..."""

import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import flashgen

shapes = sys.argv[1:] or [
    "16,16,1024,128",
    "16,32,1024,64",
    "4,16,4096,128",
    "4,32,4096,64",
    "16,16,1024,128,1",
]
for text in shapes:
    b, h, n, d, *c = (int(x) for x in text.split(","))
    causal = bool(c and c[0])
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)

    def step(q=q, k=k, v=v, do=do, causal=causal):
        out = flashgen.attention(q, k, v, causal=causal, impl="flashgen")
        torch.autograd.grad(out, (q, k, v), do)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    calls = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    times = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name[:70]] += e.device_time / calls
    total = sum(times.values())
    print(f"B{b} H{h} N{n} D{d} causal={causal}: {total:.1f} us of kernels a call")
    for name, us in sorted(times.items(), key=lambda x: -x[1]):
        print(f"  {us:9.1f} us  {100 * us / total:5.1f}%  {name}")
