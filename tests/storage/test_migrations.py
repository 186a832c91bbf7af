"""Migrations apply on SQLite and PostgreSQL, and match the ORM models exactly."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select

from storage.engine import create_engine
from storage.models import Base, Message


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


def test_migrations_are_found_from_the_working_directory_when_the_package_is_installed(tmp_path, monkeypatch):
    """The Dockerfile's `pip install .` puts the package in site-packages, without alembic/: its `gateway`
    command (`docker compose exec gateway gateway ingest`) ended in Alembic's "Path doesn't exist" traceback."""
    import pytest

    from gateway import preflight
    from gateway.errors import GatewayError
    from tests.conftest import ROOT

    installed = tmp_path / "site-packages" / "gateway" / "preflight.py"
    monkeypatch.setattr(preflight, "__file__", str(installed))
    monkeypatch.chdir(ROOT)  # the image's WORKDIR, /app, holds alembic.ini and alembic/
    assert preflight.migrations_root() == ROOT
    assert preflight.migration_revisions()[0]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GatewayError, match="neither beside the installed gateway package nor in the working"):
        preflight.alembic_config()


def test_db_upgrade_says_which_migrations_it_applied(tmp_path):
    # After an upgrade of the gateway, `db upgrade` said "is at the latest migration" whether it had
    # just applied two migrations or none, so an operator could not tell the upgrade had run.
    from alembic import command

    from gateway.preflight import alembic_config, migration_revisions
    from tests.conftest import write_config
    from tests.test_cli import _run

    url = f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"
    config = write_config(tmp_path, database_url=url)
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    command.downgrade(alembic_config(url), "0006")
    head, _ = migration_revisions()
    upgraded, again = (_run("db", "upgrade", "--config", str(config)) for _ in range(2))
    assert upgraded.stdout.startswith(f"database was upgraded from migration 0006 to the latest, {head} ("), upgraded
    assert again.stdout.startswith("database is at the latest migration ("), again


async def test_downgrading_the_newest_migration_and_upgrading_again_keeps_every_row(migrated_url):
    """On SQLite a dropped column copies its table into a new one and drops the old: with foreign keys on,
    dropping `conversations` cascaded to every message and escalation, so `alembic downgrade -1` (0013)
    emptied the transcripts."""
    import asyncio

    from alembic import command
    from sqlalchemy import text

    from gateway.models import ConversationRef, InboundMessage, Sender
    from gateway.preflight import alembic_config
    from storage import repositories as repo
    from storage.engine import session_factory

    engine = create_engine(migrated_url)
    sessions = session_factory(engine)

    async def counts() -> tuple[int, int, int]:
        async with engine.connect() as conn:
            return tuple([(await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
                          for table in ("conversations", "messages", "contacts")])

    async def tables() -> set[str]:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))

    try:
        for n in range(3):
            async with sessions() as session, session.begin():
                await repo.store_inbound(session, bot="acme", message=InboundMessage(
                    channel="whatsapp", external_id=f"w{n}", sender=Sender(external_id=f"+1555{n}"),
                    conversation=ConversationRef(channel="whatsapp", chat=f"+1555{n}"), text="hello"))
        before = await counts()
        await engine.dispose()
        # Past 0016, which drops a column of `messages` (on SQLite, a copy of the table), 0015, which has nothing
        # to undo, and 0014, which drops two tables.
        await asyncio.to_thread(command.downgrade, alembic_config(migrated_url), "0013")
        assert await counts() == before
        assert not {"removed_chats", "unfinished_chat_moves"} & await tables()  # 0014's
        await engine.dispose()
        await asyncio.to_thread(command.upgrade, alembic_config(migrated_url), "head")
        assert await counts() == before == (3, 3, 3)
        assert {"removed_chats", "unfinished_chat_moves"} <= await tables()
    finally:
        await engine.dispose()


