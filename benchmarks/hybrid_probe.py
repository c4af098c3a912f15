"""Can cuDNN's SDPA backward consume flashgen's forward (its out and logsumexp)? (needs CUDA)

flashgen's forward is faster than cuDNN's on most of the grid, its backward slower at every
shape (benchmarks/RESULTS.md, session 10). Both keep the same per-row statistic, the natural
log of the softmax denominator of the scaled scores, so cuDNN's backward op
(`aten._scaled_dot_product_cudnn_attention_backward`) may run on flashgen's forward. This
script checks that on the GPU and times it:

1. correctness: gradients of flashgen forward + cuDNN backward against float64 autograd, next
   to cuDNN's own forward + backward (same inputs), on small ragged shapes (GQA, causal both,
   head dims 64/128, bf16 and fp16);
2. speed, per grid shape: cuDNN forward + backward (its own op pair, no autograd), flashgen's
   forward + cuDNN's backward, and the parts alone; do_bench medians over --rounds rounds.

    python benchmarks/hybrid_probe.py --out DIR [--rounds 2] [--rep 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

GRID = [  # (B, Hq, Hkv, N, D): the issue-13/14 grid (bf16), MHA then GQA
    (16, 16, 16, 1024, 128), (4, 16, 16, 4096, 128), (1, 16, 16, 16384, 128),
    (16, 32, 32, 1024, 64), (4, 32, 32, 4096, 64), (1, 32, 32, 16384, 64),
    (16, 32, 8, 1024, 128), (4, 32, 8, 4096, 128), (1, 32, 8, 16384, 128),
    (1, 16, 4, 16384, 128),  # the HF Llama 16k example's attention (GQA 16/4)
]  # fmt: skip
CHECKS = [  # (B, Hq, Hkv, Sq, D, dtype)
    (2, 8, 2, 333, 64, "bfloat16"), (2, 8, 2, 333, 128, "bfloat16"),
    (1, 4, 4, 1000, 128, "float16"), (2, 4, 1, 257, 64, "float16"),
]  # fmt: skip


def cudnn_fwd(q, k, v, causal, scale):
    import torch

    r = torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, causal, False, scale=scale
    )
    return r[0], r[1]


def cudnn_bwd(do, q, k, v, out, lse4, causal, scale):
    """cuDNN's backward on (out, lse4): lse4 float32 [B, H, S, 1]."""
    import torch

    return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        do, q, k, v, out, lse4, None, None, None, None, None, q.shape[2], k.shape[2], 0.0,
        causal, scale=scale,
    )  # fmt: skip


def fg_fwd(q, k, v, causal, scale):
    from flashgen.kernels import fwd
    from flashgen.runtime.dispatch import plan_config

    out, lse = fwd.forward(q, k, v, causal=causal, scale=scale, config=plan_config)
    return out, lse


def ref_grads(q, k, v, do, causal, scale):
    import torch

    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    rep = q.shape[1] // k.shape[1]
    kk, vv = (t.repeat_interleave(rep, 1) for t in leaves[1:])
    s = (leaves[0] @ kk.transpose(-1, -2)) * scale
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    o = s.softmax(-1) @ vv
    return torch.autograd.grad(o, leaves, do.double())


def rel(a, b):
    return ((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()


def check(log) -> bool:
    import torch

    ok = True
    for b, hq, hkv, s, d, dt in CHECKS:
        dtype = getattr(torch, dt)
        for causal in (False, True):
            torch.manual_seed(0)
            q = torch.randn(b, hq, s, d, device="cuda", dtype=dtype)
            k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=dtype) for _ in range(2))
            do = torch.randn_like(q)
            scale = d**-0.5
            want = ref_grads(q, k, v, do, causal, scale)
            try:
                out, lse = fg_fwd(q, k, v, causal, scale)
                hyb = cudnn_bwd(do, q, k, v, out, lse.unsqueeze(-1), causal, scale)
                oc, lc = cudnn_fwd(q, k, v, causal, scale)
                own = cudnn_bwd(do, q, k, v, oc, lc, causal, scale)
            except RuntimeError as exc:
                ok = False
                log(f"check {(b, hq, hkv, s, d)} {dt} causal={causal}: FAIL {exc}")
                continue
            e_h = [rel(g, w) for g, w in zip(hyb, want, strict=True)]
            e_c = [rel(g, w) for g, w in zip(own, want, strict=True)]
            lse_gap = (lse.unsqueeze(-1) - lc).abs().max().item()
            good = all(h <= 2 * c + 4e-3 for h, c in zip(e_h, e_c, strict=True))
            ok &= good
            log(
                f"check {(b, hq, hkv, s, d)} {dt} causal={causal}: hybrid dq/dk/dv rel err "
                f"{[round(x, 5) for x in e_h]}  cuDNN own {[round(x, 5) for x in e_c]}  "
                f"lse vs cuDNN's {lse_gap:.2e}  cuDNN lse {tuple(lc.shape)} {lc.stride()}  "
                f"{'ok' if good else 'FAIL'}"
            )
    return ok


