"""Engines for a tuning database URL: SQLite (busy timeout, WAL) and PostgreSQL (connect and
lock timeouts), with short waits for the attention path (`runtime=True`) and long ones for the
tuner and the CLI, whose writers queue behind each other's locks."""

from __future__ import annotations

import logging

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url

from .faults import DatabaseError, path_problem, sqlite_path
from .urls import mask_url

log = logging.getLogger("flashgen.db.repository")
# The tuner's and the CLI's writers wait out each other's locks (eight SQLite writers need
# a long busy timeout). The attention path must not: a model waits at most a few
# milliseconds for a lock another process holds, then falls back (`flashgen.runtime.dispatch`).
SQLITE_BUSY_TIMEOUT_S = 30
RUNTIME_LOCK_TIMEOUT_MS = 10
RUNTIME_CONNECT_TIMEOUT_S = 2  # libpq's smallest


def sqlite_engine(url, busy_timeout_ms: int, readonly: bool = False) -> Engine:
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


def make_engine(url: str, runtime: bool = False, readonly: bool = False) -> Engine:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        busy_ms = RUNTIME_LOCK_TIMEOUT_MS if runtime else SQLITE_BUSY_TIMEOUT_S * 1000
        return sqlite_engine(parsed, busy_ms, readonly)
    if backend == "postgresql":
        if "+" not in parsed.drivername and not importable("psycopg") and importable("psycopg2"):
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


def importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
