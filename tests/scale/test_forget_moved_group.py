"""A Telegram group upgraded to a supergroup (a new chat id) whose anonymous admins wrote as the group: the
group's identity moves with it, so `gateway forget` of it by its new id finds all it wrote, before the move too.
The updates are Telegram's, parsed by the adapter and stored by the inbox."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from channels.telegram import TelegramAdapter
from gateway.inbox import Inbox
from gateway.retention import forget_contact
from storage.models import Contact, Conversation, Message
from tests.channels.telegram_helpers import _request, _settings
from tests.scale.test_retention import _count, _purge_rig

OLD, NEW = -4001, -1004001
ANN = {"id": 367699112, "is_bot": False, "first_name": "Ann"}
ANONYMOUS_ADMIN = {"id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"}


def _in_group(update_id: int, chat: dict[str, Any], text: str, *, by: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A message in `chat` asking the bot (`/ask …`), from `by` (as the group itself: `sender_chat`)."""
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1700000000, "chat": chat, "from": by, "text": "/ask " + text,
        "entities": [{"type": "bot_command", "offset": 0, "length": 4}], **extra}}


async def _feed(inbox: Inbox, adapter: TelegramAdapter, body: dict[str, Any]) -> None:
    for message in adapter.parse(_request(body)).messages:
        await inbox.accept("acme", message)


async def test_forget_of_a_moved_group_finds_what_its_anonymous_admins_wrote_before_the_move(migrated_url):
    group = {"id": OLD, "type": "group", "title": "Shop"}
    supergroup = {"id": NEW, "type": "supergroup", "title": "Shop"}
    async with _purge_rig(migrated_url) as (_, sessions, _settings_):
        inbox, adapter = Inbox(sessions), TelegramAdapter("acme", _settings(), username="support_bot")
        await _feed(inbox, adapter, _in_group(1, group, "is the shop open on Sunday?", by=ANN))
        await _feed(inbox, adapter, _in_group(2, group, "pinned: opening hours", by=ANONYMOUS_ADMIN,
                                              sender_chat=group))
        # Telegram tells the upgrade in the old group, and in the new one.
        await _feed(inbox, adapter, {"update_id": 3, "message": {"message_id": 3, "date": 1700000000, "chat": group,
                                                                 "from": ANN, "migrate_to_chat_id": NEW}})
        await _feed(inbox, adapter, {"update_id": 4, "message": {"message_id": 1, "date": 1700000000,
                                                                 "chat": supergroup, "from": ANN,
                                                                 "migrate_from_chat_id": OLD}})
        await _feed(inbox, adapter, _in_group(5, supergroup, "pinned: new hours", by=ANONYMOUS_ADMIN,
                                              sender_chat=supergroup))
        async with sessions() as session:
            assert set((await session.execute(select(Conversation.chat))).scalars()) == {str(NEW)}
        report = await forget_contact(sessions, channel="telegram", user=str(NEW))
        assert (report.contacts, report.conversations, report.messages) == (1, 1, 2)
        async with sessions() as session:
            assert list((await session.execute(select(Message.text))).scalars()) == ["is the shop open on Sunday?"]
        assert await _count(sessions, Contact, Contact.external_id.in_([str(OLD), str(NEW)])) == 0
