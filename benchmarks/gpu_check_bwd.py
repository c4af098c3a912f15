"""Backward kernels on a real GPU: correctness (incl. real bf16) and fwd+bwd speed against SDPA.

Run on the GPU machine from the checkout (needs only torch, triton, jinja2):

    PYTHONPATH=. python3 benchmarks/gpu_check_bwd.py [OUT_PATH]

1. Correctness: dQ/dK/dV against float64 autograd through flashgen.kernels.reference for a grid like
   tests/kernels/test_backward.py (every dtype incl. real bf16, head dims 16..256 incl. 80/96/192,
   ragged Sq/Sk both ways, causal both, GQA, strided q/k/v and dO, several block shapes).
   float32 within 2e-5 of the gradient's size; half types within 3x PyTorch's own same-dtype
   error (SDPA backward vs float64) plus a floor. Plus determinism: two backward runs of a GQA
   causal bf16 shape must be bit-identical. Every config of the timing grid is also checked on
   a ragged GQA shape (lengths 208/336) before it is timed.
2. Speed: the anchor shapes (`ANCHORS` below), bf16, causal both: forward+backward
   (our forward at a fixed config, our backward over a grid of configs: BLOCK_M and BLOCK_N in
   32/64/128, warps 4/8, stages 1/2/3; OutOfResources skipped), median of
   triton.testing.do_bench, next to SDPA's cuDNN and FLASH backends (forward + backward).
   TFLOP/s = 3.5 x 4*B*H*N^2*D, halved when causal. The backward alone is reported too, for the
   default build (TMA on Hopper for bf16) and, at the best config, for the pointer build.

A pool of worker processes compiles and checks every kernel first; the main process then times
them from Triton's on-disk cache. Configs are passed explicitly, so flashgen.runtime.dispatch (and its
database) is never imported.

Writes JSON to OUT_PATH (a .json file, or a directory: <dir>/gpu_check_bwd.json); default: the
directory in $OUT, else the current directory. The file is rewritten after each timed shape, and
shapes are skipped once BUDGET_S (510 s) has passed, so a run stays inside a 600 s limit. Exit status 1 when any correctness check failed.
`--smoke` runs a tiny version in Triton's CPU interpreter (to check this script without a GPU).
`--timing-only` skips the correctness grid (the per-config checks before timing still run).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import scripts  # noqa: E402

ANCHORS = list(scripts.MHA_ANCHORS)  # (B, H, N, D): 1k/4k/16k at head dims 128 (H16) and 64 (H32)
GRID = [
    (bm, bn, w, s)
    for bm in (32, 64, 128)
    for bn in (32, 64, 128)
    for w in (4, 8)
    for s in ((1, 2) if max(bm, bn) == 128 else (1, 2, 3))
    if (bm, bn) != (32, 32)
]
BUDGET_S = 510  # the device tool stops a command at 600 s: leave room to write the JSON
# Forward configs for the fwd+bwd timing: the best plain-Triton forward configs of the anchors.
FWD_CFG = {(128, False): (128, 64, 4, 2), (128, True): (64, 64, 4, 3)}
FWD_CFG.update({(64, False): (128, 64, 8, 3), (64, True): (64, 64, 4, 3)})
DTYPES = ("float32", "float16", "bfloat16")
HALF_FLOOR = {"float16": 5e-4, "bfloat16": 8e-3}
SMOKE = {"on": False}


def device() -> str:
    return "cpu" if SMOKE["on"] else "cuda"


def default_cfg(d: int, dtype: str) -> tuple[int, int, int, int]:
    if dtype == "float32":  # IEEE fp32 dots compile slowly and need small tiles
        return (32, 32, 4, 1) if d <= 128 else (16, 16, 4, 1)
    return (64, 64, 4, 2) if d <= 128 else (64, 32, 4, 1)


def correctness_cases() -> list[dict]:
    if SMOKE["on"]:
        return [
            dict(b=1, hq=2, hkv=1, sq=37, sk=45, d=80, dtype="float16", causal=True),
            dict(b=1, hq=2, hkv=2, sq=20, sk=37, d=64, dtype="float32", causal=False, strided=1),
        ]
    cases = []
    for d in (16, 64, 80, 96, 128, 192, 256):
        # float32 (IEEE dots) compiles slowly: only at the ends and one padded head dim
        for dt in DTYPES if d in (16, 80, 256) else DTYPES[1:]:
            for causal in (False, True):
                cases.append(dict(b=1, hq=2, hkv=1, sq=37, sk=45, d=d, dtype=dt, causal=causal))
    shapes = [(1, 1), (1, 37), (37, 1), (127, 37), (37, 127), (501, 501), (263, 501), (501, 263)]
    shapes.append((1000, 1000))
    for sq, sk in shapes:
        for dt in ("float16", "bfloat16"):
            for causal in (False, True):
                cases.append(dict(b=2, hq=4, hkv=2, sq=sq, sk=sk, d=64, dtype=dt, causal=causal))
    for dt in DTYPES:
        for causal in (False, True):
            cases.append(
                dict(b=2, hq=4, hkv=2, sq=37, sk=53, d=64, dtype=dt, causal=causal, strided=1)
            )
    # the pointer build where the TMA build is the default (16-bit dtypes on Hopper)
    for d in (16, 64, 80, 128, 192, 256):
        for causal in (False, True):
            cases.append(
                dict(
                    b=1, hq=2, hkv=1, sq=37, sk=45, d=d, dtype="bfloat16", causal=causal, tma=False
                )
            )
    for causal in (False, True):
        cases.append(
            dict(b=2, hq=4, hkv=2, sq=263, sk=501, d=64, dtype="float16", causal=causal, tma=False)
        )
    for cfg in [(16, 64, 4, 1), (64, 16, 4, 1), (32, 128, 4, 2), (128, 32, 8, 2), (128, 128, 8, 1)]:
        for causal in (False, True):
            for sq, sk in ((130, 77), (45, 140)):
                cases.append(
                    dict(b=1, hq=4, hkv=1, sq=sq, sk=sk, d=64, dtype="bfloat16", causal=causal,
                         cfg=cfg)
                )  # fmt: skip
    return cases


def make_inputs(case: dict, seed: int = 0):
    import torch

    b, hq, hkv, sq, sk, d = (case[k] for k in ("b", "hq", "hkv", "sq", "sk", "d"))
    if not case.get("strided"):
        return tuple(scripts.inputs(b, hq, hkv, sq, sk, d, dtype=case["dtype"], device=device(),
                                    seed=seed, draw="cpu"))  # fmt: skip
    dtype = getattr(torch, case["dtype"])
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device()).to(dtype)

    q = rand(b, sq, hq, d).transpose(1, 2)
    k = rand(b, hkv, sk, d + 32)[..., :d]
    v = rand(b, sk, hkv, d).transpose(1, 2)
    do = rand(b, sq, hq, d).transpose(1, 2)
    return q, k, v, do


def run_check(case: dict) -> dict:
    """One case: our forward then backward against float64 autograd; verdict and errors."""
    import torch

    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward
    from flashgen.kernels.fwd import forward
    from flashgen.kernels.reference import attention_ref, sdpa_same_dtype

    q, k, v, do = make_inputs(case)
    causal = case["causal"]
    cfg = TileConfig(*case.get("cfg", default_cfg(case["d"], case["dtype"])))
    fwd_cfg = TileConfig(*default_cfg(case["d"], case["dtype"]))
    result = dict(case, cfg=list(cfg.as_dict().values()))
    try:
        out, lse = forward(q, k, v, causal=causal, scale=None, config=fwd_cfg)
        got = backward(
            do,
            q,
            k,
            v,
            out,
            lse,
            causal=causal,
            scale=1.0 / math.sqrt(case["d"]),
            config=cfg,
            tma=case.get("tma"),
        )
        if device() == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # a compile or launch failure is a failed check
        return dict(result, ok=False, error=scripts.error_text(exc, 500))

    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_out, _ = attention_ref(*leaves, causal=causal)
    ref_out.backward(do.double())
    eager = None
    if q.dtype != torch.float32:
        half = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        sdpa_same_dtype(*half, causal=causal).backward(do)
        eager = [t.grad for t in half]
    ok, errs = True, {}
    for i, name in enumerate(("dq", "dk", "dv")):
        ref = leaves[i].grad
        err = (got[i].double() - ref).abs().max().item()
        size = max(1.0, ref.abs().max().item())
        if eager is None:
            bound = 2e-5 * size
            errs[name] = dict(err=err, bound=bound)
        else:
            eager_err = (eager[i].double() - ref).abs().max().item()
            bound = 3.0 * eager_err + HALF_FLOOR[case["dtype"]] * size
            errs[name] = dict(err=err, eager_err=eager_err, bound=bound)
        ok = ok and bool(torch.isfinite(got[i]).all()) and err <= bound
    return dict(result, ok=ok, errors=errs)


def determinism_check(tma: bool | None) -> dict:
    """Two backward runs of a GQA causal bf16 shape: identical bits expected."""
    import torch

    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward
    from flashgen.kernels.fwd import forward

    n = 64 if SMOKE["on"] else 1024
    case = dict(b=2, hq=8, hkv=2, sq=n, sk=n, d=128, dtype="bfloat16", causal=True)
    q, k, v, do = make_inputs(case, seed=1)
    cfg = TileConfig(*default_cfg(128, "bfloat16"))
    out, lse = forward(q, k, v, causal=True, scale=None, config=cfg)
    scale = 1.0 / math.sqrt(128)
    runs = [
        backward(do, q, k, v, out, lse, causal=True, scale=scale, config=cfg, tma=tma)
        for _ in range(2)
    ]
    same = all(torch.equal(a, b) for a, b in zip(runs[0], runs[1], strict=True))
    return dict(case, tma=tma, identical=same)


def warm_config(task: tuple) -> dict:
    """Compile (spec, config) with the anchors' specialisation, then check it on a ragged shape."""
    import torch

    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward
    from flashgen.kernels.fwd import forward

    d, causal, cfg = task
    config = TileConfig(*cfg)
    # Same int specialisation as the anchors: H=16 (divisible by 16), GROUP=1, N % 16 == 0.
    n = 64 if SMOKE["on"] else 256
    q = torch.randn(1, 16, n, d, device=device(), dtype=torch.bfloat16)
    try:
        out, lse = forward(
            q, q, q, causal=causal, scale=None, config=TileConfig(*FWD_CFG[d, causal])
        )
        backward(q, q, q, q, out, lse, causal=causal, scale=1.0 / math.sqrt(d), config=config)
        if device() == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        kind = "oor" if "OutOfResources" in type(exc).__name__ else "error"
        return dict(d=d, causal=causal, cfg=cfg, status=kind, error=str(exc)[:300])
    # Ragged against every block size, yet lengths and heads divisible by 16 like the anchors,
    # so the check reuses the kernels just compiled instead of compiling another specialisation.
    shape = dict(b=1, hq=32, hkv=16, sq=208, sk=336)
    if SMOKE["on"]:
        shape = dict(b=1, hq=2, hkv=1, sq=48, sk=80)
    check = run_check(dict(shape, d=d, dtype="bfloat16", causal=causal, cfg=cfg))
    return dict(d=d, causal=causal, cfg=cfg, status="ok" if check["ok"] else "wrong", check=check)


