"""The escalation list in a backlog (a model outage hands every conversation to a person). Cut at the newest 200
of all, it left out the customers who had waited longest, whom the console puts on top, and nothing said it was
cut. Uncut, every reading built every open escalation (5,000: 2 MB and seconds of the server's work), and the
console reads it on every live event. It now gives every claimed escalation, the open ones whose customers have
waited longest up to a page, the newest resolved, and `counts`: how many there are of each."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gateway.models import utcnow
from gateway.operators.api import LIST_PAGE
from storage.models import Conversation, Escalation
from tests.operators.conftest import auth

pytestmark = pytest.mark.asyncio(loop_scope="module")

OPEN, CLAIMED, RESOLVED = LIST_PAGE + 60, 5, LIST_PAGE + 20


async def test_a_backlog_lists_the_longest_waiting_and_counts_them_all(client):
    start = utcnow() - timedelta(hours=3)
    async with client.services.sessions() as session, session.begin():
        rows = []
        for i in range(OPEN + CLAIMED + RESOLVED):
            state = "claimed" if i < CLAIMED else "open" if i < CLAIMED + OPEN else "resolved"
            conversation = Conversation(bot="acme", channel="web", chat=f"queue-{i}",
                                        state={"open": "waiting", "claimed": "operator"}.get(state, "bot"))
            session.add(conversation)
            await session.flush()
            rows.append(Escalation(conversation_id=conversation.id, bot="acme", state=state, reason="backlog",
                                   notes=[], created_at=start + timedelta(seconds=i),
                                   operator="sam" if state != "open" else None))
        # The first opened was released a minute ago: its customer's current wait is the shortest of all.
        rows[CLAIMED].waiting_since = utcnow() - timedelta(minutes=1)
        session.add_all(rows)
    opened = [r for r in rows if r.state == "open"]
    longest = sorted(opened[1:], key=lambda r: r.created_at)[:LIST_PAGE]
    claimed = [r.id for r in rows if r.state == "claimed"]

    body = (await client.get("/v1/escalations?state=open,claimed", headers=auth("sam"))).json()
    shown = [e["id"] for e in body["escalations"]]
    assert shown == sorted(shown, reverse=True)  # newest first, as before
    assert sorted(e["id"] for e in body["escalations"] if e["state"] == "open") == sorted(r.id for r in longest)
    assert rows[CLAIMED].id not in shown  # released since: waited a minute
    assert set(claimed) <= set(shown)  # every claim (Sign out releases the operator's own)
    assert body["counts"] == {"open": OPEN, "claimed": CLAIMED}

    every = (await client.get("/v1/escalations", headers=auth("sam"))).json()
    assert every["counts"] == {"open": OPEN, "claimed": CLAIMED, "resolved": RESOLVED}
    resolved = [e["id"] for e in every["escalations"] if e["state"] == "resolved"]
    assert sorted(resolved, reverse=True) == sorted((r.id for r in rows if r.state == "resolved"), reverse=True)[:LIST_PAGE]
    assert len(every["escalations"]) == CLAIMED + 2 * LIST_PAGE

    # Another team's operator counts none of them.
    assert (await client.get("/v1/escalations?state=open", headers=auth("lee"))).json()["counts"] == {"open": 0}
