"""Session 66's probe: the gradients `flashgen.attention` gives a row that a huge finite
additive bias hides entirely (every key of it carries finfo(float32).min, as a batch entry
that is all padding does under a per-key mask), against float64 eager, with a loss that reads
every row. The forward is eager's (a uniform row); the kernels give such a row no gradient
(their log-sum-exp is stored as +inf: README, `attn_mask`), where eager gives q, k and v one.

Usage: TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/raw/cpu_s66/hidden_row_grad.py
"""

import math

import torch

import flashgen

B, H, T, D = 2, 2, 16, 16
FILL = torch.finfo(torch.float32).min

g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3))
keep = torch.ones(B, T, dtype=torch.bool)
keep[0, 11:] = False  # right padding
keep[1, :] = False  # an entry that is all padding
for shape in ("per key", "dense"):
    if shape == "per key":
        mask = torch.where(keep[:, None, None, :], 0.0, FILL)
    else:
        mask = torch.where(keep[:, None, :, None] & keep[:, None, None, :], 0.0, FILL)
    out = flashgen.attention(q, k, v, causal=False, attn_mask=mask)
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = torch.softmax(qd @ kd.transpose(-2, -1) / math.sqrt(D) + mask.double(), -1) @ vd
    do = torch.randn(out.shape, generator=g)
    got = torch.autograd.grad(out, (q, k, v), do)
    want = torch.autograd.grad(ref, (qd, kd, vd), do.double())
    print(f"{shape}: forward error {(out.double() - ref).abs().max().item():.1e}")
    for name, a, b in zip("qkv", got, want, strict=True):
        err = (a.double() - b).abs().amax(dim=(1, 2, 3)).tolist()
        print(
            f"  d{name}: error per batch entry {err[0]:.1e} / {err[1]:.1e}; entry 1 (all "
            f"padding) largest got {a[1].abs().max().item():.2f}, float64 {b[1].abs().max().item():.2f}"
        )
