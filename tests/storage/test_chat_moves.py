"""A chat that moved to a new id (a Telegram group upgraded to a supergroup): its conversations follow,
merged into one the new chat opened first, on both databases (storage/chat_moves.py)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender, member_thread, utcnow
from storage import repositories as repo
from storage.models import Contact, Conversation, Message, UnfinishedChatMove

OLD, NEW = "-4001", "-1004001"


def _said(external_id: str, chat: str, *, sender: str = "555", thread: str | None = None) -> InboundMessage:
    return InboundMessage(channel="telegram", external_id=external_id,
                          conversation=ConversationRef(channel="telegram", chat=chat,
                                                       thread=thread if thread is not None else member_thread(sender)),
                          sender=Sender(external_id=sender, display_name="Ann"), text=f"message {external_id}")


def _move(external_id: str) -> InboundMessage:
    return InboundMessage(channel="telegram", external_id=external_id, sender=Sender(external_id="555"), text="",
                          conversation=ConversationRef(channel="telegram", chat=OLD), moves_to=NEW)


async def _conversations(sessions) -> list[Conversation]:
    async with sessions() as session:
        return list((await session.execute(select(Conversation).order_by(Conversation.id))).scalars())


async def test_a_conversation_the_new_chat_opened_first_takes_the_old_ones_messages_and_hold(sessions):
    """A member's message in the supergroup stored before the notice of the upgrade opened a conversation
    at the new id: the move then failed on the unique key, or left the operator's hold behind."""
    inbox = Inbox(sessions)
    first = await inbox.accept("acme", _said("1", OLD))
    async with sessions() as session, session.begin():
        (await session.get(Conversation, first.conversation_id)).state = "operator"
    later = await inbox.accept("acme", _said("2", NEW))
    assert await inbox.accept("acme", _move("3")) is None
    await inbox.accept("acme", _move("3"))  # the other notice of the same upgrade: nothing left to move
    [kept] = await _conversations(sessions)
    assert (kept.id, kept.chat, kept.state) == (later.conversation_id, NEW, "operator")
    async with sessions() as session:
        stored = (await session.execute(select(Message).where(Message.conversation_id == kept.id)
                                        .order_by(Message.id))).scalars().all()
    assert [m.text for m in stored] == ["message 1", "message 2"]
    # The old group's message id is no message of the supergroup's: its answer names the member instead.
    assert "platform_message_id" not in stored[0].meta and stored[0].meta["moved_from_chat"] == OLD
    assert stored[1].meta["platform_message_id"] == "2"


async def _lease(sessions, *conversation_ids: int, until=None) -> None:
    async with sessions() as session, session.begin():
        for conversation_id in conversation_ids:
            conversation = await session.get(Conversation, conversation_id)
            conversation.lease_owner, conversation.lease_until = "worker-1", until


async def test_the_group_itself_as_a_sender_moves_too_and_a_busy_conversation_takes_the_new_one(sessions):
    """An anonymous admin writes as the group: their contact and thread carry the old chat id. A conversation
    a worker is answering in is not merged away under it: the new chat's conversation merges into it, and it
    takes the new id. It was skipped, to wait for another notice: held at each one, it stayed behind for good."""
    inbox = Inbox(sessions)
    admin = await inbox.accept("acme", _said("1", OLD, sender=OLD))
    member = await inbox.accept("acme", _said("2", OLD))
    opened = await inbox.accept("acme", _said("3", NEW))
    await _lease(sessions, member.conversation_id, until=utcnow() + timedelta(minutes=1))
    await inbox.accept("acme", _move("4"))
    chats = {c.id: (c.chat, c.thread) for c in await _conversations(sessions)}
    assert chats == {admin.conversation_id: (NEW, member_thread(NEW)), member.conversation_id: (NEW, member_thread("555"))}
    async with sessions() as session:
        assert (await session.get(Message, opened.message_id)).conversation_id == member.conversation_id
        assert (await session.execute(select(Contact.external_id).join(
            Conversation, Conversation.contact_id == Contact.id).where(
            Conversation.id == admin.conversation_id))).scalar_one() == NEW


