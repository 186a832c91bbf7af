"""The retention job and the Slack operator channel: the gateway's posts in the operator thread of a purged
conversation's escalation (its header, the summary, the customer's messages relayed) go with it, as under
`gateway forget`; Slack refusing is logged, never a failure of the purge."""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from uuid import uuid4

import pytest
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy import text, update
from sqlalchemy.exc import DBAPIError
from structlog.testing import capture_logs

from gateway.operators import slack_purged
from gateway.retention import run_retention
from gateway.settings import QdrantSettings, Settings
from rag.index import open_index
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Document, Escalation, Message
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.fakes.web_server import closed_port
from tests.scale.test_retention import _count, _expired_web_conversation, _store
from tests.scale.test_retention_slack import OPERATORS, _thread


@asynccontextmanager
async def _purging(url: str):
    """(fake Slack, sessions, a Slack client with the bot's token, settings of bot acme keeping 30 days, with
    Slack and an operator channel)."""
    slack, engine = await FakeSlack.start(), create_engine(url)
    settings = Settings(database_url=url, bots=[{"name": "acme", "retention_days": 30, "channels": {"slack": {
        "bot_token": BOT_TOKEN, "signing_secret": "signing-secret", "api_base": slack.api_base,
        "operator_channel": OPERATORS}}}])
    try:
        yield slack, session_factory(engine), AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_base), settings
    finally:
        await engine.dispose()
        await slack.stop()


async def test_retention_deletes_the_gateways_posts_in_a_purged_conversations_slack_thread(migrated_url):
    """The purge deleted the conversation and its escalation, and left the copies of the customer's words the
    gateway had posted in the operator channel, which only `gateway forget` deleted."""
    async with _purging(migrated_url) as (slack, sessions, client, settings):
        expired = await _expired_web_conversation(sessions, "s-old")
        kept = await _store(sessions, bot="acme", channel="web", user="s-new", chat="s-new")
        theirs = await _thread(client, sessions, expired, "s-old")
        operator_reply = slack.say(OPERATORS, "On it", thread_ts=theirs[0])
        others = await _thread(client, sessions, kept, "s-new")
        report = await run_retention(sessions, settings, knowledge=None)
        assert report.conversations == 1
        # Stored with the purge, and read back from the table: the job's report held each one as well, which nothing
        # read, all of a large first purge's threads in memory until its end.
        assert report.operator_threads == []
        assert sorted(slack.deleted) == sorted(theirs) and slack.deleted[-1] == theirs[0]
        assert operator_reply not in slack.deleted and not set(others) & set(slack.deleted)
        assert await _count(sessions, Escalation, Escalation.conversation_id == expired) == 0


async def test_retention_purges_though_slack_refuses_and_the_next_run_deletes_the_thread_left(migrated_url):
    """A thread whose delete Slack refused was named once and never tried again: its rows were gone."""
    async with _purging(migrated_url) as (slack, sessions, client, settings):
        expired = await _expired_web_conversation(sessions, "s-old")
        theirs = await _thread(client, sessions, expired, "s-old")
        slack.fail("conversations.replies", error="missing_scope")
        with capture_logs() as logs:
            report = await run_retention(sessions, settings, knowledge=None)
        assert report.conversations == 1 and slack.deleted == []
        assert await _count(sessions, Conversation, Conversation.id == expired) == 0
        [left] = [e for e in logs if e["event"] == "retention.operator_thread_left"]
        assert (left["log_level"], left["bot"], left["channel"], left["ts"]) == ("warning", "acme", OPERATORS, theirs[0])
        assert (left["why"], left["attempt"], left["retried"]) == ("Slack answered missing_scope", 1, True)
        with capture_logs() as logs:
            await run_retention(sessions, settings, knowledge=None)
        assert sorted(slack.deleted) == sorted(theirs)
        assert [e for e in logs if e["event"] == "retention.operator_thread_left"] == []


