"""The durable inbox: stored once per delivery, on both databases, even under concurrent retries."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from sqlalchemy import func, select, update

from channels.telegram import TelegramAdapter
from gateway.inbox import Inbox
from gateway.models import Attachment, ConversationRef, InboundMessage, Sender, utcnow
from storage import repositories as repo
from storage.models import Contact, Conversation, Message
from tests.channels.telegram_helpers import _request, _settings, _update
from tests.statement_log import StatementLog


def _message(external_id: str, *, chat: str = "c1", text: str = "hello", channel: str = "telegram") -> InboundMessage:
    return InboundMessage(channel=channel, external_id=external_id,
                          conversation=ConversationRef(channel=channel, chat=chat),
                          sender=Sender(external_id=f"user-{chat}", display_name="Ada"), text=text,
                          attachments=(Attachment(kind="image", file_id="F1", caption="pic"),))


async def _count(sessions, model, *where) -> int:
    async with sessions() as session:
        return (await session.execute(select(func.count()).select_from(model).where(*where))).scalar_one()


async def test_inbox_duplicate_delivery_is_stored_once(sessions):
    woken: list[int] = []
    inbox = Inbox(sessions, on_stored=woken.append)
    first = await inbox.accept("acme", _message("update-1"))
    again = await inbox.accept("acme", _message("update-1"))
    assert not first.duplicate and again.duplicate
    assert again.message_id == first.message_id
    assert woken == [first.conversation_id]  # a duplicate never wakes the worker
    assert await _count(sessions, Message) == 1
    async with sessions() as session:
        stored = await session.get(Message, first.message_id)
    assert stored.attachments == [{"kind": "image", "file_id": "F1", "caption": "pic"}]


async def test_inbox_same_id_for_another_bot_is_a_new_message(sessions):
    inbox = Inbox(sessions)
    a = await inbox.accept("acme", _message("1"))
    b = await inbox.accept("other", _message("1"))
    assert not b.duplicate and a.message_id != b.message_id


async def test_inbox_concurrent_retries_store_one_row_and_one_conversation(sessions):
    inbox = Inbox(sessions)
    results = await asyncio.gather(*[inbox.accept("acme", _message("update-7", chat="new-chat")) for _ in range(8)],
                                   return_exceptions=True)
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == []
    assert sum(not r.duplicate for r in results) == 1
    assert await _count(sessions, Message) == 1
    assert await _count(sessions, Conversation) == 1
    assert await _count(sessions, Contact) == 1


async def test_inbox_existing_conversation_only_message_is_stored_only_into_an_existing_conversation(sessions):
    inbox = Inbox(sessions)
    ref = ConversationRef(channel="slack", workspace="T1", chat="C13", thread="4.0")

    def message(external_id: str, *, only: bool, thread: str = "4.0") -> InboundMessage:
        return InboundMessage(channel="slack", external_id=external_id, conversation=replace(ref, thread=thread),
                              sender=Sender(external_id="U111"), text="and how many devices?",
                              existing_conversation_only=only)

    assert await inbox.accept("acme", message("Ev1", only=True)) is None  # no conversation in that thread yet
    assert await _count(sessions, Conversation) == 0 and await _count(sessions, Message) == 0
    asked = await inbox.accept("acme", message("Ev2", only=False))  # the bot was asked there
    follow_up = await inbox.accept("acme", message("Ev3", only=True))
    assert follow_up is not None and follow_up.conversation_id == asked.conversation_id
    assert await inbox.accept("acme", message("Ev4", only=True, thread="9.0")) is None  # another thread
    assert await inbox.accept("other", message("Ev5", only=True)) is None  # another bot's
    assert await _count(sessions, Message) == 2


async def test_inbox_revision_changes_only_a_waiting_message_of_its_chat(sessions):
    """An edit names the platform's message id (`platform_message_id`), which is unique per chat only."""
    inbox = Inbox(sessions)
    here = await inbox.accept("acme", _message("u1", chat="c1", text="teh price?"))
    there = await inbox.accept("acme", _message("u2", chat="c2", text="teh price?"))
    edit = replace(_message("u9", chat="c1", text="the price?"), revises="u1")
    assert await inbox.accept("acme", edit) is None
    assert await inbox.accept("acme", replace(edit, conversation=ConversationRef(channel="telegram", chat="c2"),
                                              revises="u1")) is None  # no message u1 in c2
    gone = replace(_message("u8", chat="c2"), revises="u2", deleted=True)
    assert await inbox.accept("acme", gone) is None
    async with sessions() as session:
        first, second = await session.get(Message, here.message_id), await session.get(Message, there.message_id)
    assert (first.text, first.status) == ("the price?", "pending")
    assert (second.text, second.status) == ("teh price?", "ignored")
    assert await _count(sessions, Message) == 2


