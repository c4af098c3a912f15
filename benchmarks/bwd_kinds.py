"""The two backward kinds on a GPU: correctness against float64, bit equality, and speed next to
SDPA's cuDNN and FA2 backends.

Run on the GPU machine from the checkout (torch, triton, jinja2; no database is read: every
flashgen launch gets an explicit config, except "split_rec", which takes the shipped records'
config (tuning_db/), and "product", which runs forward+backward through `flashgen.attention`
with flashgen's kernels forced, the forward family and configs chosen as for any call):

    PYTHONPATH=. python3 benchmarks/bwd_kinds.py [--out DIR] [--budget S] [--grid anchors|probe]
        [--configs BM,BN,W,S ...] [--rep MS]

1. Correctness (bf16, real tensor cores): dQ/dK/dV of both kinds ("split": the deterministic
   two-kernel backward; "onepass": one pass with fp32 dQ atomics; its TMA build with element
   atomics and with TMA reduce-add) against float64 autograd, on ragged GQA shapes, causal
   both ways, head dims 64 and 128; bound 3x PyTorch's own bf16 error plus 8e-3 of the
   gradient's size (as tests/kernels/test_backward.py). Bit equality: the split kind twice
   under torch.use_deterministic_algorithms(True) must give identical bits; how often onepass
   differs is reported.
2. Speed (bf16): backward alone for each kind and config (flashgen's own forward output), and
   forward+backward: flashgen forward (plain Triton, fixed config per head dim/causal) + each
   backward, cuDNN and FA2 (SDPA backends) forward+backward; median of
   triton.testing.do_bench (L2 flushed). TFLOP/s: forward 4*B*Hq*N^2*D, backward 2.5x that,
   halved when causal.

Kernels are compiled first in a pool of worker processes (on-disk Triton cache), so the main
process only times. Results go to <out>/bwd_kinds.json, rewritten after every shape; shapes
stop once --budget seconds have passed. Exit status 1 if a correctness check failed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import harness, scripts  # noqa: E402
from flashgen.bench.scripts import GRIDS  # noqa: E402  (B, Hq, Hkv, N, D) grids, as the other GPU scripts

# Forward configs (plain Triton forward), the best of earlier runs (benchmarks/gpu_check_bwd.py).
FWD_CFG = {(128, False): (128, 64, 4, 2), (128, True): (64, 64, 4, 3)}
FWD_CFG.update({(64, False): (128, 64, 8, 3), (64, True): (64, 64, 4, 3)})
# Split-kind configs: the H200 defaults table's winners (flashgen/hardware/tiles.py).
SPLIT_CFG = {(64, False): (64, 64, 4, 3), (64, True): (64, 64, 4, 2)}
SPLIT_CFG.update({(128, False): (128, 128, 8, 2), (128, True): (64, 64, 4, 2)})
# One-pass configs per head dim (the best of the first run, benchmarks/RESULTS.md, and neighbours)
ONEPASS_CFGS = {
    64: [(64, 64, 4, 2), (64, 128, 8, 2), (64, 64, 4, 3)],
    128: [(64, 128, 8, 2), (128, 64, 8, 2), (64, 128, 8, 3)],
}
DQTMA_CFGS = {64: [(64, 64, 4, 2)], 128: [(64, 128, 8, 2)]}
# variant name -> (kind, tma build, dQ by TMA reduce). "split_rec": the split kind on the
# shipped records' config for the shape's spec and bucket (tuning_db/, what a call gets).
VARIANTS = {
    "split": ("split", None, False),
    "split_rec": ("split", None, False),
    "onepass": ("onepass", None, False),
    "onepass_ptr": ("onepass", False, False),
    "onepass_dqtma": ("onepass", True, True),
}


def _device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the interpreter (smoke runs)


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _inputs(b, hq, hkv, sq, sk, d, seed=0):
    return scripts.inputs(b, hq, hkv, sq, sk, d, device=_device(), seed=seed, draw="cpu")


def _backward(variant, do, q, k, v, out, lse, causal, cfg):
    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward

    kind, tma, dq_tma = VARIANTS[variant]
    os.environ["FLASHGEN_BWD_DQ_TMA"] = "1" if dq_tma else "0"
    scale = 1.0 / math.sqrt(q.shape[-1])
    config, dq_config = TileConfig(*cfg), None
    if variant == "split_rec":  # as a call with this record runs it: the dQ kernel's own config
        from flashgen.core.spec import KernelSpec
        from flashgen.kernels.bwd import dq_config_for

        spec = KernelSpec(q.shape[-1], causal, "bfloat16", "bwd")
        dq_config = dq_config_for(spec, config)
    return backward(
        do, q, k, v, out, lse, causal=causal, scale=scale, config=config,
        tma=tma, deterministic=(kind == "split"), kind=kind, dq_config=dq_config,
    )  # fmt: skip


def record_config(d, causal, n):
    """The shipped H200 record's config for the bf16 backward of (d, causal) at length n, or
    the SPLIT_CFG table's when there is none."""
    from flashgen.core.spec import KernelSpec, shape_bucket
    from flashgen.db.shipped import shipped_records

    spec = KernelSpec(d, causal, "bfloat16", "bwd")
    for rec in shipped_records():
        if rec.spec == spec and rec.bucket == shape_bucket(n, n) and "H200" in rec.env.gpu_name:
            c = rec.config
            return (c.block_m, c.block_n, c.num_warps, c.num_stages)
    return SPLIT_CFG[(d, causal)]


