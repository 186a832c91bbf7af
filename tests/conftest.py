"""Shared fixtures: offline environment, the two databases, and config files written per test."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

# Offline by design; set before any test module imports LiteLLM or fastembed.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"  # third-party material, copied with its provenance (SOURCES.md)
POSTGRES_ADMIN_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"


def _pg_admin_dsn() -> str:
    return POSTGRES_ADMIN_URL.replace("postgresql+asyncpg://", "postgresql://")


async def _pg_exec(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_pg_admin_dsn(), timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def postgres_url():
    """A fresh, empty PostgreSQL database for one test. Under CI=true an unreachable server fails."""
    name = f"gw_test_{uuid.uuid4().hex[:10]}"
    try:
        asyncio.run(_pg_exec(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI=true but unreachable at {POSTGRES_ADMIN_URL}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_ADMIN_URL}: {exc}")
    base = _pg_admin_dsn().rsplit("/", 1)[0]
    yield f"{base.replace('postgresql://', 'postgresql+asyncpg://')}/{name}"
    asyncio.run(_pg_exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path):
    """Each storage test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"
    return request.getfixturevalue("postgres_url")


def upgrade(database_url: str) -> None:
    """Apply the Alembic migrations, exactly as `gateway db upgrade` does."""
    from alembic import command
    from alembic.config import Config

    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "alembic"))
    config.attributes["database_url"] = database_url
    command.upgrade(config, "head")


@pytest.fixture
async def migrated_url(database_url):
    """A database URL at the latest migration."""
    await asyncio.to_thread(upgrade, database_url)
    return database_url


def write_config(tmp_path: Path, *, database_url: str | None = None, bots: list[dict] | None = None,
                 **top) -> Path:
    """Write a config.yaml for a test and return its path."""
    data = {
        "database_url": database_url or f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}",
        "qdrant": {"path": str(tmp_path / "qdrant")},
        "worker": {"lease_seconds": 3, "poll_interval": 0.2, "reply_timeout": 30},
        "log_level": "WARNING",
        "bots": bots if bots is not None else [{"name": "acme", "channels": {"web": {}}}],
        **top,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def help_center_bot() -> dict:
    """The sample bot: the examples help center as its only source."""
    return {
        "name": "acme",
        "fallback_text": "I couldn't find that in the Acme help center.",
        "sources": [{"name": "help-center", "type": "directory", "path": str(ROOT / "examples" / "help-center"),
                     "schedule": "0 3 * * *"}],
        "tools": [{"name": "escalate_to_human", "type": "builtin"}],
        "channels": {"web": {}},
    }


@pytest.fixture(scope="module")
def openai_fake_module():
    """One scripted OpenAI-compatible fake for a whole module (app-level tests share one app)."""
    from tests.fakes.openai_server import FakeOpenAI

    with FakeOpenAI() as server:
        yield server
