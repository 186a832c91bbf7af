"""An operator reply's `message_id` (idempotency key), through the real app on SQLite and PostgreSQL,
with the customer on the fake Slack Web API: a repeat is stored and sent once, a reused id with other
text is 409, a reply without one behaves as before, and concurrent repeats make one message.

Why: a crash review found that an operator whose reply call ended in "Server disconnected" (the server
died, or the connection dropped, after storing the reply) had no way to retry without the customer
getting the message twice.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
import pytest_asyncio
from sqlalchemy import select

from gateway.escalation.handoff import Escalations, reply_key
from gateway.models import ConversationRef
from storage import repositories as repo
from storage.models import Escalation, Message
from tests.conftest import app_client, drop_postgres, fresh_postgres_url
from tests.fakes.slack_api import BOT_TOKEN
from tests.operators.conftest import SIGNING_SECRET, TOKENS, auth

pytestmark = pytest.mark.asyncio(loop_scope="module")
_chats = itertools.count(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["sqlite", "postgres"])
async def app(request, tmp_path_factory, slack):
    """The real app for the module, on each database; no worker, so every send is the reply call's own."""
    database_url = None
    if request.param == "postgres":
        database_url = await asyncio.to_thread(fresh_postgres_url, "gw_reply")
        if database_url is None:
            pytest.skip("PostgreSQL unreachable")
    bots = [{"name": "acme", "channels": {"slack": {"bot_token": "${REPLY_SLACK_BOT}",
                                                    "signing_secret": "${REPLY_SLACK_SECRET}",
                                                    "api_base": slack.api_base}}}]
    operators = [{"name": "sam", "token": "${REPLY_SAM_TOKEN}", "bots": ["acme"]},
                 {"name": "kim", "token": "${REPLY_KIM_TOKEN}", "bots": ["acme"]}]
    env = {"REPLY_SAM_TOKEN": TOKENS["sam"], "REPLY_KIM_TOKEN": TOKENS["kim"], "REPLY_SLACK_BOT": BOT_TOKEN,
           "REPLY_SLACK_SECRET": SIGNING_SECRET}
    try:
        async with app_client(tmp_path_factory.mktemp(f"reply-{request.param}"), bots=bots, operators=operators,
                              env=env, start_worker=False, database_url=database_url) as http:
            await http.services.reminders.stop()
            yield http
    finally:
        if database_url is not None:
            await asyncio.to_thread(drop_postgres, database_url)


async def _escalation(app) -> tuple[int, str]:
    """A Slack customer's open escalation; (escalation id, the customer's DM channel)."""
    chat = f"DREPLY{next(_chats)}"
    async with app.services.sessions() as session, session.begin():
        contact = await repo.upsert_contact(session, channel="slack", external_id=f"U{chat}", display_name="Pat")
        ref = ConversationRef(channel="slack", workspace="T111", chat=chat)
        conversation = await repo.get_or_create_conversation(session, bot="acme", ref=ref, contact_id=contact.id)
        escalation = await app.services.escalations.open_in(session, conversation=conversation, reason="asked")
    return escalation.id, chat


async def _operator_texts(app, escalation_id: int) -> list[str]:
    """The operator messages stored in the escalation's conversation, oldest first."""
    async with app.services.sessions() as session:
        escalation = await session.get(Escalation, escalation_id)
        return list((await session.execute(select(Message.text).where(
            Message.conversation_id == escalation.conversation_id, Message.author == "operator")
            .order_by(Message.id))).scalars())


def _sent(slack, chat: str, text: str) -> int:
    """How many times the fake Slack was asked to post `text` to the customer."""
    return len([c for c in slack.calls_to("chat.postMessage")
                if c.params.get("channel") == chat and c.params.get("text") == text])


async def _reply(app, escalation_id: int, body: dict, who: str = "sam"):
    return await app.post(f"/v1/escalations/{escalation_id}/reply", json=body, headers=auth(who))


async def test_reply_repeated_message_id_is_stored_and_sent_once(app, slack):
    eid, chat = await _escalation(app)
    body = {"text": "Sam here: your refund is on its way.", "message_id": "m-1"}
    first = await _reply(app, eid, body)
    assert first.status_code == 201, first.text
    assert set(first.json()) == {"message_id", "status"} and first.json()["status"] == "sent"

    again = await _reply(app, eid, body)  # the retry after "Server disconnected"
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert await _operator_texts(app, eid) == [body["text"]]
    assert _sent(slack, chat, body["text"]) == 1

    # Still the same reply after the thread moved on (here: handed back): not a 409 about the state.
    assert (await app.post(f"/v1/escalations/{eid}/resolve", headers=auth("sam"))).status_code == 200
    late = await _reply(app, eid, body)
    assert late.status_code == 200 and late.json() == first.json()
    assert _sent(slack, chat, body["text"]) == 1


async def test_reply_same_message_id_with_other_text_is_409(app, slack):
    eid, chat = await _escalation(app)
    assert (await _reply(app, eid, {"text": "First answer.", "message_id": "m-2"})).status_code == 201
    clash = await _reply(app, eid, {"text": "A different answer.", "message_id": "m-2"})
    assert clash.status_code == 409
    assert "message_id 'm-2' was already used for another reply" in clash.json()["error"]
    assert await _operator_texts(app, eid) == ["First answer."]
    assert _sent(slack, chat, "A different answer.") == 0


