"""Ahead-of-time compilation in tests: whether this Triton can compile for NVIDIA GPUs without
one, and running a compile script in a child process.

Why a child process: conftest sets TRITON_INTERPRET=1 for the test process, and kernels (Gluon's
jit helpers above all) imported under it cannot be compiled. The SRAM-model tests
(tests/hardware) and the Hopper kernel tests (tests/kernels) compile this way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cuda_backend_available() -> bool:
    """Whether the installed Triton has its NVIDIA backend (what compiling for sm_90 needs)."""
    try:
        import triton.backends
        from triton.backends.compiler import GPUTarget  # noqa: F401
    except ImportError:
        return False
    return "nvidia" in getattr(triton.backends, "backends", {})


def run_without_interpreter(script: str, payload, timeout: int = 900):
    """Run python `script` in the repository root without TRITON_INTERPRET, with the JSON of
    `payload` as argv[1] (the repository first on PYTHONPATH, so benchmarks/ helpers import);
    returns the JSON of the last line it prints. A failing child fails the test with its
    stderr's tail."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(payload)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
