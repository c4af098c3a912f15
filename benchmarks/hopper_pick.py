"""Turn a `hopper_probe.py bench` result into a Hopper configs file: per (head dim, causal,
query-length bucket), the fastest probed config (MHA shapes; GQA rows are reported, not keyed).
This is how the shipped tuning_db/hopper/nvidia-h200.json was made from a grid of hand-picked
configs; benchmarks/hopper_tune.py does the same with an Optuna search instead.

Usage: python3 benchmarks/hopper_pick.py bench.json OUT.json [--current CONFIGS.json]

With --current (the configs file the bench's library path ran), a shape's library-path column
(`flashgen_fwd_auto`, else `flashgen_fwd_hopper`) competes too, as that file's config for the
shape's head dim, mask and length: a re-pick keeps the shipped config where it stayed fastest,
and keeps that file's records of the keys the bench did not time (a bench of a few shapes
updates those and leaves the rest as they were).
"""

from __future__ import annotations

import ast
import json
import math
import pathlib
import sys

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))

from flashgen.core.hopper_config import HopperConfig  # noqa: E402
from flashgen.hardware.hopper_tiles import CONFIGS_FORMAT, seq_bucket  # noqa: E402


def config_of(name: str) -> HopperConfig:
    """'ws(BLOCK_M, BLOCK_N, NUM_BUF, warps, maxnreg, consumers, pingpong[, persistent[,
    dynamic]])'."""
    t = ast.literal_eval(name.removeprefix("ws"))
    bm, bn, nb, w, regs, nc, pp = t[:7]
    flags = [bool(x) for x in t[7:9]]
    return HopperConfig(bm, bn, nb, nc, w, regs, pp, *flags)


def score(row: dict, name: str) -> float | None:
    """How fast column `name` of a bench row is. With the rounds' readings (`runs`) and cuDNN's,
    the geometric mean over rounds of its reading over cuDNN's of the same round: the GPU's
    clock state moves all columns of a round together (cuDNN read 548 and 611 TFLOP/s in two
    rounds of one shape in B2), so per-round ratios rank configs more steadily than each
    column's median. Otherwise its TFLOP/s."""
    runs, base = row.get("runs", {}).get(name), row.get("runs", {}).get("cudnn")
    if runs and base and len(runs) == len(base) and all(runs) and all(base):
        return math.exp(sum(math.log(x / c) for x, c in zip(runs, base, strict=True)) / len(runs))
    return row["tflops"].get(name) or None


def pick(rows: list[dict], current: dict | None = None) -> list[dict]:
    """The fastest config per MHA shape (by `score`); `current`: {(head_dim, causal, bucket):
    HopperConfig} of the file the library path ran, whose column then competes as that config."""
    records = []
    for row in rows:
        b, h, hk, n, d, causal = row["shape"]
        if hk != h:
            continue
        key = (d, bool(causal), seq_bucket(n))
        names = {config_of(k): k for k in row["tflops"] if k.startswith("ws") and score(row, k)}
        lib = next((k for k in ("flashgen_fwd_auto", "flashgen_fwd_hopper")
                    if score(row, k)), None)  # fmt: skip
        if current and key in current and lib:
            mine = names.get(current[key])
            if mine is None or score(row, lib) > score(row, mine):
                names[current[key]] = lib
        if not names:
            continue
        best = max(names, key=lambda c: score(row, names[c]))
        records.append(dict(head_dim=d, causal=bool(causal), seq_bucket=key[2],
                            config=best.__dict__, tflops=round(row["tflops"][names[best]], 1),
                            cudnn_tflops=row["tflops"].get("cudnn")))  # fmt: skip
    return records


def read_current(path: str) -> dict:
    doc = json.loads(pathlib.Path(path).read_text())
    return {(r["head_dim"], r["causal"], r["seq_bucket"]): HopperConfig(**r["config"])
            for r in doc["records"]}  # fmt: skip


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    current = None
    if len(argv) == 4 and argv[2] == "--current":
        current = read_current(argv[3])
    elif len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = json.loads(pathlib.Path(argv[0]).read_text())
    records = pick(rows, current)
    if current:
        picked = {(r["head_dim"], r["causal"], r["seq_bucket"]) for r in records}
        kept = [r for r in json.loads(pathlib.Path(argv[3]).read_text())["records"]
                if (r["head_dim"], r["causal"], r["seq_bucket"]) not in picked]  # fmt: skip
        records = sorted(records + kept, key=lambda r: (-r["head_dim"], r["seq_bucket"],
                                                        r["causal"]))  # fmt: skip
    doc = {
        "format": CONFIGS_FORMAT,
        "source": f"benchmarks/hopper_pick.py {' '.join(argv)}",
        "records": records,
    }
    pathlib.Path(argv[1]).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(argv[1]).write_text(json.dumps(doc, indent=1) + "\n")
    for r in doc["records"]:
        print(r["head_dim"], r["causal"], r["seq_bucket"], HopperConfig(**r["config"]).short(),
              r.get("tflops"), "cudnn", r.get("cudnn_tflops"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
