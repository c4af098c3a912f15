"""Session 26 B5: deeper rings against the shipped config of each (head dim, causal), the
Hopper backward alone: three Q/dO ring slots ("b3") everywhere; at head dim 128 the whole dQ
products in turns (new there: one 64x128 product a step, "t2" with two dS slots, "t" with one)
and, without causal masking, a persistent grid ("P", "P_b3"); at 64 (persistent there) two K/V
slots ("kv2").
First a float64 check of each variant on a ragged GQA shape per (head dim, causal); then the
18-shape anchor grid, every plan built once per shape and timed in alternating rounds (do_bench
medians, L2 flushed), the median per variant, and each variant's gradients compared with the
shipped config's. Writes JSON to argv[1]; argv[2] rounds, argv[3] seconds of timing budget."""

import dataclasses
import json
import statistics
import sys
import time

import torch
import triton.testing

from flashgen.bench import harness, scripts
from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper_bwd
from flashgen.kernels.fwd import forward
from flashgen.kernels.reference import attention_ref, sdpa_same_dtype

out_path, rounds, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])


def variants(d, causal):
    spec = KernelSpec(d, causal, "bfloat16", "bwd")
    shipped = hopper_bwd.shipped_config(spec)
    out = {"shipped": shipped, "b3": dataclasses.replace(shipped, num_buf=3)}
    if d == 128:  # whole dQ products in turns (two dS slots), without dq_first
        out["t2"] = dataclasses.replace(shipped, dq_first=False, dq_turns=True, ds_bufs=2)
    if d == 128 and not causal:
        out["t"] = dataclasses.replace(shipped, dq_turns=True)
        out["P"] = dataclasses.replace(shipped, persistent=True)
        out["P_b3"] = dataclasses.replace(shipped, persistent=True, num_buf=3)
    if d == 64:  # persistent there: the next item's K/V during this one's last steps
        out["kv2"] = dataclasses.replace(shipped, kv_bufs=2)
    return spec, out


def check(d, causal):
    """Each variant against float64 autograd on 2 x 8/2 heads x 333 queries x 301 keys (bound:
    3x PyTorch's own bf16 error + 8e-3 of the gradient's size, as benchmarks/hopper_bwd.py)."""
    spec, cfgs = variants(d, causal)
    q, k, v, do = scripts.inputs(2, 8, 2, 333, 301, d, seed=1)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    attention_ref(*leaves, causal=causal)[0].backward(do.double())
    half = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sdpa_same_dtype(*half, causal=causal).backward(do)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    result = {}
    for name, cfg in cfgs.items():
        grads = hopper_bwd.backward(do, q, k, v, out, lse, scale=d**-0.5, spec=spec, config=cfg)
        ok = True
        for g, ref, h in zip(grads, (t.grad for t in leaves), (t.grad for t in half), strict=True):
            err = (g.double() - ref).abs().max().item()
            bound = 3 * (h.double() - ref).abs().max().item()
            bound += 8e-3 * max(1.0, ref.abs().max().item())
            ok = ok and bool(torch.isfinite(g).all()) and err <= bound
        result[name] = ok
    return result


def run(shape, causal):
    b, hq, hkv, n, d = shape
    q, k, v, do = scripts.inputs(b, hq, hkv, n, n, d, seed=2)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    spec, cfgs = variants(d, causal)
    plans = {name: hopper_bwd.Plan(spec, cfg, q, k, v, do, out, None) for name, cfg in cfgs.items()}
    scale = d**-0.5
    grads = {name: p(do, q, k, v, out, lse, scale) for name, p in plans.items()}
    diff = {
        name: round(max(
            ((a.float() - c.float()).abs().max() / c.float().abs().max()).item()
            for a, c in zip(grads[name], grads["shipped"], strict=True)
        ), 6)
        for name in grads if name != "shipped"
    }  # fmt: skip
    del grads
    ms = {name: [] for name in plans}
    for i in range(rounds):
        for name in list(plans)[:: -1 if i % 2 else 1]:
            plan = plans[name]
            ms[name].append(triton.testing.do_bench(
                lambda plan=plan: plan(do, q, k, v, out, lse, scale), warmup=5, rep=25,
                return_mode="median"))  # fmt: skip
    med = {name: statistics.median(x) for name, x in ms.items()}
    ratio = {name: round(med["shipped"] / med[name], 4) for name in med if name != "shipped"}
    configs = {name: cfg.short() for name, cfg in cfgs.items()}
    return dict(shape=list(shape), causal=causal, configs=configs, ms=ms, median=med,
                ratio=ratio, rel_diff=diff)  # fmt: skip


checks = {f"d{d} causal={c}": check(d, c) for d in (64, 128) for c in (False, True)}
print("float64 checks:", checks, flush=True)
start = time.time()
rows = []
for shape in harness.ANCHOR_SHAPES:
    for causal in (False, True):
        if time.time() - start > budget:
            break
        row = run(shape, causal)
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(out_path, "w") as fh:
            json.dump(dict(checks=checks, rows=rows), fh, indent=1)
        torch.cuda.empty_cache()
for d in (64, 128):
    for name in ("b3", "t2", "t", "P", "P_b3", "kv2"):
        ratios = [r["ratio"][name] for r in rows if r["shape"][-1] == d and name in r["ratio"]]
        if ratios:
            print(f"head dim {d}: shipped time / {name} time geomean "
                  f"{statistics.geometric_mean(ratios):.4f}, min {min(ratios):.4f}, "
                  f"max {max(ratios):.4f} over {len(ratios)} rows")  # fmt: skip
