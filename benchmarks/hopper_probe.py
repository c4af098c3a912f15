"""H200 probe of the Hopper Gluon forward (templates/attn_fwd_hopper.py.jinja), kernel alone.

`check`: out/LSE against a float64 reference for every config in CFGS (odd lengths, causal both
ways, GQA, fp16/bf16, [B, S, H, D] strided inputs, Sq != Sk both ways). `regs`: registers,
spills and shared bytes of each compiled config. `bench`: TFLOP/s of the configs side by side
with SDPA's cuDNN and FLASH backends over the 12-shape grid plus GQA 32/8 (medians of 3 rounds
of do_bench medians). JSON under $OUT. Usage: python3 benchmarks/hopper_probe.py check|regs|bench
(RESULTS.md, "Hopper Gluon forward"). Words after the command: `quick` (bench: three hd128
shapes, one round), `shipped` (only the configs flashgen.kernels.hopper ships); `table
BENCH_JSON` prints a bench's rows as RESULTS.md's table.
"""

import json
import math
import os
import pathlib
import sys

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))
from flashgen.bench import harness, scripts  # noqa: E402
from flashgen.core.hopper_config import HopperConfig  # noqa: E402
from flashgen.core.spec import KernelSpec, dtype_name  # noqa: E402
from flashgen.hardware.hopper_tiles import programs_per_sm  # noqa: E402
from flashgen.kernels.codegen import load_family  # noqa: E402
from flashgen.kernels.hopper import sched_counter  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/out"))
QUICK = False  # set from the command line (main)
LOG2E = 1.4426950408889634


def module(head_dim, causal, dtype):
    return load_family(KernelSpec(head_dim, causal, dtype_name(dtype), "fwd"), "hopper")


