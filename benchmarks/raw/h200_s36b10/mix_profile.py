"""Session 36 B10 (issue 15): where the mix's host time goes (cProfile over 300 forward+backward
calls of mix_host.py's op_mix and op_cudnn cases, 1x1x128x64 bf16; top functions by own time)."""

import cProfile
import io
import os
import pstats
import sys

sys.path.append(os.getcwd())

import torch  # noqa: E402

import flashgen  # noqa: E402
from flashgen.bench import scripts  # noqa: E402
from flashgen.runtime import vendor  # noqa: E402

q, k, v, do = scripts.inputs(1, 1, 1, 128, 128, 64, seed=0)
vendor.launch_bound = lambda q, k: False
vendor._forward_pays_in_training = lambda q, k, causal: True
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
for fwd in ("flashgen", "sdpa_cudnn"):
    vendor.winner = lambda q, k, v, causal, backward=None, f=fwd: "sdpa_cudnn" if backward else f

    def run():
        out = flashgen.attention(*leaves, causal=True)
        return torch.autograd.grad(out, leaves, do)

    for _ in range(20):
        run()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        run()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
    print("=== forward", fwd, "(300 calls)")
    print(s.getvalue()[:6000])
