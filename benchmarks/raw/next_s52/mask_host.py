"""Session 52: the host time of flashgen's primitive forward op with a key-padding mask (HF's
[B,1,N,N] stride-0 view, as the compiled ModernBERT calls it) against the same call without a
mask: host us a call (small inputs, the GPU faster than the host), then a cProfile of 2000 masked
calls, flashgen's functions by own and cumulative time. Usage: python mask_host.py OUT_PREFIX"""

import cProfile
import io
import pstats
import sys
import time

import torch

sys.path.insert(0, ".")
import flashgen.runtime.primitives  # noqa: E402,F401 (registers the ops)


def host_us(fn, n=500):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return min(best)


def main(prefix):
    b, h, n, d = 4, 2, 256, 64
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = torch.ones(b, n, dtype=torch.bool, device="cuda")
    keep[1:, n // 2 :] = False
    mfull = keep[:, None, None, :].expand(b, h, n, n)
    idx = torch.arange(n, device="cuda")
    band = ((idx[:, None] - idx[None, :]).abs() <= 64).expand(b, h, n, n)
    op = torch.ops.flashgen.attention_fwd
    s = d**-0.5
    cases = {
        "plain": lambda: op(q, k, v, False, s),
        "mask": lambda: op(q, k, v, False, s, None, None, "top_left", None, mfull),
        "mask+window": lambda: op(q, k, v, False, s, [64, 64], None, "top_left", None, mfull),
        "band mask": lambda: op(q, k, v, False, s, None, None, "top_left", None, band),
        "sdpa mask": lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mfull
        ),
    }
    with torch.no_grad():
        for label, fn in cases.items():
            print(f"host {host_us(fn):7.1f} us  {label}", flush=True)
        for label in ("mask", "plain"):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(2000):
                cases[label]()
            prof.disable()
            torch.cuda.synchronize()
            for key in ("tottime", "cumulative"):
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats(key).print_stats(40)
                text = out.getvalue()
                with open(f"{prefix}_{label}_{key}.txt", "w") as f:
                    f.write(text)
                if label == "mask":
                    print(f"== {label} by {key}\n" + "\n".join(text.splitlines()[:48]))


if __name__ == "__main__":
    main(sys.argv[1])
