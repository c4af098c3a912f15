"""Forward+backward through `flashgen.attention` against cuDNN on the issue-14 grid, per backward
mode: "fast" (the default call), "det" (under torch.use_deterministic_algorithms(True)),
FLASHGEN_BWD_OVERLAP forced: "seq" (0: dQ and dK/dV kernels one after the other), "overlap" (1:
dQ on a side stream, launched first), "overlap2" (2: dQ on a side stream, launched second), and
FLASHGEN_BWD_KIND forced: "hopper" (the Gluon backward, its shipped config) and "split" (dK/dV
and dQ kernels), to see which kind a shape should default to (`hopper_bwd.AUTO`), and
"det_dkdv" ("det" with FLASHGEN_BWD_DKDV=hopper: the split kind's dK/dV kernel the Gluon
template's without dQ for every shape, to see where `hopper_bwd.DKDV_AUTO` should list it).

Run on the GPU machine from the checkout (the shipped records in tuning_db/ choose every config,
as for a user's call; flashgen's kernels forced with FLASHGEN_IMPL=flashgen):

    PYTHONPATH=. python3 benchmarks/bwd_grid.py [--out DIR] [--budget S] [--rep MS] [--rounds N]
        [--modes fast,det,...] [--shapes I,J,...] [--fa2] [--no-fwd]
    python3 benchmarks/bwd_grid.py --table DIR/bwd_grid.json     # the markdown table, no GPU

1. Correctness, in worker processes (which also compile every timed shape's kernels first):
   each mode's dQ/dK/dV on a ragged GQA shape (2 x 8/2 heads x 333 x 301), head dims 64/128,
   causal both, against float64 autograd (bound: 3x PyTorch's own bf16 error + 8e-3 of the
   gradient's size, as tests/kernels/test_backward.py); bit equality of two "det" runs and of
   "det" against every other mode that runs the split kind (disjoint outputs, no atomics):
   all of them unless "fast" runs another kind (FLASHGEN_BWD_KIND, `hopper_bwd.AUTO`);
   "det_dkdv" (another dK/dV kernel: other sums) against a second run of itself.
2. Speed, in the main process, per shape: cuDNN's and flashgen's forward alone (and with --fa2
   SDPA's FlashAttention-2 backend's, forward alone and forward+backward), then cuDNN and
   each flashgen mode forward+backward, the series run --rounds times (default 2), every
   other time in reverse order; per callable the mean of its do_bench medians (triton.testing,
   L2 flushed) over two rounds, their median over more (single readings of one kernel moved
   by 2-3% between rounds on the H200). Each mode's
   gradients on the timed shape are compared with cuDNN's (largest difference relative to the
   gradient's size; a float64 reference does not fit at these sizes).

Results go to <out>/bwd_grid.json, rewritten after every shape; shapes stop once --budget
seconds have passed. Exit status 1 if a correctness check failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import harness, scripts  # noqa: E402
from flashgen.bench.harness import ANCHOR_SHAPES  # noqa: E402

# (B, Hq, Hkv, N, D): the 12-shape grid (with causal both ways) and GQA 32/8 at head dim 128
GRID = list(ANCHOR_SHAPES)
MODES = ("fast", "det", "seq", "overlap", "overlap2", "hopper", "split", "det_dkdv")
# the variables each mode sets (every one of them unset in the modes that do not name it)
ENV = {
    "seq": {"FLASHGEN_BWD_OVERLAP": "0"},
    "overlap": {"FLASHGEN_BWD_OVERLAP": "1"},
    "overlap2": {"FLASHGEN_BWD_OVERLAP": "2"},
    "hopper": {"FLASHGEN_BWD_KIND": "hopper"},
    "split": {"FLASHGEN_BWD_KIND": "split"},
    "det_dkdv": {"FLASHGEN_BWD_DKDV": "hopper"},
}
# deterministic modes (under torch.use_deterministic_algorithms(True))
DETERMINISTIC = ("det", "det_dkdv")
# deterministic modes whose kernels differ from "det"'s: each checked against a second run of
# itself, not against "det"
OWN_KERNELS = ("det_dkdv",)
ENV_NAMES = sorted({name for env in ENV.values() for name in env})
# modes whose calls may run a kind with fp32 atomics or reduce-adds (not bit-reproducible)
ATOMIC = ("fast", "hopper")


def _inputs(b, hq, hkv, sq, sk, d, seed=0):
    return scripts.inputs(b, hq, hkv, sq, sk, d, seed=seed)  # drawn on the GPU: 1 GB at 16k


def _grads(mode, q, k, v, do, causal, grads=True):
    """Forward+backward through the public op in `mode`; the gradients (or None)."""
    import torch

    from flashgen import attention

    for name in ENV_NAMES:
        os.environ.pop(name, None)
    os.environ.update(ENV.get(mode, {}))
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    torch.use_deterministic_algorithms(mode in DETERMINISTIC)
    try:
        attention(*leaves, causal=causal).backward(do)
    finally:
        torch.use_deterministic_algorithms(False)
    return [t.grad for t in leaves] if grads else None


def _cudnn(q, k, v, do, causal, backward=True, impl="sdpa_cudnn"):
    """SDPA's cuDNN backend (or `impl`, another one) forward, and backward unless not asked."""
    leaves = [t.detach().requires_grad_(backward) for t in (q, k, v)]
    out = harness.sdpa(impl, *leaves, causal=causal)
    if not backward:
        return out
    out.backward(do)
    return [t.grad for t in leaves]


