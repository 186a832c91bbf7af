"""The escalation list gives every live escalation, however many: it gave the newest 200, so in a backlog (a
model outage hands every conversation to a person) the customers who had waited longest, whom the console puts
on top, were not in it at all, nor counted in the tab's "(N waiting)", and nothing said the list was cut."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gateway.models import utcnow
from storage.models import Conversation, Escalation
from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_list_has_every_open_and_claimed_escalation_and_the_newest_resolved(client):
    start = utcnow() - timedelta(hours=3)
    async with client.services.sessions() as session, session.begin():
        rows = []
        for i in range(260):
            state = "claimed" if i < 5 else "resolved" if i >= 215 else "open"
            conversation = Conversation(bot="acme", channel="web", chat=f"queue-{i}",
                                        state={"open": "waiting", "claimed": "operator"}.get(state, "bot"))
            session.add(conversation)
            await session.flush()
            rows.append(Escalation(conversation_id=conversation.id, bot="acme", state=state, reason="backlog",
                                   notes=[], created_at=start + timedelta(seconds=i),
                                   operator="sam" if state != "open" else None))
        session.add_all(rows)
    ids = {state: [r.id for r in rows if r.state == state] for state in ("open", "claimed", "resolved")}

    live = (await client.get("/v1/escalations?state=open,claimed", headers=auth("sam"))).json()["escalations"]
    shown = [e["id"] for e in live]
    assert set(ids["open"] + ids["claimed"]) <= set(shown)  # the first to wait included
    assert shown == sorted(shown, reverse=True)  # newest first, as before

    everything = [e["id"] for e in (await client.get("/v1/escalations", headers=auth("sam"))).json()["escalations"]]
    assert set(ids["open"] + ids["claimed"]) <= set(everything)
    resolved = (await client.get("/v1/escalations?state=resolved", headers=auth("sam"))).json()["escalations"]
    assert len(resolved) <= 200  # the history stays a page of the newest
