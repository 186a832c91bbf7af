"""An id longer than its column holds (VARCHAR(255) on PostgreSQL), in a validly signed payload.

Platform ids are short (snowflakes, Twilio's 34-character SIDs, Slack's `C0…` and `1700000000.000100`), so
one of 300 characters is not the platform's: as for any signed payload in a shape the adapter does not
know, a clear 400, stored nowhere. Stored as it came, it failed the insert on PostgreSQL with a 500 (which
the platform retried, for ever), while SQLite kept it whole; Telegram polling took that failure for a
database outage and stopped fetching every other update behind it.
"""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import func, select

from gateway.inbox import ID_MAX_CHARS, Inbox, UnstorableMessage
from gateway.models import ConversationRef, InboundMessage, Sender
from storage.models import EarlyReceipt, Message
from tests.reliability.conftest import (
    BOT_NUMBER,
    WA_SID,
    channels_config,
    discord_ask,
    discord_request,
    running_app,
    slack_event,
    slack_request,
    telegram_request,
    whatsapp_form,
    whatsapp_request,
)

LONG = "9" * 300
PATHS = {"telegram": "/webhooks/acme/telegram", "slack": "/webhooks/acme/slack/events",
         "discord": "/webhooks/acme/discord/interactions", "whatsapp": "/webhooks/acme/whatsapp"}


def _telegram(chat_id: int) -> dict:
    return telegram_request(json.dumps({"update_id": 5001, "message": {
        "message_id": 1, "date": 1700000000, "chat": {"id": chat_id, "type": "private"},
        "from": {"id": 7001, "is_bot": False, "first_name": "Ann"}, "text": "hi"}}).encode())


def _slack(**event) -> dict:
    body = json.loads(slack_event(event.pop("event_id", "Ev000001"), "hi"))
    body["event"].update(event)
    return slack_request(json.dumps(body).encode())


CASES = {
    "telegram-chat": ("telegram", lambda: _telegram(int(LONG))),
    "slack-channel": ("slack", lambda: _slack(channel="D" + LONG)),
    "slack-event-id": ("slack", lambda: _slack(event_id="Ev" + LONG)),
    "slack-user": ("slack", lambda: _slack(user="U" + LONG)),
    "slack-thread": ("slack", lambda: _slack(thread_ts="1700000000." + LONG)),
    "discord-id": ("discord", lambda: discord_request(discord_ask(LONG, "hi"))),
    "discord-channel": ("discord", lambda: discord_request(discord_ask("14000000000000000002", "hi", channel=LONG))),
    "whatsapp-from": ("whatsapp", lambda: whatsapp_request({**whatsapp_form("SM" + "1" * 32, "hi"), "From": "+" + LONG})),
    "whatsapp-waid": ("whatsapp", lambda: whatsapp_request({**whatsapp_form("SM" + "2" * 32, "hi"), "WaId": LONG})),
    "whatsapp-to": ("whatsapp", lambda: whatsapp_request({**whatsapp_form("SM" + "3" * 32, "hi"), "To": "+" + LONG})),
}


@pytest.mark.asyncio
async def test_a_signed_webhook_with_an_id_longer_than_its_column_is_400_and_stores_nothing(tmp_path, database_url):
    channels = channels_config(telegram_api="http://127.0.0.1:9", slack_api="http://127.0.0.1:9/api/",
                               discord_api="http://127.0.0.1:9/api/v10", twilio_api="http://127.0.0.1:9")
    async with running_app(tmp_path, bots=[{"name": "acme", "channels": channels}], start_worker=False,
                           database_url=database_url) as (client, services):
        answers = {name: await client.post(PATHS[channel], **request()) for name, (channel, request) in CASES.items()}
        async with services.sessions() as session:
            stored = (await session.execute(select(func.count()).select_from(Message))).scalar_one()
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(CASES, 400), \
        {name: r.text for name, r in answers.items()}
    assert all(f"longer than the {ID_MAX_CHARS}" in r.json()["error"] for r in answers.values()), \
        {name: r.text for name, r in answers.items()}
    assert stored == 0


@pytest.mark.asyncio
async def test_the_inbox_refuses_an_overlong_id_as_no_outage(tmp_path):
    """Polling, Socket Mode and the Discord gateway store through the inbox without the webhook's check: an
    overlong id is refused there as unusable (a ValueError, skipped), never as the database's error
    (an outage, waited out by Telegram polling while every later update queued behind it)."""
    inbox = Inbox(None)  # never reaches the database
    message = InboundMessage(channel="telegram", external_id="1", conversation=ConversationRef(
        channel="telegram", chat=LONG), sender=Sender(external_id="7001"), text="hi")
    with pytest.raises(UnstorableMessage, match=f"chat is 300 characters, longer than the {ID_MAX_CHARS}"):
        await inbox.accept("acme", message)
    assert issubclass(UnstorableMessage, ValueError)


