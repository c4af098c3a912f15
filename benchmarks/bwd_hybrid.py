"""A split backward whose dK/dV kernel is the Hopper (Gluon) one: is it faster than the portable
dK/dV kernel? Correctness and speed in one run on an H100/H200.

Why: the split backward runs two kernels, dK/dV (4 matrix products a tile pair) and dQ (3).
The portable dK/dV kernel is a `tl.dot` kernel; the Hopper backward template
(templates/attn_bwd_hopper.py.jinja) with COMPUTE_DQ=False is a warp-specialised one with no
atomics and no dS exchange (each consumer warpgroup independent). If it is faster, a "hybrid"
split backward (its dK/dV + the portable dQ kernel) is deterministic like the split kind and
faster.

    PYTHONPATH=. python3 benchmarks/bwd_hybrid.py [--out DIR] [--budget S] [--rep MS]
        [--configs C,B,S,R[,SHARE,STATS,PERSISTENT[,KV_BUFS]] ...]

1. Correctness: on ragged GQA shapes (bf16), dQ from the split kind and dK/dV from each Hopper
   config against float64 autograd (`flashgen.bench.checks.grad_check`).
2. Speed (bf16, median of do_bench, L2 flushed), the anchors grid, causal both ways: the split
   kind's dK/dV kernel alone and dQ kernel alone (their shipped configs), each Hopper dK/dV
   config, cuDNN forward+backward and flashgen's forward; dK/dV of each Hopper config compared
   with the split kind's on the timed inputs (largest difference over largest value).
Results: <out>/bwd_hybrid.json, rewritten after every shape.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import harness, scripts  # noqa: E402

CHECKS = [(2, 8, 2, 777, 777), (1, 4, 4, 300, 129), (1, 4, 1, 129, 517), (4, 16, 8, 1000, 1000)]
DEFAULT_CONFIGS = ["2,2,1,168", "2,3,1,168", "2,2,1,168,0,0,1"]


def _config(text):
    from flashgen.kernels.hopper_bwd import HopperBwdConfig

    f = [int(x) for x in text.split(",")]
    return HopperBwdConfig(*f[:4], *(bool(x) for x in f[4:7]), *f[7:])


def _delta(out, do):
    return (out.float() * do.float()).sum(-1)


def _split(do, q, k, v, out, lse, causal, needs):
    from flashgen.kernels.bwd import backward

    return backward(do, q, k, v, out, lse, causal=causal, scale=q.shape[-1] ** -0.5,
                    needs=needs, deterministic=True)  # fmt: skip


def _hopper_dkdv(do, q, k, v, out, lse, causal, cfg, delta):
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper_bwd

    spec = KernelSpec(q.shape[-1], causal, "bfloat16", "bwd")
    return hopper_bwd.backward(do, q, k, v, out, lse, scale=q.shape[-1] ** -0.5, spec=spec,
                               config=cfg, delta=delta, compute_dq=False)  # fmt: skip


def _forward(q, k, v, causal):
    from flashgen.kernels.fwd import forward

    return forward(q, k, v, causal=causal, scale=None)


def check(cfgs):
    import torch

    from flashgen.bench.checks import grad_check

    rows = []
    for d in (64, 128):
        for causal in (False, True):
            for b, hq, hkv, sq, sk in CHECKS:
                q, k, v, do = scripts.inputs(b, hq, hkv, sq, sk, d, seed=1, draw="cpu")
                out, lse = _forward(q, k, v, causal)
                dq = _split(do, q, k, v, out, lse, causal, (True, False, False))[0]
                for text, cfg in cfgs.items():
                    case = dict(d=d, causal=causal, shape=[b, hq, hkv, sq, sk], cfg=text)
                    try:
                        _, dk, dv = _hopper_dkdv(do, q, k, v, out, lse, causal, cfg,
                                                 _delta(out, do))  # fmt: skip
                        torch.cuda.synchronize()
                        ok, errs = grad_check((dq, dk, dv), q, k, v, do, causal=causal)
                        rows.append(dict(case, ok=ok, errors=errs))
                    except Exception as exc:
                        rows.append(dict(case, ok=False, error=scripts.error_text(exc)))
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def time_shape(shape, causal, cfgs, rep):
    import torch

    b, hq, hkv, n, d = shape
    q, k, v, do = scripts.inputs(b, hq, hkv, n, n, d, seed=2)
    out, lse = _forward(q, k, v, causal)
    delta = _delta(out, do)
    bench = scripts.timer("cuda", rep, warmup_ms=5)
    flops = harness.attention_flops(b, hq, n, n, d, causal, "bwd")
    row = dict(shape=list(shape), causal=causal, ms={}, diff={})
    row["ms"]["flashgen fwd"] = bench(lambda: _forward(q, k, v, causal))
    row["ms"]["split"] = bench(lambda: _split(do, q, k, v, out, lse, causal, (True, True, True)))
    row["ms"]["split dq"] = bench(
        lambda: _split(do, q, k, v, out, lse, causal, (True, False, False))
    )
    row["ms"]["split dkdv"] = bench(
        lambda: _split(do, q, k, v, out, lse, causal, (False, True, True))
    )
    ref = _split(do, q, k, v, out, lse, causal, (False, True, True))
    for text, cfg in cfgs.items():
        fn = lambda cfg=cfg: _hopper_dkdv(do, q, k, v, out, lse, causal, cfg, delta)  # noqa: E731
        ms, err = scripts.attempt(bench, fn)
        row["ms"][f"hopper dkdv {text}"] = ms if err is None else err[:200]
        if err is None:
            _, dk, dv = fn()
            row["diff"][text] = [
                round(((a.float() - r.float()).abs().max() / r.float().abs().max()).item(), 5)
                for a, r in ((dk, ref[1]), (dv, ref[2]))
            ]
    sdpa = scripts.sdpa_baselines(q, k, v, causal=causal, time_fn=bench, do=do,
                                  impls=["sdpa_cudnn"])  # fmt: skip
    row["ms"]["cudnn fwd+bwd"] = sdpa["sdpa_cudnn"]
    ms = row["ms"]
    row["ms"] = {name: round(x, 4) if isinstance(x, float) else x for name, x in ms.items()}
    fast = [x for name, x in ms.items() if name.startswith("hopper") and isinstance(x, float)]
    if fast and isinstance(ms["cudnn fwd+bwd"], float):
        best = min(fast)
        hybrid = ms["flashgen fwd"] + ms["split dq"] + best
        row["vs_cudnn"] = {
            "split": round(ms["cudnn fwd+bwd"] / (ms["flashgen fwd"] + ms["split"]), 3),
            "hybrid (sequential)": round(ms["cudnn fwd+bwd"] / hybrid, 3),
        }
        row["dkdv_speedup"] = round(ms["split dkdv"] / best, 3)
        # `flops` counts the backward's 5 matrix products; the dK/dV kernels do 4 of them
        row["dkdv_tflops"] = {"split": scripts.tflops(flops * 4 / 5, ms["split dkdv"]),
                              "hopper best": scripts.tflops(flops * 4 / 5, best)}  # fmt: skip
    torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds of timing, then stop")
    ap.add_argument("--rep", type=int, default=25, help="ms of runs per reading")
    ap.add_argument("--configs", nargs="*", default=DEFAULT_CONFIGS,
                    help="Hopper configs: consumers,num_buf,dq_split,maxnreg[,share,stats,"
                         "persistent[,kv_bufs]]")  # fmt: skip
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args(argv)
    cfgs = {text: _config(text) for text in args.configs}
    report = {"configs": args.configs, "checks": [], "rows": []}
    path = os.path.join(args.out, "bwd_hybrid.json")

    def save():
        with open(path, "w") as fh:
            json.dump(report, fh, indent=1)

    if not args.no_check:
        report["checks"] = check(cfgs)
        save()
    start = time.time()
    for shape in harness.ANCHOR_SHAPES:
        for causal in (False, True):
            if time.time() - start > args.budget:
                break
            row = time_shape(shape, causal, cfgs, args.rep)
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
            save()
    bad = [c for c in report["checks"] if not c["ok"]]
    print(f"checks: {len(report['checks']) - len(bad)} ok, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
