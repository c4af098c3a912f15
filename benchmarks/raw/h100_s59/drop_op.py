"""Session 59: attention dropout p=0.1 at small sizes, the op alone (bf16, [B, H, N, 64]):
flashgen.attention(dropout_p=0.1) against F.scaled_dot_product_attention(dropout_p=0.1) with
PyTorch's own backend choice, forward and forward+backward, alternating do_bench medians, 3
rounds. Where HF Llama/BERT training with SDPA attention read below Inductor at 3.2-6.4 GFLOP a
site (whole-model timings, host-noisy), this says whether the op itself trails."""

import json
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import flashgen

out = sys.argv[1]
rows = []
for causal in (True, False):
    for b, n in ((4, 512), (8, 512), (16, 512), (32, 512), (8, 1024), (4, 2048)):
        q, k, v = (
            torch.randn(b, 12, n, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        g = torch.randn_like(q)
        fns = {
            "flashgen": lambda q=q, k=k, v=v, c=causal: flashgen.attention(
                q, k, v, causal=c, dropout_p=0.1
            ),
            "sdpa": lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(
                q, k, v, is_causal=c, dropout_p=0.1
            ),
        }
        res = {}
        for mode in ("fwd", "fwd_bwd"):
            reads = {name: [] for name in fns}
            for _ in range(3):
                for name, fn in fns.items():
                    f = fn
                    if mode == "fwd_bwd":

                        def f(fn=fn, q=q, k=k, v=v, g=g):
                            return torch.autograd.grad(fn(), (q, k, v), g)

                    reads[name].append(do_bench(f, warmup=25, rep=100, return_mode="median"))
            med = {name: sorted(r)[1] for name, r in reads.items()}
            res[mode] = {
                "ms": med,
                "readings": reads,
                "ratio_sdpa_over_flashgen": med["sdpa"] / med["flashgen"],
            }
        row = {"causal": causal, "b": b, "h": 12, "n": n, "d": 64, **res}
        rows.append(row)
        print(
            f"causal={causal} B{b} N{n}: fwd {res['fwd']['ms']['flashgen'] * 1e3:.1f} us vs sdpa {res['fwd']['ms']['sdpa'] * 1e3:.1f} "
            f"({res['fwd']['ratio_sdpa_over_flashgen']:.3f}x)  fwd+bwd {res['fwd_bwd']['ms']['flashgen'] * 1e3:.1f} vs "
            f"{res['fwd_bwd']['ms']['sdpa'] * 1e3:.1f} ({res['fwd_bwd']['ratio_sdpa_over_flashgen']:.3f}x)",
            flush=True,
        )
with open(out, "w") as fh:
    json.dump(
        {"torch": torch.__version__, "card": torch.cuda.get_device_name(), "rows": rows},
        fh,
        indent=1,
    )
