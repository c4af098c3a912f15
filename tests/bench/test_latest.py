"""benchmarks/latest.py: result files into the one CSV of latest figures, and the plots from it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import repo_scripts

from flashgen.bench import report
from flashgen.bench.harness import Case, Row


@pytest.fixture
def latest(tmp_path, monkeypatch):
    module = repo_scripts.load("benchmarks/latest.py")
    monkeypatch.setattr(module, "CSV", str(tmp_path / "latest.csv"))
    monkeypatch.setattr(module, "DOCS", str(tmp_path))
    return module


def _bench_json(path, tflops, commit):
    rows = [Row(Case(4, 16, 4, 4096, 128, True), "fwd", "flashgen", 1.0, tflops, True),
            Row(Case(4, 16, 4, 4096, 128, True), "fwd", "sdpa_flash", None, None, None)]  # fmt: skip
    report.write_json(str(path), rows, {"gpu": "NVIDIA H200", "commit": commit})


def test_add_keeps_the_latest_figure_per_key_and_plots(latest, tmp_path):
    _bench_json(tmp_path / "a.json", 500.0, "old")
    train = {"meta": {"gpu": "NVIDIA H200", "commit": "new"},
             "rows": [{"case": "2x4096", "backend": b, "tokens_per_s": v, "peak_mem_gb": 40.0}
                      for b, v in (("eager", 1e5), ("flashgen", 1.5e5))]}  # fmt: skip
    (tmp_path / "train_hf_llama.json").write_text(json.dumps(train))
    latest.add([str(tmp_path / "a.json"), str(tmp_path / "train_hf_llama.json")])
    _bench_json(tmp_path / "b.json", 600.0, "new")
    latest.add([str(tmp_path / "b.json")])
    lines = list(csv.DictReader(Path(latest.CSV).read_text().splitlines()))
    attention = [r for r in lines if r["kind"] == "attention"]
    assert [(r["impl"], r["value"], r["commit"]) for r in attention] == [
        ("flashgen", "600.0", "new")
    ]
    training = {(r["impl"], r["metric"]): r["value"] for r in lines if r["kind"] == "training"}
    assert training[("flashgen", "tokens_per_s")] == "150000.0" and len(training) == 4
    pytest.importorskip("matplotlib")
    latest.plot()
    for name in ("bench_h200.png", "train_h200.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
