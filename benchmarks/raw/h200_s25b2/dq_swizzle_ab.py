"""Session 25 B2: the Hopper backward's fp32 dQ staging tile with a 32-byte swizzle (new default,
hopper_bwd.DQ_SWIZZLE) against the 128-byte one it had (FLASHGEN_BWD_DQ_SWIZZLE=128), the
shipped config of each (head dim, causal), backward alone (delta pre-pass, zero-fill, main
kernel, dQ conversion), on the 18-shape anchor grid: both plans built once per shape, timed in
alternating rounds (do_bench medians, L2 flushed), the median per variant; the two variants'
gradients compared (they differ only in the order of fp32 adds). Writes JSON to argv[1]."""

import json
import os
import statistics
import sys
import time

import torch
import triton.testing

from flashgen.bench import harness, scripts
from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper_bwd
from flashgen.kernels.fwd import forward

out_path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
budget = float(sys.argv[3]) if len(sys.argv) > 3 else 200


def run(shape, causal, rounds):
    b, hq, hkv, n, d = shape
    q, k, v, do = scripts.inputs(b, hq, hkv, n, n, d, seed=2)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    spec = KernelSpec(d, causal, "bfloat16", "bwd")
    cfg = hopper_bwd.shipped_config(spec)
    plans = {}
    for sw in ("128", "32"):
        os.environ[hopper_bwd.DQ_SWIZZLE_ENV] = sw
        plans[sw] = hopper_bwd.Plan(spec, cfg, q, k, v, do, out, None)
    os.environ.pop(hopper_bwd.DQ_SWIZZLE_ENV)
    scale = d**-0.5
    grads = {sw: p(do, q, k, v, out, lse, scale) for sw, p in plans.items()}
    diff = max(
        ((a.float() - c.float()).abs().max() / c.float().abs().max()).item()
        for a, c in zip(grads["32"], grads["128"], strict=True)
    )
    del grads
    ms = {sw: [] for sw in plans}
    for i in range(rounds):
        for sw in list(plans)[:: -1 if i % 2 else 1]:
            plan = plans[sw]
            ms[sw].append(triton.testing.do_bench(
                lambda plan=plan: plan(do, q, k, v, out, lse, scale), warmup=5, rep=25,
                return_mode="median"))  # fmt: skip
    med = {sw: statistics.median(x) for sw, x in ms.items()}
    return dict(
        shape=list(shape),
        causal=causal,
        config=cfg.short(),
        ms=ms,
        median=med,
        ratio_32_over_128=round(med["128"] / med["32"], 4),
        rel_diff=round(diff, 6),
    )


start = time.time()
rows = []
for shape in harness.ANCHOR_SHAPES:
    for causal in (False, True):
        if time.time() - start > budget:
            break
        row = run(shape, causal, rounds)
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(out_path, "w") as fh:
            json.dump(rows, fh, indent=1)
        torch.cuda.empty_cache()
ratios = [r["ratio_32_over_128"] for r in rows]
geo = statistics.geometric_mean(ratios) if ratios else float("nan")
print(
    f"32-byte over 128-byte (time 128 / time 32): geomean {geo:.4f}, min {min(ratios):.4f}, "
    f"max {max(ratios):.4f} over {len(ratios)} rows"
)
