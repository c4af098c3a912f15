"""One contract test class for the tuning database, run on SQLite and on a real PostgreSQL.

PostgreSQL cases are marked `postgres`; they need FLASHGEN_TEST_PG_URL (scripts/with-postgres.sh,
which `make test` uses, starts a throw-away server). Every test gets its own database: a fresh
SQLite file, or a fresh PostgreSQL database created through an admin connection and dropped
afterwards, so xdist workers never share state.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import sys

import pytest
import sqlalchemy as sa

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import connect, migrate
from flashgen.db.portable import FormatError, dump, load, record_to_json
from flashgen.db.records import EnvFingerprint, Trial, TuningRecord
from flashgen.db.repository import DatabaseError, TuningDB
from flashgen.db.urls import mask_url
from flashgen.hardware import sram
from flashgen.hardware.tiles import default_config, safe_config
from flashgen.runtime.lookup import current_fingerprint, lookup

SPEC = KernelSpec(64, True, "float16", "fwd")
OTHER_SPEC = KernelSpec(128, False, "float16", "fwd")
ENV = EnvFingerprint("NVIDIA H200", "9.0", 132, 232448, "3.6.0", "2.11.0", "0.1.0", "abc123")
ENV_OTHER_CODE = dataclasses.replace(ENV, template_hash="def456")


def _record(
    time_ms=1.0, *, bucket=(128, 128), env=ENV, spec=SPEC, measured=True, cfg=None, **extra
):
    return TuningRecord(
        spec=spec,
        bucket=bucket,
        env=env,
        config=cfg or TileConfig(64, 64, 4, 2),
        time_ms=time_ms,
        tflops=100.0 / time_ms,
        n_trials=12,
        measured=measured,
        host="node1",
        created_at=dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc),
        **extra,
    )


@pytest.fixture
def shipped(tmp_path):
    """An empty shipped layer (tests add files), so the repo's tuning_db/ never leaks in."""
    directory = tmp_path / "shipped"
    directory.mkdir()
    return directory


@pytest.fixture
def db(db_url, shipped):
    database = connect(db_url, shipped_dir=shipped)
    yield database
    database.close()


