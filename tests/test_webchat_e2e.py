"""End to end through the real ASGI app: web chat → inbox → worker → hybrid search → offline LLM → reply."""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import func, select

from gateway.app import create_app
from gateway.reply_settings import WidgetTexts
from gateway.settings import load_settings
from storage.models import Conversation, Message
from tests.conftest import ROOT, upgrade, write_config

DOCS = ["plans-and-pricing.md", "troubleshooting-sync.md", "account.md"]
# One app (and one ingest) for the module: the tests use separate sessions, so they stay independent.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("e2e")
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in DOCS:
        shutil.copy(ROOT / "examples" / "help-center" / name, docs / name)
    bot = {"name": "acme", "fallback_text": "I couldn't find that in the Acme help center.",
           "sources": [{"name": "help", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}],
           "channels": {"web": {}}}
    settings = load_settings(write_config(tmp_path, bots=[bot]))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await app.state.services.knowledge.ingest()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test", timeout=60) as http:
            http.services = app.state.services
            yield http


async def _stored_messages(services, session_id: str) -> int:
    async with services.sessions() as session:
        return (await session.execute(select(func.count()).select_from(Message).where(
            Message.conversation_id.in_(select(Conversation.id).where(Conversation.chat == session_id))))).scalar_one()


async def test_webchat_answers_with_citation_from_knowledge_base(client):
    response = await client.post("/v1/bots/acme/chat", json={"session_id": "s-1",
                                                             "text": "How much does the Plus plan cost?"})
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "bot" and isinstance(body["conversation_id"], int)
    assert "$" in body["reply"] and "[1]" in body["reply"]
    assert body["citations"] and body["citations"][0]["title"]
    transcript = (await client.get("/v1/bots/acme/sessions/s-1/messages")).json()
    assert [(m["direction"], m["author"]) for m in transcript["messages"]] == [("in", "contact"), ("out", "bot")]
    assert transcript["messages"][1]["text"] == body["reply"]
    after = transcript["messages"][0]["id"]
    later = (await client.get(f"/v1/bots/acme/sessions/s-1/messages?after={after}")).json()
    assert [m["direction"] for m in later["messages"]] == ["out"]


async def test_webchat_off_topic_question_gets_fallback_without_citations(client):
    body = (await client.post("/v1/bots/acme/chat", json={
        "session_id": "s-2", "text": "Who won the football world cup in 1998?"})).json()
    assert body["reply"] == "I couldn't find that in the Acme help center."
    assert body["citations"] == []


