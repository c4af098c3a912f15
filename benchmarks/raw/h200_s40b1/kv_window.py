"""Session 40's new routes timed against what PyTorch runs for the same mask (needs CUDA).

Each row: flashgen.attention with the structure the backend now proves, against
F.scaled_dot_product_attention given the equivalent boolean attn_mask (what the eager model
runs, and what the backend ran before: the mask read as a tensor, or Inductor), bf16, median
ms by triton.testing.do_bench, the two alternating over --rounds rounds; the output of each
checked against SDPA's first (max abs difference printed).
  decode_w     one query row over a KV cache of SK keys, causal window W (bottom-right): the
               decode kernels on the window's last keys
  spec_w       8 query rows (a speculative draft), the same window: the forward kernels' band
  chunk_w      a 1024-row prefill chunk continuing a cache, the same window
  band2        a two-sided band |i - j| < W at equal lengths (no causal): the windowed kernel
  kvpad        a KV cache's causal & key-padding mask, 8 rows: decode kernels, bottom-right
               offset and the per-key mask
Usage: python kv_window.py [--rounds 3] > kv_window.txt
"""

import argparse
import statistics

import torch
import torch.nn.functional as F
import triton

import flashgen


def sdpa_mask(sq, sk, kind, w, device, pad=None):
    i = torch.arange(sk - sq, sk, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    keep = j <= i  # (bottom-right causal: the queries are the last sq positions)
    if kind == "band2":
        keep = (j - i).abs() < w
    elif w:
        keep = keep & (j > i - w)
    if pad is not None:
        keep = keep & pad[:, None, None, :]
    return keep


def row(name, b, hq, hkv, sq, sk, d, w, rounds, kind="window"):
    dev = "cuda"
    q = torch.randn(b, hq, sq, d, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, sk, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    pad = None
    if kind == "kvpad":
        pad = torch.ones(b, sk, dtype=torch.bool, device=dev)
        pad[1:, : sk // 4] = False  # left padding on all but the first entry
    mask = sdpa_mask(sq, sk, kind, w, dev, pad)

    def ours():
        if kind == "band2":
            return flashgen.attention(q, k, v, window=(w - 1, w - 1))
        if kind == "kvpad":
            return flashgen.attention(q, k, v, causal=True, causal_align="bottom_right",
                                      attn_mask=pad[:, None, None, :])  # fmt: skip
        return flashgen.attention(q, k, v, causal=True, causal_align="bottom_right", window=w)

    def theirs():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=hq != hkv)

    diff = (ours().float() - theirs().float()).abs().max().item()
    a, t = [], []
    for _ in range(rounds):
        a.append(triton.testing.do_bench(ours, return_mode="median"))
        t.append(triton.testing.do_bench(theirs, return_mode="median"))
    fa, ft = statistics.median(a), statistics.median(t)
    print(f"{name} b={b} h={hq}/{hkv} sq={sq} sk={sk} d={d} w={w}: flashgen {fa:.4f} ms, "
          f"sdpa+mask {ft:.4f} ms, {ft / fa:.2f}x; max diff {diff:.2e}; rounds {a} / {t}",
          flush=True)  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    r = args.rounds
    for b, sk in ((1, 16384), (8, 16384), (1, 65536)):
        row("decode_w", b, 32, 8, 1, sk, 128, 4096, r)
        row("spec_w", b, 32, 8, 8, sk, 128, 4096, r)
    row("chunk_w", 1, 32, 8, 1024, 16384, 128, 4096, r)
    row("chunk_w", 4, 32, 8, 1024, 8192, 128, 2048, r)
    for n in (4096, 16384):
        row("band2", 2, 16, 16, n, n, 128, 512, r, kind="band2")
    for b, sk in ((8, 4096), (32, 2048)):
        row("kvpad", b, 32, 8, 8, sk, 128, None, r, kind="kvpad")


if __name__ == "__main__":
    main()
