"""`flashgen bench` on the CPU: flags, the no-GPU exit, an interpreter run, table/CSV/JSON, --from."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from flashgen.bench import report
from flashgen.bench.harness import Case, Row
from flashgen.cli import main

TINY = ["--head-dim", "16", "--seq-len", "24", "--causal", "true", "--heads", "2/1",
        "--dtype", "float32", "--batch-tokens", "24", "--rounds", "1", "--quiet"]  # fmt: skip


def test_help_explains():
    out = subprocess.run([sys.executable, "-m", "flashgen.cli", "bench", "--help"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    for word in ("--head-dim", "--seq-len", "--causal", "--heads", "--plot", "TFLOP/s", "cuDNN",
                 "FlexAttention", "float64", "--interpret"):  # fmt: skip
        assert word in out


def test_without_a_gpu_it_says_so_and_fails(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", *TINY]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, value, message",
    [("--head-dim", "64,x", "integers"), ("--causal", "maybe", "--causal"),
     ("--heads", "6/4", "multiple"), ("--mode", "fwd,back", "--mode"),
     ("--impl", "cudnn", "--impl"), ("--dtype", "fp8", "--dtype"), ("--seq-len", "0", "positive")],
)  # fmt: skip
def test_bad_flags_are_named(flag, value, message, capsys):
    assert main(["bench", *TINY, flag, value]) == 2
    assert message in capsys.readouterr().err


def test_interpreter_run_writes_table_json_csv(tmp_path, capsys):
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    argv = ["bench", *TINY, "--interpret", "--mode", "fwd", "--impl", "flashgen,sdpa_math",
            "--json", str(js), "--csv", str(cs)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "B1 H2/1 N24 D16 causal float32" in out and "flashgen/best other" in out
    data = json.loads(js.read_text())
    assert data["meta"]["interpreter"] is True and data["meta"]["torch"]
    assert [(r["impl"], r["ok"]) for r in data["rows"]] == [("flashgen", True), ("sdpa_math", True)]
    rows = list(csv.DictReader(cs.open()))
    assert [r["impl"] for r in rows] == ["flashgen", "sdpa_math"] and float(rows[0]["ms"]) > 0
    assert rows[0]["torch"] == data["meta"]["torch"] and rows[0]["commit"]


def _rows():
    fast, slow = Case(1, 4, 4, 1024, 64, True), Case(1, 4, 4, 4096, 64, True)
    return [
        Row(fast, "fwd", "flashgen", 1.0, 50.0, True, {"out": 1e-3}),
        Row(fast, "fwd", "sdpa_cudnn", 2.0, 25.0, True, {"out": 1e-3}),
        Row(fast, "fwd", "sdpa_flash", None, None, None, {}, "RuntimeError: no kernel"),
        Row(slow, "fwd", "flashgen", 4.0, 120.0, False, {"out": 0.5}),
        Row(slow, "fwd", "sdpa_cudnn", 2.0, 240.0, True, {"out": 1e-3}),
    ]


def test_table_ratio_marks_and_skips():
    text = report.table(_rows(), ["flashgen", "sdpa_cudnn", "sdpa_flash"])
    lines = text.splitlines()
    assert "2.00x (sdpa_cudnn)" in lines[2] and "50.0" in lines[2]
    assert "0.50x (sdpa_cudnn)" in lines[3] and "120.0!" in lines[3]
    assert lines[2].split()[-3] == "-"  # sdpa_flash skipped


def test_csv_and_json_round_trip_and_from(tmp_path, capsys):
    rows = _rows()
    report.write_csv(str(tmp_path / "r.csv"), rows)
    report.write_json(str(tmp_path / "r.json"), rows, {"gpu": "test"})
    for name in ("r.csv", "r.json"):
        back = report.read_rows(str(tmp_path / name))
        assert [(r.case, r.impl, r.ms, r.ok) for r in back] == [
            (r.case, r.impl, r.ms, r.ok) for r in rows
        ]
    # --from re-draws without a GPU; the failed check is reported and sets the exit status
    assert main(["bench", "--from", str(tmp_path / "r.json")]) == 1
    captured = capsys.readouterr()
    assert "0.50x" in captured.out and "CHECK FAILED" in captured.err


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    report.plot(str(path), _rows(), title="test")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_out_file_takes_a_json_path_a_folder_or_out(tmp_path, monkeypatch):
    from flashgen.bench.report import out_file

    assert out_file(str(tmp_path / "a" / "x.json"), "n.json") == str(tmp_path / "a" / "x.json")
    assert (tmp_path / "a").is_dir()
    assert out_file(str(tmp_path / "b"), "n.json") == str(tmp_path / "b" / "n.json")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    assert out_file(None, "n.json") == str(tmp_path / "out" / "n.json")
    assert (tmp_path / "out").is_dir()