async def test_webchat_streams_tokens_then_done(client):
    async with client.stream("POST", "/v1/bots/acme/chat", headers={"Accept": "text/event-stream"},
                             json={"session_id": "s-3", "text": "How do I reset my password?"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events, current = [], None
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                current = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and current:
                events.append((current, json.loads(line.split(":", 1)[1])))
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "done" and "token" in kinds
    done = events[-1][1]
    assert done["reply"] and done["citations"]


@pytest.mark.parametrize("text, status, words", [
    ("", 422, "empty"), ("   \n ", 422, "empty"), ("\u200b\u200b\ufeff", 422, "empty"), (" \u2060\u200d ", 422, "empty"),
    ("x" * 4001, 413, "limit is 4000"),
])
async def test_webchat_refuses_bad_text_and_stores_nothing(client, text, status, words):
    response = await client.post("/v1/bots/acme/chat", json={"session_id": "s-4", "text": text})
    assert response.status_code == status
    assert words in response.json()["error"]
    assert await _stored_messages(client.services, "s-4") == 0


@pytest.mark.parametrize("message_id", ["", "bad id!", " x", "x\n", "m/1", "m" * 129])
async def test_webchat_refuses_a_message_id_an_operator_reply_refuses_and_stores_nothing(client, message_id):
    # The README's rule for both (1-128 letters, digits, '_', '-', '.', ':'); the web chat took anything
    # up to 128 characters, and "" silently as no id.
    response = await client.post("/v1/bots/acme/chat", json={"session_id": "s-ids", "text": "Hello?", "message_id": message_id})
    assert response.status_code == 422 and "message_id must be" in response.json()["error"]
    assert await _stored_messages(client.services, "s-ids") == 0


async def test_webchat_retried_post_with_same_message_id_is_answered_once(client):
    payload = {"session_id": "s-5", "text": "What does E-SYNC-409 mean?", "message_id": "m-1"}
    first = (await client.post("/v1/bots/acme/chat", json=payload)).json()
    second = (await client.post("/v1/bots/acme/chat", json=payload)).json()
    assert first["message_id"] == second["message_id"] and first["reply"] == second["reply"]
    assert await _stored_messages(client.services, "s-5") == 2  # one question, one answer


async def test_webchat_a_used_message_id_with_another_text_is_409_not_the_old_answer(client):
    payload = {"session_id": "s-6", "text": "What does E-SYNC-409 mean?", "message_id": "m-1"}
    first = await client.post("/v1/bots/acme/chat", json=payload)
    assert first.status_code == 200
    reused = await client.post("/v1/bots/acme/chat", json={**payload, "text": "How do I enable 2FA?"})
    assert reused.status_code == 409 and "new message_id" in reused.json()["error"]
    streamed = await client.post("/v1/bots/acme/chat", json={**payload, "text": "How do I enable 2FA?"},
                                 headers={"Accept": "text/event-stream"})
    assert streamed.status_code == 409
    assert await _stored_messages(client.services, "s-6") == 2  # the first question and its answer only
    again = await client.post("/v1/bots/acme/chat", json={**payload, "message_id": "m-2", "text": "How do I enable 2FA?"})
    assert again.status_code == 200 and again.json()["reply"] != first.json()["reply"]


async def test_webchat_same_message_id_in_another_session_is_its_own_message(client):
    """Ids like "m-1" are unique per visitor only: another session's reply must never come back."""
    alice = (await client.post("/v1/bots/acme/chat", json={"session_id": "s-alice", "text": "What does E-SYNC-409 mean?",
                                                          "message_id": "m-1"})).json()
    bob = (await client.post("/v1/bots/acme/chat", json={"session_id": "s-bob", "text": "How do I enable 2FA?",
                                                        "message_id": "m-1"})).json()
    assert bob["message_id"] != alice["message_id"] and bob["conversation_id"] != alice["conversation_id"]
    assert "2FA" in bob["reply"] or "two-factor" in bob["reply"].lower(), bob
    assert await _stored_messages(client.services, "s-bob") == 2


async def test_webchat_unknown_bot_and_operations_endpoints(client):
    assert (await client.post("/v1/bots/nope/chat", json={"session_id": "s", "text": "hi"})).status_code == 404
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "qdrant": "ok"}
    assert "acme/help" in ready.json()["schedule"] and ready.json()["scheduler_leader"] is True  # SQLite: the only process
    assert ready.json()["ingest"]["acme/help"]["status"] == "ok"  # the module's ingest
    assert ready.json()["chunks"]["acme"] > 0
    await client.post("/v1/bots/acme/chat", json={"session_id": "s-6", "text": "How do I enable 2FA?"})
    metrics = (await client.get("/metrics")).text
    assert 'gateway_ingest_last_run_ok{bot="acme",source="help"} 1.0' in metrics
    assert 'gateway_messages_in_total{bot="acme",channel="web"}' in metrics
    assert "gateway_stage_seconds_bucket" in metrics
    bots = (await client.get("/v1/bots")).json()
    assert bots == {"bots": [{"name": "acme", "channels": ["web"], "texts": WidgetTexts().model_dump(),
                                 "lang": "en"}]}
    widget = await client.get("/")
    assert widget.status_code == 200 and "<html" in widget.text.lower()
