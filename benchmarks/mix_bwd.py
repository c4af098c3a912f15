"""Where a training call that mixes flashgen's forward with cuDNN's backward loses time (issue 15).

The op runs flashgen's forward and cuDNN's backward where the records name that pair
(`flashgen.runtime.vendor`, "the mix"), since cuDNN's backward takes flashgen's out and
logsumexp. The grid (`vendor_grid.py`, session 35 B2) read such rows below cuDNN's own forward
+ backward beyond its A/A spread (B16 H16 1k d128: 0.960x paired) while the forward alone read
level. This script times, per shape and in alternating rounds (medians of `--rounds`):

  cudnn_fb     SDPA on cuDNN, forward + backward (what the op is compared with)
  op_fb        `flashgen.attention`, forward + backward, as a user calls it (the mix)
  ours_fwd     flashgen's forward alone (`plain_forward`: out, logsumexp)
  cudnn_fwd    cuDNN's forward alone (`aten._scaled_dot_product_cudnn_attention`)
  bwd_own      cuDNN's backward op on cuDNN's own out and statistics
  bwd_ours     cuDNN's backward op on flashgen's out and logsumexp (`vendor.cudnn_backward`)

so that op_fb - (ours_fwd + bwd_ours) is the op's own overhead, and bwd_ours / bwd_own says
whether cuDNN's backward runs slower on flashgen's tensors. Prints one JSON line per shape and
writes them all to --out (a file, or mix_bwd.json in a directory; default $OUT or here), after
every shape. (Session 35 B6 ran an earlier version that left the two forward+backward calls'
gradients accumulating into .grad, timed on both sides.)

    python benchmarks/mix_bwd.py [--rounds 5] [--rep 30] [--out FILE.json|DIR]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))

from flashgen.bench import scripts  # noqa: E402

SHAPES = [  # (batch, q heads, kv heads, seq, head dim, causal): the grid's mixed rows
    (16, 16, 16, 1024, 128, False),
    (16, 32, 8, 1024, 128, True),
    (4, 32, 8, 4096, 128, True),
    (4, 16, 16, 4096, 128, True),
]


def time_shape(shape, rounds: int, rep: int) -> dict:
    """The six timings of one shape (ms, medians over rounds) and a sanity check: dq of cuDNN's
    backward on flashgen's tensors against on its own (bf16, max abs difference). The two
    forward+backward calls reset their leaves' gradients each run (`scripts.fwd_bwd`), so no
    accumulation into .grad is timed."""
    from hybrid_probe import cudnn_bwd, cudnn_fwd  # cuDNN's op pair, called directly

    import flashgen
    from flashgen.bench import harness
    from flashgen.runtime.primitives import plain_forward
    from flashgen.runtime.vendor import cudnn_backward

    b, hq, hkv, n, d, causal = shape
    scale = d**-0.5
    q, k, v, do = scripts.inputs(b, hq, hkv, n, n, d, seed=0)
    # cuDNN's own op pair takes K/V with q's head count (SDPA's enable_gqa expands them too)
    ke, ve = (k, v) if hq == hkv else (t.repeat_interleave(hq // hkv, 1) for t in (k, v))
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    own_out, own_stats = cudnn_fwd(q, ke, ve, causal, scale)
    our_out, our_lse = plain_forward(q, k, v, causal, scale)
    fns = {
        "cudnn_fb": scripts.fwd_bwd(
            lambda: harness.sdpa("sdpa_cudnn", *theirs, causal=causal, scale=scale), theirs, do
        ),
        "op_fb": scripts.fwd_bwd(lambda: flashgen.attention(*mine, causal=causal), mine, do),
        "ours_fwd": lambda: plain_forward(q, k, v, causal, scale),
        "cudnn_fwd": lambda: cudnn_fwd(q, ke, ve, causal, scale),
        "bwd_own": lambda: cudnn_bwd(do, q, ke, ve, own_out, own_stats, causal, scale),
        "bwd_ours": lambda: cudnn_backward(do, q, k, v, our_out, our_lse, causal, scale),
    }
    own = cudnn_bwd(do, q, ke, ve, own_out, own_stats, causal, scale)
    ours = cudnn_backward(do, q, k, v, our_out, our_lse, causal, scale)
    diff = (own[0].float() - ours[0].float()).abs().max().item()  # dq (dk, dv: GQA-expanded)
    time_fn = scripts.timer("cuda", rep)
    ms = {name: [] for name in fns}
    for r in range(rounds):
        for name in list(fns) if r % 2 == 0 else list(reversed(fns)):
            ms[name].append(time_fn(fns[name]))
    med = {name: round(statistics.median(v), 4) for name, v in ms.items()}
    return dict(
        shape=list(shape),
        ms=med,
        readings={k: [round(x, 4) for x in v] for k, v in ms.items()},
        dq_diff=diff,
        op_overhead_ms=round(med["op_fb"] - med["ours_fwd"] - med["bwd_ours"], 4),
        bwd_ours_over_own=round(med["bwd_ours"] / med["bwd_own"], 4),
        op_vs_cudnn=round(med["cudnn_fb"] / med["op_fb"], 4),
    )


def main(argv=None) -> int:
    ap = scripts.parser(__doc__, out=os.environ.get("OUT", "."))
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (5)")
    ap.add_argument("--rep", type=int, default=30, help="do_bench's rep, ms (30)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("mix_bwd.py needs a CUDA GPU", file=sys.stderr)
        return 2
    path = scripts.out_path(args.out, "mix_bwd.json")
    doc = scripts.result_doc(rows=[])
    for shape in SHAPES:
        row = time_shape(shape, args.rounds, args.rep)
        print(json.dumps({k: row[k] for k in row if k != "readings"}), flush=True)
        doc["rows"].append(row)
        scripts.save_json(path, doc)  # after every shape: a cut run keeps what it measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
