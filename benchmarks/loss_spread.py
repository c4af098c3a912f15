"""How far apart the loss curves of several training runs are, against one reference run.

    python benchmarks/loss_spread.py REF.json=fp32 A.json=eager_a B.json=eager_b C.json=flashgen

Each argument is a JSON file an example wrote with --json (`examples/train_hf_llama.py`, ...),
optionally followed by `=LABEL`. The first is the reference (e.g. a float32 run of the same
seeded model and batches). Why: bf16 training is chaotic after a loss spike, so a gap between
flashgen and one eager run says little on its own; the question is whether flashgen's curve
sits further from the reference than eager's own bf16 curves do (two eager runs also differ,
their kernels not being deterministic). Prints every step's loss per run, and per run the
largest and the mean |loss - reference loss| over the steps, per case (the rows' "case").
Exit status 1 when the reference has no losses (a run that did not finish).
"""

from __future__ import annotations

import argparse
import json
import sys


def load(arg: str) -> tuple[str, dict]:
    path, _, label = arg.partition("=")
    with open(path) as f:
        data = json.load(f)
    return label or path, {row["case"]: row for row in data["rows"] if row.get("losses")}


def spread(ref: list[float], losses: list[float]) -> tuple[float, float]:
    gaps = [abs(a - b) for a, b in zip(losses, ref, strict=False)]
    return (max(gaps), sum(gaps) / len(gaps)) if gaps else (float("nan"), float("nan"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    p.add_argument("runs", nargs="+", help="FILE.json[=LABEL], the reference first")
    args = p.parse_args(argv)
    runs = [load(a) for a in args.runs]
    ref_label, ref = runs[0]
    if not ref:  # e.g. a run that ran out of memory: its rows carry no losses
        print(f"{ref_label}: the reference has no losses", file=sys.stderr)
        return 1
    for case, ref_row in ref.items():
        print(f"case {case}: reference {ref_label}")
        width = max(len(label) for label, _ in runs)
        for label, rows in runs:
            row = rows.get(case)
            if row is None:
                print(f"  {label:<{width}}  (no losses)")
                continue
            steps = " ".join(f"{x:8.4f}" for x in row["losses"])
            line = f"  {label:<{width}} {row['backend']:<9} {steps}"
            if label != ref_label:
                worst, mean = spread(ref_row["losses"], row["losses"])
                line += f"   max {worst:.4f} mean {mean:.4f}"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
