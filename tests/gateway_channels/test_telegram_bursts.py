"""A customer's burst of messages on Telegram (a question typed in pieces, an album of photos) is
answered once, through the real app, aiogram and the fake Bot API (gateway/burst.py)."""

from __future__ import annotations

import pytest
import pytest_asyncio
from sqlalchemy import select

from gateway.burst import BURST_OWNER
from storage.models import Conversation, Usage
from tests.english_replies import TEXT_ONLY_REPLY
from tests.gateway_channels.conftest import (
    GREETING,
    get_message,
    messages_in_chat,
    replies,
    settle,
    settled_chat,
    wait_until,
)
from tests.gateway_channels.test_telegram_e2e import post, sent_to, telegram_gateway, update

pytestmark = pytest.mark.asyncio(loop_scope="module")

async def _handled(services, message_id: int) -> bool:
    return (await get_message(services, message_id)).status != "pending"


PHOTO = [{"file_id": "AgAD-album", "file_unique_id": "u9", "width": 800, "height": 600}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with telegram_gateway(tmp_path_factory.mktemp("telegram-bursts")) as env_:
        yield env_


async def test_a_question_typed_in_pieces_is_answered_once_as_one_question(env):
    """"How much" / "does the Plus plan" / "cost?" were three questions: three "I couldn't find that"."""
    client, services, fake = env
    for offset, piece in enumerate(("How much", "does the Plus plan", "cost?")):
        assert (await post(client, update(9301 + offset, 3101, piece, message_id=301 + offset))).status_code == 200
    [reply] = await wait_until(lambda: sent_to(fake, 3101), what="the reply")
    assert "$" in reply.text and "Sources:" in reply.text  # the whole question was searched
    assert reply.reply_to == 301
    stored = await settled_chat(services, channel="telegram", chat="3101", count=4)
    first, *rest = [m for m in stored if m.direction == "in"]
    assert [m.status for m in (first, *rest)] == ["done"] * 3
    assert [m.meta["answered_with"] for m in rest] == [first.id, first.id]
    assert [r.reply_to_id for r in replies(stored)] == [first.id]
    await settle(services=services)
    assert len(sent_to(fake, 3101)) == 1


async def test_an_album_with_one_caption_gets_one_answer(env):
    """Telegram sends an album as one update per photo, the caption on one: the others each got
    "I can only read text" beside the caption's answer."""
    client, services, fake = env
    await post(client, update(9311, 3102, None, message_id=311, photo=PHOTO, media_group_id="77",
                              caption="How much does the Plus plan cost?"))
    for offset in (1, 2):
        await post(client, update(9311 + offset, 3102, None, message_id=311 + offset, photo=PHOTO, media_group_id="77"))
    [reply] = await wait_until(lambda: sent_to(fake, 3102), what="the reply")
    assert "$" in reply.text
    await settled_chat(services, channel="telegram", chat="3102", count=4)
    await settle(services=services)
    assert [m.text for m in sent_to(fake, 3102)] == [reply.text]


async def test_an_album_without_caption_gets_the_text_only_reply_once(env):
    client, services, fake = env
    for offset in range(3):
        await post(client, update(9321 + offset, 3103, None, message_id=321 + offset, photo=PHOTO, media_group_id="78"))
    await settled_chat(services, channel="telegram", chat="3103", count=4)
    await settle(services=services)
    assert [m.text for m in sent_to(fake, 3103)] == [TEXT_ONLY_REPLY]


async def test_a_command_and_a_message_after_a_pause_are_answered_on_their_own(env):
    client, services, fake = env
    await post(client, update(9331, 3104, "/start", message_id=331,
                              entities=[{"type": "bot_command", "offset": 0, "length": 6}]))
    await post(client, update(9332, 3104, "How much does the Plus plan cost?", message_id=332))
    await wait_until(lambda: len(sent_to(fake, 3104)) == 2, what="the greeting and the answer")
    await post(client, update(9333, 3104, "thanks", message_id=333))
    await wait_until(lambda: len(sent_to(fake, 3104)) == 3, what="the answer to the later message")
    assert [m.reply_to for m in sent_to(fake, 3104)] == [331, 332, 333]
    assert sent_to(fake, 3104)[0].text == GREETING and "$" in sent_to(fake, 3104)[1].text


def edited(update_id: int, chat: int, text: str, *, message_id: int) -> dict:
    body = update(update_id, chat, text, message_id=message_id, edit_date=1700000005)
    return {"update_id": update_id, "edited_message": body["message"]}


async def test_a_message_edited_before_its_answer_is_answered_as_edited(env):
    """A typo fixed while the question waits: the answer was to the text the customer had corrected."""
    client, services, fake = env
    # Not read as a whole question (no "?"), so the answer waits for the customer to pause: the edit lands then.
    await post(client, update(9341, 3105, "How much does the Plsu plam cots", message_id=341))
    await post(client, edited(9342, 3105, "How much does the Plus plan cost?", message_id=341))
    [reply] = await wait_until(lambda: sent_to(fake, 3105), what="the reply")
    assert "$" in reply.text and reply.reply_to == 341
    [question, _] = await settled_chat(services, channel="telegram", chat="3105")
    assert question.text == "How much does the Plus plan cost?"


async def test_an_edit_after_the_answer_is_not_answered_again(env):
    client, services, fake = env
    await post(client, update(9351, 3106, "How much does the Plus plan cost?", message_id=351))
    await wait_until(lambda: sent_to(fake, 3106), what="the reply")
    await settled_chat(services, channel="telegram", chat="3106")
    await post(client, edited(9352, 3106, "How much does the Plus plan cost per year?", message_id=351))
    await settle(services=services)
    assert len(sent_to(fake, 3106)) == 1
    [question, _] = await messages_in_chat(services, channel="telegram", chat="3106")
    assert question.text == "How much does the Plus plan cost?"


async def test_a_thread_a_person_takes_while_the_burst_waits_is_theirs(env):
    """The conversation's state was read before the wait: an operator who took the thread during it got the
    model called, its answer streamed and then dropped, where the message was theirs to answer."""
    client, services, fake = env
    await post(client, update(9361, 3107, "my order is late", message_id=361))  # no "?": the answer waits
    [question] = await wait_until(lambda: messages_in_chat(services, channel="telegram", chat="3107"),
                                  what="the stored question")
    async def parked() -> bool:  # the worker has it, and waits for the customer to pause
        async with services.sessions() as session:
            return (await session.get(Conversation, question.conversation_id)).lease_owner == BURST_OWNER
    await wait_until(parked, what="the burst's wait")
    await services.escalations.claim_conversation(question.conversation_id, operator="sam", bots=None)
    await wait_until(lambda: _handled(services, question.id), what="the question, past the burst's wait")
    await settle(services=services)
    async with services.sessions() as session:
        spent = (await session.execute(select(Usage).where(Usage.message_id == question.id))).scalars().all()
    assert spent == []  # no model was asked
    assert [m.author for m in await messages_in_chat(services, channel="telegram", chat="3107")
            if m.direction == "out"] == ["system"]  # only "A person from our team has joined…"
