"""A bot removed from a chat (Telegram's `my_chat_member`) is remembered in the store, so every replica, and a
process started after the removal, fails replies there at once rather than send each for a 403
(storage/removed_chats.py), on both databases."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import select

from channels.telegram_updates import UpdateParser
from gateway.delivery.streaming import EditStreamer
from gateway.inbox import Inbox
from gateway.models import ConversationRef, utcnow
from gateway.retention import forget_contact
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Message, RemovedChat
from storage.removed_chats import mark_removed
from tests.gateway_channels.test_telegram_e2e import membership
from tests.reliability.test_send_breaker import TOKEN, _reply, _telegram_outbox

GROUP = "-1001020"


async def _heard(sessions, update_id: int, *, old: str, new: str, parser: UpdateParser | None = None,
                 now: bool = True) -> None:
    """The bot's membership change, as the replica Telegram sent it to (`parser`'s) parses and stores it:
    dated now, after the questions stored before it, or with `now=False` at its fixture's date, before them."""
    parser = parser or UpdateParser(bot_id=int(TOKEN.split(":")[0]), bot_name="acme")
    change = membership(update_id, int(GROUP), old, new)
    if now:
        change["my_chat_member"]["date"] = int(time.time()) + 1
    [notice] = parser.parse(change).messages
    assert await Inbox(sessions).accept("acme", notice) is None  # not a message to answer


async def test_a_removal_heard_by_one_replica_fails_the_replies_of_another_at_once_until_added_back(migrated_url):
    """The outbox's adapter never saw the update (another replica, or this one restarted): it sent the reply
    and collected a 403, for every reply to that group."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        reply_id = await _reply(sessions, "acme", GROUP, 0)
        await _heard(sessions, 1, old="member", new="kicked")
        assert await outbox.deliver(reply_id) == "failed"
        async with sessions() as session:
            failed = await session.get(Message, reply_id)
        assert failed.attempts == 1 and "recipient unreachable" in failed.error and "removed" in failed.error
        assert telegram.calls("sendMessage") == []  # refused here, not by Telegram
        await _heard(sessions, 2, old="left", new="member")
        again = await _reply(sessions, "acme", GROUP, 1)
        assert await outbox.deliver(again) == "sent"
        assert len(telegram.calls("sendMessage")) == 1


async def test_a_send_refused_as_the_bot_was_kicked_stores_the_removal_for_every_replica(migrated_url):
    """`my_chat_member` missed (an update dropped): Telegram's 403 "bot was kicked" says the same, yet each later
    reply there went out for a 403 of its own. The outbox stores it as the notice would be."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        first, later = await _reply(sessions, "acme", GROUP, 0), await _reply(sessions, "acme", GROUP, 1)
        telegram.fail_next("sendMessage", status=403, description="Forbidden: bot was kicked from the supergroup chat")
        assert await outbox.deliver(first) == "failed"
        async with sessions() as session:
            assert (await session.execute(select(RemovedChat.chat))).scalars().all() == [GROUP]
        assert await outbox.deliver(later) == "failed"
        assert len(telegram.calls("sendMessage")) == 1  # the later one was refused here
        telegram.fail_next("sendMessage", status=403, description="Forbidden: bot can't initiate conversation with a user")
        assert await outbox.deliver(await _reply(sessions, "acme", "4242", 0)) == "failed"
        async with sessions() as session:  # a refusal of another kind marks nothing
            assert (await session.execute(select(RemovedChat.chat))).scalars().all() == [GROUP]


