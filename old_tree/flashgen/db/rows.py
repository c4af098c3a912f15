"""Tuning records as database rows and back, and the keep-best upsert statement of each
dialect (one INSERT .. ON CONFLICT DO UPDATE .. WHERE, so concurrent writers never lose the
best). Everything read back is rebuilt through the validating dataclasses in `records`."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable
from typing import cast

from sqlalchemy import Table, and_, false, or_, true
from sqlalchemy.dialects import postgresql as _pg
from sqlalchemy.dialects import sqlite as _sqlite
from sqlalchemy.engine import Engine

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from .models import PendingRow, RecordRow, TrialRow
from .records import EnvFingerprint, TuningRecord

RECORDS = cast(Table, RecordRow.__table__)
TRIALS = cast(Table, TrialRow.__table__)
PENDING = cast(Table, PendingRow.__table__)
KEY_COLS = ("spec_uri", "bucket_q", "bucket_k", "env_key")
ENV_COLS = tuple(f.name for f in dataclasses.fields(EnvFingerprint))
CONFIG_COLS = tuple(f.name for f in dataclasses.fields(TileConfig))
RECORD_COLS = ("time_ms", "tflops", "n_trials", "measured", "host", "created_at", "impl",
                "impl_ratio")  # fmt: skip


def config_of(row) -> TileConfig:
    """The validated TileConfig of a records or trials row."""
    return TileConfig(**{c: row._mapping[c] for c in CONFIG_COLS})


def utc(value: _dt.datetime) -> _dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=_dt.timezone.utc)
    return value.astimezone(_dt.timezone.utc)


def record_values(rec: TuningRecord, env_columns: dict | None = None) -> dict:
    """The row of `rec`. `env_columns` caches the environment's columns and key per
    fingerprint (an import's records share a few environments; `key()` hashes)."""
    env = env_columns.get(rec.env) if env_columns is not None else None
    if env is None:
        env = {c: getattr(rec.env, c) for c in ENV_COLS}
        env["env_key"] = rec.env.key()
        if env_columns is not None:
            env_columns[rec.env] = env
    config = rec.config
    return {
        "spec_uri": rec.spec.uri(),
        "bucket_q": rec.bucket[0],
        "bucket_k": rec.bucket[1],
        "time_ms": rec.time_ms,
        "tflops": rec.tflops,
        "n_trials": rec.n_trials,
        "measured": rec.measured,
        "host": rec.host,
        "created_at": utc(rec.created_at),
        "impl": rec.impl,
        "impl_ratio": rec.impl_ratio,
        **env,
        **{c: getattr(config, c) for c in CONFIG_COLS},
    }


def record_of_row(row) -> TuningRecord:
    env = EnvFingerprint(**{c: row._mapping[c] for c in ENV_COLS})
    return TuningRecord(
        spec=KernelSpec.from_uri(row.spec_uri),
        bucket=(row.bucket_q, row.bucket_k),
        env=env,
        config=config_of(row),
        time_ms=row.time_ms,
        tflops=row.tflops,
        n_trials=row.n_trials,
        measured=bool(row.measured),
        host=row.host,
        created_at=utc(row.created_at),
        impl=row.impl,
        impl_ratio=row.impl_ratio,
    )


def insert_for(dialect: str, table):
    """The dialect's INSERT construct (both have `on_conflict_do_update`)."""
    return (_sqlite.insert if dialect == "sqlite" else _pg.insert)(table)


def keep_best_upsert(dialect: str):
    """The keep-best upsert (measured beats modelled; same kind: strictly lower time wins) without
    values: `.values(**row)` for one record, or executemany over rows (`upsert_many`)."""
    stmt = insert_for(dialect, RECORDS)
    new, old = stmt.excluded, RECORDS.c
    better = or_(
        and_(new.measured == true(), old.measured == false()),
        and_(new.measured == old.measured, new.time_ms < old.time_ms),
    )
    updated = {col: new[col] for col in RECORD_COLS + ENV_COLS + CONFIG_COLS}
    return stmt.on_conflict_do_update(
        index_elements=[RECORDS.c[c] for c in KEY_COLS], set_=updated, where=better
    )


def sqlite_writer(conn, engine: Engine) -> Callable[[list[dict]], int]:
    """`write(rows) -> rows written`: the keep-best upsert compiled once for SQLite, its
    parameters converted by the columns' own SQLAlchemy bind processors (DateTime to
    text, Boolean to 0/1), run by sqlite3's executemany. SQLite's executemany takes no
    RETURNING; its `total_changes` counts inserted and updated rows, and an upsert whose
    WHERE refuses the update changes nothing."""
    columns = [c.name for c in RECORDS.c if c.name != "id"]
    compiled = keep_best_upsert(engine.dialect.name).compile(dialect=engine.dialect,
                                                column_keys=columns)  # fmt: skip
    order = list(compiled.positiontup or ())
    if sorted(order) != sorted(columns):  # the statement binds nothing but the columns
        raise RuntimeError(f"unexpected parameters in the compiled upsert: {order}")
    dialect = engine.dialect
    processors = [RECORDS.c[name].type.dialect_impl(dialect).bind_processor(dialect)
                  for name in order]  # fmt: skip
    sql = str(compiled)
    raw = conn.connection.driver_connection

    def write(rows: list[dict]) -> int:
        params = [
            tuple(
                row[name] if convert is None else convert(row[name])
                for name, convert in zip(order, processors, strict=True)
            )
            for row in rows
        ]
        before = raw.total_changes
        conn.exec_driver_sql(sql, params)
        return raw.total_changes - before

    return write
