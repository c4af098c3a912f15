"""The split backward's two kernels timed each on its own over a grid of configs, on a GPU.

The dK/dV kernel (one program per key block, walking query blocks) and the dQ kernel (one
program per query block, walking key blocks) hold different things across their loops, so the
best tiles, warps and stages of one need not be the other's. This script compiles every
(spec, kernel, config) in parallel worker processes (Triton's on-disk cache; each worker also
checks that kernel's gradients against float64 autograd on a small shape), then times each
kernel alone in the main process: `backward(needs=(False, True, True))` runs the delta
preprocessing and the dK/dV kernel, `needs=(True, False, False)` the preprocessing and the dQ
kernel (median of triton.testing.do_bench, L2 flushed). Last, if time is left, the best pair
per shape against the configs of the current records, and cuDNN's forward+backward.

    PYTHONPATH=. python3 benchmarks/bwd_sweep.py [--out DIR] [--budget S] [--workers N]

Writes <out>/bwd_sweep.json after every shape (benchmarks/bwd_pick.py turns it into records).
Exit status 1 if a correctness check failed.
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

# (B, Hq, Hkv, N, D): one shape per shape bucket of the records (N 1k/4k/16k, head dims 64/128)
SHAPES = [
    (4, 16, 16, 4096, 128),
    (4, 32, 32, 4096, 64),
    (16, 16, 16, 1024, 128),
    (16, 32, 32, 1024, 64),
    (1, 16, 16, 16384, 128),
    (1, 32, 32, 16384, 64),
]
# Configs (BLOCK_M, BLOCK_N, warps, stages). dK/dV: BLOCK_N keys stay resident, BLOCK_M query
# rows stream; dQ: BLOCK_M query rows stay resident, BLOCK_N keys stream. Each dQ list mirrors
# its dK/dV list (resident and streamed blocks swapped) so a shared-config rule can be judged.
DKDV = {
    128: [(128, 128, 8, 2), (64, 64, 4, 2), (32, 128, 8, 2), (64, 128, 8, 2), (32, 128, 8, 3),
          (64, 128, 8, 3), (16, 128, 8, 3), (32, 64, 4, 3)],
    64: [(64, 64, 4, 3), (64, 64, 4, 2), (32, 128, 4, 3), (64, 128, 8, 3), (32, 128, 8, 3),
         (128, 128, 8, 2), (64, 128, 4, 3), (32, 64, 4, 3)],
}  # fmt: skip
DQ = {d: [(c[1], c[0], c[2], c[3]) for c in cfgs] for d, cfgs in DKDV.items()}
NEEDS = {"dkdv": (False, True, True), "dq": (True, False, False), "all": (True, True, True)}
FWD_CFG = {(128, False): (128, 64, 4, 2), (128, True): (64, 64, 4, 3)}
FWD_CFG.update({(64, False): (128, 64, 8, 3), (64, True): (64, 64, 4, 3)})
RECORD_CFG = {(64, False): (64, 64, 4, 3), (64, True): (64, 64, 4, 2)}
RECORD_CFG.update({(128, False): (128, 128, 8, 2), (128, True): (64, 64, 4, 2)})


SMOKE = os.environ.get("BWD_SWEEP_SMOKE") == "1"  # CPU interpreter, fp16, tiny: code paths only


def _inputs(b, hq, hkv, n, d, seed=0):
    dtype, device = ("float16", "cpu") if SMOKE else ("bfloat16", "cuda")
    return scripts.inputs(b, hq, hkv, n, n, d, dtype=dtype, device=device, seed=seed)


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _forward(q, k, v, causal):
    from flashgen.core.config import TileConfig
    from flashgen.kernels.fwd import forward

    cfg = TileConfig(*FWD_CFG[(q.shape[-1], causal)])
    return forward(q, k, v, causal=causal, scale=None, config=cfg)


def _run(kernel, cfg, do, q, k, v, out, lse, causal):
    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward

    scale = 1.0 / math.sqrt(q.shape[-1])
    return backward(do, q, k, v, out, lse, causal=causal, scale=scale, config=TileConfig(*cfg),
                    needs=NEEDS[kernel], deterministic=True)  # fmt: skip


def warm(job):
    """Compile one kernel for one spec/config (heads as timed) and check it on a small shape
    against float64 autograd: bound 3x PyTorch's own bf16 error + 8e-3 of the gradient's size."""
    from flashgen.bench.checks import grad_check

    kernel, hq, hkv, d, causal, cfg = job
    t0 = time.time()
    try:
        q, k, v, do = _inputs(1, hq, hkv, 64 if SMOKE else 1024, d, seed=1)
        out, lse = _forward(q, k, v, causal)
        got = _run(kernel, cfg, do, q, k, v, out, lse, causal)
        _sync()
    except Exception as exc:
        return job, dict(ok=False, error=scripts.error_text(exc))
    secs = round(time.time() - t0, 1)
    res = dict(secs=secs, **_resources(kernel, d, causal))
    ok, errs = grad_check(got, q, k, v, do, causal=causal)
    return job, dict(ok=ok, errors=errs, **res)


def _resources(kernel, d, causal):
    """Registers, spills and shared bytes of the kernel this worker compiled (it compiled one
    config per build, so every cached entry is that config's)."""
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels.codegen import load

    module = load(KernelSpec(d, causal, "bfloat16", "bwd"))
    found = {}
    for name in (f"attn_bwd_{kernel}", f"attn_bwd_{kernel}_tma"):
        try:
            for cache in getattr(module, name).device_caches.values():
                for compiled in cache[0].values():
                    found[name] = dict(regs=compiled.n_regs, spills=compiled.n_spills,
                                       shared=compiled.metadata.shared)  # fmt: skip
        except Exception as exc:
            found[name] = repr(exc)[:100]
    return found


def _bench(fn, rep):
    return scripts.timer("cpu" if SMOKE else "cuda", rep, warmup_ms=3)(fn)


def _flops(b, hq, n, d, causal):
    return harness.attention_flops(b, hq, n, n, d, causal)


def _swap(key: str) -> str:
    """The dQ config the shared-config rule (core.config.backward_dq_config) gives a config."""
    bm, bn, w, st = key.split(",")
    return ",".join((bn, bm, w, st))


def _full_and_vendor(row, d, causal, tensors, rep) -> dict:
    """Whole backwards (delta, dK/dV, dQ in one call) of the best config under the shared
    rule and of the current records' config, and the SDPA backends' backward alone (autograd
    on a graph built once, as flashgen.tune.sdpa times them): ms by name."""
    import torch

    shared = {c: row["dkdv"][c] + row["dq"][_swap(c)] for c in row["dkdv"] if _swap(c) in row["dq"]}
    picks = {"rule_best": min(shared, key=shared.get)} if shared else {}
    picks["record"] = ",".join(map(str, RECORD_CFG.get((d, causal), (32, 32, 4, 1))))
    out = {}
    for name, key in picks.items():
        cfg = tuple(int(x) for x in key.split(","))
        fn = lambda cfg=cfg, t=tensors, c=causal: _run("all", cfg, *t, c)  # noqa: E731
        out[name] = dict(config=key, ms=round(_bench(fn, rep), 4))
    if SMOKE:
        return out
    from flashgen.runtime.vendor import sdpa

    do, q, k, v = tensors[:4]
    for impl in ("sdpa_cudnn", "sdpa_flash"):
        try:
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            o = sdpa(*leaves, causal=causal, scale=d**-0.5, impl=impl)
            fn = lambda o=o, leaves=leaves: torch.autograd.grad(o, leaves, do, retain_graph=True)  # noqa: E731
            out[impl] = dict(ms=round(_bench(fn, rep), 4))
            del o, leaves
        except Exception as exc:
            out[impl] = dict(error=scripts.error_text(exc, 200))
    return out


def _env(torch, triton) -> dict:
    """What a tuning record's env fingerprint needs (flashgen.db.records.EnvFingerprint)."""
    from flashgen.core.env import flashgen_version, template_hash

    env = dict(torch=torch.__version__, triton=triton.__version__,
               flashgen_version=flashgen_version(), template_hash=template_hash())  # fmt: skip
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                   sm_count=props.multi_processor_count,
                   smem_optin=props.shared_memory_per_block_optin)  # fmt: skip
    else:
        env["gpu"] = "cpu"
    return env