def _flashgen_fwd(q, k, v, causal):
    from flashgen import attention

    return attention(q, k, v, causal=causal)


def check(case):
    """One correctness case in a worker: every mode against float64, and bit equality."""
    import torch

    from flashgen.kernels.reference import attention_ref, sdpa_same_dtype

    d, causal = case
    os.environ["FLASHGEN_IMPL"] = "flashgen"
    q, k, v, do = _inputs(2, 8, 2, 333, 301, d, seed=1)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    attention_ref(*leaves, causal=causal)[0].backward(do.double())
    half = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sdpa_same_dtype(*half, causal=causal).backward(do)
    result = dict(case=f"d{d} causal={causal}", ok=True, errors={})
    got = {}
    for mode in (*MODES, *DETERMINISTIC):
        try:
            grads = _grads(mode, q, k, v, do, causal)
            torch.cuda.synchronize()
        except Exception as exc:
            result.update(ok=False, error=f"{mode}: {type(exc).__name__}: {exc}"[:400])
            return result
        if mode in got:  # a deterministic mode's second run
            result[f"{mode}_bits_equal"] = all(map(torch.equal, got[mode], grads))
            continue
        got[mode] = grads
        for i, name in enumerate(("dq", "dk", "dv")):
            ref = leaves[i].grad
            err = (grads[i].double() - ref).abs().max().item()
            bound = 3.0 * (half[i].grad.double() - ref).abs().max().item()
            bound += 8e-3 * max(1.0, ref.abs().max().item())
            result["errors"][f"{mode} {name}"] = [round(err, 5), round(bound, 5)]
            ok = bool(torch.isfinite(grads[i]).all()) and err <= bound
            result["ok"] = result["ok"] and ok
    # "fast" may run a kind with fp32 atomics or reduce-adds (hopper_bwd.AUTO), "hopper" does:
    # only the split modes must match "det" bit for bit
    exact = [m for m in MODES if m not in ATOMIC and m not in OWN_KERNELS]
    result["modes_bits_equal_det"] = all(all(map(torch.equal, got["det"], got[m])) for m in exact)
    repeatable = all(result[f"{m}_bits_equal"] for m in DETERMINISTIC)
    result["ok"] = result["ok"] and repeatable and result["modes_bits_equal_det"]
    return result


