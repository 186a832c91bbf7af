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


def test_migrations_concurrent_upgrades_on_postgres_all_succeed(postgres_url, tmp_path):
    import os
    import subprocess
    import sys

    import yaml

    from tests.conftest import ROOT

    # Every replica runs `db upgrade` at start; the advisory lock in alembic/env.py serializes them.
    # (Separate processes: Alembic's migration context is process-global.)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"database_url": postgres_url}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "gateway", "db", "upgrade", "--config", str(config)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    outcomes = [(p.wait(timeout=120), p.stderr.read().decode()[-500:]) for p in procs]
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
