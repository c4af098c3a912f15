"""Session 57's compile-time check (CPU): the first call of an HF Llama compiled with the flashgen
backend or Inductor against its second call.

Usage: TRITON_INTERPRET=1 TORCHINDUCTOR_CACHE_DIR=<fresh dir> python compile_time.py LAYERS
{flashgen,inductor} [sdpa|eager]
"""

import sys
import time

import torch
import transformers

import flashgen  # noqa: F401  (registers the backend)

layers, which = int(sys.argv[1]), sys.argv[2]
cfg = transformers.LlamaConfig(
    vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
)  # fmt: skip
cfg._attn_implementation = sys.argv[3] if len(sys.argv) > 3 else "sdpa"
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(cfg)
ids = torch.randint(0, 96, (2, 64))
compiled = torch.compile(model, backend=which)
t = time.perf_counter()
compiled(ids)
first = time.perf_counter() - t
t = time.perf_counter()
compiled(ids)
second = time.perf_counter() - t
print(which, layers, cfg._attn_implementation, f"first {first:.2f}s second {second:.3f}s")