def prepare(q, k, v, causal, cfg, scale=None):
    bm, bn, nb, w, maxnreg, nc, pp = cfg[:7]
    persistent = len(cfg) > 7 and cfg[7]
    dynamic = len(cfg) > 8 and cfg[8]
    B, H, SQ, D = q.shape
    HK, SK = k.shape[1], k.shape[2]
    out = torch.empty((B, H, SQ, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, SQ), dtype=torch.float32, device=q.device)
    gdt = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}[q.dtype]

    def desc(t, rows):
        lay = gl.NVMMASharedLayout.get_default_for([1, 1, rows, D], gdt)
        return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, D], lay)

    descs = (desc(q, bm // nc), desc(k, bn), desc(v, bn), desc(out, bm // nc))
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    mod = module(D, causal, q.dtype)
    grid = (triton.cdiv(SQ, bm) * B * H,)
    if persistent:
        hc = HopperConfig(bm, bn, nb, nc, w, maxnreg, pp, True, bool(dynamic))
        per_sm = programs_per_sm(hc, D)
        grid = (min(grid[0], per_sm * torch.cuda.get_device_properties(0).multi_processor_count),)

    meta = dict(BLOCK_M=bm, BLOCK_N=bn, NUM_BUF=nb, NUM_CONSUMERS=nc, PINGPONG=pp)
    meta.update(DYNAMIC=bool(dynamic), LATE_WAIT=False, TAIL_SPLIT=1, num_warps=w, maxnreg=maxnreg)
    sizes = (B, H, H // HK, SQ, SK, scale * LOG2E)

    def launch():  # the work-item counter of the stream current at launch
        # (lse stands in for the split chunks' buffers: TAIL_SPLIT 1 never reads them)
        return mod.attn_fwd_ws[grid](*descs, lse, sched_counter(q.device), lse, lse, *sizes, **meta)

    return launch, out, lse


def reference(q, k, v, causal):
    B, H, SQ, D = q.shape
    g = H // k.shape[1]
    kk = k.double().repeat_interleave(g, 1)
    vv = v.double().repeat_interleave(g, 1)
    s = (q.double() @ kk.transpose(-1, -2)) / math.sqrt(D)
    if causal:
        i = torch.arange(SQ, device=q.device)[:, None]
        j = torch.arange(k.shape[2], device=q.device)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
    return torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)


# (BLOCK_M, BLOCK_N, NUM_BUF, num_warps, maxnreg, NUM_CONSUMERS, PINGPONG[, persistent[,
# dynamic]])
CFGS = {
    64: [
        (128, 128, 3, 4, 168, 2, False),
        (128, 128, 3, 4, 168, 2, True),
        (256, 64, 3, 4, 168, 2, True),
        (64, 128, 3, 4, 128, 1, False),
    ],
    128: [
        (128, 128, 2, 4, 168, 2, False),
        (128, 128, 2, 4, 168, 2, True),
        (128, 64, 3, 4, 168, 2, True),
        (64, 64, 2, 4, 128, 1, False),
        (128, 128, 2, 8, 168, 1, False),
    ],
}


if os.environ.get("PROBE_CFGS"):  # {"128": [[...config tuple...], ...], ...}: replaces CFGS
    CFGS = {
        int(d): [tuple(c) for c in cs] for d, cs in json.loads(os.environ["PROBE_CFGS"]).items()
    }


def check():
    torch.manual_seed(0)
    cases = []
    for D in (64, 128):
        for dtype in (torch.bfloat16, torch.float16):
            for causal in (False, True):
                cases.append((2, 4, 2, 1000, 1000, D, dtype, causal, False))
        cases.append((1, 8, 2, 777, 777, D, torch.bfloat16, True, False))  # GQA 4, odd
        cases.append((1, 4, 4, 129, 300, D, torch.bfloat16, False, False))  # cross, ragged
        cases.append((1, 4, 4, 300, 129, D, torch.bfloat16, True, False))  # causal SQ > SK
        cases.append((2, 4, 4, 513, 513, D, torch.bfloat16, True, True))  # [B,S,H,D] strided
        cases.append((1, 2, 2, 1, 1, D, torch.float16, True, False))  # single row
        # Many work items per program (persistent grid: 4 x 16 x 8 = 512 items > 132 SMs).
        cases.append((4, 16, 4, 1000, 1000, D, torch.bfloat16, True, False))
        cases.append((3, 16, 16, 777, 801, D, torch.bfloat16, False, False))
    rows = []
    for B, H, HK, SQ, SK, D, dtype, causal, strided in cases:
        if strided:
            q = torch.randn(B, SQ, H, D, device="cuda", dtype=dtype).transpose(1, 2)
            k = torch.randn(B, SK, HK, D, device="cuda", dtype=dtype).transpose(1, 2)
            v = torch.randn(B, SK, HK, D, device="cuda", dtype=dtype).transpose(1, 2)
        else:
            q = torch.randn(B, H, SQ, D, device="cuda", dtype=dtype)
            k = torch.randn(B, HK, SK, D, device="cuda", dtype=dtype)
            v = torch.randn(B, HK, SK, D, device="cuda", dtype=dtype)
        ro, rl = reference(q, k, v, causal)
        # SDPA math in the same dtype: the error a same-precision kernel is expected to have.
        for cfg in CFGS[D] if dtype == torch.bfloat16 else CFGS[D][1:2]:
            launch, out, lse = prepare(q, k, v, causal, cfg)
            launch()
            torch.cuda.synchronize()
            err = (out.double() - ro).abs().max().item()
            lerr = (lse.double() - rl).abs().max().item()
            row = dict(
                case=[B, H, HK, SQ, SK, D, str(dtype), causal, strided],
                cfg=cfg,
                out_err=err,
                lse_err=lerr,
                ok=bool(err < 2e-2 and lerr < 1e-3 and torch.isfinite(out).all().item()),
            )
            rows.append(row)
            print(row, flush=True)
    (OUT / "check.json").write_text(json.dumps(rows, indent=1))
    print("ALL OK" if all(r["ok"] for r in rows) else "FAILURES", flush=True)


def bench_shapes():
    """(B, H, HK, N, D, causal): the 12-shape grid (batch x heads fill the GPU) and GQA 32/8 at
    head dim 128; PROBE_SHAPES="D:N:causal:gqa,..." (e.g. 128:1024:1:0) keeps a subset."""
    shapes = []
    for D, H in ((128, 16), (64, 32)):
        for B, N in ((16, 1024), (4, 4096), (1, 16384)):
            for causal in (False, True):
                shapes.append((B, H, H, N, D, causal))
    for B, N in ((8, 1024), (4, 4096), (1, 16384)):
        for causal in (False, True):
            shapes.append((B, 32, 8, N, 128, causal))
    keep = os.environ.get("PROBE_SHAPES")
    if keep:
        want = {tuple(int(x) for x in item.split(":")) for item in keep.split(",")}
        shapes = [s for s in shapes if (s[4], s[3], int(s[5]), int(s[2] != s[1])) in want]
    return shapes


def _warm_one(job):
    """Compile (by launching once) one config for the shapes of its head dim: a worker process."""
    cfg, shapes = job
    for B, H, HK, N, D, causal in shapes:
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, HK, N, D, device="cuda", dtype=torch.bfloat16)
        launch, _, _ = prepare(q, k, k, causal, cfg)
        launch()
    torch.cuda.synchronize()
    return cfg


def _warm_library(job):
    """Compile the library path's kernels (flashgen.kernels.fwd.forward under each family the
    bench times) for some shapes: a worker process."""
    from flashgen.kernels.fwd import forward

    family, shapes = job
    for B, H, HK, N, D, causal in shapes:
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, HK, N, D, device="cuda", dtype=torch.bfloat16)
        _forward_as(family, forward, q, k, k, causal)
    torch.cuda.synchronize()
    return family, len(shapes)


