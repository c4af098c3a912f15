"""The gradient of a learned additive bias on the GPU (issue 16): bf16 against float64, speed.

    python benchmarks/bias_grad.py [--out DIR] [--budget SECONDS] [--no-check] [--warm]

1. Correctness: `flashgen.attention(attn_mask=bias)` with q, k, v and a T5-shaped bias
   [1, H, N, N] requiring grad, causal, bf16, B=2, H=8, N=1003, d=128: out, dq, dk, dv and
   dbias against float64 autograd; max abs error relative to the reference's largest entry,
   bar 2e-2.
2. Speed (triton.testing.do_bench, median, L2 flushed) at B=4, H=16, N=4096, d=128, bf16,
   causal, bias [1, H, N, N]: forward of flashgen with the bias, of SDPA given the same bias
   (with -inf above the diagonal; the backend PyTorch picks) and of flashgen without a mask;
   forward+backward of SDPA and flashgen with the bias requiring grad, and of flashgen with it
   detached (no dbias). TFLOP/s counted on the visible pairs (4*D a pair forward, 10*D
   forward+backward).

Rows are printed and written to DIR/bias_grad.csv as they are measured. `--warm`: run each
timed call once, time nothing (compiles in a parallel process).
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import flashgen  # noqa: E402
from flashgen.bench import scripts  # noqa: E402

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
        "sdpa-bias": (lambda: sdpa(q, k, v, attn_mask=masked), (q, k, v, masked)),
        "flashgen-bias-fixed": (
            lambda: flashgen.attention(q, k, v, attn_mask=fixed, causal=True),
            (q, k, v),
        ),
        "flashgen-bias-grad": (
            lambda: flashgen.attention(q, k, v, attn_mask=bias, causal=True),
            (q, k, v, bias),
        ),
        "flashgen-plain": (lambda: flashgen.attention(q, k, v, causal=True), (q, k, v)),
    }
    plan = [("sdpa-bias", "fwd"), ("flashgen-bias-fixed", "fwd"), ("flashgen-plain", "fwd"),
            ("sdpa-bias", "fwd+bwd"), ("flashgen-bias-grad", "fwd+bwd"),
            ("flashgen-bias-fixed", "fwd+bwd")]  # fmt: skip
    pairs = b * h * n * (n + 1) // 2
    bench = scripts.timer("cuda", 40, warmup_ms=10)
    sdpa_ms = {}
    for what, direction in plan:
        if time.time() > deadline:
            print(f"budget reached before {what} {direction}", flush=True)
            return
        fn, inputs = cases[what]
        run = scripts.fwd_bwd(fn, inputs, grad)
        if direction == "fwd":
            with torch.no_grad():
                ms = fn() if warm else bench(fn)
        else:
            ms = run() if warm else bench(run)
        if warm:
            continue
        if what.startswith("sdpa"):
            sdpa_ms[direction] = ms
        per_pair = 4 if direction == "fwd" else 10
        ref_ms = sdpa_ms.get(direction)
        row = {"what": what, "dir": direction,
               "ms": f"{ms:.3f}", "tflops": f"{pairs * per_pair * d / ms / 1e9:.0f}",
               "vs_sdpa": "" if ref_ms is None else f"{ref_ms / ms:.2f}"}  # fmt: skip
        if writer is not None:
            writer.write(row)
        print(row, flush=True)


def _causal_bias(bias, n):
    """The bias with -inf above the diagonal: SDPA takes is_causal or a mask, not both."""
    hide = torch.ones(n, n, dtype=torch.bool, device=bias.device).triu(1)
    return bias.masked_fill(hide, float("-inf"))


def main(argv=None):
    ap = scripts.parser(__doc__, out=".", budget=20.0, checks=True, speed=True)
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args(argv)
    deadline = time.time() + args.budget
    meta = scripts.run_meta("cuda")
    print(scripts.banner(meta), flush=True)
    if args.warm:
        speed(None, deadline, warm=True)
        print("warmed", flush=True)
        return
    if not args.no_check:
        check()
    if args.no_speed:
        return
    with scripts.RowWriter(os.path.join(args.out, "bias_grad.csv"), FIELDS, meta=meta) as writer:
        speed(writer, deadline)


if __name__ == "__main__":
    main()
