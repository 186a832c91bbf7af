"""A PostgreSQL URL as hosting providers hand it out connects as it is written, and one whose database is
not created yet says so."""

from __future__ import annotations

import asyncpg
from sqlalchemy import text

from storage.engine import asyncpg_dsn, create_engine


async def test_a_url_with_libpq_sslmode_connects_through_the_engine_and_the_bridge(postgres_url):
    # `?sslmode=…` (libpq's, as managed databases give their URLs) reached asyncpg.connect() as a keyword
    # it does not take: "cannot reach the database …: connect() got an unexpected keyword argument 'sslmode'".
    url = postgres_url.replace("postgresql+asyncpg://", "postgresql://") + "?sslmode=disable"
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()
    # The LISTEN/NOTIFY bridge connects with a DSN, where `ssl` would be sent as a server setting.
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        assert await connection.fetchval("SELECT 1") == 1
    finally:
        await connection.close()


def test_db_upgrade_against_a_database_not_created_yet_says_to_create_it(tmp_path, postgres_url):
    # The first switch to PostgreSQL: the line ended in SQLAlchemy's class name and a link to its docs.
    from tests.conftest import write_config
    from tests.test_cli import _run

    url = postgres_url.rsplit("/", 1)[0].replace("+asyncpg", "") + "/gw_never_created"
    proc = _run("db", "upgrade", "--config", str(write_config(tmp_path, database_url=url)))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f'error: cannot reach the database {url}: database "gw_never_created" does not '
                                   "exist on that server: create it first (createdb gw_never_created)"), proc.stderr
