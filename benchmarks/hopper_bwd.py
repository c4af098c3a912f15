"""The Hopper (Gluon) backward on an H100/H200: correctness against float64 and speed next to the
split backward and SDPA's cuDNN, in one run.

Run on the GPU machine from the checkout (torch, triton with Gluon, jinja2; no database is
read: every launch gets an explicit or built-in config):

    PYTHONPATH=. python3 benchmarks/hopper_bwd.py [--out DIR] [--budget S] [--grid anchors|probe]
        [--configs D:C,B,S,R[,SHARE,STATS,PERSISTENT[,KV_BUFS[,DQ_TMA[,STATS_SMEM[,TURNS[,DS_BUFS
        [,DYNAMIC[,DQ_BUFS[,DQ_FIRST]]]]]]]]] ...] [--checks D:CAUSAL:CFG ...]
        [--rep MS] [--rounds N] [--check-timeout S]

1. Correctness (bf16 and fp16, in worker processes, which also compiles every kernel the
   timing needs): dQ/dK/dV of the Hopper backward for each config, head dim and causal mode on
   a ragged GQA shape (odd lengths, more queries than keys and the reverse) against float64
   autograd; bound 3x PyTorch's own same-dtype error plus 8e-3 of the gradient's size (as
   benchmarks/bwd_kinds.py and tests/kernels/test_backward.py).
2. Speed (bf16, median of triton.testing.do_bench, L2 flushed): backward alone for the split
   kind (its H200 default config) and each Hopper config; forward+backward = flashgen's
   default forward (the Hopper Gluon forward at head dim 128) + that backward, against cuDNN
   forward+backward (SDPA backend, autograd). TFLOP/s: forward 4*B*Hq*N^2*D, backward 2.5x
   that, halved when causal.

Results go to <out>/hopper_bwd.json, rewritten after every shape; timing stops once --budget
seconds have passed. Exit status 1 if a correctness check failed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import harness, scripts  # noqa: E402
from flashgen.bench.scripts import GRIDS  # noqa: E402  (B, Hq, Hkv, N, D) grids, as the other GPU scripts

# Split-kind configs: the H200 defaults table's winners (as benchmarks/bwd_kinds.py).
SPLIT_CFG = {(64, False): (64, 64, 4, 3), (64, True): (64, 64, 4, 2)}
SPLIT_CFG.update({(128, False): (128, 128, 8, 2), (128, True): (64, 64, 4, 2)})
# Correctness shapes: (B, Hq, Hkv, Sq, Sk)
# (the last has 256 work items: more than an H200's 132 SMs, so persistent programs take several)
CHECKS = [(2, 8, 2, 777, 777), (1, 4, 4, 300, 129), (1, 4, 1, 129, 517), (4, 16, 8, 1000, 1000)]


def _inputs(b, hq, hkv, sq, sk, d, seed=0, dtype=None):
    return scripts.inputs(b, hq, hkv, sq, sk, d, dtype=dtype or "bfloat16", seed=seed, draw="cpu")


def _spec(d, causal, dtype="bfloat16"):
    from flashgen.core.spec import KernelSpec

    return KernelSpec(d, causal, dtype, "bwd")


def _hopper(do, q, k, v, out, lse, causal, cfg):
    from flashgen.kernels import hopper_bwd

    spec = _spec(q.shape[-1], causal, str(q.dtype).removeprefix("torch."))
    flags = (bool(x) for x in cfg[4:7])
    dq_tma = len(cfg) > 8 and bool(cfg[8])
    stats_smem = len(cfg) > 9 and bool(cfg[9])
    dq_turns = len(cfg) > 10 and bool(cfg[10])
    ds_bufs = cfg[11] if len(cfg) > 11 else 1
    dynamic = len(cfg) > 12 and bool(cfg[12])
    dq_bufs = cfg[13] if len(cfg) > 13 else 1
    dq_first = len(cfg) > 14 and bool(cfg[14])
    config = hopper_bwd.HopperBwdConfig(*cfg[:4], *flags, *cfg[7:8], dq_tma=dq_tma,
                                        stats_smem=stats_smem, dq_turns=dq_turns,
                                        ds_bufs=ds_bufs, dynamic=dynamic, dq_bufs=dq_bufs,
                                        dq_first=dq_first)  # fmt: skip
    return hopper_bwd.backward(do, q, k, v, out, lse, scale=q.shape[-1] ** -0.5, spec=spec,
                               config=config)  # fmt: skip


def _split(do, q, k, v, out, lse, causal):
    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward

    cfg = TileConfig(*SPLIT_CFG[(q.shape[-1], causal)])
    return backward(do, q, k, v, out, lse, causal=causal, scale=q.shape[-1] ** -0.5, config=cfg,
                    deterministic=True)  # fmt: skip


def _forward(q, k, v, causal):
    from flashgen.kernels.fwd import forward

    return forward(q, k, v, causal=causal, scale=None)


def check(job):
    """In a worker of its own (CUDA_LAUNCH_BLOCKING=1, so a fault names its launch): the CHECKS
    shapes for one (head dim, causal, config) in bf16 (the last, with more work items than
    SMs, only for persistent configs), one in fp16 when `warm`; the first fault ends the job
    (the CUDA context is lost). Then, when `warm`, one run of the timed specialisation of the
    split kind and the forward, so the timing finds them compiled."""
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    if len(job) > 4:  # spread over the machine's GPUs (set before torch initialises CUDA)
        os.environ["CUDA_VISIBLE_DEVICES"] = str(job[4])
    import traceback

    import torch

    from flashgen.bench.checks import grad_check

    d, causal, cfg, warm = job[:4]
    persistent = len(cfg) > 6 and cfg[6]
    cases = [(torch.bfloat16, shape) for shape in CHECKS[: 4 if persistent else 3]]
    cases += [(torch.float16, CHECKS[0])] if warm else []
    results = []
    for dtype, (b, hq, hkv, sq, sk) in cases:
        case = dict(d=d, causal=causal, cfg=list(cfg), dtype=str(dtype), shape=[b, hq, hkv, sq, sk])
        try:
            q, k, v, do = _inputs(b, hq, hkv, sq, sk, d, seed=1, dtype=dtype)
            out, lse = _forward(q, k, v, causal)
            torch.cuda.synchronize()
            got = _hopper(do, q, k, v, out, lse, causal, cfg)
            torch.cuda.synchronize()
            ok, errs = grad_check(got, q, k, v, do, causal=causal)
            results.append(dict(case, ok=ok, errors=errs))
        except Exception as exc:
            tb = traceback.format_exc()
            results.append(dict(case, ok=False, error=scripts.error_text(exc),
                                where=tb[-1200:]))  # fmt: skip
            return results
    try:
        for hq, hkv in ((16, 16), (32, 8)) if warm else ():
            q, k, v, do = _inputs(1, hq, hkv, 1024, 1024, d)
            out, lse = _forward(q, k, v, causal)
            _split(do, q, k, v, out, lse, causal)
        torch.cuda.synchronize()
    except Exception as exc:
        results.append(dict(d=d, causal=causal, warm_error=scripts.error_text(exc)))
    return results


def _gpu_count() -> int:
    """GPUs of this machine, without initialising CUDA in this process (the workers are
    spawned and pick theirs through CUDA_VISIBLE_DEVICES)."""
    import subprocess

    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 1
    return max(1, sum(line.startswith("GPU ") for line in done.stdout.splitlines()))


def time_shape(shape, causal, cfgs, rep, rounds=1):
    """One row: the backward of the split kind and of each config, timed in `rounds` alternating
    rounds (the median of each; a single reading of a series can be ~10% off), then cuDNN."""
    import statistics

    import torch

    b, hq, hkv, n, d = shape
    q, k, v, do = _inputs(b, hq, hkv, n, n, d, seed=2)
    out, lse = _forward(q, k, v, causal)
    bench = scripts.timer("cuda", rep, warmup_ms=5)
    fwd_ms = bench(lambda: _forward(q, k, v, causal))
    flops = harness.attention_flops(b, hq, n, n, d, causal, "bwd")
    row = dict(shape=list(shape), causal=causal, flashgen_fwd_ms=round(fwd_ms, 4), bwd={})
    runs = {"split": lambda: _split(do, q, k, v, out, lse, causal)}
    for cfg in cfgs:
        runs[f"hopper{tuple(cfg)}"] = lambda cfg=cfg: _hopper(do, q, k, v, out, lse, causal, cfg)
    readings: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            if isinstance(row["bwd"].get(name), str):
                continue
            ms, err = scripts.attempt(bench, fn)
            if err is not None:
                row["bwd"][name] = err[:200]
                continue
            readings[name].append(ms)
    for name, got in readings.items():
        if got and name not in row["bwd"]:
            ms = statistics.median(got)
            row["bwd"][name] = dict(ms=round(ms, 4), tflops=scripts.tflops(flops, ms),
                                    readings=[round(x, 4) for x in got])  # fmt: skip
    sdpa = scripts.sdpa_baselines(
        q, k, v, causal=causal, time_fn=bench, do=do, impls=["sdpa_cudnn"]
    )
    cudnn = sdpa["sdpa_cudnn"]
    row["cudnn_fwdbwd_ms"] = cudnn[:200] if isinstance(cudnn, str) else round(cudnn, 4)
    if isinstance(row["cudnn_fwdbwd_ms"], float):
        row["vs_cudnn"] = {
            name: round(row["cudnn_fwdbwd_ms"] / (fwd_ms + r["ms"]), 3)
            for name, r in row["bwd"].items()
            if isinstance(r, dict)
        }
    torch.cuda.empty_cache()
    return row


def summarise(rows):
    """Geomean and min of forward+backward vs cuDNN per backward variant."""
    ratios: dict[str, list[float]] = {}
    for row in rows:
        for name, r in row.get("vs_cudnn", {}).items():
            ratios.setdefault(name, []).append(r)
    return {
        name: dict(geomean=round(math.exp(sum(map(math.log, rs)) / len(rs)), 3),
                   min=round(min(rs), 3), n=len(rs))
        for name, rs in ratios.items()
    }  # fmt: skip


def main(argv=None) -> int:
    parser = scripts.parser(__doc__, out=os.environ.get("OUT", "."), budget=60.0)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="anchors")
    parser.add_argument(
        "--configs",
        nargs="*",
        default=None,
        help="Hopper configs as head_dim:consumers,num_buf,dq_split,maxnreg[,share_ds,stats_tma,"
        "persistent 0/1[,kv_bufs[,dq_tma 0/1[,stats_smem 0/1[,dq_turns 0/1[,ds_bufs[,dynamic 0/1"
        "[,dq_bufs[,dq_first 0/1]]]]]]]]] "
        "(default: the shipped config per head dim and causal, hopper_bwd.shipped_config)",
    )
    parser.add_argument(
        "--checks",
        nargs="*",
        default=None,
        help="correctness jobs as head_dim:causal 0/1:config (default: every "
        "timed config, both causal modes); only configs that passed are "
        "timed",
    )
    parser.add_argument("--check-timeout", type=float, default=60.0,
                        help="seconds for the correctness phase (a hung kernel ends the run)")  # fmt: skip
    parser.add_argument("--rep", type=int, default=40, help="do_bench rep (ms)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternating timing rounds per shape (the median of each backward)")  # fmt: skip
    args = parser.parse_args(argv)
    start = time.time()
    from flashgen.kernels import hopper_bwd

    def parse(text):
        """A config's fields in the order of --configs' help (no block_m: it is 64); the flags
        0 or 1, so that a field out of place (e.g. HopperBwdConfig's positional block_m) is an
        error, not a silently different config."""
        cfg = tuple(int(x) for x in text.split(","))
        flags = [x for i, x in enumerate(cfg) if i >= 4 and i not in (7, 11, 13)]
        if not 4 <= len(cfg) <= 15 or any(x not in (0, 1) for x in flags):
            parser.error(f"config {text!r}: C,B,S,R then up to 11 fields, flags 0/1 (--help)")
        return cfg

    def default_cfg(d, causal):
        c = hopper_bwd.shipped_config(_spec(d, causal, "bfloat16"))
        flags = (c.share_ds, c.stats_tma, c.persistent)
        tail = (
            int(c.dq_tma),
            int(c.stats_smem),
            int(c.dq_turns),
            c.ds_bufs,
            int(c.dynamic),
            c.dq_bufs,
            int(c.dq_first),
        )
        return (c.consumers, c.num_buf, c.dq_split, c.maxnreg, *map(int, flags), c.kv_bufs, *tail)

    shapes = GRIDS[args.grid]
    dims = sorted({s[-1] for s in shapes})
    # (head dim, causal) -> the configs timed there: --configs' of the head dim, else shipped
    timed = {(d, causal): [parse(c.split(":")[1]) for c in args.configs or ()
                           if int(c.split(":")[0]) == d] or [default_cfg(d, causal)]
             for d in dims for causal in (False, True)}  # fmt: skip
    if args.checks:
        jobs = [(int(d), bool(int(c)), parse(cfg)) for d, c, cfg in
                (j.split(":") for j in args.checks)]  # fmt: skip
    else:
        jobs = [(d, causal, cfg) for (d, causal), cfgs in timed.items() for cfg in cfgs]
    firsts = {}
    jobs = [(d, c, cfg, firsts.setdefault((d, c), cfg) == cfg) for d, c, cfg in jobs]
    gpus = _gpu_count()
    if gpus > 1:
        jobs = [(*job, i % gpus) for i, job in enumerate(jobs)]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "hopper_bwd.json")
    report = dict(checks=[], rows=[])

    def save():
        report["summary"] = summarise(report["rows"])
        scripts.save_json(path, report)

    import multiprocessing as mp

    # One process per job: a fault (lost CUDA context) or a hang stays in its job.
    pool = ProcessPoolExecutor(len(jobs), mp.get_context("spawn"), max_tasks_per_child=1)
    futures = [pool.submit(check, job) for job in jobs]
    hung = False
    for job, future in zip(jobs, futures, strict=True):
        left = max(1.0, args.check_timeout - (time.time() - start))
        try:
            report["checks"].extend(future.result(timeout=left))
        except Exception as exc:
            hung = True
            report["checks"].append(dict(job=repr(job[:3]), ok=False, error=repr(exc)[:300]))
    if hung:  # a hung kernel keeps its worker: end them all
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
    pool.shutdown(wait=not hung, cancel_futures=True)
    report["meta"] = scripts.run_meta("cuda")  # after the checks: CUDA starts here only now
    passed = {
        (d, c, tuple(cfg))
        for d, c, cfg, *_ in jobs
        if all(r.get("ok") for r in report["checks"]
               if r.get("d") == d and r.get("causal") == c and tuple(r.get("cfg", ())) == cfg)
        and any(r.get("d") == d and r.get("causal") == c and tuple(r.get("cfg", ())) == cfg
                for r in report["checks"])
    }  # fmt: skip
    bad = [r for r in report["checks"] if not r.get("ok", "warm_error" not in r)]
    ok = sum(1 for r in report["checks"] if r.get("ok"))
    print(f"[{time.time() - start:.0f}s] checks: {ok} ok, {len(bad)} failed")
    for r in report["checks"]:
        if not r.get("ok"):
            print("  FAILED", json.dumps({k: v for k, v in r.items() if k != "where"}))
            if "where" in r:
                print("   ", r["where"].strip().splitlines()[-6:])
    report["passed"] = sorted(map(repr, passed))
    print("passed:", report["passed"])
    save()
    for shape in shapes:
        for causal in (False, True):
            if time.time() - start > args.budget:
                print(f"budget reached before {shape} causal={causal}")
                save()
                return 1 if bad else 0
            d = shape[-1]
            cfgs = [cfg for cfg in timed[d, causal] if (d, causal, cfg) in passed]
            row = time_shape(shape, causal, cfgs, args.rep, args.rounds)
            report["rows"].append(row)
            save()
            print(f"[{time.time() - start:.0f}s] {tuple(shape)} causal={causal} vs cuDNN "
                  f"{json.dumps(row.get('vs_cudnn'))} bwd {json.dumps(row['bwd'])}")  # fmt: skip
    save()
    print("summary:", json.dumps(report["summary"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