def _product(q, k, v, do, causal):
    """Forward and backward through the public op, flashgen's kernels forced (FLASHGEN_IMPL):
    the forward family and both configs as a user's call picks them."""
    from flashgen import attention

    os.environ["FLASHGEN_IMPL"] = "flashgen"
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    attention(*leaves, causal=causal).backward(do)


def _forward(q, k, v, causal):
    from flashgen.core.config import TileConfig
    from flashgen.kernels.fwd import forward

    cfg = TileConfig(*FWD_CFG[(q.shape[-1], causal)])
    return forward(q, k, v, causal=causal, scale=None, config=cfg)


def check(case):
    """One correctness case in a worker: errors against float64 and the verdict."""
    from flashgen.bench.checks import grad_check

    variant, (b, hq, hkv, sq, sk, d), causal, cfg = case
    q, k, v, do = _inputs(b, hq, hkv, sq, sk, d, seed=1)
    try:
        out, lse = _forward(q, k, v, causal)
        got = _backward(variant, do, q, k, v, out, lse, causal, cfg)
        _sync()
    except Exception as exc:
        return dict(case=repr(case), ok=False, error=f"{type(exc).__name__}: {exc}"[:400])
    ok, errs = grad_check(got, q, k, v, do, causal=causal)
    return dict(case=repr(case), ok=ok, errors=errs)


def warm(job):
    """Compile one (variant, spec, config) in a worker by running it once on a small shape with
    the same integer specialisation as the timed shapes (lengths and heads as given); the
    "product" variant at the timed length (its configs depend on the length bucket)."""
    variant, hq, hkv, d, causal, cfg = job
    try:
        if variant == "product":
            q, k, v, do = _inputs(1, hq, hkv, cfg, cfg, d)
            _product(q, k, v, do, causal)
            _sync()
            return None
        q, k, v, do = _inputs(1, hq, hkv, 1024, 1024, d)
        out, lse = _forward(q, k, v, causal)
        _backward(variant, do, q, k, v, out, lse, causal, cfg)
        _sync()
        return None
    except Exception as exc:
        return scripts.error_text(exc)


