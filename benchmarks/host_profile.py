"""Where the host time of one flashgen forward call goes, by function (needs CUDA).

`host_time.py` gives the totals per call and per layer; this script runs the same launch-bound
call (default 1x1x128x128 bf16, no grad, flashgen's own kernels) many times under cProfile and
prints the functions that cost most, by own time and by cumulative time, so the gap between the
op and the launcher can be located. cProfile adds a fixed cost per Python call, so compare the
rows with each other, not with host_time.py's microseconds.

    python benchmarks/host_profile.py --shape 1,1,128,128 --calls 5000 --top 30
    python benchmarks/host_profile.py --shape 8,12,512,64 --causal --backward --dropout 0.1
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="1,1,128,128", help="B,H,S,D of q, k and v")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--impl", default="flashgen", help="impl= of flashgen.attention ('' = auto)")
    p.add_argument("--grad", action="store_true", help="inputs require grad (forward only)")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout_p of the calls")
    p.add_argument(
        "--backward",
        action="store_true",
        help="profile forward + torch.autograd.grad of q, k, v (implies --grad)",
    )
    args = p.parse_args(argv)

    import torch

    import flashgen

    args.grad = args.grad or args.backward
    b, h, s, d = (int(x) for x in args.shape.split(","))
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=args.grad)
        for _ in range(3)
    )
    do = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    kw = {"causal": args.causal}
    if args.dropout:
        kw["dropout_p"] = args.dropout
    if args.impl:
        kw["impl"] = args.impl

    def calls(n):
        with torch.set_grad_enabled(args.grad):
            for _ in range(n):
                out = flashgen.attention(q, k, v, **kw)
                if args.backward:
                    torch.autograd.grad(out, (q, k, v), do)

    calls(200)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    calls(args.calls)
    prof.disable()
    torch.cuda.synchronize()
    for key in ("tottime", "cumtime"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(args.top)
        mode = "fwd+bwd" if args.backward else "fwd (grad)" if args.grad else "fwd"
        drop = f" dropout_p={args.dropout}" if args.dropout else ""
        print(f"=== {args.shape} causal={args.causal} impl={args.impl!r}{drop} {mode} by {key}")
        print(buf.getvalue())


if __name__ == "__main__":
    main()
