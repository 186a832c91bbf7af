"""Slack operators by name in the operator API (and so the console): they are held as `slack:<user id>`,
which told an operator reading the console nothing about who had the customer."""

from __future__ import annotations

import pytest

from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")
ANA = {"name": "ana.g", "real_name": "Ana García", "profile": {"display_name": "Ana", "real_name": "Ana García"}}


async def _claimed_by(client, session_id: str, operator: str) -> int:
    """A web customer asks for a person, and Slack member `operator` claims the escalation."""
    chat = await client.post("/v1/bots/acme/chat", json={"session_id": session_id, "text": "Can I speak to a human?"})
    listed = (await client.get("/v1/escalations?state=open", headers=auth("sam"))).json()["escalations"]
    escalation = next(e["id"] for e in listed if e["conversation_id"] == chat.json()["conversation_id"])
    await client.services.escalations.claim(escalation, operator=operator, bots=None)
    return escalation


async def test_slack_operator_is_named_as_slack_names_them_and_looked_up_once(client, slack):
    slack.users["UANA"] = ANA
    escalation = await _claimed_by(client, "names-1", "slack:UANA")
    detail = (await client.get(f"/v1/escalations/{escalation}", headers=auth("sam"))).json()
    assert detail["operator"] == "slack:UANA"  # still who holds it
    assert detail["operator_names"] == {"slack:UANA": "Ana"}
    listed = (await client.get("/v1/escalations?state=claimed", headers=auth("sam"))).json()
    assert listed["operator_names"]["slack:UANA"] == "Ana"
    assert [c.params["user"] for c in slack.calls_to("users.info")] == ["UANA"]  # remembered


async def test_slack_operator_slack_will_not_name_is_shown_by_id(client, slack):
    """No `users:read` scope, a member since deleted, Slack down: the id, and the console still answers."""
    slack.fail("users.info", error="missing_scope")
    first = await _claimed_by(client, "names-2", "slack:UNOSCOPE")
    detail = await client.get(f"/v1/escalations/{first}", headers=auth("sam"))
    assert detail.status_code == 200 and detail.json()["operator_names"] == {}
    second = await _claimed_by(client, "names-3", "slack:UGONE")
    assert (await client.get(f"/v1/escalations/{second}", headers=auth("sam"))).json()["operator_names"] == {}
    assert (await client.get(f"/v1/escalations/{first}", headers=auth("sam"))).json()["operator_names"] == {}
    assert slack.count("users.info") == 3  # UANA, then one failed look-up each, remembered for a while
