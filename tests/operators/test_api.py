"""The operator API end to end through the real app: authorization, triggers, silence, relay and hand-back."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import select

from storage.models import Message
from tests.operators.conftest import TOKENS, auth

pytestmark = pytest.mark.asyncio(loop_scope="module")
ACK = "I've asked a person from our team to take over. They'll reply here shortly."


async def _chat(client, session_id: str, text: str) -> dict:
    response = await client.post("/v1/bots/acme/chat", json={"session_id": session_id, "text": text})
    assert response.status_code == 200, response.text
    return response.json()


async def wait_for_bot_answer(client, session_id: str, *, attempts: int = 100) -> list[dict]:
    """The bot's messages after the hand-back notice, once there is one (the worker polls every second)."""
    for _ in range(attempts):
        messages = (await client.get(f"/v1/bots/acme/sessions/{session_id}/messages")).json()["messages"]
        notice = max(m["id"] for m in messages if m["author"] == "system" and "back to the assistant" in m["text"])
        after = [m for m in messages if m["id"] > notice and m["author"] == "bot"]
        if after:
            return after
        await asyncio.sleep(0.1)
    return []


async def _escalation_for(client, conversation_id: int, who: str = "sam") -> dict:
    body = (await client.get("/v1/escalations?state=open,claimed", headers=auth(who))).json()
    return next(e for e in body["escalations"] if e["conversation_id"] == conversation_id)


async def test_api_without_or_with_wrong_token_is_401(client):
    assert (await client.get("/v1/escalations")).status_code == 401
    assert (await client.get("/v1/escalations", headers={"Authorization": "Bearer nope"})).status_code == 401
    assert (await client.get("/v1/escalations", headers={"Authorization": TOKENS["sam"]})).status_code == 401
    assert (await client.post("/v1/escalations/1/claim",
                              headers={"Authorization": "Bearer " + TOKENS["sam"] + "x"})).status_code == 401
    assert (await client.get("/v1/escalations", headers=auth("sam"))).status_code == 200


async def test_api_an_unknown_state_filter_is_422_not_an_empty_list(client):
    """"waiting" (a conversation's state, as the README's Operators section names them) matched nothing."""
    assert (await client.get("/v1/escalations?state=waiting")).status_code == 401  # the token first
    response = await client.get("/v1/escalations?state=open,waiting", headers=auth("sam"))
    assert response.status_code == 422 and "'waiting'" in response.json()["error"]
    assert (await client.get("/v1/escalations?state=open, claimed", headers=auth("sam"))).status_code == 200


async def test_api_a_bot_filter_the_operator_cannot_serve_is_404_not_an_empty_list(client):
    """`?bot=nope` answered 200 with no escalations, as if the bot had none. A bot that does not exist and
    one the operator does not serve get the same 404, so another team's bot names leak nothing."""
    unknown = await client.get("/v1/escalations?bot=nope", headers=auth("sam"))
    not_served = await client.get("/v1/escalations?bot=other", headers=auth("sam"))
    assert unknown.status_code == not_served.status_code == 404
    assert unknown.json()["error"] == "no bot 'nope' among the bots you serve (acme)"
    assert not_served.json()["error"] == "no bot 'other' among the bots you serve (acme)"
    assert (await client.get("/v1/escalations?bot=nope")).status_code == 401  # the token first
    assert (await client.get("/v1/escalations?bot=other", headers=auth("kim"))).status_code == 200


async def test_api_escalation_of_another_bot_is_404(client):
    response = await client.post("/v1/bots/other/chat", json={"session_id": "o-1", "text": "talk to a human please"})
    conversation_id = response.json()["conversation_id"]
    kims = (await client.get("/v1/escalations?bot=other", headers=auth("kim"))).json()["escalations"]
    escalation_id = next(e["id"] for e in kims if e["conversation_id"] == conversation_id)
    for path in ("", "/claim", "/resolve"):
        method = client.get if not path else client.post
        assert (await method(f"/v1/escalations/{escalation_id}{path}", headers=auth("sam"))).status_code == 404
    reply = await client.post(f"/v1/escalations/{escalation_id}/reply", json={"text": "hi"}, headers=auth("sam"))
    assert reply.status_code == 404
    # Every other way in: a note (operators' eyes only), a release, taking over the conversation itself.
    note = await client.post(f"/v1/escalations/{escalation_id}/notes", json={"text": "seen"}, headers=auth("sam"))
    release = await client.post(f"/v1/escalations/{escalation_id}/release", headers=auth("sam"))
    take_over = await client.post(f"/v1/conversations/{conversation_id}/claim", headers=auth("sam"))
    assert (note.status_code, release.status_code, take_over.status_code) == (404, 404, 404)
    kims_view = (await client.get(f"/v1/escalations/{escalation_id}", headers=auth("kim"))).json()
    assert kims_view["state"] == "open" and kims_view["notes"] == [] and kims_view["operator"] is None
    sams = (await client.get("/v1/escalations", headers=auth("sam"))).json()["escalations"]
    assert all(e["bot"] == "acme" for e in sams)


