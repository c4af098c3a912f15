"""Session 46: cProfile of flashgen's per-key-mask calls (BERT's B8 H12 T512 d64), forward
without grad and forward+backward with the engine on the calling thread (so the profile sees
the backward), 300 calls each after a warm-up. Usage: python masked_prof.py OUTDIR"""

import cProfile
import pstats
import sys

import torch

sys.path.insert(0, ".")
import flashgen  # noqa: E402

b, h, s, d = 8, 12, 512, 64
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (
    torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    for _ in range(3)
)
do = torch.randn_like(q)
lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
mask = (torch.arange(s, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]


def fwd():
    with torch.no_grad():
        flashgen.attention(q, k, v, attn_mask=mask)


def fwd_bwd():
    torch.autograd.grad(flashgen.attention(q, k, v, attn_mask=mask), (q, k, v), do)


out = sys.argv[1]
with torch.autograd.set_multithreading_enabled(False):
    for name, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        for _ in range(30):
            fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        with open(f"{out}/prof_{name}.txt", "w") as f:
            st = pstats.Stats(prof, stream=f)
            st.sort_stats("tottime").print_stats(40)
            st.sort_stats("cumulative").print_stats(60)
        print(name, "done")
