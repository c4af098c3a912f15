"""The gradient of a learned additive bias on the GPU (issue 16): bf16 against float64, speed.

    python benchmarks/bias_grad.py [--out DIR] [--budget SECONDS] [--no-check] [--warm]

1. Correctness: `flashgen.attention(attn_mask=bias)` with q, k, v and a T5-shaped bias
   [1, H, N, N] requiring grad, causal, bf16, B=2, H=8, N=1003, d=128: out, dq, dk, dv and
   dbias against float64 autograd; max abs error relative to the reference's largest entry,
   bar 2e-2.
2. Speed (triton.testing.do_bench, median, L2 flushed), forward+backward at B=4, H=16, N=4096,
   d=128, bf16, causal, bias [1, H, N, N]: flashgen with the bias requiring grad; flashgen with
   the bias detached (no dbias); SDPA given the same bias requiring grad (the backend PyTorch
   picks); flashgen without any mask. TFLOP/s counted on the visible pairs (10*D a pair).

Rows are printed and written to DIR/bias_grad.csv as they are measured. `--warm`: run each
timed call once, time nothing (compiles in a parallel process).
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import torch
import triton
from torch.nn.functional import scaled_dot_product_attention as sdpa

import flashgen

FIELDS = ["what", "dir", "ms", "tflops", "vs_sdpa"]


def ref(q, k, v, bias, causal):
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5 + bias
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def check():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 8, 1003, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    bias = torch.randn(1, 8, 1003, 1003, device="cuda", dtype=torch.bfloat16)
    leaves = [t.requires_grad_() for t in (q, k, v, bias)]
    out = flashgen.attention(q, k, v, attn_mask=bias, causal=True)
    do = torch.randn_like(out)
    got = (out, *torch.autograd.grad(out, leaves, do))
    leaves64 = [t.detach().double().cpu().requires_grad_() for t in leaves]
    want = ref(*leaves64, True)
    exp = (want, *torch.autograd.grad(want, leaves64, do.double().cpu()))
    worst = 0.0
    for name, g, e in zip(("out", "dq", "dk", "dv", "dbias"), got, exp, strict=True):
        err = ((g.double().cpu() - e).abs().max() / e.abs().max()).item()
        nan = bool(torch.isnan(g).any())
        worst = max(worst, err)
        print(f"check {name}: {err:.2e} shape {tuple(g.shape)} nan={nan}", flush=True)
    print(f"check worst {worst:.2e} (bar 2e-2): {'PASS' if worst <= 2e-2 else 'FAIL'}", flush=True)


def speed(writer, deadline, warm=False, b=4, h=16, n=4096, d=128):
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    bias = torch.randn(1, h, n, n, device="cuda", dtype=torch.bfloat16)
    for t in (q, k, v):
        t.requires_grad_()
    fixed = bias.detach().clone()
    masked = _causal_bias(fixed, n).requires_grad_()  # SDPA's one mask argument, a leaf
    bias.requires_grad_()
    grad = torch.randn_like(q)
    cases = {
        "sdpa-bias-grad": (lambda: sdpa(q, k, v, attn_mask=masked)),
        "flashgen-bias-grad": (lambda: flashgen.attention(q, k, v, attn_mask=bias, causal=True)),
        "flashgen-bias-fixed": (lambda: flashgen.attention(q, k, v, attn_mask=fixed, causal=True)),
        "flashgen-plain": (lambda: flashgen.attention(q, k, v, causal=True)),
    }
    pairs = b * h * n * (n + 1) // 2
    sdpa_ms = None
    for what, fn in cases.items():
        if time.time() > deadline:
            print(f"budget reached before {what}", flush=True)
            return
        inputs = {"flashgen-bias-grad": (q, k, v, bias), "sdpa-bias-grad": (q, k, v, masked)}
        inputs = inputs.get(what, (q, k, v))

        def run(fn=fn, inputs=inputs):
            for t in inputs:
                t.grad = None
            fn().backward(grad)

        if warm:
            run()
            continue
        ms = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
        sdpa_ms = ms if what.startswith("sdpa") else sdpa_ms
        row = {"what": what, "dir": "fwd+bwd", "ms": f"{ms:.3f}",
               "tflops": f"{pairs * 10 * d / ms / 1e9:.0f}",
               "vs_sdpa": "" if sdpa_ms is None else f"{sdpa_ms / ms:.2f}"}  # fmt: skip
        writer.writerow(row)
        print(row, flush=True)


def _causal_bias(bias, n):
    """The bias with -inf above the diagonal: SDPA takes is_causal or a mask, not both."""
    hide = torch.ones(n, n, dtype=torch.bool, device=bias.device).triu(1)
    return bias.masked_fill(hide, float("-inf"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args()
    deadline = time.time() + args.budget
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    if args.warm:
        speed(None, deadline, warm=True)
        print("warmed", flush=True)
        return
    if not args.no_check:
        check()
    if args.no_speed:
        return
    with open(os.path.join(args.out, "bias_grad.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        speed(writer, deadline)


if __name__ == "__main__":
    main()
