"""Telegram: a `/command@name` read before getMe told the bot its own username.

Whether `@name` is this bot cannot be told then. It was ignored ("addressed to a bot (our username is not known
yet)"), and the webhook answered 200 (polling moved its offset past it): Telegram never sent it again, and the
member's `/ask@support_bot` was lost for good. It is now read again once the username is known.

So is a group message with an `@name` mention entity: read then, `@support_bot hi` was taken for a message to
someone else (`only_while_held`) and, no operator talking there, never answered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import structlog

from channels.telegram import TelegramAdapter
from gateway.models import InboundMessage
from tests.channels.telegram_helpers import TOKEN, _request, _settings, _update, fake_fixture  # noqa: F401 - `fake`
from tests.fakes.telegram_api import FakeTelegramAPI

ASK = {"type": "bot_command", "offset": 0, "length": 16}
MENTION = {"type": "mention", "offset": 0, "length": 12}
ASK_BARE = {"type": "bot_command", "offset": 0, "length": 4}


@pytest.fixture(name="unnamed")
async def unnamed_fixture(fake: FakeTelegramAPI) -> AsyncIterator[TelegramAdapter]:
    """A webhook adapter whose getMe failed: it does not know its own username yet (retried only in a minute)."""
    fake.fail_next("getMe", status=502, times=1)
    tg = TelegramAdapter("demo", _settings(fake.base_url), identity_retry_s=60)
    await tg.start(lambda m: asyncio.sleep(0))
    yield tg
    await tg.stop()


def _sent_again_later(tg: TelegramAdapter, update: dict) -> None:
    """`update` is not read yet: the webhook answers 503, for Telegram to send it again, and says why."""
    early = tg.parse(_request(update))
    assert not early.messages and early.response is not None and early.response.status == 503
    assert "not known yet" in json.loads(early.response.body)["description"]
    assert "not known yet" in early.ignored[0]


async def test_the_webhook_asks_telegram_to_send_it_again_until_the_username_is_known(unnamed) -> None:
    update = _update("/ask@support_bot hours?", chat_type="group", entities=[ASK])
    _sent_again_later(unnamed, update)
    other = unnamed.parse(_request(_update("plain words", chat_type="group")))  # nothing to tell: read now
    assert other.response is None and other.messages
    unnamed.parser.username = "support_bot"  # getMe answered
    [asked] = unnamed.parse(_request(update)).messages
    assert asked.text == "hours?" and not asked.only_while_held


async def test_polling_fetches_it_again_until_the_username_is_known(fake: FakeTelegramAPI) -> None:
    fake.fail_next("getMe", status=502, times=2)
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1, identity_retry_s=0.3)
    received: list[InboundMessage] = []
    arrived = asyncio.Event()

    async def deliver(message: InboundMessage) -> None:
        received.append(message)
        arrived.set()

    with structlog.testing.capture_logs() as logs:
        await tg.start(deliver)
        try:
            fake.push_update(_update("/ask@support_bot hours?", update_id=9501, chat_type="group", entities=[ASK]))
            await asyncio.wait_for(arrived.wait(), timeout=15)
        finally:
            await tg.stop()
    [asked] = received
    assert asked.text == "hours?" and not asked.only_while_held and asked.raw["update_id"] == 9501
    assert any(e["event"] == "telegram.update_deferred" and e["update_id"] == 9501 for e in logs)


async def test_a_group_mention_waits_for_the_username_and_nothing_else_does(unnamed) -> None:
    update = _update("@support_bot hi", chat_type="group", entities=[MENTION])
    _sent_again_later(unnamed, update)
    # A private chat is addressed to us whatever it mentions; a group message without a mention tells nothing.
    private = unnamed.parse(_request(_update("@support_bot hi", entities=[MENTION])))
    assert private.response is None and private.messages
    plain = unnamed.parse(_request(_update("plain words", chat_type="group")))
    assert plain.response is None and plain.messages and plain.messages[0].only_while_held
    unnamed.parser.username = "support_bot"  # getMe answered
    [asked] = unnamed.parse(_request(update)).messages
    assert asked.text == "hi" and not asked.only_while_held


BOT_ID = int(TOKEN.split(":", 1)[0])  # what the token says, with or without getMe
OUR_MESSAGE = {"message_id": 40, "date": 1699999990, "chat": {"id": -100777, "type": "group"},
               "from": {"id": BOT_ID, "is_bot": True, "first_name": "Support", "username": "support_bot"},
               "text": "We open at 9."}
SOMEONE = {"type": "mention", "offset": 0, "length": 6}  # "@carol"


@pytest.mark.parametrize(("text", "fields", "settings", "words"), [
    # A text_mention names the bot by its user id, which the token gives: no username needed.
    ("Support @carol when do you open?", {"entities": [
        {"type": "text_mention", "offset": 0, "length": 7, "user": {"id": BOT_ID, "is_bot": True, "first_name": "S"}},
        {"type": "mention", "offset": 8, "length": 6}]}, {}, "@carol when do you open?"),
    # A reply to the bot's own message is to the bot, whoever else it names.
    ("@carol and on Sundays?", {"entities": [SOMEONE], "reply_to_message": OUR_MESSAGE}, {}, "@carol and on Sundays?"),
    # A command without @name is ours (only a command naming a bot needs the username).
    ("/ask @carol says you close at 5?", {"entities": [ASK_BARE, {"type": "mention", "offset": 5, "length": 6}]},
     {}, "@carol says you close at 5?"),
    # With respond_in_groups: always every group message is to the bot.
    ("@carol do you ship abroad?", {"entities": [SOMEONE]}, {"respond_in_groups": "always"},
     "@carol do you ship abroad?"),
], ids=["text-mention-of-us", "reply-to-us", "bare-command", "respond-always"])
async def test_a_group_message_addressed_to_us_otherwise_is_read_at_once(fake: FakeTelegramAPI, text, fields,
                                                                        settings, words) -> None:
    # Deferred (503, offset kept) until getMe answered: a member's question to the bot waited on an outage of
    # getMe although nothing about it needed the bot's username.
    fake.fail_next("getMe", status=502, times=1)
    tg = TelegramAdapter("demo", _settings(fake.base_url, **settings), identity_retry_s=60)
    await tg.start(lambda m: asyncio.sleep(0))
    try:
        assert tg.parser.username is None
        result = tg.parse(_request(_update(text, chat_type="group", **fields)))
        assert result.response is None, result.ignored
        [asked] = result.messages
        assert asked.text == words and not asked.only_while_held
    finally:
        await tg.stop()


async def test_a_group_mention_alone_still_waits_for_the_username(unnamed) -> None:
    # A reply to another member, with an @mention: whether it names us is all that tells.
    other = OUR_MESSAGE | {"from": {"id": 5, "is_bot": False, "first_name": "Carol"}}
    _sent_again_later(unnamed, _update("@support_bot is she right?", chat_type="group", entities=[MENTION],
                                       reply_to_message=other))
