"""A Discord `/ask` while the database is slow, through the real app and the fake Discord: Discord gives an
interaction 3 s for its response, and the deferral (type 5) was sent only once the question was stored, so
a store taking longer showed "The application did not respond". The store is now waited for 2 s at most."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from structlog.testing import capture_logs

from gateway import services as services_module
from gateway.http import webhooks
from storage.engine import create_engine, session_factory
from storage.models import Message
from tests.english_replies import ENGLISH
from tests.gateway_channels.conftest import messages_in_chat, settle, settled_chat, wait_until
from tests.gateway_channels.test_discord_e2e import ask, discord_gateway, followups, post
from tests.pausing import pausing_sessions

pytestmark = pytest.mark.asyncio(loop_scope="module")

SLOW_STORE_S = 4.0  # past Discord's 3 s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with discord_gateway(tmp_path_factory.mktemp("discord-slow")) as env_:
        yield env_


async def test_discord_ask_is_deferred_in_time_while_the_store_is_slow_and_answered_once(env):
    client, services, fake = env
    fast = services.inbox._sessions
    # The inbox's next transaction stops after its first statement for longer than Discord waits.
    services.inbox._sessions = pausing_sessions(services.engine, lambda: asyncio.sleep(SLOW_STORE_S), after_statement=1)
    try:
        body = ask("1400000000000000701", channel="1300000000000000701")
        started = time.monotonic()
        with capture_logs() as logs:
            first = await post(client, body)
            waited = time.monotonic() - started
            again = await post(client, body)  # a second delivery meanwhile: still one question
            [reply] = await wait_until(lambda: followups(fake, "1400000000000000701"), timeout=30, what="the answer")
    finally:
        services.inbox._sessions = fast
    assert first.status_code == 200 and first.json() == {"type": 5} and waited < 3.0
    assert again.status_code == 200 and again.json() == {"type": 5}
    assert "$" in reply["content"]
    slow = [e["external_ids"] for e in logs if e["event"] == "webhook.store_slow"]
    assert slow and all(ids == ["1400000000000000701"] for ids in slow)  # the second waited behind the first
    assert not [e for e in logs if e["event"] == "webhook.store_failed"]
    await settle(services=services)
    assert len(followups(fake, "1400000000000000701")) == 1
    stored = await settled_chat(services, channel="discord", chat="1300000000000000701")
    assert [m.direction for m in stored] == ["in", "out"]


async def test_discord_ask_with_a_fast_store_is_stored_before_its_deferral(env):
    client, services, fake = env
    response = await post(client, ask("1400000000000000702", channel="1300000000000000702"))
    assert response.json() == {"type": 5}
    # Nothing left storing in the background: the question was in the database when Discord got its answer.
    assert not services.late_stores
    [question, *_] = await messages_in_chat(services, channel="discord", chat="1300000000000000702")
    assert question.direction == "in" and question.external_id == "1400000000000000702"


def failing_once_sessions(engine, *, after_s: float):
    """Sessions of `engine` whose first transaction fails, `after_s` after its first statement, as a database
    that went away mid-store does; the next ones work."""
    from sqlalchemy.exc import OperationalError

    async def fail() -> None:
        await asyncio.sleep(after_s)
        raise OperationalError("INSERT", {}, Exception("server closed the connection unexpectedly"))

    return pausing_sessions(engine, fail, after_statement=1)


async def test_discord_ask_whose_late_store_fails_once_is_stored_again_and_answered(env):
    """The store going on after the deferral failed (the database went away a moment): it was logged and the
    question lost, its "thinking…" shown for 15 minutes and never answered, though Discord sends it no more."""
    client, services, fake = env
    fast = services.inbox._sessions
    services.inbox._sessions = failing_once_sessions(services.engine, after_s=2.5)
    try:
        with capture_logs() as logs:
            response = await post(client, ask("1400000000000000703", channel="1300000000000000703"))
            services.inbox._sessions = fast
            assert response.json() == {"type": 5}
            await wait_until(lambda: followups(fake, "1400000000000000703"), timeout=30, what="the answer")
    finally:
        services.inbox._sessions = fast
    assert [e["external_ids"] for e in logs if e["event"] == "webhook.store_retry"] == [["1400000000000000703"]]
    assert not [e for e in logs if e["event"] == "webhook.store_failed"]
    await settle(services=services)
    stored = await settled_chat(services, channel="discord", chat="1300000000000000703")
    assert [m.direction for m in stored] == ["in", "out"]


def failing_sessions(engine, *, after_s: float) -> async_sessionmaker[AsyncSession]:
    """Sessions of `engine` whose every statement fails, the first `after_s` late: a database gone for good."""
    late = [after_s]

    class Failing(AsyncSession):
        async def execute(self, statement, *args, **kwargs):
            if late:
                await asyncio.sleep(late.pop())
            raise RuntimeError("the database went away")

    return async_sessionmaker(engine, class_=Failing, expire_on_commit=False)


async def test_discord_ask_whose_store_fails_each_time_is_told_so_once(env, monkeypatch):
    """A store still going after the deferral that fails each time it is run has no request left to fail: it is
    logged as `webhook.store_failed`, and the deferral's "thinking…", which showed for the token's 15 minutes,
    is answered with the bot's `failure` and `try_again` words, once."""
    client, services, fake = env
    fast = services.inbox._sessions
    monkeypatch.setattr(webhooks, "LATE_STORE_RETRIES_S", (0.1,))

    services.inbox._sessions = failing_sessions(services.engine, after_s=SLOW_STORE_S)
    try:
        with capture_logs() as logs:
            first = await post(client, ask("1400000000000000705", channel="1300000000000000705"))
            [notice] = await wait_until(lambda: followups(fake, "1400000000000000705"), timeout=30, what="the notice")
    finally:
        services.inbox._sessions = fast
    assert first.status_code == 200 and first.json() == {"type": 5}
    [failed] = [e for e in logs if e["event"] == "webhook.store_failed"]
    assert failed["log_level"] == "error" and failed["external_ids"] == ["1400000000000000705"]
    assert failed["error"] == "RuntimeError: the database went away" and failed["attempts"] == 2
    assert notice["content"] == ENGLISH.outage("failure", escalates=False)
    await settle(services=services)
    assert await messages_in_chat(services, channel="discord", chat="1300000000000000705") == []
    assert len(followups(fake, "1400000000000000705")) == 1