def determinism():
    """Bits of two runs per kind, bf16 GQA causal 2x8/2x1000x128."""
    import torch

    q, k, v, do = _inputs(2, 8, 2, 1000, 1000, 128, seed=3)
    out, lse = _forward(q, k, v, True)
    report = {}
    for variant, cfg in (("split", SPLIT_CFG[(128, True)]), ("onepass", ONEPASS_CFGS[128][0])):
        runs = [_backward(variant, do, q, k, v, out, lse, True, cfg) for _ in range(3)]
        same = [all(torch.equal(a, b) for a, b in zip(runs[0], r, strict=True)) for r in runs[1:]]
        report[variant] = same
    torch.use_deterministic_algorithms(True)
    try:
        from flashgen.core.config import TileConfig
        from flashgen.kernels.bwd import backward

        scale = 128**-0.5
        cfg = TileConfig(*SPLIT_CFG[(128, True)])
        runs = [
            backward(do, q, k, v, out, lse, causal=True, scale=scale, config=cfg) for _ in range(3)
        ]
        same = [all(torch.equal(a, b) for a, b in zip(runs[0], r, strict=True)) for r in runs[1:]]
        report["use_deterministic_algorithms"] = same
    finally:
        torch.use_deterministic_algorithms(False)
    return report


def time_shape(shape, causal, configs, rep):
    import torch

    b, hq, hkv, n, d = shape
    q, k, v, do = _inputs(b, hq, hkv, n, n, d, seed=2)
    out, lse = _forward(q, k, v, causal)
    row = dict(shape=list(shape), causal=causal, bwd={}, fwdbwd={})
    bench = scripts.timer("cuda", rep, warmup_ms=5)
    fwd_ms = bench(lambda: _forward(q, k, v, causal))
    row["flashgen_fwd_ms"] = fwd_ms
    flops = harness.attention_flops(b, hq, n, n, d, causal, "bwd")
    for variant, cfg in configs:
        if variant == "product":
            continue
        name = f"{variant}{tuple(cfg)}"
        ms, err = scripts.attempt(
            bench,
            lambda variant=variant, cfg=cfg: _backward(variant, do, q, k, v, out, lse, causal, cfg),
        )
        if err is not None:
            row["bwd"][name] = err.split(":")[0]
            continue
        row["bwd"][name] = dict(ms=round(ms, 4), tflops=scripts.tflops(flops, ms))
    sdpa = scripts.sdpa_baselines(q, k, v, causal=causal, time_fn=bench, do=do)
    for label, impl in (("cudnn", "sdpa_cudnn"), ("fa2", "sdpa_flash")):
        ms = sdpa[impl]
        row["fwdbwd"][label] = ms[:200] if isinstance(ms, str) else round(ms, 4)
    for name, value in row["bwd"].items():
        if isinstance(value, dict):
            row["fwdbwd"]["flashgen " + name] = round(fwd_ms + value["ms"], 4)
    if any(variant == "product" for variant, _ in configs):
        ms, err = scripts.attempt(bench, lambda: _product(q, k, v, do, causal))
        row["fwdbwd"]["flashgen product"] = err[:200] if err else round(ms, 4)
    cudnn = row["fwdbwd"].get("cudnn")
    if isinstance(cudnn, float):
        row["vs_cudnn"] = {
            key: round(cudnn / ms, 3) for key, ms in row["fwdbwd"].items() if isinstance(ms, float)
        }
    torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    parser = scripts.parser(__doc__, out=os.environ.get("OUT", "."), budget=50.0)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="probe")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--variants", default="split,onepass,onepass_dqtma")
    parser.add_argument("--configs", nargs="*", help="onepass configs BM,BN,W,S (all head dims)")
    parser.add_argument("--rep", type=int, default=40, help="do_bench rep (ms)")
    parser.add_argument("--no-check", action="store_true", help="skip correctness")
    parser.add_argument("--no-determinism", action="store_true",
                        help="skip the bit-equality reruns (they compile the one-pass kernels)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=12)
    args = parser.parse_args(argv)
    start = time.time()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bwd_kinds.json")
    given = [tuple(int(x) for x in c.split(",")) for c in args.configs or []]
    variants = args.variants.split(",")
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    shapes = GRIDS[args.grid]

    def timed(d, causal, n):
        """(variant, config) pairs timed for head dim d and length n ("product": the length)."""
        out = []
        for variant in variants:
            if variant == "split":
                out.append((variant, SPLIT_CFG[(d, causal)]))
            elif variant == "split_rec":
                out.append((variant, record_config(d, causal, n)))
            elif variant == "product":
                out.append((variant, n))
            elif variant == "onepass_dqtma":
                out += [(variant, cfg) for cfg in given or DQTMA_CFGS[d]]
            else:
                out += [(variant, cfg) for cfg in given or ONEPASS_CFGS[d]]
        return out

    result = scripts.result_doc(rows=[])
    checks = []
    if not args.no_check:
        for variant in ("split", "onepass", "onepass_ptr", "onepass_dqtma"):
            if variant.split("_")[0] not in {v.split("_")[0] for v in variants}:
                continue
            for causal in (False, True):
                for d in (64, 128):
                    checks.append((variant, (2, 8, 2, 333, 301, d), causal, (64, 64, 4, 2)))
        if "onepass" in variants:
            checks.append(("onepass", (1, 4, 4, 501, 501, 64), True, (128, 128, 8, 2)))
        if "split_rec" in variants:  # every record config on a ragged GQA shape
            recs = {(d, c, record_config(d, c, n)) for _, _, _, n, d in shapes for c in causals}
            checks += [("split_rec", (2, 8, 2, 333, 301, d), c, cfg) for d, c, cfg in sorted(recs)]
    heads = sorted({(s[1], s[2], s[4], s[3]) for s in shapes})
    jobs = []
    for hq, hkv, d, n in heads:
        for causal in causals:
            for variant, cfg in timed(d, causal, n):
                jobs.append((variant, hq, hkv, d, causal, cfg))
    jobs = list(dict.fromkeys(jobs))  # a config shared by lengths compiles once
    result["warm_errors"], result["checks"] = scripts.warm_and_check(
        args.workers, warm, jobs, check, checks
    )
    failed = sum(not c["ok"] for c in result["checks"])
    print(f"[{time.time() - start:.0f}s] checks: {len(checks) - failed}/{len(checks)} ok")
    for c in result["checks"]:
        print("  ", "ok " if c["ok"] else "BAD", c["case"], c.get("errors") or c.get("error"))
    for j, e in result["warm_errors"].items():
        print("   compile/launch failed:", j, e)
    if not args.no_determinism:
        result["determinism"] = determinism()
        print("determinism (bit-identical reruns):", result["determinism"])
    scripts.save_json(path, result)
    for shape in shapes:
        for causal in causals:
            if time.time() - start > args.budget:
                print("budget reached: remaining shapes skipped")
                break
            row = time_shape(shape, causal, timed(shape[4], causal, shape[3]), args.rep)
            result["rows"].append(row)
            print(f"[{time.time() - start:.0f}s] {shape} causal={causal} fwd+bwd vs cuDNN:",
                  json.dumps(row.get("vs_cudnn")), "bwd:", json.dumps(row["bwd"]))  # fmt: skip
            scripts.save_json(path, result)
    summary = summarise(result["rows"])
    result["summary"] = summary
    scripts.save_json(path, result)
    print("summary:", json.dumps(summary))
    return 1 if failed else 0


def summarise(rows):
    """Per variant family (split, onepass, onepass_dqtma, fa2): the best config's fwd+bwd
    ratio to cuDNN per row, their geometric mean and minimum."""
    best: dict[str, list[float]] = {}
    for row in rows:
        per: dict[str, float] = {}
        for key, ratio in row.get("vs_cudnn", {}).items():
            family = key.removeprefix("flashgen ").split("(")[0]
            per[family] = max(per.get(family, 0.0), ratio)
        for family, ratio in per.items():
            best.setdefault(family, []).append(ratio)
    return {
        family: dict(
            geomean=round(math.exp(sum(math.log(r) for r in rs) / len(rs)), 3),
            min=min(rs),
            n=len(rs),
        )
        for family, rs in best.items()
    }


if __name__ == "__main__":
    sys.exit(main())
