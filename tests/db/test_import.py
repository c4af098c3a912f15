"""`flashgen db import` in batches: the keep-best rule of one-by-one upserts, all or nothing, and
refused text (terminal escapes, NUL bytes, absurd nesting) named by record and field. Both
backends (SQLite file, real PostgreSQL)."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import random

import pytest

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import cli, connect, repository
from flashgen.db.portable import dump, to_document
from flashgen.db.records import EnvFingerprint, TuningRecord

ENVS = [
    EnvFingerprint("NVIDIA H200", "9.0", 132, 232448, "3.6.0", "2.11.0", "0.1.0", "abc123"),
    EnvFingerprint("NVIDIA A100-SXM4-80GB", "8.0", 108, 166912, "3.6.0", "2.11.0", "0.1.0", "x"),
]
WHEN = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _random_records(n: int, seed: int) -> list[TuningRecord]:
    """Records over few keys, so that the file repeats keys: ties, faster, measured/modelled."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(
            TuningRecord(
                KernelSpec(rng.choice([64, 128]), rng.random() < 0.5, "float16"),
                (rng.choice([64, 128, 256]), 128),
                rng.choice(ENVS),
                TileConfig(rng.choice([32, 64]), 64, 4, 1 + i % 4),
                time_ms=rng.choice([0.5, 1.0, 1.0, 2.0]),  # many ties
                n_trials=i,
                measured=rng.random() < 0.5,
                host=f"h{i}",
                created_at=WHEN,
            )
        )
    return out


def test_batched_import_keeps_what_one_by_one_upserts_keep(db_url, tmp_path, monkeypatch):
    """The same stored records, the same keys kept on ties, across several batches."""
    monkeypatch.setattr(repository, "UPSERT_BATCH", 7)
    first, second = _random_records(60, seed=1), _random_records(80, seed=2)
    one_by_one = connect(f"sqlite:///{tmp_path / 'ref.sqlite3'}")
    for rec in first + second:
        one_by_one.upsert_best(rec)
    batched = connect(db_url)
    steps: list[int] = []
    batched.upsert_many(first, progress=steps.append)
    wins = batched.upsert_many(second)
    assert sum(steps) == len({(r.spec, r.bucket, r.env) for r in first}) and max(steps) == 7
    assert batched.records() == one_by_one.records()
    assert 0 < wins < len(second)
    assert batched.upsert_many(second) == 0  # again: nothing changes


def test_import_is_all_or_nothing(db_url, tmp_path, monkeypatch):
    """Stopped after the first batch (Ctrl-C, a lost connection): nothing is stored."""
    monkeypatch.setattr(repository, "UPSERT_BATCH", 5)
    db = connect(db_url)

    def stop(_n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        db.upsert_many(_random_records(40, seed=3), progress=stop)
    assert db.records() == []


def test_progress_bar_only_on_a_terminal(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.json"
    dump(_random_records(30, seed=4), path)
    url = f"sqlite:///{tmp_path / 'a.sqlite3'}"
    assert cli.main(["import", str(path), "--db", url]) == 0
    assert capsys.readouterr().err == ""  # not a terminal: the summary line only

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["import", str(path), "--db", f"sqlite:///{tmp_path / 'b.sqlite3'}"]) == 0
    assert "import" in terminal.getvalue() and "rec" in terminal.getvalue()


def _document() -> dict:
    return to_document(_random_records(3, seed=5))


@pytest.mark.parametrize(
    "where, value, words",
    [
        (("host",), "node\x1b[2J\x1b[Hforged", ["record 1", "'host'", "\\x1b"]),
        (("env", "gpu_name"), "NVIDIA\x00H200", ["record 1", "'env.gpu_name'", "NUL"]),
        (("env", "torch_version"), "2.11\x9b31m", ["record 1", "'env.torch_version'", "\\x9b"]),
    ],
    ids=["ansi-escape", "nul-byte", "c1-csi"],
)
def test_control_characters_are_refused_by_record_and_field(db_url, tmp_path, capsys, where,
                                                           value, words):  # fmt: skip
    doc = _document()
    target = doc["records"][1]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["import", str(path), "--db", db_url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\x00" not in err, err
    for word in words:
        assert word in err
    if db_url.startswith("sqlite:///"):
        assert not (tmp_path / "tuning.sqlite3").exists()  # not even created
    else:
        assert connect(db_url).records() == []


def test_deep_nesting_is_refused_by_record_and_field(tmp_path, capsys):
    """Python's json parser fails with a RecursionError on this; the import names the spot."""
    doc = _document()
    doc["records"][2]["tflops"] = "DEEP"
    deep = "[" * 200_000 + "]" * 200_000
    text = json.dumps(doc).replace('"DEEP"', deep)
    path = tmp_path / "deep.json"
    path.write_text(text)
    url = f"sqlite:///{tmp_path / 'd.sqlite3'}"
    assert cli.main(["import", str(path), "--db", url]) == 2
    err = capsys.readouterr().err
    assert "record 2: field 'tflops': nested deeper" in err and err.count("\n") == 1, err
    assert not (tmp_path / "d.sqlite3").exists()


def test_moderate_nesting_names_the_field_path(tmp_path, capsys):
    doc = copy.deepcopy(_document())
    doc["records"][0]["config"]["block_m"] = json.loads("[" * 900 + "1" + "]" * 900)
    path = tmp_path / "n.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["import", str(path), "--db", f"sqlite:///{tmp_path / 'n.sqlite3'}"]) == 2
    err = capsys.readouterr().err
    assert "record 0: field 'config.block_m': must be a single value, got an array" in err


def test_repeated_values_are_each_validated(tmp_path, capsys):
    """The parser reuses objects it built for equal JSON values: a float or a boolean where an
    int belongs must still be refused, however often the int came before."""
    doc = _document()
    doc["records"][2]["config"] = {**doc["records"][0]["config"], "num_warps": 4.0}
    doc["records"][0]["config"]["num_warps"] = 4
    path = tmp_path / "f.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["import", str(path), "--db", f"sqlite:///{tmp_path / 'f.sqlite3'}"]) == 2
    assert "record 2: field 'config.num_warps'" in capsys.readouterr().err


def test_a_file_that_is_not_utf8_is_named(tmp_path, capsys):
    """A Latin-1 or binary file gave the codec's message without the file's name."""
    path = tmp_path / "latin1.json"
    path.write_bytes(json.dumps(_document()).encode()[:40] + b"\xff\xfe}")
    url = f"sqlite:///{tmp_path / 'u.sqlite3'}"
    assert cli.main(["import", str(path), "--db", url]) == 2
    err = capsys.readouterr().err
    assert f"{path} is not UTF-8 text (byte 40)" in err and err.count("\n") == 1, err
    assert not (tmp_path / "u.sqlite3").exists()