async def test_a_streamed_reply_whose_final_edit_is_refused_as_the_bot_was_blocked_stores_the_removal(migrated_url):
    """The person blocked the bot while its answer streamed: the final edit into place met the 403, which said
    only "unreachable", so nothing was stored and each later reply there went out for a 403 of its own."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        first, later = await _reply(sessions, "acme", "4242", 0), await _reply(sessions, "acme", "4242", 1)
        adapter = outbox._adapters[("acme", "telegram")]
        streamer = EditStreamer(adapter, ConversationRef(channel="telegram", chat="4242"), min_interval=0)
        await streamer.feed("Plus costs")
        async with asyncio.timeout(10):
            while not streamer.started:  # shown to the customer, to be edited into the reply
                await asyncio.sleep(0.01)
        telegram.fail_next("editMessageText", status=403, description="Forbidden: bot was blocked by the user")
        assert await outbox.deliver(first, via=streamer.finish) == "failed"
        async with sessions() as session:
            assert (await session.execute(select(RemovedChat.chat))).scalars().all() == ["4242"]
        assert await outbox.deliver(later) == "failed"
        assert len(telegram.calls("sendMessage")) == 1  # the streamed one: the later reply was refused here


async def test_a_return_heard_by_another_replica_lets_the_replica_that_heard_the_removal_send_again(migrated_url):
    """Each process kept the removals it heard in memory: the bot added back, a replica that had heard the
    removal but not the return refused every reply to that group until it restarted."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        this_replica = outbox._adapters[("acme", "telegram")].parser
        await _heard(sessions, 1, old="member", new="kicked", parser=this_replica)
        await _heard(sessions, 2, old="left", new="member")  # told to another replica
        reply_id = await _reply(sessions, "acme", GROUP, 0)
        assert await outbox.deliver(reply_id) == "sent"
        assert len(telegram.calls("sendMessage")) == 1


async def test_a_question_asked_in_the_group_after_the_removal_is_answered_and_ends_the_mark(migrated_url):
    """The bot's return was never heard (an update dropped, a webhook set without `my_chat_member`), yet a
    member asked it a question there, which only a member bot receives: every reply to the group was refused
    for good, where a restart used to forget the removal."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        await _heard(sessions, 1, old="member", new="kicked", now=False)  # dated before the question
        answer_id = await _reply(sessions, "acme", GROUP, 0)
        assert await outbox.deliver(answer_id) == "sent"
        async with sessions() as session:
            assert (await session.execute(select(RemovedChat))).first() is None
            conversation = (await session.get(Message, answer_id)).conversation_id
        async with sessions() as session, session.begin():  # an operator's reply, which answers no question
            operator_reply = (await repo.add_outbound(session, conversation=await session.get(Conversation, conversation),
                                                      text="A person here.", author="operator")).id
        assert await outbox.deliver(operator_reply) == "sent"


async def test_forgetting_a_person_deletes_the_mark_of_their_private_chat_that_blocked_the_bot(migrated_url):
    """A private chat's id is the person's own Telegram id: `gateway forget` left it in `removed_chats`."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        for chat in ("5550001", GROUP):
            async with sessions() as session, session.begin():
                await mark_removed(session, bot="acme", channel="telegram", chat=chat, removed=True, at=utcnow())
        await forget_contact(sessions, channel="telegram", user="5550001")
        async with sessions() as session:
            assert list((await session.execute(select(RemovedChat.chat))).scalars()) == [GROUP]
    finally:
        await engine.dispose()


async def test_retention_deletes_the_mark_of_a_chat_whose_conversations_it_purged(migrated_url):
    """A person who blocked the bot: retention purged their conversation and contact, and `removed_chats` kept
    their private chat's id (personal data) for good."""
    from datetime import timedelta

    from sqlalchemy import update

    from gateway.retention import purge_expired
    from gateway.settings import Settings
    from tests.scale.test_retention import _store

    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        old = await _store(sessions, bot="acme", channel="telegram", user="5550001", chat="5550001")
        await _store(sessions, bot="acme", channel="telegram", user="5550002", chat="5550002")
        long_ago = utcnow() - timedelta(days=45)
        async with sessions() as session, session.begin():
            await session.execute(update(Conversation).where(Conversation.id == old).values(created_at=long_ago))
            await session.execute(update(Message).where(Message.conversation_id == old).values(created_at=long_ago))
            for chat in ("5550001", "5550002"):
                await mark_removed(session, bot="acme", channel="telegram", chat=chat, removed=True, at=long_ago)
        report = await purge_expired(sessions, Settings(database_url=migrated_url, bots=[{"name": "acme", "retention_days": 30}]))
        assert report.conversations == 1
        async with sessions() as session:  # the other chat still has its conversation: its mark stays
            assert list((await session.execute(select(RemovedChat.chat))).scalars()) == ["5550002"]
    finally:
        await engine.dispose()


