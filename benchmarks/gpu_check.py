"""Forward kernel on a real GPU: correctness (incl. real bf16) and speed against SDPA.

Run on the GPU machine from the checkout (needs only torch, triton, jinja2):

    PYTHONPATH=. python3 benchmarks/gpu_check.py [OUT_PATH]

1. Correctness: the case grid of tests/kernels/test_forward.py (every dtype incl. real bf16, head dims
   16..256 incl. 80/96/192, ragged Sq/Sk both ways, causal both, GQA, strided inputs) against the
   float64 reference; half types within 2x SDPA's own error plus a floor, float32 within 1e-4.
   Each case runs through both kernels (`attn_fwd`, pointer loads; `attn_fwd_tma`, TMA
   descriptors, the default on Hopper), plus head dim 20, whose rows TMA cannot move (auto mode
   must fall back). Every config of the timing grid is also checked on a ragged GQA shape.
2. Speed: the anchor shapes (`ANCHORS` below), bf16, causal both, over a grid of
   configs (BLOCK_M 64/128, BLOCK_N 32/64/128, warps 4/8, stages 2/3/4, plus BLOCK_M 256 with
   8 warps; OutOfResources skipped),
   with triton.testing.do_bench(return_mode="median"), next to SDPA's cuDNN and FLASH backends;
   the best config is re-timed (median of 3) and also timed through the pointer kernel ("ptr").
   TFLOP/s = 4*B*H*N^2*D, halved when causal.

Compilation dominates the run time, so a pool of worker processes compiles (and checks) every
kernel first; the main process then times them from Triton's on-disk cache. Configs are passed
explicitly, so flashgen.runtime.dispatch (and its database) is never imported.

On the H200 the whole run took 148 s (run 1 in benchmarks/RESULTS.md).

Writes JSON to OUT_PATH (a .json file, or a directory: <dir>/gpu_check_fwd.json); default: the
directory in $OUT, else the current directory. Exit status 1 when any correctness check failed.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import scripts  # noqa: E402

ANCHORS = list(scripts.MHA_ANCHORS)  # (B, H, N, D): 1k/4k/16k at head dims 128 (H16) and 64 (H32)
GRID = [
    (bm, bn, w, s) for bm in (64, 128) for bn in (32, 64, 128) for w in (4, 8) for s in (2, 3, 4)
]
# Beyond the anchors' grid: 128 query rows per warpgroup with two warpgroups (ptxas on the CPU:
# 255 registers, 88 bytes of spill at head dim 128, the same as the (128, 64, 4, 2) that won
# the anchors' grid), halving K/V traffic per query row.
GRID += [(256, bn, 8, s) for bn in (32, 64) for s in (2, 3)]
DTYPES = ("float32", "float16", "bfloat16")


def correctness_cases() -> list[dict]:
    """The test_forward grid with real bf16, through both kernels (pointer loads and TMA)."""
    base = []
    for d in (16, 64, 80, 96, 128, 192, 256):
        for dt in DTYPES:
            for causal in (False, True):
                base.append(dict(b=1, hq=2, hkv=2, sq=37, sk=45, d=d, dtype=dt, causal=causal))
    shapes = [(1, 1), (1, 37), (37, 1), (37, 37), (37, 127), (127, 37), (127, 127), (501, 501)]
    shapes += [(263, 501), (501, 263), (1000, 1000)]
    for sq, sk in shapes:
        for dt in ("float16", "bfloat16"):
            for causal in (False, True):
                base.append(dict(b=2, hq=2, hkv=2, sq=sq, sk=sk, d=64, dtype=dt, causal=causal))
    for hkv in (1, 2):
        for dt in DTYPES:
            for causal in (False, True):
                base.append(dict(b=2, hq=4, hkv=hkv, sq=37, sk=53, d=64, dtype=dt, causal=causal))
    for dt in DTYPES:
        for causal in (False, True):
            base.append(
                dict(b=2, hq=4, hkv=2, sq=37, sk=53, d=64, dtype=dt, causal=causal, strided=True)
            )
    for cfg in [(16, 16, 4, 1), (16, 64, 4, 2), (64, 16, 4, 2), (128, 32, 4, 2), (128, 128, 8, 2)]:
        for causal in (False, True):
            for sq, sk in ((130, 77), (45, 140)):
                base.append(
                    dict(
                        b=1,
                        hq=2,
                        hkv=1,
                        sq=sq,
                        sk=sk,
                        d=64,
                        dtype="float32",
                        causal=causal,
                        cfg=cfg,
                    )
                )
    cases = []
    for case in base:
        # fp32 at head dim >= 192 compiles slowly (IEEE fp32 dots): one path is enough there.
        slow = case["dtype"] == "float32" and case["d"] >= 192
        for path in ("auto",) if slow else ("ptr", "tma"):
            cases.append(dict(case, path=path))
    # Rows of 40 bytes cannot be moved by TMA: auto mode must fall back to pointer loads.
    for causal in (False, True):
        cases.append(
            dict(b=1, hq=2, hkv=1, sq=77, sk=99, d=20, dtype="float16", causal=causal, path="auto")
        )
    return cases


def default_cfg(d: int) -> tuple[int, int, int, int]:
    return (64, 32, 4, 2) if d > 128 else (64, 64, 4, 2)


def run_check(case: dict) -> dict:
    """One case against the float64 reference; returns the case with errors and a verdict."""
    import torch

    from flashgen.core.config import TileConfig
    from flashgen.kernels.fwd import forward
    from flashgen.kernels.reference import attention_ref, max_abs_err, sdpa_same_dtype, tolerance

    os.environ.pop("FLASHGEN_FWD_TMA", None)
    if case.get("path", "auto") != "auto":
        os.environ["FLASHGEN_FWD_TMA"] = "1" if case["path"] == "tma" else "0"
    dtype = getattr(torch, case["dtype"])
    b, hq, hkv, sq, sk, d = (case[k] for k in ("b", "hq", "hkv", "sq", "sk", "d"))
    if case.get("strided"):
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(*shape):
            return torch.randn(*shape, generator=gen, device="cuda").to(dtype)

        q = rand(b, sq, hq, d).transpose(1, 2)
        k = rand(b, hkv, sk, d + 32)[..., :d]
        v = rand(b, sk, hkv, d).transpose(1, 2)
    else:
        q, k, v = scripts.inputs(b, hq, hkv, sq, sk, d, dtype=case["dtype"], count=3)
    cfg = TileConfig(*case.get("cfg", default_cfg(d)))
    result = dict(case, cfg=list(cfg.as_dict().values()))
    try:
        out, lse = forward(q, k, v, causal=case["causal"], scale=None, config=cfg)
        torch.cuda.synchronize()
    except Exception as exc:  # a compile or launch failure is a failed check
        return dict(result, ok=False, error=scripts.error_text(exc, 500))
    ref_out, ref_lse = attention_ref(q, k, v, causal=case["causal"])
    sdpa_err = None
    if dtype != torch.float32:
        sdpa_err = max_abs_err(sdpa_same_dtype(q, k, v, causal=case["causal"]), ref_out)
    rtol, atol = tolerance(dtype, sdpa_err)
    err = (out.double() - ref_out).abs()
    excess = (err - (atol + rtol * ref_out.abs())).max().item()
    lse_err = max_abs_err(lse, ref_lse)
    lse_bound = 1e-4 + 1e-5 * ref_lse.abs().max().item()
    ok = bool(torch.isfinite(out).all()) and excess <= 0 and lse_err <= lse_bound
    return dict(result, ok=ok, max_err=err.max().item(), sdpa_err=sdpa_err, lse_err=lse_err)


def warm_config(task: tuple) -> dict:
    """Compile (spec, config) with the anchors' specialisation, then check it on a ragged shape."""
    import torch

    from flashgen.core.config import TileConfig
    from flashgen.kernels.fwd import forward

    d, causal, cfg = task
    config = TileConfig(*cfg)
    os.environ.pop("FLASHGEN_FWD_TMA", None)
    # Same int specialisation as the anchors: H=16 (divisible by 16), GROUP=1, N % 16 == 0.
    q = torch.randn(1, 16, 256, d, device="cuda", dtype=torch.bfloat16)
    try:
        forward(q, q, q, causal=causal, scale=None, config=config)
        torch.cuda.synchronize()
    except Exception as exc:
        kind = "oor" if "OutOfResources" in type(exc).__name__ else "error"
        return dict(d=d, causal=causal, cfg=cfg, status=kind, error=str(exc)[:300])
    check = run_check(
        dict(b=2, hq=4, hkv=2, sq=200, sk=333, d=d, dtype="bfloat16", causal=causal, cfg=cfg)
    )
    return dict(d=d, causal=causal, cfg=cfg, status="ok" if check["ok"] else "wrong", check=check)


