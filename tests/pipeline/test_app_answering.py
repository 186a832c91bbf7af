"""Answering through the whole app: web chat → inbox → worker → pipeline → store, with the models on
the local scripted OpenAI fake and a one-document knowledge base."""

from __future__ import annotations

import pytest
import pytest_asyncio
from sqlalchemy import select

from gateway.budget import BUDGET_ESCALATION
from storage.models import Escalation, Message, Usage
from tests.conftest import app_client, chat_events, docs_source
from tests.english_replies import BUDGET_REPLY, LLM_DOWN_REPLY
from tests.fakes.openai_server import ToolCallSpec, Turn, model_entry

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.usefixtures("fresh_fake")]
PLUS_QUESTION = "How much does the Plus plan cost?"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, fake):
    tmp_path = tmp_path_factory.mktemp("answering")
    source = [docs_source(tmp_path)]
    bots = [
        {"name": "acme", "model": "primary", "fallbacks": ["backup"], "sources": source, "channels": {"web": {}},
         "tools": [{"name": "invoice_status", "type": "python", "import_path": "examples.tools.invoice:invoice_status"},
                   {"name": "shipment", "type": "python", "import_path": "tests.pipeline.sample_tools:shipment",
                    "parameters": {"type": "object", "properties": {"order": {"type": "string"}}}},
                   {"name": "escalate_to_human", "type": "builtin"}]},
        # About $0.0019 a call with the fake's usage (12 + 7 tokens): one answer spends the budget.
        {"name": "thrifty", "model": "priced", "daily_budget_usd": 0.001, "sources": source,
         "channels": {"web": {}}},
    ]
    models = [model_entry(fake, "primary"), model_entry(fake, "backup"),
              model_entry(fake, "priced", input_cost_per_token=1e-4, output_cost_per_token=1e-4)]
    async with app_client(tmp_path, bots=bots, models=models, ingest=True,
                          llm={"timeout": 5, "num_retries": 0}) as http:
        yield http


async def _rows(client, model, *where):
    async with client.services.sessions() as session:
        return (await session.execute(select(model).where(*where))).scalars().all()


async def test_app_every_model_failing_gives_honest_reply_and_escalation(client, fake):
    fake.script("primary", Turn(status=500))
    fake.script("backup", Turn(status=429, retry_after=0))

    body = (await client.post("/v1/bots/acme/chat", json={"session_id": "down-1", "text": PLUS_QUESTION})).json()

    assert body["reply"] == LLM_DOWN_REPLY and body["citations"] == []
    assert body["state"] == "waiting"
    [escalation] = await _rows(client, Escalation, Escalation.conversation_id == body["conversation_id"])
    assert escalation.reason == "every model failed"
    [inbound] = await _rows(client, Message, Message.id == body["message_id"])
    assert inbound.status == "done"
    assert len(fake.requests_for("primary")) == 1 and len(fake.requests_for("backup")) == 1


async def test_app_sse_stream_broken_after_tokens_ends_with_the_fallbacks_done(client, fake):
    fake.script("primary", Turn(text="The Plus plan costs [1] six dollars. And then some more.", break_after=8))
    fake.script("backup", Turn(text="The Plus plan costs $6 per month [1]."))

    events = await chat_events(client, "acme", "sse-1", PLUS_QUESTION)

    tokens = "".join(data["text"] for kind, data in events if kind == "token")
    # The widget replaces these with `done`'s reply; the sentence the break cut short never showed.
    assert tokens == "The Plus plan costs [1] six dollars."
    kind, done = events[-1]
    assert kind == "done" and done["reply"] == "The Plus plan costs $6 per month [1]." and done["state"] == "bot"


async def test_app_tool_calls_and_usage_stored_with_the_turn(client, fake):
    ask = ToolCallSpec("invoice_status", {"invoice_number": "INV-2025-005530"}, id="call-bob")
    fake.script("primary", Turn(tool_calls=(ask,), usage=(30, 5)),
                Turn(text="I couldn't find invoice INV-2025-005530 on your account.", usage=(50, 9)))

    body = (await client.post("/v1/bots/acme/chat", json={
        "session_id": "demo-alice-session", "text": "What's the status of invoice INV-2025-005530?"})).json()

    assert body["reply"] == "I couldn't find invoice INV-2025-005530 on your account."
    [reply] = await _rows(client, Message, Message.reply_to_id == body["message_id"])
    [call] = reply.tool_calls
    assert call["id"] == "call-bob" and call["name"] == "invoice_status"
    assert call["arguments"] == {"invoice_number": "INV-2025-005530"} and call["result"]["found"] is False
    usage = await _rows(client, Usage, Usage.message_id == body["message_id"])
    assert [(u.model, u.prompt_tokens, u.completion_tokens) for u in usage] == [("primary", 30, 5), ("primary", 50, 9)]
    assert all(u.partial and u.cost_usd == 0.0 for u in usage)  # the fake model has no known price


