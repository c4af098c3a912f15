"""Host time around flashgen's backward node (issue 15).

    python benchmarks/bwd_thread.py [--shape 1,1,128,64] [--calls 300] [--rounds 5] [--out F]

Why: `host_time.py` reads flashgen's forward+backward at 1.3-1.7x SDPA's on launch-bound inputs,
while the forward with a gradient and the retained backward, timed alone, explain only part of
the difference; session 38 found the rest in the autograd engine's hand-off of a CUDA graph's
backward to its device thread and back, larger for flashgen than for SDPA. This script splits
one `torch.autograd.grad` call of flashgen's into three spans, timed with `perf_counter` on the
calling thread and inside flashgen's backward node (`_PlainAttention.backward`, wrapped):

  enter   from the call of `torch.autograd.grad` to the node's backward starting
  body    the node's backward itself (Python, kernel launches)
  leave   from the backward returning to `torch.autograd.grad` returning

each with the engine's device threads on (PyTorch's default) and off
(`torch.autograd.set_multithreading_enabled(False)`: the backward runs on the calling thread),
and beside it the whole call for SDPA and for SDPA under a Python identity node (a trivial
`autograd.Function`, wrapped the same way: what any Python node's hand-off costs). Medians
over rounds of `--calls` iterations, one iteration per forward+backward, alternating cases
round by round. If `body` reads longer on the device thread than on the calling thread, the
extra is flashgen's own work there; if `enter`/`leave` read longer than the identity node's,
the engine's hand-off costs flashgen's node more.

On the CPU (`--device cpu`, Triton's interpreter) it only smoke-tests itself: the engine runs
CPU graphs on the calling thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="1,1,128,64", help="B,H,S,D of q, k and v")
    ap.add_argument("--calls", type=int, default=300, help="iterations per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per case")
    ap.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (smoke)")
    ap.add_argument("--out", default=None, help="JSON file to write")
    return ap.parse_args(argv)


class Spans:
    """Timestamps taken inside a wrapped backward: (start, end) of its last call."""

    def __init__(self):
        self.start = self.end = 0.0

    def wrap(self, fn):
        def backward(ctx, *grads):
            self.start = time.perf_counter()
            result = fn(ctx, *grads)
            self.end = time.perf_counter()
            return result

        return staticmethod(backward)


def make_cases(shape, dev):
    import torch
    import torch.nn.functional as F

    import flashgen
    from flashgen.bench.harness import identity_node
    from flashgen.runtime import autograd as fg_autograd

    b, h, s, d = shape
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    qg, kg, vg = (torch.randn(b, h, s, d, device=dev, dtype=dtype, requires_grad=True)
                  for _ in range(3))  # fmt: skip
    do = torch.randn(b, h, s, d, device=dev, dtype=dtype)
    ours_spans, ident_spans = Spans(), Spans()
    cls = fg_autograd._PlainAttention
    cls.backward = ours_spans.wrap(cls.backward)

    Identity = identity_node()
    Identity.backward = ident_spans.wrap(Identity.backward)

    def ours():
        return flashgen.attention(qg, kg, vg, impl="flashgen")

    def sdpa():
        return F.scaled_dot_product_attention(qg, kg, vg)

    def sdpa_ident():
        return Identity.apply(F.scaled_dot_product_attention(qg, kg, vg))

    def step(forward, spans):
        def run():
            out = forward()
            t0 = time.perf_counter()
            torch.autograd.grad(out, (qg, kg, vg), do)
            t1 = time.perf_counter()
            if spans is None:
                return t1 - t0, None, None, None
            return t1 - t0, spans.start - t0, spans.end - spans.start, t1 - spans.end

        return run

    return {
        "flashgen": step(ours, ours_spans),
        "sdpa": step(sdpa, None),
        "sdpa+identity": step(sdpa_ident, ident_spans),
    }


def measure(cases, calls, rounds, sync):
    import torch

    results = {}
    modes = (("threads", True), ("calling_thread", False))
    for run in cases.values():  # warm-up, both modes
        for _, on in modes:
            with torch.autograd.set_multithreading_enabled(on):
                for _ in range(20):
                    run()
    sync()
    for _ in range(rounds):
        for mode, on in modes:
            for name, run in cases.items():
                spans = []
                with torch.autograd.set_multithreading_enabled(on):
                    sync()
                    for _ in range(calls):
                        spans.append(run())
                    sync()
                per = results.setdefault(f"{name} [{mode}]", {})
                for i, part in enumerate(("total", "enter", "body", "leave")):
                    values = [x[i] for x in spans if x[i] is not None]
                    if values:
                        per.setdefault(part, []).append(statistics.median(values) * 1e6)
    return {
        case: {part: round(statistics.median(v), 2) for part, v in parts.items()}
        for case, parts in results.items()
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bwd_thread.py needs a CUDA GPU (--device cpu only smoke-tests it)", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    shape = tuple(int(x) for x in args.shape.split(","))
    from flashgen.runtime import autograd as fg_autograd

    original = fg_autograd._PlainAttention.__dict__["backward"]
    try:
        table = measure(make_cases(shape, args.device), args.calls, args.rounds, sync)
    finally:  # (the wrapper off again: a test or a caller goes on in this process)
        fg_autograd._PlainAttention.backward = original
    print(f"µs per forward+backward's autograd.grad (medians), shape {shape}")
    for case, parts in table.items():
        print(f"  {case:32s} " + "  ".join(f"{k} {v:8.2f}" for k, v in parts.items()))
    if args.out:
        report = {
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu (smoke)",
            "torch": torch.__version__,
            "shape": list(shape),
            "calls": args.calls,
            "rounds": args.rounds,
            "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "cases": table,
        }
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
