"""`TuningDB`: the one object the tuner, the runtime and the CLI use to reach the tuning database.

Contract (shared by every backend; `tests/db/test_contract.py` runs it on SQLite and PostgreSQL):

- `upsert_best(rec) -> bool`: store `rec` unless the stored record for the same
  (spec, bucket, env) is better; True when `rec` was written. Better = measured beats modelled;
  same kind: strictly lower `time_ms` wins (a tie keeps the stored one). ONE SQL statement
  (INSERT .. ON CONFLICT DO UPDATE .. WHERE), so concurrent writers can never lose the best.
- `upsert_many(records) -> int`: the same, all in one transaction (import, merge); returns wins.
- `replace_best(rec, superseded) -> bool`: as `upsert_best`, except that a stored record whose
  config is in `superseded` (re-timed by the tuner's confirmation) is replaced whatever its time.
- `note_trials(spec, bucket, env, n_trials)`: raise the stored record's trial count to the
  search's final count (the record is written when the best improves, often before the end).
- `add_trials(spec, bucket, env, trials, host=None) -> int`; `trials(spec=None, bucket=None,
  env=None) -> list[Trial]` (oldest first).
- `get(spec, bucket, env) -> TuningRecord | None`; `records(spec=None, env=None) -> list`.
- `env_records(specs, env) -> list` (records of any of `specs` in `env`: the run-time lookup's
  one query, `flashgen.runtime.lookup`); `shipped() -> list` (the shipped layer it falls back on).
- `record_pending(spec, bucket, gpu_name="")`, `pending(gpu_name=None) -> [(spec, bucket)]`,
  `pending_rows()`, `clear_pending(spec, bucket)`.
- `url_safe` (password masked), `dialect` ("sqlite" | "postgresql"), `engine`, `close()`.

Faults: every error the database raises through this object (locked, read-only, malformed,
gone, unreachable) is a `DatabaseError` whose message is one line naming the database, the
problem and what to do (`flashgen.db.faults`). `readonly=True` (the CLI's show, pending, export
and merge's source) never creates anything: a missing SQLite file, or a database without
flashgen's tables, is an error instead of a new empty database.

Everything read back is rebuilt through the validating dataclasses in `records`; a row that
fails validation (hand-edited database) is skipped with a warning, never handed to a template.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import socket
from collections.abc import Callable, Iterable
from typing import cast

from sqlalchemy import Table, and_, create_engine, delete, event, false, or_, select, true
from sqlalchemy.dialects import postgresql as _pg
from sqlalchemy.dialects import sqlite as _sqlite
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from . import migrate
from .faults import explain, fault, path_problem, sqlite_path
from .models import PendingRow, RecordRow, TrialRow
from .records import EnvFingerprint, Trial, TuningRecord, check_bucket
from .shipped import shipped_records
from .urls import mask_url

log = logging.getLogger(__name__)
# The tuner's and the CLI's writers wait out each other's locks (eight SQLite writers need
# a long busy timeout). The attention path must not: a model waits at most a few
# milliseconds for a lock another process holds, then falls back (`flashgen.runtime.dispatch`).
SQLITE_BUSY_TIMEOUT_S = 30
RUNTIME_LOCK_TIMEOUT_MS = 10
RUNTIME_CONNECT_TIMEOUT_S = 2  # libpq's smallest
UPSERT_BATCH = 2000  # records per executemany of `upsert_many` (and per progress step)
_RECORDS = cast(Table, RecordRow.__table__)
_TRIALS = cast(Table, TrialRow.__table__)
_PENDING = cast(Table, PendingRow.__table__)
_KEY_COLS = ("spec_uri", "bucket_q", "bucket_k", "env_key")
_ENV_COLS = tuple(f.name for f in dataclasses.fields(EnvFingerprint))
_CONFIG_COLS = tuple(f.name for f in dataclasses.fields(TileConfig))
_RECORD_COLS = ("time_ms", "tflops", "n_trials", "measured", "host", "created_at", "impl",
                "impl_ratio")  # fmt: skip


def _config_of(row) -> TileConfig:
    """The validated TileConfig of a records or trials row."""
    return TileConfig(**{c: row._mapping[c] for c in _CONFIG_COLS})


class DatabaseError(RuntimeError):
    """The tuning database cannot be opened or used; the message never holds a password."""


def _utc(value: _dt.datetime) -> _dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=_dt.timezone.utc)
    return value.astimezone(_dt.timezone.utc)


def _sqlite_engine(url, busy_timeout_ms: int, readonly: bool = False) -> Engine:
    path = sqlite_path(url.render_as_string(hide_password=False))
    if path is not None:
        problem = path_problem(path, must_exist=readonly)
        if problem is not None:
            raise DatabaseError(
                f"cannot open tuning database {mask_url(str(url))}: {problem[0]}; {problem[1]}"
            )
        if not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000})
    # Switching to WAL may meet a lock; the tuner retries for a while, the runtime does not.
    # A reader leaves the journal mode alone (switching writes to the file).
    wal_attempts = 0 if readonly else 50 if busy_timeout_ms >= 1000 else 1

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if wal_attempts:
            _enable_wal(cursor, wal_attempts)
        cursor.close()

    return engine


def _enable_wal(cursor, attempts: int) -> None:
    """Switch the file to WAL (persistent, so usually already done). Switching needs a moment
    of exclusive access, which many processes opening a new file at once may not get at first:
    retry briefly, and if it still fails carry on in rollback-journal mode (slower, still safe)."""
    import sqlite3
    import time

    if cursor.execute("PRAGMA journal_mode").fetchone()[0] in ("wal", "memory"):
        return
    for attempt in range(attempts):
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            last = exc
            if attempt + 1 < attempts:
                time.sleep(0.1)
    log.debug("could not switch SQLite to WAL, staying in journal mode: %s", last)


def _make_engine(url: str, runtime: bool = False, readonly: bool = False) -> Engine:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        busy_ms = RUNTIME_LOCK_TIMEOUT_MS if runtime else SQLITE_BUSY_TIMEOUT_S * 1000
        return _sqlite_engine(parsed, busy_ms, readonly)
    if backend == "postgresql":
        if "+" not in parsed.drivername and not _importable("psycopg") and _importable("psycopg2"):
            # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; use psycopg2 when only it exists.
            parsed = parsed.set(drivername="postgresql+psycopg2")
        connect_args: dict = {}
        if parsed.get_driver_name() in ("psycopg2", "psycopg"):
            if "connect_timeout" not in parsed.query:
                connect_args["connect_timeout"] = RUNTIME_CONNECT_TIMEOUT_S if runtime else 10
            if runtime and "options" not in parsed.query:
                # Reads never wait under MVCC; this bounds the pending-shape upsert and a
                # first-use migration behind another process's lock.
                connect_args["options"] = f"-c lock_timeout={RUNTIME_LOCK_TIMEOUT_MS}"
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    raise DatabaseError(
        f"unsupported database {backend!r}: flashgen supports sqlite and postgresql"
    )


class TuningDB:
    """Repository over one database URL (see the module docstring for the contract)."""

    def __init__(
        self, url: str, *, shipped_dir=None, runtime: bool = False, readonly: bool = False
    ) -> None:
        """`runtime=True`: the attention path's connection, which waits at most
        RUNTIME_LOCK_TIMEOUT_MS for another process's lock (SQLite busy timeout, PostgreSQL
        lock_timeout) and RUNTIME_CONNECT_TIMEOUT_S to reach a server; the tuner and the CLI
        keep long waits, so that concurrent writers queue instead of failing.

        `readonly=True`: open an existing tuning database only (see the module docstring); an
        older schema is still migrated, since reading it needs the current one."""
        self._url = url
        self.url_safe = mask_url(url)
        self._shipped_dir = shipped_dir
        try:
            self.engine = _make_engine(url, runtime, readonly)
            self.dialect = self.engine.dialect.name
            self._translate_errors()
            if readonly:
                self._require_schema()
            migrate.upgrade(self.engine)
        except DatabaseError as exc:
            if str(exc).startswith("cannot open"):
                raise
            raise DatabaseError(f"cannot open {exc}") from None
        except Exception as exc:  # driver errors differ by backend; all mean "cannot open"
            raise DatabaseError(f"cannot open {explain(exc, url)}") from None

    def _translate_errors(self) -> None:
        """Every fault of the database itself on this engine (locked, read-only, malformed,
        gone, unreachable: `faults.fault`) becomes a one-line `DatabaseError`, so no caller
        shows a SQLAlchemy traceback for it. Other errors (a row a CHECK refuses, a bug) keep
        their SQLAlchemy type; pre-ping failures are left to the pool, which reconnects."""
        url = self._url

        @event.listens_for(self.engine, "handle_error")
        def _one_line(context):
            if context.is_pre_ping or isinstance(context.sqlalchemy_exception, IntegrityError):
                return
            line = fault(context.original_exception, url)
            if line is not None:
                raise DatabaseError(line) from None

    def _require_schema(self) -> None:
        with self.engine.connect() as conn:
            revision = migrate.current_revision(conn)
        if revision is None:
            raise DatabaseError(
                f"tuning database {self.url_safe}: holds no flashgen tables (empty, or not a "
                "tuning database); check the URL (this command only reads, so it creates none)"
            )

    def __repr__(self) -> str:
        return f"TuningDB({self.url_safe})"

    def close(self) -> None:
        self.engine.dispose()

    # -- records ---------------------------------------------------------------------------

    @staticmethod
    def _values(rec: TuningRecord, env_columns: dict | None = None) -> dict:
        """The row of `rec`. `env_columns` caches the environment's columns and key per
        fingerprint (an import's records share a few environments; `key()` hashes)."""
        env = env_columns.get(rec.env) if env_columns is not None else None
        if env is None:
            env = {c: getattr(rec.env, c) for c in _ENV_COLS}
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
            "created_at": _utc(rec.created_at),
            "impl": rec.impl,
            "impl_ratio": rec.impl_ratio,
            **env,
            **{c: getattr(config, c) for c in _CONFIG_COLS},
        }

    def _insert(self, table):
        return (_sqlite.insert if self.dialect == "sqlite" else _pg.insert)(table)

    def _upsert_stmt(self, rec: TuningRecord):
        return self._upsert_template().values(**self._values(rec))

    def upsert_best(self, rec: TuningRecord) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(self._upsert_stmt(rec)).rowcount > 0

    def replace_best(self, rec: TuningRecord, superseded: Iterable[TileConfig]) -> bool:
        """Store `rec`, a winner confirmed by re-timing the `superseded` configs back to back.

        A stored record for the same key whose config is among them is replaced even if its
        time is lower: that time came from an earlier, less comparable measurement (the tuner's
        first candidate runs on a GPU that idled while it compiled, and reads a few percent
        fast). Any other stored record is kept unless `rec` beats it, as in `upsert_best`.
        One transaction."""
        values = self._values(rec)
        same_key = [_RECORDS.c[c] == values[c] for c in _KEY_COLS]
        stale = [
            and_(*(_RECORDS.c[c] == getattr(cfg, c) for c in _CONFIG_COLS)) for cfg in superseded
        ]
        with self.engine.begin() as conn:
            if stale:
                conn.execute(
                    delete(_RECORDS).where(
                        *same_key, _RECORDS.c.measured == rec.measured, or_(*stale)
                    )
                )
            return conn.execute(self._upsert_stmt(rec)).rowcount > 0

    def upsert_many(
        self, records: Iterable[TuningRecord], progress: Callable[[int], object] | None = None
    ) -> int:
        """Keep-best upsert of many records in ONE transaction (all or nothing); returns how
        many records were written.

        The file's own duplicates are folded first with the same rule (`TuningRecord.beats`; a
        tie keeps the earlier one, as upserting them in order would), so each key is sent
        once. Then the same INSERT .. ON CONFLICT DO UPDATE .. WHERE statement as
        `upsert_best` (the dialect's own construct) runs over batches of UPSERT_BATCH rows:
        on SQLite compiled once and handed to the driver's executemany (rows written counted
        by the connection's change counter); on PostgreSQL through SQLAlchemy's
        insertmanyvalues (multi-row VALUES) with RETURNING. One compiled statement per record
        took ~2 min for 200k records (benchmarks/RESULTS.md). `progress(n)` is called after
        each batch with its size."""
        best: dict[tuple, TuningRecord] = {}
        for rec in records:
            key = (rec.spec, rec.bucket, rec.env)
            held = best.get(key)
            if held is None or rec.beats(held):
                best[key] = rec
        pending = list(best.values())
        batches = (pending[i : i + UPSERT_BATCH] for i in range(0, len(pending), UPSERT_BATCH))
        env_columns: dict[EnvFingerprint, dict] = {}
        wins = 0
        with self.engine.begin() as conn:
            write = self._sqlite_writer(conn) if self.dialect == "sqlite" else None
            stmt = self._upsert_template().returning(_RECORDS.c.id)
            for batch in batches:
                rows = [self._values(rec, env_columns) for rec in batch]
                if write is not None:
                    wins += write(rows)
                else:
                    wins += len(conn.execute(stmt, rows).all())
                if progress is not None:
                    progress(len(rows))
        return wins

    def _sqlite_writer(self, conn) -> Callable[[list[dict]], int]:
        """`write(rows) -> rows written`: the keep-best upsert compiled once for SQLite, its
        parameters converted by the columns' own SQLAlchemy bind processors (DateTime to
        text, Boolean to 0/1), run by sqlite3's executemany. SQLite's executemany takes no
        RETURNING; its `total_changes` counts inserted and updated rows, and an upsert whose
        WHERE refuses the update changes nothing."""
        columns = [c.name for c in _RECORDS.c if c.name != "id"]
        compiled = self._upsert_template().compile(dialect=self.engine.dialect,
                                                    column_keys=columns)  # fmt: skip
        order = list(compiled.positiontup or ())
        if sorted(order) != sorted(columns):  # the statement binds nothing but the columns
            raise RuntimeError(f"unexpected parameters in the compiled upsert: {order}")
        dialect = self.engine.dialect
        processors = [_RECORDS.c[name].type.dialect_impl(dialect).bind_processor(dialect)
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

    def _upsert_template(self):
        """The keep-best upsert without values, for executemany (`upsert_many`)."""
        stmt = self._insert(_RECORDS)
        new, old = stmt.excluded, _RECORDS.c
        better = or_(
            and_(new.measured == true(), old.measured == false()),
            and_(new.measured == old.measured, new.time_ms < old.time_ms),
        )
        updated = {col: new[col] for col in _RECORD_COLS + _ENV_COLS + _CONFIG_COLS}
        return stmt.on_conflict_do_update(
            index_elements=[_RECORDS.c[c] for c in _KEY_COLS], set_=updated, where=better
        )

    def note_trials(self, spec: KernelSpec, bucket, env: EnvFingerprint, n_trials: int) -> None:
        bucket = check_bucket(bucket)
        stmt = (
            _RECORDS.update()
            .where(
                _RECORDS.c.spec_uri == spec.uri(),
                _RECORDS.c.bucket_q == bucket[0],
                _RECORDS.c.bucket_k == bucket[1],
                _RECORDS.c.env_key == env.key(),
                _RECORDS.c.n_trials < int(n_trials),
            )
            .values(n_trials=int(n_trials))
        )
        with self.engine.begin() as conn:
            conn.execute(stmt)

    @staticmethod
    def _to_record(row) -> TuningRecord:
        env = EnvFingerprint(**{c: row._mapping[c] for c in _ENV_COLS})
        return TuningRecord(
            spec=KernelSpec.from_uri(row.spec_uri),
            bucket=(row.bucket_q, row.bucket_k),
            env=env,
            config=_config_of(row),
            time_ms=row.time_ms,
            tflops=row.tflops,
            n_trials=row.n_trials,
            measured=bool(row.measured),
            host=row.host,
            created_at=_utc(row.created_at),
            impl=row.impl,
            impl_ratio=row.impl_ratio,
        )

    def _read(self, stmt) -> list[TuningRecord]:
        out = []
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        for row in rows:
            try:
                out.append(self._to_record(row))
            except (ValueError, TypeError) as exc:
                log.warning("skipping invalid tuning record id=%s: %s", row.id, exc)
        return out

    def get(self, spec: KernelSpec, bucket, env: EnvFingerprint) -> TuningRecord | None:
        bucket = check_bucket(bucket)
        stmt = select(_RECORDS).where(
            _RECORDS.c.spec_uri == spec.uri(),
            _RECORDS.c.bucket_q == bucket[0],
            _RECORDS.c.bucket_k == bucket[1],
            _RECORDS.c.env_key == env.key(),
        )
        found = self._read(stmt)
        return found[0] if found else None

    def records(
        self, spec: KernelSpec | None = None, env: EnvFingerprint | None = None
    ) -> list[TuningRecord]:
        stmt = select(_RECORDS).order_by(
            _RECORDS.c.spec_uri, _RECORDS.c.bucket_q, _RECORDS.c.bucket_k, _RECORDS.c.id
        )
        if spec is not None:
            stmt = stmt.where(_RECORDS.c.spec_uri == spec.uri())
        if env is not None:
            stmt = stmt.where(_RECORDS.c.env_key == env.key())
        return self._read(stmt)

    def env_records(self, specs: Iterable[KernelSpec], env: EnvFingerprint) -> list[TuningRecord]:
        """This environment's records of any of `specs` (one query: the run-time lookup reads a
        spec and its sibling dtype together)."""
        uris = [s.uri() for s in specs]
        return self._read(
            select(_RECORDS).where(_RECORDS.c.spec_uri.in_(uris), _RECORDS.c.env_key == env.key())
        )

    def shipped(self) -> tuple[TuningRecord, ...]:
        """The records shipped with the package (`tuning_db/`, or this database's shipped_dir)."""
        return shipped_records(self._shipped_dir)

    # -- trials ----------------------------------------------------------------------------

    def add_trials(
        self,
        spec: KernelSpec,
        bucket,
        env: EnvFingerprint,
        trials: Iterable[Trial],
        host: str | None = None,
    ) -> int:
        bucket = check_bucket(bucket)
        now = _dt.datetime.now(_dt.timezone.utc)
        rows = [
            {
                "spec_uri": spec.uri(),
                "bucket_q": bucket[0],
                "bucket_k": bucket[1],
                "env_key": env.key(),
                "time_ms": t.time_ms,
                "status": t.status,
                "error": t.error[:4000],
                "host": host or socket.gethostname(),
                "created_at": now,
                **t.config.as_dict(),
            }
            for t in trials
        ]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(_TRIALS.insert(), rows)
        return len(rows)

    def trials(
        self,
        spec: KernelSpec | None = None,
        bucket=None,
        env: EnvFingerprint | None = None,
    ) -> list[Trial]:
        stmt = select(_TRIALS).order_by(_TRIALS.c.id)
        if spec is not None:
            stmt = stmt.where(_TRIALS.c.spec_uri == spec.uri())
        if bucket is not None:
            bucket = check_bucket(bucket)
            stmt = stmt.where(_TRIALS.c.bucket_q == bucket[0], _TRIALS.c.bucket_k == bucket[1])
        if env is not None:
            stmt = stmt.where(_TRIALS.c.env_key == env.key())
        out = []
        with self.engine.connect() as conn:
            for row in conn.execute(stmt):
                try:
                    config = _config_of(row)
                    out.append(Trial(config, row.time_ms, row.status, row.error))
                except (ValueError, TypeError) as exc:
                    log.warning("skipping invalid trial id=%s: %s", row.id, exc)
        return out

    # -- pending shapes --------------------------------------------------------------------

    def record_pending(self, spec: KernelSpec, bucket, gpu_name: str = "") -> None:
        bucket = check_bucket(bucket)
        now = _dt.datetime.now(_dt.timezone.utc)
        stmt = self._insert(_PENDING).values(
            spec_uri=spec.uri(),
            bucket_q=bucket[0],
            bucket_k=bucket[1],
            gpu_name=gpu_name,
            seen=1,
            first_seen=now,
            last_seen=now,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[
                _PENDING.c.spec_uri,
                _PENDING.c.bucket_q,
                _PENDING.c.bucket_k,
                _PENDING.c.gpu_name,
            ],
            set_={"seen": _PENDING.c.seen + 1, "last_seen": stmt.excluded.last_seen},
        )
        with self.engine.begin() as conn:
            conn.execute(stmt)

    def pending_rows(self, gpu_name: str | None = None) -> list[dict]:
        """Pending shapes with their GPU, count and times, most seen first."""
        stmt = select(_PENDING).order_by(
            _PENDING.c.seen.desc(), _PENDING.c.spec_uri, _PENDING.c.bucket_q, _PENDING.c.bucket_k
        )
        if gpu_name is not None:
            stmt = stmt.where(_PENDING.c.gpu_name == gpu_name)
        out = []
        with self.engine.connect() as conn:
            for row in conn.execute(stmt):
                try:
                    spec = KernelSpec.from_uri(row.spec_uri)
                    bucket = check_bucket((row.bucket_q, row.bucket_k))
                except ValueError as exc:
                    log.warning("skipping invalid pending row %s: %s", row.spec_uri, exc)
                    continue
                out.append(
                    {
                        "spec": spec,
                        "bucket": bucket,
                        "gpu_name": row.gpu_name,
                        "seen": row.seen,
                        "first_seen": _utc(row.first_seen),
                        "last_seen": _utc(row.last_seen),
                    }
                )
        return out

    def pending(self, gpu_name: str | None = None) -> list[tuple[KernelSpec, tuple[int, int]]]:
        seen: dict[tuple[KernelSpec, tuple[int, int]], None] = {}
        for row in self.pending_rows(gpu_name):
            seen.setdefault((row["spec"], row["bucket"]), None)
        return list(seen)

    def clear_pending(self, spec: KernelSpec, bucket) -> int:
        bucket = check_bucket(bucket)
        stmt = delete(_PENDING).where(
            _PENDING.c.spec_uri == spec.uri(),
            _PENDING.c.bucket_q == bucket[0],
            _PENDING.c.bucket_k == bucket[1],
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