async def test_retention_gives_up_a_thread_slack_refuses_on_each_of_its_attempts_and_says_so(migrated_url, monkeypatch):
    monkeypatch.setattr(slack_purged, "OPERATOR_THREAD_ATTEMPTS", 2)
    async with _purging(migrated_url) as (slack, sessions, client, settings):
        header = (await _thread(client, sessions, await _expired_web_conversation(sessions, "s-old"), "s-old"))[0]
        left = []
        for _ in range(3):
            slack.fail("conversations.replies", error="missing_scope")
            with capture_logs() as logs:
                await run_retention(sessions, settings, knowledge=None)
            left += [(e["ts"], e["attempt"], e["retried"]) for e in logs if e["event"] == "retention.operator_thread_left"]
        assert left == [(header, 1, True), (header, 2, False)] and slack.deleted == []


async def test_retention_names_each_thread_of_a_deletion_that_failed_otherwise_and_tries_it_again(
        migrated_url, monkeypatch):
    """`retention.operator_threads_failed` gave a count alone: which threads were left was not known."""
    async def broken(settings, threads):
        raise RuntimeError("a bug")

    async with _purging(migrated_url) as (slack, sessions, client, settings):
        theirs = await _thread(client, sessions, await _expired_web_conversation(sessions, "s-old"), "s-old")
        real = slack_purged.erase_operator_threads
        monkeypatch.setattr(slack_purged, "erase_operator_threads", broken)
        with capture_logs() as logs:
            await run_retention(sessions, settings, knowledge=None)
        [failed] = [e for e in logs if e["event"] == "retention.operator_threads_failed"]
        assert failed["threads"] == [{"bot": "acme", "channel": OPERATORS, "ts": theirs[0]}]
        monkeypatch.setattr(slack_purged, "erase_operator_threads", real)
        await run_retention(sessions, settings, knowledge=None)
        assert sorted(slack.deleted) == sorted(theirs)


async def test_retention_deletes_at_most_its_bound_of_threads_a_run_and_the_next_run_the_others(
        migrated_url, monkeypatch):
    """A first purge of a full store must not hold the job for hours on Slack's rate limits; the threads past the
    bound were named in a warning and never deleted, as their rows were gone."""
    monkeypatch.setattr(slack_purged, "PURGE_OPERATOR_THREADS", 1)
    monkeypatch.setattr(slack_purged, "ROWS_PER_STATEMENT", 1)  # the batch's two threads stored in two statements
    async with _purging(migrated_url) as (slack, sessions, client, settings):
        headers = [(await _thread(client, sessions, await _expired_web_conversation(sessions, who), who))[0]
                   for who in ("s-old-1", "s-old-2")]
        with capture_logs() as logs:
            report = await run_retention(sessions, settings, knowledge=None)
        assert report.conversations == 2
        assert [h for h in headers if h in slack.deleted] == headers[:1]
        [waiting] = [e for e in logs if e["event"] == "retention.operator_threads_waiting"]
        assert waiting["waiting"] == 1
        await run_retention(sessions, settings, knowledge=None)
        assert [h for h in headers if h in slack.deleted] == headers


async def test_retention_deletes_the_purged_threads_though_a_later_step_of_the_job_fails(migrated_url):
    """The sources' step after the purge failed (the Qdrant server down): the conversations were gone, committed,
    and their threads, known only to that run, were neither deleted nor named, the customer's words left in
    Slack for good."""
    async with _purging(migrated_url) as (slack, sessions, client, settings):
        expired = await _expired_web_conversation(sessions, "s-old")
        theirs = await _thread(client, sessions, expired, "s-old")
        async with sessions() as session, session.begin():  # a removed source's chunks, to delete from the index
            session.add(Document(bot="acme", source="gone", doc_id="a.md", content_hash="h", chunk_ids=[str(uuid4())]))
        index = open_index(QdrantSettings(url=f"http://127.0.0.1:{closed_port()}"))  # nothing listens there
        try:
            with pytest.raises(Exception):
                await run_retention(sessions, settings, knowledge=SimpleNamespace(index=index))
        finally:
            await index.close()
        assert await _count(sessions, Conversation, Conversation.id == expired) == 0
        assert sorted(slack.deleted) == sorted(theirs)


