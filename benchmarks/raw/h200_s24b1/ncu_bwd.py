"""One warm backward under Nsight Compute (session 24, B1; session 20 B3's script with the
head dim as an argument): three forward+backward calls of flashgen.attention so that
`ncu --launch-skip 2 --launch-count 1` profiles a warm backward kernel, at B4 H16 4k d128 or
B4 H32 4k d64 bf16. The backward kind comes from FLASHGEN_BWD_KIND (hopper: the Gluon kernel
attn_bwd_ws); `cudnn` runs SDPA's cuDNN backend instead, for its backward kernel beside ours.
Usage: python3 ncu_bwd.py causal|full 64|128 [cudnn]"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashgen

causal = sys.argv[1] == "causal"
d = int(sys.argv[2])
vendor = len(sys.argv) > 3 and sys.argv[3] == "cudnn"
b, h, n = (4, 16, 4096) if d == 128 else (4, 32, 4096)
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (
    torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
    for _ in range(3)
)
do = torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
for _ in range(3):
    if vendor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        out = flashgen.attention(q, k, v, causal=causal, impl="flashgen")
    torch.autograd.grad(out, (q, k, v), do)
torch.cuda.synchronize()