async def test_two_conversations_both_held_are_merged_once_a_turn_ends(sessions):
    """Workers answer in the old conversation and in the new chat's: neither is merged away under its worker.
    The move is tried again before the next message is stored, as no other notice of it may come."""
    inbox = Inbox(sessions)
    old = await inbox.accept("acme", _said("1", OLD))
    new = await inbox.accept("acme", _said("2", NEW))
    await _lease(sessions, old.conversation_id, new.conversation_id, until=utcnow() + timedelta(minutes=1))
    await inbox.accept("acme", _move("3"))
    assert [c.chat for c in await _conversations(sessions)] == [OLD, NEW]
    await _lease(sessions, new.conversation_id)  # that turn is over; the old one is still being answered
    then = await inbox.accept("acme", _said("4", NEW))
    [kept] = await _conversations(sessions)
    assert (kept.id, kept.chat, then.conversation_id) == (old.conversation_id, NEW, old.conversation_id)
    assert not inbox._unfinished_moves


async def test_a_reply_queued_before_the_move_does_not_quote_the_old_group_s_message(sessions):
    """The question was answered just before the upgrade, its reply still queued (or waiting out a retry):
    the outbox sent it to the supergroup as a reply to the old group's message id, another member's there."""
    inbox = Inbox(sessions)
    asked = await inbox.accept("acme", _said("1", OLD))
    answered = await inbox.accept("acme", _said("2", OLD))
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, asked.conversation_id)
        for accepted in (asked, answered):
            (await session.get(Message, accepted.message_id)).status = "done"
        await repo.add_outbound(session, conversation=conversation, text="sent", reply_to_id=asked.message_id,
                                status="sent")
        await repo.add_outbound(session, conversation=conversation, text="queued", reply_to_id=answered.message_id)
    await inbox.accept("acme", _move("3"))
    async with sessions() as session:
        sent, queued = [await session.get(Message, accepted.message_id) for accepted in (asked, answered)]
    assert "platform_message_id" not in queued.meta and queued.meta["moved_from_chat"] == OLD
    assert sent.meta["platform_message_id"] == "1"  # its reply is out: the record keeps what it answered


async def _left_busy(sessions):
    """A move that found workers in both conversations of the pair, by a process gone since; the turns are over."""
    old = await Inbox(sessions).accept("acme", _said("1", OLD))
    new = await Inbox(sessions).accept("acme", _said("2", NEW))
    await _lease(sessions, old.conversation_id, new.conversation_id, until=utcnow() + timedelta(minutes=1))
    await Inbox(sessions).accept("acme", _move("3"))
    await _lease(sessions, old.conversation_id, new.conversation_id)
    return new.conversation_id


async def _finished(sessions, kept_id: int) -> None:
    [kept] = await _conversations(sessions)
    assert (kept.id, kept.chat) == (kept_id, NEW)  # the old one merged into it
    async with sessions() as session:
        assert (await session.execute(select(UnfinishedChatMove))).first() is None  # nothing left to finish


async def test_a_move_left_busy_is_finished_by_a_process_that_did_not_make_it(sessions):
    """Only the process that left the pair (both held by workers) knew to try the move again: after its
    restart, or with the next message stored by another replica, the two stayed apart for good, since
    Telegram does not tell the upgrade again."""
    kept_id = await _left_busy(sessions)
    await Inbox(sessions).finish_moves()
    await _finished(sessions, kept_id)


async def test_the_periodic_repairs_of_a_gateway_finish_the_moves_left_unfinished(migrated_url, tmp_path):
    from gateway.services import build_services
    from gateway.settings import load_settings
    from tests.conftest import write_config

    services = build_services(load_settings(write_config(tmp_path, database_url=migrated_url)), with_scheduler=False)
    kept_id = await _left_busy(services.sessions)
    await services.reminders.run_once()  # also run at start, then every 30 s
    await _finished(services.sessions, kept_id)
    await services.engine.dispose()


async def test_a_question_the_group_asked_as_itself_before_the_move_is_answered_as_the_moved_group(sessions):
    """The move renamed the group's contact and the `sender` column of what it wrote as itself, but left their
    `meta.sender` at the old id, which the turn reads: a question waiting across the move was answered as someone
    unknown at the old id (no contact: the tools authorized against the old chat id), not as the group."""
    inbox = Inbox(sessions)
    asked = await inbox.accept("acme", _said("1", OLD, sender=OLD))
    await inbox.accept("acme", _move("2"))
    async with sessions() as session:
        message = await session.get(Message, asked.message_id)
        assert (message.sender, message.meta["sender"]) == (NEW, NEW)
        conversation, contact, _ = await repo.conversation_and_sender(session, message)
        assert contact.id is not None and contact.id == conversation.contact_id and contact.external_id == NEW
