"""A platform's redelivery of a message `gateway forget` deleted, on every channel through the real app.

Forget keeps a sha256 of each inbound message it deletes (storage/forgotten.py), which an edit of it was checked
against; the original's own redelivery was not: a Telegram update sent again, Slack's retry, a Discord message seen
again after a RESUME, Twilio's retry of a MessageSid, a web chat retry under its message_id. It was stored and
answered again, with the text the forget had just erased, and its sender's contact made anew."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import func, select
from structlog.testing import capture_logs

from channels.discord import classify_gateway_message
from gateway.retention import forget_contact
from storage.models import Contact, ForgottenMessage
from tests.fakes.discord_api import BOT_USER_ID, FakeDiscord
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.fakes.twilio_api import FakeTwilio
from tests.gateway_channels import whatsapp_rig as wa
from tests.gateway_channels.conftest import QUESTION, gateway_app, messages_in_chat, settle, wait_until
from tests.gateway_channels.test_discord_e2e import SIGNING_KEY, gateway_message
from tests.gateway_channels.test_slack_e2e import SIGNING_SECRET, envelope, posted_to
from tests.gateway_channels.test_slack_e2e import post as slack_post
from tests.gateway_channels.test_telegram_e2e import SECRET, TOKEN
from tests.gateway_channels.test_telegram_e2e import post as telegram_post
from tests.gateway_channels.test_telegram_e2e import sent_to as telegram_sent_to
from tests.gateway_channels.test_telegram_e2e import update as telegram_update

pytestmark = pytest.mark.asyncio(loop_scope="module")
REASON = "a redelivery of a message `gateway forget` deleted"


@asynccontextmanager
async def every_channel(tmp_path) -> AsyncIterator[dict[str, Any]]:
    """The real app with every channel on its fake platform."""
    async with FakeTelegramAPI(TOKEN) as telegram:
        slack = await FakeSlack.start()
        discord = await FakeDiscord().start()
        twilio = FakeTwilio(account_sid=wa.ACCOUNT_SID, auth_token=wa.AUTH_TOKEN).start()
        channels = {
            "telegram": {"token": "${TG_TOKEN}", "webhook_secret": "${TG_SECRET}", "api_base": telegram.base_url},
            "slack": {"bot_token": "${SLACK_BOT_TOKEN}", "signing_secret": "${SLACK_SIGNING_SECRET}",
                      "api_base": slack.api_base},
            "discord": {"token": "${DISCORD_TOKEN}", "public_key": SIGNING_KEY.verify_key.encode().hex(),
                        "api_base": discord.api_base, "gateway_url": discord.gateway_url},
            "whatsapp": {"account_sid": "${WA_SID}", "auth_token": "${WA_TOKEN}", "from_number": wa.BOT_NUMBER,
                         "public_url": wa.PUBLIC_URL, "api_base": twilio.base_url},
        }
        secrets = {"TG_TOKEN": TOKEN, "TG_SECRET": SECRET, "SLACK_BOT_TOKEN": BOT_TOKEN,
                   "SLACK_SIGNING_SECRET": SIGNING_SECRET, "DISCORD_TOKEN": discord.token,
                   "WA_SID": wa.ACCOUNT_SID, "WA_TOKEN": wa.AUTH_TOKEN}
        try:
            async with gateway_app(tmp_path, channels=channels, env=secrets) as (client, services):
                yield {"client": client, "services": services, "telegram": telegram, "slack": slack,
                       "discord": discord, "twilio": twilio}
        finally:
            twilio.stop()
            await discord.close()
            await slack.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with every_channel(tmp_path_factory.mktemp("forgotten")) as env_:
        yield env_


async def _forgotten_then_redelivered(services, *, channel: str, chat: str, user: str, deliver, replies) -> list:
    """Deliver, see it answered, forget its sender, deliver it again: the log of the redelivery."""
    await deliver()
    await wait_until(replies, what=f"the {channel} answer")
    await settle(services=services)
    report = await forget_contact(services.sessions, channel=channel, user=user)
    assert report.messages == 2 and report.contacts == 1
    with capture_logs() as logs:
        await deliver()
        await settle(services=services)
    assert await messages_in_chat(services, channel=channel, chat=chat) == []
    assert len(replies()) == 1
    async with services.sessions() as session:
        contacts = (await session.execute(select(func.count()).select_from(Contact).where(
            Contact.channel == channel, Contact.external_id == user))).scalar_one()
        kept = (await session.execute(select(func.count()).select_from(ForgottenMessage))).scalar_one()
    assert contacts == 0 and kept >= 1  # its contact not made anew: the store's transaction was undone
    return [e for e in logs if e["event"] == "inbound.ignored" and e.get("reason") == REASON]


async def test_telegram_update_sent_again_after_forget_is_not_stored(env):
    client, services, fake = env["client"], env["services"], env["telegram"]
    body = telegram_update(970001, 5550001, QUESTION)

    async def deliver():
        assert (await telegram_post(client, body)).status_code == 200

    logged = await _forgotten_then_redelivered(services, channel="telegram", chat="5550001", user="5550001",
                                               deliver=deliver, replies=lambda: telegram_sent_to(fake, 5550001))
    assert len(logged) == 1


async def test_slack_retry_after_forget_is_not_stored(env):
    client, services, fake = env["client"], env["services"], env["slack"]
    body = envelope("EvForgot1", "D0F0001", QUESTION, ts="1700000101.000100")
    attempts = iter((None, 1))

    async def deliver():
        assert (await slack_post(client, body, retry=next(attempts))).status_code == 200

    logged = await _forgotten_then_redelivered(services, channel="slack", chat="D0F0001", user="U0CUSTOMER",
                                               deliver=deliver, replies=lambda: posted_to(fake, "D0F0001"))
    assert len(logged) == 1


async def test_discord_message_seen_again_after_forget_is_not_stored(env):
    services, fake = env["services"], env["discord"]
    author, channel = "1300000000000000091", "1600000000000000091"
    message = classify_gateway_message(gateway_message("1500000000000000091", channel, QUESTION, author=author),
                                       bot_user_id=BOT_USER_ID)

    async def deliver():  # what the gateway client calls for each MESSAGE_CREATE, a RESUME's replay too
        await services._deliver_for("acme")(message)

    logged = await _forgotten_then_redelivered(services, channel="discord", chat=channel, user=author,
                                               deliver=deliver, replies=lambda: fake.channel_messages(channel))
    assert len(logged) == 1


async def test_whatsapp_retry_of_a_message_sid_after_forget_is_not_stored(env):
    client, services, fake = env["client"], env["services"], env["twilio"]
    phone = "+15550000091"
    form = wa.inbound("SM" + "f9" * 16, phone)

    async def deliver():
        assert (await wa.post(client, form)).status_code == 200

    logged = await _forgotten_then_redelivered(services, channel="whatsapp", chat=f"whatsapp:{phone}",
                                               user=phone[1:], deliver=deliver, replies=lambda: wa.sent_to(fake, phone))
    assert len(logged) == 1


async def test_web_chat_retry_after_forget_is_refused_and_not_stored(env):
    client, services = env["client"], env["services"]
    body = {"session_id": "forgotten-session-1", "text": QUESTION, "message_id": "m-1"}
    answers: list[dict[str, Any]] = []
    refused: list[Any] = []

    async def deliver():
        response = await client.post("/v1/bots/acme/chat", json=body)
        (answers if response.status_code == 200 else refused).append(response)

    logged = await _forgotten_then_redelivered(services, channel="web", chat="forgotten-session-1",
                                               user="forgotten-session-1", deliver=deliver, replies=lambda: answers)
    [response] = refused
    assert response.status_code == 409 and "gateway forget" in response.json()["error"]
    assert len(logged) == 1
