"""Tune the Hopper backward kind's knobs on the GPU (Optuna TPE over
flashgen.tune.hopper_bwd_space) and write what won per shape, beside the shipped config's time.

Each shape's search times `flashgen.kernels.hopper_bwd.backward` with do_bench (median, L2
flushed), after checking each config's first gradients against the split kind's on the same
inputs (largest difference within 2% of the largest gradient); a config that fails either
costs inf. Configs the space prunes (shared memory, head dim splits, what the H200 showed not to
work, no TMA reduce-add) are never compiled. The winners are for `hopper_bwd.CONFIGS` (shipped
by hand, with the RESULTS.md entry of the run).

Usage:
  python3 benchmarks/hopper_bwd_tune.py --out hopper_bwd_tune.json --trials 10 \
      [--head-dims 64,128] [--seqs 4096] [--budget 40]
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.append(str(pathlib.Path(__file__).resolve().parent))

# the forward tuner's shapes (batch x heads fill the GPU), flags and shape order
from hopper_tune import _shape, add_shape_args, each_shape  # noqa: E402

from flashgen.bench import harness, scripts  # noqa: E402


def tune_shape(head_dim: int, causal: bool, seq: int, trials: int, budget_s: float) -> dict:
    import torch

    from flashgen.core.spec import KernelSpec
    from flashgen.hardware.sram import current_device
    from flashgen.kernels import bwd, hopper_bwd
    from flashgen.kernels.fwd import forward
    from flashgen.tune.hopper_bwd_space import HopperBwdSpace
    from flashgen.tune.hopper_space import search

    b, h, n = _shape(head_dim, seq)
    q, k, v, do = scripts.inputs(b, h, h, n, n, head_dim)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    scale = head_dim**-0.5
    spec = KernelSpec(head_dim, causal, "bfloat16", "bwd")
    want = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=scale, kind="split")
    flops = harness.attention_flops(b, h, n, n, head_dim, causal, "bwd")
    timer = scripts.timer("cuda", 30, warmup_ms=10)
    start = time.time()

    def evaluate(cfg) -> float:
        if time.time() - start > budget_s:
            raise TimeoutError("shape budget spent")

        def run():
            return hopper_bwd.backward(do, q, k, v, out, lse, scale=scale, spec=spec, config=cfg)

        for got, ref in zip(run(), want, strict=True):
            err = (got.float() - ref.float()).abs().max().item()
            if not err <= 2e-2 * ref.float().abs().max().item():
                raise ValueError(f"gradient differs from the split kind's by {err:.3g}")
        return timer(run)

    shipped = hopper_bwd.checked_config(spec, None)
    space = HopperBwdSpace(head_dim, current_device())
    res = search(space, evaluate, trials, seeds=[shipped])
    torch.cuda.empty_cache()
    row = dict(head_dim=head_dim, causal=causal, seq=seq, shape=[b, h, n],
               best=res.best.short() if res.best else None, best_ms=res.best_ms,
               best_tflops=flops / res.best_ms / 1e9 if res.best else None,
               shipped=shipped.short(), shipped_ms=res.evaluated.get(shipped, math.inf),
               evaluated={c.short(): ms for c, ms in res.evaluated.items()},
               pruned=res.pruned)  # fmt: skip
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    ap = scripts.parser(__doc__)
    ap.add_argument("--out", required=True, help="results file to write (JSON)")
    add_shape_args(ap, seqs="4096", budget=40.0)
    args = ap.parse_args(argv)
    rows = []
    for d, seq, causal in each_shape(args):
        rows.append(tune_shape(d, causal, seq, args.trials, args.budget))
        scripts.save_json(args.out, {"runs": rows, "meta": scripts.run_meta("cuda")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
