"""Every third-party Telegram update (tests/fixtures/payloads/telegram) through the real app: the webhook
with its secret, the inbox, the worker, and aiogram against the fake Bot API. Each update either gets
exactly one reply in its chat or is acknowledged and leaves nothing behind.

The fixtures share one update_id and chat id, so each gets its own (the idempotency key and the chat
would otherwise make them one conversation); everything else is sent as captured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_asyncio

from tests.english_replies import TEXT_ONLY_REPLY
from tests.gateway_channels.conftest import count_messages, messages_in_chat, settle, settled_chat, wait_until
from tests.gateway_channels.test_telegram_e2e import post, sent_to, telegram_gateway

ASYNC = pytest.mark.asyncio(loop_scope="module")  # the module's one app (not on the sync table check)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "telegram"
FIXTURE_FILES = sorted(FIXTURES.glob("*/*.json"))
ANSWERED = "answered"
TEXT_ONLY = "text-only"
SILENT = "silent"
# file name -> what the user sees: an answer to their words, the text-only reply, or nothing at all.
EXPECTED = {
    "callback_query_with_message_inline_keyboard.json": SILENT,  # no button of ours was pressed
    "group_message_bot_command.json": SILENT,  # /echo is no command of ours
    "group_message_bot_command_with_botname.json": SILENT,  # addressed to another bot
    "message_text_private.json": ANSWERED,
    "edited_message.json": SILENT,  # an edit of a message already answered (or never seen)
    "forwarded_message.json": ANSWERED,
    "inline_query.json": SILENT,
    "message.json": ANSWERED,
    "message_with_audio.json": TEXT_ONLY,
    "message_with_document.json": ANSWERED,  # its caption is the question
    "message_with_game.json": TEXT_ONLY,
    "message_with_invoice.json": SILENT,
    "message_with_location.json": ANSWERED,
    "message_with_photo.json": ANSWERED,  # its caption is the question
    "message_with_sticker.json": TEXT_ONLY,  # 🛠 says nothing the bot can answer
    "message_with_successful_payment.json": SILENT,
    "message_with_video.json": ANSWERED,  # its caption is the question
    "message_with_voice.json": TEXT_ONLY,
    "pre_checkout_query.json": SILENT,
    "reply_message.json": ANSWERED,
    "shipping_query.json": SILENT,
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with telegram_gateway(tmp_path_factory.mktemp("telegram-fixtures")) as env_:
        _, services, fake = env_
        # As start() learns it from getMe (channels are not started here): until then a `/echo@bot` cannot be told
        # from one of ours, and is answered 503 for Telegram to send again.
        for (_, channel), adapter in services.adapters.items():
            if channel == "telegram":
                adapter.parser.username = fake.username
        yield env_


def _own_ids(update: dict, index: int) -> tuple[dict, int | None]:
    """The update with an update_id and chat id of its own; returns it and the chat id (None: no chat)."""
    update = json.loads(json.dumps(update))
    if "update_id" in update:
        update["update_id"] = 770000 + index
    chat = None
    for key in ("message", "edited_message"):
        if key in update:
            chat = 77000000 + index
            update[key]["chat"]["id"] = chat
    return update, chat


def test_telegram_fixture_table_covers_every_fixture_file() -> None:
    assert {f.name for f in FIXTURE_FILES} == set(EXPECTED)


@ASYNC
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
async def test_telegram_every_fixture_is_answered_or_left_silently(env, path: Path):
    client, services, fake = env
    update, chat = _own_ids(json.loads(path.read_bytes()), FIXTURE_FILES.index(path))
    before = await count_messages(services, channel="telegram")
    response = await post(client, update)
    assert response.status_code == 200, response.text
    expected = EXPECTED[path.name]
    if expected == SILENT:
        await settle(services=services)
        assert await count_messages(services, channel="telegram") == before
        assert chat is None or sent_to(fake, chat) == []
        return
    [reply] = await wait_until(lambda: sent_to(fake, chat), what=f"the reply to {path.name}")
    inbound, out = await settled_chat(services, channel="telegram", chat=str(chat))
    assert (inbound.direction, inbound.status, out.direction, out.status) == ("in", "done", "out", "sent")
    if expected == TEXT_ONLY:
        assert reply.text == TEXT_ONLY_REPLY
        assert inbound.attachments, "the media must be kept, not lost"
    else:
        assert reply.text and reply.text != TEXT_ONLY_REPLY
    await settle(services=services)
    assert len(sent_to(fake, chat)) == 1
    assert len(await messages_in_chat(services, channel="telegram", chat=str(chat))) == 2
