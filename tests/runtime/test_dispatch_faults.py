"""The tuning database must never stall or break a model: real locks held by another process,
a real corrupt file, a real closed port.

What is asserted is the configuration (the runtime connection's busy timeout), the answer
(fallback or tuned config), the single warning naming the database, and the retry; the one
elapsed-time bound is loose (5 s, against the 30 s busy timeout the runtime used to inherit).
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time

import pytest

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import connect
from flashgen.db.records import TuningRecord
from flashgen.db.repository import RUNTIME_LOCK_TIMEOUT_MS, SQLITE_BUSY_TIMEOUT_S
from flashgen.hardware.sram import current_device, fits
from flashgen.hardware.tiles import default_config
from flashgen.runtime import dispatch
from flashgen.runtime.lookup import current_fingerprint

SPEC = KernelSpec(64, False, "float16", "fwd")
TUNED = TileConfig(32, 64, 2, 3)

# Holds a lock on a SQLite file until a line arrives on stdin. "wal": the file stays in WAL
# mode, so readers go on and only writers wait; "delete": rollback journal, where an
# exclusive lock keeps readers out too.
_HOLDER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "delete":
    con.execute("PRAGMA journal_mode = DELETE")
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
con.execute("ROLLBACK")
"""


@pytest.fixture
def sqlite_path(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHGEN_SHIPPED_DIR", str(tmp_path / "no-shipped"))
    path = tmp_path / "tuning.sqlite3"
    assert fits(SPEC, TUNED, current_device())
    database = connect(f"sqlite:///{path}")
    database.upsert_best(
        TuningRecord(SPEC, (128, 128), current_fingerprint(), TUNED, time_ms=0.2, n_trials=3,
                     impl="sdpa_efficient", impl_ratio=1.25)
    )  # fmt: skip
    database.close()
    dispatch.set_db(f"sqlite:///{path}")
    yield path
    dispatch.set_db(None)


class _Lock:
    def __init__(self, path, mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.strip() == "locked", self.proc.stderr.read()

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        assert self.proc.returncode == 0, self.proc.stderr.read()


def _later(monkeypatch, seconds: float) -> None:
    """Let `seconds` pass for dispatch's retry clock."""
    now = time.monotonic
    monkeypatch.setattr(dispatch, "_clock", lambda: now() + seconds)


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == dispatch.log.name and r.levelno == logging.WARNING
    ]


def test_the_runtime_connection_waits_milliseconds_the_tuner_seconds(sqlite_path):
    assert dispatch.choose_config(SPEC, 128, 128) == TUNED
    runtime_db = dispatch._state["db"]
    tuner_db = connect(f"sqlite:///{sqlite_path}")
    try:
        for database, want in ((runtime_db, RUNTIME_LOCK_TIMEOUT_MS),
                               (tuner_db, SQLITE_BUSY_TIMEOUT_S * 1000)):  # fmt: skip
            with database.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == want
    finally:
        tuner_db.close()
    assert RUNTIME_LOCK_TIMEOUT_MS <= 50


def test_a_writer_holding_the_lock_costs_no_stall_and_one_warning(sqlite_path, caplog):
    """WAL file, another process inside BEGIN EXCLUSIVE (a tuner, an import): lookups still
    read; recording new shapes as pending fails at once; one warning names the file."""
    caplog.set_level(logging.DEBUG, logger=dispatch.log.name)
    lock = _Lock(sqlite_path, "wal")
    try:
        start = time.monotonic()
        assert dispatch.choose_config(SPEC, 128, 128) == TUNED  # exact: nothing to write
        assert dispatch.source_of(SPEC, 128, 128) == "exact"
        assert dispatch.choose_config(SPEC, 200, 200) == TUNED  # nearest: pending write fails
        assert dispatch.source_of(SPEC, 200, 200) == "nearest"
        assert dispatch.choose_config(SPEC, 500, 500) == TUNED
        assert dispatch.choose_config(SPEC, 2000, 2000) == TUNED
        elapsed = time.monotonic() - start
    finally:
        lock.release()
    warned = _warnings(caplog)
    assert len(warned) == 1, warned
    assert str(sqlite_path) in warned[0] and "locked" in warned[0], warned[0]
    assert "pending" in warned[0]
    later = [r for r in caplog.records if r.levelno == logging.DEBUG and "locked" in r.getMessage()]
    assert len(later) >= 2  # the two later faults: debug only
    assert elapsed < 5, elapsed  # each of three pending writes waited 30 s before


@pytest.mark.impl_choice
def test_an_exclusively_locked_file_falls_back_then_is_asked_again(
    sqlite_path, caplog, monkeypatch
):
    """Rollback-journal file under an exclusive lock: not even readable. The call gets the
    default at once, one warning is logged, and once the lock is gone the same shape (and a
    new one) get the tuned record."""
    lock = _Lock(sqlite_path, "delete")
    try:
        assert dispatch.choose_config(SPEC, 128, 128) == default_config(SPEC)
        assert dispatch.source_of(SPEC, 128, 128) == "default"
        assert dispatch.impl_choice(SPEC, 128, 128, False) == ("flashgen", None, "default")
        assert dispatch.choose_config(SPEC, 100, 100) == default_config(SPEC)  # in the pause
        assert dispatch.choose_config(SPEC, 300, 300) == default_config(SPEC)
    finally:
        lock.release()
    warned = _warnings(caplog)
    assert len(warned) == 1 and str(sqlite_path) in warned[0], warned
    assert "locked" in warned[0]
    # Still within the pause: no new attempt yet, the fallbacks stand.
    assert dispatch.choose_config(SPEC, 128, 128) == default_config(SPEC)
    assert dispatch.choose_impl(SPEC, 128, 128, False) == "flashgen"
    _later(monkeypatch, dispatch.RETRY_AFTER_S + 1)
    assert dispatch.choose_impl(SPEC, 128, 128, False) == "sdpa_efficient"  # the record's
    assert dispatch.choose_config(SPEC, 128, 128) == TUNED
    assert dispatch.source_of(SPEC, 128, 128) == "exact"
    assert len(_warnings(caplog)) == 1


def test_a_corrupt_file_falls_back_with_one_warning_and_is_left_alone(
    tmp_path, caplog, monkeypatch
):
    path = tmp_path / "corrupt.sqlite3"
    garbage = bytes(range(256)) * 64
    path.write_bytes(garbage)
    dispatch.set_db(f"sqlite:///{path}")
    try:
        other = KernelSpec(128, True, "bfloat16")
        assert dispatch.choose_config(SPEC, 100, 100) == default_config(SPEC)
        assert dispatch.choose_config(other, 7, 7) == default_config(other)
        _later(monkeypatch, dispatch.MAX_RETRY_AFTER_S + 1)  # a retry fails the same way
        assert dispatch.choose_config(SPEC, 1000, 1000) == default_config(SPEC)
    finally:
        dispatch.set_db(None)
    warned = _warnings(caplog)
    assert len(warned) == 1, warned
    assert str(path) in warned[0] and "not a database" in warned[0], warned[0]
    assert path.read_bytes() == garbage


def test_an_unreachable_server_falls_back_with_one_warning_without_the_password(caplog):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg2://flash:s3cret-pw@127.0.0.1:{port}/tuning"
    dispatch.set_db(url)
    try:
        assert dispatch.choose_config(SPEC, 100, 100) == default_config(SPEC)
        assert dispatch.choose_config(SPEC, 5000, 5000) == default_config(SPEC)
    finally:
        dispatch.set_db(None)
    warned = _warnings(caplog)
    assert len(warned) == 1, warned
    assert f"127.0.0.1:{port}/tuning" in warned[0] and "s3cret-pw" not in caplog.text
    assert "flash:***@" in warned[0]


def test_each_database_is_warned_about_once(tmp_path, caplog):
    for name in ("a", "b", "a"):
        path = tmp_path / f"{name}.sqlite3"
        path.write_bytes(b"not a database at all" * 50)
        dispatch.set_db(f"sqlite:///{path}")
        assert dispatch.choose_config(SPEC, 64, 64) == default_config(SPEC)
    dispatch.set_db(None)
    warned = _warnings(caplog)
    assert len(warned) == 2, warned
    assert str(tmp_path / "a.sqlite3") in warned[0] and str(tmp_path / "b.sqlite3") in warned[1]


@pytest.mark.postgres
def test_the_runtime_postgres_connection_waits_milliseconds_for_locks(
    pg_url, monkeypatch, tmp_path
):
    monkeypatch.setenv("FLASHGEN_SHIPPED_DIR", str(tmp_path / "no-shipped"))
    dispatch.set_db(pg_url)
    try:
        assert dispatch.choose_config(SPEC, 128, 128) == default_config(SPEC)
        assert dispatch.source_of(SPEC, 128, 128) == "default"
        with dispatch._state["db"].engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == (
                f"{RUNTIME_LOCK_TIMEOUT_MS}ms"
            )
    finally:
        dispatch.set_db(None)
    tuner_db = connect(pg_url)
    try:
        assert (SPEC, (128, 128)) in tuner_db.pending()  # the runtime connection wrote it
        with tuner_db.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == "0"
    finally:
        tuner_db.close()
