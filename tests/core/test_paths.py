"""The cache dir (flashgen.core.paths): an unusable FLASHGEN_CACHE_DIR falls back to a private
temporary directory with one warning naming the variable and the problem (issue 11), instead of
a bare NotADirectoryError / PermissionError from deep inside kernel generation."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from flashgen.core import paths
from flashgen.core.paths import write_atomic
from flashgen.db.urls import default_url


@pytest.fixture
def fresh(monkeypatch):
    """A clean decision per test (the real one is made once per process and path)."""
    paths._usable_or_temporary.cache_clear()
    yield monkeypatch
    paths._usable_or_temporary.cache_clear()


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_regular_file_as_cache_dir_falls_back_with_one_warning(fresh, tmp_path, caplog):
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("a file, not a directory")
    fresh.setenv("FLASHGEN_CACHE_DIR", str(not_a_dir))
    with caplog.at_level(logging.WARNING, logger="flashgen"):
        first = paths.cache_dir()
        again = paths.cache_dir()
        url = default_url()
    assert first == again and first != not_a_dir and first.is_dir()
    assert url.endswith(str(first / "tuning.sqlite3"))
    (message,) = _warnings(caplog)
    assert "FLASHGEN_CACHE_DIR" in message and str(not_a_dir) in message
    assert "is not a directory" in message and str(first) in message
    write_atomic(paths.kernel_dir() / "probe.py", "x = 1\n")  # really usable
    assert (first / "kernels" / "probe.py").read_text() == "x = 1\n"
    assert not_a_dir.read_text() == "a file, not a directory"  # left alone


def test_a_path_below_a_regular_file_falls_back(fresh, tmp_path, caplog):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    fresh.setenv("FLASHGEN_CACHE_DIR", str(blocker / "sub" / "cache"))
    with caplog.at_level(logging.WARNING, logger="flashgen"):
        got = paths.cache_dir()
    assert got.is_dir() and blocker not in got.parents
    (message,) = _warnings(caplog)
    assert f"cannot be created: {blocker} is not a directory" in message


def _make_unwritable(path) -> bool:
    """chmod 0500, and as root (CI runs as root, whom chmod does not stop) `chattr +i`, which
    stops root too. False when neither makes the dir unwritable here."""
    path.chmod(0o500)
    if os.access(path, os.W_OK) and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    return not os.access(path, os.W_OK)


def _make_writable(path) -> None:
    if shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o700)


def test_an_unwritable_directory_falls_back(fresh, tmp_path, caplog):
    locked = tmp_path / "locked"
    locked.mkdir()
    try:
        if not _make_unwritable(locked):
            pytest.skip("neither chmod nor chattr +i makes a directory unwritable here")
        fresh.setenv("FLASHGEN_CACHE_DIR", str(locked))
        with caplog.at_level(logging.WARNING, logger="flashgen"):
            got = paths.cache_dir()
        assert got != locked and os.access(got, os.W_OK)
        (message,) = _warnings(caplog)
        assert "FLASHGEN_CACHE_DIR" in message and "is not writable" in message
    finally:
        _make_writable(locked)


def test_a_usable_dir_is_used_as_is_and_not_created(fresh, tmp_path, caplog):
    wanted = tmp_path / "new" / "cache"
    fresh.setenv("FLASHGEN_CACHE_DIR", str(wanted))
    with caplog.at_level(logging.WARNING, logger="flashgen"):
        assert paths.cache_dir() == wanted
    assert not _warnings(caplog)
    assert not (tmp_path / "new").exists()  # looking does not create (read-only commands)


def test_attention_runs_with_a_file_as_cache_dir(tmp_path):
    """End to end in a fresh process: the kernel is generated in the fallback dir, the result is
    right, and stderr carries the warning once."""
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("")
    script = textwrap.dedent(
        """
        import torch, torch.nn.functional as F, flashgen
        q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
        got = flashgen.attention(q, k, v, causal=True, impl="flashgen")
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        flashgen.attention(q, k, v, impl="flashgen")
        print("ok")
        """
    )
    env = {**os.environ, "FLASHGEN_CACHE_DIR": str(not_a_dir), "TRITON_INTERPRET": "1"}
    env.pop("FLASHGEN_DB_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
    assert done.stderr.count("flashgen: the cache dir") == 1, done.stderr[-3000:]
    assert "is not a directory" in done.stderr
