"""One table from training-example runs that each timed some of the backends on the same model.

    python benchmarks/train_merge.py EAGER.json INDUCTOR.json FLASHGEN.json --json ALL.json

The training examples (`examples/train_hf_llama.py`, `train_nanogpt.py`, `vision_encoder.py`)
compare their backends inside one process. A whole-model compile takes long enough that a short
GPU slot fits only if the backends compile at the same time: one process per backend
(`--backends inductor`, ...) sharing the GPU through `--gpu-lock FILE`, which lets them compile
together and time one at a time. This joins their JSON files as if one process had run them:
per case, each row's loss gaps to the eager row (same seed, same batches; agreement as the
examples judge it, `common.compare_losses`) and flashgen's
`speedup_vs_best_other`, then the examples' table. The merged JSON keeps every source's
metadata, so `benchmarks/latest.py add ALL.json` records it like any other run. Exit status 1
when a loss curve disagrees or a source file is missing (a run that did not finish).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))  # fmt: skip
import common  # noqa: E402  (examples/common.py: the table and the loss comparison)


def merge(sources: list[dict], loss_tol: float) -> list[dict]:
    """The rows of every source, in case order then source order, compared per case."""
    rows: list[dict] = []
    for data in sources:
        for row in data["rows"]:
            row = dict(row)
            for key in ("loss_gap", "loss_gap_mean", "loss_agrees", "speedup_vs_best_other"):
                row.pop(key, None)  # each source compared only what it ran: recompute
            rows.append(row)
    cases = list(dict.fromkeys(r["case"] for r in rows))
    out = []
    for case in cases:
        group = [r for r in rows if r["case"] == case]
        eager = next((r for r in group if r["backend"] == "eager" and r.get("losses")), None)
        for row in group:
            if row["backend"] == "flashgen" and row.get("losses") and not row.get("replaced"):
                row["loss_agrees"] = False  # the example's own rule: that is Inductor's figure
            elif eager is not None and row is not eager and row.get("losses"):
                common.compare_losses(row, eager, loss_tol)
        flashgen = next((r for r in group if r["backend"] == "flashgen"), None)
        others = [r["tokens_per_s"] for r in group
                  if r["backend"] != "flashgen" and r.get("tokens_per_s")]  # fmt: skip
        if flashgen is not None and flashgen.get("tokens_per_s") and others:
            flashgen["speedup_vs_best_other"] = flashgen["tokens_per_s"] / max(others)
        out += group
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("files", nargs="+", help="JSON files the examples wrote (--json)")
    p.add_argument("--json", metavar="FILE", help="write the merged rows and metadata here")
    p.add_argument("--loss-tol", type=float, default=0.05,
                   help="the largest mean |loss - eager loss| over the steps (default 0.05)")  # fmt: skip
    args = p.parse_args(argv)
    sources, missing = [], []
    for path in args.files:
        try:
            with open(path) as handle:
                sources.append(json.load(handle))
        except (OSError, ValueError) as exc:
            missing.append(f"{path}: {exc}")
    for line in missing:
        print(f"train_merge: no result from {line}", file=sys.stderr)
    if not sources:
        return 1
    rows = merge(sources, args.loss_tol)
    meta = dict(sources[0].get("meta", {}))
    meta["command"] = " ; ".join(s.get("meta", {}).get("command", "?") for s in sources)
    status = common.finish(rows, None, {})
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"meta": meta, "rows": rows, "sources": [s.get("meta", {}) for s in sources],
                       "args": sources[0].get("args", {})}, handle, indent=1)  # fmt: skip
    return 1 if missing else status


if __name__ == "__main__":
    sys.exit(main())
