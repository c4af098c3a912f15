"""One masked forward under Nsight Compute (session 14, B1): three calls of flashgen.attention's
forward at masks.py's shape (B4 H16/4 4k d128 bf16, causal) so that `ncu --launch-skip 2`
profiles a warm one. Usage: python3 ncu_attn.py drop|softcap|plain"""

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
kw = {"drop": {"dropout_p": 0.1}, "softcap": {"softcap": 30.0}, "plain": {}}[kind]
with torch.no_grad():
    for _ in range(3):
        flashgen.attention(q, k, v, causal=True, impl="flashgen", **kw)
torch.cuda.synchronize()
