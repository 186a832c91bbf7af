"""`gateway forget` in group conversations: a group's conversation is every member's (its contact is only the
first writer), so the person's own messages go and the other members' stay, in every group of the channel."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from gateway.models import ConversationRef, InboundMessage, Sender
from gateway.retention import forget_contact
from storage import repositories as repo
from storage.models import Contact, Conversation, Message
from tests.scale.test_retention import _count, _purge_rig
from tests.storage.old_rows import old_message, store_old
from tests.worker_rig import until_waiting_for_a_lock


async def _says(sessions, *, who: str, chat: str, text: str, bot: str = "acme", channel: str = "telegram") -> int:
    """`who` writes `text` in `chat` and the bot answers them; the conversation's id."""
    async with sessions() as session, session.begin():
        stored = await repo.store_inbound(session, bot=bot, message=InboundMessage(
            channel=channel, external_id=f"{chat}-{who}-{text}", sender=Sender(external_id=who),
            conversation=ConversationRef(channel=channel, chat=chat), text=text))
        conversation = await session.get(Conversation, stored.conversation_id)
        await repo.add_outbound(session, conversation=conversation, text=f"about {text}", reply_to_id=stored.message_id)
    return stored.conversation_id


async def _texts(sessions, conversation: int) -> list[str]:
    async with sessions() as session:
        return list((await session.execute(select(Message.text).where(Message.conversation_id == conversation)
                                           .order_by(Message.id))).scalars())


async def test_forget_finds_a_members_messages_in_every_group_of_the_channel_and_keeps_the_others(migrated_url):
    # Messages written in a group someone else started were not linked to the person: `forget` left them all.
    async with _purge_rig(migrated_url) as (engine, sessions, _):
        first = await _says(sessions, who="ann", chat="-100a", text="hi all")
        await _says(sessions, who="bob", chat="-100a", text="my address is 1 Main St")
        await _says(sessions, who="ann", chat="-100a", text="thanks")
        second = await _says(sessions, who="cat", chat="-100b", text="hello", bot="shop")  # another bot's group
        await _says(sessions, who="bob", chat="-100b", text="my phone is 555", bot="shop")
        elsewhere = await _says(sessions, who="bob", chat="bob", text="bob on another channel", channel="whatsapp")
        report = await forget_contact(sessions, channel="telegram", user="bob")
        # Their messages, and the replies to them; no conversation was theirs alone.
        assert (report.messages, report.conversations, report.contacts) == (4, 0, 1)
        assert await _texts(sessions, first) == ["hi all", "about hi all", "thanks", "about thanks"]
        assert await _texts(sessions, second) == ["hello", "about hello"]
        assert await _texts(sessions, elsewhere) == ["bob on another channel", "about bob on another channel"]
        assert await _count(sessions, Contact, Contact.channel == "telegram", Contact.external_id == "bob") == 0


async def test_forget_of_the_member_who_started_a_group_keeps_the_others_messages_in_it(migrated_url):
    # The group's conversation has its first writer for contact: forgetting them deleted it whole, with every
    # other member's messages.
    async with _purge_rig(migrated_url) as (engine, sessions, _):
        group = await _says(sessions, who="ann", chat="-100a", text="hi all")
        await _says(sessions, who="bob", chat="-100a", text="me too")
        await _says(sessions, who="ann", chat="-100a", text="bye")
        private = await _says(sessions, who="ann", chat="ann", text="just us")
        alone = await _says(sessions, who="ann", chat="-100quiet", text="anyone?")  # a group only she wrote in
        report = await forget_contact(sessions, channel="telegram", user="ann")
        assert (report.messages, report.conversations, report.contacts) == (8, 2, 1)
        assert await _texts(sessions, group) == ["me too", "about me too"]
        async with sessions() as session:
            kept = await session.get(Conversation, group)
            assert kept is not None and kept.contact_id is None
        assert await _count(sessions, Conversation, Conversation.id.in_([private, alone])) == 0
        assert await _count(sessions, Contact, Contact.external_id == "ann") == 0
        assert await _count(sessions, Contact, Contact.external_id == "bob") == 1


