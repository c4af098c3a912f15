"""benchmarks/train_merge.py: per-backend training runs joined into one table, as one run."""

from __future__ import annotations

import json

import pytest
import repo_scripts


@pytest.fixture(scope="module")
def merge():
    return repo_scripts.load("benchmarks/train_merge.py")


def _row(backend, tps, losses, **extra):
    return {"case": "2x4096", "backend": backend, "tokens_per_s": tps, "losses": losses,
            "final_loss": losses[-1] if losses else None, **extra}  # fmt: skip


def _write(path, rows, command):
    meta = {"gpu": "NVIDIA H200", "torch": "2.11", "triton": "3.6", "commit": "abc1234",
            "command": command, "date": "2026-12-01 00:30 UTC"}  # fmt: skip
    path.write_text(json.dumps({"meta": meta, "rows": rows, "args": {"steps": 3}}))
    return str(path)


def test_joins_backends_as_one_run(merge, tmp_path, capsys):
    files = [
        _write(tmp_path / "e.json", [_row("eager", 100.0, [3.0, 2.0, 1.0])], "e"),
        _write(
            tmp_path / "i.json",
            [_row("inductor", 150.0, [3.0, 2.01, 1.02], speedup_vs_best_other=9.0)],
            "i",
        ),  # fmt: skip
        _write(
            tmp_path / "f.json",
            [_row("flashgen", 180.0, [3.0, 2.0, 1.04], replaced=8, speedup_vs_best_other=1.8)],
            "f",
        ),  # fmt: skip
    ]
    out = tmp_path / "train_hf_llama_model.json"
    assert merge.main([*files, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = {r["backend"]: r for r in data["rows"]}
    assert rows["flashgen"]["speedup_vs_best_other"] == pytest.approx(180 / 150)
    assert "speedup_vs_best_other" not in rows["inductor"]  # a source's own ratio is dropped
    assert rows["inductor"]["loss_gap"] == pytest.approx(0.02)
    assert rows["flashgen"]["loss_gap"] == pytest.approx(0.04) and rows["flashgen"]["loss_agrees"]
    assert data["meta"]["command"] == "e ; i ; f" and len(data["sources"]) == 3
    assert "1.20" in capsys.readouterr().out


def test_disagreeing_losses_missing_runs_and_no_replacement_fail(merge, tmp_path):
    eager = _write(tmp_path / "e.json", [_row("eager", 100.0, [3.0, 2.0])], "e")
    far = _write(tmp_path / "f.json", [_row("flashgen", 90.0, [3.0, 2.5], replaced=8)], "f")
    assert merge.main([eager, far]) == 1  # 0.5 > --loss-tol
    assert merge.main([eager, far, "--loss-tol", "0.6"]) == 0
    assert merge.main([eager, far, str(tmp_path / "absent.json"), "--loss-tol", "0.6"]) == 1
    none = _write(tmp_path / "n.json", [_row("flashgen", 90.0, [3.0, 2.0], replaced=0)], "n")
    assert merge.main([eager, none]) == 1  # no site replaced: that is Inductor's figure


def test_latest_csv_takes_the_merged_file(merge, tmp_path, monkeypatch):
    latest = repo_scripts.load("benchmarks/latest.py")
    files = [
        _write(tmp_path / "e.json", [_row("eager", 100.0, [1.0])], "e"),
        _write(tmp_path / "f.json", [_row("flashgen", 120.0, [1.0], replaced=2)], "f"),
    ]
    out = tmp_path / "train_hf_llama_model.json"
    assert merge.main([*files, "--json", str(out)]) == 0
    lines = latest.lines_of(str(out))
    assert {(x["name"], x["impl"], x["value"]) for x in lines if x["metric"] == "tokens_per_s"} == {
        ("train_hf_llama_model", "eager", 100.0),
        ("train_hf_llama_model", "flashgen", 120.0),
    }


def test_agreement_is_judged_on_the_mean_gap(merge, tmp_path):
    """One step far apart (an unstable step amplifies rounding in every compiled backend)
    is reported as the largest gap but does not fail a curve whose mean gap is within
    --loss-tol; a curve off at every step does."""
    losses = [3.0, 2.0, 1.5, 1.2, 1.0]
    eager = _write(tmp_path / "e.json", [_row("eager", 100.0, losses)], "e")
    spike = [3.0, 2.0, 1.62, 1.2, 1.0]  # one step 0.12 apart: mean 0.024
    one = _write(tmp_path / "s.json", [_row("flashgen", 120.0, spike, replaced=8)], "s")
    out = tmp_path / "m.json"
    assert merge.main([eager, one, "--json", str(out)]) == 0
    row = next(r for r in json.loads(out.read_text())["rows"] if r["backend"] == "flashgen")
    assert row["loss_gap"] == pytest.approx(0.12) and row["loss_gap_mean"] == pytest.approx(0.024)
    drift = [x - 0.06 for x in losses]  # 0.06 off at every step
    off = _write(tmp_path / "d.json", [_row("flashgen", 120.0, drift, replaced=8)], "d")
    assert merge.main([eager, off]) == 1
