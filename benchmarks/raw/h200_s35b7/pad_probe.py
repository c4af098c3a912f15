"""Session 35 B7 (issue 16): cuDNN's forward+backward given key padding as an additive
[B, 1, 1, Sk] bias, against flashgen's boolean key padding and both unmasked (B4 H16 4k d128,
bf16; do_bench medians of three rounds). Run on the device from the repository root:
    . benchmarks/device_env.sh; python3 benchmarks/raw/h200_s35b7/pad_probe.py
(Tidied for lint after the run: the same calls in the same order.)"""

import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import flashgen


def probe(causal: bool) -> dict:
    b, h, n, d = 4, 16, 4096, 128
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    lens = torch.randint(n // 4, n + 1, (b,), generator=torch.Generator().manual_seed(0))
    lens[0] = n
    keep = (torch.arange(n)[None, :] < lens[:, None]).cuda()
    bmask = keep[:, None, None, :]
    amask = torch.zeros(b, 1, 1, n, device="cuda", dtype=torch.bfloat16)
    amask = amask.masked_fill(~bmask, float("-inf"))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def sd(mask, backend):
        def f():
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(
                    qg, kg, vg, attn_mask=mask, is_causal=causal if mask is None else False
                )
            o.backward(do)

        return f

    fns = {
        "cudnn_plain": sd(None, SDPBackend.CUDNN_ATTENTION),
        "ours_boolpad": lambda: flashgen.attention(
            qg, kg, vg, attn_mask=bmask, causal=causal
        ).backward(do),
        "ours_plain": lambda: flashgen.attention(qg, kg, vg, causal=causal).backward(do),
    }
    if not causal:
        fns["cudnn_addpad"] = sd(amask, SDPBackend.CUDNN_ATTENTION)
        fns["effic_addpad"] = sd(amask, SDPBackend.EFFICIENT_ATTENTION)
    ms = {name: [] for name in fns}
    for _ in range(3):
        for name, f in fns.items():
            try:
                ms[name].append(do_bench(f, rep=30, return_mode="median"))
            except Exception as e:  # a backend that refuses the mask
                ms[name].append(float("nan"))
                print(name, "refused:", str(e)[:200])
    return {name: round(statistics.median(t), 4) for name, t in ms.items()}


if __name__ == "__main__":
    torch.manual_seed(0)
    for causal in (False, True):
        print(causal, probe(causal), flush=True)
