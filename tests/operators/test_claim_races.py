"""Claims racing each other and the escalation's erasure: one claim wins, every other gets a 409 that says why."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from sqlalchemy import delete

from gateway.errors import Conflict
from storage.models import Conversation, Escalation, Message
from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _open(client, session_id: str) -> int:
    chat = (await client.post("/v1/bots/acme/chat", json={"session_id": session_id,
                                                          "text": "Can I speak to a human agent?"})).json()
    listed = (await client.get("/v1/escalations?state=open", headers=auth("sam"))).json()["escalations"]
    return next(e["id"] for e in listed if e["conversation_id"] == chat["conversation_id"])


async def test_two_operators_claiming_at_once_one_wins_the_other_is_told_who(client):
    eid = await _open(client, "race-two-claims")
    sam, kim = await asyncio.gather(client.post(f"/v1/escalations/{eid}/claim", headers=auth("sam")),
                                    client.post(f"/v1/escalations/{eid}/claim", headers=auth("kim")))
    assert sorted([sam.status_code, kim.status_code]) == [200, 409]
    won, lost = ("sam", kim) if sam.status_code == 200 else ("kim", sam)
    assert lost.json() == {"error": f"escalation {eid} is already claimed by {won}",
                           "hint": f'to take it over from {won}, POST /v1/escalations/{eid}/claim with {{"take_over": true}}'}
    detail = (await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))).json()
    assert detail["operator"] == won and [e["kind"] for e in detail["events"]].count("claimed") == 1


@contextlib.contextmanager
def erased_once_found(escalations, eid: int, *, with_conversation: bool = False):
    """`escalations.get` finds escalation `eid`, then it is erased (`gateway forget`, retention) before the caller
    goes on: the escalation, or the whole conversation with it."""
    found = escalations.get

    async def found_then_erased(*args, **kwargs):
        escalation = await found(*args, **kwargs)
        async with escalations._sessions() as session, session.begin():
            await session.execute(delete(Escalation).where(Escalation.id == eid))
            if with_conversation:
                await session.execute(delete(Message).where(Message.conversation_id == escalation.conversation_id))
                await session.execute(delete(Conversation).where(Conversation.id == escalation.conversation_id))
        return escalation

    escalations.get = found_then_erased
    try:
        yield
    finally:
        del escalations.get


async def test_a_claim_of_an_escalation_erased_meanwhile_is_a_conflict_not_a_crash(client):
    """The customer's data was erased (`gateway forget`, retention) between the claim's check and its update:
    the claim read the row it could not update and failed on None (a 500)."""
    eid = await _open(client, "race-claim-erased")
    escalations = client.services.escalations
    with erased_once_found(escalations, eid), pytest.raises(Conflict, match="no longer exists"):
        await escalations.claim(eid, operator="sam", bots=None)


async def test_an_escalation_read_while_its_conversation_is_erased_is_404_not_a_crash(client):
    """The customer's data was erased (`gateway forget`, retention) between the detail route's read of the
    escalation and its read of the conversation: it read `conversation.contact_id` of None (a 500)."""
    eid = await _open(client, "race-detail-erased")
    with erased_once_found(client.services.escalations, eid, with_conversation=True):
        response = await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))
    assert response.status_code == 404 and response.json() == {"error": f"no escalation {eid}"}, response.text


async def test_two_operators_taking_a_conversation_at_once_the_other_is_told_how_to_take_it_over(client):
    """Both take the conversation back from the bot at once: the loser's 409 ("already claimed by sam") had no
    hint, while the same refusal of POST /v1/escalations/{id}/claim names `{"take_over": true}`."""
    eid = await _open(client, "race-take-conversation")
    conversation = (await client.get(f"/v1/escalations/{eid}", headers=auth("sam"))).json()["conversation_id"]
    assert (await client.post(f"/v1/escalations/{eid}/resolve", headers=auth("sam"))).status_code == 200
    sam, kim = await asyncio.gather(client.post(f"/v1/conversations/{conversation}/claim", headers=auth("sam")),
                                    client.post(f"/v1/conversations/{conversation}/claim", headers=auth("kim")))
    assert sorted([sam.status_code, kim.status_code]) == [200, 409]
    (won, taken), lost = (("sam", sam), kim) if sam.status_code == 200 else (("kim", kim), sam)
    new = taken.json()["id"]
    assert lost.json() == {"error": f"escalation {new} is already claimed by {won}",
                           "hint": f'to take it over from {won}, POST /v1/escalations/{new}/claim with {{"take_over": true}}'}