async def test_discord_ask_still_storing_at_stop_is_stored_before_the_database_closes_and_answered_after(
        tmp_path, database_url):
    """A stop (a deploy's SIGTERM) right after the deferral waits for the background store before it closes
    the database: the question is stored, and the next process answers it through its interaction. (On
    SQLite the paused store's write lock holds up the stop's other steps too; PostgreSQL tells them apart.)"""
    # The pause ends about 5 s into the stop: past the 2 s each other step gets (the bound late stores had,
    # which cut this one off), well within the 10 s they get now.
    async with discord_gateway(tmp_path, database_url=database_url) as (client, services, fake):
        services.inbox._sessions = pausing_sessions(services.engine, lambda: asyncio.sleep(7.0), after_statement=1)
        response = await post(client, ask("1400000000000000704", channel="1300000000000000704"))
        assert response.json() == {"type": 5} and services.late_stores  # still storing as the stop begins
        url = services.settings.database_url
    # Read at once, as a process that exits after its stop would have left it.
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session:
            stored = (await session.execute(select(Message.direction).where(
                Message.external_id == "1400000000000000704"))).scalars().all()
    finally:
        await engine.dispose()
    assert stored == ["in"]
    assert followups(fake, "1400000000000000704") == []  # the stopped worker did not take it
    async with discord_gateway(tmp_path, database_url=database_url) as (_, restarted_services, restarted):
        [reply] = await wait_until(lambda: followups(restarted, "1400000000000000704"), timeout=30,
                                   what="the answer after the restart")
        assert "$" in reply["content"]
        await settle(services=restarted_services)
        assert len(followups(restarted, "1400000000000000704")) == 1


async def test_discord_ask_still_storing_when_the_stop_stops_waiting_is_told_so_once(tmp_path, monkeypatch, capsys):
    """A store that outlasts the stop's wait (`LATE_STORE_STOP_S`) is cancelled, so its question is not stored
    and no process will answer it: its "thinking…" is answered with the failure words, through the channel,
    still up then, rather than left to expire 15 minutes later."""
    monkeypatch.setattr(services_module, "LATE_STORE_STOP_S", 1.0)
    async with discord_gateway(tmp_path) as (client, services, fake):
        services.inbox._sessions = pausing_sessions(services.engine, lambda: asyncio.sleep(600), after_statement=1)
        response = await post(client, ask("1400000000000000706", channel="1300000000000000706"))
        assert response.json() == {"type": 5} and services.late_stores
    [notice] = followups(fake, "1400000000000000706")
    assert notice["content"] == ENGLISH.outage("failure", escalates=False)
    logs = capsys.readouterr().err
    [failed] = [line for line in logs.splitlines() if "webhook.store_failed" in line]
    assert "error='cancelled: the gateway stopped'" in failed and "1400000000000000706" in failed
    assert "gateway.stop_step_timed_out" not in logs