def _valid_row(**overrides):
    row = {
        "spec_uri": SPEC.uri(),
        "bucket_q": 128,
        "bucket_k": 128,
        "env_key": ENV.key(),
        **ENV.as_dict(),
        "block_m": 64,
        "block_n": 64,
        "num_warps": 4,
        "num_stages": 2,
        "time_ms": 1.0,
        "tflops": 1.0,
        "n_trials": 1,
        "measured": True,
        "host": "h",
        "created_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    }
    row.update(overrides)
    return row


BAD_ROWS = {
    "block_m_48": {"block_m": 48},
    "block_m_512": {"block_m": 512},
    "block_n_8": {"block_n": 8},
    "block_n_negative": {"block_n": -64},
    "block_m_string": {"block_m": "sixty-four"},
    "warps_3": {"num_warps": 3},
    "warps_32": {"num_warps": 32},
    "stages_0": {"num_stages": 0},
    "stages_9": {"num_stages": 9},
    "time_zero": {"time_ms": 0.0},
    "time_negative": {"time_ms": -1.0},
    "tflops_negative": {"tflops": -1.0},
    "bucket_not_pow2": {"bucket_q": 100},
    "bucket_too_small": {"bucket_k": 8},
    "spec_uri_garbage": {"spec_uri": "import os"},
    "impl_unknown": {"impl": "sdpa_math", "impl_ratio": 1.5},
    "impl_code": {"impl": "__import__('os')", "impl_ratio": 1.5},
    "impl_sdpa_without_ratio": {"impl": "sdpa_cudnn", "impl_ratio": None},
    "impl_ratio_below_one": {"impl": "sdpa_flash", "impl_ratio": 0.5},
}


# One of eight concurrent writers, run as `python -c` so that each starts in a fraction of a
# second (no pytest, no torch): waits for the start file, then upserts shared keys with random
# times (measured or modelled) and one key of its own; prints what it wrote as JSON.
_WORKER = """
import json, os, random, sys, time
from flashgen.core.config import TileConfig
from flashgen.db import connect
from flashgen.db.records import EnvFingerprint, TuningRecord
from flashgen.core.spec import KernelSpec
url, worker, n_keys, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
env, spec = EnvFingerprint(**json.loads(sys.argv[5])), KernelSpec.from_uri(sys.argv[6])
cfg = TileConfig(16 << (worker % 5), 64, (1, 2, 4, 8)[worker % 4], 1 + worker % 8)
while not os.path.exists(go):
    time.sleep(0.01)
db = connect(url)
rng, wrote = random.Random(worker), []
for rnd in range(3):
    for key in range(n_keys):
        t, measured = rng.uniform(1.0, 100.0), (worker + key + rnd) % 3 != 0
        db.upsert_best(TuningRecord(spec, (16 << key, 64), env, cfg, t, measured=measured))
        wrote.append([key, t, measured, cfg.as_dict()])
db.upsert_best(TuningRecord(spec, (1 << 20, 16 << worker), env, cfg, 5.0))
print(json.dumps(wrote))
"""


def _set(path: str, value):
    def tamper(rec):
        *parents, leaf = path.split(".")
        for part in parents:
            rec = rec[part]
        rec[leaf] = value

    return tamper


TAMPERINGS = {
    "time_ms": lambda rec: rec.pop("time_ms"),
    "config.block_m": _set("config.block_m", "64"),
    "config.block_n": _set("config.block_n", -64),
    "config.num_stages": _set("config.num_stages", 9),
    "config.num_warps": _set("config.num_warps", True),
    "bucket": _set("bucket", [128, 100]),
    "spec": _set("spec", "attn_fwd_d64_causal_f16; DROP TABLE x"),
    "code": _set("code", "__import__('os').system('true')"),
    "env.smem_optin": _set("env.smem_optin", 0),
    "env.capability": _set("env.capability", "9.0.0.0.0"),
    "created_at": _set("created_at", "yesterday"),
    "impl": _set("impl", "os.system"),
    "impl_ratio": _set("impl_ratio", 0.9),
}


class TestTuningDBContract:
    def test_upsert_keeps_the_faster_record(self, db):
        assert db.upsert_best(_record(2.0)) is True
        assert db.upsert_best(_record(3.0, cfg=TileConfig(32, 32, 2, 1))) is False
        assert db.upsert_best(_record(1.5, cfg=TileConfig(128, 64, 8, 3))) is True
        assert db.upsert_best(_record(1.5, cfg=TileConfig(16, 16, 1, 1))) is False  # tie keeps
        got = db.get(SPEC, (128, 128), ENV)
        assert got is not None
        assert got.time_ms == 1.5 and got.config == TileConfig(128, 64, 8, 3)
        assert len(db.records()) == 1

    def test_measured_beats_modelled_whatever_the_times(self, db):
        assert db.upsert_best(_record(0.1, measured=False)) is True
        assert db.upsert_best(_record(9.0, measured=True)) is True
        assert db.upsert_best(_record(0.01, measured=False)) is False
        assert db.upsert_best(_record(8.0, measured=True)) is True
        got = db.get(SPEC, (128, 128), ENV)
        assert got.measured is True and got.time_ms == 8.0

    def test_replace_best_supersedes_only_the_retimed_configs(self, db):
        first, second = TileConfig(64, 64, 4, 3), TileConfig(128, 64, 4, 2)
        assert db.upsert_best(_record(1.00, cfg=first)) is True
        # Confirmation re-timed both: the winner's time is higher than the stored first reading.
        assert db.replace_best(_record(1.10, cfg=second), [first, second]) is True
        got = db.get(SPEC, (128, 128), ENV)
        assert got.config == second and got.time_ms == 1.10
        # A stored record that was not re-timed keeps keep-best semantics.
        other = TileConfig(32, 64, 4, 2)
        assert db.upsert_best(_record(0.90, cfg=other)) is True
        assert db.replace_best(_record(1.05, cfg=first), [first, second]) is False
        assert db.get(SPEC, (128, 128), ENV).config == other
        assert len(db.records()) == 1

    def test_round_trip_of_every_field(self, db):
        rec = _record(0.4321)
        db.upsert_best(rec)
        assert db.get(SPEC, (128, 128), ENV) == rec

    def test_impl_and_ratio_round_trip_and_follow_the_kept_record(self, db):
        cudnn = _record(1.0, impl="sdpa_cudnn", impl_ratio=1.25)
        assert db.upsert_best(cudnn) is True
        assert db.get(SPEC, (128, 128), ENV) == cudnn
        # A faster flashgen kernel from a run that compared nothing replaces the row whole:
        # its impl is "flashgen, not compared", never a stale winner from another kernel time.
        assert db.upsert_best(_record(0.5, cfg=TileConfig(32, 32, 2, 1))) is True
        got = db.get(SPEC, (128, 128), ENV)
        assert (got.impl, got.impl_ratio, got.compared) == ("flashgen", None, False)
        flash = _record(0.5, cfg=TileConfig(32, 32, 2, 1), impl="sdpa_flash", impl_ratio=1.1)
        assert db.replace_best(flash, [flash.config]) is True
        assert db.get(SPEC, (128, 128), ENV) == flash

    def test_upgrade_from_0001_keeps_rows(self, db_url):
        """A database created at revision 0001 with a record in it: upgrading to head keeps the
        row (as flashgen, not compared) and the new columns then take a vendor winner."""
        from alembic import command

        engine = sa.create_engine(db_url)
        try:
            with engine.connect() as conn:
                command.upgrade(migrate.alembic_config(conn), "0001_initial")
                conn.commit()
            old = _valid_row(bucket_q=256, time_ms=0.75, block_m=128, n_trials=7)
            with engine.begin() as conn:
                conn.execute(sa.insert(sa.table("flashgen_records", *map(sa.column, old))), old)
                assert migrate.current_revision(conn) == "0001_initial"
            assert migrate.upgrade(engine) is True
            with engine.connect() as conn:
                assert migrate.current_revision(conn) == migrate.HEAD == "0002_impl"
        finally:
            engine.dispose()
        database = TuningDB(db_url)
        try:
            (kept,) = database.records()
            assert (kept.bucket, kept.time_ms, kept.config, kept.n_trials) == (
                (256, 128),
                0.75,
                TileConfig(128, 64, 4, 2),
                7,
            )
            assert (kept.impl, kept.impl_ratio) == ("flashgen", None)
            assert kept.env == ENV and kept.host == "h"
            won = dataclasses.replace(kept, impl="sdpa_cudnn", impl_ratio=1.2)
            assert database.replace_best(won, [kept.config]) is True
            assert database.records() == [won]
        finally:
            database.close()

    def test_records_are_keyed_by_spec_bucket_and_environment(self, db):
        db.upsert_best(_record(1.0))
        db.upsert_best(_record(2.0, env=ENV_OTHER_CODE, cfg=TileConfig(32, 32, 4, 1)))
        db.upsert_best(_record(3.0, bucket=(256, 128)))
        db.upsert_best(_record(4.0, spec=OTHER_SPEC))
        assert len(db.records()) == 4
        assert db.get(SPEC, (128, 128), ENV_OTHER_CODE).config == TileConfig(32, 32, 4, 1)
        assert db.get(SPEC, (128, 128), ENV).time_ms == 1.0
        assert db.get(SPEC, (512, 512), ENV) is None
        assert [r.time_ms for r in db.records(spec=OTHER_SPEC)] == [4.0]
        assert len(db.records(env=ENV)) == 3

    def test_lookup_order_exact_nearest_shipped_default(self, db, shipped):
        h200 = sram.KNOWN_GPUS["nvidia-h200"]
        env = current_fingerprint(h200)
        near_cfg, far_cfg, exact_cfg = (
            TileConfig(32, 64, 4, 2),
            TileConfig(16, 16, 2, 1),
            TileConfig(64, 32, 4, 1),
        )
        for cfg in (near_cfg, far_cfg, exact_cfg):
            assert sram.fits(SPEC, cfg, h200)
        # Nothing stored: the space's default for this GPU.
        found = lookup(db, SPEC, 100, 100, h200)
        assert (found.source, found.config) == ("default", default_config(SPEC, h200))
        # A shipped record of the same GPU model (other software versions) beats the default.
        shipped_rec = _record(
            1.0, bucket=(4096, 4096), env=dataclasses.replace(env, triton_version="0.0")
        )
        dump([shipped_rec], shipped / "nvidia-h200.json")
        found = lookup(db, SPEC, 100, 100, h200)
        assert found.source == "shipped" and found.record == shipped_rec
        # Another GPU or other code in the user's DB is never used as exact or nearest.
        db.upsert_best(
            _record(0.1, bucket=(128, 128), env=dataclasses.replace(env, gpu_name="NVIDIA A100"))
        )
        db.upsert_best(
            _record(0.1, bucket=(128, 128), env=dataclasses.replace(env, template_hash="old"))
        )
        assert lookup(db, SPEC, 100, 100, h200).source == "shipped"
        # A tuned bucket on this GPU and code: the nearest one in log2 steps wins.
        db.upsert_best(_record(1.0, bucket=(1024, 1024), env=env, cfg=far_cfg))
        db.upsert_best(_record(1.0, bucket=(64, 256), env=env, cfg=near_cfg))
        found = lookup(db, SPEC, 100, 100, h200)
        assert (found.source, found.config, found.record.bucket) == ("nearest", near_cfg, (64, 256))
        # The exact bucket beats everything.
        db.upsert_best(_record(1.0, bucket=(128, 128), env=env, cfg=exact_cfg))
        found = lookup(db, SPEC, 97, 128, h200)
        assert (found.source, found.config) == ("exact", exact_cfg)
        # Other specs do not see these records.
        assert lookup(db, OTHER_SPEC, 100, 100, h200).source == "default"

    def test_lookup_falls_back_to_the_other_16_bit_dtype(self, db, shipped):
        """fp16 and bf16 kernels share their tile trade-offs: with nothing for fp16, a bf16
        record of this GPU ("sibling") beats the defaults table; any fp16 record beats it."""
        h200 = sram.KNOWN_GPUS["nvidia-h200"]
        env = current_fingerprint(h200)
        bf16 = SPEC.sibling()
        assert bf16 == KernelSpec(64, True, "bfloat16", "fwd") and bf16.sibling() == SPEC
        assert KernelSpec(64, True, "float32", "fwd").sibling() is None
        shipped_cfg, mine_cfg, fp16_cfg = (
            TileConfig(32, 64, 4, 2),
            TileConfig(64, 32, 4, 1),
            TileConfig(16, 16, 2, 1),
        )
        other_code = dataclasses.replace(env, triton_version="0.0")
        dump([_record(1.0, spec=bf16, env=other_code, cfg=shipped_cfg)], shipped / "h200.json")
        found = lookup(db, SPEC, 100, 100, h200)
        assert (found.source, found.config) == ("sibling", shipped_cfg)
        # This environment's own bf16 record comes before a shipped one.
        db.upsert_best(_record(1.0, spec=bf16, bucket=(1024, 1024), env=env, cfg=mine_cfg))
        found = lookup(db, SPEC, 100, 100, h200)
        assert (found.source, found.config) == ("sibling", mine_cfg)
        # An exact fp16 record that does not fit this GPU is passed over, and the sibling
        # step still sees this environment's bf16 record.
        too_big = TileConfig(256, 256, 8, 8)
        assert not sram.fits(SPEC, too_big, h200)
        db.upsert_best(_record(1.0, bucket=(128, 128), env=env, cfg=too_big))
        found = lookup(db, SPEC, 100, 100, h200)
        assert (found.source, found.config) == ("sibling", mine_cfg)
        # Any fp16 record of this GPU that fits wins over the sibling, even a distant bucket.
        db.upsert_best(_record(1.0, bucket=(8192, 8192), env=env, cfg=fp16_cfg))
        assert lookup(db, SPEC, 100, 100, h200).source == "nearest"
        # float32 has no sibling.
        f32 = KernelSpec(64, True, "float32", "fwd")
        assert lookup(db, f32, 100, 100, h200).source in ("default", "safe")

    def test_lookup_skips_a_record_that_does_not_fit_this_gpu(self, db):
        small = dataclasses.replace(
            sram.KNOWN_GPUS["nvidia-h200"], name="Small GPU", smem_optin_bytes=64 * 1024
        )
        env = current_fingerprint(small)
        big, ok = TileConfig(256, 256, 8, 4), TileConfig(32, 32, 4, 1)
        assert not sram.fits(SPEC, big, small) and sram.fits(SPEC, ok, small)
        db.upsert_best(_record(0.5, bucket=(128, 128), env=env, cfg=big))
        found = lookup(db, SPEC, 128, 128, small)
        assert found.source in ("default", "safe") and sram.fits(SPEC, found.config, small)
        db.upsert_best(_record(0.9, bucket=(256, 256), env=env, cfg=ok))
        found = lookup(db, SPEC, 128, 128, small)
        assert (found.source, found.config) == ("nearest", ok)

    def test_lookup_safe_when_no_default_fits(self, db):
        tiny = dataclasses.replace(
            sram.KNOWN_GPUS["nvidia-h200"], name="Tiny GPU", smem_optin_bytes=1024
        )
        found = lookup(db, SPEC, 128, 128, tiny)
        assert (found.source, found.config) == ("safe", safe_config(SPEC))

    def test_pending_shapes(self, db):
        db.record_pending(SPEC, (256, 256), "NVIDIA H200")
        db.record_pending(SPEC, (256, 256), "NVIDIA H200")
        db.record_pending(SPEC, (256, 256), "NVIDIA A100")
        db.record_pending(OTHER_SPEC, (16, 4096), "NVIDIA H200")
        assert db.pending() == [(SPEC, (256, 256)), (OTHER_SPEC, (16, 4096))]
        assert db.pending("NVIDIA A100") == [(SPEC, (256, 256))]
        rows = {(r["spec"], r["gpu_name"]): r["seen"] for r in db.pending_rows()}
        assert rows[(SPEC, "NVIDIA H200")] == 2 and rows[(SPEC, "NVIDIA A100")] == 1
        assert db.clear_pending(SPEC, (256, 256)) == 2
        assert db.pending() == [(OTHER_SPEC, (16, 4096))]

    def test_trials_are_stored_with_failures(self, db):
        trials = [
            Trial(TileConfig(64, 64, 4, 2), 0.5),
            Trial(TileConfig(128, 128, 8, 4), None, "pruned", "smem 278528 > 232448"),
            Trial(TileConfig(128, 64, 8, 3), None, "failed", "OutOfResources: shared memory"),
            Trial(TileConfig(16, 16, 1, 1), 3.0, "wrong", "max abs err 0.3"),
        ]
        assert db.add_trials(SPEC, (128, 128), ENV, trials, host="node7") == 4
        db.add_trials(OTHER_SPEC, (128, 128), ENV, trials[:1])
        assert db.trials(SPEC, (128, 128), ENV) == trials
        assert len(db.trials()) == 5
        with pytest.raises(ValueError, match="needs a time_ms"):
            Trial(TileConfig(64, 64, 4, 2), None, "ok")

    def test_check_constraints_refuse_bad_rows(self, db):
        """Raw INSERTs (no Python validation on the way) of out-of-space values fail in the DB."""
        columns = [*_valid_row(), "impl", "impl_ratio"]  # the last two: revision 0002
        table = sa.table("flashgen_records", *[sa.column(c) for c in columns])
        with db.engine.begin() as conn:
            conn.execute(sa.insert(table).values(**_valid_row(bucket_q=256)))
        accepted = []
        for i, (name, bad) in enumerate(BAD_ROWS.items()):
            row = {**_valid_row(bucket_k=16 << i), **bad}  # distinct keys: only CHECKs can refuse
            try:
                with db.engine.begin() as conn:
                    conn.execute(sa.insert(table).values(**row))
                accepted.append(name)
            except sa.exc.DBAPIError:
                pass
        assert accepted == []
        assert len(db.records()) == 1

    def test_check_constraints_on_trials(self, db):
        row = {
            "spec_uri": SPEC.uri(),
            "bucket_q": 16,
            "bucket_k": 16,
            "env_key": "k",
            "block_m": 64,
            "block_n": 64,
            "num_warps": 4,
            "num_stages": 2,
            "time_ms": 1.0,
            "status": "ok",
            "error": "",
            "host": "h",
            "created_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        }
        table = sa.table("flashgen_trials", *[sa.column(c) for c in row])
        with db.engine.begin() as conn:
            conn.execute(sa.insert(table).values(**row))
        for bad in ({"status": "bogus"}, {"time_ms": None}, {"num_warps": 5}, {"time_ms": -2.0}):
            with pytest.raises(sa.exc.DBAPIError), db.engine.begin() as conn:
                conn.execute(sa.insert(table).values(**{**row, **bad}))
        assert len(db.trials()) == 1

    def test_migration_from_empty_database_and_rerun(self, db_url):
        engine = sa.create_engine(db_url)
        try:
            with engine.begin() as conn:  # Optuna's own version table must survive untouched
                conn.exec_driver_sql(
                    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"
                )
                conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('optuna-v3.2.0.a')")
            assert migrate.upgrade(engine) is True
            assert migrate.upgrade(engine) is False
            from alembic import command

            with engine.connect() as conn:  # the full Alembic path again: a no-op
                command.upgrade(migrate.alembic_config(conn), "head")
                conn.commit()
            with engine.connect() as conn:
                assert migrate.current_revision(conn) == migrate.HEAD == migrate.script_head()
                assert (
                    conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
                    == "optuna-v3.2.0.a"
                )
                tables = set(sa.inspect(conn).get_table_names())
                assert {
                    "flashgen_records",
                    "flashgen_trials",
                    "flashgen_pending",
                    "flashgen_alembic_version",
                } <= tables
                from alembic.autogenerate import compare_metadata
                from alembic.migration import MigrationContext

                from flashgen.db.models import metadata

                ctx = MigrationContext.configure(conn, opts={"include_object": _only_flashgen})
                assert compare_metadata(ctx, metadata) == []
            database = TuningDB(db_url)
            assert database.upsert_best(_record()) is True
            database.close()
        finally:
            engine.dispose()

    def test_url_is_masked(self, db_url, shipped):
        url = sa.engine.make_url(db_url)
        if url.get_backend_name() == "postgresql":
            url = url.set(password="s3cret-pw")
        database = connect(url.render_as_string(hide_password=False), shipped_dir=shipped)
        try:
            assert "s3cret-pw" not in database.url_safe and "s3cret-pw" not in repr(database)
            assert database.dialect == url.get_backend_name()
        finally:
            database.close()

    def test_eight_processes_upserting_the_same_keys(self, db_url, tmp_path):
        """Eight writers on an empty database at once: the schema is created once, no write
        is lost, and every shared key ends with the best record any writer offered."""
        n_workers, n_keys = 8, 6
        go = tmp_path / "go"
        args = [str(n_keys), str(go), json.dumps(ENV.as_dict()), SPEC.uri()]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WORKER, db_url, str(w), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for w in range(n_workers)
        ]
        go.touch()
        outputs = [p.communicate(timeout=240) for p in procs]
        assert [p.returncode for p in procs] == [0] * n_workers, [e for _, e in outputs]
        best: dict = {}
        for out, _ in outputs:
            for key, t, measured, cfg in json.loads(out):
                offer = (not measured, t, TileConfig(**cfg))
                best[key] = min(best.get(key, offer), offer)
        database = connect(db_url)
        try:
            for key, (not_measured, t, cfg) in best.items():
                got = database.get(SPEC, (16 << key, 64), ENV)
                assert (got.measured, got.time_ms, got.config) == (not not_measured, t, cfg)
            for worker in range(n_workers):  # every writer's own key survived
                assert database.get(SPEC, (1 << 20, 16 << worker), ENV) is not None
            assert len(database.records()) == n_keys + n_workers
        finally:
            database.close()

    def test_export_import_round_trip(self, db, tmp_path):
        source = connect(f"sqlite:///{tmp_path / 'source.sqlite3'}")
        recs = [
            _record(1.25, impl="sdpa_efficient", impl_ratio=1.03),
            _record(0.5, measured=False, bucket=(16, 8192)),
            _record(2.0, env=ENV_OTHER_CODE, spec=OTHER_SPEC, cfg=TileConfig(128, 32, 8, 5)),
        ]
        for rec in recs:
            source.upsert_best(rec)
        path = tmp_path / "export.json"
        assert dump(source.records(), path) == 3
        source.close()
        loaded = load(path)
        assert db.upsert_many(loaded) == 3
        assert {json.dumps(record_to_json(r), sort_keys=True) for r in db.records()} == {
            json.dumps(record_to_json(r), sort_keys=True) for r in recs
        }
        assert db.upsert_many(load(path)) == 0  # importing again changes nothing

    def test_version_1_files_import_as_flashgen_not_compared(self, db, tmp_path):
        doc = {"format": "flashgen-tuning-db", "version": 1, "records": []}
        for rec in (_record(1.0), _record(2.0, bucket=(64, 64))):
            obj = record_to_json(rec)
            del obj["impl"], obj["impl_ratio"]
            doc["records"].append(obj)
        path = tmp_path / "v1.json"
        path.write_text(json.dumps(doc))
        assert db.upsert_many(load(path)) == 2
        assert {(r.impl, r.impl_ratio) for r in db.records()} == {("flashgen", None)}
        doc["records"][0]["impl"] = "sdpa_cudnn"  # a version 1 file cannot name a winner
        path.write_text(json.dumps(doc))
        with pytest.raises(FormatError, match="record 0: field 'impl': unknown field"):
            load(path)

    def test_tampered_files_are_refused_and_nothing_written(self, db, tmp_path):
        """Record 0 is valid, record 1 tampered: the file is refused whole, the DB stays empty."""
        from flashgen.db import cli

        path = tmp_path / "t.json"
        dump([_record(1.0, bucket=(64, 64)), _record(1.0, bucket=(128, 128))], path)
        clean = path.read_text()
        for field, tamper in TAMPERINGS.items():
            doc = json.loads(clean)
            tamper(doc["records"][1])
            path.write_text(json.dumps(doc))
            with pytest.raises(FormatError, match=rf"record 1: field '{field}'"):
                load(path)
            assert cli.main(["import", str(path), "--db", _url_of(db)]) == 2
            assert db.records() == []
        assert cli.main(["import", str(path), "--db", _url_of(db)]) == 2
        path.write_text(clean)
        assert cli.main(["import", str(path), "--db", _url_of(db)]) == 0
        assert len(db.records()) == 2

    def test_database_error_hides_the_password(self):
        with pytest.raises(DatabaseError) as info:
            connect("postgresql+psycopg2://flash:hunter2pw@127.0.0.1:1/nowhere")
        assert "hunter2pw" not in str(info.value) and "***" in str(info.value)


def _url_of(database) -> str:
    return database.engine.url.render_as_string(hide_password=False)


def _only_flashgen(obj, name, type_, reflected, compare_to):
    return (
        type_ != "table"
        or (name or "").startswith("flashgen_")
        and name != "flashgen_alembic_version"
    )


def test_migrated_check_constraints_are_the_models(tmp_path):
    """The migration's frozen CHECKs and the models' (built from `TileConfig`'s constants) are
    the same text, name for name (SQLite keeps the text as written)."""
    import sqlalchemy as sa

    from flashgen.db import models

    database = connect(f"sqlite:///{tmp_path / 'checks.sqlite3'}", shipped_dir=tmp_path)
    try:
        inspector = sa.inspect(database.engine)
        for table in models.Base.metadata.sorted_tables:
            migrated = {
                c["name"]: c["sqltext"] for c in inspector.get_check_constraints(table.name)
            }
            declared = {
                c.name: str(c.sqltext)
                for c in table.constraints
                if isinstance(c, sa.CheckConstraint)
            }
            assert declared and migrated == declared, table.name
    finally:
        database.close()


def test_mask_url():
    assert (
        mask_url("postgresql+psycopg2://bob:p%40ss@db:5432/t")
        == "postgresql+psycopg2://bob:***@db:5432/t"
    )
    assert mask_url("sqlite:////tmp/x.sqlite3") == "sqlite:////tmp/x.sqlite3"


def test_malformed_files_are_refused(tmp_path):
    cases = {
        "not json": "{",
        "wrong format": json.dumps({"format": "x", "version": 1, "records": []}),
        "future version": json.dumps(
            {"format": "flashgen-tuning-db", "version": 99, "records": []}
        ),
        "records not list": json.dumps(
            {"format": "flashgen-tuning-db", "version": 1, "records": {}}
        ),
        "record not object": json.dumps(
            {"format": "flashgen-tuning-db", "version": 1, "records": [3]}
        ),
    }
    for text in cases.values():
        path = tmp_path / "bad.json"
        path.write_text(text)
        with pytest.raises(FormatError):
            load(path)


def test_default_url_is_a_sqlite_file_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("FLASHGEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("FLASHGEN_DB_URL", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    database = connect()
    try:
        assert database.url_safe == f"sqlite:///{tmp_path / 'xdg' / 'flashgen' / 'tuning.sqlite3'}"
        assert (tmp_path / "xdg" / "flashgen" / "tuning.sqlite3").is_file()
        with database.engine.connect() as conn:  # WAL and a 30 s busy timeout on every connection
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    finally:
        database.close()
    monkeypatch.setenv("FLASHGEN_DB_URL", f"sqlite:///{tmp_path / 'env.sqlite3'}")
    connect().close()
    assert (tmp_path / "env.sqlite3").is_file()


def test_shipped_files_in_the_repository_are_valid():
    from flashgen.db.shipped import shipped_dir

    directory = shipped_dir()
    assert directory is not None and (directory / "nvidia-h200.json").is_file()
    for path in directory.glob("*.json"):
        load(path)  # raises FormatError naming the record and field