def _worker_init() -> None:
    import torch

    torch.cuda.init()


def bench_ms(fn, rep: int = 40) -> float:
    return scripts.timer("cuda", rep, warmup_ms=10)(fn)


def time_shape(shape, causal: bool, usable: list) -> dict:
    """All usable configs for one anchor shape, then the best re-timed next to SDPA."""
    import torch

    from flashgen.bench import harness
    from flashgen.core.config import TileConfig
    from flashgen.kernels.fwd import forward, use_tma

    b, h, n, d = shape
    flops = harness.attention_flops(b, h, n, n, d, causal)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def tflops(ms):
        return scripts.tflops(flops, ms)

    rows = []
    for cfg in usable:
        config = TileConfig(*cfg)
        try:
            ms = bench_ms(lambda c=config: forward(q, k, v, causal=causal, scale=None, config=c))
            rows.append(dict(cfg=cfg, ms=ms, tflops=tflops(ms)))
        except Exception as exc:
            rows.append(dict(cfg=cfg, error=scripts.error_text(exc)))
    timed = [r for r in rows if "ms" in r]
    best = min(timed, key=lambda r: r["ms"]) if timed else None
    result = dict(shape=dict(B=b, H=h, N=n, D=d), causal=causal, configs=rows)
    if best:
        c = TileConfig(*best["cfg"])
        reps = [
            bench_ms(lambda: forward(q, k, v, causal=causal, scale=None, config=c), 100)
            for _ in range(3)
        ]
        result["best"] = dict(cfg=best["cfg"], ms=statistics.median(reps))
        result["best"]["tflops"] = tflops(result["best"]["ms"])
        result["best"]["tma"] = use_tma(q, k, v)
        # The same config through the pointer kernel, for the TMA-vs-pointer comparison.
        os.environ["FLASHGEN_FWD_TMA"] = "0"
        try:
            reps = [
                bench_ms(lambda: forward(q, k, v, causal=causal, scale=None, config=c), 100)
                for _ in range(3)
            ]
            ms = statistics.median(reps)
            result["best_pointer_kernel"] = dict(cfg=best["cfg"], ms=ms, tflops=tflops(ms))
        except Exception as exc:
            result["best_pointer_kernel"] = dict(error=scripts.error_text(exc))
        finally:
            os.environ.pop("FLASHGEN_FWD_TMA", None)
    sdpa_timer = scripts.timer("cuda", 100, repeats=3, warmup_ms=10)
    for name, ms in scripts.sdpa_baselines(q, k, v, causal=causal, time_fn=sdpa_timer).items():
        result[name] = scripts.entry(ms, flops)
    return result


