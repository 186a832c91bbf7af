"""Timestamps in API responses are UTC with an explicit offset on SQLite too, which stores them naive."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _utc(value: str) -> datetime:
    assert value.endswith("+00:00"), value  # without it, clients read the time as their local time
    return datetime.fromisoformat(value)


async def test_timestamps_in_the_transcript_and_escalations_end_in_utc_offset(client):
    started = datetime.now(timezone.utc)
    response = await client.post("/v1/bots/acme/chat",
                                 json={"session_id": "ts-1", "text": "Can I speak to a human agent?"})
    conversation_id = response.json()["conversation_id"]

    transcript = (await client.get("/v1/bots/acme/sessions/ts-1/messages")).json()["messages"]
    listed = (await client.get("/v1/escalations?state=open", headers=auth("sam"))).json()["escalations"]
    escalation = next(e for e in listed if e["conversation_id"] == conversation_id)
    claimed = (await client.post(f"/v1/escalations/{escalation['id']}/claim", headers=auth("sam"))).json()
    detail = (await client.get(f"/v1/escalations/{escalation['id']}", headers=auth("sam"))).json()

    stamps = ([m["created_at"] for m in transcript] + [escalation["created_at"], claimed["claimed_at"]]
              + [m["created_at"] for m in detail["messages"]] + [e["at"] for e in detail["events"]])
    assert transcript and detail["events"]
    for stamp in stamps:
        assert abs((_utc(stamp) - started).total_seconds()) < 60  # and it is the right instant, not hours off
