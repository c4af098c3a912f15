"""SQLAlchemy models of the tuning database (the schema itself is created by Alembic).

Table names start with `flashgen_` because the same database also holds Optuna's tables.
Every config field carries a CHECK constraint, so a row that could not come from a valid
`TileConfig` is refused by the database itself, whoever writes it. The constraint texts are
plain SQL that SQLite and PostgreSQL both accept. Migrations carry their own copy of the DDL
(a migration is a frozen snapshot); tests check that the two agree: tables and columns
(Alembic's compare_metadata) and, on SQLite, every CHECK constraint's name and text.
"""

from __future__ import annotations

import datetime as _dt

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ..core.config import ALLOWED_WARPS, MAX_BLOCK, MAX_STAGES, MIN_BLOCK
from ..core.impls import IMPLS
from ..core.spec import MIN_BUCKET
from .records import MAX_BUCKET

# The same rules as `TileConfig` and `check_bucket`, from the same constants.
BLOCK_VALUES = str(tuple(b for b in (1 << i for i in range(31)) if MIN_BLOCK <= b <= MAX_BLOCK))
WARP_VALUES = str(ALLOWED_WARPS)
IMPL_VALUES = "(" + ", ".join(f"'{name}'" for name in IMPLS) + ")"


def config_checks(prefix: str) -> list[CheckConstraint]:
    """CHECKs on block_m, block_n, num_warps, num_stages (same rules as `TileConfig`)."""
    return [
        CheckConstraint(f"block_m IN {BLOCK_VALUES}", name=f"ck_{prefix}_block_m"),
        CheckConstraint(f"block_n IN {BLOCK_VALUES}", name=f"ck_{prefix}_block_n"),
        CheckConstraint(f"num_warps IN {WARP_VALUES}", name=f"ck_{prefix}_num_warps"),
        CheckConstraint(f"num_stages BETWEEN 1 AND {MAX_STAGES}", name=f"ck_{prefix}_num_stages"),
    ]


def bucket_checks(prefix: str) -> list[CheckConstraint]:
    """Buckets are powers of two in [16, 2**30] (`spec.shape_bucket`)."""
    return [
        CheckConstraint(
            f"{col} BETWEEN {MIN_BUCKET} AND {MAX_BUCKET} AND ({col} & ({col} - 1)) = 0",
            name=f"ck_{prefix}_{col}",
        )
        for col in ("bucket_q", "bucket_k")
    ]


class Base(DeclarativeBase):
    pass


class RecordRow(Base):
    """Best config per (spec uri, shape bucket, environment fingerprint).

    block_*/num_*/time_ms are flashgen's own best kernel; impl/impl_ratio say which
    implementation won against PyTorch's SDPA backends (`TuningRecord`), from revision 0002."""

    __tablename__ = "flashgen_records"
    __table_args__ = (
        UniqueConstraint(
            "spec_uri", "bucket_q", "bucket_k", "env_key", name="uq_flashgen_records_key"
        ),
        *config_checks("records"),
        *bucket_checks("records"),
        CheckConstraint("time_ms > 0", name="ck_records_time_ms"),
        CheckConstraint("tflops >= 0", name="ck_records_tflops"),
        CheckConstraint("n_trials >= 0", name="ck_records_n_trials"),
        CheckConstraint("sm_count > 0 AND smem_optin > 0", name="ck_records_device"),
        CheckConstraint("spec_uri LIKE 'attn_%'", name="ck_records_spec_uri"),
        CheckConstraint(f"impl IN {IMPL_VALUES}", name="ck_records_impl"),
        CheckConstraint(
            "(impl_ratio IS NULL AND impl = 'flashgen') OR "
            "(impl_ratio IS NOT NULL AND impl_ratio >= 1)",
            name="ck_records_impl_ratio",
        ),
        Index("ix_flashgen_records_spec_env", "spec_uri", "env_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    spec_uri: Mapped[str] = mapped_column(String(64))
    bucket_q: Mapped[int] = mapped_column(Integer)
    bucket_k: Mapped[int] = mapped_column(Integer)
    env_key: Mapped[str] = mapped_column(String(64))
    gpu_name: Mapped[str] = mapped_column(String(128))
    capability: Mapped[str] = mapped_column(String(8))
    sm_count: Mapped[int] = mapped_column(Integer)
    smem_optin: Mapped[int] = mapped_column(Integer)
    triton_version: Mapped[str] = mapped_column(String(128))
    torch_version: Mapped[str] = mapped_column(String(128))
    flashgen_version: Mapped[str] = mapped_column(String(128))
    template_hash: Mapped[str] = mapped_column(String(64))
    block_m: Mapped[int] = mapped_column(Integer)
    block_n: Mapped[int] = mapped_column(Integer)
    num_warps: Mapped[int] = mapped_column(Integer)
    num_stages: Mapped[int] = mapped_column(Integer)
    time_ms: Mapped[float] = mapped_column(Float)
    tflops: Mapped[float] = mapped_column(Float)
    n_trials: Mapped[int] = mapped_column(Integer)
    measured: Mapped[bool] = mapped_column(Boolean)
    host: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))
    impl: Mapped[str] = mapped_column(String(16), server_default="flashgen")
    impl_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)


class TrialRow(Base):
    """Every candidate measured (or refused) while tuning, for later analysis."""

    __tablename__ = "flashgen_trials"
    __table_args__ = (
        *config_checks("trials"),
        *bucket_checks("trials"),
        CheckConstraint("time_ms IS NULL OR time_ms > 0", name="ck_trials_time_ms"),
        CheckConstraint("status IN ('ok', 'pruned', 'failed', 'wrong')", name="ck_trials_status"),
        CheckConstraint("status <> 'ok' OR time_ms IS NOT NULL", name="ck_trials_ok_has_time"),
        Index("ix_flashgen_trials_key", "spec_uri", "bucket_q", "bucket_k", "env_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    spec_uri: Mapped[str] = mapped_column(String(64))
    bucket_q: Mapped[int] = mapped_column(Integer)
    bucket_k: Mapped[int] = mapped_column(Integer)
    env_key: Mapped[str] = mapped_column(String(64))
    block_m: Mapped[int] = mapped_column(Integer)
    block_n: Mapped[int] = mapped_column(Integer)
    num_warps: Mapped[int] = mapped_column(Integer)
    num_stages: Mapped[int] = mapped_column(Integer)
    time_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str] = mapped_column(Text)
    host: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))


class PendingRow(Base):
    """Shapes seen at run time without an exact tuned record: the tuner's to-do list."""

    __tablename__ = "flashgen_pending"
    __table_args__ = (
        *bucket_checks("pending"),
        CheckConstraint("seen >= 1", name="ck_pending_seen"),
    )

    spec_uri: Mapped[str] = mapped_column(String(64), primary_key=True)
    bucket_q: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket_k: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    seen: Mapped[int] = mapped_column(Integer)
    first_seen: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))
    last_seen: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))


metadata = Base.metadata
