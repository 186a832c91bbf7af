"""A turn past `worker.turn_timeout`, through the whole app: one failure reply, a person, nothing lost.

Each model call has its own timeout, but retries, fallbacks and tool rounds multiply it; the turn's own
deadline is what bounds how long a customer watches "typing…".
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from sqlalchemy import select

from storage.models import Escalation, Message, Usage
from tests.conftest import chat_events, docs_source
from tests.english_replies import FAILURE_REPLY
from tests.fakes.openai_server import Turn, model_entry
from tests.reliability.conftest import running_app

TURN_TIMEOUT_S = 8

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.usefixtures("fresh_fake")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, fake):
    tmp_path = tmp_path_factory.mktemp("turn-deadline")
    models = [model_entry(fake, name, api_key="${REL_LLM_KEY}") for name in ("primary", "backup")]
    bots = [{"name": "acme", "model": "primary", "fallbacks": ["backup"], "channels": {"web": {}},
             "sources": [docs_source(tmp_path)]}]
    # Each call may take 30 s, the whole turn 8 s: the deadline, not the call's timeout, ends it. The turn
    # also holds the search, which took 3 s on a loaded CI machine: with a 3 s deadline the turn ended
    # before the model was asked, and the test failed though nothing was wrong.
    async with running_app(tmp_path, bots=bots, models=models, ingest=True, llm={"timeout": 30, "num_retries": 0},
                           worker={"turn_timeout": TURN_TIMEOUT_S}) as (http, _):
        yield http


async def test_a_turn_past_its_deadline_gets_one_failure_reply_and_a_person(client, fake):
    fake.script("primary", Turn(delay=2 * TURN_TIMEOUT_S, text="The Plus plan costs $6 per month [1]."))
    fake.script("backup", Turn(text="never asked"))
    body = (await client.post("/v1/bots/acme/chat", json={"session_id": "slow", "text": "How much is Plus?"})).json()
    assert body["reply"] == FAILURE_REPLY and body["state"] == "waiting"
    async with client.services.sessions() as session:
        inbound = await session.get(Message, body["message_id"])
        replies = (await session.execute(select(Message).where(
            Message.reply_to_id == inbound.id, Message.direction == "out", Message.author == "bot"))).scalars().all()
        (escalation,) = (await session.execute(select(Escalation).where(
            Escalation.conversation_id == body["conversation_id"]))).scalars().all()
        spent = (await session.execute(select(Usage).where(Usage.message_id == inbound.id))).scalars().all()
    assert inbound.status == "failed" and "worker.turn_timeout" in inbound.error
    # The cut-off call read the prompt (the extracts, the question): billed, so counted, by its estimate.
    assert [(u.model, u.partial, u.completion_tokens) for u in spent] == [("primary", True, 0)]
    assert spent[0].prompt_tokens > 100
    assert [r.text for r in replies] == [FAILURE_REPLY]
    assert f"turn timed out after {TURN_TIMEOUT_S}s" in escalation.reason
    # Stopped where it was: the fallback is not tried after the deadline.
    assert len(fake.requests_for("primary")) == 1 and not fake.requests_for("backup")


async def test_a_streamed_turn_past_its_deadline_ends_with_the_failure_reply(client, fake):
    # Tokens already shown are replaced: the stream's `done` carries the failure reply, not a cut-off answer.
    # The first sentence is out about 1 s after the model is asked, the whole answer would take 13 s.
    fake.script("primary", Turn(text="Plus [1] costs six. " + "And then the answer goes on and on " * 5, chunk_delay=0.3))
    events = await chat_events(client, "acme", "slow-stream", "How much is Plus?")
    tokens = "".join(data["text"] for name, data in events if name == "token")
    kind, done = events[-1]
    assert tokens.startswith("Plus [1] costs six.")  # it was streaming when the deadline came
    assert kind == "done" and done["reply"] == FAILURE_REPLY and done["state"] == "waiting"
