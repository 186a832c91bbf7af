"""A claim never strands a thread: release, explicit take-over, the stale-claim ping; and the operator
API's edges (auth before the body, JSON without a content type, who am I, newest messages first)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from sqlalchemy import update

from gateway.events import ESCALATIONS_TOPIC
from gateway.models import utcnow
from storage.models import Escalation, Message
from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")
TIMEOUT = timedelta(seconds=900)  # the bots' default claim_timeout_seconds


async def _open(client, session_id: str) -> tuple[int, int]:
    """A new escalation (the customer asks for a person); its id and conversation id."""
    response = await client.post("/v1/bots/acme/chat", json={"session_id": session_id, "text": "talk to a human"})
    conversation_id = response.json()["conversation_id"]
    rows = (await client.get("/v1/escalations?state=open", headers=auth("sam"))).json()["escalations"]
    return next(e["id"] for e in rows if e["conversation_id"] == conversation_id), conversation_id


async def _next_event(queue, kind: str) -> dict:
    while True:
        event = await asyncio.wait_for(queue.get(), 10)
        if event.get("type") == kind:
            return event


async def _kinds(client, escalation_id: int) -> list[str]:
    detail = (await client.get(f"/v1/escalations/{escalation_id}", headers=auth("sam"))).json()
    return [e["kind"] for e in detail["events"]]


async def test_claim_of_a_held_escalation_is_409_unless_take_over_then_announced(client):
    eid, _ = await _open(client, "rec-1")
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    plain = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"))
    assert plain.status_code == 409 and "already claimed by sam" in plain.json()["error"]
    explicit_no = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"), json={"take_over": False})
    assert explicit_no.status_code == 409
    for loose in ("yes", "true", 1):  # pydantic's lax bool took "yes" for a take-over
        vague = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"), json={"take_over": loose})
        assert vague.status_code == 422 and "take_over" in vague.text

    async with client.services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
        taken = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"), json={"take_over": True})
        event = await _next_event(queue, "taken_over")
    assert taken.status_code == 200 and taken.json()["operator"] == "kim" and taken.json()["state"] == "claimed"
    assert event["operator"] == "kim" and event["previous_operator"] == "sam" and event["escalation_id"] == eid

    # The previous holder is out; the new one answers and hands back.
    late = await client.post(f"/v1/escalations/{eid}/reply", headers=auth("sam"), json={"text": "still here"})
    assert late.status_code == 409 and "claimed by kim" in late.json()["error"]
    assert (await client.post(f"/v1/escalations/{eid}/reply", headers=auth("kim"),
                              json={"text": "Kim here, I've got this."})).status_code == 201
    assert (await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("kim"))).status_code == 200
    detail = (await client.get(f"/v1/escalations/{eid}", headers=auth("kim"))).json()
    taken_over = next(e for e in detail["events"] if e["kind"] == "taken_over")
    assert taken_over["actor"] == "kim" and "from sam" in taken_over["reason"]
    assert [e["kind"] for e in detail["events"]] == ["opened", "claimed", "taken_over", "resolved"]


async def test_release_by_the_holder_reopens_and_the_claim_timeout_counts_again(client):
    eid, conversation_id = await _open(client, "rec-2")
    async with client.services.sessions() as session, session.begin():
        await session.execute(update(Escalation).where(Escalation.id == eid)
                              .values(created_at=utcnow() - 2 * TIMEOUT))
    reminders = client.services.reminders
    assert eid in await reminders.run_once()  # unclaimed for too long: reminded once

    assert (await client.post(f"/v1/escalations/{eid}/release", headers=auth("sam"))).status_code == 409  # open
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    not_holder = await client.post(f"/v1/escalations/{eid}/release", headers=auth("kim"))
    assert not_holder.status_code == 409 and "claimed by sam" in not_holder.json()["error"]
    async with client.services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
        released = await client.post(f"/v1/escalations/{eid}/release", headers=auth("sam"),
                                     json={"reason": "end of my shift"})
        event = await _next_event(queue, "released")
    assert released.status_code == 200
    assert released.json()["state"] == "open" and released.json()["operator"] is None
    assert event["operator"] == "sam"
    detail = (await client.get(f"/v1/escalations/{eid}", headers=auth("kim"))).json()
    assert detail["conversation_state"] == "waiting"
    assert detail["events"][-1]["kind"] == "released" and detail["events"][-1]["reason"] == "end of my shift"

    # A new wait: not overdue now, reminded once when it is.
    assert eid not in await reminders.run_once()
    later = utcnow() + TIMEOUT + timedelta(seconds=5)
    assert eid in await reminders.run_once(now=later)
    assert eid not in await reminders.run_once(now=later + timedelta(seconds=1))
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"))).status_code == 200


async def test_stale_claim_pings_the_operators_once(client):
    eid, _ = await _open(client, "rec-3")
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    reminders = client.services.reminders
    later = utcnow() + TIMEOUT + timedelta(seconds=5)
    assert (await client.post(f"/v1/escalations/{eid}/reply", headers=auth("sam"),
                              json={"text": "Sam here, looking."})).status_code == 201
    assert eid not in await reminders.run_once(now=later)  # answered, and no word from the customer since
    held = await client.post("/v1/bots/acme/chat", json={"session_id": "rec-3", "text": "Hello? Anyone?"})
    assert held.json()["reply"] is None
    assert eid not in await reminders.run_once()  # not waiting long yet
    async with client.services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
        assert eid in await reminders.run_once(now=later)
        event = await _next_event(queue, "stale_claim")
    assert event["operator"] == "sam" and event["escalation_id"] == eid
    assert eid not in await reminders.run_once(now=later + timedelta(seconds=1))
    assert (await _kinds(client, eid))[-1] == "reminded"


async def test_stale_claim_pings_when_the_holder_never_answered_the_customer_who_asked(client):
    # The customer asked for a person, sam claimed it and closed the browser: nobody has written to them,
    # and their request came before the claim, so "a customer message since the claim" never came.
    eid, _ = await _open(client, "rec-3b")
    claimed = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))
    assert claimed.status_code == 200
    reminders = client.services.reminders
    claimed_at = datetime.fromisoformat(claimed.json()["claimed_at"])
    assert eid not in await reminders.run_once(now=claimed_at + TIMEOUT - timedelta(seconds=5))
    async with client.services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
        assert eid in await reminders.run_once(now=claimed_at + TIMEOUT + timedelta(seconds=5))
        event = await _next_event(queue, "stale_claim")
    assert event["operator"] == "sam" and event["escalation_id"] == eid and event["waiting_minutes"] == 15
    assert eid not in await reminders.run_once(now=claimed_at + 2 * TIMEOUT)  # once per wait
    assert (await _kinds(client, eid))[-1] == "reminded"

    # Kim takes it over and answers: the customer waits for nobody, whoever holds it.
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"),
                              json={"take_over": True})).status_code == 200
    assert (await client.post(f"/v1/escalations/{eid}/reply", headers=auth("kim"),
                              json={"text": "Kim here."})).status_code == 201
    assert eid not in await reminders.run_once(now=utcnow() + 3 * TIMEOUT)


async def test_a_conversation_taken_without_escalating_is_no_stale_claim_until_the_customer_writes(client):
    answered = await client.post("/v1/bots/acme/chat", json={"session_id": "rec-3c", "text": "How do I reset my password?"})
    taken = await client.post(f"/v1/conversations/{answered.json()['conversation_id']}/claim", headers=auth("sam"))
    assert taken.status_code == 200
    assert taken.json()["id"] not in await client.services.reminders.run_once(now=utcnow() + 3 * TIMEOUT)


async def test_api_operator_token_is_checked_before_the_body(client):
    assert (await client.post("/v1/escalations/1/reply", json={})).status_code == 401
    assert (await client.post("/v1/escalations/1/reply", content=b"{bad")).status_code == 401
    assert (await client.post("/v1/escalations/abc/claim", json={"take_over": "x"})).status_code == 401
    assert (await client.post("/v1/escalations/1/reply", json={}, headers=auth("sam"))).status_code == 422


async def test_api_json_without_content_type_is_read_as_json(client):
    eid, _ = await _open(client, "rec-4")
    bad = await client.post(f"/v1/escalations/{eid}/reply", content=b"{bad", headers=auth("sam"))
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    bad_chat = await client.post("/v1/bots/acme/chat", content=b"{bad")
    assert bad_chat.status_code == 400 and "not valid JSON" in bad_chat.json()["error"]
    typed = await client.post(f"/v1/escalations/{eid}/reply", content=b'{"text": "hi"}',
                              headers={**auth("sam"), "Content-Type": "text/plain"})
    assert typed.status_code == 415
    untyped = await client.post("/v1/bots/acme/chat", content=b'{"session_id": "rec-4", "text": "Hello?"}')
    assert untyped.status_code == 200 and untyped.json()["state"] == "waiting"
    sent = await client.post(f"/v1/escalations/{eid}/reply", content=b'{"text": "Hi from Sam"}', headers=auth("sam"))
    assert sent.status_code == 201


async def test_api_operators_me_names_the_signed_in_operator(client):
    assert (await client.get("/v1/operators/me")).status_code == 401
    assert (await client.get("/v1/operators/me", headers=auth("sam"))).json() == {"name": "sam", "bots": ["acme"]}
    assert (await client.get("/v1/operators/me", headers=auth("kim"))).json()["bots"] == ["acme", "other"]


async def test_api_escalation_detail_shows_the_newest_messages_and_pages_back(client):
    eid, conversation_id = await _open(client, "rec-5")
    async with client.services.sessions() as session, session.begin():
        for i in range(260):
            session.add(Message(conversation_id=conversation_id, bot="acme", channel="web", direction="in",
                                author="contact", external_id=f"rec-5-{i}", text=f"message number {i}",
                                status="done"))
    page = (await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))).json()
    assert len(page["messages"]) == 200 and page["has_more"] is True
    assert page["messages"][-1]["text"] == "message number 259"
    assert "message number 259" in page["summary"]["text"]
    assert page["summary"]["text"].startswith("Asked first: talk to a human")
    older = (await client.get(f"/v1/escalations/{eid}?before={page['messages'][0]['id']}",
                              headers=auth("sam"))).json()
    assert older["has_more"] is False
    texts = [m["text"] for m in older["messages"]]
    assert texts[0] == "talk to a human" and texts[-1] == "message number 59" and len(texts) == 62
    assert older["summary"] == page["summary"]


async def test_a_conversation_claim_with_a_malformed_body_is_refused_and_claims_nothing(client):
    # The route takes no fields, and used to ignore its body: "{bad" or text/plain still took the thread.
    hello = await client.post("/v1/bots/acme/chat", json={"session_id": "rec-claim", "text": "Hello?"})
    conversation_id = hello.json()["conversation_id"]
    url = f"/v1/conversations/{conversation_id}/claim"
    bad = await client.post(url, content=b"{bad", headers={**auth("sam"), "Content-Type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    assert (await client.post(url, content=b"hello", headers={**auth("sam"), "Content-Type": "text/plain"})).status_code == 415
    assert (await client.post(url, json={"take_over": "notabool"}, headers=auth("sam"))).status_code == 422
    still = await client.post("/v1/bots/acme/chat", json={"session_id": "rec-claim", "text": "Still the bot?"})
    assert still.json()["state"] == "bot"
    taken = await client.post(url, headers=auth("sam"))  # no body at all, as documented
    assert taken.status_code == 200 and taken.json()["state"] == "claimed"


async def test_a_reply_that_never_reached_the_customer_shows_why(client):
    eid, _ = await _open(client, "rec-failed")
    sent = await client.post(f"/v1/escalations/{eid}/reply", headers=auth("sam"), json={"text": "Are you there?"})
    message_id = sent.json()["message_id"]
    reason = "recipient unreachable: telegram: Forbidden: bot was blocked by the user"
    async with client.services.sessions() as session, session.begin():  # as the outbox records a refusal
        await session.execute(update(Message).where(Message.id == message_id).values(status="failed", error=reason))
    detail = (await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))).json()
    shown = {m["id"]: m for m in detail["messages"]}
    assert shown[message_id]["status"] == "failed" and shown[message_id]["error"] == reason
    assert all(m["error"] is None for m in detail["messages"] if m["id"] != message_id)


async def _retry_refused_for_good(client, message_id: int) -> dict:
    """Send the operator's reply `message_id` again as its retry, the customer's platform refusing it for
    good; the `reply_failed` event that tells the operators."""
    from gateway.errors import ChannelSendError

    services = client.services
    async with services.sessions() as session, session.begin():  # its retry is due
        await session.execute(update(Message).where(Message.id == message_id).values(status="pending"))

    class Refusing:
        capabilities = services.adapters[("acme", "web")].capabilities

        async def send(self, message):
            raise ChannelSendError("web: the customer left", permanent=True)

    web = services.adapters[("acme", "web")]
    services.adapters[("acme", "web")] = Refusing()
    try:
        async with services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
            assert await services.outbox.deliver(message_id) == "failed"
            return await _next_event(queue, "reply_failed")
    finally:
        services.adapters[("acme", "web")] = web


async def test_an_operator_reply_that_fails_after_a_retry_is_told_to_the_console_live(client):
    """The reply call answered `pending` (a retry was due); when the retry failed for good, the console
    showed "Not delivered" only once something else refreshed it."""
    eid, _ = await _open(client, "rec-failed-live")
    sent = await client.post(f"/v1/escalations/{eid}/reply", headers=auth("sam"), json={"text": "Still there?"})
    message_id = sent.json()["message_id"]
    event = await _retry_refused_for_good(client, message_id)
    assert event["escalation_id"] == eid and event["message_id"] == message_id and event["bot"] == "acme"
    assert "the customer left" in event["error"]


async def test_a_reply_that_fails_after_its_escalation_was_handed_back_is_told_in_that_escalation(client):
    """The reply waited for a retry (the channel down); meanwhile the operator resolved, and the customer
    asked for a person again. Its failure was told in the customer's newest escalation (its console notice,
    its Slack thread), where nobody had written it, and not in the operator's own."""
    first, _ = await _open(client, "rec-failed-later")
    sent = await client.post(f"/v1/escalations/{first}/reply", headers=auth("sam"), json={"text": "Checking."})
    message_id = sent.json()["message_id"]
    assert (await client.post(f"/v1/escalations/{first}/resolve", headers=auth("sam"))).status_code == 200
    second, _ = await _open(client, "rec-failed-later")
    assert second != first
    event = await _retry_refused_for_good(client, message_id)
    assert event["escalation_id"] == first and event["message_id"] == message_id