async def test_a_question_asked_while_a_refused_send_was_under_way_is_answered(migrated_url):
    """The refusal was dated when its outcome was recorded (after the adapter's in-place retries, or a database
    away meanwhile), not when the send began: a question the group asked in between, so with the bot back in it,
    had its answer refused as if asked before the removal, and the member was never answered."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        stale = await _reply(sessions, "acme", GROUP, 0)
        adapter = outbox._adapters[("acme", "telegram")]
        send, asked = adapter.send, []

        async def asked_meanwhile(message):
            asked.append(await _reply(sessions, "acme", GROUP, 1))  # the bot added back, and asked, during the send
            return await send(message)

        adapter.send = asked_meanwhile
        telegram.fail_next("sendMessage", status=403, description="Forbidden: bot was kicked from the supergroup chat")
        assert await outbox.deliver(stale) == "failed"
        adapter.send = send
        assert await outbox.deliver(asked[0]) == "sent"


async def test_a_reply_refused_here_neither_ends_a_pause_of_its_platform_nor_holds_its_probe(migrated_url):
    """A channel paused as its platform was down: the reply tried after the pause (the probe) went to a chat the
    bot was removed from, was refused without a call, and was taken for the platform answering. The pause
    ended, and every reply waiting went to a platform no one had asked."""
    from gateway.delivery.send_breaker import FAILURES_TO_PAUSE, FIRST_PAUSE_S, SendBreaker
    from tests.reliability.test_send_breaker import Clock

    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        clock = Clock()
        outbox._breaker = breaker = SendBreaker(clock=clock)
        for _ in range(FAILURES_TO_PAUSE):
            breaker.failed("acme", "telegram", error="timeout")
        clock.now += FIRST_PAUSE_S
        refused = await _reply(sessions, "acme", GROUP, 0)
        async with sessions() as session, session.begin():
            await mark_removed(session, bot="acme", channel="telegram", chat=GROUP, removed=True, at=utcnow())
        assert await outbox.deliver(refused) == "failed" and telegram.calls("sendMessage") == []
        assert breaker.paused_until("acme", "telegram") is None  # the next reply is the probe, at once
        assert breaker.paused_until("acme", "telegram") is not None  # and the others wait for it


async def test_a_removal_told_again_by_a_refused_send_dates_the_mark_anew(migrated_url):
    """The mark kept its first removal's date: the bot back unheard, questions asked, then removed again, each
    reply to those questions was sent for a 403 of its own, since each was asked after the mark's date."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        await _heard(sessions, 1, old="member", new="kicked", now=False)  # dated before the questions
        first, second = await _reply(sessions, "acme", GROUP, 0), await _reply(sessions, "acme", GROUP, 1)
        telegram.fail_next("sendMessage", status=403, description="Forbidden: bot was kicked from the supergroup chat")
        assert await outbox.deliver(first) == "failed"
        assert await outbox.deliver(second) == "failed"
        assert len(telegram.calls("sendMessage")) == 1  # the second was refused here


async def test_a_removal_marked_while_a_reply_went_out_outlives_that_reply(migrated_url):
    """A reply to a question asked after the mark ends the mark as it goes out (the bot is back). A removal
    marked while it was being sent (another replica's send refused with a 403) was deleted with it: the reply
    deleted whatever mark the chat had, and each later reply there went out for a 403 of its own."""
    async with _telegram_outbox(migrated_url) as (sessions, telegram, outbox):
        await _heard(sessions, 1, old="member", new="kicked", now=False)  # dated before the questions
        answer, later = await _reply(sessions, "acme", GROUP, 0), await _reply(sessions, "acme", GROUP, 1)
        adapter = outbox._adapters[("acme", "telegram")]
        send = adapter.send

        async def removed_meanwhile(message):
            sent = await send(message)
            async with sessions() as session, session.begin():  # told to another replica by its refused send
                await mark_removed(session, bot="acme", channel="telegram", chat=GROUP, removed=True, at=utcnow())
            return sent

        adapter.send = removed_meanwhile
        assert await outbox.deliver(answer) == "sent"
        adapter.send = send
        async with sessions() as session:
            assert (await session.execute(select(RemovedChat.chat))).scalars().all() == [GROUP]
        assert await outbox.deliver(later) == "failed"  # asked before the new removal: refused here
        assert len(telegram.calls("sendMessage")) == 1
