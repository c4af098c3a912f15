"""Session 52: cProfile of flashgen's primitive forward op with a key-padding mask, and with a
two-sided window beside it (ModernBERT's global and local layers, B4 H16 N2048 d64, HF's
[B,1,N,N] stride-0 mask view), the GPU held busy (torch.cuda._sleep) so that the host alone is
timed. Prints each case's top functions by cumulative time. Usage: python prof_cases.py OUT_DIR"""

import cProfile
import io
import pstats
import sys

import torch

sys.path.insert(0, ".")
import flashgen.runtime.primitives  # noqa: E402,F401 (registers the primitive ops)


def main(out_dir):
    b, h, n, d = 4, 16, 2048, 64
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = torch.ones(b, n, dtype=torch.bool, device="cuda")
    for i in range(1, b):
        keep[i, n - n * i // (2 * b) :] = False
    mfull = keep[:, None, None, :].expand(b, 1, n, n)
    op = torch.ops.flashgen.attention_fwd
    s = d**-0.5
    cases = {
        "mask": lambda: op(q, k, v, False, s, None, None, "top_left", None, mfull),
        "window": lambda: op(q, k, v, False, s, [64, 64], None, "top_left", None, mfull),
    }
    with torch.no_grad():
        for label, fn in cases.items():
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            for _ in range(5):
                torch.cuda._sleep(int(2e8))
                prof.enable()
                for _ in range(100):
                    fn()
                prof.disable()
                torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(45)
            body = text.getvalue().replace("/work/main/", "")
            with open(f"{out_dir}/prof_{label}.txt", "w") as f:
                f.write(body)
            print(f"== {label}\n" + "\n".join(body.splitlines()[:55]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