def _receipt(sid: str, error_code: str) -> dict:
    return whatsapp_request({"MessageSid": sid, "SmsSid": sid, "AccountSid": WA_SID, "From": f"whatsapp:{BOT_NUMBER}",
                             "To": "whatsapp:+15550007001", "MessageStatus": "failed", "SmsStatus": "failed",
                             "ErrorCode": error_code})


@pytest.mark.asyncio
async def test_a_signed_receipt_with_an_overlong_sid_or_error_code_is_400_and_stores_nothing(tmp_path, database_url):
    """Twilio's error codes are five digits (63016) and its SIDs 34 characters; the store holds 64 and 255.
    One longer failed the insert on PostgreSQL with a 500 that Twilio retried."""
    channels = channels_config(telegram_api="http://127.0.0.1:9", slack_api="http://127.0.0.1:9/api/",
                               discord_api="http://127.0.0.1:9/api/v10", twilio_api="http://127.0.0.1:9")
    async with running_app(tmp_path, bots=[{"name": "acme", "channels": channels}], start_worker=False,
                           database_url=database_url) as (client, services):
        answers = {"error-code": await client.post(PATHS["whatsapp"], **_receipt("SM" + "1" * 32, "6" * 65)),
                   "sid": await client.post(PATHS["whatsapp"], **_receipt("X" + LONG, "63016"))}
        async with services.sessions() as session:
            stored = (await session.execute(select(func.count()).select_from(EarlyReceipt))).scalar_one()
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(answers, 400), \
        {name: r.text for name, r in answers.items()}
    assert "error_code is 65 characters" in answers["error-code"].json()["error"]
    assert "message id is 301 characters" in answers["sid"].json()["error"]
    assert stored == 0


def _slack_dm_edit(channel: str) -> dict:
    ts = f"{int(time.time())}.000100"  # a recent DM: its edit is the question when it was never stored
    body = {"token": "legacy", "team_id": "T111", "api_app_id": "A111", "type": "event_callback",
            "event_id": "Ev0EDIT01", "event_time": int(time.time()),
            "authorizations": [{"team_id": "T111", "user_id": "UBOT", "is_bot": True}],
            "event": {"type": "message", "subtype": "message_changed", "channel": channel, "channel_type": "im",
                      "message": {"type": "message", "user": "U0CUSTOMER", "text": "hi, edited", "ts": ts,
                                  "edited": {"user": "U0CUSTOMER", "ts": f"{int(time.time())}.000200"}},
                      "previous_message": {"type": "message", "user": "U0CUSTOMER", "text": "hi", "ts": ts}}}
    return slack_request(json.dumps(body).encode())


@pytest.mark.asyncio
async def test_an_edit_whose_first_stored_key_is_longer_than_its_column_is_400_and_stores_nothing(tmp_path,
                                                                                                 database_url):
    """An edit of a private message never stored is stored under `edit-of:{chat}:{message id}`, longer than
    the chat id itself: a chat of 240 characters passed the id check, and that key failed the insert on
    PostgreSQL with a 500 the platform retried (SQLite kept it whole)."""
    channels = channels_config(telegram_api="http://127.0.0.1:9", slack_api="http://127.0.0.1:9/api/",
                               discord_api="http://127.0.0.1:9/api/v10", twilio_api="http://127.0.0.1:9")
    async with running_app(tmp_path, bots=[{"name": "acme", "channels": channels}], start_worker=False,
                           database_url=database_url) as (client, services):
        # (Telegram's delivery id holds the chat id already, checked as it is; Discord's edits come by its gateway,
        # through the inbox's same check.)
        answers = {"slack": await client.post(PATHS["slack"], **_slack_dm_edit("D" + "9" * 239))}
        async with services.sessions() as session:
            stored = (await session.execute(select(func.count()).select_from(Message))).scalar_one()
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(answers, 400), \
        {name: r.text for name, r in answers.items()}
    assert all(f"longer than the {ID_MAX_CHARS}" in r.json()["error"] for r in answers.values()), \
        {name: r.text for name, r in answers.items()}
    assert stored == 0
