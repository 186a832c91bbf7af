"""Shared helpers for the reliability suite: fixtures on disk, validly signed requests per channel,
the real app for a bot with every channel, and row counts by external id.

Each test module builds ONE app (module scope): the worker, the embedding model and the stores are
the slow part. Bots here have no knowledge sources unless a test needs one (then one tiny document).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from nacl.signing import SigningKey
from sqlalchemy import func, select
from twilio.request_validator import RequestValidator

from gateway.services import Services
from storage.models import Message
from tests.conftest import FIXTURES, app_client
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_api import sign as slack_sign
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.fakes.twilio_api import FakeTwilio

# Secrets the suite configures through the environment; test_secrets greps every output for them.
TG_TOKEN = "723738643:AAH-reliability-TOKEN-7f3k"
TG_SECRET = "tg-webhook-SECRET-q8w9e0"
SLACK_BOT_TOKEN = "xoxb-test-token"  # the only token tests/fakes/slack_api.py accepts
SLACK_SIGNING_SECRET = "slack-signing-SECRET-a1b2c3d4"
DISCORD_TOKEN = "fake-bot-token"  # the only token tests/fakes/discord_api.py accepts
DISCORD_KEY = SigningKey(bytes(range(1, 33)))
WA_SID = "AC" + "fedcba9876543210" * 2
WA_TOKEN = "twilio-auth-TOKEN-z9y8x7"
WA_PUBLIC_URL = "https://gw.example.com"
BOT_NUMBER = "+14155238886"
LLM_KEY = "sk-reliability-LLMKEY-5t6y7u"

SECRET_ENV = {"REL_TG_TOKEN": TG_TOKEN, "REL_TG_SECRET": TG_SECRET, "REL_SLACK_BOT_TOKEN": SLACK_BOT_TOKEN,
              "REL_SLACK_SIGNING": SLACK_SIGNING_SECRET, "REL_WA_SID": WA_SID, "REL_WA_TOKEN": WA_TOKEN,
              "REL_DISCORD_TOKEN": DISCORD_TOKEN, "REL_LLM_KEY": LLM_KEY}


def blns() -> list[str]:
    """The Big List of Naughty Strings (tests/fixtures/badinput, MIT, see SOURCES.md)."""
    return json.loads((FIXTURES / "badinput" / "blns.json").read_text(encoding="utf-8"))


def injection_strings() -> list[str]:
    """Prompt-injection strings (tests/fixtures/injection, provenance per line)."""
    lines = (FIXTURES / "injection" / "prompt_injection_strings.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


def telegram_channel(api_base: str) -> dict[str, Any]:
    """The bot's Telegram channel on the fake at `api_base`, its secrets from `SECRET_ENV`."""
    return {"token": "${REL_TG_TOKEN}", "webhook_secret": "${REL_TG_SECRET}", "api_base": api_base}


def channels_config(*, telegram_api: str, slack_api: str, discord_api: str, twilio_api: str) -> dict[str, Any]:
    """Every channel, with secrets as ${VAR} references (SECRET_ENV) and APIs at the given fakes."""
    return {
        "web": {"per_address_per_minute": None},  # these tests send hundreds a minute from one test client
        "telegram": telegram_channel(telegram_api),
        "slack": {"bot_token": "${REL_SLACK_BOT_TOKEN}", "signing_secret": "${REL_SLACK_SIGNING}",
                  "api_base": slack_api},
        "discord": {"token": "${REL_DISCORD_TOKEN}", "public_key": DISCORD_KEY.verify_key.encode().hex(),
                    "api_base": discord_api},
        "whatsapp": {"account_sid": "${REL_WA_SID}", "auth_token": "${REL_WA_TOKEN}", "from_number": BOT_NUMBER,
                     "public_url": WA_PUBLIC_URL, "api_base": twilio_api},
    }


@dataclass
class ChannelFakes:
    """A fake of each channel's platform API; `channels`, every channel of a bot on them (`channels_config`)."""

    telegram: FakeTelegramAPI
    slack: FakeSlack
    discord: FakeDiscord
    twilio: FakeTwilio

    @property
    def channels(self) -> dict[str, Any]:
        return channels_config(telegram_api=self.telegram.base_url, slack_api=self.slack.api_base,
                               discord_api=self.discord.api_base, twilio_api=self.twilio.base_url)


@asynccontextmanager
async def channel_fakes() -> AsyncIterator[ChannelFakes]:
    """The fakes of Telegram, Slack, Discord and Twilio (the suite's tokens), each stopped once the block ends."""
    twilio = FakeTwilio(account_sid=WA_SID, auth_token=WA_TOKEN).start()
    discord = await FakeDiscord().start()
    slack = await FakeSlack.start()
    try:
        async with FakeTelegramAPI(TG_TOKEN) as telegram:
            yield ChannelFakes(telegram, slack, discord, twilio)
    finally:
        await slack.stop()
        await discord.close()
        twilio.stop()


