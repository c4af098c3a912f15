"""Session 46: where flashgen's masked calls beat SDPA given the same mask, by the wall time of
back-to-back calls (host and GPU together: per call, the time of `calls` calls without a sync
between them, then one sync), forward (no grad) and forward+backward, three alternating
rounds, medians. Boolean masks without GQA: per key ([B, 1, 1, S], right padding to 50-100%)
and dense ([B, 1, S, S], causal and padding); "drop" rows: causal with dropout 0.1 and no
mask, as GPT-2 trains (both sides drop in the forward rows too); with --hf, per-key masks as
HF's encoders hand them to SDPA: the [B, 1, S, S] expansion of the [B, 1, 1, S] mask (stride
0 along the rows).
Usage: python masked_sweep.py OUT.csv [--hf]"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
import flashgen  # noqa: E402


def wall_us(fn, calls):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def row(b, h, s, d, kind, out):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn_like(q)
    lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
    keep = torch.arange(s, device="cuda")[None, :] < lengths[:, None]
    if kind == "key":
        mask = keep[:, None, None, :]
        if HF:
            mask = mask.expand(b, 1, s, s)
    elif kind == "dense":
        tri = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
        mask = (tri[None] & keep[:, None, :])[:, None]
    else:  # "drop": causal with dropout 0.1, no mask (GPT-2's attention in training)
        mask = None
    causal, p = (True, 0.1) if kind == "drop" else (False, 0.0)
    ours = lambda: flashgen.attention(q, k, v, attn_mask=mask, causal=causal, dropout_p=p)  # noqa: E731
    ref = lambda: F.scaled_dot_product_attention(  # noqa: E731
        q, k, v, attn_mask=mask, is_causal=causal, dropout_p=p
    )

    def fb(fn):
        return lambda: torch.autograd.grad(fn(), (q, k, v), do)

    def ng(fn):
        def run():
            with torch.no_grad():
                fn()

        return run

    flops = 4.0 * b * h * s * s * d
    for label, a, r in (("fwd", ng(ours), ng(ref)), ("fwd+bwd", fb(ours), fb(ref))):
        for fn in (a, r):
            for _ in range(5):
                fn()
        one = wall_us(a, 3)
        calls = max(10, min(200, int(20000 / max(one, 1.0))))
        ta, tr = [], []
        for _ in range(3):
            ta.append(wall_us(a, calls))
            tr.append(wall_us(r, calls))
        ma, mr = statistics.median(ta), statistics.median(tr)
        line = f"{kind},{b},{h},{s},{d},{label},{flops / 1e9:.2f},{ma:.1f},{mr:.1f},{mr / ma:.3f}"
        print(line, flush=True)
        out.write(line + "\n")


HF = "--hf" in sys.argv[2:]
print("card:", torch.cuda.get_device_name(), "(HF's expanded masks)" if HF else "")
with open(sys.argv[1], "w") as out:
    out.write("mask,b,h,s,d,dir,gflop_fwd,flashgen_us,sdpa_us,sdpa_over_flashgen\n")
    for kind, b, h, s, d in [
        ("key", 8, 12, 512, 64), ("key", 32, 12, 512, 64), ("key", 8, 16, 1024, 64),
        ("key", 4, 16, 2048, 64), ("key", 8, 16, 2048, 64), ("key", 2, 16, 4096, 64),
        ("key", 4, 16, 4096, 64), ("key", 8, 16, 1024, 128), ("key", 4, 16, 2048, 128),
        ("key", 2, 16, 4096, 128), ("dense", 8, 16, 1024, 64), ("dense", 4, 16, 2048, 64),
        ("dense", 8, 16, 2048, 64), ("dense", 4, 16, 2048, 128),
        ("drop", 8, 12, 1024, 64), ("drop", 8, 16, 2048, 64), ("drop", 4, 16, 2048, 128),
    ]:  # fmt: skip
        row(b, h, s, d, kind, out)
