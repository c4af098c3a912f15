"""Every example's --help, and its --smoke mode on the CPU (Triton's interpreter, tiny sizes).

Each runs as a user runs it: a new process, `python examples/NAME.py --smoke`. The smoke modes
compare eager with flashgen's backend (Inductor's C++ build would dominate CI's time; on a GPU
the examples run all three), so the assertions are about the code path: the run ends with
status 0, flashgen's backend replaced the attention sites, and the loss curves agree (float32).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMOKE = [
    "train_hf_llama", "train_nanogpt", "vision_encoder", "generate_kv_cache", "backend_speed",
    "finetune_encoder",
]  # fmt: skip


def _run(name, *argv, timeout=600):
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *argv], env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.mark.parametrize("name", [*SMOKE, "cluster_tuning"])
def test_help(name):
    done = _run(name, "--help")
    assert done.returncode == 0, done.stderr
    assert "--smoke" in done.stdout and "--json" in done.stdout


@pytest.mark.parametrize("name", SMOKE)
def test_smoke(name, tmp_path):
    out = tmp_path / "r.json"
    done = _run(name, "--smoke", "--json", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    fg = [r for r in rows if r.get("backend") == "flashgen" or r.get("style")]
    assert fg, rows
    for r in fg:
        assert r.get("replaced", 0) >= 1, r
    for r in rows:
        assert r.get("loss_agrees", True) is True, r


def test_hf_llama_with_gradient_checkpointing(tmp_path):
    """`train_hf_llama.py --checkpointing`: the attention replaced inside each checkpointed
    layer, the loss curve agreeing with eager's."""
    out = tmp_path / "r.json"
    done = _run("train_hf_llama", "--smoke", "--checkpointing", "--json", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    fg = [r for r in rows if r.get("backend") == "flashgen"]
    assert fg and all(r.get("replaced", 0) >= 1 for r in fg), rows
    assert all(r.get("loss_agrees", True) is True for r in rows), rows


# Examples with their own CPU tests elsewhere: distributed_train runs under torchrun with two gloo
# ranks (tests/compile/test_distributed.py, which also checks its --help and flags).
ELSEWHERE = {"distributed_train": "tests/compile/test_distributed.py"}


def test_every_example_has_a_cpu_test():
    """A new example (a script with a __main__ block) fails this until CI runs it on the CPU."""
    scripts = {p.stem for p in EXAMPLES.glob("*.py") if '__name__ == "__main__"' in p.read_text()}
    covered = {*SMOKE, "cluster_tuning", *ELSEWHERE}
    assert scripts == covered, f"untested: {scripts - covered}, gone: {covered - scripts}"
    for name, test in ELSEWHERE.items():
        assert f"{name}.py" in (EXAMPLES.parent / test).read_text(), (name, test)


def test_without_gpu_and_without_smoke_says_so():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    done = _run("train_nanogpt")
    assert done.returncode == 2 and "no CUDA GPU" in done.stderr


def test_cluster_refuses_sqlite():
    done = _run("cluster_tuning", "--db", "sqlite:///x.sqlite3", "--smoke")
    assert done.returncode == 2 and "PostgreSQL" in done.stderr


@pytest.mark.postgres
def test_cluster_smoke(pg_url, tmp_path):
    done = _run("cluster_tuning", "--db", pg_url, "--workers", "2", "--smoke", "--out",
                str(tmp_path), "--json", str(tmp_path / "r.json"))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["same"] and result["records"] >= 1
    assert "flashgen db import" in done.stdout