async def test_inbox_revision_kept_once_answered_is_stored_as_a_message_of_its_thread(sessions):
    """An operator's edit in a Slack operator thread (`stored_if_answered`): applied while the message waits,
    a message of its own once it was answered (`meta.revises`, `meta.deleted`), for the relay to pass on;
    into the thread's conversation only, and once per delivery."""
    inbox = Inbox(sessions)
    thread = ConversationRef(channel="slack", chat="COPS", thread="5.5")
    said = replace(_message("Ev1", text="refund is 10", channel="slack"), conversation=thread, attachments=())
    first = await inbox.accept("acme", said)
    edit = replace(said, external_id="Ev2", text="refund is 11", revises="Ev1", stored_if_answered=True,
                   existing_conversation_only=True)
    assert await inbox.accept("acme", edit) is None  # still waiting: its text changes, nothing is stored
    async with sessions() as session:
        await session.execute(update(Message).where(Message.id == first.message_id).values(status="done"))
        await session.commit()
    kept = await inbox.accept("acme", replace(edit, external_id="Ev3", text="refund is 12"))
    again = await inbox.accept("acme", replace(edit, external_id="Ev3", text="refund is 12"))
    gone = await inbox.accept("acme", replace(edit, external_id="Ev4", text="", deleted=True))
    elsewhere = await inbox.accept("acme", replace(edit, external_id="Ev5", conversation=replace(thread, thread="7.7")))
    assert kept.conversation_id == first.conversation_id and again.duplicate and elsewhere is None
    async with sessions() as session:
        original, edited, deleted = [await session.get(Message, i) for i in (first.message_id, kept.message_id,
                                                                              gone.message_id)]
    assert original.text == "refund is 11"
    assert (edited.text, edited.meta["revises"], edited.meta["deleted"]) == ("refund is 12", "Ev1", False)
    assert (deleted.meta["revises"], deleted.meta["deleted"], deleted.status) == ("Ev1", True, "pending")
    assert await _count(sessions, Message) == 3


async def test_a_retry_of_an_edit_applied_to_a_waiting_edit_of_the_message_is_not_stored_again(sessions):
    """An edit made while the operator's message was relayed is stored to pass on after it (`add_edit_to_answer`,
    with the message's platform id), and the next edit is applied to that one while it waits: Slack's retry of
    it was looked for on the first message only, stored as a change of its own and passed on a second time."""
    inbox = Inbox(sessions)
    thread = ConversationRef(channel="slack", chat="COPS", thread="5.5")
    said = replace(_message("Ev1", text="refund is 10", channel="slack"), conversation=thread, attachments=())
    first = await inbox.accept("acme", said)
    edit = replace(said, external_id="Ev2", text="refund is 11", revises="Ev1", stored_if_answered=True,
                   existing_conversation_only=True)
    assert await inbox.accept("acme", edit) is None  # applied to the first while it waits
    async with sessions() as session, session.begin():
        original = await session.get(Message, first.message_id)
        original.status = "done"
        queued = (await repo.add_edit_to_answer(session, of=original, text="refund is 11")).id
    assert await inbox.accept("acme", replace(edit, external_id="Ev3", text="refund is 12")) is None
    async with sessions() as session, session.begin():
        await session.execute(update(Message).where(Message.id == queued).values(status="done"))
    for retried in ("Ev2", "Ev3"):
        assert await inbox.accept("acme", replace(edit, external_id=retried, text="refund is 12")) is None
    async with sessions() as session:
        assert (await session.get(Message, queued)).text == "refund is 12"
    assert await _count(sessions, Message) == 2


async def test_two_edits_of_a_message_never_stored_handled_at_once_are_stored_once(sessions):
    """A group message ignored for want of the @mention, edited twice to add it: each edit found it never
    stored (one transaction), then stored itself under its own update's id (another), and was answered."""
    inbox = Inbox(sessions)
    store = inbox._accept
    both_looked = asyncio.Barrier(2)

    async def after_both_looked(bot, message):
        if message.revises is None:  # the store of an edit found never stored: the other one has looked too
            await both_looked.wait()
        return await store(bot, message)

    inbox._accept = after_both_looked
    edits = [replace(_message(f"u{n}", chat="g1", text="@bot the price?"), revises="20", new_if_never_stored=True,
                     raw={"message_id": 20}) for n in (2, 3)]
    results = await asyncio.gather(*(inbox.accept("acme", edit) for edit in edits))
    assert sorted(accepted.duplicate for accepted in results) == [False, True]
    assert results[0].message_id == results[1].message_id and await _count(sessions, Message) == 1
    async with sessions() as session:
        assert (await session.get(Message, results[0].message_id)).meta["platform_message_id"] == "20"



