"""Session 36 B9 (issue 15): would training calls gain from the mix below the 50 µs margin?

Since session 36 a forward alone takes flashgen's record from a 10 µs expected saving, a call
with a backward (and the mix's forward) from 50 µs (`vendor.host_margin_s`). At four grid rows
whose forward saving lies between the two, this times forward+backward, alternating rounds:
SDPA on cuDNN, the op as shipped (cuDNN both ways there), and the op with the mix taken
(`vendor._forward_pays_in_training` patched to say yes: flashgen's forward, cuDNN's backward);
and each one's host time a call (perf_counter around one call issued on an idle GPU, no sync
inside: what the Python side costs, the GPU draining after).
    python mix_margin.py [--rounds 15]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.append(os.getcwd())

import torch  # noqa: E402

import flashgen  # noqa: E402
from flashgen.bench import harness, scripts  # noqa: E402
from flashgen.runtime import autograd, vendor  # noqa: E402

SHAPES = [
    (16, 16, 16, 1024, 128, False),
    (16, 32, 32, 1024, 64, False),
    (4, 32, 32, 4096, 64, True),
    (16, 32, 8, 1024, 128, True),
]
REAL_PAYS = vendor._forward_pays_in_training


def calls(q, k, v, do, causal, scale):
    sets = {
        name: [t.clone().requires_grad_() for t in (q, k, v)] for name in ("cudnn", "op", "mix")
    }

    def op(leaves):
        return flashgen.attention(*leaves, causal=causal, scale=scale)

    def mixed():
        vendor._forward_pays_in_training = lambda q, k, causal: True
        try:
            return op(sets["mix"])
        finally:
            vendor._forward_pays_in_training = REAL_PAYS

    return {
        "cudnn": scripts.fwd_bwd(
            lambda: harness.sdpa("sdpa_cudnn", *sets["cudnn"], causal=causal, scale=scale),
            sets["cudnn"],
            do,
        ),
        "op": scripts.fwd_bwd(lambda: op(sets["op"]), sets["op"], do),
        "mix": scripts.fwd_bwd(mixed, sets["mix"], do),
    }


def which_ran(shape, fns):
    """Print, per timed function, whether cuDNN's backward ran on flashgen's forward (the mix)."""
    used = []
    real = autograd.cudnn_backward
    autograd.cudnn_backward = lambda *a: used.append(1) or real(*a)
    try:
        for name, fn in fns.items():
            used.clear()
            fn()
            torch.cuda.synchronize()
            print(shape, name, "cuDNN backward on flashgen's forward:", bool(used), flush=True)
    finally:
        autograd.cudnn_backward = real


def host_us(fn, n=25):
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    time_fn = scripts.timer("cuda", 20)
    rows = []
    for shape in SHAPES:
        b, hq, hkv, n, d, causal = shape
        scale = d**-0.5
        q, k, v, do = scripts.inputs(b, hq, hkv, n, n, d, seed=0)
        fns = calls(q, k, v, do, causal, scale)
        which_ran(shape, fns)
        ms = {name: [] for name in fns}
        host = {name: [] for name in fns}
        for r in range(args.rounds):
            order = list(fns) if r % 2 == 0 else list(reversed(fns))
            for name in order:
                ms[name].append(time_fn(fns[name]))
            if r % 5 == 0:
                for name in order:
                    host[name].append(host_us(fns[name]))
        med = {k_: round(statistics.median(v_), 4) for k_, v_ in ms.items()}
        hmed = {k_: round(statistics.median(v_), 1) for k_, v_ in host.items()}
        paired = {
            name: round(
                statistics.median(c / x for c, x in zip(ms["cudnn"], ms[name], strict=True)), 4
            )
            for name in ("op", "mix")
        }
        row = dict(shape=list(shape), ms=med, host_us=hmed, paired_vs_cudnn=paired, readings=ms)
        rows.append(row)
        print(
            shape,
            "ms",
            json.dumps(med),
            "paired cuDNN/x",
            json.dumps(paired),
            "host µs",
            json.dumps(hmed),
            flush=True,
        )
    with open(os.path.join(os.environ.get("OUT", "."), "mix_margin.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