_REFUSE_BETA = {  # a real failure of the database in bot beta's purge, once acme's is committed
    "sqlite": ["CREATE TRIGGER refuse_beta BEFORE DELETE ON conversations WHEN OLD.bot = 'beta' "
               "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"],
    "postgresql": ["CREATE FUNCTION refuse_beta() RETURNS trigger AS $$ BEGIN IF OLD.bot = 'beta' THEN RAISE EXCEPTION "
                   "'refused by the test'; END IF; RETURN OLD; END $$ LANGUAGE plpgsql",
                   "CREATE TRIGGER refuse_beta BEFORE DELETE ON conversations FOR EACH ROW EXECUTE FUNCTION refuse_beta()"],
}


async def test_a_purge_that_fails_midway_deletes_the_threads_of_what_it_committed_and_only_those(migrated_url):
    """Bot acme's conversations purged and committed, then bot beta's batch failed (a database error): the threads
    of acme's were lost with the job's report, the customer's words left in Slack unnamed; and beta's, read in the
    batch rolled back, are of conversations still stored, which keep them."""
    async with _purging(migrated_url) as (slack, sessions, client, settings):
        settings = Settings(database_url=migrated_url, bots=[
            settings.bots[0].model_dump(), {"name": "beta", "retention_days": 30}])
        expired = await _expired_web_conversation(sessions, "s-old")
        theirs = await _thread(client, sessions, expired, "s-old")
        beta = await _store(sessions, bot="beta", channel="web", user="s-beta", chat="s-beta")
        betas = await _thread(client, sessions, beta, "s-beta")
        long_ago = datetime.now(UTC) - timedelta(days=45)
        async with sessions() as session, session.begin():
            await session.execute(update(Conversation).where(Conversation.id == beta).values(created_at=long_ago))
            await session.execute(update(Message).where(Message.conversation_id == beta).values(created_at=long_ago))
            for statement in _REFUSE_BETA[session.bind.dialect.name]:
                await session.execute(text(statement))
        with capture_logs() as logs, pytest.raises(DBAPIError, match="refused by the test"):
            await run_retention(sessions, settings, knowledge=None)
        assert await _count(sessions, Conversation, Conversation.id == expired) == 0
        assert await _count(sessions, Conversation, Conversation.id == beta) == 1
        assert sorted(slack.deleted) == sorted(theirs) and not set(betas) & set(slack.deleted)
        assert [e for e in logs if e["event"] == "retention.operator_thread_left"] == []


async def test_a_retention_job_stopped_while_it_deletes_the_purged_threads_leaves_them_to_the_next_run(migrated_url):
    """Stopped while Slack was asked (a slow or rate-limited Slack, a shutdown meanwhile): the conversations were
    gone, committed, and their threads were known to that run alone, named for someone to delete by hand."""
    import asyncio

    async with _purging(migrated_url) as (slack, sessions, client, settings):
        expired = await _expired_web_conversation(sessions, "s-old")
        theirs = await _thread(client, sessions, expired, "s-old")
        slack.delays["conversations.replies"] = 5.0
        with capture_logs() as logs:
            job = asyncio.ensure_future(run_retention(sessions, settings, knowledge=None))
            for _ in range(200):
                if slack.delayed:
                    break
                await asyncio.sleep(0.05)
            assert slack.delayed, "Slack was never asked"
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job
        assert await _count(sessions, Conversation, Conversation.id == expired) == 0
        assert slack.deleted == [] and [e for e in logs if e["event"] == "retention.operator_thread_left"] == []
        del slack.delays["conversations.replies"]
        await run_retention(sessions, settings, knowledge=None)
        assert sorted(slack.deleted) == sorted(theirs)