def _parsed(update: dict) -> InboundMessage:
    """A Telegram update as its adapter parses it."""
    [message] = TelegramAdapter("acme", _settings(), username="support_bot").parse(_request(update)).messages
    return message


def _telegram_group_edit(update_id: int, text: str) -> InboundMessage:
    """Telegram's edit (update `update_id`) of group message 20, to `text` addressing the bot."""
    mention = [{"type": "mention", "offset": 0, "length": len("@support_bot")}]
    message = _update(text, update_id=update_id, chat_type="supergroup", message_id=20, edit_date=1700000060,
                      entities=mention)["message"]
    return _parsed({"update_id": update_id, "edited_message": message})


@pytest.mark.parametrize("stored_first", ["older", "newer"])
async def test_of_two_edits_of_a_message_never_stored_handled_at_once_the_newest_is_kept(sessions, stored_first):
    """The member edited their message twice, quickly, to ask the bot: both edits found it never stored, and the
    one whose store committed first was kept, the other taken for its duplicate; when that was the older edit,
    the question answered was the one the member had already changed."""
    inbox = Inbox(sessions)
    store = inbox._accept
    edits = {"older": _telegram_group_edit(9702, "@support_bot the price?"),
             "newer": _telegram_group_edit(9703, "@support_bot the price of the Plus plan?")}
    both_looked, first_stored = asyncio.Barrier(2), asyncio.Event()

    async def in_this_order(bot, message):
        if message.revises is not None:
            return await store(bot, message)
        await both_looked.wait()  # the store of an edit found never stored: the other one has looked too
        if message.text != edits[stored_first].text:
            await first_stored.wait()
        try:
            return await store(bot, message)
        finally:
            first_stored.set()

    inbox._accept = in_this_order
    results = await asyncio.gather(*(inbox.accept("acme", edit) for edit in edits.values()))
    assert sorted(accepted.duplicate for accepted in results) == [False, True]
    assert await _count(sessions, Message) == 1
    async with sessions() as session:
        stored = await session.get(Message, results[0].message_id)
    assert (stored.text, stored.status) == ("the price of the Plus plan?", "pending")


async def test_an_edit_after_telegram_restarted_its_update_ids_is_still_the_newer_one(sessions):
    """Edits were ordered by update id alone, which Telegram restarts at random after a week without updates:
    the customer's later edit, under a lower id, was taken for an older one and ignored. An edit's `edit_date`
    comes first, its update id after (two edits in one second): the later edit stands, whatever its id, and an
    edit older than the one applied, handled late under a higher id, does not undo it."""
    inbox = Inbox(sessions)

    def edit(update_id: int, text: str, edit_date: int) -> InboundMessage:
        return _parsed({"update_id": update_id, "edited_message": _update(text, edit_date=edit_date)["message"]})

    stored = await inbox.accept("acme", _parsed(_update("teh price?", update_id=880001)))
    assert await inbox.accept("acme", edit(880002, "the price?", 1700000060)) is None
    assert await inbox.accept("acme", edit(17, "the price of the Plus plan?", 1700000120)) is None  # ids restarted
    assert await inbox.accept("acme", edit(880003, "the prize?", 1700000090)) is None  # older, handled late
    async with sessions() as session:
        message = await session.get(Message, stored.message_id)
    assert (message.text, message.status) == ("the price of the Plus plan?", "pending")


async def test_an_edit_of_a_message_whose_revision_was_stored_as_an_update_id_alone_is_compared_by_it(sessions):
    """A message stored before edits were ordered by date holds the update id alone (`meta.revision`)."""
    inbox = Inbox(sessions)
    stored = await inbox.accept("acme", _parsed(_update("teh price?", update_id=880001)))
    async with sessions() as session, session.begin():
        message = await session.get(Message, stored.message_id)
        message.meta = {**message.meta, "revision": 880005}
    texts = []
    for update_id, text in ((880004, "older"), (880006, "the price?")):
        message = _update(text, edit_date=1700000060)["message"]
        assert await inbox.accept("acme", _parsed({"update_id": update_id, "edited_message": message})) is None
        async with sessions() as session:
            message = await session.get(Message, stored.message_id)
        texts.append((message.text, message.meta["revision"]))
    assert texts == [("teh price?", 880005), ("the price?", [1700000060, 880006])]


