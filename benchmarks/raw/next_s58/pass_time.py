"""Session 58's compile-time check (CPU): how much of a model's first compiled call is the
flashgen backend's own graph pass (finding and replacing attention), timed inside the backend,
beside the whole first call. The pass is timed by wrapping each entry of
`flashgen.compile.backend.PASSES`; `--profile N` also prints the pass's N costliest functions
(cProfile, cumulative).

Usage: TRITON_INTERPRET=1 TORCHINDUCTOR_CACHE_DIR=<fresh dir> python pass_time.py LAYERS
[sdpa|eager] [--profile N]
"""

import cProfile
import pstats
import sys
import time

import torch
import transformers

from flashgen.compile import backend as fg_backend

layers = int(sys.argv[1])
attn = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else "sdpa"
top = int(sys.argv[sys.argv.index("--profile") + 1]) if "--profile" in sys.argv else 0

spent = []
profiler = cProfile.Profile() if top else None


def timed(graph_pass):
    def run(*args, **kwargs):
        t = time.perf_counter()
        if profiler:
            profiler.enable()
        try:
            return graph_pass(*args, **kwargs)
        finally:
            if profiler:
                profiler.disable()
            spent.append(time.perf_counter() - t)

    return run


fg_backend.PASSES[:] = [timed(p) for p in fg_backend.PASSES]
cfg = transformers.LlamaConfig(
    vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
)  # fmt: skip
cfg._attn_implementation = attn
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(cfg)
ids = torch.randint(0, 96, (2, 64))
compiled = torch.compile(model, backend="flashgen")
t = time.perf_counter()
compiled(ids).logits.sum().backward()
first = time.perf_counter() - t
print(
    f"llama {layers} layers {attn}: first call (forward+backward) {first:.2f} s, the pass "
    f"{sum(spent):.3f} s over {len(spent)} graph(s) ({100 * sum(spent) / first:.1f}%)"
)
if profiler:
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(top)
