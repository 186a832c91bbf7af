"""Shared fixtures: offline environment, the two databases, config files written per test, and the
real app behind an in-process client with its models on the scripted OpenAI fake."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

# Offline by design; set before any test module imports LiteLLM or fastembed.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
import pytest  # noqa: E402
import structlog  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"  # third-party material, copied with its provenance (SOURCES.md)
HELP_CENTER = ROOT / "examples" / "help-center"  # the sample bot's knowledge base
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


def fresh_postgres_url(prefix: str = os.environ.get("TEST_POSTGRES_PREFIX", "gw_test"), *,
                       template: str | None = None) -> str | None:
    """A new empty PostgreSQL database, or a copy of database `template` (None when the server is
    unreachable outside CI; under CI=true an unreachable server fails the test)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        asyncio.run(_pg_exec(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI=true but unreachable at {POSTGRES_ADMIN_URL}: {exc}")
        return None
    base = _pg_admin_dsn().rsplit("/", 1)[0]
    return f"{base.replace('postgresql://', 'postgresql+asyncpg://')}/{name}"


def drop_postgres(url: str) -> None:
    """Drop a database made by fresh_postgres_url."""
    name = url.rsplit("/", 1)[1]
    asyncio.run(_pg_exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(autouse=True)
def _default_structlog():
    """Every test starts with structlog's defaults (all levels). An app started by an earlier test
    leaves its `log_level` (WARNING here) configured process-wide, which silently hid INFO lines from
    a later test's `capture_logs`: such a test passed alone and failed in the full run.

    Tracebacks are plain: the default renderer draws each one with rich, locals included (1,400 lines
    for one database error), and a test that logs a failure every second spent its time drawing them."""
    _plain_structlog_defaults()
    yield
    _plain_structlog_defaults()


def _plain_structlog_defaults() -> None:
    structlog.reset_defaults()
    processors = structlog.get_config()["processors"]
    structlog.configure(processors=[*processors[:-1], structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback)])


@pytest.fixture
def postgres_url():
    """A fresh, empty PostgreSQL database for one test, dropped after it."""
    url = fresh_postgres_url()
    if url is None:
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_ADMIN_URL}")
    yield url
    drop_postgres(url)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path):
    """Each storage test runs on SQLite and on PostgreSQL. For a test that uses `migrated_url`, the
    PostgreSQL database is made as a copy of the process's migrated one (`upgrade_new`) from the start."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"
    if "migrated_url" not in request.fixturenames:
        return request.getfixturevalue("postgres_url")
    url = migrated_postgres_copy()
    if url is None:
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_ADMIN_URL}")
    request.addfinalizer(lambda: drop_postgres(url))
    return url


def upgrade(database_url: str, revision: str = "head") -> None:
    """Apply the Alembic migrations (up to `revision`), exactly as `gateway db upgrade` does."""
    from alembic import command

    from gateway.preflight import alembic_config

    command.upgrade(alembic_config(database_url), revision)


_migrated: set[str] = set()  # PostgreSQL databases made as copies of the migrated template
_templates: dict[str, str] = {}  # "sqlite" → a migrated file, "postgres" → a migrated database; one per process


def migrated_postgres_copy() -> str | None:
    """A new PostgreSQL database, a copy of this process's migrated template; None when the server is unreachable
    outside CI (under CI=true the test fails), as `fresh_postgres_url`."""
    template = _templates.get("postgres") or (_template("postgres") if fresh_postgres_reachable() else None)
    url = fresh_postgres_url(template=template) if template else None
    if url is not None:
        _migrated.add(url)
    return url


def fresh_postgres_reachable() -> bool:
    """Whether the PostgreSQL server answers (under CI=true an unreachable one fails the test)."""
    try:
        asyncio.run(_pg_exec("SELECT 1"))
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI=true but unreachable at {POSTGRES_ADMIN_URL}: {exc}")
        return False
    return True


def _template(kind: str) -> str:
    """A database this process brought to the latest migration with `upgrade`, once: copied for every new one."""
    if kind not in _templates:
        if kind == "sqlite":
            import atexit
            import tempfile

            folder = tempfile.mkdtemp(prefix="gw-migrated-")
            atexit.register(shutil.rmtree, folder, True)
            path = Path(folder) / "template.db"
            upgrade(f"sqlite+aiosqlite:///{path}")
            import sqlite3

            with sqlite3.connect(path) as conn:  # everything in the main file: a copy needs no -wal beside it
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            _templates[kind] = str(path)
        else:
            url = fresh_postgres_url(f"{os.environ.get('TEST_POSTGRES_PREFIX', 'gw_test')}_tpl")
            if url is None:
                raise RuntimeError(f"PostgreSQL unreachable at {POSTGRES_ADMIN_URL}")
            upgrade(url)
            _templates[kind] = url.rsplit("/", 1)[1]
    return _templates[kind]


async def _pg_empty(name: str) -> bool:
    import asyncpg

    conn = await asyncpg.connect(_pg_admin_dsn().rsplit("/", 1)[0] + f"/{name}", timeout=5)
    try:
        return not await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
    finally:
        await conn.close()


def upgrade_new(database_url: str) -> None:
    """`upgrade` to the latest migration, for a database no one has used yet (an app or a fixture about to
    start on it): a copy of the one this process migrated with `upgrade`, the same tables, indexes and
    `alembic_version`, in a fraction of the time (the 22 migrations took 3 to 5 s per test on PostgreSQL,
    0.4 to 6 s on SQLite, on 2 busy cores). A database that already holds anything is upgraded for real.
    The migrations' own tests call `upgrade`."""
    from storage.engine import is_sqlite, sqlite_file

    if is_sqlite(database_url):
        path = sqlite_file(database_url)
        if path is None or path.exists():
            return upgrade(database_url)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = Path(_template("sqlite")).read_bytes()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owner only, as the engine makes it
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return None
    if database_url in _migrated:
        return None
    name = database_url.rsplit("/", 1)[1]
    if not name.isidentifier():  # a URL with options, or not one of fresh_postgres_url's
        return upgrade(database_url)
    template = _template("postgres")
    if not asyncio.run(_pg_empty(name)):
        return upgrade(database_url)
    try:  # not WITH (FORCE): a database someone holds open is theirs, and is upgraded for real
        asyncio.run(_pg_exec(f'DROP DATABASE "{name}"'))
    except Exception:
        return upgrade(database_url)
    asyncio.run(_pg_exec(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    return None


@pytest.fixture
async def migrated_url(database_url):
    """A database URL at the latest migration."""
    await asyncio.to_thread(upgrade_new, database_url)
    return database_url


@pytest.fixture
async def engine(migrated_url):
    """An engine on the migrated database, disposed of once the test ends, however it ends."""
    from storage.engine import create_engine

    engine = create_engine(migrated_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def sessions(engine):
    """The sessions of `engine` (the migrated database)."""
    from storage.engine import session_factory

    return session_factory(engine)


def write_config(tmp_path: Path, *, database_url: str | None = None, bots: list[dict] | None = None,
                 **top) -> Path:
    """Write a config.yaml for a test and return its path."""
    # No model cooldown unless a test sets one: tests that share an app script a failing model in
    # one test and a working one in the next (the cooldown has tests of its own).
    llm = {"cooldown_seconds": 0, **top.pop("llm", {})}
    data = {
        "database_url": database_url or f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}",
        "qdrant": {"path": str(tmp_path / "qdrant")},
        "worker": {"lease_seconds": 3, "poll_interval": 0.2, "reply_timeout": 30},
        "log_level": "WARNING",
        "llm": llm,
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
        "sources": [{"name": "help-center", "type": "directory", "path": str(HELP_CENTER),
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


@pytest.fixture(scope="module")
def fake(openai_fake_module):
    """The module's OpenAI fake under the short name app-level tests use (modules may override `fake`)."""
    return openai_fake_module


@pytest.fixture
def fresh_fake(fake):
    """The fake with no scripts or requests left by an earlier test of the module.

    Apply to a whole module with `pytest.mark.usefixtures("fresh_fake")`: tests that never script the
    fake must not see another test's leftover turns either."""
    fake.reset()
    return fake


def docs_source(tmp_path: Path, files: dict[str, str] | None = None) -> dict[str, Any]:
    """A `help` directory source in tmp_path/docs holding `files` (name → text).

    Without `files` it holds the help center's plans-and-pricing page, enough to answer the Plus price."""
    docs = tmp_path / "docs"
    docs.mkdir()
    if files is None:
        shutil.copy(HELP_CENTER / "plans-and-pricing.md", docs)
    for name, text in (files or {}).items():
        (docs / name).write_text(text, encoding="utf-8")
    return {"name": "help", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}


@asynccontextmanager
async def app_client(tmp_path: Path, *, bots: list[dict[str, Any]], env: dict[str, str] | None = None,
                     ingest: bool = False, start_worker: bool = True, raise_app_exceptions: bool = True,
                     database_url: str | None = None, **top: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The real app (lifespan and all; no scheduler or channel loops) behind an in-process httpx client.

    The config is written from `bots` and `top`; `env` holds the values its ${VAR} references need and
    is set only while the config is read. `ingest` indexes the bots' sources before the first request.
    The client carries the app's services as `client.services`."""
    from gateway.app import create_app
    from gateway.settings import load_settings

    with pytest.MonkeyPatch.context() as patch:
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        settings = load_settings(write_config(tmp_path, bots=bots, database_url=database_url, **top))
    await asyncio.to_thread(upgrade_new, settings.database_url)
    app = create_app(settings, start_worker=start_worker, start_scheduler=False, start_channels=False)
    async with app.router.lifespan_context(app):
        if ingest:
            await app.state.services.knowledge.ingest()
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test", timeout=60) as client:
            client.services = app.state.services
            yield client


async def chat_events(client: httpx.AsyncClient, bot: str, session_id: str, text: str) -> list[tuple[str, dict]]:
    """Send `text` to a bot's web chat as an SSE request; the (event, data) pairs it streamed, in order."""
    events, current = [], None
    async with client.stream("POST", f"/v1/bots/{bot}/chat", headers={"Accept": "text/event-stream"},
                             json={"session_id": session_id, "text": text}) as response:
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                current = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and current:
                events.append((current, json.loads(line.split(":", 1)[1])))
    return events


@pytest.fixture
def dns_answers(monkeypatch):
    """A DNS whose answers for some names the test chooses (`answers[name] = address`): a site's owner
    controls its own, and may point it at this machine or at the cloud's metadata service."""
    answers: dict[str, str] = {}
    resolve = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        return resolve(answers.get(name, host), *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`make test`'s second step, `-m exclusive`, runs the one file whose tests carry that marker. It imported
    every other test module first (the app, LiteLLM and all, 3,885 tests) only to deselect them: 203 s of
    collection on 2 busy cores for one test. There, a test module that never names the marker is not read.
    (A marker comes from the module's own `pytestmark` or decorators; no conftest adds it.)"""
    if config.getoption("markexpr", "") != "exclusive":
        return None
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        if "exclusive" not in collection_path.read_text(encoding="utf-8", errors="replace"):
            return True
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The migrated PostgreSQL template goes with the session (an xdist worker runs no atexit handlers)."""
    if "postgres" in _templates:
        base = _pg_admin_dsn().rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
        drop_postgres(f"{base}/{_templates.pop('postgres')}")
