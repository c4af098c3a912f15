"""benchmarks/bwd_auto.py (the backward kinds' default tables against a fresh measurement) runs end
to end on the CPU (--smoke: interpreter kernels, the hopper kind falling back to split), so the
script the next GPU session needs does not rot. Its ratios here mean nothing; the threshold rule
and the cases' arguments are checked."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bwd_auto.py"


def _module():
    spec = importlib.util.spec_from_file_location("bwd_auto", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_suggested_length_is_where_every_longer_one_leads():
    mod = _module()
    assert mod.suggested({512: 0.99, 1024: 1.05, 2048: 1.10, 4096: 1.2}, 0.02) == 1024
    # a dip at 2k: only 4k counts
    assert mod.suggested({512: 1.1, 1024: 1.05, 2048: 1.01, 4096: 1.2}, 0.02) == 4096
    assert mod.suggested({512: 1.1, 1024: 1.05, 2048: 1.03, 4096: 0.99}, 0.02) is None
    assert mod.suggested({512: 1.03, 1024: 1.05}, 0.02) == 512


def test_cases_pass_what_each_table_is_read_with():
    import torch

    from flashgen.kernels import hopper_bwd

    mod = _module()
    for table in mod.TABLES:  # every listed key is among those measured
        assert set(getattr(hopper_bwd, table)) <= set(mod.keys_of(table)), table
    args = ("cpu", torch.bfloat16)
    q, k, v, do, fwd, bwd = mod.case("AUTO_GROUPED", (64, True), 32, 64, 8, *args)
    assert q.shape == (2, 8, 32, 64) and k.shape == (2, 2, 32, 64) and fwd == {"causal": True}
    *_, fwd, bwd = mod.case("AUTO_EXTRAS", (128, False, "add"), 32, 64, 4, *args)
    assert fwd["mask"].dtype == torch.bfloat16 and fwd["rows_whole"] and "bounds" in fwd
    assert bwd["scale"] == 128**-0.5
    *_, fwd, _ = mod.case("AUTO_EXTRAS", (64, True, ""), 32, 64, 4, *args)
    assert "mask" not in fwd and fwd["bounds"].shape == (2, 4)
    *_, fwd, _ = mod.case("AUTO_WINDOW", (64, True, True), 64, 64, 4, *args)
    assert fwd["window"] == (32, 0) and fwd["mask"].dtype == torch.bool
    *_, fwd, _ = mod.case("AUTO_WINDOW", (64, False, False), 64, 64, 4, *args)
    assert fwd["window"] == (16, 16) and "mask" not in fwd
    *_, fwd, _ = mod.case("AUTO_SCORE_MODS", (64, False, "alibi"), 32, 64, 4, *args)
    assert fwd["alibi"].shape == (2, 4) and fwd["alibi"].stride(-1) == 1


def test_smoke_run_writes_every_key(tmp_path):
    out = tmp_path / "auto.json"
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--tables", "AUTO_EXTRAS,AUTO_SCORE_MODS"]
    cmd += ["--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and len(report["results"]) == 24
    from flashgen.kernels import hopper_bwd

    for entry in report["results"]:
        table, key = entry["table"], tuple(entry["key"])
        assert entry["shipped"] == getattr(hopper_bwd, table).get(key)
        row = entry["by_length"]["48"]
        assert row["split_ms"] > 0 and row["hopper_ms"] > 0
        assert [len(row["readings"][kind]) for kind in ("split", "hopper")] == [1, 1]
    bad = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--tables", "AUTO_NOPE"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "unknown AUTO_NOPE" in bad.stderr