def warm(job):
    """Compile one timed shape's kernels in a worker: one call per mode at batch 1, the timed
    heads and length (configs depend on the length bucket, specialisation on the heads)."""
    hq, hkv, n, d, causal = job
    os.environ["FLASHGEN_IMPL"] = "flashgen"
    try:
        import torch

        q, k, v, do = _inputs(1, hq, hkv, n, n, d)
        for mode in MODES:
            _grads(mode, q, k, v, do, causal, grads=False)
        _flashgen_fwd(q, k, v, causal)
        torch.cuda.synchronize()
        return None
    except Exception as exc:
        return scripts.error_text(exc)


def _rel_diff(got, ref) -> float:
    """Largest |got - ref| over the largest |ref|, across dQ, dK, dV."""
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        worst = max(worst, ((g.float() - r.float()).abs().max() / r.float().abs().max()).item())
    return round(worst, 5)


def time_shape(shape, causal, rep, modes=MODES, fwd=True, fa2=False, rounds=2):
    import torch

    b, hq, hkv, n, d = shape
    q, k, v, do = _inputs(b, hq, hkv, n, n, d, seed=2)
    fwd_flops = harness.attention_flops(b, hq, n, n, d, causal)
    bench = scripts.timer("cuda", rep, warmup_ms=5)
    row = dict(shape=list(shape), causal=causal, ms={}, vs_cudnn={}, rel_diff_vs_cudnn={})
    ref = _cudnn(q, k, v, do, causal)
    for mode in modes:
        row["rel_diff_vs_cudnn"][mode] = _rel_diff(_grads(mode, q, k, v, do, causal), ref)
    del ref
    fns = {"cudnn": lambda: _cudnn(q, k, v, do, causal)}
    if fwd:  # forwards alone: the backward's share by difference
        fns["cudnn fwd"] = lambda: _cudnn(q, k, v, do, causal, backward=False)
        fns["flashgen fwd"] = lambda: _flashgen_fwd(q, k, v, causal)
    if fa2:  # SDPA's FlashAttention-2 backend beside them (the issues' second baseline)
        fns["fa2"] = lambda: _cudnn(q, k, v, do, causal, impl="sdpa_flash")
        if fwd:
            fns["fa2 fwd"] = lambda: _cudnn(q, k, v, do, causal, False, impl="sdpa_flash")
    for mode in modes:
        fns[mode] = lambda mode=mode: _grads(mode, q, k, v, do, causal, grads=False)
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(max(1, rounds)):
        for name in list(fns)[:: -1 if i % 2 else 1]:
            runs[name].append(bench(fns[name]))
    for name, values in runs.items():
        row["ms"][name] = [round(x, 4) for x in values]
    med = {name: statistics.median(values) for name, values in runs.items()}
    for mode in modes:
        row["vs_cudnn"][mode] = round(med["cudnn"] / med[mode], 3)
    if fa2:
        row["vs_fa2"] = {mode: round(med["fa2"] / med[mode], 3) for mode in modes}
        if fwd:
            row["vs_fa2"]["fwd"] = round(med["fa2 fwd"] / med["flashgen fwd"], 3)
    if fwd:
        row["vs_cudnn"]["fwd"] = round(med["cudnn fwd"] / med["flashgen fwd"], 3)
        bwd = {name: med[name] - med["cudnn fwd" if name == "cudnn" else "flashgen fwd"]
               for name in ("cudnn", *modes)}  # fmt: skip
        row["bwd_ms_by_difference"] = {name: round(ms, 4) for name, ms in bwd.items()}
        row["bwd_vs_cudnn_by_difference"] = {m: round(bwd["cudnn"] / bwd[m], 3) for m in modes}
    row["fwdbwd_tflops"] = {
        name: scripts.tflops(3.5 * fwd_flops, med[name]) for name in ("cudnn", *modes)
    }
    torch.cuda.empty_cache()
    return row


def summarise(rows, against="vs_cudnn"):
    """Per mode (and the forward alone): geomean and min of the ratios to cuDNN (or, with
    against="vs_fa2", to SDPA's FlashAttention-2 backend where the run timed it)."""
    out = {}
    for mode in (*MODES, "fwd"):
        ratios = [row[against][mode] for row in rows if mode in row.get(against, {})]
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            out[mode] = dict(geomean=round(geo, 3), min=min(ratios), n=len(ratios))
    return out


