"""The contract every channel adapter keeps, run against each adapter class.

Each case knows how to build its adapter from settings and how its platform signs a webhook: a
minimal signed text message must verify and parse into exactly one InboundMessage; a bad, missing or
(where the platform has timestamps) stale signature must raise SignatureInvalid.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

import pytest
from nacl.signing import SigningKey
from twilio.request_validator import RequestValidator

from channels.base import Capabilities, ChannelAdapter, RawRequest
from channels.discord import DiscordAdapter
from channels.slack import SlackAdapter
from channels.telegram import TelegramAdapter
from channels.web import WebAdapter
from channels.whatsapp import WhatsAppAdapter
from gateway.errors import SignatureInvalid
from gateway.settings import DiscordChannel, SlackChannel, TelegramChannel, WebChannel, WhatsAppChannel

Signing = Literal["good", "bad", "missing", "stale"]
STALE_SECONDS = 3600


@dataclass(frozen=True)
class Case:
    """One adapter class, with its settings and its platform's way of signing a text message."""

    name: str
    build: Callable[[], Any]
    signed: Callable[[str, Signing], RawRequest] | None  # None: the channel has no webhook
    timestamps: bool = False  # the signature covers a timestamp, so a stale one is refused
    signs_body: bool = True  # False when the platform authenticates with a shared secret header


# -- Telegram: a shared secret header -----------------------------------------------------------

TELEGRAM = TelegramChannel(token="123456:" + "A" * 35, webhook_secret="contract-secret_1")


def _telegram(text: str, signing: Signing) -> RawRequest:
    body = json.dumps({"update_id": 1001, "message": {
        "message_id": 7, "date": int(time.time()), "text": text,
        "chat": {"id": 42, "type": "private", "first_name": "Ana"},
        "from": {"id": 42, "is_bot": False, "first_name": "Ana"},
    }}).encode()
    headers = {"content-type": "application/json"}
    if signing != "missing":
        headers["x-telegram-bot-api-secret-token"] = TELEGRAM.webhook_secret + ("x" if signing == "bad" else "")
    return RawRequest(url="http://127.0.0.1/webhooks/b/telegram", headers=headers, query={}, body=body)


# -- Slack: HMAC-SHA256 over v0:timestamp:body ---------------------------------------------------

SLACK = SlackChannel(bot_token="xoxb-contract-token", signing_secret="contract-signing-secret")


def _slack(text: str, signing: Signing) -> RawRequest:
    body = json.dumps({
        "type": "event_callback", "team_id": "T111", "api_app_id": "A111", "event_id": "Ev0001",
        "event_time": int(time.time()),
        "event": {"type": "message", "channel_type": "im", "channel": "D111", "user": "U222",
                  "text": text, "ts": "1700000000.000100", "event_ts": "1700000000.000100"},
    }).encode()
    ts = str(int(time.time()) - (STALE_SECONDS if signing == "stale" else 0))
    secret = SLACK.signing_secret + ("x" if signing == "bad" else "")
    signature = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    headers = {"content-type": "application/json"}
    if signing != "missing":
        headers |= {"x-slack-request-timestamp": ts, "x-slack-signature": signature}
    return RawRequest(url="http://127.0.0.1/webhooks/b/slack/events", headers=headers, query={}, body=body)


# -- Discord: Ed25519 over timestamp + body (interactions endpoint, /ask) ------------------------

DISCORD_KEY = SigningKey(bytes(range(32)))
DISCORD = DiscordChannel(token="contract.discord.token", public_key=DISCORD_KEY.verify_key.encode().hex())


def _discord(text: str, signing: Signing) -> RawRequest:
    body = json.dumps({
        "type": 2, "id": "1100000000000000001", "application_id": "1100000000000000002",
        "token": "interaction-token", "channel_id": "1100000000000000003", "version": 1,
        "user": {"id": "1100000000000000004", "username": "ana"},
        "data": {"id": "1100000000000000005", "name": "ask", "type": 1,
                 "options": [{"name": "question", "type": 3, "value": text}]},
    }).encode()
    ts = str(int(time.time()) - (STALE_SECONDS if signing == "stale" else 0))
    key = SigningKey(bytes(32)) if signing == "bad" else DISCORD_KEY
    headers = {"content-type": "application/json"}
    if signing != "missing":
        headers |= {"x-signature-timestamp": ts, "x-signature-ed25519": key.sign(ts.encode() + body).signature.hex()}
    return RawRequest(url="http://127.0.0.1/webhooks/b/discord/interactions", headers=headers, query={}, body=body)


# -- WhatsApp: Twilio's HMAC-SHA1 over the public URL and sorted form fields --------------------