async def test_stale_claim_taken_over_pings_again_when_the_new_holder_does_not_answer_either(client):
    """The documented answer to a stale claim is a take-over; the customer's message came before it, and
    only a message after the claim started a wait, so a new holder who did not answer either was never pinged."""
    eid, _ = await _open(client, "rec-3d")
    assert (await client.post(f"/v1/escalations/{eid}/reply", headers=auth("sam"), json={"text": "Sam here."})).status_code == 201
    asked = await client.post("/v1/bots/acme/chat", json={"session_id": "rec-3d", "text": "Hello??"})
    async with client.services.sessions() as session, session.begin():  # sam claimed, answered and went home
        await session.execute(update(Escalation).where(Escalation.id == eid)
                              .values(created_at=utcnow() - 4 * TIMEOUT, claimed_at=utcnow() - 3 * TIMEOUT))
        await session.execute(update(Message).where(Message.id == asked.json()["message_id"])
                              .values(created_at=utcnow() - 2 * TIMEOUT))
    reminders = client.services.reminders
    assert eid in await reminders.run_once()
    taken = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"), json={"take_over": True})
    assert taken.status_code == 200
    taken_at = datetime.fromisoformat(taken.json()["claimed_at"])
    assert eid not in await reminders.run_once(now=taken_at + TIMEOUT - timedelta(seconds=5))  # kim's own timeout
    async with client.services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
        assert eid in await reminders.run_once(now=taken_at + TIMEOUT + timedelta(seconds=5))
        event = await _next_event(queue, "stale_claim")
    assert event["operator"] == "kim" and event["escalation_id"] == eid


