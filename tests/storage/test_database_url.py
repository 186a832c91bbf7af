"""A PostgreSQL URL as hosting providers hand it out connects as it is written."""

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
