"""The key-padding forward under Nsight Compute (session 14, B3): three calls of
flashgen.attention's forward at masks.py's shape (B4 H16/4 4k d128 bf16, full) with the same
right padding given as a boolean [B, 1, 1, N] mask ("mask") or as key_lengths ("lengths"), so
that `ncu --launch-skip 2` profiles a warm one of each. Usage: python3 ncu_pad.py mask|lengths"""

import sys

import torch

import flashgen

kind = sys.argv[1]
b, hq, hkv, n, d = 4, 16, 4, 4096, 128
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (
    torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    for h in (hq, hkv, hkv)
)
lens = torch.tensor([n, n // 2, 3 * n // 4, 5 * n // 8], device="cuda")
keep = torch.arange(n, device="cuda")[None, :] < lens[:, None]
kw = {"attn_mask": keep[:, None, None, :]} if kind == "mask" else {"key_lengths": lens}
with torch.no_grad():
    for _ in range(3):
        flashgen.attention(q, k, v, impl="flashgen", **kw)
torch.cuda.synchronize()
