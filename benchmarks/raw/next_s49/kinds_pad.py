"""Session 49: the split and hopper backward kinds on key-padding masks, alternating in one
process (bwd.backward with kind=, the mask's key hull as bounds, rows_whole as the op passes
it), forward output from flashgen's forward. Right padding, each entry keeps 50-100% of its keys
(seeded), boolean and additive (HF's finfo.min) masks, bf16. Prints one CSV line per case:
mask,causal,b,h,n,d,split_ms,hopper_ms,split_over_hopper (medians of 3 alternating do_bench
readings of the backward alone). Usage: python kinds_pad.py OUT.csv [--grid | --lengths | --windows]
(--grid: head dims 64/128, causal both ways, both mask kinds, 512-4096 keys at 8k tokens;
--lengths: key lengths without a mask, right and left padding, head dim 64, 1k-4k keys;
--windows: causal windows of 1024 and 256 keys and a two-sided one of 256 + 256, alone and
with a boolean key-padding mask, both head dims, 1k and 2k keys)"""

import functools
import statistics
import sys

import torch
from triton.testing import do_bench

from flashgen.kernels import bwd
from flashgen.kernels.fwd import forward
from flashgen.kernels.padding import bounds as seq_bounds
from flashgen.kernels.padding import key_hull

CASES = [  # (mask, causal, b, h, n, d)
    ("bool", False, 4, 16, 2048, 64),
    ("bool", False, 8, 16, 1024, 64),
    ("bool", False, 2, 16, 4096, 64),
    ("add", False, 4, 16, 2048, 64),
    ("bool", True, 4, 16, 2048, 64),
    ("bool", False, 4, 16, 2048, 128),
    ("bool", True, 4, 16, 2048, 128),
]


GRID = [
    (mask, causal, b, 16, n, d)
    for d in (64, 128)
    for causal in (False, True)
    for mask in ("bool", "add")
    for b, n in ((16, 512), (8, 1024), (4, 2048), (2, 4096))
]


LENGTHS = [
    (kind, causal, b, 16, n, 64)
    for causal in (False, True)
    for kind in ("len", "lenleft")
    for b, n in ((8, 1024), (4, 2048), (2, 4096))
]


WINDOWS = [
    (kind, causal, b, 16, n, d, window)
    for d in (64, 128)
    for causal, window in ((True, (1024, 0)), (True, (256, 0)), (False, (256, 256)))
    for kind in ("win", "bool")
    for b, n in ((8, 1024), (4, 2048))
]


def main(path, grid=False):
    lines = ["mask,causal,b,h,n,d,split_ms,hopper_ms,split_over_hopper"]
    table = {"--grid": GRID, "--lengths": LENGTHS, "--windows": WINDOWS}.get(grid, CASES)
    for kind, causal, b, h, n, d, *win in table:
        window = win[0] if win else None
        gen = torch.Generator().manual_seed(0)
        q, k, v, do = (
            torch.randn(b, h, n, d, generator=gen).to(torch.bfloat16).cuda() for _ in range(4)
        )
        lens = (n * (0.5 + 0.5 * torch.rand(b, generator=gen))).long().clamp(1, n)
        keep = torch.arange(n)[None, :] < lens[:, None]
        if kind == "win":  # a window alone
            out, lse = forward(q, k, v, causal=causal, scale=None, window=window)
            kw = dict(causal=causal, scale=d**-0.5, window=window)
        elif kind in ("len", "lenleft"):  # key lengths alone (flashgen.attention's key_lengths)
            side = "left" if kind == "lenleft" else "right"
            sb = seq_bounds(b, n, n, lens, None, side, "cuda")
            out, lse = forward(q, k, v, causal=causal, scale=None, bounds=sb)
            kw = dict(causal=causal, scale=d**-0.5, bounds=sb)
        else:
            if kind == "bool":
                m = keep
            else:
                low = torch.finfo(torch.bfloat16).min
                m = torch.zeros(b, n, dtype=torch.bfloat16).masked_fill(~keep, low)
            mask = m.cuda()[:, None, None, :].expand(b, h, n, n)
            hull = key_hull(mask)
            out, lse = forward(
                q, k, v, causal=causal, scale=None, bounds=hull, mask=mask, window=window
            )
            kw = dict(causal=causal, scale=d**-0.5, bounds=hull, mask=mask, rows_whole=True)
            if window is not None:
                kw["window"] = window
        args = (do, q, k, v, out, lse)
        runs = {
            x: functools.partial(bwd.backward, *args, kind=x, **kw) for x in ("split", "hopper")
        }
        got = {x: [] for x in runs}
        for f in runs.values():
            f()
        for _ in range(3):
            for x, f in runs.items():
                got[x].append(do_bench(f, warmup=25, rep=150, return_mode="median"))
        s, hp = (statistics.median(got[x]) for x in ("split", "hopper"))
        tag = kind if window is None else f"{kind} window {window[0]}/{window[1]}"
        line = f"{tag},{causal},{b},{h},{n},{d},{s:.4f},{hp:.4f},{s / hp:.3f}"
        print(line, flush=True)
        lines.append(line)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], grid=sys.argv[2] if len(sys.argv) > 2 else None)