def main(argv=None) -> int:
    parser = scripts.parser(__doc__, out=os.environ.get("OUT", "."), budget=55.0)
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--rep", type=int, default=15, help="do_bench rep (ms)")
    args = parser.parse_args(argv)
    if SMOKE:
        global SHAPES, DKDV, DQ
        SHAPES = [(1, 2, 1, 64, 64)]
        DKDV = {64: [(32, 32, 4, 1), (16, 32, 4, 1)]}
        DQ = {64: [(32, 16, 4, 1)]}
    start = time.time()
    import torch
    import triton

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bwd_sweep.json")
    result = dict(
        started=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        env=_env(torch, triton), meta=scripts.run_meta("cpu" if SMOKE else "cuda"),
        dkdv=DKDV, dq=DQ, rows=[], checks=[],
    )  # fmt: skip

    def save():
        scripts.save_json(path, result)

    heads = sorted({(s[1], s[2], s[4]) for s in SHAPES})
    jobs = [(kernel, hq, hkv, d, causal, cfg)
            for hq, hkv, d in heads for causal in (False, True)
            for kernel, table in (("dkdv", DKDV), ("dq", DQ)) for cfg in table[d]]  # fmt: skip
    # the longest compiles (widest tiles) first
    jobs.sort(key=lambda j: -(j[5][0] * j[5][1] * j[3]))
    bad = set()
    ctx = __import__("multiprocessing").get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        for job, res in pool.map(warm, jobs):
            result["checks"].append(dict(job=list(job), **res))
            print("  ", job, {k: v for k, v in res.items() if k != "errors"})
            if not res["ok"]:
                bad.add(job)
                print("BAD", job, res.get("errors") or res.get("error"))
    save()
    print(f"[{time.time() - start:.0f}s] compiled+checked {len(jobs)}: {len(bad)} bad")
    for b, hq, hkv, n, d in SHAPES:
        for causal in (False, True):
            if time.time() - start > args.budget:
                print("budget reached")
                break
            q, k, v, do = _inputs(b, hq, hkv, n, d, seed=2)
            out, lse = _forward(q, k, v, causal)
            tensors = (do, q, k, v, out, lse)
            row = dict(shape=[b, hq, hkv, n, d], causal=causal, dkdv={}, dq={})
            for kernel, table in (("dkdv", DKDV), ("dq", DQ)):
                for cfg in table[d]:
                    if (kernel, hq, hkv, d, causal, cfg) in bad:
                        continue
                    ms = _bench(lambda kernel=kernel, cfg=cfg, t=tensors, c=causal: _run(
                        kernel, cfg, *t, c), args.rep)  # fmt: skip
                    row[kernel][",".join(map(str, cfg))] = round(ms, 4)
            best = {kn: min(row[kn], key=row[kn].get) for kn in ("dkdv", "dq") if row[kn]}
            row["best"] = best
            row["full"] = _full_and_vendor(row, d, causal, tensors, args.rep)
            rec = ",".join(map(str, RECORD_CFG[(d, causal)]))
            both = row["dkdv"].get(rec, math.nan) + row["dq"].get(rec, math.nan)
            pair = sum(row[kn][best[kn]] for kn in best)
            row["record_sum_ms"], row["best_sum_ms"] = round(both, 4), round(pair, 4)
            flops = _flops(b, hq, n, d, causal) * 2.5
            print(
                f"[{time.time() - start:.0f}s] {(b, hq, hkv, n, d)} causal={causal} "
                f"best dkdv {best.get('dkdv')} {row['dkdv'].get(best.get('dkdv'))} ms, "
                f"dq {best.get('dq')} {row['dq'].get(best.get('dq'))} ms; sum {pair:.3f} ms "
                f"({flops / pair / 1e9:.0f} TFLOP/s) vs record cfg {both:.3f} ms; whole: "
                f"{json.dumps(row['full'])}",
                flush=True,
            )
            result["rows"].append(row)
            save()
            del q, k, v, do, out, lse, tensors
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    result["secs"] = round(time.time() - start, 1)
    save()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