def warm():
    """Fill Triton's on-disk cache for every (config, shape) of `bench` with parallel worker
    processes: compiling is most of a cold bench's time, and the device has 16 cores."""
    import concurrent.futures as cf
    import multiprocessing as mp

    jobs = []
    for D, cfgs in CFGS.items():
        shapes = [s for s in bench_shapes() if s[4] == D]
        for cfg in cfgs:
            if (
                len(cfg) > 7
                and cfg[7]
                and not (len(cfg) > 8 and cfg[8])
                and (cfg[:7] + (False,) in cfgs)
            ):
                continue  # the persistent launch compiles the same kernel
            for causal in (False, True):
                jobs.append((cfg, [s for s in shapes if s[5] == causal]))
    lib_jobs = [(family, [s]) for s in bench_shapes() for family in _families()]
    workers = int(os.environ.get("PROBE_WORKERS", "8"))
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        done = [pool.submit(_warm_one, j) for j in jobs]
        done += [pool.submit(_warm_library, j) for j in lib_jobs]
        for f in cf.as_completed(done):
            print("warm", f.result(), flush=True)


def _families():
    """FLASHGEN_FWD_FAMILY values of the library columns ("" = the library's own choice):
    PROBE_FAMILIES (comma-separated, "auto" for the library's choice), default hopper,auto;
    PROBE_PORTABLE=1 adds the portable family."""
    names = os.environ.get("PROBE_FAMILIES", "hopper,auto").split(",")
    names = ["" if n == "auto" else n for n in names if n]
    return names + (["portable"] if os.environ.get("PROBE_PORTABLE") else [])


def _forward_as(family, forward, q, k, v, causal):
    """forward() with FLASHGEN_FWD_FAMILY=family ("" = unset: the library's own choice)."""
    saved = os.environ.pop("FLASHGEN_FWD_FAMILY", None)
    if family:
        os.environ["FLASHGEN_FWD_FAMILY"] = family
    try:
        return forward(q, k, v, causal=causal, scale=None)
    finally:
        os.environ.pop("FLASHGEN_FWD_FAMILY", None)
        if saved is not None:
            os.environ["FLASHGEN_FWD_FAMILY"] = saved


