"""Alembic environment for flashgen's own tables (run programmatically by `flashgen.db.migrate`).

There is no alembic.ini: `migrate.upgrade` builds the Config in code and hands over an open
connection through `config.attributes["connection"]`. The version table is
`flashgen_alembic_version`, because Optuna keeps its own `alembic_version` in the same database,
and autogenerate only looks at `flashgen_*` tables for the same reason.
"""

from __future__ import annotations

from alembic import context

from flashgen.db.migrate import VERSION_TABLE
from flashgen.db.models import metadata


def _include_object(obj, name, type_, reflected, compare_to):
    if type_ == "table":
        return bool(name) and name.startswith("flashgen_")
    return True


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("flashgen migrations run through flashgen.db.migrate.upgrade(conn)")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_object=_include_object,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations_online()
