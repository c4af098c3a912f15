"""Session 48: a masked site's forward+backward, the tree before session 48 (old_tree/, d68b75a)
against this one, alternating processes: HF's expanded per-key boolean mask [B, 1, S, S]
(right padding), head dim 64, bf16, flashgen's kernels (impl="flashgen"). Reads GPU time
(do_bench median) and host time (perf_counter over 100 calls without a sync), forward and
forward+backward. Usage: python ab_site.py OUT.json   (runs itself per tree: ab_site.py TREE)"""

import json
import os
import statistics
import subprocess
import sys
import time


def measure(tree):
    sys.path.insert(0, tree)
    import torch
    from triton.testing import do_bench

    import flashgen

    assert flashgen.__file__.startswith(os.path.abspath(tree)), flashgen.__file__
    out = {}
    for name, (b, h, s) in {"modernbert": (4, 16, 2048), "bert": (8, 12, 512)}.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (
            torch.randn(
                b, h, s, 64, device="cuda", dtype=torch.bfloat16, generator=gen
            ).requires_grad_()
            for _ in range(3)
        )
        do = torch.randn_like(q)
        keep = torch.ones(b, s, dtype=torch.bool, device="cuda")
        for i in range(1, b):
            keep[i, s - s * i // (2 * b) :] = False
        mask = torch.as_strided(keep, (b, 1, s, s), (s, 0, 0, 1))

        def fwd(q=q, k=k, v=v, mask=mask):
            with torch.no_grad():
                flashgen.attention(q, k, v, attn_mask=mask, impl="flashgen")

        def fwd_bwd(q=q, k=k, v=v, mask=mask, do=do):
            torch.autograd.grad(
                flashgen.attention(q, k, v, attn_mask=mask, impl="flashgen"), (q, k, v), do
            )

        for label, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            gpu = do_bench(fn, warmup=25, rep=200, return_mode="median")
            t = time.perf_counter()
            for _ in range(100):
                fn()
            host = (time.perf_counter() - t) / 100 * 1e6
            torch.cuda.synchronize()
            out[f"{name}_{label}"] = {"ms": gpu, "host_us": host}
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].endswith(".json"):
        measure(sys.argv[1])
        sys.exit(0)
    rows = {"old": [], "new": []}
    for _ in range(3):
        for label, tree in (("old", "old_tree"), ("new", ".")):
            r = subprocess.run([sys.executable, __file__, tree], capture_output=True, text=True)
            line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-2000:]
            print(label, line, flush=True)
            rows[label].append(json.loads(line))
    summary = {}
    for key in rows["new"][0]:
        o = statistics.median(r[key]["ms"] for r in rows["old"])
        n = statistics.median(r[key]["ms"] for r in rows["new"])
        ho = statistics.median(r[key]["host_us"] for r in rows["old"])
        hn = statistics.median(r[key]["host_us"] for r in rows["new"])
        summary[key] = {
            "old_ms": o,
            "new_ms": n,
            "old_over_new": o / n,
            "old_host_us": ho,
            "new_host_us": hn,
        }
        print(
            f"{key:22s} GPU old {o:.4f} new {n:.4f} ms ({o / n:.3f}x)  host old {ho:.1f} new {hn:.1f} us"
        )
    with open(sys.argv[1], "w") as f:
        json.dump({"rounds": rows, "summary": summary}, f, indent=1)
