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


def _bench_rows(path, hkv, commit, date):
    rows = [Row(Case(4, 16, hkv, 4096, 128, True), mode, "flashgen", 1.0, 500.0, True)
            for mode in ("fwd", "fwd_bwd")]  # fmt: skip
    meta = {"gpu": "NVIDIA H200", "torch": "2.11", "triton": "3.6", "commit": commit, "date": date}
    report.write_json(str(path), rows, meta)


def test_each_panel_names_the_run_it_was_measured_in(latest, tmp_path):
    """The plot once named only the CSV's first line's commit, though its panels came from two
    runs: each panel now names its own run, and the title no single commit."""
    _bench_rows(tmp_path / "old.json", 16, "aaa1111", "2026-11-30 21:22 UTC")
    _bench_rows(tmp_path / "new.json", 4, "bbb2222", "2026-12-01 04:10 UTC")
    latest.add([str(tmp_path / "old.json"), str(tmp_path / "new.json")])
    title, notes = latest.attention_titles(latest.read())
    assert "NVIDIA H200" in title and "aaa1111" not in title and "bbb2222" not in title
    by_heads = {(key[3], key[4], key[5]): note for key, note in notes.items()}
    assert by_heads == {
        (16, 16, "fwd"): "commit aaa1111 (2026-11-30 21:22 UTC)",
        (16, 16, "fwd_bwd"): "commit aaa1111 (2026-11-30 21:22 UTC)",
        (16, 4, "fwd"): "commit bbb2222 (2026-12-01 04:10 UTC)",
        (16, 4, "fwd_bwd"): "commit bbb2222 (2026-12-01 04:10 UTC)",
    }


def test_training_bars_name_their_commit(latest):
    lines = [
        {"name": "train_hf_llama_model", "batch": "2", "seq": "4096", "commit": "aaa1111"},
        {"name": "train_hf_llama_model", "batch": "1", "seq": "16384", "commit": "bbb2222"},
    ]
    assert latest.training_label(lines, ("train_hf_llama_model", "1", "16384")).endswith(
        "1 x 16384\nbbb2222"
    )


def test_a_failed_check_is_recorded_with_its_figure(latest, tmp_path):
    """A figure whose run's own check failed (a loss curve off eager's, an output off float64)
    is still the latest measurement, but the table says so."""
    rows = [Row(Case(1, 16, 4, 16384, 128, True), "fwd", impl, 1.0, 500.0, ok)
            for impl, ok in (("flashgen", False), ("sdpa_cudnn", True))]  # fmt: skip
    report.write_json(str(tmp_path / "bench.json"), rows, {"gpu": "NVIDIA H200", "commit": "c"})
    train = {"meta": {"gpu": "NVIDIA H200", "commit": "c"},
             "rows": [{"case": "1x16384", "backend": "eager", "tokens_per_s": 9e4},
                      {"case": "1x16384", "backend": "flashgen", "tokens_per_s": 1.2e5,
                       "loss_agrees": False},
                      {"case": "1x16384", "backend": "inductor", "tokens_per_s": 6e4,
                       "loss_agrees": True}]}  # fmt: skip
    (tmp_path / "train_hf_llama_model.json").write_text(json.dumps(train))
    latest.add([str(tmp_path / "bench.json"), str(tmp_path / "train_hf_llama_model.json")])
    checks = {(r["kind"], r["impl"]): r["check"] for r in latest.read()}
    assert checks == {
        ("attention", "flashgen"): "fail", ("attention", "sdpa_cudnn"): "pass",
        ("training", "eager"): "", ("training", "flashgen"): "fail", ("training", "inductor"): "pass",
    }  # fmt: skip
