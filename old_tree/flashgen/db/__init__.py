"""The tuning database: where `flashgen tune` writes winning configs and the runtime reads them.

`connect(url=None) -> TuningDB` opens (and on first use migrates) the database named by `url`,
else `FLASHGEN_DB_URL`, else the SQLite file `cache_dir()/tuning.sqlite3`. Importing this
package is light: SQLAlchemy and Alembic load only inside `connect`, so `flashgen --help` and
`import flashgen` stay fast. The repository contract is documented in `repository.py`; plain
record types live in `records.py`.
"""

from __future__ import annotations

import threading

from .urls import default_url, mask_url, resolve_url

__all__ = ["connect", "default_url", "mask_url", "resolve_url", "TuningDB", "DatabaseError"]

_lock = threading.Lock()


def connect(
    url: str | None = None, *, shipped_dir=None, runtime: bool = False, readonly: bool = False
):
    """A `TuningDB` on `url` (resolved as above; a plain path is a SQLite file), migrated to the
    current schema.

    `runtime=True` for the attention path: short lock and connect timeouts (see `TuningDB`).
    `readonly=True` for commands that only read: a missing database is an error, never created."""
    from .repository import TuningDB

    with _lock:  # migrating twice from two threads of one process is wasted work
        return TuningDB(
            resolve_url(url), shipped_dir=shipped_dir, runtime=runtime, readonly=readonly
        )


def __getattr__(name: str):
    if name in ("TuningDB", "DatabaseError"):
        from . import repository

        return getattr(repository, name)
    raise AttributeError(f"module 'flashgen.db' has no attribute {name!r}")