@pytest.mark.parametrize("channel", ["telegram", "whatsapp"])
async def test_inbox_stores_a_message_of_a_known_conversation_in_three_statements(engine, sessions, channel):
    """The contact is upserted and read back in one statement, the conversation read before any insert,
    and the message's id returned by its insert: seven statements on every message before. (WhatsApp's
    look for replies held behind a template ran on every message too: only a marked conversation has any.)"""
    inbox = Inbox(sessions)
    first = await inbox.accept("acme", _message("update-1", channel=channel))
    log = StatementLog(engine)
    second = await inbox.accept("acme", replace(_message("update-2", channel=channel),
                                                sender=Sender("user-c1", display_name="")))
    # (On PostgreSQL a `SELECT pg_notify(…)` wakes the other processes' workers too: it names no table.)
    assert [s for s in log.statements if " " in s] == ["INSERT contacts", "SELECT conversations", "INSERT messages"]
    again = await inbox.accept("acme", _message("update-2", channel=channel))
    assert second.conversation_id == first.conversation_id and (again.message_id, again.duplicate) == (second.message_id, True)
    async with sessions() as session:
        contact = (await session.execute(select(Contact))).scalar_one()
        seen = (await session.execute(select(Message.created_at).where(Message.id == second.message_id))).scalar_one()
    assert contact.display_name == "Ada" and contact.last_inbound_at >= seen  # a nameless message keeps the name


async def test_inbox_looks_for_replies_held_behind_a_template_only_while_the_conversation_is_marked(engine, sessions):
    """The outbox marks a conversation when a WhatsApp template went out in place of a reply; the next message
    looks for such replies once and clears the mark, unless another template went out meanwhile."""
    inbox = Inbox(sessions)
    first = await inbox.accept("acme", _message("wa-1", channel="whatsapp"))
    async with sessions() as session, session.begin():
        await session.execute(update(Conversation).where(Conversation.id == first.conversation_id)
                              .values(held_template_id=first.message_id))
    log = StatementLog(engine)
    await inbox.accept("acme", _message("wa-2", channel="whatsapp"))
    assert "SELECT messages" in log.statements and "UPDATE conversations" in log.statements
    log.clear()
    await inbox.accept("acme", _message("wa-3", channel="whatsapp"))
    assert [s for s in log.statements if " " in s] == ["INSERT contacts", "SELECT conversations", "INSERT messages"]


async def test_a_private_message_resent_after_its_edit_was_stored_is_its_duplicate(sessions):
    """A private chat's message whose delivery failed, edited meanwhile: the edit came first and was dropped, and
    Telegram's resend of the original was stored and answered on the replaced text. The edit is the question now
    (its first version never stored), the resend its duplicate, and a later edit is applied to it while it waits."""
    inbox = Inbox(sessions)
    date = int(utcnow().timestamp()) - 60

    def edit(update_id: int, text: str) -> InboundMessage:
        message = _update(text, date=date, edit_date=date + update_id % 10)["message"]
        return _parsed({"update_id": update_id, "edited_message": message})

    stored = await inbox.accept("acme", edit(880002, "the price?"))
    resent = await inbox.accept("acme", _parsed(_update("teh price?", update_id=880001, date=date)))
    assert not stored.duplicate and resent.duplicate and resent.message_id == stored.message_id
    assert await inbox.accept("acme", edit(880003, "the price of the Plus plan?")) is None
    async with sessions() as session:
        [message] = (await session.execute(select(Message))).scalars().all()
    assert (message.text, message.status) == ("the price of the Plus plan?", "pending")
    assert message.external_id == "edit-of:367699112:42"  # the private chat's, and its message's id


async def test_a_first_version_stored_between_its_edits_check_and_store_is_the_edits_duplicate(sessions):
    """`Inbox._revise` looks for the message an edit revises in one transaction and stores the edit as the question
    (under `edit-of:…`) in another: the platform's retry of the first version stored between the two was answered,
    and so was the edit, on the text the customer replaced and on the new one. The edit's store now finds it."""
    inbox = Inbox(sessions)
    date = int(utcnow().timestamp()) - 60
    edit = _parsed({"update_id": 880012, "edited_message": _update("the price?", date=date, edit_date=date + 2)["message"]})
    first = await inbox.accept("acme", _parsed(_update("teh price?", update_id=880011, date=date)))
    # What `_revise` stores once it found the message never stored: the retry above came in between.
    as_question = replace(edit, revises=None, new_if_never_stored=False, external_id="edit-of:367699112:42")
    late = await inbox.accept("acme", as_question)
    assert late.duplicate and late.message_id == first.message_id
    async with sessions() as session:
        assert (await session.execute(select(func.count()).select_from(Message))).scalar_one() == 1
