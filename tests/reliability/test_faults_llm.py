"""LLM provider faults through the whole app: timeout, 429, 500, a broken stream, everything down.

The models are on the local scripted OpenAI fake. Each case checks what the customer got (the
fallback's answer or the honest message), that exactly one reply was stored, and that the models
were asked exactly as often as the fallback chain allows (nothing answered twice).
"""

from __future__ import annotations

import pytest
import pytest_asyncio
import structlog
from sqlalchemy import select

from storage.models import Escalation, Message
from tests.conftest import chat_events, docs_source
from tests.english_replies import LLM_DOWN_REPLY
from tests.fakes.openai_server import Turn, model_entry
from tests.reliability.conftest import LLM_KEY, running_app

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.usefixtures("fresh_fake")]
QUESTION = "How much does the Plus plan cost?"
BACKUP_ANSWER = "The Plus plan costs $6 per month [1]."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, fake):
    tmp_path = tmp_path_factory.mktemp("faults-llm")
    models = [model_entry(fake, name, api_key="${REL_LLM_KEY}") for name in ("primary", "backup")]
    bots = [{"name": "acme", "model": "primary", "fallbacks": ["backup"], "channels": {"web": {}},
             "sources": [docs_source(tmp_path)]}]
    # A 2 s client timeout, no in-model retries: the fallback chain is what is under test.
    async with running_app(tmp_path, bots=bots, models=models, ingest=True,
                           llm={"timeout": 2, "num_retries": 0}) as (http, _):
        yield http


async def _replies(client, message_id: int) -> list[Message]:
    async with client.services.sessions() as session:
        return list((await session.execute(select(Message).where(
            Message.reply_to_id == message_id, Message.direction == "out"))).scalars().all())


@pytest.mark.parametrize("failure", [Turn(delay=4, text="too late [1]."), Turn(status=429, retry_after=0),
                                     Turn(status=500), Turn(status=503)],
                         ids=["timeout", "429", "500", "503"])
async def test_llm_primary_failing_is_answered_once_by_the_fallback(client, fake, failure):
    fake.script("primary", failure)
    fake.script("backup", Turn(text=BACKUP_ANSWER))
    body = (await client.post("/v1/bots/acme/chat", json={"session_id": f"llm-{id(failure)}", "text": QUESTION})).json()
    assert body["reply"] == BACKUP_ANSWER and body["state"] == "bot"
    assert [r.text for r in await _replies(client, body["message_id"])] == [BACKUP_ANSWER]
    assert len(fake.requests_for("primary")) == 1 and len(fake.requests_for("backup")) == 1


async def test_llm_every_model_failing_gives_the_honest_reply_once_and_a_person(client, fake):
    fake.script("primary", Turn(delay=4, text="too late"))
    fake.script("backup", Turn(status=500))
    body = (await client.post("/v1/bots/acme/chat", json={"session_id": "llm-down", "text": QUESTION})).json()
    assert body["reply"].startswith(LLM_DOWN_REPLY) and body["state"] == "waiting"
    replies = await _replies(client, body["message_id"])
    assert [r.text for r in replies if r.author == "bot"] == [LLM_DOWN_REPLY]
    async with client.services.sessions() as session:
        escalations = (await session.execute(select(Escalation).where(
            Escalation.conversation_id == body["conversation_id"]))).scalars().all()
    assert len(escalations) == 1


async def test_llm_stream_broken_mid_answer_is_answered_once_by_the_fallback(client, fake):
    fake.script("primary", Turn(text="The Plus plan [1] costs six. Dollars a month for everyone.", break_after=7))
    fake.script("backup", Turn(text="The Plus plan costs $6 per month [1]."))
    events = await chat_events(client, "acme", "llm-stream", QUESTION)
    kind, done = events[-1]
    assert kind == "done" and done["reply"] == "The Plus plan costs $6 per month [1]."
    # The partial stays what was streamed; the fallback's tokens never follow it, its reply replaces it.
    tokens = "".join(data["text"] for name, data in events if name == "token")
    assert tokens == "The Plus plan [1] costs six." and fake.requests_for("backup")[0].stream is False
    assert len([r for r in await _replies(client, done["message_id"]) if r.author == "bot"]) == 1


@pytest.mark.parametrize(("status", "error_type"), [(401, "AuthenticationError"), (403, "APIError")],
                         ids=["revoked", "forbidden"])
async def test_a_key_the_provider_refuses_is_an_error_and_named_in_readyz_until_the_model_answers(
        client, fake, status, error_type):
    """A revoked key (401) was one warning like any bad request, while every message quietly went to the
    fallback model: nothing told the operator (review). A forbidden one (403) still was, and /readyz showed
    it under `model_calls` as `auth (HTTP 403)` but not under `models` (review)."""
    # Some providers' 401 repeats the key it refused: /readyz answers anyone, so it shows it redacted.
    fake.script("primary", Turn(status=status, error=f"Incorrect API key provided: {LLM_KEY}"))
    fake.script("backup", Turn(text=BACKUP_ANSWER))
    with structlog.testing.capture_logs() as logs:
        body = (await client.post("/v1/bots/acme/chat", json={"session_id": f"llm-{status}", "text": QUESTION})).json()
    assert body["reply"] == BACKUP_ANSWER and len(fake.requests_for("primary")) == 1  # not retried
    [refused] = [e for e in logs if e["event"] == "llm.setup_refused"]
    assert refused["log_level"] == "error" and refused["model"] == "primary"
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["models"]["primary"].startswith(f"error: {error_type}")
    assert ready.json()["model_calls"]["primary"]["last_failure"]["failure"] == f"auth (HTTP {status})"
    assert LLM_KEY not in ready.text and "[REDACTED]" in ready.json()["models"]["primary"]

    fake.script("primary", Turn(text=BACKUP_ANSWER))  # the key was fixed at the provider
    await client.post("/v1/bots/acme/chat", json={"session_id": f"llm-{status}-fixed", "text": QUESTION})
    assert (await client.get("/readyz")).json()["models"] == {}


async def test_a_model_failing_on_every_call_is_shown_in_readyz_with_its_endpoint_and_failure(client, fake):
    """A model whose endpoint failed every call (a refused port) left /readyz `ready` with `"models": {}`:
    nothing named the model or the endpoint (review). Readiness stays: the fallbacks still answer."""
    fake.script("primary", Turn(status=500))
    fake.script("backup", Turn(text=BACKUP_ANSWER))
    await client.post("/v1/bots/acme/chat", json={"session_id": "llm-readyz", "text": QUESTION})

    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    primary, backup = ready.json()["model_calls"]["primary"], ready.json()["model_calls"]["backup"]
    assert primary["last_failure"]["failure"] == "HTTP 500" and primary["failures_since_success"] == 1
    assert primary["last_failure"]["endpoint"] == f"http://127.0.0.1:{fake.port}" and primary["last_failure"]["at"]
    assert backup["failures_since_success"] == 0 and backup["last_success_at"] >= primary["last_failure"]["at"]
