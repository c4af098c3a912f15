"""The mask tensors' portable forward under Nsight Compute (session 13, B3): three calls of
flashgen's forward at masks.py's shape (B4 H16/4 4k d128 bf16) with the [1, H, N, N] additive
bias (causal) or HF's [B, 1, N, N] boolean mask, so that `ncu --launch-skip 2` profiles a warm
one. Usage: python3 ncu_mask.py bias|bool"""

import math
import sys

import torch

from flashgen.kernels import fwd
from flashgen.kernels.validate import expand_mask

kind = sys.argv[1]
b, hq, hkv, n, d = 4, 16, 4, 4096, 128
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (
    torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    for h in (hq, hkv, hkv)
)
if kind == "bias":
    mask, causal = torch.randn(1, hq, n, n, device="cuda", dtype=torch.bfloat16), True
else:
    lens = torch.tensor([n, n // 2, n // 3, 3 * n // 4], device="cuda")
    keep = torch.arange(n, device="cuda")[None, :] < lens[:, None]
    tri = torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
    mask, causal = tri[None, None] & keep[:, None, None, :], False
full = expand_mask(mask, q, k)
for _ in range(3):
    fwd.forward(q, k, v, causal=causal, scale=1 / math.sqrt(d), mask=full)
torch.cuda.synchronize()
