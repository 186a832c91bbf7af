"""A send whose outcome Twilio left unknown (a 500 after the fact, a lost answer) is looked up in
Twilio's Messages list before it is given up or sent again: found, it went; not found after an answered
error, it is sent again. Real SDK against the local fake Twilio."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from channels.whatsapp import WhatsAppAdapter
from gateway.errors import ChannelSendError
from gateway.models import OutboundMessage
from tests.channels.test_whatsapp import CUSTOMER, _settings
from tests.channels.whatsapp_helpers import fake_fixture, live_fixture  # noqa: F401 - `fake`, `live` fixtures
from tests.fakes.twilio_api import FakeTwilio, Reply

SENDER = "whatsapp:+15550001111"


async def _send(adapter: WhatsAppAdapter, text: str = "hello") -> list[str]:
    return await adapter.send(OutboundMessage(conversation=CUSTOMER, text=text))


async def test_a_500_after_twilio_created_the_message_is_a_send_not_a_resend(
    live: WhatsAppAdapter, fake: FakeTwilio
) -> None:
    fake.script(Reply(status=500, code=20500, created=True))
    ids = await _send(live)
    (created,) = fake.delivered
    assert ids == [created.sid]
    (listing,) = fake.lists
    assert (listing.form["To"], listing.form["From"]) == (CUSTOMER.chat, SENDER)


async def test_a_500_that_created_nothing_is_retried_by_the_outbox(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    fake.script(Reply(status=500, code=20500))
    with pytest.raises(ChannelSendError) as info:
        await _send(live)
    assert not info.value.permanent and not fake.delivered and len(fake.lists) == 1
    ids = await _send(live)  # the outbox's next try
    assert ids == [fake.delivered[0].sid] and len(fake.delivered) == 1


async def test_an_answer_lost_after_twilio_took_the_message_is_found(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    fake.script(Reply(drop=True))
    ids = await _send(live)
    assert ids == [fake.delivered[0].sid] and len(fake.delivered) == 1
    assert [r.method for r in fake.requests] == ["POST", "GET"]


async def test_a_lost_answer_whose_lookup_fails_stays_unknown_and_is_never_resent(
    live: WhatsAppAdapter, fake: FakeTwilio
) -> None:
    fake.script(Reply(drop=True))
    fake.fail_lists(1)
    with pytest.raises(ChannelSendError) as info:
        await _send(live)
    assert "outcome unknown" in str(info.value) and info.value.permanent
    assert len(fake.delivered) == 1


async def test_the_same_text_sent_before_the_attempt_is_not_taken_for_it(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    fake.seed(to=CUSTOMER.chat, from_=SENDER, body="hello", created_at=datetime.now(timezone.utc) - timedelta(hours=1))
    fake.seed(to=CUSTOMER.chat, from_=SENDER, body="something else", created_at=datetime.now(timezone.utc))
    fake.script(Reply(status=502, code=20500))
    with pytest.raises(ChannelSendError) as info:
        await _send(live)
    assert not info.value.permanent  # nothing of this attempt was found: the outbox sends it again


async def test_a_503_is_retried_in_place_without_a_lookup(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    fake.script(Reply(status=503, code=20503, retry_after=0))
    ids = await _send(live)
    assert ids == [fake.delivered[0].sid] and not fake.lists  # Twilio's 503 processed nothing


async def test_a_template_is_not_looked_up(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    fake.script(Reply(status=500, code=20500, created=True))
    with pytest.raises(ChannelSendError):
        await live.send_template(CUSTOMER, content_sid="HX" + "0" * 32)
    assert not fake.lists  # Twilio renders a template's Body: there is nothing to match it by


async def test_a_reply_with_the_text_of_one_just_sent_is_not_taken_for_it(live: WhatsAppAdapter, fake: FakeTwilio) -> None:
    # A short reply repeats ("Thanks!", a canned notice): the first went out; the second met a 502 that created
    # nothing. The list showed the first, created within CLOCK_SLACK, so the second was reported sent with the
    # first's SID (its receipts the first's) and the customer never had it; a SID Twilio gave a send is no other's.
    (first,) = await _send(live, "Thanks!")
    fake.script(Reply(status=502, code=20500))
    with pytest.raises(ChannelSendError) as info:
        await _send(live, "Thanks!")
    assert not info.value.permanent and len(fake.lists) == 1  # looked up, not found: the outbox sends it again
    second = await _send(live, "Thanks!")
    assert second != [first] and len(fake.delivered) == 2


async def test_a_create_twilio_never_answers_ends_at_the_request_timeout_and_is_looked_up(
    live: WhatsAppAdapter, fake: FakeTwilio, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Twilio's async client hands aiohttp timeout=None, which is no timeout at all: a create Twilio took and
    # never answered held the send (and its worker slot) until the connection died, and the lookup after it too.
    import asyncio

    from channels import whatsapp_http

    monkeypatch.setattr(whatsapp_http, "REQUEST_TIMEOUT_S", 0.5)
    fake.script(Reply(delay=5, created=False))
    ids = await asyncio.wait_for(_send(live), timeout=3)
    assert ids == [fake.delivered[0].sid] and len(fake.delivered) == 1 and len(fake.lists) == 1


async def test_a_connection_to_twilio_that_times_out_opening_is_retried_not_left_unknown(fake: FakeTwilio) -> None:
    # With a timeout on every request, one that runs out while the connection is still being opened (Twilio
    # unreachable, its packets dropped) is aiohttp's ConnectionTimeoutError: nothing went out, so it is retried
    # as a refused connection is, not reported 'outcome unknown' and never sent.
    import aiohttp

    from channels.whatsapp_http import HeaderAwareHttpClient

    class FirstConnectTimesOut(HeaderAwareHttpClient):
        calls = 0

        async def request(self, *args, **kwargs):
            FirstConnectTimesOut.calls += 1
            if FirstConnectTimesOut.calls == 1:
                raise aiohttp.ConnectionTimeoutError("Connection timeout to host")
            return await super().request(*args, **kwargs)

    adapter = WhatsAppAdapter("support", _settings(fake.base_url), backoff=0.01, http=FirstConnectTimesOut())
    try:
        ids = await _send(adapter)
    finally:
        await adapter.stop()
    assert ids == [fake.delivered[0].sid] and len(fake.delivered) == 1 and not fake.lists
