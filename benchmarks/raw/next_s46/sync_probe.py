"""Session 46: does a masked flashgen call synchronise with the device? Runs each case once to
warm up, then once under torch.cuda.set_sync_debug_mode("error") (a synchronising CUDA call
raises with its traceback), forward and forward+backward."""

import sys
import traceback

import torch

sys.path.insert(0, ".")
import flashgen  # noqa: E402


def case(b, h, s, d, kind):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        for _ in range(3)
    )
    lengths = torch.randint(s // 2, s + 1, (b,), device="cuda", generator=gen)
    keep = torch.arange(s, device="cuda")[None, :] < lengths[:, None]
    if kind == "key":
        mask = keep[:, None, None, :]
    else:
        tri = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
        mask = (tri[None] & keep[:, None, :])[:, None]
    do = torch.randn_like(q)
    for label in ("fwd", "fwd+bwd"):

        def run(label=label):
            if label == "fwd":
                with torch.no_grad():
                    flashgen.attention(q, k, v, attn_mask=mask)
            else:
                with torch.autograd.set_multithreading_enabled(False):
                    torch.autograd.grad(flashgen.attention(q, k, v, attn_mask=mask), (q, k, v), do)

        run()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            run()
            print(f"{kind} {b}x{h}x{s} d{d} {label}: no sync")
        except RuntimeError:
            print(f"{kind} {b}x{h}x{s} d{d} {label}: SYNC")
            traceback.print_exc(limit=-8)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()


case(8, 16, 1024, 64, "key")
case(8, 12, 512, 64, "key")
case(4, 16, 2048, 64, "dense")
case(4, 16, 2048, 128, "key")
