"""Fixtures of the storage tests: an engine and its sessions on a migrated database (SQLite, then PostgreSQL)."""

from __future__ import annotations

import pytest

from storage.engine import create_engine, session_factory


@pytest.fixture
async def engine(migrated_url):
    """An engine on the migrated database, disposed of once the test ends, however it ends."""
    engine = create_engine(migrated_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def sessions(engine):
    return session_factory(engine)
