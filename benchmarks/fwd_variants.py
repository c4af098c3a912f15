"""Variants of the Hopper forward's shipped configs, A/B on an H100/H200: each variant is the
config a shape runs today (`flashgen.kernels.hopper.config_for`: the configs file's record of
its head dim, causality and length, else `CONFIGS`) with some fields replaced, checked against
float64 and timed against that config in one process. The forward's counterpart of
benchmarks/bwd_variants.py (same --vary syntax and ratios).

    PYTHONPATH=. python3 benchmarks/fwd_variants.py --vary b3=num_buf:3@128f \\
        [--softcap 30] [--rounds 3] [--budget S] [--out DIR] [--grid anchors|probe]

--vary NAME=FIELD:VALUE[,FIELD:VALUE...][@D[c|f]]: HopperConfig fields (flags as 0/1); @D
limits it to head dim D, with c (causal) or f (not causal) to one causal mode. --softcap CAP
times every row with logit softcapping (cap * tanh(s / cap)) too, as rows of their own; --alibi
makes every row an ALiBi one (the paper's slopes for the row's heads).

1. Correctness: every variant and the shipped config on a ragged GQA shape (2 x 8/2 heads, 333
   queries and keys), bf16 and fp16, once per distinct shipped config of a (head dim, causal,
   softcap) over the grid's lengths, out and lse against float64: a variant passes when its
   output error is at most 1.5x the shipped config's plus 1e-3 (relative to the output's
   largest entry) and its lse within 2e-3 of the reference. Variants that fail are not timed.
2. Speed (bf16, the grid, L2 flushed): each shape's launch plans built once, the shipped config
   and its variants timed in alternating rounds (do_bench medians, order reversed every other
   round), the median per variant; ratio = shipped time / variant time (above 1: faster), and
   the largest output difference from the shipped config's, relative to its size.

Results: <out>/fwd_variants.json, rewritten after every row; geomeans per (variant, head dim,
softcap) at the end. Timing stops once --budget seconds have passed. Exit status 1 if a check
failed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import statistics
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import scripts  # noqa: E402
from flashgen.bench.scripts import GRIDS  # noqa: E402


def _bwd_variants():
    """benchmarks/bwd_variants.py, for what the two scripts share: the options, the --vary
    parser, the check-once bookkeeping and the summary (loaded by path: benchmarks/ is not a
    package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bwd_variants.py")
    spec = importlib.util.spec_from_file_location("bwd_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spec_of(d: int, causal: bool, softcap: bool, dtype: str = "bfloat16", alibi: bool = False):
    from flashgen.core.spec import KernelSpec

    return KernelSpec(d, causal, dtype, "fwd", softcap=softcap, alibi=alibi)


def slopes_for(q, alibi: bool):
    """The ALiBi slopes of an --alibi row as the kernel reads them (float32 [B, Hq], an expanded
    view of the paper's [Hq]), else None."""
    if not alibi:
        return None
    from flashgen.kernels.alibi import check_slopes, standard_slopes

    return check_slopes(standard_slopes(q.shape[1]).to(q.device), q)


def variants(spec, seq: int, varies) -> tuple[dict, dict]:
    """({name: config} with "shipped" first, {name: why refused}) for a spec at `seq` queries."""
    from flashgen.core.config import FieldError
    from flashgen.hardware.hopper_tiles import fit_reason
    from flashgen.hardware.sram import KNOWN_GPUS
    from flashgen.kernels import hopper

    shipped = hopper.config_for(spec, seq)
    out, refused = {"shipped": shipped}, {}
    for vary in varies:
        if not vary.applies(spec.head_dim, spec.causal):
            continue
        try:
            cfg = hopper.for_spec(dataclasses.replace(shipped, **dict(vary.fields)), spec)
        except FieldError as exc:
            refused[vary.name] = str(exc)
            continue
        why = fit_reason(cfg, spec.head_dim, KNOWN_GPUS["nvidia-h200"])
        if why is not None:
            refused[vary.name] = why
        else:
            out[vary.name] = cfg
    return out, refused


def reference(q, k, v, causal: bool, cap: float | None, slopes=None):
    """float64 (out, lse) with GQA, softcap, ALiBi (`slopes`) and causal masking
    (`flashgen.kernels.reference`'s pieces, as the tests build masked references)."""
    from flashgen.kernels.alibi import bias_ref
    from flashgen.kernels.reference import hidden_ref, rows_ref, scores_ref

    scores = scores_ref(q, k, softcap=cap)
    if slopes is not None:
        scores = scores + bias_ref(slopes, q.shape[2], k.shape[2])
    hide = hidden_ref(q.shape[2], k.shape[2], causal=causal).to(q.device)
    return rows_ref(scores.masked_fill(hide, -math.inf), v)


def run_once(spec, cfg, q, k, v, cap, slopes=None):
    import torch

    from flashgen.kernels import hopper

    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    hopper.forward(q, k, v, out, lse, scale=q.shape[-1] ** -0.5, spec=spec, config=cfg,
                   softcap=cap, alibi=slopes)  # fmt: skip
    return out, lse


def check(d, causal, cap, cfgs, dtypes=("bfloat16", "float16"), alibi: bool = False) -> dict:
    """{name: passed} on the ragged GQA shape in each of `dtypes` (module docstring)."""
    result = {name: True for name in cfgs}
    for dtype in dtypes:
        spec = spec_of(d, causal, cap is not None, dtype, alibi)
        q, k, v, _ = scripts.inputs(2, 8, 2, 333, 333, d, seed=1, dtype=dtype)
        slopes = slopes_for(q, alibi)
        ref_out, ref_lse = reference(q, k, v, causal, cap, slopes)
        size = ref_out.abs().max().item()
        errors = {}
        for name, cfg in cfgs.items():
            try:
                out, lse = run_once(spec, cfg, q, k, v, cap, slopes)
            except Exception as exc:  # e.g. a compile error: this variant fails, the run goes on
                print(f"d{d} causal={causal} cap={cap} {dtype} {name}: {exc!r}"[:400], flush=True)
                result[name] = False
                continue
            # lse: the kernel's natural log (flashgen's backward reads it so)
            errors[name] = ((out.double() - ref_out).abs().max().item() / size,
                            (lse.double() - ref_lse).abs().max().item())  # fmt: skip
        base = errors.get("shipped", (math.inf, math.inf))[0]
        for name, (err, lse_err) in errors.items():
            ok = err <= 1.5 * base + 1e-3 and lse_err <= 2e-3
            if not ok or name != "shipped":
                print(f"d{d} causal={causal} cap={cap} {dtype} {name}: out {err:.2e} "
                      f"(shipped {base:.2e}), lse {lse_err:.2e}{'' if ok else ' FAILED'}",
                      flush=True)  # fmt: skip
            result[name] = result[name] and ok
    return result


def time_shape(shape, causal, cap, cfgs, rounds, rep, alibi: bool = False) -> dict:
    import torch
    import triton.testing

    from flashgen.kernels import hopper
    from flashgen.kernels.launch import direct_device
    from flashgen.kernels.plans import fixed_max

    b, hq, hkv, n, d = shape
    spec = spec_of(d, causal, cap is not None, alibi=alibi)
    q, k, v, _ = scripts.inputs(b, hq, hkv, n, n, d, seed=2)
    slopes = slopes_for(q, alibi)
    scale = d**-0.5
    outs, runs = {}, {}
    for name, cfg in cfgs.items():
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        split = hopper.tail_plan(spec, cfg, q, k, direct_device(q, True))
        launch = hopper.plan(spec, cfg, q, k, v, out, direct_device(q, True), split=split,
                             fixed=fixed_max(spec, cap))  # fmt: skip
        args = hopper.call_args(spec, q, k, v, out, lse, scale, None, cap, None, None, slopes)
        if split is None:
            runs[name] = lambda launch=launch, args=args: launch(*args)
        else:  # its parts' buffers, the kernel, the merge (as forward launches it)
            runs[name] = lambda launch=launch, args=args, split=split, out=out, lse=lse: (
                split.launch(launch, args, out, lse)
            )
        runs[name]()
        outs[name] = out
    ref = outs["shipped"].float()
    diff = {name: round(((o.float() - ref).abs().max() / ref.abs().max()).item(), 6)
            for name, o in outs.items() if name != "shipped"}  # fmt: skip
    ms = {name: [] for name in runs}
    for i in range(rounds):
        for name in list(runs)[:: -1 if i % 2 else 1]:
            ms[name].append(triton.testing.do_bench(runs[name], warmup=5, rep=rep,
                                                    return_mode="median"))  # fmt: skip
    med = {name: statistics.median(x) for name, x in ms.items()}
    flops = 4 * b * hq * n * n * d / (2 if causal else 1)
    return dict(shape=list(shape), causal=causal, softcap=cap, alibi=alibi,
                configs={name: c.short() for name, c in cfgs.items()}, ms=ms, median=med,
                tflops={name: round(flops / m / 1e9, 1) for name, m in med.items()},
                ratio={name: round(med["shipped"] / med[name], 4) for name in med
                       if name != "shipped"}, rel_diff=diff)  # fmt: skip


def label(row) -> str:
    """A summary group: the head dim, and the softcap or ALiBi where the row has one."""
    cap = row["softcap"]
    extra = (f" softcap {cap}" if cap else "") + (" alibi" if row.get("alibi") else "")
    return f"head dim {row['shape'][-1]}" + extra


def main(argv=None) -> int:
    bwd_variants = _bwd_variants()
    ap = scripts.parser(__doc__, out=os.environ.get("OUT", "."), budget=240.0)
    bwd_variants.add_arguments(ap)
    ap.add_argument("--softcap", type=float, default=None, metavar="CAP",
                    help="also time every row with this logit softcap")  # fmt: skip
    ap.add_argument("--only-softcap", action="store_true", help="time the softcap rows only")
    ap.add_argument("--alibi", action="store_true",
                    help="every row with ALiBi (the paper's slopes; not with --softcap)")  # fmt: skip
    ap.add_argument("--shapes", default=None, metavar="I,J,...",
                    help="indices into the grid (default: every shape)")  # fmt: skip
    ap.add_argument("--check-dtypes", default="bfloat16,float16", metavar="D,...",
                    help="dtypes of the float64 check (bfloat16, float16)")  # fmt: skip
    args = ap.parse_args(argv)
    from flashgen.core.hopper_config import HopperConfig

    varies = bwd_variants.parse_varies(ap, args.vary, HopperConfig)
    if args.softcap is not None and not args.softcap > 0:
        ap.error(f"--softcap must be positive, got {args.softcap}")
    if args.only_softcap and args.softcap is None:
        ap.error("--only-softcap needs --softcap")
    if args.alibi and args.softcap is not None:
        ap.error("--alibi times ALiBi rows only: not with --softcap")
    alibi = args.alibi
    caps = ([] if args.only_softcap else [None]) + ([args.softcap] if args.softcap else [])
    dtypes = tuple(args.check_dtypes.split(","))
    if not set(dtypes) <= {"bfloat16", "float16"}:
        ap.error(f"--check-dtypes: bfloat16 and/or float16, got {args.check_dtypes!r}")
    shapes = GRIDS[args.grid]
    try:
        picked = [int(i) for i in args.shapes.split(",")] if args.shapes else range(len(shapes))
        shapes = [shapes[i] for i in picked]
    except (ValueError, IndexError):
        ap.error(f"--shapes: indices 0-{len(shapes) - 1} of the {args.grid} grid, comma-separated")
    start = time.time()
    report = dict(vary=args.vary, refused={}, checks={}, rows=[])
    path = scripts.out_path(args.out, "fwd_variants.json")

    def save():
        report["summary"] = bwd_variants.summarise(report["rows"], label)
        scripts.save_json(path, report)

    # Per (shape, causal, softcap): the variants of the config that shape runs, each set
    # checked once (shapes that run the same shipped config share it).
    cfgs = {}
    for shape in shapes:
        d = shape[-1]
        for causal in (False, True):
            for cap in caps:
                spec = spec_of(d, causal, cap is not None, alibi=alibi)
                found, refused = variants(spec, shape[3], varies)
                key = (f"d{d} causal={causal} softcap={cap}{' alibi' if alibi else ''} "
                       f"{found['shipped'].short()}")  # fmt: skip
                cfgs[tuple(shape), causal, cap] = bwd_variants.checked_variants(
                    report, key, found, refused,
                    lambda d=d, causal=causal, cap=cap, found=found: check(
                        d, causal, cap, found, dtypes, alibi))  # fmt: skip
    bad = bwd_variants.failed_checks(report)
    save()
    for shape in shapes:
        for causal in (False, True):
            for cap in caps:
                if time.time() - start > args.budget:
                    print(f"budget reached before {tuple(shape)} causal={causal} softcap={cap}")
                    save()
                    return 1 if bad else 0
                found = cfgs[tuple(shape), causal, cap]
                if len(found) > 1:
                    row = time_shape(shape, causal, cap, found, args.rounds, args.rep, alibi)
                    report["rows"].append(row)
                    save()
                    print(json.dumps({k: row[k] for k in ("shape", "causal", "softcap", "ratio",
                                                          "tflops")}), flush=True)  # fmt: skip
    save()
    print("\n".join(report["summary"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