def bench(args, log) -> list:
    import torch
    from triton.testing import do_bench

    rows = []
    for b, hq, hkv, n, d in GRID:
        for causal in (False, True):
            torch.manual_seed(0)
            q = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16)
            k, v = (
                torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2)
            )
            do = torch.randn_like(q)
            scale = d**-0.5
            try:
                fns = cases(q, k, v, do, causal, scale)
            except RuntimeError as exc:
                log(f"B{b} H{hq}/{hkv} N{n} D{d} causal={causal}: not run: {exc}")
                continue
            ms = {name: [] for name in fns}
            for r in range(args.rounds):
                order = list(fns) if r % 2 == 0 else list(reversed(fns))
                for name in order:
                    ms[name].append(do_bench(fns[name], rep=args.rep, return_mode="median"))
            med = {name: sum(x) / len(x) for name, x in ms.items()}
            row = {
                "shape": [b, hq, hkv, n, d], "causal": causal, "ms": ms, "mean_ms": med,
                "fwdbwd_hybrid_vs_cudnn": med["cudnn_fwdbwd"] / med["hybrid_fwdbwd"],
                "fwd_fg_vs_cudnn": med["cudnn_fwd"] / med["fg_fwd"],
                "bwd_on_fg_vs_own": med["cudnn_bwd_own"] / med["cudnn_bwd_on_fg"],
            }  # fmt: skip
            rows.append(row)
            log(
                f"B{b} H{hq}/{hkv} N{n} D{d} causal={causal}: cuDNN fwd+bwd "
                f"{med['cudnn_fwdbwd']:.4f} ms, flashgen fwd + cuDNN bwd {med['hybrid_fwdbwd']:.4f} "
                f"-> {row['fwdbwd_hybrid_vs_cudnn']:.3f}x; fwd {row['fwd_fg_vs_cudnn']:.3f}x; "
                f"cuDNN bwd on flashgen's lse vs its own {row['bwd_on_fg_vs_own']:.3f}x"
            )
    return rows


def cases(q, k, v, do, causal, scale) -> dict:
    """What `bench` times for one input: name -> callable."""
    oc, lc = cudnn_fwd(q, k, v, causal, scale)
    of, lf = fg_fwd(q, k, v, causal, scale)
    lf4 = lf.unsqueeze(-1)
    return {
        "cudnn_fwd": lambda: cudnn_fwd(q, k, v, causal, scale),
        "fg_fwd": lambda: fg_fwd(q, k, v, causal, scale),
        "cudnn_bwd_own": lambda: cudnn_bwd(do, q, k, v, oc, lc, causal, scale),
        "cudnn_bwd_on_fg": lambda: cudnn_bwd(do, q, k, v, of, lf4, causal, scale),
        "cudnn_fwdbwd": lambda: cudnn_bwd(do, q, k, v, *cudnn_fwd(q, k, v, causal, scale), causal, scale),
        "hybrid_fwdbwd": lambda: hybrid(q, k, v, do, causal, scale),
    }  # fmt: skip


def hybrid(q, k, v, do, causal, scale):
    out, lse = fg_fwd(q, k, v, causal, scale)
    return cudnn_bwd(do, q, k, v, out, lse.unsqueeze(-1), causal, scale)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=".")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rep", type=int, default=20)
    p.add_argument("--no-bench", action="store_true")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:.0f}s] {msg}", flush=True)

    ok = check(log)
    rows = [] if args.no_bench else bench(args, log)
    with open(os.path.join(args.out, "hybrid_probe.json"), "w") as f:
        json.dump({"checks_ok": ok, "rows": rows}, f, indent=1)
    if rows:
        ratios = [r["fwdbwd_hybrid_vs_cudnn"] for r in rows]
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        log(
            f"hybrid fwd+bwd vs cuDNN: geomean {geo:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
