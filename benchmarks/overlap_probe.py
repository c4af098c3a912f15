"""Does the split backward's overlap depend on which pool stream it gets? (needs CUDA; issue 16)

    python benchmarks/overlap_probe.py [--shift K] [--variant attn_mask_bool_pad] [--reps 5]

The split backward runs its dQ kernel on a second stream beside the dK/dV kernel
(`flashgen.kernels.streams`). masks.py read the bool key-padding row's forward+backward at
3.63-3.69 ms in some processes and 4.05-4.08 ms in others, the second exactly the time with the
overlap off (benchmarks/RESULTS.md, session 15 B3-B6). One explanation to test: CUDA maps streams
onto a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), so a side stream that
shares the current stream's queue serialises behind it. PyTorch hands out pool streams round
robin, so which queue the side stream gets depends on how many pool streams the process drew
before it. `--shift K` draws K pool streams before the first backward; a run per K (and one with
CUDA_DEVICE_MAX_CONNECTIONS=32) shows whether the slow reading follows K.

Prints one line: the shift, the wall time of `--reps` do_bench medians of the variant's
forward+backward (ms), and the time with FLASHGEN_BWD_OVERLAP=0 set in-process for comparison.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    p.add_argument("--shift", type=int, default=0, help="pool streams drawn before the backward")
    p.add_argument("--variant", default="attn_mask_bool_pad", help="a masks.py variant name")
    p.add_argument("--shape", default="4,16,4,4096,128", help="b,hq,hkv,n,d")
    p.add_argument("--reps", type=int, default=5, help="do_bench readings (median of each)")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("overlap_probe.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import masks
    from triton.testing import do_bench

    import flashgen

    b, hq, hkv, n, d = (int(x) for x in args.shape.split(","))
    by_name = {v[0]: v for v in masks.variants(b, n, hq)}
    _name, causal, kw, _mk, _cap = by_name[args.variant]
    drawn = [torch.cuda.Stream() for _ in range(args.shift)]  # kept alive: the pool advances
    gen = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
        for h in (hq, hkv, hkv)
    )
    do = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16)

    def run():
        out = flashgen.attention(q, k, v, causal=causal, impl="flashgen", **kw)
        torch.autograd.grad(out, (q, k, v), do)

    on = [do_bench(run, warmup=50, rep=300, return_mode="median") for _ in range(args.reps)]
    os.environ["FLASHGEN_BWD_OVERLAP"] = "0"
    off = do_bench(run, warmup=50, rep=300, return_mode="median")
    del os.environ["FLASHGEN_BWD_OVERLAP"]
    conns = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "default")
    print(f"shift={args.shift} streams_drawn={len(drawn)} max_connections={conns} "
          f"overlap_on_ms={' '.join(f'{t:.4f}' for t in on)} overlap_off_ms={off:.4f}",
          flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