def bench():
    from flashgen.kernels.fwd import forward

    shapes = bench_shapes()
    rounds = int(os.environ.get("PROBE_ROUNDS", "3"))
    if QUICK:  # a first look: three hd128 shapes, one round
        shapes = [(16, 16, 16, 1024, 128, True), (4, 16, 16, 4096, 128, True),
                  (1, 16, 16, 16384, 128, False)]  # fmt: skip
        rounds = 1
    rows = []
    if os.environ.get("PROBE_SPIN_S"):
        spin(float(os.environ["PROBE_SPIN_S"]))
    for B, H, HK, N, D, causal in shapes:
        q, k, v = scripts.inputs(B, H, HK, N, N, D, count=3)
        flops = harness.attention_flops(B, H, N, N, D, causal)
        timer = scripts.timer("cuda", 100, warmup_ms=25)
        fns = {}
        for name, impl in (("cudnn", "sdpa_cudnn"), ("fa2", "sdpa_flash")):
            fns[name] = lambda impl=impl, qkv=(q, k, v), causal=causal: harness.sdpa(
                impl, *qkv, causal=causal
            )
        outs = {}
        for cfg in CFGS[D]:
            launch, out, lse = prepare(q, k, v, causal, cfg)
            fns["ws" + str(cfg)] = launch
            outs["ws" + str(cfg)] = out
        # The integrated path, flashgen.kernels.fwd.forward (host descriptor building, the
        # config lookup and the family choice included): the Hopper family forced, the family
        # the library chooses by itself ("auto"), and with PROBE_PORTABLE=1 the portable one.
        for family in _families():
            fns[f"flashgen_fwd_{family or 'auto'}"] = (
                lambda qkv=(q, k, v), causal=causal, family=family: _forward_as(
                    family, forward, *qkv, causal=causal
                )
            )
        res = {}
        names = list(fns)
        for rnd in range(rounds):
            # A different column goes first in each shape and round: a column always timed
            # last (after several heavy kernels) or first would carry the GPU's clock and
            # power state of that position into every shape.
            shift = (len(rows) + rnd) % len(names)
            for name in names[shift:] + names[:shift]:
                ms, err = scripts.attempt(timer, fns[name])
                res.setdefault(name, []).append(harness.tflops(flops, ms))
                if err:
                    print(name, "FAIL", err)
        med = {
            n: sorted(x for x in v_ if x is not None)[len(v_) // 2]
            if all(x is not None for x in v_)
            else None
            for n, v_ in res.items()
        }
        # Each probed config's and library column's output at the timed shape against cuDNN's
        # (both bf16): a config that skipped or repeated work items would show here.
        want = harness.sdpa("sdpa_cudnn", q, k, v, causal=causal).float()
        diff = {}
        for name, out in outs.items():
            fns[name]()
            diff[name] = (out.float() - want).abs().max().item()
        for name in fns:
            if name.startswith("flashgen_fwd_"):  # forward() returns (out, lse)
                diff[name] = (fns[name]()[0].float() - want).abs().max().item()
        ws = {n: t for n, t in med.items() if n.startswith("ws") and t}
        best = max(ws, key=ws.get) if ws else None
        row = dict(
            shape=[B, H, HK, N, D, causal],
            tflops=med,
            runs=res,
            diff_cudnn=diff,
            spread=spread(fns) if os.environ.get("PROBE_SPREAD") else None,
            best=best,
            ratio_cudnn=(ws[best] / med["cudnn"]) if best and med.get("cudnn") else None,
        )
        rows.append(row)
        print(
            json.dumps(
                dict(
                    shape=row["shape"],
                    med={k_: round(x, 1) if x else x for k_, x in med.items()},
                    ratio=row["ratio_cudnn"],
                    diff=max(diff.values(), default=None),
                )
            ),
            flush=True,
        )
        (OUT / "bench.json").write_text(json.dumps(rows, indent=1))
    summary(rows)


def spin(seconds: float) -> None:
    """Keep the GPU busy with bf16 matmuls for `seconds` (PROBE_SPIN_S) before the first
    timing: in B3 the first shapes read cuDNN itself 20% apart between rounds while the clocks
    settled after the compile processes."""
    import time

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def spread(fns: dict) -> dict:
    """Per column: do_bench's 10/50/90% quantiles (ms, one reading each) and the wall time per
    call of 50 back-to-back calls without an L2 flush (ms): whether a column's readings are
    bimodal, and whether its host side (descriptors, config lookup, launch) can keep up."""
    import time

    import triton.testing

    out = {}
    for name, f in fns.items():
        times = sorted(triton.testing.do_bench(f, warmup=25, rep=100, return_mode="all"))
        f()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            f()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 50 * 1e3
        q = [times[int(x * (len(times) - 1))] for x in (0.1, 0.5, 0.9)]
        out[name] = dict(q10_50_90=q, wall_per_call=wall)
    print(json.dumps({n: [round(x, 4) for x in v["q10_50_90"]] + [round(v["wall_per_call"], 4)]
                      for n, v in out.items()}), flush=True)  # fmt: skip
    return out


def summary(rows):
    """Geomean and min over the shapes of (best probed config, each library column) / cuDNN."""
    columns = {"best probed": lambda r: r["tflops"].get(r["best"]) if r["best"] else None}
    for name in rows[0]["tflops"] if rows else ():
        if name.startswith("flashgen_fwd_"):
            columns[name] = lambda r, name=name: r["tflops"].get(name)
    for name, get in columns.items():
        rs = [get(r) / r["tflops"]["cudnn"] for r in rows if get(r) and r["tflops"].get("cudnn")]
        if rs:
            geo = math.exp(sum(map(math.log, rs)) / len(rs))
            print(f"{name}: geomean vs cudnn {geo:.3f} min {min(rs):.3f} over {len(rs)} shapes",
                  flush=True)  # fmt: skip


def regs():
    info = []
    for D in (64, 128):
        for causal in (False, True):
            for cfg in CFGS[D]:
                q = torch.randn(1, 1, 256, D, device="cuda", dtype=torch.bfloat16)
                launch, out, lse = prepare(q, q, q, causal, cfg)
                kk = launch()
                torch.cuda.synchronize()
                if kk is not None:
                    kk._init_handles()
                    info.append(
                        dict(
                            D=D,
                            causal=causal,
                            cfg=cfg,
                            n_regs=kk.n_regs,
                            n_spills=kk.n_spills,
                            shared=kk.metadata.shared,
                        )
                    )
    print(info, flush=True)
    (OUT / "regs.json").write_text(json.dumps(info, indent=1))


def table(path):
    """`table BENCH_JSON`: a bench's rows as the markdown table RESULTS.md records (TFLOP/s),
    then the summary. Columns: the library path (Hopper forced; the library's own choice),
    the best probed config, cuDNN, FA2, and the library path over cuDNN."""
    rows = json.loads(pathlib.Path(path).read_text())
    print("| shape | causal | library (auto) | library (Hopper) | best probed | cuDNN | FA2 "
          "| auto / cuDNN |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for r in rows:
        b, h, hk, n, d, causal = r["shape"]
        t = r["tflops"]
        heads = f"H{h}" if h == hk else f"H{h}/{hk}"

        def f(x):
            return f"{x:.1f}" if x else "-"

        auto, cudnn = t.get("flashgen_fwd_auto"), t.get("cudnn")
        print(f"| B{b} {heads} {n // 1024}k d{d} | {'yes' if causal else 'no'} | {f(auto)} "
              f"| {f(t.get('flashgen_fwd_hopper'))} | {f(t.get(r['best']) if r['best'] else None)} "
              f"| {f(cudnn)} | {f(t.get('fa2'))} | {auto / cudnn:.3f} |" if auto and cudnn else
              f"| B{b} {heads} {n // 1024}k d{d} | {causal} | (missing) |")  # fmt: skip
    summary(rows)


def parse_args(argv=None):
    ap = scripts.parser(__doc__)
    ap.add_argument("cmd", choices=("check", "regs", "bench", "warm", "table"))
    ap.add_argument("words", nargs="*", help="quick, shipped; for table: the bench JSON")
    args = ap.parse_args(argv)
    if args.cmd == "table" and len(args.words) != 1:
        ap.error("table takes one bench JSON")
    return args


def shipped_cfgs() -> dict:
    """flashgen.kernels.hopper.CONFIGS as CFGS rows, each plain and persistent."""
    from flashgen.kernels.hopper import CONFIGS

    return {
        d: [(c.block_m, c.block_n, c.num_buf, c.num_warps, c.maxnreg, c.consumers, c.pingpong, p)
            for p in (False, True)]
        for d, c in CONFIGS.items()
    }  # fmt: skip


def main(argv=None) -> int:
    global CFGS, QUICK
    args = parse_args(argv)
    if args.cmd == "table":
        table(args.words[0])
        return 0
    QUICK = "quick" in args.words
    OUT.mkdir(parents=True, exist_ok=True)
    if "shipped" in args.words:  # only the configs that ship
        CFGS = shipped_cfgs()
    {"check": check, "bench": bench, "regs": regs, "warm": warm}[args.cmd]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
