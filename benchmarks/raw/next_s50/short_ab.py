"""Session 50: the one-launch short backward (`attn_bwd_short`) against the split kernels it
replaces (FLASHGEN_BWD_SHORT=0), GPU time of the backward alone per shape.

For each shape (B, Hq, Hkv, S, D, causal; bf16, random inputs): flashgen's forward, then
`bwd.backward_plain` (the eager path's launcher, config chosen at run time) with the short
kernel and without, each checked against float64 first, then timed by do_bench medians over
ROUNDS alternating readings (plans rebuilt when the setting changes). Writes JSON to argv[1].
The short kernel is forced past the shipped bounds (SHORT_MAX_STEPS, the SM count) for the
shapes outside them (`inside` false in the output), to see whether the bounds may widen.
"""

import dataclasses
import json
import os
import statistics
import sys

import torch
from triton.testing import do_bench

from flashgen.kernels import bwd
from flashgen.kernels.fwd import forward
from flashgen.kernels.reference import attention_ref

SHAPES = [
    (1, 1, 1, 128, 64, True),
    (1, 1, 1, 128, 64, False),
    (4, 16, 16, 128, 64, True),
    (8, 16, 16, 128, 128, False),
    (2, 32, 8, 64, 128, True),
    (1, 16, 16, 256, 64, True),
    (32, 12, 12, 128, 64, False),
    (32, 12, 12, 128, 64, True),
    (8, 32, 8, 128, 128, True),
    (16, 16, 16, 256, 64, True),
    (64, 16, 16, 77, 64, False),
]
ROUNDS = int(os.environ.get("ROUNDS", "5"))


_device = bwd.current_device


def widen(on: bool):
    """Lift the step and program bounds (on) or restore the shipped ones."""
    bwd.SHORT_MAX_STEPS = 1 << 20 if on else 4
    bwd.SHORT_WIDE_STEPS = 1 << 20 if on else 2
    wide = dataclasses.replace(_device(), sm_count=1 << 30)
    bwd.current_device = (lambda: wide) if on else _device


def inside(b, hq, hkv, s):
    steps = (hq // hkv) * -(-s // 64)
    return steps <= 2 or (steps <= 4 and b * hkv <= _device().sm_count)


def grads(setting, q, k, v, do, out, lse, causal):
    os.environ["FLASHGEN_BWD_SHORT"] = setting
    bwd._plans.clear()
    return bwd.backward_plain(
        do, q, k, v, out, lse, causal, q.shape[-1] ** -0.5, None, (True, True, True), False
    )


def main():
    rows = []
    for b, hq, hkv, s, d, causal in SHAPES:
        widen(not inside(b, hq, hkv, s))
        gen = torch.Generator().manual_seed(s * 7 + d)
        q, do = (torch.randn(b, hq, s, d, generator=gen).bfloat16().cuda() for _ in range(2))
        k, v = (torch.randn(b, hkv, s, d, generator=gen).bfloat16().cuda() for _ in range(2))
        out, lse = forward(q, k, v, causal=causal, scale=None)
        kk, vv = (t.repeat_interleave(hq // hkv, 1) for t in (k, v))
        leaves = [t.detach().double().requires_grad_() for t in (q, kk, vv)]
        ref_out, _ = attention_ref(*leaves, causal=causal)
        ref_out.backward(do.double())
        ref = [
            leaves[0].grad,
            *(g.view(b, hkv, hq // hkv, s, d).sum(2) for g in (leaves[1].grad, leaves[2].grad)),
        ]
        err = {}
        for setting in ("1", "0"):
            got = grads(setting, q, k, v, do, out, lse, causal)
            err[setting] = [
                round((g.double() - r).abs().max().item(), 5) for g, r in zip(got, ref, strict=True)
            ]
        times = {"1": [], "0": []}
        for _ in range(ROUNDS):
            for setting in ("1", "0"):
                os.environ["FLASHGEN_BWD_SHORT"] = setting
                bwd._plans.clear()
                args = (do, q, k, v, out, lse, causal, d**-0.5, None, (True, True, True), False)
                times[setting].append(
                    do_bench(
                        lambda a=args: bwd.backward_plain(*a),
                        warmup=20,
                        rep=60,
                        return_mode="median",
                    )
                )
        short, split = (statistics.median(times[x]) for x in ("1", "0"))
        row = {
            "shape": [b, hq, hkv, s, d, causal],
            "inside": inside(b, hq, hkv, s),
            "short_ms": short,
            "split_ms": split,
            "speedup": split / short,
            "err_short": err["1"],
            "err_split": err["0"],
            "readings": times,
        }
        rows.append(row)
        print(
            f"B{b} H{hq}/{hkv} S{s} d{d} {'causal' if causal else 'full'}"
            f" ({'inside' if inside(b, hq, hkv, s) else 'outside'}): short {short * 1e3:.1f} us"
            f" split {split * 1e3:.1f} us -> {split / short:.3f}x; max err short {err['1']} split {err['0']}",
            flush=True,
        )
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
