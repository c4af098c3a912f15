"""Runtime config choice: one DB lookup per (spec, bucket), never a failed attention call."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import connect
from flashgen.db.records import TuningRecord
from flashgen.hardware.sram import current_device, fits
from flashgen.hardware.tiles import default_config
from flashgen.runtime import dispatch
from flashgen.runtime.lookup import current_fingerprint

SPEC = KernelSpec(64, False, "float16", "fwd")


@pytest.fixture
def db_url(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHGEN_SHIPPED_DIR", str(tmp_path / "no-shipped"))
    url = f"sqlite:///{tmp_path / 'dispatch.sqlite3'}"
    dispatch.set_db(url)
    yield url
    dispatch.set_db(None)


@pytest.fixture
def query_counter():
    """Counts every SQL statement any engine in this process runs."""
    counter = {"n": 0}

    def count(*_args):
        counter["n"] += 1

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    yield counter
    sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)


def _store(url, cfg, bucket=(128, 128)):
    database = connect(url)
    try:
        database.upsert_best(
            TuningRecord(SPEC, bucket, current_fingerprint(), cfg, time_ms=0.2, n_trials=3)
        )
    finally:
        database.close()


def test_exact_record_is_used_and_cache_hits_do_not_touch_the_db(db_url, query_counter):
    cfg = TileConfig(32, 64, 2, 3)
    assert fits(SPEC, cfg, current_device())
    _store(db_url, cfg)
    query_counter["n"] = 0
    assert dispatch.choose_config(SPEC, 100, 128) == cfg
    assert dispatch.source_of(SPEC, 100, 128) == "exact"
    first = query_counter["n"]
    assert first >= 1
    for seq in (65, 77, 100, 127, 128):  # all in bucket (128, 128)
        assert dispatch.choose_config(SPEC, seq, seq) == cfg
    assert query_counter["n"] == first
    assert connect(db_url).pending() == []  # an exact hit is not pending


def test_pending_is_recorded_once_per_key(db_url, query_counter):
    for seq in (300, 301, 400, 512):
        assert dispatch.choose_config(SPEC, seq, 1000) == default_config(SPEC)
    assert dispatch.source_of(SPEC, 300, 1000) == "default"
    dispatch.choose_config(SPEC, 40, 40)
    rows = connect(db_url).pending_rows()
    assert [(r["spec"], r["bucket"], r["seen"]) for r in rows] == [
        (SPEC, (64, 64), 1),
        (SPEC, (512, 1024), 1),
    ]
    assert {r["gpu_name"] for r in rows} == {current_device().name}


def test_nearest_record_is_used_and_marked_pending(db_url):
    cfg = TileConfig(64, 32, 4, 2)
    _store(db_url, cfg, bucket=(1024, 1024))
    assert dispatch.choose_config(SPEC, 2000, 2000) == cfg
    assert dispatch.source_of(SPEC, 2000, 2000) == "nearest"
    assert connect(db_url).pending() == [(SPEC, (2048, 2048))]


def test_clear_cache_sees_new_records(db_url):
    assert dispatch.choose_config(SPEC, 64, 64) == default_config(SPEC)
    cfg = TileConfig(16, 32, 1, 1)
    _store(db_url, cfg, bucket=(64, 64))
    assert dispatch.choose_config(SPEC, 64, 64) == default_config(SPEC)  # still cached
    dispatch.clear_cache()
    assert dispatch.choose_config(SPEC, 64, 64) == cfg


def test_unreachable_database_falls_back_to_default():
    dispatch.set_db("postgresql+psycopg2://flash:pw@127.0.0.1:1/nowhere?connect_timeout=2")
    try:
        assert dispatch.choose_config(SPEC, 100, 100) == default_config(SPEC)
        assert dispatch.source_of(SPEC, 100, 100) == "default"
        assert dispatch.choose_config(KernelSpec(128, True, "bfloat16"), 7, 7) == default_config(
            KernelSpec(128, True, "bfloat16")
        )
    finally:
        dispatch.set_db(None)


def test_without_sqlalchemy_the_default_is_used(tmp_path):
    """The GPU machine has no SQLAlchemy unless carried: dispatch must not notice."""
    code = (
        "import sys; sys.modules['sqlalchemy'] = None\n"
        "from flashgen.hardware import tiles as space\n"
        "from flashgen.runtime import dispatch\n"
        "from flashgen.core.spec import KernelSpec\n"
        "s = KernelSpec(64, True, 'float16')\n"
        "assert dispatch.choose_config(s, 100, 100) == space.default_config(s)\n"
        "assert dispatch.source_of(s, 100, 100) == 'default'\n"
        "print('ok')\n"
    )
    env = {
        **os.environ,
        "FLASHGEN_DB_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}",
        "FLASHGEN_GPU": "nvidia-h200",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert not (tmp_path / "x.sqlite3").exists()


def test_forked_child_opens_its_own_connection(db_url):
    dispatch.choose_config(SPEC, 64, 64)  # the parent has the database open
    parent_db = dispatch._state["db"]
    assert parent_db is not None
    pid = os.fork()
    if pid == 0:  # child: a new shape must reach the database through a fresh connection
        code = 1
        try:
            dispatch.choose_config(SPEC, 4000, 4000)
            code = 0 if dispatch.source_of(SPEC, 4000, 4000) == "default" else 2
            if dispatch._state["db"] is parent_db:  # reused the parent's pooled connections
                code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (SPEC, (4096, 4096)) in connect(db_url).pending()
    dispatch.choose_config(SPEC, 16, 16)  # the parent's connection still works
    assert (SPEC, (16, 16)) in connect(db_url).pending()