async def test_reply_without_message_id_sends_every_time(app, slack):
    eid, chat = await _escalation(app)
    first = await _reply(app, eid, {"text": "Are you still there?"})
    second = await _reply(app, eid, {"text": "Are you still there?"})
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["message_id"] != second.json()["message_id"]
    assert await _operator_texts(app, eid) == ["Are you still there?", "Are you still there?"]
    assert _sent(slack, chat, "Are you still there?") == 2


async def test_reply_message_id_is_scoped_to_the_escalation_and_the_operator(app, slack):
    eid, chat = await _escalation(app)
    other_eid, other_chat = await _escalation(app)
    assert (await _reply(app, eid, {"text": "Hello from Sam.", "message_id": "1"})).status_code == 201
    assert (await _reply(app, other_eid, {"text": "Hello from Sam.", "message_id": "1"})).status_code == 201
    taken = await app.post(f"/v1/escalations/{eid}/claim", json={"take_over": True}, headers=auth("kim"))
    assert taken.status_code == 200
    kims = await _reply(app, eid, {"text": "Hello from Kim.", "message_id": "1"}, who="kim")
    assert kims.status_code == 201, kims.text
    assert await _operator_texts(app, eid) == ["Hello from Sam.", "Hello from Kim."]
    assert _sent(slack, other_chat, "Hello from Sam.") == 1 and _sent(slack, chat, "Hello from Kim.") == 1


@pytest.mark.parametrize("message_id", ["", "x" * 129, "two words", "a/b", "caf\u00e9", 42])
async def test_reply_bad_message_id_is_422_and_stores_nothing(app, message_id):
    eid, _ = await _escalation(app)
    refused = await _reply(app, eid, {"text": "Hi", "message_id": message_id})
    assert refused.status_code == 422, refused.text
    assert "message_id" in refused.json()["error"]
    assert await _operator_texts(app, eid) == []


async def test_reply_longest_message_id_fits_the_delivery_key(app, slack):
    eid, chat = await _escalation(app)
    longest = "k" * 128
    assert len(reply_key(2**63 - 1, "an operator whose name is long " * 10, longest)) <= 255
    body = {"text": "A long key.", "message_id": longest}
    assert (await _reply(app, eid, body)).status_code == 201
    assert (await _reply(app, eid, body)).status_code == 200
    assert _sent(slack, chat, "A long key.") == 1


async def test_reply_concurrent_repeats_make_one_message(app, slack):
    eid, chat = await _escalation(app)  # open: each request also claims it first
    body = {"text": "Only once, please.", "message_id": "double-click"}
    responses = await asyncio.gather(*(_reply(app, eid, body) for _ in range(5)))
    assert sorted(r.status_code for r in responses) == [200, 200, 200, 200, 201], [r.text for r in responses]
    assert len({r.json()["message_id"] for r in responses}) == 1
    assert await _operator_texts(app, eid) == [body["text"]]
    assert _sent(slack, chat, body["text"]) == 1


async def test_reply_race_past_the_lookup_is_settled_by_the_unique_key(app, slack, monkeypatch):
    """Both requests miss the stored reply (the lookup ran before the other's insert committed): the
    database's unique key lets one insert in, and the other answers with that reply, unsent."""
    eid, chat = await _escalation(app)
    lookup = Escalations._stored_reply
    blind = {"left": 2}  # the first lookup of each request finds nothing

    async def racing_lookup(self, escalation, key):
        if blind["left"]:
            blind["left"] -= 1
            return None
        return await lookup(self, escalation, key)

    monkeypatch.setattr(Escalations, "_stored_reply", racing_lookup)
    body = {"text": "Raced.", "message_id": "race-1"}
    first = await _reply(app, eid, body)
    second = await _reply(app, eid, body)
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["message_id"] == first.json()["message_id"]
    clash = await _reply(app, eid, {"text": "Raced, but different.", "message_id": "race-1"})
    assert clash.status_code == 409
    assert await _operator_texts(app, eid) == ["Raced."]
    assert _sent(slack, chat, "Raced.") == 1


async def test_reply_and_note_with_a_nul_character_are_stored_without_it(app, slack):
    # Valid in JSON, refused by PostgreSQL's text type: it was a 500 there.
    eid, chat = await _escalation(app)
    reply = await _reply(app, eid, {"text": "Refund\u0000 issued."})
    note = await app.post(f"/v1/escalations/{eid}/notes", json={"text": "checked\u0000"}, headers=auth("sam"))
    assert (reply.status_code, note.status_code) == (201, 201), (reply.text, note.text)
    assert await _operator_texts(app, eid) == ["Refund issued."]
    assert _sent(slack, chat, "Refund issued.") == 1


@pytest.mark.parametrize("path", ["", "/reply"])
async def test_an_escalation_id_past_the_databases_integers_is_422_not_500(app, path):
    # Ids are INTEGER columns: 32 bits on PostgreSQL, where a larger one failed in the driver with a 500.
    response = await (app.get(f"/v1/escalations/{2**31}", headers=auth("sam")) if not path else
                      _reply(app, 2**31, {"text": "hello"}))
    assert response.status_code == 422
    assert (await app.get(f"/v1/escalations/{2**31 - 1}", headers=auth("sam"))).status_code == 404
