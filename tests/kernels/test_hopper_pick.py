"""benchmarks/hopper_pick.py turns a probe bench into a configs file the run time reads back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flashgen.core.hopper_config import HopperConfig
from flashgen.hardware import hopper_tiles as ht
from flashgen.hardware.sram import KNOWN_GPUS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hopper_pick.py"


def test_pick_writes_the_fastest_probed_config(tmp_path, monkeypatch):
    rows = [
        {"shape": [16, 16, 16, 1024, 128, True],
         "tflops": {"cudnn": 438.6, "ws(128, 128, 2, 4, 168, 2, False, False)": 325.4,
                    "ws(128, 128, 2, 4, 168, 2, False, True)": 359.4, "flashgen_fwd_hopper": 320.7}},
        {"shape": [4, 32, 8, 4096, 128, True],  # GQA: reported by the probe, not keyed
         "tflops": {"ws(128, 64, 3, 4, 168, 2, False, True)": 500.0}},
        {"shape": [1, 16, 16, 16384, 128, False],
         "tflops": {"ws(128, 64, 3, 4, 168, 2, False, True)": 640.0,
                    "ws(128, 128, 2, 4, 168, 2, False, False)": None}},
    ]  # fmt: skip
    bench, out = tmp_path / "bench.json", tmp_path / "hopper" / "h200.json"
    bench.write_text(json.dumps(rows))
    done = subprocess.run([sys.executable, str(SCRIPT), str(bench), str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert [(r["head_dim"], r["causal"], r["seq_bucket"]) for r in doc["records"]] == [
        (128, True, 1024), (128, False, 16384)]  # fmt: skip
    monkeypatch.setenv(ht.CONFIGS_ENV, str(out))
    ht._table.cache_clear()
    h200 = KNOWN_GPUS["nvidia-h200"]
    assert ht.tuned_config(128, True, 1000, h200) == HopperConfig(
        128, 128, 2, 2, 4, 168, False, True
    )
    assert ht.tuned_config(128, False, 16384, h200) == HopperConfig(
        128, 64, 3, 2, 4, 168, False, True
    )


def test_pick_keeps_the_current_config_where_the_library_path_was_fastest(tmp_path):
    """--current: the library-path column competes as the current file's config."""
    current = tmp_path / "current.json"
    shipped = dict(block_m=128, block_n=128, num_buf=2, consumers=2, num_warps=4, maxnreg=168,
                   pingpong=False, persistent=False)  # fmt: skip
    current.write_text(json.dumps({"format": ht.CONFIGS_FORMAT, "records": [
        dict(head_dim=128, causal=False, seq_bucket=16384, config=shipped),
        dict(head_dim=128, causal=True, seq_bucket=1024, config=shipped),
        dict(head_dim=64, causal=True, seq_bucket=4096, config=shipped)]}))  # fmt: skip
    rows = [
        {"shape": [1, 16, 16, 16384, 128, False],  # the library path (shipped) wins
         "tflops": {"cudnn": 590.0, "flashgen_fwd_auto": 640.0,
                    "ws(128, 128, 2, 4, 168, 2, True, True)": 620.0}},
        {"shape": [16, 16, 16, 1024, 128, True],  # a probed config wins
         "tflops": {"cudnn": 430.0, "flashgen_fwd_auto": 380.0,
                    "ws(128, 128, 2, 4, 168, 2, True, True)": 400.0,
                    "ws(128, 128, 2, 4, 168, 2, False, True, True)": 410.0}},
    ]  # fmt: skip
    bench, out = tmp_path / "bench.json", tmp_path / "new.json"
    bench.write_text(json.dumps(rows))
    done = subprocess.run([sys.executable, str(SCRIPT), str(bench), str(out), "--current",
                           str(current)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = {(r["head_dim"], r["causal"], r["seq_bucket"]): (HopperConfig(**r["config"]), r.get("tflops"))
           for r in json.loads(out.read_text())["records"]}  # fmt: skip
    assert got[128, False, 16384] == (HopperConfig(**shipped), 640.0)
    # a dynamic persistent grid: the ninth field of the probe's config tuple
    assert got[128, True, 1024] == (HopperConfig(128, 128, 2, 2, 4, 168, False, True, True), 410.0)
    # a key the bench did not time keeps the current file's record
    assert got[64, True, 4096][0] == HopperConfig(**shipped)


def test_pick_ranks_by_the_rounds_ratios_to_cudnn(tmp_path):
    """With per-round readings, a config that read fastest in one round but lost to cuDNN in
    the other does not win over one level with cuDNN in both rounds."""
    a, b = (
        "ws(128, 128, 2, 4, 168, 2, False, True)",
        "ws(128, 128, 2, 4, 168, 2, False, True, True)",
    )
    rows = [{"shape": [4, 16, 16, 4096, 128, True],
             "tflops": {"cudnn": 600.0, a: 620.0, b: 590.0},
             "runs": {"cudnn": [600.0, 500.0], a: [620.0, 420.0], b: [590.0, 510.0]}}]  # fmt: skip
    bench, out = tmp_path / "bench.json", tmp_path / "new.json"
    bench.write_text(json.dumps(rows))
    done = subprocess.run([sys.executable, str(SCRIPT), str(bench), str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (rec,) = json.loads(out.read_text())["records"]
    assert HopperConfig(**rec["config"]) == HopperConfig(128, 128, 2, 2, 4, 168, False, True, True)
    assert rec["tflops"] == 590.0
