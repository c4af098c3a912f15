"""Tune the Hopper forward family's knobs on the GPU (Optuna TPE over flashgen.tune.hopper_space)
and write a Hopper configs file (the format `flashgen.hardware.hopper_tiles.tuned_config` reads).

Each shape's search times `flashgen.kernels.hopper.forward` with do_bench (median, L2 flushed),
after checking the first launch of each config against SDPA's math in float32; a config that
fails either costs inf. Configs the fit model rejects are pruned before they are compiled.

Usage (RESULTS.md, "Hopper forward: tuning"):
  python3 benchmarks/hopper_tune.py --out hopper.json --trials 10 [--head-dims 128] [--seqs 1024,16384]
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))

from flashgen.bench import harness, scripts  # noqa: E402

_BATCH = {1024: 16, 2048: 8, 4096: 4, 8192: 2, 16384: 1}


def add_shape_args(ap, seqs: str, budget: float) -> None:
    """The flags the Hopper tuners share: trials, head dims, sequence lengths, a time budget."""
    ap.add_argument("--trials", type=int, default=10, help="Optuna trials per shape")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqs", default=seqs)
    ap.add_argument(
        "--budget", type=float, default=budget, help="seconds per shape before it stops"
    )


def each_shape(args):
    """(head dim, seq, causal) of every shape the flags name, in the tuners' order."""
    for d in map(int, args.head_dims.split(",")):
        for seq in map(int, args.seqs.split(",")):
            for causal in (False, True):
                yield d, seq, causal


def _shape(head_dim: int, seq: int) -> tuple[int, int, int]:
    """(batch, heads, seq): batch x heads fill the GPU as in RESULTS.md's grid."""
    return _BATCH.get(seq, max(1, 16384 // seq)), 16 if head_dim == 128 else 32, seq


def tune_shape(head_dim: int, causal: bool, seq: int, trials: int, budget_s: float) -> dict:
    import torch
    import torch.nn.functional as F

    from flashgen.core.spec import KernelSpec
    from flashgen.hardware.sram import current_device
    from flashgen.kernels import hopper
    from flashgen.tune.hopper_space import HopperSpace, search

    b, h, n = _shape(head_dim, seq)
    q, k, v = scripts.inputs(b, h, h, n, n, head_dim, count=3)
    spec = KernelSpec(head_dim, causal, "bfloat16", "fwd")
    out = torch.empty_like(q)
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    flops = harness.attention_flops(b, h, n, n, head_dim, causal)
    timer = scripts.timer("cuda", 40, warmup_ms=10)
    start = time.time()

    def evaluate(cfg) -> float:
        if time.time() - start > budget_s:
            raise TimeoutError("shape budget spent")
        run = lambda: hopper.forward(q, k, v, out, lse, scale=head_dim**-0.5, spec=spec, config=cfg)  # noqa: E731
        run()
        err = (out.float() - ref).abs().max().item()
        if not err < 2e-2:
            raise ValueError(f"max error {err:.3g}")
        return timer(run)

    space = HopperSpace(head_dim, current_device())
    res = search(space, evaluate, trials, seeds=[hopper.CONFIGS[head_dim]])
    shipped_ms = res.evaluated.get(hopper.CONFIGS[head_dim], math.inf)
    row = dict(head_dim=head_dim, causal=causal, seq=seq, shape=[b, h, n],
               best=res.best.__dict__ if res.best else None, best_ms=res.best_ms,
               best_tflops=flops / res.best_ms / 1e9 if res.best else None,
               shipped_ms=shipped_ms, evaluated=len(res.evaluated), pruned=res.pruned)  # fmt: skip
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    ap = scripts.parser(__doc__)
    ap.add_argument("--out", required=True, help="Hopper configs file to write (JSON)")
    add_shape_args(ap, seqs="1024,4096,16384", budget=60.0)
    args = ap.parse_args(argv)
    rows = []
    for d, seq, causal in each_shape(args):
        rows.append(tune_shape(d, causal, seq, args.trials, args.budget))
        records = [dict(head_dim=r["head_dim"], causal=r["causal"], seq_bucket=r["seq"],
                        config=r["best"], ms=r["best_ms"]) for r in rows if r["best"]]  # fmt: skip
        doc = {"format": "flashgen-hopper-configs-1", "records": records, "runs": rows}
        scripts.save_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