async def test_trigger_customer_phrase_escalates_and_bot_stays_silent(client):
    first = await _chat(client, "w-1", "Can I speak to a human agent?")
    assert first["reply"] == ACK and first["state"] == "waiting"
    second = await _chat(client, "w-1", "Hello? Anyone there?")
    assert second["reply"] is None and second["state"] == "waiting"
    escalation = await _escalation_for(client, first["conversation_id"])
    assert escalation["state"] == "open" and "customer asked" in escalation["reason"]
    transcript = (await client.get("/v1/bots/acme/sessions/w-1/messages")).json()["messages"]
    assert [(m["direction"], m["author"]) for m in transcript] == [("in", "contact"), ("out", "bot"),
                                                                   ("in", "contact")]


async def test_trigger_consecutive_unanswered_turns_escalates_with_one_acknowledgement(client):
    first = await _chat(client, "w-2", "What is the airspeed of an unladen swallow?")
    assert first["reply"] == "I couldn't find that." and first["state"] == "bot"
    second = await _chat(client, "w-2", "Who painted the Mona Lisa?")
    assert second["state"] == "waiting"
    assert second["reply"].count(ACK) == 1 and second["reply"].startswith("I couldn't find that.")
    escalation = await _escalation_for(client, second["conversation_id"])
    assert "2 consecutive turns" in escalation["reason"]


async def test_relay_round_trip_on_web_then_bot_resumes(client):
    opened = await _chat(client, "w-3", "I want to talk to a real person")
    escalation = await _escalation_for(client, opened["conversation_id"])
    claimed = await client.post(f"/v1/escalations/{escalation['id']}/claim", headers=auth("sam"))
    assert claimed.status_code == 200 and claimed.json()["operator"] == "sam"
    other = await client.post(f"/v1/escalations/{escalation['id']}/claim", headers=auth("kim"))
    assert other.status_code == 409 and "already claimed by sam" in other.json()["error"]
    sent = await client.post(f"/v1/escalations/{escalation['id']}/reply", headers=auth("sam"),
                             json={"text": "Hi, Sam here. Your refund is on its way."})
    assert sent.status_code == 201 and sent.json()["status"] == "sent"
    quiet = await _chat(client, "w-3", "Thanks! When will it arrive?")
    assert quiet["reply"] is None and quiet["state"] == "operator"
    note = await client.post(f"/v1/escalations/{escalation['id']}/notes", headers=auth("sam"),
                             json={"text": "refund #123"})
    assert note.status_code == 201
    detail = (await client.get(f"/v1/escalations/{escalation['id']}", headers=auth("kim"))).json()
    assert detail["summary"]["kind"] == "extractive" and "real person" in detail["summary"]["text"]
    # The claim told the customer a person joined ("system"), then the operator replied.
    assert [m["author"] for m in detail["messages"]] == ["contact", "bot", "system", "operator", "contact"]
    assert "joined this conversation" in detail["messages"][2]["text"]
    resolved = await client.post(f"/v1/escalations/{escalation['id']}/resolve", headers=auth("sam"))
    assert resolved.status_code == 200 and resolved.json()["state"] == "resolved"
    transcript = (await client.get("/v1/bots/acme/sessions/w-3/messages")).json()
    assert transcript["state"] == "bot"
    authors = [(m["author"], m["text"]) for m in transcript["messages"] if m["direction"] == "out"]
    assert ("operator", "Hi, Sam here. Your refund is on its way.") in authors
    assert any(a == "system" and "back to the assistant" in t for a, t in authors)
    # "When will it arrive?" came after Sam's last reply and nobody answered it: the bot does, once.
    answered = await wait_for_bot_answer(client, "w-3")
    assert [m["text"] for m in answered] == ["I couldn't find that."]
    kinds = [e["kind"] for e in (await client.get(f"/v1/escalations/{escalation['id']}",
                                                  headers=auth("sam"))).json()["events"]]
    assert kinds == ["opened", "claimed", "note", "resolved"]


