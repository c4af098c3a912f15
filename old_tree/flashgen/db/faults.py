"""One clear line for a database fault: which database, what is wrong, what to do.

Driver errors (sqlite3, psycopg) reach SQLAlchemy and Optuna as long tracebacks whose useful
part is one phrase ("database is locked", "file is not a database"). `explain` turns such an
exception into a single line the CLI can print, e.g.

    tuning database sqlite:////data/t.sqlite3: locked by another process (database is locked);
    wait for the other flashgen command to finish, or stop it, then retry

It never holds a password (`urls.scrub`). The classification reads the driver's message because
the exception classes do not separate these cases (SQLite raises OperationalError for all).
"""

from __future__ import annotations

import os
from pathlib import Path

from .urls import mask_url, scrub


class DatabaseError(RuntimeError):
    """The tuning database cannot be opened or used; the message never holds a password."""


# (phrases in the driver's message, problem, what to do). First match wins.
_KNOWN: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("database is locked", "database table is locked", "lock timeout", "could not obtain lock"),
        "locked by another process",
        "wait for the other flashgen command (a tune, import or merge) to finish, or stop it, "
        "then retry",
    ),
    (
        (
            "readonly database",
            "read-only transaction",
            "read-only file system",
            "permission denied",
        ),  # fmt: skip
        "read-only or not permitted",
        "make the database (for SQLite: the file and its directory) writable for this user, "
        "or use --db with one that is",
    ),
    (
        ("file is not a database", "disk image is malformed", "file is encrypted"),
        "not a valid SQLite database (malformed, or another kind of file)",
        "point --db at a tuning database, or move this file aside to start a new one",
    ),
    (
        ("password authentication failed", "no pg_hba.conf entry", "role"),
        "login refused",
        "check the user and password in the URL",
    ),
    (
        ("no such table", "undefinedtable", "does not exist"),
        "missing (it, or its tables, went away: deleted, dropped or replaced)",
        "check the URL; create the database (e.g. `createdb`) or let `flashgen tune` / "
        "`flashgen db import` create a new one",
    ),
    (
        ("disk i/o error",),
        "disk I/O error (was the file deleted, or its disk removed, while in use?)",
        "check the file and its disk, then retry",
    ),
    (
        (
            "could not connect",
            "connection refused",
            "could not translate host name",
            "timeout expired",
            "server closed the connection",
            "terminating connection",
            "connection to server",
        ),  # fmt: skip
        "server unreachable or gone",
        "check the host and port in the URL and that the server is running, then retry",
    ),
)


def sqlite_path(url: str) -> Path | None:
    """The file a sqlite URL names (None for other databases, memory or `file:` URIs)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - not a URL at all: nothing to inspect
        return None
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):
        return None
    return Path(database).expanduser()


def path_problem(path: Path, *, must_exist: bool) -> tuple[str, str] | None:
    """What is wrong with a SQLite file path before SQLite is asked, or None."""
    if path.is_dir():
        return (
            "is a directory, not a database file",
            f"name a file, e.g. --db {path / 'tuning.sqlite3'}",
        )
    if must_exist and not path.exists():
        return (
            "does not exist",
            "check the path (this command only reads, so it never creates a database); "
            "`flashgen tune` or `flashgen db import` creates one",
        )
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return (f"cannot be created: {parent} is a file, not a directory",
                        "choose another path")  # fmt: skip
            break
    return None


def _message(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def explain(exc: BaseException, url: str) -> str:
    """The one-line description of `exc` raised while using the database at `url`."""
    return fault(exc, url) or f"tuning database {mask_url(url)}: {scrub(_message(exc), url)}"


def fault(exc: BaseException, url: str) -> str | None:
    """`explain`'s line when `exc` is a known fault of the database itself (locked, read-only,
    malformed, missing, unreachable, ...); None for anything else (a refused row, a bug)."""
    safe = mask_url(url)
    detail = scrub(_message(exc), url)
    path = sqlite_path(url)
    found = None
    if path is not None:
        found = path_problem(path, must_exist=False)
        if found is None and "unable to open database file" in detail.lower():
            if not path.parent.exists():
                found = ("does not exist (nor does its directory)", "check the path")
            elif not os.access(path.parent, os.W_OK) or (
                path.exists() and not os.access(path, os.R_OK | os.W_OK)
            ):
                found = _KNOWN[1][1:]
    if found is None:
        lowered = detail.lower()
        for phrases, problem, advice in _KNOWN:
            if any(p in lowered for p in phrases):
                found = (problem, advice)
                break
    if found is None:
        return None
    problem, advice = found
    return f"tuning database {safe}: {problem} ({detail}); {advice}"
