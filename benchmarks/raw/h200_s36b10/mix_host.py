"""Session 36 B10 (issue 15): host time of a training call through the mix, beside SDPA's.

host_time.py's method (a 1x1x128x64 bf16 input, so small that the GPU waits on the host: each
round times `--calls` back-to-back forward+backward calls with perf_counter, no sync inside;
rounds alternate between the cases; medians), for: SDPA's own forward+backward (its default
backend), the op on cuDNN both ways (route's launch-bound branch switched off, records naming
cuDNN), and the op taking the mix (flashgen's forward, cuDNN's backward on it: `winner` and
the training-margin check patched to choose it). What the mix costs the host beyond SDPA is what
the host rule's 50 µs margin for calls with a backward stands for.
    python mix_host.py [--rounds 9] [--calls 200]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.append(os.getcwd())

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flashgen  # noqa: E402
from flashgen.bench import scripts  # noqa: E402
from flashgen.runtime import vendor  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    q, k, v, do = scripts.inputs(1, 1, 1, 128, 128, 64, seed=0)
    vendor.launch_bound = lambda q, k: False
    vendor._forward_pays_in_training = lambda q, k, causal: True
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    picks = {"op_cudnn": ("sdpa_cudnn", "sdpa_cudnn"), "op_mix": ("flashgen", "sdpa_cudnn")}

    def op(name):
        fwd, bwd = picks[name]
        vendor.winner = lambda q, k, v, causal, backward=None: bwd if backward else fwd

        def run():
            out = flashgen.attention(*leaves, causal=True)
            return torch.autograd.grad(out, leaves, do)

        return run

    def sdpa():
        out = F.scaled_dot_product_attention(*leaves, is_causal=True)
        return torch.autograd.grad(out, leaves, do)

    cases = {"sdpa": sdpa, "op_cudnn": op("op_cudnn"), "op_mix": op("op_mix")}
    ref = [g.float() for g in sdpa()]
    for name in ("op_cudnn", "op_mix"):
        fn = op(name)  # sets winner for this case
        got = [g.float() for g in fn()]
        err = max((a - b).abs().max().item() for a, b in zip(got, ref, strict=True))
        print(name, "max grad diff vs SDPA", f"{err:.2e}", flush=True)
    per = {name: [] for name in cases}
    for r in range(args.rounds):
        for name in list(cases) if r % 2 == 0 else list(reversed(cases)):
            fn = op(name) if name != "sdpa" else sdpa
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            host = (time.perf_counter() - t0) / args.calls * 1e6
            torch.cuda.synchronize()
            per[name].append(host)
    med = {name: round(statistics.median(x), 1) for name, x in per.items()}
    print("host µs a forward+backward call (medians):", json.dumps(med))
    print("over SDPA:", json.dumps({n: round(med[n] / med["sdpa"], 3) for n in med}))
    with open(os.path.join(os.environ.get("OUT", "."), "mix_host.json"), "w") as f:
        json.dump({"median_us": med, "readings_us": per}, f, indent=1)


if __name__ == "__main__":
    main()
