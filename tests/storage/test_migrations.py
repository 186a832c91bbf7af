"""Migrations apply on SQLite and PostgreSQL, and match the ORM models exactly."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from storage.engine import create_engine
from storage.models import Base


async def test_migrations_upgrade_creates_every_table(migrated_url):
    engine = create_engine(migrated_url)
    async with engine.connect() as conn:
        tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    await engine.dispose()
    assert set(Base.metadata.tables) <= tables
    assert "alembic_version" in tables


async def test_migrations_match_models_without_autogenerate_diff(migrated_url):
    engine = create_engine(migrated_url)
    async with engine.connect() as conn:
        diff = await conn.run_sync(
            lambda sync: compare_metadata(MigrationContext.configure(sync, opts={"compare_type": True}),
                                          Base.metadata))
    await engine.dispose()
    assert diff == []
