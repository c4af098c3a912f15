"""Session 50: attn_bwd_short's shared memory, compiled ahead of time (no GPU) at the tiles of the
longest call it takes (SHORT_MAX_STEPS blocks of queries, SHORT_MAX_K keys), per capability.
Run without TRITON_INTERPRET from the repository root:
    PYTHONPATH=. python benchmarks/raw/cpu_s50/aot_short.py 90 80 86
"""

import sys

sys.path.insert(0, "benchmarks")

from sram_vs_compiler import compile_ahead  # noqa: E402

from flashgen.core.spec import KernelSpec  # noqa: E402
from flashgen.kernels.bwd import SHORT_BLOCK_M, SHORT_MAX_K, SHORT_MAX_STEPS, short_config  # noqa: E402

for cap in map(int, sys.argv[1:]):
    for d, causal, dtype in [
        (64, True, "bfloat16"),
        (128, True, "bfloat16"),
        (128, False, "float16"),
    ]:
        spec = KernelSpec(d, causal, dtype, "bwd")
        cfg = short_config(spec, SHORT_MAX_STEPS * SHORT_BLOCK_M, SHORT_MAX_K)
        kernel, _ = compile_ahead(spec, "attn_bwd_short", cfg, cap)
        print(
            f"sm_{cap} d{d} {'causal' if causal else 'full'} {dtype} {cfg}: shared {kernel.metadata.shared} bytes"
        )
