"""Compare two tuning databases of the same task set: the winners of a one-GPU `flashgen tune`
and of `flashgen tune --gpus all` (issue 19's bar: every task's best within 3% of the one-GPU
run's), and the two runs' wall times when given.

    python benchmarks/multigpu_compare.py ONE_GPU_DB SEVERAL_GPU_DB [--wall-one S --wall-many S]
        [--out FILE.json]

Only measured records are compared (a modelled record has no time to compare); each (spec,
bucket, GPU model) of the first database is looked up in the second.
"""

from __future__ import annotations

import argparse
import json
import sys


def compare(one, many) -> list[dict]:
    """One row per measured record of `one`: its best, the other run's, their ratio."""
    theirs = {(r.spec.uri(), r.bucket, r.env.gpu_name): r for r in many.records() if r.measured}
    rows = []
    for rec in one.records():
        if not rec.measured:
            continue
        other = theirs.get((rec.spec.uri(), rec.bucket, rec.env.gpu_name))
        rows.append(
            {
                "spec": rec.spec.uri(),
                "bucket": f"{rec.bucket[0]}x{rec.bucket[1]}",
                "gpu": rec.env.gpu_name,
                "one_config": rec.config.short(),
                "one_ms": rec.time_ms,
                "one_impl": rec.impl,
                "many_config": other.config.short() if other else None,
                "many_ms": other.time_ms if other else None,
                "many_impl": other.impl if other else None,
                "ratio": other.time_ms / rec.time_ms if other else None,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("one", help="database of the one-GPU run (URL or SQLite path)")
    p.add_argument("many", help="database of the --gpus run")
    p.add_argument("--wall-one", type=float, help="wall seconds of the one-GPU run")
    p.add_argument("--wall-many", type=float, help="wall seconds of the --gpus run")
    p.add_argument("--tol", type=float, default=0.03, help="allowed slowdown (default 0.03)")
    p.add_argument("--out", help="also write the rows and the verdicts as JSON")
    args = p.parse_args(argv)
    from flashgen.db import DatabaseError, connect

    try:  # readonly: a run that wrote no database is an error here, not an empty table
        rows = compare(connect(args.one, readonly=True), connect(args.many, readonly=True))
    except DatabaseError as exc:
        print(f"multigpu_compare: {exc}", file=sys.stderr)
        return 2
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "missing"
        print(f"{r['spec']:28} {r['bucket']:>10}  one {r['one_config']:>16} {r['one_ms']:.4g} ms"
              f"  many {r['many_config']} {r['many_ms']} ms  ratio {ratio}")  # fmt: skip
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    within = bool(rows) and len(ratios) == len(rows) and max(ratios) <= 1 + args.tol
    verdict = {"tasks": len(rows), "compared": len(ratios), "worst_ratio": max(ratios, default=None),
               "winners_within_tol": within}  # fmt: skip
    if args.wall_one and args.wall_many:
        verdict["wall_ratio"] = args.wall_many / args.wall_one
    print(json.dumps(verdict))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"rows": rows, "verdict": verdict}, fh, indent=1)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
