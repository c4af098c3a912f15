"""The kernels of one forward+backward call, flashgen's beside cuDNN's (session 25 B1; session
23 B2's script with SDPA's cuDNN backend added): torch.profiler over 10 warm calls, the average
device time of each kernel a call, to see whether cuDNN's backward also pays a delta pre-pass, a
dQ buffer fill and a dQ conversion beside its main kernel at 1k keys (13% of flashgen's hopper
backward there). Usage: python3 bwd_parts.py [B,H,N,D[,causal]] ..."""

import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import flashgen

shapes = sys.argv[1:] or ["16,16,1024,128", "16,32,1024,64", "4,16,4096,128", "16,16,1024,128,1"]


def cudnn(q, k, v, causal):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def ours(q, k, v, causal):
    return flashgen.attention(q, k, v, causal=causal, impl="flashgen")


for text in shapes:
    b, h, n, d, *c = (int(x) for x in text.split(","))
    causal = bool(c and c[0])
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    for name, fn in (("cudnn", cudnn), ("flashgen", ours)):

        def step(fn=fn, q=q, k=k, v=v, do=do, causal=causal):
            out = fn(q, k, v, causal)
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
                times[e.name[:90]] += e.device_time / calls
        total = sum(times.values())
        print(f"{name}: B{b} H{h} N{n} D{d} causal={causal}: {total:.1f} us of kernels a call")
        for kname, us in sorted(times.items(), key=lambda x: -x[1]):
            print(f"  {us:9.1f} us  {100 * us / total:5.1f}%  {kname}")
