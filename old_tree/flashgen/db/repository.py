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

Engines (timeouts, WAL) are made in `engines`; rows, and the keep-best upsert statement, in
`rows`. Everything read back is rebuilt through the validating dataclasses in `records`; a row that
fails validation (hand-edited database) is skipped with a warning, never handed to a template.
"""

from __future__ import annotations

import datetime as _dt
import logging
import socket
from collections.abc import Callable, Iterable

from sqlalchemy import and_, delete, event, or_, select
from sqlalchemy.exc import IntegrityError

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from . import migrate
from .engines import (
    RUNTIME_CONNECT_TIMEOUT_S,
    RUNTIME_LOCK_TIMEOUT_MS,
    SQLITE_BUSY_TIMEOUT_S,
    make_engine,
)
from .faults import DatabaseError, explain, fault
from .records import EnvFingerprint, Trial, TuningRecord, check_bucket
from .rows import (
    CONFIG_COLS,
    KEY_COLS,
    PENDING,
    RECORDS,
    TRIALS,
    config_of,
    insert_for,
    keep_best_upsert,
    record_of_row,
    record_values,
    sqlite_writer,
    utc,
)
from .shipped import shipped_records
from .urls import mask_url

log = logging.getLogger(__name__)
__all__ = [
    "DatabaseError",
    "TuningDB",
    "RUNTIME_CONNECT_TIMEOUT_S",
    "RUNTIME_LOCK_TIMEOUT_MS",
    "SQLITE_BUSY_TIMEOUT_S",
    "UPSERT_BATCH",
]
UPSERT_BATCH = 2000  # records per executemany of `upsert_many` (and per progress step)


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
            self.engine = make_engine(url, runtime, readonly)
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

    def _upsert_stmt(self, rec: TuningRecord):
        return keep_best_upsert(self.dialect).values(**record_values(rec))

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
        values = record_values(rec)
        same_key = [RECORDS.c[c] == values[c] for c in KEY_COLS]
        stale = [
            and_(*(RECORDS.c[c] == getattr(cfg, c) for c in CONFIG_COLS)) for cfg in superseded
        ]
        with self.engine.begin() as conn:
            if stale:
                conn.execute(
                    delete(RECORDS).where(
                        *same_key, RECORDS.c.measured == rec.measured, or_(*stale)
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
            write = sqlite_writer(conn, self.engine) if self.dialect == "sqlite" else None
            stmt = keep_best_upsert(self.dialect).returning(RECORDS.c.id)
            for batch in batches:
                rows = [record_values(rec, env_columns) for rec in batch]
                if write is not None:
                    wins += write(rows)
                else:
                    wins += len(conn.execute(stmt, rows).all())
                if progress is not None:
                    progress(len(rows))
        return wins

    def note_trials(self, spec: KernelSpec, bucket, env: EnvFingerprint, n_trials: int) -> None:
        bucket = check_bucket(bucket)
        stmt = (
            RECORDS.update()
            .where(
                RECORDS.c.spec_uri == spec.uri(),
                RECORDS.c.bucket_q == bucket[0],
                RECORDS.c.bucket_k == bucket[1],
                RECORDS.c.env_key == env.key(),
                RECORDS.c.n_trials < int(n_trials),
            )
            .values(n_trials=int(n_trials))
        )
        with self.engine.begin() as conn:
            conn.execute(stmt)

    def _read(self, stmt) -> list[TuningRecord]:
        out = []
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        for row in rows:
            try:
                out.append(record_of_row(row))
            except (ValueError, TypeError) as exc:
                log.warning("skipping invalid tuning record id=%s: %s", row.id, exc)
        return out

    def get(self, spec: KernelSpec, bucket, env: EnvFingerprint) -> TuningRecord | None:
        bucket = check_bucket(bucket)
        stmt = select(RECORDS).where(
            RECORDS.c.spec_uri == spec.uri(),
            RECORDS.c.bucket_q == bucket[0],
            RECORDS.c.bucket_k == bucket[1],
            RECORDS.c.env_key == env.key(),
        )
        found = self._read(stmt)
        return found[0] if found else None

    def records(
        self, spec: KernelSpec | None = None, env: EnvFingerprint | None = None
    ) -> list[TuningRecord]:
        stmt = select(RECORDS).order_by(
            RECORDS.c.spec_uri, RECORDS.c.bucket_q, RECORDS.c.bucket_k, RECORDS.c.id
        )
        if spec is not None:
            stmt = stmt.where(RECORDS.c.spec_uri == spec.uri())
        if env is not None:
            stmt = stmt.where(RECORDS.c.env_key == env.key())
        return self._read(stmt)

    def env_records(self, specs: Iterable[KernelSpec], env: EnvFingerprint) -> list[TuningRecord]:
        """This environment's records of any of `specs` (one query: the run-time lookup reads a
        spec and its sibling dtype together)."""
        uris = [s.uri() for s in specs]
        return self._read(
            select(RECORDS).where(RECORDS.c.spec_uri.in_(uris), RECORDS.c.env_key == env.key())
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
                conn.execute(TRIALS.insert(), rows)
        return len(rows)

    def trials(
        self,
        spec: KernelSpec | None = None,
        bucket=None,
        env: EnvFingerprint | None = None,
    ) -> list[Trial]:
        stmt = select(TRIALS).order_by(TRIALS.c.id)
        if spec is not None:
            stmt = stmt.where(TRIALS.c.spec_uri == spec.uri())
        if bucket is not None:
            bucket = check_bucket(bucket)
            stmt = stmt.where(TRIALS.c.bucket_q == bucket[0], TRIALS.c.bucket_k == bucket[1])
        if env is not None:
            stmt = stmt.where(TRIALS.c.env_key == env.key())
        out = []
        with self.engine.connect() as conn:
            for row in conn.execute(stmt):
                try:
                    config = config_of(row)
                    out.append(Trial(config, row.time_ms, row.status, row.error))
                except (ValueError, TypeError) as exc:
                    log.warning("skipping invalid trial id=%s: %s", row.id, exc)
        return out

    # -- pending shapes --------------------------------------------------------------------

    def record_pending(self, spec: KernelSpec, bucket, gpu_name: str = "") -> None:
        bucket = check_bucket(bucket)
        now = _dt.datetime.now(_dt.timezone.utc)
        stmt = insert_for(self.dialect, PENDING).values(
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
                PENDING.c.spec_uri,
                PENDING.c.bucket_q,
                PENDING.c.bucket_k,
                PENDING.c.gpu_name,
            ],
            set_={"seen": PENDING.c.seen + 1, "last_seen": stmt.excluded.last_seen},
        )
        with self.engine.begin() as conn:
            conn.execute(stmt)

    def pending_rows(self, gpu_name: str | None = None) -> list[dict]:
        """Pending shapes with their GPU, count and times, most seen first."""
        stmt = select(PENDING).order_by(
            PENDING.c.seen.desc(), PENDING.c.spec_uri, PENDING.c.bucket_q, PENDING.c.bucket_k
        )
        if gpu_name is not None:
            stmt = stmt.where(PENDING.c.gpu_name == gpu_name)
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
                        "first_seen": utc(row.first_seen),
                        "last_seen": utc(row.last_seen),
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
        stmt = delete(PENDING).where(
            PENDING.c.spec_uri == spec.uri(),
            PENDING.c.bucket_q == bucket[0],
            PENDING.c.bucket_k == bucket[1],
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount
