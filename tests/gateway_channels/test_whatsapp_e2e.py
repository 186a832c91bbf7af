"""WhatsApp (Twilio) through the real app: signed form webhooks, the 24-hour window, status callbacks."""

from __future__ import annotations

import asyncio

import pytest

from tests.english_replies import DEFAULT_GREETING, TEXT_ONLY_REPLY
from tests.fakes.twilio_api import Reply
from tests.gateway_channels.conftest import (
    count_messages,
    deliveries,
    early_receipts,
    get_message,
    messages_in_chat,
    send_failures,
    settle,
    settled_chat,
    store_reply,
    wait_until,
)
from tests.gateway_channels.whatsapp_rig import (
    AUTH_TOKEN,
    BOT_NUMBER,
    PUBLIC_URL,
    URL,
    answered,
    content_template,
    held_behind_template,
    inbound,
    leave_window,
    post,
    sent_to,
    status,
    status_is,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_whatsapp_question_is_answered_once_with_citations(whatsapp_env):
    client, services, fake = whatsapp_env
    response = await post(client, inbound("SM" + "a" * 32, "+15550000001"))
    # Twilio reads the answer as TwiML: an empty <Response/> sends nothing back (nor logs error 12300).
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/xml")
    assert response.text.endswith("<Response/>")
    [sent] = await wait_until(lambda: sent_to(fake, "+15550000001"), what="the reply at the fake Twilio")
    assert "$" in sent.form["Body"] and "Sources:" in sent.form["Body"]
    assert sent.form["From"] == f"whatsapp:{BOT_NUMBER}"
    assert sent.form["StatusCallback"] == PUBLIC_URL + URL
    stored = await settled_chat(services, channel="whatsapp", chat="whatsapp:+15550000001")
    assert [(m.direction, m.status) for m in stored] == [("in", "done"), ("out", "sent")]
    assert [d.provider_id for d in await deliveries(services, stored[1].id)] == [sent.sid]


@pytest.mark.parametrize(("phone", "body"), [("+15550000090", ""), ("+15550000091", "   ")], ids=["empty", "spaces"])
async def test_whatsapp_blank_message_gets_the_greeting(whatsapp_env, phone, body):
    # As a bare mention does on Telegram and Slack: the person is there but asked nothing yet.
    client, services, fake = whatsapp_env
    response = await post(client, inbound("SM" + phone[-2:] * 16, phone, body))
    assert response.status_code == 200
    [sent] = await wait_until(lambda: sent_to(fake, phone), what="the greeting")
    assert sent.form["Body"] == DEFAULT_GREETING


async def test_whatsapp_duplicate_and_concurrent_deliveries_reply_once(whatsapp_env):
    client, services, fake = whatsapp_env
    form = inbound("SM" + "b" * 32, "+15550000002")
    results = await asyncio.gather(*(post(client, form) for _ in range(6)))
    assert all(r.status_code == 200 for r in results)
    await wait_until(lambda: sent_to(fake, "+15550000002"), what="the reply")
    await settle(services=services)
    assert len(sent_to(fake, "+15550000002")) == 1
    stored = await settled_chat(services, channel="whatsapp", chat="whatsapp:+15550000002")
    assert [m.direction for m in stored] == ["in", "out"]


@pytest.mark.parametrize("signature, token", [(None, AUTH_TOKEN), ("valid", "another-token"), ("bm90IGl0", AUTH_TOKEN)],
                         ids=["missing", "wrong-key", "garbage"])
async def test_whatsapp_bad_signature_is_401_and_stores_nothing(whatsapp_env, signature, token):
    client, services, fake = whatsapp_env
    before = await count_messages(services, channel="whatsapp")
    response = await post(client, inbound("SM" + "c" * 32, "+15550000003"), signature=signature, token=token)
    assert response.status_code == 401
    await settle(0.3, services=services)
    assert await count_messages(services, channel="whatsapp") == before
    assert sent_to(fake, "+15550000003") == []


async def test_whatsapp_media_without_text_gets_text_only_reply(whatsapp_env):
    client, services, fake = whatsapp_env
    form = inbound("SM" + "d" * 32, "+15550000004", body="", NumMedia="1",
                   MediaUrl0="https://api.twilio.com/2010-04-01/Accounts/AC/Messages/MM1/Media/ME1",
                   MediaContentType0="image/jpeg")
    assert (await post(client, form)).status_code == 200
    [sent] = await wait_until(lambda: sent_to(fake, "+15550000004"), what="the text-only reply")
    assert sent.form["Body"] == TEXT_ONLY_REPLY
    first = (await messages_in_chat(services, channel="whatsapp", chat="whatsapp:+15550000004"))[0]
    assert first.attachments[0]["url"].endswith("/Media/ME1") and first.attachments[0]["kind"] == "image"


async def test_whatsapp_media_twilio_could_not_fetch_gets_the_text_only_reply(whatsapp_env):
    # NumMedia=1 and no MediaUrl0: stored with nothing in it, the photo was answered with the greeting.
    client, services, fake = whatsapp_env
    form = inbound("MM" + "d5" * 16, "+15550000005", body="", NumMedia="1")
    assert (await post(client, form)).status_code == 200
    [sent] = await wait_until(lambda: sent_to(fake, "+15550000005"), what="the text-only reply")
    assert sent.form["Body"] == TEXT_ONLY_REPLY
    first = (await messages_in_chat(services, channel="whatsapp", chat="whatsapp:+15550000005"))[0]
    assert [a["kind"] for a in first.attachments] == ["other"]


async def test_whatsapp_status_callbacks_update_the_reply_and_ignore_late_sent(whatsapp_env):
    client, services, fake = whatsapp_env
    _, reply_id, sid = await answered(client, services, fake, "SM" + "e" * 32, "+15550000005")
    acknowledged = await post(client, status(sid, "delivered"))
    assert acknowledged.status_code == 200 and acknowledged.text.endswith("<Response/>")
    assert (await get_message(services, reply_id)).status == "delivered"
    assert (await post(client, status(sid, "sent"))).status_code == 200  # late, out of order
    assert (await get_message(services, reply_id)).status == "delivered"
    assert [d.status for d in await deliveries(services, reply_id)] == ["delivered"]
    await post(client, status(sid, "read"))
    assert (await get_message(services, reply_id)).status == "read"


async def test_whatsapp_failed_status_callback_records_the_error_code(whatsapp_env):
    client, services, fake = whatsapp_env
    _, reply_id, sid = await answered(client, services, fake, "SM" + "f" * 32, "+15550000006")
    await post(client, status(sid, "undelivered", ErrorCode="30008"))
    failed = await get_message(services, reply_id)
    assert failed.status == "failed" and failed.error == "provider error 30008"
    [part] = await deliveries(services, reply_id)
    assert (part.status, part.error_code) == ("failed", "30008")


async def test_whatsapp_status_callback_before_the_send_is_recorded_is_kept_and_applied(whatsapp_env):
    client, services, fake = whatsapp_env
    sid = "SM" + "9" * 32
    fake.script(Reply(sid=sid))  # the reply will get this SID
    # Twilio can call back before the outbox has written down the send: the receipt is parked...
    assert (await post(client, status(sid, "delivered"))).status_code == 200
    assert await early_receipts(services) == [(sid, "delivered")]
    _, reply_id, sent_sid = await answered(client, services, fake, "SM" + "8" * 32, "+15550000088")
    assert sent_sid == sid
    # ...and adopted once the send is recorded.
    await wait_until(lambda: status_is(services, reply_id, "delivered"), what="the parked receipt applied")
    assert [d.status for d in await deliveries(services, reply_id)] == ["delivered"]
    assert await early_receipts(services) == []


async def test_whatsapp_bad_signature_on_status_callback_changes_nothing(whatsapp_env):
    client, services, fake = whatsapp_env
    _, reply_id, sid = await answered(client, services, fake, "SM" + "1" * 32, "+15550000007")
    assert (await post(client, status(sid, "failed", ErrorCode="30008"), signature="bm9wZQ==")).status_code == 401
    assert (await get_message(services, reply_id)).status == "sent"


async def test_whatsapp_reply_outside_the_window_without_template_fails_visibly(whatsapp_env):
    client, services, fake = whatsapp_env
    conversation_id, _, _ = await answered(client, services, fake, "SM" + "2" * 32, "+15550000008")
    failures_before = await send_failures(client, "whatsapp")
    await leave_window(services, conversation_id)
    reply_id = await store_reply(services, conversation_id=conversation_id, text="Your order shipped.")
    assert await services.outbox.deliver(reply_id) == "failed"
    failed = await get_message(services, reply_id)
    assert "outside the 24-hour window" in failed.error and failed.attempts == 1
    assert len(sent_to(fake, "+15550000008")) == 1  # only the earlier in-window answer
    assert await send_failures(client, "whatsapp") == failures_before + 1


async def test_whatsapp_reply_outside_the_window_uses_the_content_template(whatsapp_env):
    client, services, fake = whatsapp_env
    conversation_id, _, _ = await answered(client, services, fake, "SM" + "3" * 32, "+15550000009")
    await leave_window(services, conversation_id)
    with content_template(services, "HX" + "9" * 32):
        reply_id = await store_reply(services, conversation_id=conversation_id, text="Your order shipped.")
        assert await services.outbox.deliver(reply_id) == "sent"
    template = sent_to(fake, "+15550000009")[-1]
    assert template.form["ContentSid"] == "HX" + "9" * 32 and "Body" not in template.form
    sent = await get_message(services, reply_id)
    assert sent.meta["template"] == "HX" + "9" * 32
    assert [d.provider_id for d in await deliveries(services, reply_id)] == [template.sid]


async def test_whatsapp_63016_receipt_sends_the_template_once_in_the_replys_place(whatsapp_env):
    # Twilio accepts a free-form message and WhatsApp refuses it later: 63016 comes in a status callback.
    client, services, fake = whatsapp_env
    _, reply_id, sid = await answered(client, services, fake, "SM" + "6" * 32, "+15550000012")
    with content_template(services, "HX" + "7" * 32):
        assert (await post(client, status(sid, "undelivered", ErrorCode="63016"))).status_code == 200
        services.worker.notify()
        template = (await wait_until(lambda: [r for r in sent_to(fake, "+15550000012") if "ContentSid" in r.form],
                                     what="the template"))[0]
        await wait_until(lambda: status_is(services, reply_id, "sent"), what="the reply recorded as sent")
        # A second refusal (a late copy of the callback) sends nothing more.
        await post(client, status(sid, "failed", ErrorCode="63016"))
        await settle(services=services)
    assert [r.form.get("ContentSid") for r in sent_to(fake, "+15550000012")] == [None, "HX" + "7" * 32]
    reply = await get_message(services, reply_id)
    assert reply.meta["template"] == "HX" + "7" * 32 and reply.meta["window_closed"] == [sid]
    assert [d.provider_id for d in await deliveries(services, reply_id)] == [template.sid]
    await post(client, status(template.sid, "delivered"))
    assert (await get_message(services, reply_id)).status == "delivered"


async def test_whatsapp_63016_receipt_without_a_template_fails_saying_why(whatsapp_env):
    client, services, fake = whatsapp_env
    _, reply_id, sid = await answered(client, services, fake, "SM" + "7" * 32, "+15550000013")
    await post(client, status(sid, "undelivered", ErrorCode="63016"))
    services.worker.notify()
    await wait_until(lambda: status_is(services, reply_id, "failed"), what="the reply failed")
    await settle(services=services)
    failed = await get_message(services, reply_id)
    assert "outside the 24-hour window" in failed.error and "content_sid" in failed.error
    assert len(sent_to(fake, "+15550000013")) == 1  # nothing resent free-form


async def test_whatsapp_emoji_reply_is_split_within_twilios_utf16_limit(whatsapp_env):
    client, services, fake = whatsapp_env
    conversation_id, _, _ = await answered(client, services, fake, "SM" + "0" * 32, "+15550000014")
    text = " ".join(["Great news 🎉🎉"] * 400)  # an emoji is two UTF-16 units: Twilio counts it twice
    reply_id = await store_reply(services, conversation_id=conversation_id, text=text)
    assert await services.outbox.deliver(reply_id) == "sent"
    parts = sent_to(fake, "+15550000014")[1:]
    assert len(parts) >= 4 and all(len(p.form["Body"].encode("utf-16-le")) // 2 <= 1600 for p in parts)
    assert sum(p.form["Body"].count("🎉") for p in parts) == 800


async def test_whatsapp_long_reply_is_split_at_1600_with_plain_links(whatsapp_env):
    client, services, fake = whatsapp_env
    conversation_id, _, _ = await answered(client, services, fake, "SM" + "4" * 32, "+15550000010")
    text = "\n\n".join(f"Step {i}: " + "open the app and check the settings. " * 8 for i in range(14))
    reply_id = await store_reply(services, conversation_id=conversation_id, text=text, citations=[
        {"source": "help", "title": "Plans and pricing", "url": "https://help.example.com/plans"}])
    assert await services.outbox.deliver(reply_id) == "sent"
    parts = sent_to(fake, "+15550000010")[1:]
    assert len(parts) >= 2 and all(len(p.form["Body"]) <= 1600 for p in parts)
    body = "\n".join(p.form["Body"] for p in parts)
    assert all(body.count(f"Step {i}:") == 1 for i in range(14))
    assert "Plans and pricing (https://help.example.com/plans)" in body


async def test_whatsapp_twilio_rate_limit_is_retried_by_the_outbox(whatsapp_env):
    client, services, fake = whatsapp_env
    conversation_id, _, _ = await answered(client, services, fake, "SM" + "5" * 32, "+15550000011")
    # More 429s than the adapter retries in place: the outbox takes over with its own backoff.
    fake.script(*[Reply(status=429, code=20429, message="Too Many Requests", retry_after=0)] * 3)
    reply_id = await store_reply(services, conversation_id=conversation_id, text="One more thing.")
    services.outbox.backoff_s = 0.1
    try:
        assert await services.outbox.deliver(reply_id) == "retry"
        services.worker.notify()
        await wait_until(lambda: status_is(services, reply_id, "sent"), what="the retried send")
    finally:
        services.outbox.backoff_s = 2.0
    assert [p.form["Body"] for p in sent_to(fake, "+15550000011")].count("One more thing.") == 1


async def test_whatsapp_reply_sent_as_a_template_follows_as_text_once_the_customer_answers(whatsapp_env):
    # The template only says there is news; the operator's words must reach the customer once they write.
    client, services, fake = whatsapp_env
    phone = "+15550000025"
    await held_behind_template(client, services, fake, phone, sids="c1", text="Your refund was approved.",
                               content_sid="HX" + "5" * 32)
    await post(client, inbound("SM" + "c2" * 16, phone, "Continue"))  # the template's quick reply
    await wait_until(lambda: len(sent_to(fake, phone)) >= 4, what="the held reply and the answer")
    await post(client, inbound("SM" + "c3" * 16, phone))
    await wait_until(lambda: len(sent_to(fake, phone)) >= 5, what="the next answer")
    await settle(services=services)
    bodies = [r.form.get("Body") or r.form["ContentSid"] for r in sent_to(fake, phone)]
    assert bodies[1:3] == ["HX" + "5" * 32, "Your refund was approved."]
    assert bodies.count("Your refund was approved.") == 1 and len(bodies) == 5
