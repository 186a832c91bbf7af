"""The WhatsApp (Twilio) test rig: the real app against the fake Twilio (`env`), signed webhooks, and the
steps the WhatsApp tests share (an answered question, a closed 24-hour window, a Content template)."""

from __future__ import annotations

from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

from sqlalchemy import update
from twilio.request_validator import RequestValidator

from gateway.models import utcnow
from storage.models import Message
from tests.fakes.twilio_api import FakeTwilio
from tests.gateway_channels.conftest import QUESTION, gateway_app, get_message, settled_chat, store_reply, wait_until

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "twilio-auth-token-for-tests"
BOT_NUMBER = "+14155238886"
PUBLIC_URL = "https://gw.example.com"
URL = "/webhooks/acme/whatsapp"


@asynccontextmanager
async def whatsapp_app(tmp_path: Path, *, database_url: str | None = None):
    """The app with bot `acme` on WhatsApp against a fake Twilio: (client, services, fake); on SQLite unless
    `database_url` names another database."""
    fake = FakeTwilio(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()
    channels = {"whatsapp": {"account_sid": "${WA_SID}", "auth_token": "${WA_TOKEN}", "from_number": BOT_NUMBER,
                             "public_url": PUBLIC_URL, "api_base": fake.base_url}}
    try:
        async with gateway_app(tmp_path, channels=channels, database_url=database_url,
                               env={"WA_SID": ACCOUNT_SID, "WA_TOKEN": AUTH_TOKEN}) as (client, services):
            yield client, services, fake
    finally:
        fake.stop()


def inbound(sid: str, phone: str, body: str = QUESTION, **extra: str) -> dict[str, str]:
    return {"MessageSid": sid, "SmsMessageSid": sid, "AccountSid": ACCOUNT_SID, "From": f"whatsapp:{phone}",
            "To": f"whatsapp:{BOT_NUMBER}", "Body": body, "NumMedia": "0", "WaId": phone.lstrip("+"),
            "ProfileName": "Ann", "SmsStatus": "received", **extra}


def status(sid: str, value: str, **extra: str) -> dict[str, str]:
    return {"MessageSid": sid, "MessageStatus": value, "AccountSid": ACCOUNT_SID,
            "To": "whatsapp:+15550000000", "From": f"whatsapp:{BOT_NUMBER}", **extra}


async def post(client, form: dict[str, str], *, signature: str | None = "valid", token: str = AUTH_TOKEN):
    headers = {"content-type": "application/x-www-form-urlencoded"}
    if signature == "valid":
        # Twilio signs the public URL from config, not the URL the proxy forwarded to us.
        headers["X-Twilio-Signature"] = RequestValidator(token).compute_signature(PUBLIC_URL + URL, form)
    elif signature is not None:
        headers["X-Twilio-Signature"] = signature
    return await client.post(URL, content=urlencode(form).encode(), headers=headers)


def sent_to(fake: FakeTwilio, phone: str):
    return [r for r in fake.delivered if r.form.get("To") == f"whatsapp:{phone}"]


async def status_is(services, message_id: int, value: str) -> bool:
    return (await get_message(services, message_id)).status == value


async def answered(client, services, fake, sid: str, phone: str) -> tuple[int, int, str]:
    """One answered question: (conversation id, reply id, reply SID)."""
    await post(client, inbound(sid, phone))
    [sent] = await wait_until(lambda: sent_to(fake, phone), what="the answer")
    reply = (await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}"))[1]
    return reply.conversation_id, reply.id, sent.sid


async def leave_window(services, conversation_id: int) -> None:
    """The customer's messages in the conversation (to its bot) written 25 hours ago."""
    async with services.sessions() as session, session.begin():
        await session.execute(update(Message).where(Message.conversation_id == conversation_id,
                                                    Message.direction == "in")
                              .values(created_at=utcnow() - timedelta(hours=25)))



@contextmanager
def content_template(services, content_sid: str, *, bot: str = "acme"):
    """The bot's WhatsApp channel with a Content template (`content_sid`) while the block runs."""
    adapter = services.adapters[(bot, "whatsapp")]
    original = adapter.settings
    adapter.settings = original.model_copy(update={"content_sid": content_sid})
    try:
        yield
    finally:
        adapter.settings = original


async def held_behind_template(client, services, fake, phone: str, *, sids: str, text: str, content_sid: str) -> int:
    """A question of `phone`'s answered, their 24-hour window closed, then an operator's `text` sent as the
    Content template alone (its words wait for the customer's next message); returns the conversation id."""
    conversation_id, _, _ = await answered(client, services, fake, "SM" + sids * 16, phone)
    await leave_window(services, conversation_id)
    with content_template(services, content_sid):
        reply_id = await store_reply(services, conversation_id=conversation_id, text=text)
        assert await services.outbox.deliver(reply_id) == "sent"
    return conversation_id
