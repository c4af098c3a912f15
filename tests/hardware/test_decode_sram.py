"""The decode kernel's shared-memory model against Triton's compiler for sm_90 (ahead of time,
no GPU): the model is never below the compiler's bytes (benchmarks/decode_sram.py runs the
whole sample)."""

from __future__ import annotations

import aot_compile
import pytest

from flashgen.hardware import decode as hw

JOBS = [(128, True, 32, 3), (128, False, 64, 3), (64, True, 128, 2)]
_SCRIPT = """
import json, sys
sys.path.insert(0, "benchmarks")
from decode_sram import compile_bytes
from flashgen.core.spec import KernelSpec
from flashgen.hardware.decode import DecodeConfig
jobs = json.loads(sys.argv[1])
print(json.dumps([compile_bytes(KernelSpec(d, c, "bfloat16"), DecodeConfig(n, 4, s, 8), 16)
                  for d, c, n, s in jobs]))
"""


@pytest.mark.skipif(
    not aot_compile.cuda_backend_available(), reason="Triton's CUDA backend is not installed"
)
def test_decode_model_never_underestimates_the_compiler():
    actual = aot_compile.run_without_interpreter(_SCRIPT, JOBS, timeout=600)
    for (d, _, n, s), real in zip(JOBS, actual, strict=True):
        model = hw.smem_bytes(d, "bfloat16", hw.DecodeConfig(n, 4, s, 8), 16)
        assert real <= model <= real + 4096, (d, n, s, model, real)
