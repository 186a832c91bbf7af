"""A reply to an escalation already handed back says how to reach the customer again."""

from __future__ import annotations

import pytest

from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_reply_after_resolve_names_the_route_that_takes_the_conversation_back(client):
    """The 409 said only "already resolved by sam: the bot answers the customer again", and an operator with
    one more thing to say had to find `POST /v1/conversations/{id}/claim` in the README."""
    chat = (await client.post("/v1/bots/acme/chat", json={"session_id": "after-1", "text": "Can I speak to a human agent?"})).json()
    listed = (await client.get("/v1/escalations?state=open", headers=auth("sam"))).json()["escalations"]
    escalation = next(e for e in listed if e["conversation_id"] == chat["conversation_id"])
    assert (await client.post(f"/v1/escalations/{escalation['id']}/resolve", headers=auth("sam"))).status_code == 200
    late = await client.post(f"/v1/escalations/{escalation['id']}/reply", headers=auth("sam"), json={"text": "PS"})
    assert late.status_code == 409
    assert late.json()["error"] == (
        f"escalation {escalation['id']} is already resolved by sam: the bot answers the customer again; to write to "
        f"them, take the conversation back: POST /v1/conversations/{chat['conversation_id']}/claim")
