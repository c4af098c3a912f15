"""benchmarks/host_time.py runs end to end on the CPU (--device cpu, interpreter kernels), so the
script the H200 run uses does not rot between GPU sessions. Its figures here mean nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_host_time_smoke(tmp_path):
    out = tmp_path / "host.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "host_time.py"), "--device", "cpu"]
    cmd += ["--shape", "1,1,16,16", "--calls", "1", "--rounds", "1", "--warmup", "1"]
    cmd += ["--label", "smoke", "--commit", "abc1234", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["label"] == "smoke" and report["commit"] == "abc1234"
    assert sorted(report["cases"]) == [
        "auto_fwd",
        "auto_fwd_bwd",
        "bwd",
        "fwd",
        "fwd_bwd",
        "fwd_grad",
    ]
    for case in report["cases"].values():
        for impl in ("flashgen", "sdpa"):
            assert case[impl]["host"]["median_us"] > 0
            assert case[impl]["wall"]["median_us"] >= case[impl]["host"]["median_us"]
    # (no layer_route: on the CPU the choice is flashgen's kernels, as auto_impl records)
    layers = ["layer_alloc", "layer_bwd_launcher", "layer_check", "layer_launcher", "layer_op"]
    assert sorted(report["layers"]) == layers
    assert report["auto_impl"]["fwd"][0] == "flashgen"
