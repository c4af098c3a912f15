"""Session 52: where the flashgen-compiled HF ModernBERT forward's extra host time goes
(mbert_host.py: 1.28 ms a call against Inductor's 0.73 ms). A torch.profiler of 20 no-grad
forwards with CPU activity, per backend: the ops by CPU time (self and total); then flashgen's
attention op alone, timed on the host, on small inputs of the same kinds (plain, a per-key bool
mask expanded from [B,1,1,N] and [B,1,N,N] stride-0 views, that with a two-sided window).
Usage: python mbert_ops.py OUT_PREFIX"""

import sys
import time

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, ".")
from hf_padded import config, padded_mask  # noqa: E402

import flashgen  # noqa: E402


def host_us(fn, n=300):
    for _ in range(20):
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
    import transformers

    torch.manual_seed(0)
    cfg = config("modernbert", 1024, 16, 2, 2048)
    model = transformers.AutoModel.from_config(cfg, attn_implementation="sdpa")
    model = model.to("cuda", torch.bfloat16).train()
    ids = torch.randint(1, cfg.vocab_size, (4, 2048), device="cuda")
    mask = padded_mask(4, 2048, "right", "cuda")
    x = model.get_input_embeddings()(ids).detach()
    for name, backend in (
        ("flashgen", flashgen.backend(fallback="inductor")),
        ("inductor", "inductor"),
    ):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=backend)

        def fwd(compiled=compiled):
            with torch.no_grad():
                return compiled(inputs_embeds=x, attention_mask=mask).last_hidden_state

        for _ in range(5):
            fwd()
        torch.cuda.synchronize()
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(20):
                fwd()
            torch.cuda.synchronize()
        for key in ("self_cpu_time_total", "cpu_time_total"):
            table = prof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=90)
            with open(f"{prefix}_{name}_{key}.txt", "w") as f:
                f.write(table)
            if key == "self_cpu_time_total":
                print(f"== {name} by {key}\n" + "\n".join(table.splitlines()[:30]), flush=True)
    # the op alone, small inputs (the GPU faster than the host): host us a call
    b, h, n, d = 4, 2, 256, 64
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = torch.ones(b, n, dtype=torch.bool, device="cuda")
    keep[1:, n // 2 :] = False
    m4 = keep[:, None, None, :]
    mfull = keep[:, None, None, :].expand(b, 1, n, n)
    idx = torch.arange(n, device="cuda")
    band = (idx[:, None] - idx[None, :]).abs() <= 64
    mband = mfull & band
    F = torch.nn.functional.scaled_dot_product_attention
    cases = {
        "flashgen plain": lambda: flashgen.attention(q, k, v),
        "flashgen mask [B,1,1,N]": lambda: flashgen.attention(q, k, v, attn_mask=m4),
        "flashgen mask [B,1,N,N] view": lambda: flashgen.attention(q, k, v, attn_mask=mfull),
        "flashgen mask + window": lambda: flashgen.attention(
            q, k, v, attn_mask=m4, window=(64, 64)
        ),
        "flashgen mask [B,1,N,N] dense band": lambda: flashgen.attention(q, k, v, attn_mask=mband),
        "sdpa plain": lambda: F(q, k, v),
        "sdpa mask [B,1,1,N]": lambda: F(q, k, v, attn_mask=m4),
    }
    for label, fn in cases.items():
        with torch.no_grad():
            print(f"host {host_us(fn):7.1f} us  {label}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
