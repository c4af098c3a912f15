"""CPU tensors without Triton's interpreter (issue 11): a clear error saying what to do, raised
before any kernel is generated, instead of Triton's "0 active drivers"; the compile backend
leaves such sites to Inductor. Run in a fresh process without TRITON_INTERPRET (the test session
itself sets it before triton is imported, and triton reads it at import)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, sys, torch, torch.nn.functional as F, flashgen
    assert "TRITON_INTERPRET" not in os.environ
    q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
    try:
        flashgen.attention(q, k, v, causal=True)
    except RuntimeError as e:
        print("EAGER:", e)
    else:
        print("EAGER: no error")
    kernels = os.path.join(os.environ["FLASHGEN_CACHE_DIR"], "kernels")
    print("GENERATED:", len(os.listdir(kernels)) if os.path.isdir(kernels) else 0)

    def attn(q, k, v):
        return F.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1) @ v

    report = flashgen.explain(attn, q, k, v)
    print("EXPLAIN:", report.found, report.replaced, report.sites[0].reason)
    compiled = torch.compile(attn, backend=flashgen.backend(fallback="aot_eager"))
    torch.testing.assert_close(compiled(q, k, v), attn(q, k, v))
    print("COMPILED: ok")
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX environment handling")
def test_cpu_tensors_without_interpreter_get_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["FLASHGEN_CACHE_DIR"] = str(tmp_path)
    env["FLASHGEN_IMPL"] = "flashgen"
    env.pop("FLASHGEN_DB_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    eager = lines["EAGER"]
    assert "0 active drivers" not in eager and "got cpu tensors" in eager, eager
    assert "TRITON_INTERPRET=1" in eager and "CUDA" in eager, eager
    assert lines["GENERATED"] == "0"  # stopped before generating or compiling a kernel
    found, replaced, reason = lines["EXPLAIN"].split(" ", 2)
    assert (found, replaced) == ("1", "0") and "TRITON_INTERPRET=1" in reason, reason
    assert lines["COMPILED"] == "ok"
