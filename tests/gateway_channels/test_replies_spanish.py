"""A bot whose customers write Spanish: its configured `replies` reach them on every channel, through
the real app, the real adapters and the fake platforms (none of the gateway's English reaches them)."""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.conftest import chat_events
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.fakes.twilio_api import FakeTwilio
from tests.gateway_channels import test_telegram_e2e as telegram
from tests.gateway_channels import whatsapp_rig as whatsapp
from tests.gateway_channels.conftest import QUESTION, gateway_app, wait_until
from tests.test_config_replies import SPANISH

pytestmark = pytest.mark.asyncio(loop_scope="module")
WIDGET = {"placeholder": "Escribe tu pregunta…", "send": "Enviar"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    twilio = FakeTwilio(account_sid=whatsapp.ACCOUNT_SID, auth_token=whatsapp.AUTH_TOKEN).start()
    try:
        async with FakeTelegramAPI(telegram.TOKEN) as tg:
            channels = {"telegram": {"token": "${TG_TOKEN}", "webhook_secret": "${TG_SECRET}", "api_base": tg.base_url},
                        "whatsapp": {"account_sid": "${WA_SID}", "auth_token": "${WA_TOKEN}",
                                     "from_number": whatsapp.BOT_NUMBER, "public_url": whatsapp.PUBLIC_URL,
                                     "api_base": twilio.base_url}}
            secrets = {"TG_TOKEN": telegram.TOKEN, "TG_SECRET": telegram.SECRET, "WA_SID": whatsapp.ACCOUNT_SID,
                       "WA_TOKEN": whatsapp.AUTH_TOKEN}
            async with gateway_app(tmp_path_factory.mktemp("spanish"), channels=channels, env=secrets,
                                   bot={"replies": SPANISH | {"widget": WIDGET}}) as (client, _):
                yield client, tg, twilio
    finally:
        twilio.stop()


async def test_a_photo_on_telegram_gets_the_spanish_text_only_reply(env):
    client, tg, _ = env
    photo = [{"file_id": "AgAD-large", "file_unique_id": "u2", "width": 800, "height": 800}]
    assert (await telegram.post(client, telegram.update(9501, 4501, photo=photo))).status_code == 200
    [reply] = await wait_until(lambda: telegram.sent_to(tg, 4501), what="the text-only reply")
    assert reply.text == SPANISH["text_only"]


async def test_a_photo_on_whatsapp_gets_the_spanish_text_only_reply(env):
    client, _, twilio = env
    form = whatsapp.inbound("SM" + "e" * 32, "+34600000001", body="", NumMedia="1",
                            MediaUrl0="https://api.twilio.com/2010-04-01/Accounts/AC/Messages/MM1/Media/ME1",
                            MediaContentType0="image/jpeg")
    assert (await whatsapp.post(client, form)).status_code == 200
    [sent] = await wait_until(lambda: whatsapp.sent_to(twilio, "+34600000001"), what="the text-only reply")
    assert sent.form["Body"] == SPANISH["text_only"]


async def test_a_message_too_long_on_whatsapp_gets_the_spanish_reply_with_its_numbers(env):
    client, _, twilio = env
    form = whatsapp.inbound("SM" + "f" * 32, "+34600000002", body="¿Cuánto cuesta? " + "x" * 4484)
    assert (await whatsapp.post(client, form)).status_code == 200
    [sent] = await wait_until(lambda: whatsapp.sent_to(twilio, "+34600000002"), what="the too-long reply")
    assert sent.form["Body"] == ("Tu mensaje es demasiado largo (4500 caracteres). ¿Puedes preguntarlo en menos "
                                 "de 4000?")


async def test_an_answer_on_whatsapp_and_telegram_lists_its_sources_under_the_spanish_heading(env):
    client, tg, twilio = env
    assert (await whatsapp.post(client, whatsapp.inbound("SM" + "g" * 32, "+34600000003"))).status_code == 200
    assert (await telegram.post(client, telegram.update(9502, 4502, QUESTION))).status_code == 200
    [sent] = await wait_until(lambda: whatsapp.sent_to(twilio, "+34600000003"), what="the WhatsApp answer")
    [reply] = await wait_until(lambda: telegram.sent_to(tg, 4502), what="the Telegram answer")
    for text in (sent.form["Body"], reply.text):
        assert "$" in text and "\nFuentes:\n1. " in text and "Sources" not in text


async def test_a_streamed_web_chat_answer_names_the_spanish_sources_heading(env):
    client, _, _ = env
    events = await chat_events(client, "acme", "web-es-1", QUESTION)
    kind, done = events[-1]
    assert kind == "done" and done["citations"] and done["sources_heading"] == "Fuentes:"
    transcript = (await client.get("/v1/bots/acme/sessions/web-es-1/messages")).json()
    assert transcript["sources_heading"] == "Fuentes:"


async def test_the_widget_is_given_the_bots_words(env):
    client, _, _ = env
    [bot] = (await client.get("/v1/bots")).json()["bots"]
    assert {key: bot["texts"][key] for key in WIDGET} == WIDGET and bot["texts"]["retry"] == "Retry"
    assert bot["lang"] == "es"  # the widget page's <html lang>
