"""Database faults at the CLI: one line naming the database, the problem and what to do; exit 2;
nothing created by commands that only read. Real files, real locks, a real PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from test_cli import RECORDS

from flashgen.db import cli, connect, repository
from flashgen.db.portable import dump


def _flashgen(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    """The real entry point in a child process: what a user sees, tracebacks included."""
    return subprocess.run(
        [sys.executable, "-m", "flashgen.cli", *argv],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip


def _one_line_error(stderr: str, *words: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def export_file(tmp_path):
    path = tmp_path / "records.json"
    dump(RECORDS, path)
    return path


@pytest.mark.parametrize("action", ["show", "pending", "export"])
def test_reading_commands_never_create_a_missing_database(tmp_path, action):
    target = tmp_path / "no" / "such" / "t.sqlite3"
    argv = ["db", action, "--db", str(target)]
    if action == "export":
        argv.insert(2, str(tmp_path / "out.json"))
    done = _flashgen(*argv)
    assert done.returncode == 2
    _one_line_error(done.stderr, str(target), "does not exist")
    assert not (tmp_path / "no").exists()  # neither the file nor its directories
    assert not (tmp_path / "out.json").exists()


def test_merge_from_a_missing_source_creates_neither_database(tmp_path, capsys):
    source, target = tmp_path / "gone.sqlite3", tmp_path / "t.sqlite3"
    assert cli.main(["merge", str(source), "--db", str(target)]) == 2
    _one_line_error(capsys.readouterr().err, str(source), "does not exist")
    assert not source.exists() and not target.exists()


def test_a_plain_path_is_a_sqlite_file(tmp_path, export_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["import", str(export_file), "--db", "sub/plain.sqlite3"]) == 0
    assert (tmp_path / "sub" / "plain.sqlite3").is_file()
    assert cli.main(["show", "--db", "sub/plain.sqlite3"]) == 0
    assert "2 record(s)" in capsys.readouterr().out


def test_a_directory_is_named_as_such(tmp_path, export_file, capsys):
    folder = tmp_path / "dbdir"
    folder.mkdir()
    for argv in (["show"], ["import", str(export_file)]):
        assert cli.main([*argv, "--db", str(folder)]) == 2
        line = _one_line_error(capsys.readouterr().err, str(folder), "is a directory")
        assert str(folder / "tuning.sqlite3") in line  # what to give instead
    assert list(folder.iterdir()) == []


def test_a_malformed_file_is_named_and_left_untouched(tmp_path, export_file, capsys):
    bad = tmp_path / "bad.sqlite3"
    junk = os.urandom(8192)
    bad.write_bytes(junk)
    for argv in (["show"], ["import", str(export_file)]):
        assert cli.main([*argv, "--db", str(bad)]) == 2
        _one_line_error(capsys.readouterr().err, str(bad), "not a valid SQLite database")
    assert bad.read_bytes() == junk


def _make_immutable(path) -> bool:
    """chattr +i: even root cannot write it (chmod does not stop root, who runs CI)."""
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


def test_a_read_only_database_is_named(tmp_path, export_file):
    path = tmp_path / "ro.sqlite3"
    connect(str(path)).close()
    if not _make_immutable(path):
        pytest.skip("cannot make a file read-only here (no chattr +i)")
    try:
        done = _flashgen("db", "import", str(export_file), "--db", str(path))
        assert done.returncode == 2
        _one_line_error(done.stderr, str(path), "read-only", "writable")
        assert _flashgen("db", "show", "--db", str(path)).returncode == 0  # reading still works
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_sqlite_uri_is_named(tmp_path, export_file, capsys):
    """The same through SQLite's own read-only mode (works for any user)."""
    path = tmp_path / "ro.sqlite3"
    connect(str(path)).close()
    url = f"sqlite:///file:{path}?mode=ro&uri=true"
    assert cli.main(["import", str(export_file), "--db", url]) == 2
    _one_line_error(capsys.readouterr().err, "read-only", "writable")


def test_a_locked_database_is_named(tmp_path, export_file, monkeypatch, capsys):
    path = tmp_path / "locked.sqlite3"
    connect(str(path)).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sqlite3, sys, time
            c = sqlite3.connect({str(path)!r}, isolation_level=None)
            c.execute("BEGIN EXCLUSIVE")
            print("locked", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setattr(repository, "SQLITE_BUSY_TIMEOUT_S", 1)  # not 30 s in a test
        assert cli.main(["import", str(export_file), "--db", str(path)]) == 2
        _one_line_error(capsys.readouterr().err, str(path), "locked by another process", "retry")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert connect(str(path)).records() == []  # nothing half-written


@pytest.mark.postgres
def test_a_vanished_postgres_database_is_named(pg_url, export_file):
    import sqlalchemy as sa

    gone = sa.engine.make_url(pg_url).set(database="fg_no_such_db_7")
    url = gone.render_as_string(hide_password=False)
    for argv in (["show"], ["import", str(export_file)]):
        done = _flashgen("db", *argv, "--db", url)
        assert done.returncode == 2
        line = _one_line_error(done.stderr, "fg_no_such_db_7", "missing")
        if gone.password:
            assert gone.password not in line


@pytest.mark.postgres
def test_reading_an_empty_postgres_database_creates_no_tables(pg_url, capsys):
    import sqlalchemy as sa

    assert cli.main(["show", "--db", pg_url]) == 2
    _one_line_error(capsys.readouterr().err, "no flashgen tables")
    engine = sa.create_engine(pg_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
