"""A group member's edit, through the real app, aiogram and the fake Bot API: a message ignored for want
of the bot's @mention, edited to add it, is the question asked now (`InboundMessage.new_if_never_stored`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway_channels.conftest import QUESTION, count_messages, messages_in_chat, settle, wait_until
from tests.gateway_channels.test_telegram_e2e import post, sent_to, update
from tests.gateway_channels.test_telegram_migration import started_env  # noqa: F401 - `env`, channels started (@mentions)

pytestmark = pytest.mark.asyncio(loop_scope="module")

GROUP = -1007010


def edited(update_id: int, text: str, *, chat: int = GROUP, **extra: Any) -> dict[str, Any]:
    message = update(update_id, chat, text, chat_type="supergroup", message_id=20, edit_date=1700000060, **extra)
    return {"update_id": update_id, "edited_message": message["message"]}


async def test_a_group_message_edited_to_mention_the_bot_is_answered_once(env):
    """The member forgot the @mention, and added it: the edit was taken for a typo fix of a message already
    answered, and ignored, so the question the member now put to the bot went unanswered."""
    client, services, fake = env
    await post(client, update(9701, GROUP, QUESTION, chat_type="supergroup", message_id=20))
    await post(client, edited(9702, QUESTION + " (edited)"))  # still not for the bot
    await settle(services=services)
    before = await count_messages(services, channel="telegram")
    assert sent_to(fake, GROUP) == []
    mention = [{"type": "mention", "offset": 0, "length": 12}]
    for update_id in (9703, 9703, 9704):  # a redelivery, then another edit: answered once all the same
        await post(client, edited(update_id, "@support_bot " + QUESTION, entities=mention))
    [answer] = await wait_until(lambda: sent_to(fake, GROUP), what="the answer to the edited message")
    assert answer.reply_to == 20 and "$" in answer.text
    await settle(services=services)
    assert len(sent_to(fake, GROUP)) == 1 and await count_messages(services, channel="telegram") == before + 2


async def test_a_group_question_redelivered_after_its_edit_was_stored_is_answered_once(env):
    """The original update's delivery failed, and the member's edit came first: stored as the question (its
    first version never stored), then Telegram's redelivery of the original was stored and answered as well,
    on the text the member had already changed."""
    client, services, fake = env
    chat = GROUP - 1
    mention = [{"type": "mention", "offset": 0, "length": 12}]
    await post(client, edited(9712, "@support_bot " + QUESTION, chat=chat, entities=mention))
    await post(client, update(9711, chat, "@support_bot How much?", chat_type="supergroup", message_id=20,
                              entities=mention))
    [answer] = await wait_until(lambda: sent_to(fake, chat), what="the answer to the edited message")
    assert answer.reply_to == 20 and "$" in answer.text
    await settle()
    stored = await messages_in_chat(services, channel="telegram", chat=str(chat))
    assert [(m.direction, m.text) for m in stored][:1] == [("in", QUESTION)] and len(stored) == 2
    assert len(sent_to(fake, chat)) == 1
