"""Session 46: BERT's (B8 H12 T512 d64) and nn.Transformer's (B8 H16 1k d64) masked attention
alone, flashgen against SDPA given the same mask: GPU time (do_bench median, alternating, 3
rounds) and host time (perf_counter over 200 calls without a sync), forward and forward+backward.
Why: hf_padded.py read BERT under the backend at 0.80x / 0.83x Inductor on the H100 (638d30c).
Usage: python masked_small.py"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

sys.path.insert(0, ".")
import flashgen  # noqa: E402


def host_us(fn, calls=200, rounds=5):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    xs = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        xs.append((time.perf_counter() - t) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(xs)


def case(name, b, h, s, d, causal, kind):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn_like(q)
    lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
    keep = torch.arange(s, device="cuda")[None, :] < lengths[:, None]  # [B, S] visible keys
    if kind == "key":
        mask = keep[:, None, None, :]
    else:  # a dense [B, 1, S, S] mask: causal and padding (nn.Transformer's decoder)
        tri = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
        mask = (tri[None] & keep[:, None, :])[:, None]
        causal = False
    ours = lambda: flashgen.attention(q, k, v, causal=causal, attn_mask=mask)  # noqa: E731
    ref = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # noqa: E731
    with torch.no_grad():
        a, r = ours().float(), ref().float()
        rows = keep.any(-1)
        err = (a - r).abs().max().item()
    print(f"{name}: max err vs SDPA {err:.3e} (rows all visible: {bool(rows.all())})")

    def fb(fn):
        def run():
            torch.autograd.grad(fn(), (q, k, v), do)

        return run

    def nograd(fn):
        def run():
            with torch.no_grad():
                fn()

        return run

    for label, a_fn, b_fn in (("fwd", nograd(ours), nograd(ref)), ("fwd+bwd", fb(ours), fb(ref))):
        ta, tb = [], []
        for _ in range(3):
            ta.append(do_bench(a_fn, rep=100, return_mode="median"))
            tb.append(do_bench(b_fn, rep=100, return_mode="median"))
        ma, mb = statistics.median(ta), statistics.median(tb)
        ha, hb = host_us(a_fn), host_us(b_fn)
        print(
            f"  {label:8s} gpu ms flashgen {ma:.4f} sdpa {mb:.4f} (sdpa/flashgen {mb / ma:.3f}x)"
            f"  host us flashgen {ha:.1f} sdpa {hb:.1f}"
        )


print("card:", torch.cuda.get_device_name())
case("bert B8 H12 T512 d64, per-key bool", 8, 12, 512, 64, False, "key")
case("transformer B8 H16 1k d64, per-key bool", 8, 16, 1024, 64, False, "key")
case("transformer B8 H16 1k d64, dense causal+padding bool", 8, 16, 1024, 64, True, "dense")