async def test_metrics_count_escalations_and_handoff_times(client):
    text = (await client.get("/metrics")).text
    assert 'gateway_escalations_total{bot="acme"}' in text
    assert 'gateway_escalation_time_to_claim_seconds_count{bot="acme"}' in text
    assert 'gateway_escalation_time_to_resolve_seconds_count{bot="acme"}' in text


async def test_escalation_detail_shows_the_tool_calls_behind_a_reply(client):
    """An operator taking over must see what the bot looked up or did, also a call the turn cut off."""
    from sqlalchemy import select

    from storage.models import Message

    opened = await _chat(client, "w-tools", "I want to talk to a human")
    calls = [{"round": 1, "id": "c1", "name": "invoice_status", "arguments": {"invoice_number": "INV-1"},
              "result": {"found": True, "invoice": {"status": "paid"}}},
             {"round": 1, "id": "c2", "name": "create_ticket", "arguments": {}, "result": {"error": "interrupted: …"}}]
    async with client.services.sessions() as session, session.begin():
        reply = (await session.execute(select(Message).where(
            Message.conversation_id == opened["conversation_id"], Message.author == "bot"))).scalar_one()
        reply.tool_calls = calls
    escalation = await _escalation_for(client, opened["conversation_id"])
    detail = (await client.get(f"/v1/escalations/{escalation['id']}", headers=auth("sam"))).json()
    shown = {m["author"]: m["tool_calls"] for m in detail["messages"]}
    assert shown == {"contact": [], "bot": calls}


@pytest.mark.parametrize("text", ["\u200b", " \u200b\u200d\ufeff\u2060 "], ids=["zero-width-space", "invisible-mix"])
async def test_api_reply_or_note_of_invisible_characters_is_422_and_nothing_is_sent(client, text):
    # As the web chat refuses such a text (gateway.models.is_blank): the customer would get an empty message.
    session_id = f"w-blank-{len(text)}"
    opened = await _chat(client, session_id, "I want to talk to a real person")
    escalation = await _escalation_for(client, opened["conversation_id"])
    url = f"/v1/escalations/{escalation['id']}"
    reply = await client.post(f"{url}/reply", headers=auth("sam"), json={"text": text})
    assert reply.status_code == 422 and "empty" in reply.json()["error"]
    note = await client.post(f"{url}/notes", headers=auth("sam"), json={"text": text})
    assert note.status_code == 422
    detail = (await client.get(url, headers=auth("sam"))).json()
    assert detail["state"] == "open" and detail["notes"] == []  # not claimed by the refused reply either
    assert [m["author"] for m in detail["messages"]] == ["contact", "bot"]


async def test_api_a_lone_surrogate_in_a_reply_note_or_reason_is_stored_as_a_replacement_character(client):
    """`"\\ud800"` (half an emoji, valid JSON) was a 422 "unable to parse raw data as a unicode string"
    from the length check, where the web chat stores it as U+FFFD."""
    opened = await _chat(client, "w-surrogate", "I want to talk to a real person")
    url = f"/v1/escalations/{(await _escalation_for(client, opened['conversation_id']))['id']}"
    broken = b'"thanks \\ud83d for waiting"'  # sent as bytes: httpx would not encode a lone surrogate
    headers = {**auth("sam"), "Content-Type": "application/json"}
    claim = await client.post(f"{url}/claim", headers=headers, content=b'{"reason": ' + broken + b"}")
    assert claim.status_code == 200, claim.text
    reply = await client.post(f"{url}/reply", headers=headers, content=b'{"text": ' + broken + b"}")
    assert reply.status_code == 201, reply.text
    note = await client.post(f"{url}/notes", headers=headers, content=b'{"text": ' + broken + b"}")
    assert note.status_code == 201 and note.json()["text"] == "thanks \ufffd for waiting"
    detail = (await client.get(url, headers=auth("sam"))).json()
    assert detail["messages"][-1]["text"] == "thanks \ufffd for waiting"
    assert detail["events"][1]["kind"] == "claimed" and detail["events"][1]["reason"] == "thanks \ufffd for waiting"



async def test_api_list_says_what_each_customer_last_wrote(client):
    """Every web customer is "Web visitor", most reasons "customer asked: 'talk to a human'": the list
    told the queue's escalations apart by nothing but their ids."""
    first = await _chat(client, "last-said", "I need to talk to a human about invoice 7")
    await _chat(client, "last-said", "It was charged twice")
    escalation = await _escalation_for(client, first["conversation_id"])
    assert escalation["last_customer_message"]["text"] == "It was charged twice"
    assert escalation["last_customer_message"]["at"].endswith("+00:00")


