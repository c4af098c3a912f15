"""Session 61: why the op with attention dropout trails SDPA's forward+backward at small sizes
(session 61's drop_op.py run: causal B8 N1024 539 us against non-causal 339 us, twice the work).
For each shape ([B, 12, N, 64] bf16), forward+backward with dropout 0.1 under each backward kind
(FLASHGEN_BWD_KIND split / hopper / auto) and without dropout (auto), SDPA beside them: do_bench
medians of 3 alternating rounds; then the GPU's kernel time per call (torch.profiler, 20 calls)
for each variant, so host-bound and GPU-bound calls tell apart."""

import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

import flashgen

out = sys.argv[1]
rows = []


def kernels_us(f, calls=20):
    f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            f()
        torch.cuda.synchronize()
    per = {}
    for e in prof.key_averages():
        t = e.self_device_time_total
        if t > 0:
            per[e.key[:60]] = round(t / calls, 1)
    return round(sum(per.values()), 1), per


for causal in (True, False):
    for b, n in ((4, 512), (8, 512), (16, 512), (32, 512), (8, 1024), (16, 1024), (4, 2048)):
        q, k, v = (
            torch.randn(b, 12, n, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        g = torch.randn_like(q)

        def fb(p, kind, sdpa=False, q=q, k=k, v=v, g=g, c=causal):
            def call():
                os.environ["FLASHGEN_BWD_KIND"] = kind
                if sdpa:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=c, dropout_p=p)
                else:
                    o = flashgen.attention(q, k, v, causal=c, dropout_p=p)
                return torch.autograd.grad(o, (q, k, v), g)

            return call

        variants = {
            "drop_auto": fb(0.1, ""),
            "drop_split": fb(0.1, "split"),
            "drop_hopper": fb(0.1, "hopper"),
            "nodrop_auto": fb(0.0, ""),
            "sdpa_drop": fb(0.1, "", True),
            "sdpa_nodrop": fb(0.0, "", True),
        }
        reads = {name: [] for name in variants}
        for _ in range(3):
            for name, f in variants.items():
                reads[name].append(do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3)
        med = {name: sorted(r)[1] for name, r in reads.items()}
        gpu = {name: kernels_us(f) for name, f in variants.items()}
        os.environ["FLASHGEN_BWD_KIND"] = ""
        row = {"causal": causal, "b": b, "n": n, "us": med, "reads": reads, "gpu_us": gpu}
        rows.append(row)
        print(
            f"causal={causal} B{b} N{n}: "
            + "  ".join(f"{name} {med[name]:.0f} (gpu {gpu[name][0]:.0f})" for name in variants),
            flush=True,
        )
        for name in ("drop_auto", "drop_split", "drop_hopper"):
            print(f"   {name}: {gpu[name][1]}", flush=True)
with open(out, "w") as fh:
    json.dump(rows, fh, indent=1)
