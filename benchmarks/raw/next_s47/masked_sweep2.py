"""Session 47: the masked sweep again where session 46's thresholds have no rows (between 6 and
26 GFLOP per key, head dim 128 below 69, dense masks by size, masks with dropout), with the
key range launched directly (66f3cf0). Per call the wall time of back-to-back calls (host and
GPU together), three alternating rounds, medians; SDPA given the same mask over flashgen (> 1:
flashgen faster). Kinds: key (a [B, 1, 1, S] right-padding mask), hfkey (its [B, 1, S, S]
expansion, as HF's encoders hand it to SDPA), dense (causal and padding, [B, 1, S, S]), and
keydrop / densedrop (the same with dropout 0.1, both sides dropping).
--final: the rows that set MASKED_MIN_FLOPS again after the block lists' kernel (dense) and
per-key rows near the thresholds. --dense1k: dense masks of 1k x 1k scores (below
block_mask.MIN_SCORES: no block lists), with --min-scores N to move that bound. --additive
(session 47, for the next device time): the dense rows as additive bf16 masks (0 / -inf), for
choice.MASKED_MIN_FLOPS_ADDITIVE.
Usage: python masked_sweep2.py OUT.csv [--final | --dense1k [--min-scores N] | --additive]"""

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


def row(kind, b, h, s, d, out):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn_like(q)
    lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
    keep = torch.arange(s, device="cuda")[None, :] < lengths[:, None]
    if kind.startswith("dense") or kind.startswith("adddense"):
        tri = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
        mask = (tri[None] & keep[:, None, :])[:, None]
        if kind.startswith("adddense"):  # the same mask as an additive one (0 / -inf)
            mask = torch.zeros(mask.shape, device="cuda").masked_fill(~mask, float("-inf"))
            mask = mask.to(torch.bfloat16)
    else:
        mask = keep[:, None, None, :]
        if kind == "hfkey":
            mask = mask.expand(b, 1, s, s)
    p = 0.1 if kind.endswith("drop") else 0.0
    ours = lambda: flashgen.attention(q, k, v, attn_mask=mask, dropout_p=p)  # noqa: E731
    ref = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # noqa: E731

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


ROWS = [
    *[(kind, *shape) for kind in ("key", "hfkey") for shape in (
        (8, 12, 512, 64), (16, 12, 512, 64), (4, 16, 1024, 64), (24, 12, 512, 64),
        (32, 12, 512, 64), (2, 16, 1024, 128), (4, 16, 1024, 128), (8, 16, 1024, 128),
    )],
    *[("dense", *shape) for shape in (
        (4, 16, 1024, 64), (8, 16, 1024, 64), (2, 16, 2048, 64), (16, 16, 1024, 64),
        (4, 16, 2048, 64), (6, 16, 2048, 64), (8, 16, 2048, 64), (4, 16, 1024, 128),
        (2, 16, 2048, 128), (4, 16, 2048, 128),
    )],
    ("keydrop", 16, 12, 512, 64), ("keydrop", 8, 16, 1024, 64), ("keydrop", 4, 16, 2048, 64),
    ("densedrop", 8, 16, 1024, 64), ("densedrop", 8, 16, 2048, 64),
]  # fmt: skip

FINAL = [
    ("key", 24, 12, 512, 64), ("key", 32, 12, 512, 64), ("key", 8, 16, 1024, 64),
    ("hfkey", 24, 12, 512, 64), ("hfkey", 8, 16, 1024, 64), ("key", 4, 16, 1024, 128),
    *[r for r in ROWS if r[0].startswith("dense")],
]  # fmt: skip

ADDITIVE = [
    ("adddense", 4, 16, 1024, 64), ("adddense", 8, 16, 1024, 64), ("adddense", 16, 16, 1024, 64),
    ("adddense", 4, 16, 2048, 64), ("adddense", 8, 16, 2048, 64), ("adddense", 4, 16, 2048, 128),
    ("adddensedrop", 8, 16, 1024, 64),
]  # fmt: skip

DENSE_1K = [
    ("dense", 4, 16, 1024, 64), ("dense", 8, 16, 1024, 64), ("dense", 16, 16, 1024, 64),
    ("dense", 4, 16, 1024, 128), ("densedrop", 8, 16, 1024, 64),
]  # fmt: skip

if __name__ == "__main__":
    print("card:", torch.cuda.get_device_name())
    with open(sys.argv[1], "w") as out:
        out.write("mask,b,h,s,d,dir,gflop_fwd,flashgen_us,sdpa_us,sdpa_over_flashgen\n")
        rows = FINAL if "--final" in sys.argv[2:] else ROWS
        if "--dense1k" in sys.argv[2:]:
            rows = DENSE_1K
        if "--additive" in sys.argv[2:]:
            rows = ADDITIVE
        if "--min-scores" in sys.argv[2:]:
            from flashgen.kernels import block_mask

            block_mask.MIN_SCORES = int(sys.argv[sys.argv.index("--min-scores") + 1])
            print("block lists from", block_mask.MIN_SCORES, "scores")
        for r in rows:
            row(*r, out)