async def test_a_send_error_quoting_a_credential_is_stored_and_shown_redacted(client):
    """A platform's or a client library's error may quote what it was sent with (Telegram's API URL holds the
    bot's token): the outbox stored it whole in `messages.error`, which the console, its live `reply_failed`
    event and the operator API showed. It is stored redacted now, and a row stored before is redacted as read."""
    from gateway.errors import ChannelSendError
    from tests.operators.conftest import BOT_TOKEN

    services = client.services
    eid, _ = await _open(client, "rec-secret")
    sent = await client.post(f"/v1/escalations/{eid}/reply", headers=auth("sam"), json={"text": "Hello?"})
    message_id = sent.json()["message_id"]
    async with services.sessions() as session, session.begin():
        await session.execute(update(Message).where(Message.id == message_id).values(status="pending"))

    class Leaking:
        capabilities = services.adapters[("acme", "web")].capabilities

        async def send(self, message):
            raise ChannelSendError(f"POST https://api.example.com/bot{BOT_TOKEN}/send: 401", permanent=True)

    web = services.adapters[("acme", "web")]
    services.adapters[("acme", "web")] = Leaking()
    try:
        async with services.bus.subscribe(ESCALATIONS_TOPIC) as queue:
            assert await services.outbox.deliver(message_id) == "failed"
            event = await _next_event(queue, "reply_failed")
    finally:
        services.adapters[("acme", "web")] = web
    async with services.sessions() as session:
        stored = (await session.get(Message, message_id)).error
    detail = (await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))).json()
    [shown] = [m["error"] for m in detail["messages"] if m["id"] == message_id]
    for said in (stored, event["error"], shown):
        assert BOT_TOKEN not in said and "/bot[REDACTED]/send: 401" in said, said
    async with services.sessions() as session, session.begin():  # as an older gateway stored it
        await session.execute(update(Message).where(Message.id == message_id).values(error=f"token {BOT_TOKEN}"))
    detail = (await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))).json()
    assert [m["error"] for m in detail["messages"] if m["id"] == message_id] == ["token [REDACTED]"]
