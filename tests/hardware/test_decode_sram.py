"""The decode kernel's shared-memory model against Triton's compiler for sm_90 (ahead of time,
no GPU): the model is never below the compiler's bytes (benchmarks/decode_sram.py runs the
whole sample)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def _aot_possible() -> bool:
    try:
        import triton.backends
        from triton.backends.compiler import GPUTarget  # noqa: F401
    except ImportError:
        return False
    return "nvidia" in getattr(triton.backends, "backends", {})


@pytest.mark.skipif(not _aot_possible(), reason="Triton's CUDA backend is not installed")
def test_decode_model_never_underestimates_the_compiler():
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(JOBS)],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    actual = json.loads(proc.stdout.strip().splitlines()[-1])
    for (d, _, n, s), real in zip(JOBS, actual, strict=True):
        model = hw.smem_bytes(d, "bfloat16", hw.DecodeConfig(n, 4, s, 8), 16)
        assert real <= model <= real + 4096, (d, n, s, model, real)
