"""Bring a database to the current schema, safely when many processes connect at once.

Alembic runs from code (no alembic.ini): the scripts ship inside the package under
`flashgen/db/migrations`, so an installed wheel can upgrade a cluster database in place.
The version table is `flashgen_alembic_version` so Optuna's `alembic_version` (same database)
is never touched.

Concurrency: the first connect of eight tuner processes to an empty database must create the
tables once. The migration runs inside one transaction that first takes a lock (SQLite:
BEGIN IMMEDIATE, waiting on the busy timeout; PostgreSQL: a transaction-scoped advisory lock,
with transactional DDL), then re-reads the version: whoever comes second sees "head" and does
nothing. A cheap unlocked version read short-circuits the common already-migrated case.

Optuna creates its own tables (and PostgreSQL enum types) in the same database with no lock of
its own: several processes building an `RDBStorage` on a new database at once fail with
UniqueViolation / DuplicateTable. `schema_lock` is the one PostgreSQL lock both schema creators
take (the same advisory key as the migration), held on the database server, so processes on
different hosts serialise too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

VERSION_TABLE = "flashgen_alembic_version"
HEAD = "0002_impl"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# "flas": any constant shared by every flashgen process; one key for every schema change.
SCHEMA_LOCK_KEY = 0x666C6173


def alembic_config(connection: Connection | None = None):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def script_head() -> str:
    """The head revision according to the migration scripts (tests check it equals HEAD)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migration scripts in {MIGRATIONS_DIR}")
    return head


def current_revision(connection: Connection) -> str | None:
    from sqlalchemy import inspect

    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    row = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).first()
    return row[0] if row else None


def upgrade(engine: Engine) -> bool:
    """Migrate `engine`'s database to HEAD; True when this call changed the schema."""
    with engine.connect() as conn:
        if current_revision(conn) == HEAD:
            return False
        conn.rollback()
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        if current_revision(conn) == HEAD:
            conn.rollback()
            return False
        from alembic import command

        command.upgrade(alembic_config(conn), "head")
        conn.commit()
    return True


@contextlib.contextmanager
def schema_lock(engine: Engine) -> Iterator[None]:
    """Hold the database-wide schema lock while another library creates its tables.

    PostgreSQL: a session-level advisory lock on a connection of its own (the code inside uses
    other connections, e.g. Optuna's own engine), committed at once so that no transaction stays
    open while waiting; the server releases it if this process dies. Other dialects: no lock
    (SQLite studies are not stored in the database, see `flashgen.tune.studies`).
    """
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        conn.commit()
        try:
            yield
        finally:
            try:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY})
                conn.commit()
            except Exception:
                # Never hand a connection that may still hold the lock back to the pool:
                # closing it ends the session, which releases the lock on the server.
                conn.invalidate()
