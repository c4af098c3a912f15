"""benchmarks/multigpu_compare.py: issue 19's winners check between a one-GPU and a --gpus run."""

from __future__ import annotations

import json

import pytest
import repo_scripts

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import connect
from flashgen.db.records import EnvFingerprint, TuningRecord

H200 = EnvFingerprint("NVIDIA H200", "9.0", 132, 232448, "3.6.0", "2.11.0", "0.1.0", "abc123")
FWD = KernelSpec(64, False, "bfloat16")
CAUSAL = KernelSpec(128, True, "bfloat16")


@pytest.fixture(scope="module")
def compare():
    return repo_scripts.load("benchmarks/multigpu_compare.py")


def _db(path, times, measured=True):
    db = connect(f"sqlite:///{path}")
    for (spec, n), ms in times.items():
        db.upsert_best(TuningRecord(spec, (n, n), H200, TileConfig(64, 64, 4, 2), time_ms=ms,
                                    measured=measured))  # fmt: skip
    return str(path)


def test_winners_within_three_percent_and_the_wall_ratio(compare, tmp_path, capsys):
    one = _db(tmp_path / "one.sqlite3", {(FWD, 1024): 1.00, (CAUSAL, 4096): 2.00})
    many = _db(tmp_path / "many.sqlite3", {(FWD, 1024): 1.02, (CAUSAL, 4096): 1.90})
    out = tmp_path / "cmp.json"
    argv = [one, many, "--wall-one", "50", "--wall-many", "27.5", "--out", str(out)]
    assert compare.main(argv) == 0
    verdict = json.loads(out.read_text())["verdict"]
    assert verdict["tasks"] == verdict["compared"] == 2
    assert verdict["worst_ratio"] == pytest.approx(1.02) and verdict["winners_within_tol"]
    assert verdict["wall_ratio"] == pytest.approx(0.55)
    assert "ratio 0.950" in capsys.readouterr().out


def test_a_slower_or_missing_winner_fails(compare, tmp_path):
    one = _db(tmp_path / "one.sqlite3", {(FWD, 1024): 1.00, (CAUSAL, 4096): 2.00})
    slow = _db(tmp_path / "slow.sqlite3", {(FWD, 1024): 1.04, (CAUSAL, 4096): 2.00})
    assert compare.main([one, slow]) == 1  # 4% slower
    assert compare.main([one, slow, "--tol", "0.05"]) == 0
    partial = _db(tmp_path / "partial.sqlite3", {(FWD, 1024): 1.00})
    assert compare.main([one, partial]) == 1  # the --gpus run lost a task
    modelled = _db(tmp_path / "modelled.sqlite3", {(FWD, 1024): 1.00}, measured=False)
    assert compare.main([modelled, modelled]) == 1  # nothing measured: nothing shown


def test_a_missing_database_is_an_error_not_an_empty_one(compare, tmp_path, capsys):
    one = _db(tmp_path / "one.sqlite3", {(FWD, 1024): 1.00})
    absent = tmp_path / "absent.sqlite3"
    assert compare.main([one, str(absent)]) == 2
    assert "absent" in capsys.readouterr().err
    assert not absent.exists()
