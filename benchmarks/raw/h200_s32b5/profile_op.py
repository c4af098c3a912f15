"""Session 32 B5 (issue 15): what the GPU runs for one forward+backward step through
`flashgen.attention` (its own choice: cuDNN on both directions at these shapes, by the shipped
records) against `F.scaled_dot_product_attention` restricted to cuDNN, on the grid rows that
read 0.991-0.999x in B3 with the same cuDNN kernels on both sides. torch.profiler over 5 steps
each after warm-up: every CUDA kernel's name, count and device time, and the steps' wall time.
"""

import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import flashgen

SHAPES = [
    (1, 16, 16, 16384, 128, False),
    (1, 32, 32, 16384, 64, False),
    (1, 32, 8, 16384, 128, False),
]
STEPS = 5


def step_fn(kind, q, k, v, do, causal):
    def step():
        if kind == "op":
            out = flashgen.attention(q, k, v, causal=causal)
        else:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                out = F.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
                )
        out.backward(do)

    return step


result = []
for b, hq, hkv, n, d, causal in SHAPES:
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(
        b, hq, n, d, generator=gen, device="cuda", dtype=torch.bfloat16
    ).requires_grad_()
    k = torch.randn(
        b, hkv, n, d, generator=gen, device="cuda", dtype=torch.bfloat16
    ).requires_grad_()
    v = torch.randn(
        b, hkv, n, d, generator=gen, device="cuda", dtype=torch.bfloat16
    ).requires_grad_()
    do = torch.randn(b, hq, n, d, generator=gen, device="cuda", dtype=torch.bfloat16)
    row = {"shape": [b, hq, hkv, n, d, causal]}
    for kind in ("op", "sdpa_cudnn", "op", "sdpa_cudnn"):
        step = step_fn(kind, q, k, v, do, causal)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / STEPS * 1e3
        kernels = {}
        for ev in prof.key_averages():
            if ev.device_type == torch.autograd.DeviceType.CUDA and ev.count:
                kernels[ev.key[:110]] = [ev.count / STEPS, round(ev.device_time_total / STEPS, 1)]
        total = sum(t for _, t in kernels.values())
        row.setdefault(kind, []).append(
            {"wall_ms": round(wall, 4), "device_us": round(total, 1), "kernels": kernels}
        )
        print(
            json.dumps(
                {
                    "shape": row["shape"],
                    "kind": kind,
                    "wall_ms": round(wall, 4),
                    "device_us": round(total, 1),
                }
            ),
            flush=True,
        )
    result.append(row)
    for t in (q, k, v):
        t.grad = None
with open(sys.argv[1], "w") as f:
    json.dump(result, f, indent=1)
for row in result:
    for kind in ("op", "sdpa_cudnn"):
        print(row["shape"], kind)
        for name, (count, us) in sorted(row[kind][-1]["kernels"].items(), key=lambda kv: -kv[1][1]):
            print(f"   {count:5.1f} x {us:10.1f} us  {name}")
