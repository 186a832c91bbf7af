"""A bot removed from a chat (Telegram's `my_chat_member`) is remembered in the store, so every replica, and a
process started after the removal, fails replies there at once rather than send each for a 403
(storage/removed_chats.py), on both databases."""

from __future__ import annotations

from sqlalchemy import select

from channels.telegram_updates import UpdateParser
from gateway.inbox import Inbox
from gateway.models import utcnow
from gateway.retention import forget_contact
from storage.engine import create_engine, session_factory
from storage.models import Message, RemovedChat
from storage.removed_chats import mark_removed
from tests.gateway_channels.test_telegram_e2e import membership
from tests.reliability.test_send_breaker import TOKEN, _reply, _telegram_outbox

GROUP = "-1001020"


async def _heard(sessions, update_id: int, *, old: str, new: str, parser: UpdateParser | None = None) -> None:
    """The bot's membership change, as the replica Telegram sent it to (`parser`'s) parses and stores it."""
    parser = parser or UpdateParser(bot_id=int(TOKEN.split(":")[0]), bot_name="acme")
    [notice] = parser.parse(membership(update_id, int(GROUP), old, new)).messages
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