def _worker_init(smoke: bool) -> None:
    SMOKE["on"] = smoke
    if smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        return
    import torch

    torch.cuda.init()


def bench_ms(fn, rep: int = 30, grad_to_none=None) -> float:
    return scripts.timer(device(), rep, warmup_ms=5)(fn, grad_to_none=grad_to_none)


def time_shape(shape, causal: bool, usable: list) -> dict:
    """Every usable backward config for one anchor shape, then the best re-timed next to SDPA."""
    import torch

    from flashgen.bench import harness
    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward
    from flashgen.kernels.fwd import forward

    b, h, n, d = shape
    fwd_flops = harness.attention_flops(b, h, n, n, d, causal)
    q, k, v, do = (torch.randn(b, h, n, d, device=device(), dtype=torch.bfloat16) for _ in range(4))
    scale = 1.0 / math.sqrt(d)
    fwd_cfg = TileConfig(*FWD_CFG[d, causal])
    out, lse = forward(q, k, v, causal=causal, scale=None, config=fwd_cfg)

    def tflops(ms, factor=3.5):
        return scripts.tflops(factor * fwd_flops, ms)

    def fwd_bwd(config):
        o, m = forward(q, k, v, causal=causal, scale=None, config=fwd_cfg)
        backward(do, q, k, v, o, m, causal=causal, scale=scale, config=config)

    rows = []
    for cfg in usable:
        config = TileConfig(*cfg)
        try:
            ms = bench_ms(
                lambda c=config: backward(
                    do, q, k, v, out, lse, causal=causal, scale=scale, config=c
                )
            )
            rows.append(dict(cfg=cfg, bwd_ms=ms, bwd_tflops=tflops(ms, 2.5)))
        except Exception as exc:
            rows.append(dict(cfg=cfg, error=scripts.error_text(exc)))
    timed = [r for r in rows if "bwd_ms" in r]
    result = dict(shape=dict(B=b, H=h, N=n, D=d), causal=causal, fwd_cfg=list(FWD_CFG[d, causal]))
    result["configs"] = rows
    if timed:
        best = min(timed, key=lambda r: r["bwd_ms"])
        c = TileConfig(*best["cfg"])
        ms = statistics.median(bench_ms(lambda: fwd_bwd(c), 100) for _ in range(3))
        result["best"] = dict(cfg=best["cfg"], bwd_ms=best["bwd_ms"], fwd_bwd_ms=ms)
        result["best"]["fwd_bwd_tflops"] = tflops(ms)
        # the same config with the pointer build (the default build is TMA on Hopper for bf16)
        try:
            ms = statistics.median(
                bench_ms(
                    lambda: backward(
                        do, q, k, v, out, lse, causal=causal, scale=scale, config=c, tma=False
                    ),
                    100,
                )
                for _ in range(3)
            )
            result["best_pointer_build"] = dict(bwd_ms=ms, bwd_tflops=tflops(ms, 2.5))
        except Exception as exc:
            result["best_pointer_build"] = dict(error=scripts.error_text(exc))

    def sdpa_timer(fn, grad_to_none=None):
        return statistics.median(bench_ms(fn, 100, grad_to_none) for _ in range(3))

    sdpa = scripts.sdpa_baselines(q, k, v, causal=causal, time_fn=sdpa_timer, do=do)
    for name, ms in sdpa.items():
        result[name] = scripts.entry(ms, 3.5 * fwd_flops, "fwd_bwd_")
    return result


