"""benchmarks/tuner_vs_grid.py (the H200 benchmark of the tuner) runs end to end on the CPU in its
--cpu-smoke mode, so the script the lead runs on the GPU does not rot between GPU sessions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tuner_vs_grid_smoke(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "tuner_vs_grid.py"), "--cpu-smoke"]
    cmd += ["--cases", "2", "--out", str(tmp_path), "--budget-s", "200", "--cold"]
    cmd += ["--case-set", "heldout"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "tuner_vs_grid.json").read_text())
    assert not report["meta"]["errors"] and report["meta"]["case_set"] == "heldout"
    assert sorted(report["rows"]) == ["search", "search-cold"]
    for variant, rows in report["rows"].items():
        assert len(rows) == 2, variant
        for row in rows:
            assert row["grid_complete"] and row["grid_configs"] >= row["search_evaluated"] > 0
            # The grid is exhaustive over the same space: the search cannot beat it (same model).
            assert row["slowdown"] >= 1.0 - 1e-9
    # Only the cold search was run without the defaults table's seed.
    assert {c["default_seed"] for c in report["search"]["cases"]} == {True}
    assert {c["default_seed"] for c in report["search-cold"]["cases"]} == {False}
    md = (tmp_path / "tuner_vs_grid.md").read_text()
    assert md.count("| spec | bucket |") == 2 and "search-cold" in md