async def test_the_escalation_shows_the_deep_link_a_customer_came_from(client):
    """A Telegram `/start order123` is stored with an empty text and its payload in `meta.start_payload`:
    the operator saw an empty message, and not where the customer came from."""
    opened = await _chat(client, "w-deep-link", "I want to talk to a real person")
    escalation = await _escalation_for(client, opened["conversation_id"])
    async with client.services.sessions() as session, session.begin():
        first = (await session.execute(select(Message).where(
            Message.conversation_id == opened["conversation_id"]).order_by(Message.id))).scalars().first()
        first.meta = {**first.meta, "start_payload": "order123"}
    detail = (await client.get(f"/v1/escalations/{escalation['id']}", headers=auth("sam"))).json()
    assert [m.get("start_payload") for m in detail["messages"][:2]] == ["order123", None]


async def test_api_the_live_stream_carries_only_events_of_the_bots_the_operator_serves(client):
    """The console's live stream (a customer's words as they come, replies, claims) is filtered by the
    operator's bots in code no test held: dropping the filter showed another team's customers to every console."""
    from starlette.requests import Request

    from gateway.events import ESCALATIONS_TOPIC
    from gateway.operators.api import stream_escalations

    async def never_disconnects() -> dict:
        await asyncio.Event().wait()
        return {}

    scope = {"type": "http", "method": "GET", "path": "/v1/escalations/stream", "query_string": b"",
             "headers": [(b"authorization", f"Bearer {TOKENS['sam']}".encode())], "app": client._transport.app}
    response = await stream_escalations(Request(scope, never_disconnects))
    events = response.body_iterator
    try:
        ready = await asyncio.wait_for(anext(events), 5)
        assert ready["event"] == "ready" and json.loads(ready["data"]) == {"operator": "sam"}
        for bot in ("other", "acme"):
            client.services.bus.publish(ESCALATIONS_TOPIC, {"type": "customer_message", "bot": bot, "escalation_id": 0,
                                                            "text": f"a customer of {bot}"}, forward=False)
        shown = await asyncio.wait_for(anext(events), 5)
        assert shown["event"] == "customer_message" and json.loads(shown["data"])["bot"] == "acme", shown
    finally:
        await events.aclose()


async def test_api_the_live_stream_leaves_out_a_bot_no_longer_configured_as_every_route_does(client):
    """An operator of every bot (`"*"`) or one still listing a bot removed from the config: the list, the
    escalation and every action answer 404 for that bot's escalations, and the stream showed its events."""
    from starlette.requests import Request

    from gateway.events import ESCALATIONS_TOPIC
    from gateway.operators.api import stream_escalations
    from gateway.operators.auth import Operator

    async def never_disconnects() -> dict:
        await asyncio.Event().wait()
        return {}

    for operator in (Operator(name="root", bots=None), Operator(name="kim", bots=frozenset({"acme", "gone"}))):
        scope = {"type": "http", "method": "GET", "path": "/v1/escalations/stream", "query_string": b"",
                 "headers": [], "app": client._transport.app, "state": {"operator": operator}}
        events = (await stream_escalations(Request(scope, never_disconnects))).body_iterator
        try:
            assert (await asyncio.wait_for(anext(events), 5))["event"] == "ready"
            for bot in ("gone", "acme"):
                client.services.bus.publish(ESCALATIONS_TOPIC, {"type": "customer_message", "bot": bot,
                                                                "escalation_id": 0, "text": f"a customer of {bot}"},
                                            forward=False)
            shown = await asyncio.wait_for(anext(events), 5)
            assert json.loads(shown["data"])["bot"] == "acme", (operator, shown)
        finally:
            await events.aclose()


async def test_the_console_page_keeps_its_security_headers_under_its_static_address_too(client):
    """The console is also a file of /static, which answered /static/operator.html with none of the headers
    /operator sends: that address could be framed by any site (clickjacking the Claim, Reply and Resolve
    buttons once an operator signed in inside the frame) and ran without the page's CSP."""
    console = await client.get("/operator")
    static = await client.get("/static/operator.html")
    assert static.status_code == 200 and static.text == console.text
    for header in ("content-security-policy", "x-content-type-options", "referrer-policy", "cache-control"):
        assert static.headers.get(header) == console.headers[header], header
    assert "frame-ancestors 'none'" in static.headers["content-security-policy"]
    # The widget's page is made to be framed (README: Embedding it in your site): left as it was.
    assert "content-security-policy" not in (await client.get("/static/index.html")).headers
