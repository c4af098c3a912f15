"""Packed variable-length sequences on the GPU (issue 16): bf16 against float64, then speed.

    python benchmarks/varlen.py [--out DIR] [--budget SECONDS] [--no-check]

1. Correctness: `flashgen.attention_varlen` in bf16, forward and the gradients of q, k, v,
   against float64 attention run on each packed sequence alone (odd lengths, one of length 1,
   GQA, causal and not); max abs error relative to the reference's largest entry, bar 2e-2.
2. Speed (triton.testing.do_bench, median, L2 flushed), 16 query heads, 4 kv heads, d 128,
   causal, 16384 packed tokens, forward and forward+backward: the packed call; the same
   sequences as a right-padded batch through `flashgen.attention(key_lengths=...)`; SDPA given
   the equivalent dense block-diagonal causal `attn_mask` [1, 1, T, T] on the packed tensors;
   and the unmasked causal kernel on a batch of equal sequences of the packed set's mean length
   (default family, and the portable one the packed kernels belong to). TFLOP/s are counted on
   the visible query-key pairs (4*D per pair forward, 10*D forward+backward).

Rows are printed and written to DIR/varlen.csv as they are measured.
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import flashgen  # noqa: E402
from flashgen.bench import scripts  # noqa: E402

FIELDS = ["case", "what", "dir", "ms", "pairs", "tflops"]
DOCS_RAGGED = [3001, 517, 1200, 4096, 2048, 35, 1, 1500, 2900, 1086]  # sums to 16384
DOCS_EVEN = [2048] * 8
DEVICE = os.environ.get("VARLEN_DEVICE", "cuda")  # "cpu": a smoke run in the interpreter


def ref_varlen(q, k, v, cu, *, causal):
    """float64 [T, Hq, D], attention within each sequence."""
    q, k, v = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    for b in range(len(cu) - 1):
        s, e = int(cu[b]), int(cu[b + 1])
        qb = q[s:e].transpose(0, 1)
        kb = k[s:e].transpose(0, 1).repeat_interleave(g, 0)
        vb = v[s:e].transpose(0, 1).repeat_interleave(g, 0)
        out[s:e] = sdpa(qb, kb, vb, is_causal=causal).transpose(0, 1)
    return out


def packed(lens, hq, hkv, d, device=DEVICE):
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    t = int(cu[-1])
    q = torch.randn(t, hq, d, device=device, dtype=torch.bfloat16)
    k = torch.randn(t, hkv, d, device=device, dtype=torch.bfloat16)
    v = torch.randn(t, hkv, d, device=device, dtype=torch.bfloat16)
    return q, k, v, cu


def check(causals):
    worst = 0.0
    for causal in causals:
        q, k, v, cu = packed([300, 1, 517, 64, 1000], 8, 2, 128)
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
        out = flashgen.attention_varlen(q, k, v, cu.to(DEVICE), cu.to(DEVICE), causal=causal)
        ref_in = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
        ref = ref_varlen(*ref_in, cu, causal=causal)
        do = torch.randn_like(out)
        out.backward(do)
        ref.backward(do.double())
        errs = {"out": _rel(out, ref)}
        for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), ref_in, strict=True):
            errs["d" + name] = _rel(got, want.grad)
        nan = any(torch.isnan(t).any().item() for t in (out, q.grad, k.grad, v.grad))
        worst = max(worst, *errs.values())
        line = " ".join(f"{n} {e:.2e}" for n, e in errs.items())
        print(f"check causal={causal}: {line} nan={nan}", flush=True)
    print(f"check worst {worst:.2e} (bar 2e-2): {'PASS' if worst <= 2e-2 else 'FAIL'}", flush=True)


def _rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def bench(fn):
    return scripts.timer(DEVICE, 40, warmup_ms=10)(fn)


def fwd_bwd(fn, inputs):
    return scripts.fwd_bwd(fn, inputs)


def pairs_of(lens, causal=True):
    return sum(n * (n + 1) // 2 if causal else n * n for n in lens)


def speed(case, lens, writer, deadline, hq=16, hkv=4, d=128, warm=False):
    q, k, v, cu = packed(lens, hq, hkv, d)
    cu = cu.to(DEVICE)
    n_max, t = max(lens), sum(lens)
    pairs = pairs_of(lens) * hq
    fns = {"packed": lambda: flashgen.attention_varlen(q, k, v, cu, cu, n_max, n_max, causal=True)}
    # the same tensors stored head-major ([H, T, D] memory, a [T, H, D] view): is the
    # [T, H, D] layout's row stride what the packed kernels pay for?
    hq_, hk_, hv_ = (x.transpose(0, 1).contiguous() for x in (q, k, v))  # leaves [H, T, D]
    fns["packed-headmajor"] = lambda: flashgen.attention_varlen(
        hq_.transpose(0, 1),
        hk_.transpose(0, 1),
        hv_.transpose(0, 1),
        cu,
        cu,
        n_max,
        n_max,
        causal=True,
    )
    # the same sequences right-padded to the longest
    pq, pk, pv = (torch.zeros(len(lens), x.shape[1], n_max, d, device=DEVICE,
                              dtype=torch.bfloat16) for x in (q, k, v))  # fmt: skip
    for b, (s, n) in enumerate(zip(cu[:-1].tolist(), lens, strict=True)):
        for dst, src in zip((pq, pk, pv), (q, k, v), strict=True):
            dst[b, :, :n] = src[s : s + n].transpose(0, 1)
    fns["padded-lengths"] = lambda: flashgen.attention(
        pq, pk, pv, causal=True, key_lengths=lens, query_lengths=lens
    )
    # SDPA on the packed tensors with the block-diagonal causal mask
    doc = torch.repeat_interleave(torch.arange(len(lens), device=DEVICE),
                                  torch.tensor(lens, device=DEVICE))  # fmt: skip
    i = torch.arange(t, device=DEVICE)
    mask = ((doc[:, None] == doc[None, :]) & (i[None, :] <= i[:, None]))[None, None]
    # [1, Hq, T, D] copies, k/v heads repeated (no enable_gqa: the efficient backend takes the
    # mask then; its backward then skips the GQA reduction, a little less work than ours)
    sq = q.transpose(0, 1)[None].contiguous()
    sk, sv = (x.transpose(0, 1)[None].repeat_interleave(hq // hkv, 1) for x in (k, v))
    fns["sdpa-mask"] = lambda: sdpa(sq, sk, sv, attn_mask=mask)
    # the unmasked causal kernel on equal sequences of the mean length (same token count)
    n_mean = t // len(lens)
    eq, ek, ev = (torch.randn(len(lens), h, n_mean, d, device=DEVICE, dtype=torch.bfloat16)
                  for h in (hq, hkv, hkv))  # fmt: skip
    fns["plain-causal-mean"] = lambda: flashgen.attention(eq, ek, ev, causal=True)
    plain_pairs = len(lens) * hq * n_mean * (n_mean + 1) // 2
    for direction in ("fwd", "fwd+bwd"):
        for what, fn in fns.items():
            for family in ("", "portable") if what == "plain-causal-mean" else ("",):
                if time.time() > deadline:
                    print(f"budget reached before {case} {what} {direction}", flush=True)
                    return
                os.environ["FLASHGEN_FWD_FAMILY"] = family
                inputs = {"packed": (q, k, v), "packed-headmajor": (hq_, hk_, hv_),
                          "padded-lengths": (pq, pk, pv),
                          "sdpa-mask": (sq, sk, sv), "plain-causal-mean": (eq, ek, ev)}[what]  # fmt: skip
                if direction == "fwd":
                    with torch.no_grad():
                        ms = fn() if warm else bench(fn)
                else:
                    for x in inputs:
                        x.requires_grad_(True)
                    ms = fwd_bwd(fn, inputs)() if warm else bench(fwd_bwd(fn, inputs))
                if warm:
                    continue
                n_pairs = plain_pairs if what == "plain-causal-mean" else pairs
                flops = n_pairs * d * (4 if direction == "fwd" else 10)
                row = {"case": case, "what": what + (f"-{family}" if family else ""),
                       "dir": direction, "ms": f"{ms:.3f}", "pairs": n_pairs,
                       "tflops": f"{flops / ms / 1e9:.0f}"}  # fmt: skip
                writer.write(row)
                print(row, flush=True)
    os.environ["FLASHGEN_FWD_FAMILY"] = ""


def main(argv=None):
    ap = scripts.parser(__doc__, out=".", budget=40.0, checks=True, speed=True)
    ap.add_argument("--check-causal", default="1,0", help="which causal settings to check")
    ap.add_argument("--warm", default="", help="run each timed call of this case once, no timing")
    args = ap.parse_args(argv)
    deadline = time.time() + args.budget
    torch.manual_seed(0)
    meta = scripts.run_meta(DEVICE)
    print(scripts.banner(meta), flush=True)
    if args.warm:
        lens = {"even8x2048": DOCS_EVEN, "ragged10": DOCS_RAGGED}[args.warm]
        speed(args.warm, lens, None, deadline, warm=True)
        print(f"warmed {args.warm}", flush=True)
        return
    if not args.no_check:
        check([c == "1" for c in args.check_causal.split(",")])
    if args.no_speed:
        return
    with scripts.RowWriter(os.path.join(args.out, "varlen.csv"), FIELDS, meta=meta) as writer:
        for case, lens in (("even8x2048", DOCS_EVEN), ("ragged10", DOCS_RAGGED)):
            speed(case, lens, writer, deadline)
    print(f"done, {math.ceil(time.time() - deadline + args.budget)} s", flush=True)
    os.environ.pop("FLASHGEN_FWD_FAMILY", None)


if __name__ == "__main__":
    main()
