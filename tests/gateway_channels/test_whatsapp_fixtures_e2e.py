"""Every third-party Twilio webhook (tests/fixtures/payloads/whatsapp) through the real app: signed over
the public URL, then the inbox, the worker and the real Twilio client against the fake. A message gets
exactly one reply, sent back the way it came (WhatsApp or SMS form); a status callback or an empty
request is acknowledged with empty TwiML and leaves no message behind.

The fixtures share their SIDs and senders, so each gets its own (the idempotency key and the chat would
otherwise make them one conversation); everything else is sent as captured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.english_replies import TEXT_ONLY_REPLY
from tests.gateway_channels.conftest import count_messages, settle, settled_chat, wait_until
from tests.gateway_channels.whatsapp_rig import post

ASYNC = pytest.mark.asyncio(loop_scope="module")  # the module's one app (not on the sync table check)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "whatsapp"
FIXTURE_FILES = sorted(FIXTURES.rglob("*.json"))
ANSWERED = "answered"
SILENT = "silent"
EXPECTED = {  # file name -> an answer in the sender's chat, or nothing
    "inbound_quick_reply_button.json": ANSWERED,
    "inbound_quote_reply.json": ANSWERED,
    "inbound_text_message.json": ANSWERED,
    "status_callback_delivered.json": SILENT,  # of no reply of ours: kept aside, no message
    "status_callback_failed.json": SILENT,
    "empty_body.json": SILENT,  # no Body field and no media: nothing was said
    "location_message.json": ANSWERED,
    "null_bytes_in_body.json": ANSWERED,
    "sms_with_media_attachment.json": ANSWERED,  # its Body is the question; the image is kept
    "sms_with_multiple_media_attachments.json": ANSWERED,
    "whatsapp_brazil_number_profile_name_nonascii.json": ANSWERED,
    "whatsapp_brazil_old_format_number.json": ANSWERED,
    "whatsapp_bsuid_only_sender.json": ANSWERED,
    "whatsapp_ctwa_referral.json": ANSWERED,
}


def _own_ids(form: dict[str, str], index: int) -> dict[str, str]:
    """The form with SIDs and a sender of its own, in the sender's own form (WhatsApp or SMS, number or BSUID)."""
    sid = f"SM{index:032d}"
    form = dict(form) | {key: sid for key in ("MessageSid", "SmsSid", "SmsMessageSid") if key in form}
    if "MessageStatus" not in form:
        form["From"] = f"{form['From']}{index:03d}"
    return form


def test_whatsapp_fixture_table_covers_every_fixture_file() -> None:
    assert {f.name for f in FIXTURE_FILES} == set(EXPECTED)


@ASYNC
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
async def test_whatsapp_every_fixture_is_answered_or_acknowledged(whatsapp_env, path: Path):
    client, services, fake = whatsapp_env
    form = _own_ids(json.loads(path.read_text(encoding="utf-8")), FIXTURE_FILES.index(path))
    before = await count_messages(services, channel="whatsapp")
    response = await post(client, form)
    assert response.status_code == 200 and response.text.endswith("<Response/>"), response.text
    sender = form["From"]
    to_sender = lambda: [r for r in fake.delivered if r.form.get("To") == sender]  # noqa: E731
    if EXPECTED[path.name] == SILENT:
        await settle(services=services)
        assert await count_messages(services, channel="whatsapp") == before
        assert to_sender() == []
        return
    [sent] = await wait_until(to_sender, what=f"the reply to {path.name}")
    inbound, out = await settled_chat(services, channel="whatsapp", chat=sender)
    assert (inbound.status, out.status) == ("done", "sent")
    assert sent.form["Body"] and sent.form["Body"] != TEXT_ONLY_REPLY
    # Back the way it came: a WhatsApp sender from the WhatsApp number, an SMS sender from the plain one.
    assert sent.form["From"].startswith("whatsapp:") == sender.startswith("whatsapp:")
    if int(form.get("NumMedia", "0")):
        assert len(inbound.attachments) == int(form["NumMedia"])
    await settle(services=services)
    assert len(to_sender()) == 1
