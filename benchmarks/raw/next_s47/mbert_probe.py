"""Session 47: why HF ModernBERT (B4 T2048 d64, right padding) ran 0.73x Inductor at e0ce267
against 1.35x at 638d30c with the same two sites replaced.
Usage: python mbert_probe.py site|model [jit]"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

sys.path.insert(0, ".")
sys.path.insert(0, "benchmarks")
import flashgen  # noqa: E402
from flashgen.kernels import launch as launch_mod  # noqa: E402
from flashgen.kernels import padding  # noqa: E402


def jit_hull():
    """key_hull through Triton's JIT every call (as before 66f3cf0)."""
    launch_mod_direct = launch_mod.direct_device
    launch_mod.direct_device = lambda t, aligned: None
    padding._hull_launches.clear()
    return launch_mod_direct


def host_us(fn, calls=100, rounds=5):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    xs = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        xs.append((time.perf_counter() - t) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(xs)


def site():
    b, h, s, d = 4, 16, 2048, 64
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn_like(q)
    keep = torch.ones(b, s, dtype=torch.bool, device="cuda")
    for i in range(1, b):
        keep[i, s - s * i // (2 * b) :] = False
    mask = torch.as_strided(keep, (b, 1, s, s), (s, 0, 0, 1))  # HF's expanded per-key mask
    saved = jit_hull()
    hull_jit = padding.key_hull(mask).clone()
    print("key_hull jit   :", hull_jit.tolist())
    launch_mod.direct_device = saved
    padding._hull_launches.clear()
    for i in range(4):
        junk = torch.full((b, 4), 7777 + i, dtype=torch.int32, device="cuda")
        del junk
        got = padding.key_hull(mask)
        torch.cuda.synchronize()
        print(f"key_hull direct call {i}:", got.tolist(), "same", torch.equal(got, hull_jit))
    cases = {
        "global": dict(attn_mask=mask),
        "window": dict(attn_mask=mask, window=(64, 64)),
    }
    for name, kw in cases.items():
        ours = lambda kw=kw: flashgen.attention(q, k, v, **kw)  # noqa: E731
        if name == "global":
            ref = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
        else:
            i = torch.arange(s, device="cuda")
            band = (i[:, None] - i[None, :]).abs() <= 64
            wmask = band[None, None] & mask
            ref = lambda wmask=wmask: F.scaled_dot_product_attention(q, k, v, attn_mask=wmask)  # noqa: E731

        def fb(fn):
            return lambda: torch.autograd.grad(fn(), (q, k, v), do)

        def ng(fn):
            def run():
                with torch.no_grad():
                    fn()

            return run

        for mode in ("direct", "jit"):
            saved = jit_hull() if mode == "jit" else None
            for label, a_fn, b_fn in (("fwd", ng(ours), ng(ref)), ("fwd+bwd", fb(ours), fb(ref))):
                ta, tb = [], []
                for _ in range(3):
                    ta.append(do_bench(a_fn, rep=100, return_mode="median"))
                    tb.append(do_bench(b_fn, rep=100, return_mode="median"))
                ma, mb = statistics.median(ta), statistics.median(tb)
                print(
                    f"{name} {mode} {label:8s} ms flashgen {ma:.4f} sdpa {mb:.4f} ({mb / ma:.3f}x)"
                    f"  host us flashgen {host_us(a_fn):.1f} sdpa {host_us(b_fn):.1f}"
                )
            if saved is not None:
                launch_mod.direct_device = saved
                padding._hull_launches.clear()


def profiled(report, runs, modes, timer, rounds, out):
    """hf_padded's timing replaced by a torch.profiler table of 5 forwards per backend."""
    from torch.profiler import ProfilerActivity, profile

    for name in ("flashgen", "inductor"):
        run = modes["fwd"](runs[name])
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                run()
            torch.cuda.synchronize()
        print(f"== {name}: by device time")
        print(
            prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=18, max_name_column_width=70
            )
        )
        print(f"== {name}: by CPU time")
        print(
            prof.key_averages().table(
                sort_by="cpu_time_total", row_limit=25, max_name_column_width=70
            )
        )
    print("hull launches", {k: type(v.fast).__name__ for k, v in padding._hull_launches.items()})
    return 0


def hull_only_jit():
    """key_hull alone launched through Triton's JIT (every other launch plan as it is)."""
    from flashgen.kernels.hull_kernel import key_hull_kernel

    def key_hull(mask):
        if mask.stride(1) != 0 or mask.stride(2) != 0 or mask.shape[-1] >= padding.DENSE_KEYS:
            return None
        batch, _, seq_q, seq_k = mask.shape
        out = torch.empty(batch, 4, dtype=torch.int32, device=mask.device)
        additive = mask.dtype != torch.bool
        hidden, half = padding._thresholds(mask.dtype) if additive else (0.0, 0.0)
        block = min(max(padding.next_pow2(seq_k), 16), 2048)
        keys = mask if additive else mask.view(torch.uint8)
        key_hull_kernel[(batch,)](
            keys, out, mask.stride(0), mask.stride(3), seq_q, seq_k, hidden, half,
            ADDITIVE=additive, DENSE=padding.DENSE_KEYS, BLOCK=block,
        )  # fmt: skip
        return out

    padding.key_hull = key_hull
    import flashgen.runtime.primitives as prim

    prim.key_hull = key_hull


def model(jit, prof=False):
    if jit:
        jit_hull()
        print("every launch plan through the JIT")
    if "hulljit" in sys.argv:
        hull_only_jit()
        print("key_hull alone through the JIT")
    import hf_padded

    if prof:
        import flashgen.bench.harness as harness

        harness.report_backends = profiled

    hf_padded.main(
        ["--family", "modernbert", "--attn", "sdpa", "--batch", "4", "--seq", "2048",
         "--width", "1024", "--heads", "16", "--pad", "right", "--rounds", "3"]
    )  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "site":
        site()
    else:
        model("jit" in sys.argv[2:], "prof" in sys.argv[2:])