HEADER = scripts.grid_header("config", f"{'ptr':>7}")


def format_row(r: dict) -> str:
    """One table line: TFLOP/s of our best config (and through the pointer kernel), cuDNN and
    FLASH, ours/cuDNN."""
    ptr = r.get("best_pointer_kernel", {}).get("tflops")
    return scripts.grid_line(r, "tflops", f"{ptr or '-':>7}")


def host_overhead_us(calls: int = 500) -> dict:
    """Per-call cost on a tiny input, where the launch path (not the kernel) dominates."""
    import torch
    import torch.nn.functional as F

    from flashgen.core.config import TileConfig
    from flashgen.kernels.fwd import forward

    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.bfloat16)
    config = TileConfig(64, 64, 4, 2)
    fns = {
        "flashgen": lambda: forward(q, q, q, causal=False, scale=None, config=config),
        "sdpa": lambda: F.scaled_dot_product_attention(q, q, q),
    }
    result = {}
    for name, fn in fns.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        result[name] = round((time.perf_counter() - start) / calls * 1e6, 1)
    return result


def parse_args(argv: list[str]):
    ap = scripts.parser(__doc__)
    ap.add_argument("out_path", nargs="?", default=None, metavar="OUT_PATH",
                    help="a .json file or a directory (default: $OUT, else .)")  # fmt: skip
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv[1:])
    os.environ.pop("TRITON_INTERPRET", None)
    path = scripts.out_path(args.out_path, "gpu_check_fwd.json")
    t0 = time.time()
    meta = scripts.run_meta("cuda")
    report: dict = dict(device=meta["gpu"], torch=meta["torch"], triton=meta["triton"], meta=meta)
    cases = correctness_cases()
    warm_tasks = [(d, causal, cfg) for d in (64, 128) for causal in (False, True) for cfg in GRID]
    with scripts.pool(initializer=_worker_init) as workers:
        warm = list(workers.map(warm_config, warm_tasks))
        checks = list(workers.map(run_check, cases))
    report["compile_and_check_s"] = round(time.time() - t0, 1)
    failed, wrong, usable = scripts.config_verdict(
        report, checks, warm, ("d", "dtype", "causal", "sq", "sk", "hkv", "cfg", "path"),
        lambda c: c.get("error") or f"max_err {c['max_err']:.3e} sdpa {c['sdpa_err']}",
    )  # fmt: skip
    timing = []
    print(HEADER)
    for shape in ANCHORS:
        for causal in (False, True):
            r = time_shape(shape, causal, usable.get((shape[3], causal), []))
            timing.append(r)
            print(format_row(r), flush=True)
    report["timing"] = timing
    report["host_overhead_us"] = host_overhead_us()
    print(f"per-call time on a tiny input (us): {report['host_overhead_us']}")
    report["total_s"] = round(time.time() - t0, 1)
    scripts.save_json(path, report)
    print(f"wrote {path} ({report['total_s']} s)")
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
