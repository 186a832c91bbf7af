"""`gateway forget` and the Slack operator channel: what the gateway posted there about the person's
conversations (an escalation's thread: header, summary, their messages relayed) goes too; the operators' own
replies stay, as a bot token cannot delete them."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import pytest
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy import select, text, update

from gateway.cli import main
from gateway.operators import slack_purged
from gateway.operators.slack_purged import OPERATOR_THREAD_ATTEMPTS, erase_purged_threads
from gateway.retention import forget_contact, run_retention
from gateway.settings import load_settings
from storage.engine import create_engine, session_factory
from storage.models import Escalation, PurgedOperatorThread
from tests.conftest import write_config
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.scale.test_retention import _count, _store

OPERATORS = "COPS"


async def _thread(client: AsyncWebClient, sessions, conversation: int, who: str) -> list[str]:
    """The thread the gateway posts for `conversation`'s escalation, stored with it: [header ts, replies' ts]."""
    header = (await client.chat_postMessage(channel=OPERATORS, text=f"Escalation: {who} asked for a human"))["ts"]
    replies = [(await client.chat_postMessage(channel=OPERATORS, text=text, thread_ts=header))["ts"]
               for text in (f"*Summary:* {who} wants a refund", "*Customer:* my secret 1")]
    async with sessions() as session, session.begin():
        await session.execute(update(Escalation).where(Escalation.conversation_id == conversation).values(
            slack_channel=OPERATORS, slack_ts=header))
    return [header, *replies]


@asynccontextmanager
async def _forgetting(url: str, tmp_path, monkeypatch):
    """(fake Slack, sessions, a Slack client with the bot's token, config of bot acme with Slack, its token from
    the environment as secrets are, and an operator channel)."""
    monkeypatch.setenv("FORGET_SLACK_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("FORGET_SLACK_SECRET", "signing-secret")
    slack, engine = await FakeSlack.start(), create_engine(url)
    settings = {"bot_token": "${FORGET_SLACK_TOKEN}", "signing_secret": "${FORGET_SLACK_SECRET}",
                "api_base": slack.api_base, "operator_channel": OPERATORS}
    config = write_config(tmp_path, database_url=url, bots=[{"name": "acme", "channels": {"slack": settings}}])
    try:
        yield slack, session_factory(engine), AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_base), config
    finally:
        await engine.dispose()
        await slack.stop()


@pytest.mark.parametrize("identity", [{}, {"bot_id": None}], ids=["bot-id", "no-bot-id"])
async def test_forget_deletes_the_gateways_posts_in_the_slack_operator_thread(migrated_url, tmp_path, capsys,
                                                                            monkeypatch, identity):
    """The relayed copies (the customer's messages, the summary quoting them) stayed in the operator channel after
    `gateway forget`, which had erased everything else of the person's. An auth.test without a bot id (review)
    took every operator's reply, which has none either, for the app's own."""
    async with _forgetting(migrated_url, tmp_path, monkeypatch) as (slack, sessions, client, config):
        slack.identity.update(identity)
        gone = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        kept = await _store(sessions, bot="acme", channel="telegram", user="777", chat="777")
        theirs = await _thread(client, sessions, gone, "4242")
        operator_reply = slack.say(OPERATORS, "On it, refunding now", thread_ts=theirs[0])
        others = await _thread(client, sessions, kept, "777")
        code = await asyncio.to_thread(main, ["forget", "--config", str(config), "--channel", "telegram",
                                              "--user", "4242"])
        assert code == 0
        assert capsys.readouterr().out.splitlines()[1:] == [
            "deleted 1 Slack operator thread (the operators' own replies stay)"]
        assert sorted(slack.deleted) == sorted(theirs)  # the replies, then the header
        assert slack.deleted[-1] == theirs[0] and operator_reply not in slack.deleted
        assert not set(others) & set(slack.deleted)
        assert await _count(sessions, Escalation, Escalation.conversation_id == gone) == 0
        assert await _count(sessions, PurgedOperatorThread) == 0  # gone from Slack: nothing left to try again


async def test_forget_names_the_slack_thread_it_could_not_delete_exits_1_and_the_retention_job_deletes_it_later(
        migrated_url, tmp_path, capsys, monkeypatch):
    """Slack refuses (a token without channels:history): the database is forgotten all the same, and the thread
    left is named, instead of a silent success. It was named once and never tried again: its escalation's row,
    the only record of it, was gone, so a forget run again found nothing; it is stored for the retention job
    (which `gateway serve` runs though no bot keeps a retention period), whose next run deletes it."""
    async with _forgetting(migrated_url, tmp_path, monkeypatch) as (slack, sessions, client, config):
        gone = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        theirs = await _thread(client, sessions, gone, "4242")
        slack.fail("conversations.replies", error="missing_scope")
        code = await asyncio.to_thread(main, ["forget", "--config", str(config), "--channel", "telegram",
                                              "--user", "4242"])
        assert code == 1
        err = capsys.readouterr().err
        assert f"warning: Slack operator thread {theirs[0]} (bot acme, channel {OPERATORS}) was not deleted: " \
               "Slack answered missing_scope; the retention job tries it again on its next runs (gateway serve, " \
               "retention_schedule), up to 4 times; else delete it in Slack" in err
        assert slack.deleted == []
        assert await _count(sessions, Escalation, Escalation.conversation_id == gone) == 0
        async with sessions() as session:
            [row] = (await session.scalars(select(PurgedOperatorThread))).all()
        assert (row.bot, row.channel, row.ts, row.attempts, row.why) == (
            "acme", OPERATORS, theirs[0], 1, "Slack answered missing_scope")
        settings = load_settings(config)
        assert not settings.bots[0].retention_days
        await run_retention(sessions, settings, knowledge=None)
        assert sorted(slack.deleted) == sorted(theirs)
        assert await _count(sessions, PurgedOperatorThread) == 0


async def test_a_forget_stopped_after_its_commit_leaves_its_slack_threads_to_the_retention_job(
        migrated_url, tmp_path, monkeypatch):
    """The threads to delete were in the forget process's memory alone between its commit and Slack's answers: a
    forget killed then (a ^C, a deploy, Slack slow) left the gateway's copies of the person's words in Slack,
    and nothing named them. They are stored in the transaction that deletes their escalations."""
    async with _forgetting(migrated_url, tmp_path, monkeypatch) as (slack, sessions, client, config):
        gone = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        theirs = await _thread(client, sessions, gone, "4242")
        await forget_contact(sessions, channel="telegram", user="4242")  # the process dies here, before Slack
        assert slack.deleted == [] and await _count(sessions, PurgedOperatorThread) == 1
        await run_retention(sessions, load_settings(config), knowledge=None)
        assert sorted(slack.deleted) == sorted(theirs)
        assert await _count(sessions, PurgedOperatorThread) == 0


async def test_a_forget_whose_store_fails_after_slack_answered_prints_what_it_deleted(migrated_url, tmp_path, capsys,
                                                                                      monkeypatch):
    """Its attempt is recorded after Slack's answers (the rows of the threads gone dropped): a store that failed
    then (restarted, unreachable) ended the forget, committed minutes before, in a traceback, its counts and the
    threads Slack deleted unsaid. The rows stay as they were, and the retention job finds those threads gone."""
    async with _forgetting(migrated_url, tmp_path, monkeypatch) as (slack, sessions, client, config):
        gone = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        theirs = await _thread(client, sessions, gone, "4242")
        slack.delays["conversations.replies"] = 2.0
        forget = asyncio.ensure_future(asyncio.to_thread(main, ["forget", "--config", str(config), "--channel",
                                                                "telegram", "--user", "4242"]))
        for _ in range(600):  # Slack is being asked: the forget is committed
            if slack.delayed or forget.done():
                break
            await asyncio.sleep(0.05)
        rename = "ALTER TABLE {} RENAME TO {}"
        async with sessions() as session, session.begin():  # the store fails from here on, for that table
            await session.execute(text(rename.format("purged_operator_threads", "purged_operator_threads_away")))
        try:
            code = await asyncio.wait_for(forget, 60)
        finally:
            async with sessions() as session, session.begin():
                await session.execute(text(rename.format("purged_operator_threads_away", "purged_operator_threads")))
        assert code == 0 and sorted(slack.deleted) == sorted(theirs)
        assert capsys.readouterr().out.splitlines() == [
            "deleted 1 contact, 1 conversation, 3 messages, 1 escalation (recorded in data_deletions)",
            "deleted 1 Slack operator thread (the operators' own replies stay)"]
        assert await _count(sessions, PurgedOperatorThread) == 1
        await run_retention(sessions, load_settings(config), knowledge=None)  # gone in Slack: its row is dropped
        assert await _count(sessions, PurgedOperatorThread) == 0


async def test_forget_says_nothing_tries_again_a_thread_whose_row_another_attempt_dropped_meanwhile(
        migrated_url, tmp_path, capsys, monkeypatch):
    """While forget waited for Slack, the retention job made its last attempt at the thread (a thread stored before,
    tried 4 times) and dropped its row: forget printed that the retention job tries the thread again, up to 4
    times, though nothing ever did, and the person's words stayed in Slack unsaid."""
    async with _forgetting(migrated_url, tmp_path, monkeypatch) as (slack, sessions, client, config):
        gone = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        theirs = await _thread(client, sessions, gone, "4242")
        slack.fail("conversations.replies", error="missing_scope", times=2)  # the job's attempt, then forget's
        real = slack_purged.erase_operator_threads

        async def the_job_meanwhile(settings, threads):  # in the forget's process: its loop, its own engine
            monkeypatch.setattr(slack_purged, "erase_operator_threads", real)
            engine = create_engine(migrated_url)
            try:
                job = session_factory(engine)
                async with job() as session, session.begin():
                    await session.execute(update(PurgedOperatorThread).values(attempts=OPERATOR_THREAD_ATTEMPTS - 1))
                await erase_purged_threads(job, settings)
            finally:
                await engine.dispose()
            return await real(settings, threads)

        monkeypatch.setattr(slack_purged, "erase_operator_threads", the_job_meanwhile)
        code = await asyncio.to_thread(main, ["forget", "--config", str(config), "--channel", "telegram",
                                              "--user", "4242"])
        assert code == 1
        err = capsys.readouterr().err
        assert f"warning: Slack operator thread {theirs[0]} (bot acme, channel {OPERATORS}) was not deleted: " \
               "Slack answered missing_scope; another attempt at it (the retention job's, or another forget's) " \
               "ended meanwhile, having deleted it or given it up, so nothing tries it again: delete it in Slack " \
               "if it is still there" in err
        assert "tries it again on its next runs" not in err
        assert slack.deleted == [] and await _count(sessions, PurgedOperatorThread) == 0
