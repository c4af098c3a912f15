"""Test setup shared by every test module.

- Kernels run in Triton's CPU interpreter unless a GPU is present (TRITON_INTERPRET=1 is set
  before anything imports Triton).
- Each test session uses its own cache dir, so generated files never leak between runs.
- Every test runs flashgen's own kernels (FLASHGEN_IMPL=flashgen) unless marked `impl_choice`.
- Tests marked `gpu` skip without CUDA; tests marked `postgres` skip unless
  FLASHGEN_TEST_PG_URL is set (`make test` starts a server and sets it).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from contextlib import contextmanager

import pytest

_HAS_CUDA = False
try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    pass

if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("FLASHGEN_CACHE_DIR", tempfile.mkdtemp(prefix="flashgen-test-cache-"))


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_pg = pytest.mark.skip(reason="needs FLASHGEN_TEST_PG_URL (make test starts PostgreSQL)")
    for item in items:
        if "gpu" in item.keywords and not _HAS_CUDA:
            item.add_marker(skip_gpu)
        if "postgres" in item.keywords and not os.environ.get("FLASHGEN_TEST_PG_URL"):
            item.add_marker(skip_pg)


@pytest.fixture(autouse=True)
def _flashgen_kernels_unless_choosing(request, monkeypatch):
    """Kernel and backend tests are about flashgen's kernels; on a GPU whose defaults pick an
    SDPA backend (the H200) they would test cuDNN instead. So every test runs with
    FLASHGEN_IMPL=flashgen except those marked `impl_choice`, which test the choice itself."""
    if "impl_choice" not in request.keywords:
        monkeypatch.setenv("FLASHGEN_IMPL", "flashgen")


@pytest.fixture
def device() -> str:
    """Where kernel tests put their tensors: CUDA when present, else CPU (interpreter)."""
    return "cuda" if _HAS_CUDA else "cpu"


@contextmanager
def fresh_pg_database(prefix: str = "fg_test"):
    """A new, empty database on the test PostgreSQL server, dropped afterwards.

    Each test gets its own so that pytest-xdist workers never see each other's tables.
    """
    import sqlalchemy as sa

    base = sa.engine.make_url(os.environ["FLASHGEN_TEST_PG_URL"])
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """A fresh tuning-database URL on each backend: a SQLite file and a PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tuning.sqlite3'}"
    else:
        with fresh_pg_database() as url:
            yield url


@pytest.fixture
def pg_url():
    """A fresh PostgreSQL database URL (tests using it carry the `postgres` marker)."""
    with fresh_pg_database() as url:
        yield url