async def test_db_upgrade_waits_for_another_replicas_migration_past_the_urls_statement_timeout(postgres_url):
    """A URL's `options=-c statement_timeout=…` (as providers set it) applied to the migrations too: a replica
    waiting for another's migration (the advisory lock), or a migration longer than it (an index on a large
    table), was cancelled ('canceling statement due to statement timeout') and the replica did not start."""
    import asyncio

    import asyncpg
    from alembic import command
    from sqlalchemy.engine import make_url

    from gateway.preflight import alembic_config

    other = await asyncpg.connect(make_url(postgres_url).set(drivername="postgresql").render_as_string(False))
    try:
        await other.execute("SELECT pg_advisory_lock(7418265)")  # another replica migrating
        url = postgres_url + "?options=-c%20statement_timeout%3D200%20-c%20lock_timeout%3D200"
        upgrading = asyncio.create_task(asyncio.to_thread(command.upgrade, alembic_config(url), "head"))
        await asyncio.sleep(0.6)
        assert not upgrading.done()
        await other.execute("SELECT pg_advisory_unlock(7418265)")
        await asyncio.wait_for(upgrading, timeout=60)
    finally:
        await other.close()


async def test_a_meta_stored_with_nul_before_0015_takes_a_merged_key_after_it(database_url):
    """PostgreSQL's `json` took a NUL (`\\u0000`) and a lone surrogate in `meta`, from a platform's payload, before
    what meta keeps was made storable; `jsonb` refuses both, and the one-statement merge of a key casts to it:
    on such a message a streamed answer's id or a tool's run failed with 'unsupported Unicode escape sequence'."""
    import asyncio

    from storage.engine import session_factory
    from storage.meta_keys import set_meta_key
    from tests.conftest import upgrade
    from tests.storage.old_rows import old_message, store_old

    await asyncio.to_thread(upgrade, database_url, "0014")
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    stuck = {"sender": "+15550", "shared": {"label": "Caf\x00e", "name": "\ud800x", "path": "C:\\u0000"}}
    try:
        await store_old(engine, [old_message("w0", stuck)])
        await engine.dispose()
        await asyncio.to_thread(upgrade, database_url)
        async with sessions() as session, session.begin():
            message_id = (await session.execute(select(Message.id))).scalar_one()
            merged = await set_meta_key(session, message_id=message_id, key="draft_id", value="42")
            sender = (await session.execute(select(Message.sender))).scalar_one()  # 0016 read it past the NUL
    finally:
        await engine.dispose()
    if engine.dialect.name == "postgresql":  # SQLite's JSON functions take both: its rows are left as they are
        stuck = {"sender": "+15550", "shared": {"label": "Cafe", "name": "\ufffdx", "path": "C:\\u0000"}}
    assert merged == {**stuck, "draft_id": "42"} and sender == "+15550"


async def test_0015_cleans_every_row_of_a_table_larger_than_its_batch(postgres_url):
    """0015 reads the suspect rows 500 at a time, from the last id it read: with more of them than that, the
    ones left unchanged at the front (an escaped backslash's `\\\\u0000`) must not keep it from the rest."""
    import asyncio

    from sqlalchemy import text

    from tests.conftest import upgrade
    from tests.storage.old_rows import old_message, store_old

    await asyncio.to_thread(upgrade, postgres_url, "0014")
    engine = create_engine(postgres_url)
    try:
        await store_old(engine, [old_message("w0", {"sender": "+15550"})])
        async with engine.begin() as conn:
            columns = ", ".join((await conn.execute(text(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'messages' "
                "AND column_name NOT IN ('id', 'external_id', 'meta')"))).scalars())
            await conn.execute(text(
                f"INSERT INTO messages ({columns}, external_id, meta) SELECT {columns}, 'w' || g, CAST(CASE WHEN g <= 1100 "
                "THEN '{\"path\": \"C:\\\\u0000\"}' ELSE '{\"label\": \"Caf\\u0000e\"}' END AS json) "
                "FROM messages, generate_series(1, 1300) AS g WHERE external_id = 'w0'"))
        await engine.dispose()
        await asyncio.to_thread(upgrade, postgres_url)
        async with engine.connect() as conn:  # jsonb refuses a NUL: every row casts now
            labels = (await conn.execute(text(
                "SELECT CAST(meta AS jsonb) ->> 'label' FROM messages WHERE external_id != 'w0' ORDER BY id"))).scalars().all()
            paths = (await conn.execute(text("SELECT count(*) FROM messages WHERE meta ->> 'path' = 'C:\\u0000'"))).scalar()
    finally:
        await engine.dispose()
    assert labels[1100:] == ["Cafe"] * 200 and paths == 1100