@asynccontextmanager
async def running_app(tmp_path: Path, *, bots: list[dict[str, Any]], env: dict[str, str] | None = None,
                      **options: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    """The real app behind an in-process client (tests.conftest.app_client), with the suite's secrets
    (SECRET_ENV) for its ${VAR} references. App exceptions become 500 responses, as in production,
    because these tests check what a client gets when something breaks."""
    async with app_client(tmp_path, bots=bots, env={**SECRET_ENV, **(env or {})}, raise_app_exceptions=False,
                          **options) as client:
        yield client, client.services


# --- validly signed requests, one builder per channel --------------------------------------------------

def telegram_request(body: bytes, *, secret: str = TG_SECRET) -> dict[str, Any]:
    """Telegram: the secret token header (compared in constant time by the adapter)."""
    return {"content": body, "headers": {"content-type": "application/json",
                                         "X-Telegram-Bot-Api-Secret-Token": secret}}


def slack_request(body: bytes, *, content_type: str = "application/json",
                  secret: str = SLACK_SIGNING_SECRET) -> dict[str, Any]:
    """Slack: v0 HMAC-SHA256 over `v0:{ts}:{body}` with the signing secret."""
    return {"content": body, "headers": {"content-type": content_type, **slack_sign(body, secret=secret)}}


def discord_request(body: bytes, *, key: SigningKey = DISCORD_KEY, content_type: str = "application/json") -> dict:
    """Discord: Ed25519 over timestamp + body."""
    ts = str(int(time.time()))
    return {"content": body, "headers": {"content-type": content_type,
                                         "X-Signature-Ed25519": key.sign(ts.encode() + body).signature.hex(),
                                         "X-Signature-Timestamp": ts}}


def whatsapp_request(form: dict[str, str], *, token: str = WA_TOKEN,
                     path: str = "/webhooks/acme/whatsapp") -> dict[str, Any]:
    """Twilio: RequestValidator's signature of the configured public URL + path and the form."""
    signature = RequestValidator(token).compute_signature(WA_PUBLIC_URL + path, form)
    return {"content": urlencode(form).encode(), "headers": {
        "content-type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature}}


def telegram_update(update_id: int, text: str, *, chat: int = 7001) -> bytes:
    """A private-chat text message update."""
    return json.dumps({"update_id": update_id, "message": {
        "message_id": update_id, "date": 1700000000, "chat": {"id": chat, "type": "private"},
        "from": {"id": chat, "is_bot": False, "first_name": "Ann"}, "text": text}}).encode()


def slack_event(event_id: str, text: str, *, channel: str = "D0RELIAB") -> bytes:
    """A direct-message event_callback."""
    return json.dumps({"token": "legacy", "team_id": "T111", "api_app_id": "A111", "type": "event_callback",
                       "event_id": event_id, "event_time": 1700000001,
                       "authorizations": [{"team_id": "T111", "user_id": "UBOT", "is_bot": True}],
                       "event": {"type": "message", "channel": channel, "channel_type": "im", "user": "U0CUSTOMER",
                                 "text": text, "ts": f"1700000001.{event_id[-6:]}", "team": "T111"}}).encode()


def discord_ask(interaction_id: str, text: str, *, channel: str = "1300000000000000101") -> bytes:
    """An /ask slash-command interaction."""
    return json.dumps({"id": interaction_id, "application_id": "1100000000000000002", "type": 2,
                       "token": f"tok-{interaction_id}", "version": 1, "guild_id": "1300000000000000000",
                       "channel_id": channel, "member": {"user": {"id": "1300000000000000099", "username": "ann"}},
                       "data": {"id": "1300000000000000050", "name": "ask", "type": 1,
                                "options": [{"name": "question", "type": 3, "value": text}]}}).encode()


def whatsapp_form(sid: str, text: str, *, phone: str = "+15550007001") -> dict[str, str]:
    """An inbound WhatsApp message as Twilio posts it."""
    return {"MessageSid": sid, "SmsMessageSid": sid, "AccountSid": WA_SID, "From": f"whatsapp:{phone}",
            "To": f"whatsapp:{BOT_NUMBER}", "Body": text, "NumMedia": "0", "WaId": phone.lstrip("+"),
            "ProfileName": "Ann", "SmsStatus": "received"}


async def count_by_external_id(services: Services, *, channel: str, external_id: str) -> int:
    """Inbound rows stored for one (channel, external id): the idempotency key."""
    async with services.sessions() as session:
        return (await session.execute(select(func.count()).select_from(Message).where(
            Message.channel == channel, Message.direction == "in", Message.external_id == external_id))).scalar_one()


async def inbound_counts(services: Services, *, channel: str) -> dict[str, int]:
    """Inbound rows per external id for a whole channel, in one query."""
    async with services.sessions() as session:
        rows = (await session.execute(select(Message.external_id, func.count()).where(
            Message.channel == channel, Message.direction == "in").group_by(Message.external_id))).all()
    return {external_id: n for external_id, n in rows}
