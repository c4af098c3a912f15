"""Where the time of a masked forward+backward goes, kernel by kernel (needs CUDA; issue 16).

    python benchmarks/mask_kernels.py [--only NAME,...] [--shape b,hq,hkv,n,d] [--iters 5]

`masks.py` gives each mask kind's forward+backward time against the unmasked kernels'; this
script says which kernel makes the difference. For the unmasked call ("plain", of each
causality) and every variant of `masks.py` (the same kwargs, the same default shape), it runs
`--iters` forward+backward calls of `flashgen.attention(..., impl="flashgen")` under
torch.profiler after two warm-up calls and prints each GPU kernel's mean time per call (µs),
its share of the call and the kernel's name (which names the spec: `attn_fwd_d128_causallen_...`,
`attn_bwd_dq_tma`, ...). Times are device times of the kernels alone (no host gaps). `--wall`
adds each call's wall time (do_bench median, ms): below the kernels' sum where kernels overlap
(the split backward's dQ kernel on a second stream, `flashgen.kernels.streams`), above it where
the GPU waits for the host.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import masks  # noqa: E402  (the variants and their kwargs)

import flashgen  # noqa: E402


def kernel_times(fn, iters: int) -> dict[str, float]:
    """Mean device µs per call of each kernel `fn` launches."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            totals[evt.name] += evt.device_time
    return {name: us / iters for name, us in totals.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    p.add_argument("--only", default="", help="comma-separated masks.py variant names")
    p.add_argument("--shape", default="4,16,4,4096,128", help="b,hq,hkv,n,d")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--wall", action="store_true", help="also time each call (do_bench median)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("mask_kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    b, hq, hkv, n, d = (int(x) for x in args.shape.split(","))
    chosen = masks.variants(b, n, hq)
    if args.only:
        by_name = {v[0]: v for v in chosen}
        chosen = [by_name[name] for name in args.only.split(",") if name in by_name]
    gen = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
        for h in (hq, hkv, hkv)
    )
    do = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16)
    rows = [("plain_full", False, {}), ("plain_causal", True, {})]
    rows += [(name, causal, kw) for name, causal, kw, _mk, _cap in chosen]
    for name, causal, kw in rows:

        def run(causal=causal, kw=kw):
            out = flashgen.attention(q, k, v, causal=causal, impl="flashgen", **kw)
            torch.autograd.grad(out, (q, k, v), do)

        try:
            times = kernel_times(run, args.iters)
        except Exception as exc:  # one failing variant does not end the run
            print(f"{name}: ERROR {type(exc).__name__}: {exc}", flush=True)
            continue
        total = sum(times.values())
        wall = ""
        if args.wall:
            from triton.testing import do_bench

            wall = f", wall {do_bench(run, warmup=50, rep=300, return_mode='median'):.4f} ms"
        print(
            f"{name} (causal={causal}): {total:.1f} µs of kernels per forward+backward{wall}",
            flush=True,
        )
        for kname, us in sorted(times.items(), key=lambda kv: -kv[1]):
            print(f"  {us:9.1f} µs {us / total:6.1%}  {kname[:110]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