async def test_app_a_tool_result_with_dates_and_decimals_is_answered_and_stored(client, fake):
    # A row from a database: a datetime, a Decimal, a UUID, a date as a key, a NaN. The model was shown them
    # as text, but the stored turn kept the objects, which no JSON column can hold (PostgreSQL's jsonb not
    # NaN either): the reply was never stored. A date as a key failed even the model's copy.
    ask = ToolCallSpec("shipment", {"order": "A-7"}, id="call-ship")
    fake.script("primary", Turn(tool_calls=(ask,)), Turn(text="Your order A-7 has shipped."))

    body = (await client.post("/v1/bots/acme/chat", json={
        "session_id": "ship-1", "text": "Has my order A-7 shipped?"})).json()

    assert body["reply"] == "Your order A-7 has shipped."
    [reply] = await _rows(client, Message, Message.reply_to_id == body["message_id"])
    [call] = reply.tool_calls
    assert call["result"] == {"order": "A-7", "shipped_at": "2025-03-04 10:00:00+00:00", "total": "59.90",
                              "tracking": "12345678-1234-5678-1234-567812345678",
                              "by_day": {"2025-03-04": "shipped"}, "weight": None}
    sent = [m for m in fake.requests_for("primary")[1].messages if m["role"] == "tool"][0]["content"]
    assert "2025-03-04 10:00:00+00:00" in sent and "59.90" in sent


async def test_app_daily_budget_spent_stops_model_calls(client, fake):
    fake.script("priced", Turn(text="Plus costs $6 per month [1]."), Turn(text="never sent [1]."))

    first = (await client.post("/v1/bots/thrifty/chat", json={"session_id": "b-1", "text": PLUS_QUESTION})).json()
    [spent] = await _rows(client, Usage, Usage.message_id == first["message_id"])
    second = (await client.post("/v1/bots/thrifty/chat", json={"session_id": "b-2", "text": PLUS_QUESTION})).json()

    assert first["reply"] == "Plus costs $6 per month [1]."
    assert spent.cost_usd == pytest.approx((12 + 7) * 1e-4) and not spent.partial
    # The escalation service may add its own acknowledgement after ours.
    assert second["reply"].startswith(BUDGET_REPLY) and second["state"] == "waiting"
    assert len(fake.requests_for("priced")) == 1  # no model call once the budget is spent
    [escalation] = await _rows(client, Escalation, Escalation.conversation_id == second["conversation_id"])
    assert escalation.reason == BUDGET_ESCALATION


async def test_app_sse_delivers_every_token_of_a_fast_answer(client, fake):
    """Tokens still queued when the answer was stored were dropped (the status was read before each)."""
    text = "The Plus plan costs $6 per month [1] or $60 per year, for one person, on every device they use."
    fake.script("primary", Turn(text=text))

    events = await chat_events(client, "acme", "sse-all", PLUS_QUESTION)

    assert "".join(data["text"] for kind, data in events if kind == "token") == text
    assert events[-1][0] == "done"


async def test_app_sse_resets_what_a_tool_round_streamed_before_the_answer_streams(client, fake):
    """The round's cited preamble and the answer's tokens ran together ("…month [1].Your invoice…")."""
    ask = ToolCallSpec("invoice_status", {"invoice_number": "INV-2025-004217"})
    fake.script("primary", Turn(text="The Plus plan costs $6 per month [1]. Let me check that invoice.", tool_calls=(ask,)),
                Turn(text="The Plus plan costs $60 per year [1]. I could not find that invoice."))

    events = await chat_events(client, "acme", "sse-tools", "Is INV-2025-004217 paid, and what does Plus cost?")

    kinds = [kind for kind, _ in events]
    assert kinds.count("reset") == 1 and kinds[-1] == "done"
    after = "".join(data["text"] for kind, data in events[kinds.index("reset"):] if kind == "token")
    assert after == events[-1][1]["reply"] == "The Plus plan costs $60 per year [1]. I could not find that invoice."
