"""Records say which implementation won: flashgen's kernel or one of PyTorch's SDPA backends.

Revision ID: 0002_impl
Revises: 0001_initial
Create Date: 2026-11-30

Two columns on flashgen_records: `impl` (a short enum, CHECKed) and `impl_ratio` (the
runner-up's time over the winner's; NULL when no comparison was made). Existing rows become
impl 'flashgen' with no ratio: they were never compared, so the run-time choice keeps using
its defaults for them. Batch mode, because SQLite cannot add a CHECK constraint to an existing
table (Alembic copies the table, its rows and its named constraints; PostgreSQL just alters).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_impl"
down_revision = "0001_initial"
branch_labels = None
depends_on = None

_IMPLS = "('flashgen', 'sdpa_cudnn', 'sdpa_flash', 'sdpa_efficient')"


def upgrade() -> None:
    with op.batch_alter_table("flashgen_records") as batch:
        batch.add_column(
            sa.Column("impl", sa.String(16), nullable=False, server_default="flashgen")
        )
        batch.add_column(sa.Column("impl_ratio", sa.Float(), nullable=True))
        batch.create_check_constraint("ck_records_impl", f"impl IN {_IMPLS}")
        batch.create_check_constraint(
            "ck_records_impl_ratio",
            "(impl_ratio IS NULL AND impl = 'flashgen') OR "
            "(impl_ratio IS NOT NULL AND impl_ratio >= 1)",
        )


def downgrade() -> None:
    with op.batch_alter_table("flashgen_records") as batch:
        batch.drop_constraint("ck_records_impl_ratio", type_="check")
        batch.drop_constraint("ck_records_impl", type_="check")
        batch.drop_column("impl_ratio")
        batch.drop_column("impl")
