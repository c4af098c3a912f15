"""Re-time the implementation comparison of a tuning-records file on this GPU (needs CUDA).

    python benchmarks/recompare.py tuning_db/nvidia-h200.json --out new.json [--direction fwd]

`flashgen tune` ends each task by timing the tuned kernel against PyTorch's SDPA backends and
stores the winner on the record (`impl`, `impl_ratio`), which the op then calls. When the
kernels change after the records were made (the Hopper forward family, launched directly, in
session 9), the winners are stale while the configs are not. This script keeps every record's
config and time and redoes only that comparison, through the tuner's own code
(`flashgen.tune.evaluate.MeasuredEvaluator.compare`: SDPA's backends checked against float64,
then timed back to back with what the run time launches, `flashgen.tune.bench.runtime_launcher`,
interleaved over --rounds rounds) and its rule (`flashgen.tune.sdpa.pick_impl`). Records of
another GPU are copied unchanged. Prints one line per record (old and new winner, every time)
and writes the file in the shipped format (`flashgen.db.portable.dump`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", help="a tuning-records JSON file (tuning_db/<gpu>.json format)")
    ap.add_argument("--out", required=True, help="where to write the updated records")
    ap.add_argument("--direction", default="fwd,bwd", help="fwd, bwd or both (default both)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    ap.add_argument("--rep", type=int, default=60, help="do_bench rep in ms per reading")
    ap.add_argument("--json", default=None, help="also write every comparison's times here")
    args = ap.parse_args(argv)

    import torch

    from flashgen.db import portable
    from flashgen.tune.evaluate import MeasuredEvaluator
    from flashgen.tune.sdpa import pick_impl
    from flashgen.tune.tasks import Settings, Task

    if not torch.cuda.is_available():
        print("recompare.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    directions = set(args.direction.split(","))
    records = portable.load(args.records)
    ev = MeasuredEvaluator(warmup=25, rep=args.rep)
    out, rows = [], []
    for rec in records:
        if rec.env.gpu_name != gpu or not rec.measured or rec.spec.direction not in directions:
            out.append(rec)
            continue
        task = Task(rec.spec, tuple(rec.bucket))
        times, notes = ev.compare(task, rec.config, Settings.impls, rounds=args.rounds)
        impl, ratio = pick_impl(times)
        row = {
            "spec": rec.spec.uri(), "bucket": list(rec.bucket), "old": [rec.impl, rec.impl_ratio],
            "new": [impl, ratio], "times_ms": times, "notes": notes,
        }  # fmt: skip
        rows.append(row)
        shown = " ".join(f"{k}={v:.4f}" for k, v in times.items())
        print(f"{row['spec']:34s} {rec.bucket[0]:>6}  {rec.impl}->{impl} "
              f"{(ratio or 0):.3f}  {shown}", flush=True)  # fmt: skip
        if impl is not None:
            rec = dataclasses.replace(rec, impl=impl, impl_ratio=ratio)
        out.append(rec)
    portable.dump(out, args.out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "rows": rows}, f, indent=1)
    ev.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
