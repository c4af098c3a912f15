"""Session 55: where a masked call's backward spends its host time on the GPU (issue 15's
"never slower" for masked training: BERT's site read forward+backward 453 against SDPA's 203 µs
of host time in session 46, a CPU stub of the backward op only ~41 µs).

Sites: BERT's (B8 H12 N512 d64) and ModernBERT's (B4 H16 N2048 d64), bf16, HF's stride-0
[B, 1, N, N] key-padding mask (expanded on the GPU). Host µs a call (200 calls without a sync,
median of 5 rounds, the GPU held busy first so launches queue): the primitive ops called
directly (forward; backward with the forward's out and lse: no autograd engine), the composite
op's forward+backward through autograd, the retained backward alone, SDPA's of each; then
cProfile of 300 direct backward-op calls (top 30 by own time).

Usage: python masked_bwd.py OUT.json"""

import cProfile
import io
import json
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
import flashgen  # noqa: E402
from flashgen.runtime import primitives  # noqa: E402,F401  (registers the ops)

OPF = torch.ops.flashgen.attention_fwd.default
OPB = torch.ops.flashgen.attention_bwd.default


def busy():
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(30):
        a = a @ a
        a = a / a.norm()


def host_us(fn, calls=200, rounds=5):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    xs = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        busy()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        xs.append((time.perf_counter() - t) / calls * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(xs), 1)


def site(name, b, h, s, d):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))  # fmt: skip
    lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
    keep = torch.arange(s, device="cuda")[None, :] < lengths[:, None]
    mask = keep[:, None, None, :].expand(b, 1, s, s)  # HF's view
    scale = d**-0.5
    out, lse = OPF(q, k, v, False, scale, attn_mask=mask)
    do = torch.randn_like(out)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    res = {}
    res["op_fwd"] = host_us(lambda: OPF(q, k, v, False, scale, attn_mask=mask))
    res["op_bwd"] = host_us(
        lambda: OPB(do, q, k, v, out, lse, False, scale, True, True, True, attn_mask=mask)
    )
    res["sdpa_fwd"] = host_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))

    def fb(fn):
        return lambda: torch.autograd.grad(fn(), (qg, kg, vg), do)

    ours = lambda: flashgen.attention(qg, kg, vg, attn_mask=mask)  # noqa: E731
    theirs = lambda: F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask)  # noqa: E731
    res["ours_fwd_bwd"] = host_us(fb(ours))
    res["sdpa_fwd_bwd"] = host_us(fb(theirs))
    for label, fn in (("ours", ours), ("sdpa", theirs)):
        o = fn()
        res[f"{label}_bwd_retained"] = host_us(
            lambda o=o: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)
        )
        res[f"{label}_fwd_grad"] = host_us(fn)
    with torch.autograd.set_multithreading_enabled(False):
        res["ours_fwd_bwd_1thread"] = host_us(fb(ours))
        res["sdpa_fwd_bwd_1thread"] = host_us(fb(theirs))
    print(name, res, flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        OPB(do, q, k, v, out, lse, False, scale, True, True, True, attn_mask=mask)
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
    print(buf.getvalue()[:6000], flush=True)
    return res


def main():
    results = {
        "bert": site("bert B8 H12 N512 d64", 8, 12, 512, 64),
        "modernbert": site("modernbert B4 H16 N2048 d64", 4, 16, 2048, 64),
    }
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
