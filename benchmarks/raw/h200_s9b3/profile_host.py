"""cProfile of flashgen.attention's forward (impl="flashgen", no grad) on launch-bound inputs,
head dim 64 (portable family) and 128 (Hopper family): where the host time goes (issue 15)."""

import cProfile
import io
import pstats
import sys

import torch

import flashgen

for shape in ((1, 1, 128, 64), (1, 1, 128, 128)):
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with torch.no_grad():
        for _ in range(100):
            flashgen.attention(q, k, v, impl="flashgen")
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            flashgen.attention(q, k, v, impl="flashgen")
        prof.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    print(f"==== {shape}\n{text.getvalue()}")
sys.stdout.flush()
