"""flashgen.attention (the op, choosing its implementation) against each SDPA backend, on the grid.

    python benchmarks/vendor_grid.py --out grid.json      # needs CUDA; FLASHGEN_DB_URL = the
                                                          # database `flashgen tune` wrote

The bar of issue 15: after `flashgen tune`, every shape of the benchmark grid (head dims 64/128,
1k-16k tokens, causal and not, GQA 32/8) runs through `flashgen.attention` at >= 1.0x the fastest
SDPA backend, forward and forward+backward. For each shape it times, in one process and
interleaved over `--rounds` rounds, every other one in reverse order (median of the rounds;
each reading a do_bench median with L2 flushed): the op as users call it (`impl=None`: records
and defaults choose), flashgen's own kernels (`impl="flashgen"`), and every SDPA backend that
accepts the shape, each output and gradient checked against float64 first
(`flashgen.bench.harness`, shared with `flashgen bench`; exit status 1 when a check fails).
It also reports which implementation the op chose and from where
(`flashgen.runtime.dispatch.impl_choice`), and beside the ratio of medians the paired one
(`paired_ratio`: the median of each round's ratio, the two readings taken moments apart), which
cancels the GPU's drift between rounds: rows that run the same cuDNN kernels on both sides read
0.99-1.09x by medians in one run (benchmarks/RESULTS.md, session 32 B3, B5). `--control` times
cuDNN twice in every round (`sdpa_cudnn_again`, the harness's A/A control) and reports the two
rows' ratio per shape and its range over the grid: how far apart identical kernels read in this
run, against which a ratio of the op to cuDNN below 1.0 can be read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from flashgen.bench.harness import AGAIN, ANCHOR_SHAPES

# (batch, q heads, kv heads, seq, head dim): the anchors' shapes (x causal) and GQA 32/8.
GRID = list(ANCHOR_SHAPES)
SDPA = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")
IMPLS = ("op", "flashgen", *SDPA)
# cuDNN timed a second time in every round (--control; the harness's A/A name for it)
CONTROL = "sdpa_cudnn" + AGAIN


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rep", type=int, default=40, help="do_bench rep in ms (warmup: a quarter)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument(
        "--shapes", default=None, metavar="B,HQ,HKV,N,D[,CAUSAL][;...]",
        help="shapes to time instead of the grid (e.g. '4,16,4,2048,64' for the Llama block's); "
        "a sixth field 0/1 times that shape with that causal setting only",
    )  # fmt: skip
    ap.add_argument(
        "--impls", default=",".join(IMPLS),
        help="what to time: 'op' (flashgen.attention, its own choice), 'flashgen' (its kernels "
        "forced: they compile first), SDPA backends; the bar needs op and the SDPA backends",
    )  # fmt: skip
    ap.add_argument(
        "--causal", default="both", choices=["both", "true", "false"],
        help="which causal settings of each shape to time",
    )  # fmt: skip
    ap.add_argument(
        "--control", action="store_true",
        help="also time cuDNN a second time in every round (an A/A control: the spread of "
        "identical kernels in this run); needs sdpa_cudnn in --impls",
    )  # fmt: skip
    ap.add_argument("--out", default=None, help="JSON, rewritten after every row")
    args = ap.parse_args(argv)
    causals = {"both": (False, True), "true": (True,), "false": (False,)}[args.causal]
    impls = tuple(args.impls.split(","))
    if "op" not in impls or not set(impls) & set(SDPA) or not set(impls) <= set(IMPLS):
        ap.error(f"--impls: 'op' and at least one SDPA backend, from {', '.join(IMPLS)}")
    if args.control:
        if "sdpa_cudnn" not in impls:
            ap.error("--control times cuDNN against itself: add sdpa_cudnn to --impls")
        impls += (CONTROL,)
    grid = GRID
    if args.shapes:
        grid = [tuple(int(x) for x in shape.split(",")) for shape in args.shapes.split(";")]
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    from flashgen.bench import harness
    from flashgen.core.spec import KernelSpec
    from flashgen.runtime import dispatch

    timer = harness.gpu_timer(args.rep)
    rows = []
    for batch, hq, hkv, n, d, *only in grid:
        for causal in causals if not only else (bool(only[0]),):
            case = harness.Case(batch, hq, hkv, n, d, causal, args.dtype)
            measured = harness.bench_case(case, ("fwd", "fwd_bwd"), impls, device="cuda",
                                          timer=timer, rounds=args.rounds)  # fmt: skip
            row: dict = {"batch": batch, "hq": hq, "hkv": hkv, "seq": n, "head_dim": d,
                         "causal": causal, "dtype": args.dtype}  # fmt: skip
            for direction in ("fwd", "bwd"):
                spec = KernelSpec(d, causal, args.dtype, direction)
                impl, ratio, source = dispatch.impl_choice(spec, n, n, True)
                row[f"choice_{direction}"] = [impl, ratio, source]
            for mode in ("fwd", "fwd_bwd"):
                ms = {r.impl: r.ms for r in measured if r.mode == mode and r.ms is not None}
                reads = {r.impl: r.readings for r in measured if r.mode == mode and r.readings}
                row[f"{mode}_ms"] = ms
                row[f"{mode}_checks"] = {r.impl: r.ok for r in measured if r.mode == mode}
                sdpa_best = min((ms[s], s) for s in SDPA if s in ms)
                row[f"{mode}_fastest_sdpa"] = sdpa_best[1]
                row[f"{mode}_op_vs_fastest_sdpa"] = sdpa_best[0] / ms["op"]
                row[f"{mode}_paired"] = paired_ratio(reads.get(sdpa_best[1]), reads.get("op"))
                if "flashgen" in ms:
                    row[f"{mode}_flashgen_vs_fastest_sdpa"] = sdpa_best[0] / ms["flashgen"]
                if CONTROL in ms and "sdpa_cudnn" in ms:
                    row[f"{mode}_control"] = ms["sdpa_cudnn"] / ms[CONTROL]
                    row[f"{mode}_control_paired"] = paired_ratio(reads.get("sdpa_cudnn"),
                                                                 reads.get(CONTROL))  # fmt: skip
            failed = [f"{r.mode} {r.impl}" for r in measured if r.ok is False]
            row["checks_failed"] = failed
            rows.append(row)
            print(
                f"B{batch} H{hq}/{hkv} N{n} D{d} causal={causal!s:5} "
                f"choice {row['choice_fwd'][0]}/{row['choice_bwd'][0]}  "
                f"op vs fastest SDPA: fwd {row['fwd_op_vs_fastest_sdpa']:.3f}x "
                f"({row['fwd_fastest_sdpa']} {_ms(row, 'fwd')}), fwd+bwd "
                f"{row['fwd_bwd_op_vs_fastest_sdpa']:.3f}x ({row['fwd_bwd_fastest_sdpa']} "
                f"{_ms(row, 'fwd_bwd')}); paired {_paired(row)}"
                + _kernels(row)
                + _control(row)
                + (f"  CHECK FAILED: {failed}" if failed else ""),
                flush=True,
            )
            if args.out:  # a run cut short keeps the rows it finished
                _write(args.out, harness.run_meta("cuda"), rows)
    worst = _worst(rows)
    print(f"worst op vs fastest SDPA: fwd {worst['fwd']:.3f}x, fwd+bwd {worst['fwd_bwd']:.3f}x")
    paired = {
        m: min((r[f"{m}_paired"] for r in rows if r.get(f"{m}_paired") is not None), default=None)
        for m in ("fwd", "fwd_bwd")
    }
    print("worst paired (the rounds' own ratios): " + ", ".join(
        f"{m.replace('_', '+')} " + ("-" if v is None else f"{v:.3f}x") for m, v in paired.items()
    ))  # fmt: skip
    spread = control_spread(rows)
    if spread:
        print("A/A control, cuDNN against itself: " + ", ".join(
            f"{name} {lo:.3f}-{hi:.3f}x" for name, (lo, hi) in spread.items()
        ))  # fmt: skip
    return 1 if any(r["checks_failed"] for r in rows) else 0


def control_spread(rows: list[dict]) -> dict:
    """{"fwd", "fwd+bwd", "fwd paired", "fwd+bwd paired": (lowest, highest)}: the A/A
    control's ratios (--control) over the rows that have one, by medians and paired; {}
    without."""
    out = {}
    for mode in ("fwd", "fwd_bwd"):
        for suffix, name in (("_control", ""), ("_control_paired", " paired")):
            vals = [r[mode + suffix] for r in rows if r.get(mode + suffix) is not None]
            if vals:
                out[mode.replace("_", "+") + name] = (min(vals), max(vals))
    return out


def paired_ratio(theirs: list | None, ours: list | None) -> float | None:
    """The median over rounds of (the fastest SDPA backend's reading / the op's) in the same
    round: both were timed moments apart, so the GPU's slow and fast periods (clocks under the
    power cap) cancel, which the ratio of two medians does not. None without both series."""
    if not theirs or not ours or len(theirs) != len(ours):
        return None
    return statistics.median(a / b for a, b in zip(theirs, ours, strict=True))


def _paired(row: dict) -> str:
    return "/".join(
        "-" if row.get(f"{m}_paired") is None else f"{row[f'{m}_paired']:.3f}x"
        for m in ("fwd", "fwd_bwd")
    )


def _worst(rows: list[dict]) -> dict:
    return {m: min(r[f"{m}_op_vs_fastest_sdpa"] for r in rows) for m in ("fwd", "fwd_bwd")}


def _write(path: str, meta: dict, rows: list[dict]) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows, "worst": _worst(rows)}, f, indent=1)


def _ms(row: dict, mode: str) -> str:
    """ "op/fastest ms" of one mode."""
    ms = row[f"{mode}_ms"]
    return f"{ms['op']:.4f}/{ms[row[f'{mode}_fastest_sdpa']]:.4f} ms"


def _control(row: dict) -> str:
    """The A/A control's ratios (--control), when timed."""
    if "fwd_control" not in row:
        return ""
    return f"; A/A {row['fwd_control']:.3f}x / {row.get('fwd_bwd_control', float('nan')):.3f}x"


def _kernels(row: dict) -> str:
    """The forced flashgen kernels' ratios, when they were timed."""
    if "fwd_flashgen_vs_fastest_sdpa" not in row:
        return ""
    return (
        f"; flashgen kernels {row['fwd_flashgen_vs_fastest_sdpa']:.3f}x / "
        f"{row.get('fwd_bwd_flashgen_vs_fastest_sdpa', float('nan')):.3f}x"
    )


if __name__ == "__main__":
    raise SystemExit(main())
