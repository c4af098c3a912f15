"""Session 52: session 51's profile (raw/h100_s51) showed HF ModernBERT's flashgen-compiled
forward (2 layers, B4 T2048) spends 0.95 ms in kernels in every round while do_bench reads
1.1-2.2 ms: the host is the limit. This measures the host side of one forward for the flashgen
backend and for Inductor: the time a call takes to return with the GPU idle (median of 30), the
do_bench reading, and a cProfile of 30 calls (top functions by own time and by cumulative time).
Usage: python mbert_host.py OUT_PREFIX"""

import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, ".")
from hf_padded import config, padded_mask  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import flashgen  # noqa: E402


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
        host = []
        for _ in range(30):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fwd()
            host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        bench = [do_bench(fwd, warmup=25, rep=200, return_mode="median") for _ in range(3)]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(30):
            fwd()
        prof.disable()
        torch.cuda.synchronize()
        print(f"== {name}: host {statistics.median(host):.3f} ms (min {min(host):.3f}), "
              f"do_bench {', '.join(f'{b:.3f}' for b in bench)} ms", flush=True)  # fmt: skip
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(30)
            text = s.getvalue()
            with open(f"{prefix}_{name}_{key}.txt", "w") as f:
                f.write(text)
            if key == "tottime":
                print("\n".join(text.splitlines()[:45]))


if __name__ == "__main__":
    main(sys.argv[1])