async def test_a_members_message_stored_in_a_group_while_its_only_writer_is_forgotten_is_kept(migrated_url):
    # Bob writes in a group only Ann had written in, as Ann is forgotten: `forget` read the group as hers alone
    # past Bob's uncommitted message, then deleted it whole, Bob's message with it (after his webhook had been
    # acknowledged). (PostgreSQL: SQLite's one writer makes `forget` wait for the store before it reads.)
    async with _purge_rig(migrated_url) as (engine, sessions, _):
        group = await _says(sessions, who="ann", chat="-100a", text="hi all")
        storing = sessions()
        await storing.begin()
        stored = await repo.store_inbound(storing, bot="acme", message=InboundMessage(
            channel="telegram", external_id="bob-late", sender=Sender(external_id="bob"),
            conversation=ConversationRef(channel="telegram", chat="-100a"), text="me too"))
        forget = asyncio.create_task(forget_contact(sessions, channel="telegram", user="ann"))
        await until_waiting_for_a_lock(engine)  # `forget` has read Ann's conversations and waits on the store's lock
        await storing.commit()
        await storing.close()
        report = await asyncio.wait_for(forget, 30)
        assert stored.conversation_id == group
        assert (report.conversations, report.messages) == (0, 2)
        assert await _texts(sessions, group) == ["me too"]


async def test_forget_knows_the_sender_of_a_message_stored_by_a_gateway_older_than_0016(migrated_url):
    # A gateway of before 0016 runs on its schema (a rollback, a replica not yet replaced) and stores messages
    # with their sender in `meta` alone: forgetting another member took such a message of Bob's for hers and
    # deleted the group whole, and forgetting Bob left it.
    async with _purge_rig(migrated_url) as (engine, sessions, _):
        await store_old(engine, [old_message("bob-old", {"sender": "bob"})])  # Telegram group -100group
        group = await _says(sessions, who="ann", chat="-100group", text="hi all")
        await forget_contact(sessions, channel="telegram", user="ann")
        assert await _texts(sessions, group) == ["hi"]
        report = await forget_contact(sessions, channel="telegram", user="bob")
        assert (report.conversations, report.messages) == (1, 1)


async def test_a_turn_of_a_member_stored_as_they_are_forgotten_leaves_nothing_of_theirs_in_the_group(migrated_url):
    # A turn's store (`MessageHandler._finish`) holds the group's conversation and the member's message, and adds
    # the reply and an edit that came meanwhile: `forget` looked for their messages and the replies before that
    # store committed, deleted only the message it waited for, and the edit (their words) and the reply stayed.
    async with _purge_rig(migrated_url) as (engine, sessions, _):
        group = await _says(sessions, who="ann", chat="-100a", text="hi all")
        async with sessions() as session, session.begin():
            stored = await repo.store_inbound(session, bot="acme", message=InboundMessage(
                channel="telegram", external_id="bob-1", sender=Sender(external_id="bob"),
                conversation=ConversationRef(channel="telegram", chat="-100a"), text="my card is 4242"))
        finishing = sessions()
        await finishing.begin()
        conversation = await finishing.get(Conversation, group, with_for_update={"key_share": True})
        message = await finishing.get(Message, stored.message_id, with_for_update=True)
        forget = asyncio.create_task(forget_contact(sessions, channel="telegram", user="bob"))
        await until_waiting_for_a_lock(engine)  # `forget` has begun and waits on the turn's locks
        await repo.add_outbound(finishing, conversation=conversation, text="noted, bob", reply_to_id=message.id)
        await repo.add_edit_to_answer(finishing, of=message, text="my card is 4343")
        message.status = "done"
        await finishing.commit()
        await finishing.close()
        report = await asyncio.wait_for(forget, 30)
        assert await _texts(sessions, group) == ["hi all", "about hi all"]
        assert report.messages == 3
