"""Session 51: why HF ModernBERT's flashgen forward reads 0.99 ms in some rounds and 1.3-1.9 ms
in others (benchmarks/raw/h100_s51/README.md). The model of hf_padded.py (B4 T2048 width 1024,
16 heads, right padding, bf16), compiled with flashgen's backend only; each of ROUNDS rounds
takes a do_bench reading of the no-grad forward, then profiles 10 forwards: every kernel's
device time a call (summed by name), the sum of all kernels against the wall time a call (a
gap that grows is the host, kernels that all grow are the clocks, one that grows alone is that
kernel), and the SM clock. Usage: python mbert_prof.py OUT.json"""

import json
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, ".")
from hf_padded import config, padded_mask  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import flashgen  # noqa: E402

ROUNDS = 8


def clock() -> str:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader"],
        capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


def main(path):
    import transformers

    torch.manual_seed(0)
    cfg = config("modernbert", 1024, 16, 2, 2048)
    model = transformers.AutoModel.from_config(cfg, attn_implementation="sdpa")
    model = model.to("cuda", torch.bfloat16).train()
    ids = torch.randint(1, cfg.vocab_size, (4, 2048), device="cuda")
    mask = padded_mask(4, 2048, "right", "cuda")
    x = model.get_input_embeddings()(ids).detach()
    compiled = torch.compile(model, backend=flashgen.backend(fallback="inductor"))

    def fwd():
        with torch.no_grad():
            return compiled(inputs_embeds=x, attention_mask=mask).last_hidden_state

    for _ in range(3):
        fwd()
    torch.cuda.synchronize()
    rounds = []
    for r in range(ROUNDS):
        ms = do_bench(fwd, warmup=25, rep=200, return_mode="median")
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for _ in range(10):
                fwd()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) / 10 * 1e3
        kernels: dict[str, float] = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kernels[e.name] = kernels.get(e.name, 0.0) + e.device_time / 10 / 1e3
        total = sum(kernels.values())
        top = sorted(kernels.items(), key=lambda kv: -kv[1])[:8]
        rounds.append({"do_bench_ms": ms, "wall_ms": wall, "kernels_ms": total,
                       "clock": clock(), "top": top})  # fmt: skip
        print(f"round {r}: do_bench {ms:.3f} ms, wall {wall:.3f} ms, kernels {total:.3f} ms, "
              f"clock {rounds[-1]['clock']}", flush=True)  # fmt: skip
        for name, t in top[:5]:
            print(f"    {t:.3f} ms  {name[:110]}")
    print("do_bench median over rounds:", statistics.median(r["do_bench_ms"] for r in rounds))
    with open(path, "w") as f:
        json.dump(rounds, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
