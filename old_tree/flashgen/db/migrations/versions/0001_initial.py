"""First schema: records, trials, pending shapes.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29

A frozen copy of the DDL (not imported from models.py), so later model changes cannot
silently rewrite history; tests compare the migrated schema with the models.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None

_BLOCKS = "(16, 32, 64, 128, 256)"
_WARPS = "(1, 2, 4, 8, 16)"


def _config_checks(prefix):
    return [
        sa.CheckConstraint(f"block_m IN {_BLOCKS}", name=f"ck_{prefix}_block_m"),
        sa.CheckConstraint(f"block_n IN {_BLOCKS}", name=f"ck_{prefix}_block_n"),
        sa.CheckConstraint(f"num_warps IN {_WARPS}", name=f"ck_{prefix}_num_warps"),
        sa.CheckConstraint("num_stages BETWEEN 1 AND 8", name=f"ck_{prefix}_num_stages"),
    ]


def _bucket_checks(prefix):
    return [
        sa.CheckConstraint(
            f"{col} BETWEEN 16 AND 1073741824 AND ({col} & ({col} - 1)) = 0",
            name=f"ck_{prefix}_{col}",
        )
        for col in ("bucket_q", "bucket_k")
    ]


def _config_columns():
    return [
        sa.Column("block_m", sa.Integer(), nullable=False),
        sa.Column("block_n", sa.Integer(), nullable=False),
        sa.Column("num_warps", sa.Integer(), nullable=False),
        sa.Column("num_stages", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "flashgen_records",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("spec_uri", sa.String(64), nullable=False),
        sa.Column("bucket_q", sa.Integer(), nullable=False),
        sa.Column("bucket_k", sa.Integer(), nullable=False),
        sa.Column("env_key", sa.String(64), nullable=False),
        sa.Column("gpu_name", sa.String(128), nullable=False),
        sa.Column("capability", sa.String(8), nullable=False),
        sa.Column("sm_count", sa.Integer(), nullable=False),
        sa.Column("smem_optin", sa.Integer(), nullable=False),
        sa.Column("triton_version", sa.String(128), nullable=False),
        sa.Column("torch_version", sa.String(128), nullable=False),
        sa.Column("flashgen_version", sa.String(128), nullable=False),
        sa.Column("template_hash", sa.String(64), nullable=False),
        *_config_columns(),
        sa.Column("time_ms", sa.Float(), nullable=False),
        sa.Column("tflops", sa.Float(), nullable=False),
        sa.Column("n_trials", sa.Integer(), nullable=False),
        sa.Column("measured", sa.Boolean(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint(
            "spec_uri", "bucket_q", "bucket_k", "env_key", name="uq_flashgen_records_key"
        ),
        *_config_checks("records"),
        *_bucket_checks("records"),
        sa.CheckConstraint("time_ms > 0", name="ck_records_time_ms"),
        sa.CheckConstraint("tflops >= 0", name="ck_records_tflops"),
        sa.CheckConstraint("n_trials >= 0", name="ck_records_n_trials"),
        sa.CheckConstraint("sm_count > 0 AND smem_optin > 0", name="ck_records_device"),
        sa.CheckConstraint("spec_uri LIKE 'attn_%'", name="ck_records_spec_uri"),
    )
    op.create_index("ix_flashgen_records_spec_env", "flashgen_records", ["spec_uri", "env_key"])

    op.create_table(
        "flashgen_trials",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("spec_uri", sa.String(64), nullable=False),
        sa.Column("bucket_q", sa.Integer(), nullable=False),
        sa.Column("bucket_k", sa.Integer(), nullable=False),
        sa.Column("env_key", sa.String(64), nullable=False),
        *_config_columns(),
        sa.Column("time_ms", sa.Float(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        *_config_checks("trials"),
        *_bucket_checks("trials"),
        sa.CheckConstraint("time_ms IS NULL OR time_ms > 0", name="ck_trials_time_ms"),
        sa.CheckConstraint(
            "status IN ('ok', 'pruned', 'failed', 'wrong')", name="ck_trials_status"
        ),
        sa.CheckConstraint("status <> 'ok' OR time_ms IS NOT NULL", name="ck_trials_ok_has_time"),
    )
    op.create_index(
        "ix_flashgen_trials_key",
        "flashgen_trials",
        ["spec_uri", "bucket_q", "bucket_k", "env_key"],
    )

    op.create_table(
        "flashgen_pending",
        sa.Column("spec_uri", sa.String(64), primary_key=True),
        sa.Column("bucket_q", sa.Integer(), primary_key=True),
        sa.Column("bucket_k", sa.Integer(), primary_key=True),
        sa.Column("gpu_name", sa.String(128), primary_key=True),
        sa.Column("seen", sa.Integer(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        *_bucket_checks("pending"),
        sa.CheckConstraint("seen >= 1", name="ck_pending_seen"),
    )


def downgrade() -> None:
    op.drop_table("flashgen_pending")
    op.drop_index("ix_flashgen_trials_key", table_name="flashgen_trials")
    op.drop_table("flashgen_trials")
    op.drop_index("ix_flashgen_records_spec_env", table_name="flashgen_records")
    op.drop_table("flashgen_records")
