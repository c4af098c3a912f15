"""Session 52: host time with the GPU held busy (torch.cuda._sleep queued first), so that what is
timed is the host's work alone, whatever the GPU's speed: (1) attention calls of the kinds the
compiled HF ModernBERT makes (a key-padding mask as HF's [B,1,N,N] stride-0 view, a two-sided
window beside it), flashgen's composite and primitive ops against SDPA, at ModernBERT's shape
(B4 H16 N2048 d64) and a small one; their GPU time too (do_bench); (2) the compiled ModernBERT
(hf_padded.py's, 2 layers B4 T2048) forward, flashgen's backend against Inductor, interleaved
rounds. Usage: [SHAPES=1] [ROUNDS=4] python host_sleep.py OUT.json"""

import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, ".")
from hf_padded import config, padded_mask  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import flashgen  # noqa: E402
import flashgen.runtime.primitives  # noqa: E402,F401 (registers the primitive ops)

SLEEP = int(2e8)  # ~0.1 s of GPU cycles: longer than any batch of calls timed below


def host_us(fn, n):
    """Host microseconds a call, the GPU busy all along (min of 5 batches of n)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        torch.cuda._sleep(SLEEP)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return min(best), statistics.median(best)


def op_cases(b, h, n, d, window):
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = torch.ones(b, n, dtype=torch.bool, device="cuda")
    for i in range(1, b):
        keep[i, n - n * i // (2 * b) :] = False
    mfull = keep[:, None, None, :].expand(b, 1, n, n)
    op = torch.ops.flashgen.attention_fwd
    s = d**-0.5
    F = torch.nn.functional.scaled_dot_product_attention
    idx = torch.arange(n, device="cuda")
    band = mfull & ((idx[:, None] - idx[None, :]).abs() <= window)
    w = [window, window]
    return {
        "prim plain": lambda: op(q, k, v, False, s),
        "prim mask": lambda: op(q, k, v, False, s, None, None, "top_left", None, mfull),
        "prim mask+window": lambda: op(q, k, v, False, s, w, None, "top_left", None, mfull),
        "composite mask": lambda: flashgen.attention(q, k, v, attn_mask=mfull),
        "sdpa plain": lambda: F(q, k, v),
        "sdpa mask": lambda: F(q, k, v, attn_mask=mfull),
        "sdpa band mask": lambda: F(q, k, v, attn_mask=band),
    }


def main(path):
    import transformers

    res = {"ops": {}, "model": {}}
    with torch.no_grad():
        shapes = ((4, 16, 2048, 64, 64), (4, 2, 256, 64, 64))
        for shape in shapes[: int(os.environ.get("SHAPES", "2"))]:
            for label, fn in op_cases(*shape).items():
                lo, med = host_us(fn, 200)
                gpu = do_bench(fn, warmup=10, rep=100, return_mode="median") * 1e3
                res["ops"][f"{shape} {label}"] = {"host_us": lo, "host_med_us": med, "gpu_us": gpu}
                print(f"{str(shape):22} {label:18} host {lo:7.1f} us (med {med:7.1f})  gpu {gpu:8.1f} us", flush=True)  # fmt: skip
    torch.manual_seed(0)
    cfg = config("modernbert", 1024, 16, 2, 2048)
    model = transformers.AutoModel.from_config(cfg, attn_implementation="sdpa")
    model = model.to("cuda", torch.bfloat16).train()
    ids = torch.randint(1, cfg.vocab_size, (4, 2048), device="cuda")
    mask = padded_mask(4, 2048, "right", "cuda")
    x = model.get_input_embeddings()(ids).detach()
    fns = {}
    for name, backend in (
        ("flashgen", flashgen.backend(fallback="inductor")),
        ("inductor", "inductor"),
    ):
        # (a copy each: Dynamo's cache sits on the module's forward code)
        compiled = torch.compile(copy.deepcopy(model), backend=backend)

        def fwd(compiled=compiled):
            with torch.no_grad():
                return compiled(inputs_embeds=x, attention_mask=mask).last_hidden_state

        for _ in range(3):
            fwd()
        fns[name] = fwd
    torch.cuda.synchronize()
    for r in range(int(os.environ.get("ROUNDS", "4"))):
        for name, fwd in fns.items():
            lo, med = host_us(fwd, 20)
            gpu = do_bench(fwd, warmup=25, rep=200, return_mode="median") * 1e3
            res["model"].setdefault(name, []).append(
                {"host_us": lo, "host_med_us": med, "do_bench_us": gpu}
            )
            print(f"round {r} {name:9} host {lo:7.1f} us (med {med:7.1f})  do_bench {gpu:8.1f} us", flush=True)  # fmt: skip
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
