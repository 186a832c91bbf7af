"""The WhatsApp (Twilio) adapter sending through the real SDK against a local fake Twilio."""

from __future__ import annotations

import json
import socket

import pytest

from channels.whatsapp import MAX_LENGTH, WhatsAppAdapter
from gateway.errors import ChannelSendError, RecipientUnreachable
from gateway.models import Citation, ConversationRef, OutboundMessage
from gateway.observability.logs import configure_logging
from tests.channels.test_whatsapp import ACCOUNT_SID, CUSTOMER, WEBHOOK_URL, _settings
from tests.channels.whatsapp_helpers import fake_fixture, live_fixture  # noqa: F401 - `fake`, `live` fixtures
from tests.fakes.twilio_api import FakeTwilio, Reply

# -- sending through the real SDK -----------------------------------------------------------


async def test_whatsapp_send_posts_to_the_messages_api(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    ids = await live.send(OutboundMessage(conversation=CUSTOMER, text="Hello **there**"))
    (request,) = fake.requests
    assert request.authorized
    assert request.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"
    assert request.form["To"] == "whatsapp:+491511234567"
    assert request.form["From"] == "whatsapp:+15550001111"
    assert request.form["Body"] == "Hello *there*"
    assert request.form["StatusCallback"] == WEBHOOK_URL
    assert ids == [request.sid]


async def test_whatsapp_send_replies_by_sms_to_an_sms_sender(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    await live.send(OutboundMessage(conversation=ConversationRef(channel="whatsapp", chat="+12345"), text="hi"))
    assert (fake.requests[0].form["To"], fake.requests[0].form["From"]) == ("+12345", "+15550001111")


async def test_whatsapp_send_renders_citations_as_links(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    cites = (Citation(source="refunds.md", title="Refund policy", url="https://help.example.com/refunds"),
             Citation(source="notes.md", title="Internal notes"))
    await live.send(OutboundMessage(conversation=CUSTOMER, text="Within 30 days [1].", citations=cites))
    body = fake.requests[0].form["Body"]
    assert body.endswith("Sources:\n1. Refund policy (https://help.example.com/refunds)\n2. Internal notes")


async def test_whatsapp_send_splits_long_answers_at_1600(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    paragraphs = [f"Paragraph {i}. " + "Some helpful sentence about refunds. " * 12 for i in range(12)]
    ids = await live.send(OutboundMessage(conversation=CUSTOMER, text="\n\n".join(paragraphs)))
    bodies = [r.form["Body"] for r in fake.delivered]
    assert len(bodies) == len(ids) > 1
    assert all(len(b) <= MAX_LENGTH for b in bodies)
    assert all(b.startswith("Paragraph") for b in bodies)  # cut on paragraph boundaries
    assert "".join(bodies).count("Paragraph") == 12


async def test_whatsapp_send_creates_each_part_only_after_the_one_before_was_accepted(
    live: WhatsAppAdapter, fake: FakeTwilio
) -> None:
    # Twilio does not promise to deliver messages in the order they were created, let alone created at
    # once: a part is created only once Twilio accepted the one before (its answer held 0.3 s here).
    fake.script(Reply(delay=0.3), Reply(delay=0.3), Reply(delay=0.3))
    paragraphs = [f"Paragraph {i}. " + "Some helpful sentence about refunds. " * 12 for i in range(12)]
    await live.send(OutboundMessage(conversation=CUSTOMER, text="\n\n".join(paragraphs)))
    created = [r.created_at for r in fake.delivered]
    assert len(created) >= 3
    assert all((later - earlier).total_seconds() >= 0.3 for earlier, later in zip(created, created[1:]))
    assert not any("(1/" in r.form["Body"] for r in fake.delivered)  # no part markers, as on every channel


async def test_whatsapp_send_retries_429_once_then_delivers_exactly_once(
    live: WhatsAppAdapter, fake: FakeTwilio
) -> None:
    fake.script(Reply(status=429, code=20429, message="Too Many Requests", retry_after=0.05))
    ids = await live.send(OutboundMessage(conversation=CUSTOMER, text="hello"))
    assert [r.status for r in fake.requests] == [429, 201]
    assert len(fake.delivered) == 1 and ids == [fake.delivered[0].sid]


@pytest.mark.parametrize("asked", [float("nan"), float("inf")], ids=["nan", "inf"])
async def test_whatsapp_429_naming_no_finite_wait_is_waited_as_one_second(
    live: WhatsAppAdapter, fake: FakeTwilio, asked: float
) -> None:
    # Retry-After was read with float() alone: "nan" slipped past the in-place wait's bound and went to the
    # outbox as the reply's retry_after, whose timedelta(seconds=nan) raised; "inf" was no wait to take either.
    fake.script(Reply(status=429, code=20429, message="Too Many Requests", retry_after=asked))
    ids = await live.send(OutboundMessage(conversation=CUSTOMER, text="hello"))
    assert [r.status for r in fake.requests] == [429, 201]
    assert len(fake.delivered) == 1 and ids == [fake.delivered[0].sid]


async def test_whatsapp_logs_name_the_customer_by_the_last_digits_only(
    live: WhatsAppAdapter, fake: FakeTwilio, capsys
) -> None:
    fake.script(Reply(status=429, code=20429, message="Too Many Requests", retry_after=0.05))
    configure_logging(level="INFO", fmt="json")  # as serve logs: through the shared redaction
    await live.send(OutboundMessage(conversation=CUSTOMER, text="hello"))
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    chats = [line["chat"] for line in lines if line["event"] in ("whatsapp.send_retry", "whatsapp.sent")]
    assert chats == ["whatsapp:+…" + CUSTOMER.chat[-4:]] * 2  # send_retry, sent
    assert CUSTOMER.chat.removeprefix("whatsapp:+") not in repr(lines)


async def test_whatsapp_send_gives_up_after_bounded_retries(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    fake.script(*[Reply(status=429, code=20429, retry_after=0)] * 5)
    with pytest.raises(ChannelSendError) as info:
        await live.send(OutboundMessage(conversation=CUSTOMER, text="hello"))
    assert len(fake.requests) == live.max_attempts
    assert info.value.retry_after == 0 and not info.value.permanent
    assert not fake.delivered


async def test_whatsapp_send_does_not_resend_parts_that_went_through(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    long_text = "\n\n".join("Sentence number %d is here. " % i * 40 for i in range(3))
    fake.script(Reply(), Reply(status=400, code=21617, message="body too long"))
    with pytest.raises(ChannelSendError) as info:
        await live.send(OutboundMessage(conversation=CUSTOMER, text=long_text))
    assert info.value.permanent
    assert info.value.sent_ids == [fake.delivered[0].sid]  # type: ignore[attr-defined]
    assert len(fake.requests) == 2  # a 4xx is not retried
    # The worker retries the same reply later: only the parts not yet delivered are sent.
    ids = await live.send(OutboundMessage(conversation=CUSTOMER, text=long_text))
    bodies = [r.form["Body"] for r in fake.delivered]
    assert len(bodies) == len(set(bodies)) == len(ids)
    assert ids[0] == fake.delivered[0].sid


async def test_whatsapp_send_outside_window_is_unreachable(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    fake.script(Reply(status=400, code=63016, message="outside the allowed window"))
    with pytest.raises(RecipientUnreachable):
        await live.send(OutboundMessage(conversation=CUSTOMER, text="late answer"))
    assert len(fake.requests) == 1


async def test_whatsapp_send_template_uses_content_api(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    ids = await live.send_template(CUSTOMER, content_sid="HX" + "0" * 32, variables={"1": "Ana", 2: "refund"})
    form = fake.delivered[0].form
    assert form["ContentSid"] == "HX" + "0" * 32
    assert json.loads(form["ContentVariables"]) == {"1": "Ana", "2": "refund"}
    assert "Body" not in form and ids == [fake.delivered[0].sid]


async def test_whatsapp_send_with_wrong_credentials_is_permanent(fake: FakeTwilio) -> None:
    adapter = WhatsAppAdapter("support", _settings(fake.base_url, auth_token="not-the-token"))
    try:
        with pytest.raises(ChannelSendError) as info:
            await adapter.send(OutboundMessage(conversation=CUSTOMER, text="hi"))
    finally:
        await adapter.stop()
    assert info.value.permanent and not fake.requests[0].authorized


async def test_whatsapp_send_retries_then_fails_when_twilio_is_unreachable() -> None:
    with socket.socket() as sock:  # a port that was just free, so nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = WhatsAppAdapter("support", _settings(f"http://127.0.0.1:{port}"), backoff=0.01)
    try:
        with pytest.raises(ChannelSendError) as info:
            await adapter.send(OutboundMessage(conversation=CUSTOMER, text="hi"))
    finally:
        await adapter.stop()
    assert "unreachable" in str(info.value) and not info.value.permanent