def table(path) -> str:
    """A finished run's rows as the markdown table of benchmarks/RESULTS.md."""
    with open(path) as fh:
        result = json.load(fh)
    lines = [
        "| shape (bf16) | causal | cuDNN fwd+bwd ms | fast | det | seq (no overlap) | "
        "overlap (dQ first) | overlap2 (dK/dV first) | hopper kind | split kind | "
        "det, Hopper dK/dV | fwd alone | bwd alone (by difference), fast |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        b, hq, hkv, n, d = row["shape"]
        r = row["vs_cudnn"]
        cudnn = statistics.median(row["ms"]["cudnn"])
        cells = [f"B{b} H{hq}/{hkv} N{n} D{d}", "yes" if row["causal"] else "no", f"{cudnn:.3f}"]
        cells += [f"{r[m]:.3f}x" if m in r else "-" for m in (*MODES, "fwd")]
        by_diff = row.get("bwd_vs_cudnn_by_difference", {}).get("fast")
        cells.append("-" if by_diff is None else f"{by_diff:.3f}x")
        lines.append("| " + " | ".join(cells) + " |")
    summary = summarise(result["rows"])
    lines.append("")
    for mode, s in summary.items():
        lines.append(f"- {mode}: geomean {s['geomean']}x, min {s['min']}x over {s['n']} shapes")
    for mode, s in summarise(result["rows"], "vs_fa2").items():
        lines.append(f"- {mode} vs FA2 (SDPA's flash backend): geomean {s['geomean']}x, "
                     f"min {s['min']}x over {s['n']} shapes")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = scripts.parser(__doc__, out=os.environ.get("OUT", "."), budget=90.0)
    parser.add_argument("--rep", type=int, default=60, help="do_bench rep (ms)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="timing rounds per shape, alternating order (median of each)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--modes", default=",".join(MODES), help="modes timed (all checked)")
    parser.add_argument("--fwd", action=argparse.BooleanOptionalAction, default=True,
                        help="also time both forwards alone")  # fmt: skip
    parser.add_argument("--fa2", action="store_true",
                        help="also time SDPA's FlashAttention-2 backend (vs_fa2 ratios)")  # fmt: skip
    parser.add_argument("--shapes", help="GRID indices to time, in this order (default: all)")
    parser.add_argument("--table", help="print the table of this bwd_grid.json and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    start = time.time()
    os.environ["FLASHGEN_IMPL"] = "flashgen"
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bwd_grid.json")
    result = scripts.result_doc(rows=[])
    cases = [(d, c) for d in (64, 128) for c in (False, True)]
    shapes = [GRID[int(i)] for i in args.shapes.split(",")] if args.shapes else GRID
    jobs = [(hq, hkv, n, d, c) for _, hq, hkv, n, d in shapes for c in (False, True)]
    result["warm_errors"], result["checks"] = scripts.warm_and_check(
        args.workers, warm, jobs, check, cases
    )
    failed = sum(not c["ok"] for c in result["checks"])
    print(f"[{time.time() - start:.0f}s] checks: {len(cases) - failed}/{len(cases)} ok")
    for c in result["checks"]:
        print("  ", json.dumps(c))
    for j, e in result["warm_errors"].items():
        print("   compile/launch failed:", j, e)
    for shape in shapes:
        for causal in (False, True):
            if time.time() - start > args.budget:
                print("budget reached: remaining shapes skipped")
                break
            modes = tuple(args.modes.split(","))
            row = time_shape(shape, causal, args.rep, modes, args.fwd, args.fa2, args.rounds)
            result["rows"].append(row)
            print(f"[{time.time() - start:.0f}s] {shape} causal={causal}", json.dumps(row))
            scripts.save_json(path, result)
    result["summary"] = summarise(result["rows"])
    scripts.save_json(path, result)
    print("summary:", json.dumps(result["summary"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
