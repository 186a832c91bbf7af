"""A photo or file sent with a question, through the real app (aiogram against the fake Bot API, the bot's
model on the scripted OpenAI fake): the model is told, as data, that the message carried attachments it
cannot see, so it can say so instead of answering as if it had seen them. A photo without text still gets
the text-only reply, with no model call."""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.english_replies import TEXT_ONLY_REPLY
from tests.fakes.openai_server import Turn, model_entry
from tests.gateway_channels.conftest import QUESTION, settle, wait_until
from tests.gateway_channels.test_telegram_e2e import post, sent_to, telegram_gateway, update

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.usefixtures("fresh_fake")]

PHOTO = [{"file_id": "AgAD-small", "file_unique_id": "u1", "width": 90, "height": 90},
         {"file_id": "AgAD-large", "file_unique_id": "u2", "width": 800, "height": 800}]
CANNOT_SEE = "I can't see the photo you sent, but Plus costs $6 per month or $60 per year [1]."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory, fake):
    async with telegram_gateway(tmp_path_factory.mktemp("telegram-attachments"), bot={"model": "primary"},
                                top={"models": [model_entry(fake, "primary")], "llm": {"num_retries": 0}}) as env_:
        yield env_


def system_message(fake) -> str:
    [request] = fake.requests_for("primary")
    return next(m["content"] for m in request.messages if m["role"] == "system")


async def test_telegram_photo_with_a_question_tells_the_model_it_cannot_see_the_photo(env, fake):
    client, services, tg = env
    fake.script("primary", Turn(text=CANNOT_SEE))
    assert (await post(client, update(9401, 1401, photo=PHOTO, caption=QUESTION, message_id=5))).status_code == 200
    [reply] = await wait_until(lambda: sent_to(tg, 1401), what="the answer")
    system = system_message(fake)
    assert '<attachments count="1" kinds="image">' in system
    assert "1 attachment you cannot see or open: image." in system
    assert "Never describe or guess what is in it" in system
    [user] = [m["content"] for m in fake.requests_for("primary")[0].messages if m["role"] == "user"]
    assert user == QUESTION  # the customer's words stay the customer's message, the notice is not among them
    assert "can't see the photo" in reply.text


async def test_telegram_document_with_a_question_names_its_kind(env, fake):
    client, services, tg = env
    fake.script("primary", Turn(text=CANNOT_SEE))
    document = {"file_id": "BQAD-doc", "file_unique_id": "d1", "file_name": "error.pdf", "mime_type": "application/pdf"}
    assert (await post(client, update(9402, 1402, document=document, caption=QUESTION, message_id=6))).status_code == 200
    await wait_until(lambda: sent_to(tg, 1402), what="the answer")
    assert '<attachments count="1" kinds="document">' in system_message(fake)


async def test_telegram_question_without_attachments_has_no_attachments_block(env, fake):
    client, services, tg = env
    fake.script("primary", Turn(text="Plus costs $6 per month or $60 per year [1]."))
    assert (await post(client, update(9403, 1403, QUESTION, message_id=7))).status_code == 200
    await wait_until(lambda: sent_to(tg, 1403), what="the answer")
    assert "<attachments" not in system_message(fake)


async def test_telegram_photo_without_caption_still_gets_the_text_only_reply_and_no_model_call(env, fake):
    client, services, tg = env
    assert (await post(client, update(9404, 1404, photo=PHOTO, message_id=8))).status_code == 200
    [reply] = await wait_until(lambda: sent_to(tg, 1404), what="the text-only reply")
    await settle(services=services)
    assert reply.text == TEXT_ONLY_REPLY and fake.requests == []