WHATSAPP = WhatsAppChannel(account_sid="AC" + "1" * 32, auth_token="contract-auth-token",
                           from_number="+15550001111", public_url="https://bots.example.org")


def _whatsapp(text: str, signing: Signing) -> RawRequest:
    form = {"MessageSid": "SM" + "2" * 32, "AccountSid": WHATSAPP.account_sid, "From": "whatsapp:+15557654321",
            "To": "whatsapp:+15550001111", "Body": text, "NumMedia": "0", "ProfileName": "Ana"}
    token = WHATSAPP.auth_token + ("x" if signing == "bad" else "")
    signature = RequestValidator(token).compute_signature("https://bots.example.org/webhooks/b/whatsapp", form)
    headers = {"content-type": "application/x-www-form-urlencoded"}
    if signing != "missing":
        headers["x-twilio-signature"] = signature
    return RawRequest(url="http://127.0.0.1/webhooks/b/whatsapp", headers=headers, query={},
                      body=urlencode(form).encode())


CASES = [
    Case("telegram", lambda: TelegramAdapter("b", TELEGRAM), _telegram, signs_body=False),
    Case("slack", lambda: SlackAdapter("b", SLACK), _slack, timestamps=True),
    Case("discord", lambda: DiscordAdapter("b", DISCORD), _discord, timestamps=True),
    Case("whatsapp", lambda: WhatsAppAdapter("b", WHATSAPP), _whatsapp),
    Case("web", lambda: WebAdapter("b", WebChannel()), None),
]
WEBHOOK_CASES = [c for c in CASES if c.signed is not None]
REJECTIONS = [
    pytest.param(case, signing, id=f"{case.name}-{signing}")
    for case in WEBHOOK_CASES
    for signing in ("bad", "missing", "stale")
    if signing != "stale" or case.timestamps
]


@pytest.fixture
async def built(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Case, Any]]:
    case: Case = request.param
    adapter = case.build()
    yield case, adapter
    await adapter.stop()


def _ids(case: Case) -> str:
    return case.name


@pytest.mark.parametrize("built", CASES, ids=_ids, indirect=True)
async def test_contract_adapter_satisfies_the_protocol(built: tuple[Case, Any]) -> None:
    case, adapter = built
    assert isinstance(adapter, ChannelAdapter)
    assert adapter.name == case.name
    for method in ("verify", "parse", "send", "start", "stop"):
        assert callable(getattr(adapter, method))


@pytest.mark.parametrize("built", CASES, ids=_ids, indirect=True)
async def test_contract_capabilities_are_sane(built: tuple[Case, Any]) -> None:
    _, adapter = built
    caps = adapter.capabilities
    assert isinstance(caps, Capabilities)
    assert 500 <= caps.max_length <= 40_000
    assert caps.length_unit in ("chars", "utf16")
    assert caps.markdown in ("html", "markdownv2", "mrkdwn", "discord", "plain", "markdown")
    if caps.edits:
        assert callable(getattr(adapter, "edit", None)), "edits=True needs an edit() method"
        assert callable(getattr(adapter, "render", None)), "edits=True needs render() (a reply's parts)"
    if caps.typing:
        assert callable(getattr(adapter, "send_typing", None)), "typing=True needs send_typing()"


@pytest.mark.parametrize("built", WEBHOOK_CASES, ids=_ids, indirect=True)
async def test_contract_signed_text_message_parses_to_one_inbound(built: tuple[Case, Any]) -> None:
    case, adapter = built
    request = case.signed("What is your refund policy?", "good")
    adapter.verify(request)
    result = adapter.parse(request)
    assert len(result.messages) == 1, result.ignored
    (message,) = result.messages
    assert message.channel == case.name == message.conversation.channel
    assert message.external_id and message.conversation.chat and message.sender.external_id
    assert message.text == "What is your refund policy?"
    assert message.idempotency_key == (case.name, message.external_id)
    assert message.sent_at.tzinfo is not None


@pytest.mark.parametrize(("built", "signing"), REJECTIONS, indirect=["built"])
async def test_contract_verify_rejects_bad_missing_and_stale_signatures(built: tuple[Case, Any], signing: Signing) -> None:
    case, adapter = built
    with pytest.raises(SignatureInvalid):
        adapter.verify(case.signed("hello", signing))


@pytest.mark.parametrize("built", [c for c in WEBHOOK_CASES if c.signs_body], ids=_ids, indirect=True)
async def test_contract_verify_rejects_a_tampered_body(built: tuple[Case, Any]) -> None:
    case, adapter = built
    good = case.signed("hello", "good")
    tampered = RawRequest(url=good.url, headers=good.headers, query=good.query,
                          body=good.body.replace(b"hello", b"HELLO"))
    with pytest.raises(SignatureInvalid):
        adapter.verify(tampered)
