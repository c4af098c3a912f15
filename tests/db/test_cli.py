"""`flashgen db show/pending/export/import/merge` on real SQLite files."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import cli, connect
from flashgen.db.records import EnvFingerprint, TuningRecord

ENV = EnvFingerprint("NVIDIA H200", "9.0", 132, 232448, "3.6.0", "2.11.0", "0.1.0", "abc123")
OLD = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3, hours=1)


def _n1_record(spec, bucket, config, **fields):
    """A record of ENV tuned on host n1 three days ago (`show` prints its age)."""
    return TuningRecord(spec, bucket, ENV, config, host="n1", created_at=OLD, **fields)


RECORDS = [
    _n1_record(
        KernelSpec(64, True, "float16"), (1024, 1024), TileConfig(64, 64, 4, 2),
        time_ms=0.25, tflops=123.4, n_trials=30, measured=True,
        impl="sdpa_cudnn", impl_ratio=1.18,
    ),
    _n1_record(
        KernelSpec(128, False, "bfloat16", "bwd"), (16, 512), TileConfig(32, 128, 8, 3),
        time_ms=1.5, tflops=7.0, n_trials=0, measured=False,
    ),
]  # fmt: skip


@pytest.fixture
def source(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.sqlite3'}"
    database = connect(url)
    for rec in RECORDS:
        database.upsert_best(rec)
    database.record_pending(KernelSpec(64, True, "float16"), (2048, 64), "NVIDIA H200")
    database.close()
    return url


def test_show_lists_every_record(source, capsys):
    assert cli.main(["show", "--db", source]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].endswith("2 record(s)")
    assert lines[1].split() == [
        "spec",
        "bucket",
        "gpu",
        "config",
        "time_ms",
        "TFLOP/s",
        "source",
        "winner", "/", "vs", "next",
        "age",
    ]  # fmt: skip
    row = next(line for line in lines if "attn_fwd_d64_causal_f16" in line)
    assert row.split() == [
        "attn_fwd_d64_causal_f16", "1024x1024", "NVIDIA", "H200", "(64,64,w4,s2)", "0.2500",
        "123.4", "measured", "sdpa_cudnn", "1.18x", "3d",
    ]  # fmt: skip
    row = next(line for line in lines if "attn_bwd_d128_full_bf16" in line)
    assert row.split()[-5:] == ["modelled", "flashgen", "(not", "compared)", "3d"]
    assert "16x512" in row


def test_pending_lists_shapes(source, capsys):
    assert cli.main(["pending", "--db", source]) == 0
    out = capsys.readouterr().out
    assert "attn_fwd_d64_causal_f16" in out and "2048x64" in out and "NVIDIA H200" in out


def test_export_import_merge(source, tmp_path, capsys):
    path = tmp_path / "out.json"
    assert cli.main(["export", str(path), "--db", source]) == 0
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["version"], len(doc["records"])) == ("flashgen-tuning-db", 2, 2)
    imported = f"sqlite:///{tmp_path / 'b.sqlite3'}"
    assert cli.main(["import", str(path), "--db", imported]) == 0
    assert "2 written" in capsys.readouterr().out
    merged = f"sqlite:///{tmp_path / 'c.sqlite3'}"
    assert cli.main(["merge", source, "--db", merged]) == 0
    assert cli.main(["merge", imported, "--db", merged]) == 0
    assert "0 written, 2 kept" in capsys.readouterr().out
    for url in (imported, merged):
        database = connect(url)
        assert database.records() == sorted(RECORDS, key=lambda r: r.spec.uri())
        database.close()


def test_merge_keeps_the_better_record(source, tmp_path):
    better = f"sqlite:///{tmp_path / 'better.sqlite3'}"
    database = connect(better)
    faster = TuningRecord(
        RECORDS[0].spec, RECORDS[0].bucket, ENV, TileConfig(128, 64, 8, 3), time_ms=0.2, host="n2"
    )
    database.upsert_best(faster)
    database.upsert_best(
        TuningRecord(
            RECORDS[1].spec, RECORDS[1].bucket, ENV, TileConfig(16, 16, 2, 1), 9.0, host="n2"
        )
    )
    database.close()
    assert cli.main(["merge", better, "--db", source]) == 0
    database = connect(source)
    got = {r.spec: r for r in database.records()}
    assert got[RECORDS[0].spec] == faster  # faster measured record wins
    assert (
        got[RECORDS[1].spec].measured and got[RECORDS[1].spec].time_ms == 9.0
    )  # measured beats modelled
    database.close()


def test_errors_name_the_problem_and_hide_passwords(tmp_path, capsys):
    target = f"sqlite:///{tmp_path / 't.sqlite3'}"
    assert (
        cli.main(["merge", "postgresql+psycopg2://fg:topsecret9@127.0.0.1:1/x", "--db", target])
        == 2
    )
    err = capsys.readouterr().err
    assert "topsecret9" not in err and "fg:***@127.0.0.1" in err
    assert cli.main(["import", str(tmp_path / "missing.json"), "--db", target]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert not (tmp_path / "t.sqlite3").exists() or connect(target).records() == []


def test_flashgen_db_is_wired_into_the_main_cli(source, capsys):
    from flashgen.cli import main

    assert main(["db", "show", "--db", source]) == 0
    assert "attn_fwd_d64_causal_f16" in capsys.readouterr().out


def test_export_filters_by_gpu_and_measured(source, tmp_path):
    database = connect(source)
    other_gpu = EnvFingerprint(
        "NVIDIA A100", "8.0", 108, 166912, "3.6.0", "2.11.0", "0.1.0", "abc123"
    )
    database.upsert_best(
        TuningRecord(RECORDS[0].spec, RECORDS[0].bucket, other_gpu, TileConfig(64, 64, 4, 2), 0.4)
    )
    database.close()
    path = tmp_path / "h200.json"
    assert (
        cli.main(["export", str(path), "--db", source, "--gpu", "nvidia h200", "--measured-only"])
        == 0
    )
    doc = json.loads(path.read_text())
    assert [(r["spec"], r["env"]["gpu_name"]) for r in doc["records"]] == [
        ("attn_fwd_d64_causal_f16", "NVIDIA H200")
    ]


def test_show_takes_flashgen_gpu_names(source, capsys):
    assert cli.main(["show", "--db", source, "--gpu", "nvidia-h200"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("2 record(s)")
    assert cli.main(["show", "--db", source, "--gpu", "nvidia-a100"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("0 record(s)")


def test_show_escapes_control_characters_already_stored(tmp_path, capsys):
    """A record written before import refused them (or by hand) must not drive the terminal."""
    url = f"sqlite:///{tmp_path / 'esc.sqlite3'}"
    database = connect(url)
    env = EnvFingerprint("NVIDIA\x1b[2J H200", "9.0", 132, 232448, "3.6.0", "2.11.0", "0.1", "a")
    database.upsert_best(
        TuningRecord(RECORDS[0].spec, (64, 64), env, TileConfig(64, 64, 4, 2), 1.0)
    )
    database.close()
    assert cli.main(["show", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "NVIDIA\\x1b[2J H200" in out
