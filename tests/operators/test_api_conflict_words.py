"""What the operator API's 409s tell the caller to do next: a claim another operator holds names the
`take_over` that takes it; a reply to a handed-back escalation says where the customer is now."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _open(client, session_id: str, text: str = "Can I speak to a human agent?") -> tuple[int, int]:
    """The customer of web session `session_id` asks for a person: the escalation's id and conversation id."""
    chat = (await client.post("/v1/bots/acme/chat", json={"session_id": session_id, "text": text})).json()
    listed = (await client.get("/v1/escalations?state=open", headers=auth("sam"))).json()["escalations"]
    return next(e["id"] for e in listed if e["conversation_id"] == chat["conversation_id"]), chat["conversation_id"]


@contextmanager
def _then_after(escalations, method: str, then):
    """In the block, `escalations.<method>` awaits `then()` once it has returned or raised: after the refusal,
    before the route words its 409."""
    refused = getattr(escalations, method)

    async def refused_then(*args, **kwargs):
        try:
            return await refused(*args, **kwargs)
        finally:
            await then()

    setattr(escalations, method, refused_then)
    try:
        yield
    finally:
        delattr(escalations, method)


async def test_claim_held_by_another_operator_says_how_to_take_it_over(client):
    """The 409 said only "already claimed by sam": an API caller had to find `{"take_over": true}` in the
    README. The hint is a field of its own, so the error's text (the console and Slack show it) stays short."""
    eid, _ = await _open(client, "conflict-claim-1")
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    held = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"))
    assert held.status_code == 409
    assert held.json() == {"error": f"escalation {eid} is already claimed by sam",
                           "hint": f'to take it over from sam, POST /v1/escalations/{eid}/claim with {{"take_over": true}}'}
    # The holder's own retried claim is no conflict, and a resolved escalation has no claim to take over.
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    assert (await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("sam"))).status_code == 200
    done = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"))
    assert done.status_code == 409 and "hint" not in done.json()


async def test_reply_or_resolve_held_by_another_operator_says_how_to_take_it_over(client):
    """A reply to (or a resolve of) an escalation another operator holds is the same 409 as a claim: the same hint."""
    eid, _ = await _open(client, "conflict-reply-1")
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    late = await client.post(f"/v1/escalations/{eid}/reply", headers=auth("kim"), json={"text": "Kim here"})
    assert late.status_code == 409 and late.json()["error"] == f"escalation {eid} is already claimed by sam"
    assert '{"take_over": true}' in late.json()["hint"]
    # A hand-back too: only the holder resolves, so the way to it is the same.
    handed = await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("kim"))
    assert handed.status_code == 409 and '{"take_over": true}' in handed.json()["hint"]


async def test_reply_after_a_handback_where_the_customer_asked_again_names_the_new_escalation(client):
    """After the hand-back the customer asked for a person again: the reply's 409 still said "the bot answers
    the customer again" and sent the operator to take the conversation back, while escalation #2 waited."""
    first, conversation = await _open(client, "conflict-again-1")
    assert (await client.post(f"/v1/escalations/{first}/claim", headers=auth("sam"))).status_code == 200
    assert (await client.post(f"/v1/escalations/{first}/resolve", headers=auth("sam"))).status_code == 200
    second, again = await _open(client, "conflict-again-1", "I want to talk to a human again")
    assert again == conversation and second != first

    late = await client.post(f"/v1/escalations/{first}/reply", headers=auth("sam"), json={"text": "PS"})
    assert late.status_code == 409
    assert late.json()["error"] == (f"escalation {first} is already resolved by sam, and the customer asked for a "
                                    f"person again: escalation {second}, open")
    assert (await client.post(f"/v1/escalations/{second}/claim", headers=auth("kim"))).status_code == 200
    resolved = await client.post(f"/v1/escalations/{first}/resolve", headers=auth("sam"))
    assert resolved.status_code == 409 and resolved.json()["error"].endswith(
        f"asked for a person again: escalation {second}, claimed by kim")


async def test_a_resolve_repeated_by_who_resolved_it_is_no_conflict(client):
    """A resolve retried after no answer came (or a double press of Resolve) was a 409, "already resolved by
    sam", to sam himself: the hand-back had worked, and the console showed it as an error. A repeated claim
    by its holder was never a conflict; a repeated resolve by who resolved it is not either."""
    eid, _ = await _open(client, "conflict-resolve-twice")
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    assert (await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("sam"))).status_code == 200
    again = await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("sam"))
    assert again.status_code == 200 and again.json()["state"] == "resolved" and again.json()["operator"] == "sam"
    detail = (await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))).json()
    assert [e["kind"] for e in detail["events"]].count("resolved") == 1  # nothing done twice
    other = await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("kim"))
    assert other.status_code == 409 and "already resolved by sam" in other.json()["error"]
    # Once the customer asked again, the old escalation's resolve is no repeat: it says where they are now.
    await _open(client, "conflict-resolve-twice", "I want to talk to a human again")
    later = await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("sam"))
    assert later.status_code == 409 and "asked for a person again" in later.json()["error"]


async def test_a_reply_refused_as_the_customer_asks_again_words_the_409_from_the_state_it_was_refused_on(client):
    """The reply's 409 was worded from a second read of the escalation: when the customer asked for a person
    again between the refusal and that read, the route re-raised the refusal's own "the bot answers the
    customer again" without the way back, the refusal and the reread each saying half of two states."""
    eid, conversation = await _open(client, "conflict-race-1")
    assert (await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("sam"))).status_code == 200
    # The customer asks again after the refusal, before the route words it.
    with _then_after(client.services.escalations, "send_reply",
                     lambda: _open(client, "conflict-race-1", "I want to talk to a human again")):
        late = await client.post(f"/v1/escalations/{eid}/reply", headers=auth("sam"), json={"text": "PS"})
    assert late.status_code == 409
    assert late.json()["error"] == (
        f"escalation {eid} is already resolved by sam: the bot answers the customer again; to write to "
        f"them, take the conversation back: POST /v1/conversations/{conversation}/claim")


async def test_a_claim_refused_words_its_hint_from_the_holder_it_was_refused_for(client):
    """The 409's hint came from a second read of the escalation: when the claim passed on between the refusal
    and that read (taken over by a third operator, or released), the error named sam while the hint named
    another holder, or the hint was left out while the error still said "already claimed by sam"."""
    eid, _ = await _open(client, "conflict-hint-race")
    assert (await client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam"))).status_code == 200
    escalations = client.services.escalations
    # Sam releases it after kim's refusal, before the route words the 409.
    with _then_after(escalations, "claim", lambda: escalations.release(eid, operator="sam", bots=None)):
        held = await client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim"))
    assert held.status_code == 409
    assert held.json() == {"error": f"escalation {eid} is already claimed by sam",
                           "hint": f'to take it over from sam, POST /v1/escalations/{eid}/claim with {{"take_over": true}}'}
