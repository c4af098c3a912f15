"""`flashgen tune` input and output: every flag checked before any banner (one line, exit 2,
nothing created), --quiet, --version, and a summary on stdout that agrees with the database."""

from __future__ import annotations

import pytest

from flashgen.cli import main
from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import connect
from flashgen.db.records import TuningRecord
from flashgen.hardware.sram import current_device
from flashgen.runtime.lookup import current_fingerprint

TINY = ["--head-dim", "64", "--dtype", "float16", "--causal", "true", "--seq-len", "128",
        "--direction", "fwd"]  # fmt: skip
SPEC = KernelSpec(64, True, "float16")


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--patience", "-1"], ["--patience", "-1"]),
        (["--dtype", ""], ["--dtype"]),
        (["--dtype", "float16,half"], ["--dtype", "'half'"]),
        (["--head-dim", "64,,128"], ["--head-dim", "empty item"]),
        (["--head-dim", "300"], ["--head-dim", "300"]),
        (["--compile-workers", "-1"], ["--compile-workers", "-1"]),
        (["--seq-len", "99999999999"], ["--seq-len", "99999999999"]),
        (["--seq-len", "128", "--seq-k", "64,64"], ["--seq-k"]),
        (["--direction", "fwd,"], ["--direction", "empty item"]),
        (["--trials", "0"], ["--trials"]),
        (["--workers", "0"], ["--workers"]),
        (["--gpus", "0,0"], ["--gpus", "twice"]),
        (["--gpus", "first"], ["--gpus", "'first'"]),
        (["--gpus", "0,1", "--workers", "2"], ["--gpus", "--workers"]),
        (["--seed", "-1"], ["--seed"]),
        (["--pending", "--dtype", "float16"], ["--pending", "--dtype"]),
        (["--pending", "--window"], ["--pending", "--window"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0].startswith("-") else None,
)
def test_bad_flags_are_one_line_before_any_banner(tmp_path, capsys, flags, words):
    target = tmp_path / "t.sqlite3"
    assert main(["tune", *flags, "--db", str(target)]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashgen tune: error:"), out.err
    for word in words:
        assert word in lines[0]
    assert out.out == "" and not target.exists()


def test_a_directory_as_the_database_is_named(tmp_path, capsys):
    assert main(["tune", *TINY, "--trials", "1", "--quiet", "--db", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is a directory" in err and str(tmp_path) in err


def test_version(capsys):
    import flashgen

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"flashgen {flashgen.__version__}"


def _summary_row(text: str) -> list[str]:
    [row] = [line for line in text.splitlines() if line.startswith(SPEC.uri())]
    return row.split()


def test_summary_on_stdout_agrees_with_the_database(tmp_path, capsys):
    """Six trials, no early stop. In the cost model two configs tie here: the record keeps the
    first one stored, and the table must show that one, with the record's trial count (it was
    written when the best last improved, before the last trials)."""
    url = f"sqlite:///{tmp_path / 't.sqlite3'}"
    argv = ["tune", *TINY, "--trials", "6", "--patience", "0", "--quiet", "--db", url]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""
    db = connect(url)
    [rec] = db.records(SPEC)
    row = _summary_row(out.out)
    assert row[2] == rec.config.short() and row[3] == f"{rec.time_ms:.4g}"
    assert row[6] == str(rec.n_trials) == "6"
    assert row[7] == "modelled"


def test_summary_shows_the_stored_record_it_kept(tmp_path, capsys):
    """A measured record beats this CPU run's modelled one: the table shows the stored one."""
    url = f"sqlite:///{tmp_path / 't.sqlite3'}"
    db = connect(url)
    kept = TuningRecord(SPEC, (128, 128), current_fingerprint(current_device()),
                        TileConfig(32, 32, 2, 1), time_ms=0.5, n_trials=40, measured=True)  # fmt: skip
    db.upsert_best(kept)
    assert main(["tune", *TINY, "--trials", "2", "--quiet", "--db", url]) == 0
    row = _summary_row(capsys.readouterr().out)
    assert row[2] == "(32,32,w2,s1)" and row[3] == "0.5" and row[5] == "n/a" and row[6] == "40"
    assert " ".join(row[7:10]) == "measured (kept stored)"
    assert db.records(SPEC) == [kept]


def test_without_quiet_the_banner_goes_to_stderr(tmp_path, capsys):
    assert main(["tune", *TINY, "--trials", "1", "--db", str(tmp_path / "t.sqlite3")]) == 0
    out = capsys.readouterr()
    assert "1 spec x bucket tasks" in out.err and "spec x bucket" not in out.out
    assert SPEC.uri() in out.out


@pytest.mark.parametrize(
    "flags", [["--window", "--lengths"], ["--softcap"], ["--dropout"], ["--alibi"]]
)
def test_mask_kinds_are_tuned_as_their_own_specs(tmp_path, capsys, flags):
    """`flashgen tune --window/--softcap/--lengths` (issue 16) tunes and stores the kernel kind
    the flags name, not the plain one."""
    url = f"sqlite:///{tmp_path / 't.sqlite3'}"
    assert main(["tune", *TINY, *flags, "--trials", "2", "--quiet", "--db", url]) == 0
    spec = KernelSpec(64, True, "float16", window="--window" in flags,
                      softcap="--softcap" in flags, lengths="--lengths" in flags,
                      dropout="--dropout" in flags, alibi="--alibi" in flags)  # fmt: skip
    assert spec.uri() in capsys.readouterr().out
    db = connect(url)
    assert len(db.records(spec)) == 1 and db.records(SPEC) == []
