"""Turn a `hopper_probe.py bench` result into a Hopper configs file: per (head dim, causal,
query-length bucket), the fastest probed config (MHA shapes; GQA rows are reported, not keyed).
This is how the shipped tuning_db/hopper/nvidia-h200.json was made from a grid of hand-picked
configs; benchmarks/hopper_tune.py does the same with an Optuna search instead.

Usage: python3 benchmarks/hopper_pick.py bench.json tuning_db/hopper/nvidia-h200.json
"""

from __future__ import annotations

import ast
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from flashgen.core.hopper_config import HopperConfig  # noqa: E402
from flashgen.hardware.hopper_tiles import CONFIGS_FORMAT, seq_bucket  # noqa: E402


def config_of(name: str) -> HopperConfig:
    """'ws(BLOCK_M, BLOCK_N, NUM_BUF, warps, maxnreg, consumers, pingpong[, persistent])'."""
    t = ast.literal_eval(name.removeprefix("ws"))
    bm, bn, nb, w, regs, nc, pp = t[:7]
    return HopperConfig(bm, bn, nb, nc, w, regs, pp, bool(t[7]) if len(t) > 7 else False)


def pick(rows: list[dict]) -> list[dict]:
    records = []
    for row in rows:
        b, h, hk, n, d, causal = row["shape"]
        if hk != h:
            continue
        probed = {k: v for k, v in row["tflops"].items() if k.startswith("ws") and v}
        if not probed:
            continue
        best = max(probed, key=probed.get)
        records.append(dict(head_dim=d, causal=bool(causal), seq_bucket=seq_bucket(n),
                            config=config_of(best).__dict__, tflops=round(probed[best], 1),
                            cudnn_tflops=row["tflops"].get("cudnn")))  # fmt: skip
    return records


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = json.loads(pathlib.Path(argv[0]).read_text())
    doc = {"format": CONFIGS_FORMAT, "source": f"benchmarks/hopper_pick.py {argv[0]}",
           "records": pick(rows)}  # fmt: skip
    pathlib.Path(argv[1]).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(argv[1]).write_text(json.dumps(doc, indent=1) + "\n")
    for r in doc["records"]:
        print(r["head_dim"], r["causal"], r["seq_bucket"], HopperConfig(**r["config"]).short(),
              r["tflops"], "cudnn", r["cudnn_tflops"])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
