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
