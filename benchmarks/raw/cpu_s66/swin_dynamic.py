"""Session 66's check: HF Swin v2 (small, eval) compiled once with `dynamic=True` by the flashgen
backend (aot_eager for the rest of the graph) serves three batch sizes, each against eager
float32 (max abs difference), with the sites replaced counted over every graph compiled.

Usage: TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/raw/cpu_s66/swin_dynamic.py
"""

import torch
import transformers

from flashgen.compile.backend import backend
from flashgen.compile.patterns.core import counters

torch.manual_seed(0)
cfg = transformers.Swinv2Config(
    image_size=32, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4,
    drop_path_rate=0.0,
)  # fmt: skip
model = transformers.Swinv2Model(cfg).eval()
compiled = torch.compile(model, backend=backend(fallback="aot_eager"), dynamic=True)
for batch in (2, 3, 5):
    x = torch.randn(batch, 3, 32, 32)
    with torch.no_grad():
        got = compiled(pixel_values=x).last_hidden_state
        want = model(pixel_values=x).last_hidden_state
    print(f"batch {batch}: max abs difference {(got - want).abs().max().item():.2e}")
print(dict(counters))