HEADER = scripts.grid_header(
    "bwd config", tail="   (fwd+bwd TFLOP/s)  bwd-only default/pointer build"
)


def format_row(r: dict) -> str:
    """One table line: fwd+bwd TFLOP/s of our best backward config, cuDNN and FLASH, ours/cuDNN,
    then the backward alone (ms) of the default and the pointer build."""
    bwd = r.get("best", {}).get("bwd_ms")
    ptr = r.get("best_pointer_build", {}).get("bwd_ms")
    both = f"{bwd:.3f}/{ptr:.3f} ms" if bwd and ptr else "-"
    return scripts.grid_line(r, "fwd_bwd_tflops", tail=f"   {both}")


def write_report(path: str, report: dict, t0: float) -> None:
    report["total_s"] = round(time.time() - t0, 1)
    scripts.save_json(path, report)


def parse_args(argv: list[str]):
    ap = scripts.parser(__doc__)
    ap.add_argument("out_path", nargs="?", default=None, metavar="OUT_PATH",
                    help="a .json file or a directory (default: $OUT, else .)")  # fmt: skip
    ap.add_argument("--smoke", action="store_true", help="a tiny run in the CPU interpreter")
    ap.add_argument("--timing-only", action="store_true", help="skip the correctness grid")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    opts = parse_args(argv[1:])
    SMOKE["on"] = opts.smoke
    skip_checks = opts.timing_only
    if SMOKE["on"]:
        os.environ["TRITON_INTERPRET"] = "1"
        ANCHORS[:] = [(1, 16, 64, 64)]
        GRID[:] = [(32, 32, 4, 1), (16, 64, 4, 1)]
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    path = scripts.out_path(opts.out_path, "gpu_check_bwd.json")
    t0 = time.time()
    meta = scripts.run_meta(device())
    report: dict = dict(
        device="cpu-interpreter" if SMOKE["on"] else meta["gpu"],
        torch=meta["torch"],
        triton=meta["triton"],
        meta=meta,
    )
    cases = [] if skip_checks else correctness_cases()
    dims = sorted({shape[3] for shape in ANCHORS})
    warm_tasks = [(d, causal, cfg) for d in dims for causal in (False, True) for cfg in GRID]
    workers = 1 if SMOKE["on"] else None
    with scripts.pool(workers, initializer=_worker_init, initargs=(SMOKE["on"],)) as pool:
        checks = list(pool.map(run_check, cases))
        warm = list(pool.map(warm_config, warm_tasks))
    report["compile_and_check_s"] = round(time.time() - t0, 1)
    report["determinism"] = [determinism_check(None), determinism_check(False)]
    print("determinism: identical bits =", [d["identical"] for d in report["determinism"]])
    failed, wrong, usable = scripts.config_verdict(
        report, checks, warm, ("d", "dtype", "causal", "sq", "sk", "hkv", "cfg", "tma"),
        lambda c: c.get("error") or c.get("errors"),
    )  # fmt: skip
    write_report(path, report, t0)
    timing: list = []
    report["timing"] = timing
    print(HEADER)
    for shape in ANCHORS:
        for causal in (False, True):
            if time.time() - t0 > BUDGET_S:
                timing.append(dict(shape=shape, causal=causal, skipped="time budget"))
                print(f"skipped {shape} causal={causal}: time budget ({BUDGET_S} s)")
                continue
            r = time_shape(shape, causal, usable.get((shape[3], causal), []))
            timing.append(r)
            print(format_row(r), flush=True)
            write_report(path, report, t0)  # partial results survive a kill
    write_report(path, report, t0)
    print(f"wrote {path} ({report['total_s']} s)")
    bad = failed or wrong or not all(d["identical"] for d in report["determinism"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
