"""The model provider is down (LiteLLM against a port nothing listens on): a Spanish bot says so in its
configured Spanish, over the web chat's JSON and its stream, and adds no English acknowledgement."""

from __future__ import annotations

import pytest
import pytest_asyncio
from sqlalchemy import select

from storage.models import Message
from tests.conftest import app_client, chat_events, docs_source
from tests.scale.replicas import free_port
from tests.test_config_replies import SPANISH

pytestmark = pytest.mark.asyncio(loop_scope="module")
QUESTION = "How much does the Plus plan cost?"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("replies-outage")
    source = [docs_source(tmp_path)]
    models = [{"model_name": "caido", "litellm_params": {
        "model": "openai/caido", "api_base": f"http://127.0.0.1:{free_port()}/v1", "api_key": "${NO_KEY:-sk-none}"}}]
    bots = [{"name": name, "model": "caido", "sources": source, "channels": {"web": {}}, "replies": SPANISH,
             "escalation": {"enabled": escalates}} for name, escalates in (("tienda", True), ("sola", False))]
    bots.append({**bots[0], "name": "muda", "replies": {**SPANISH, "person_will_help": ""},
                 "escalation": {"acknowledgement": "Una persona te responderá aquí."}})
    async with app_client(tmp_path, bots=bots, models=models, ingest=True,
                          llm={"timeout": 5, "num_retries": 0}) as http:
        yield http


async def test_the_provider_down_is_told_in_spanish_with_a_person_coming_and_nothing_in_english(client):
    body = (await client.post("/v1/bots/tienda/chat", json={"session_id": "caido-1", "text": QUESTION})).json()

    assert body["reply"] == f"{SPANISH['llm_down']} {SPANISH['person_will_help']}" and body["state"] == "waiting"
    async with client.services.sessions() as session:
        replies = (await session.execute(select(Message.text).where(
            Message.reply_to_id == body["message_id"], Message.direction == "out"))).scalars().all()
    assert replies == [body["reply"]]  # its own words already say a person is coming: no acknowledgement


async def test_an_empty_person_will_help_is_followed_by_the_acknowledgement(client):
    """With `person_will_help: ""` the outage sentence alone promised nobody, yet counted as the promise:
    the customer went to a person and only heard that the bot could not answer."""
    body = (await client.post("/v1/bots/muda/chat", json={"session_id": "caido-3", "text": QUESTION})).json()

    assert body["state"] == "waiting"
    assert body["reply"] == f"{SPANISH['llm_down']}\n\nUna persona te responderá aquí."


async def test_a_bot_without_escalation_streams_the_spanish_try_again(client):
    events = await chat_events(client, "sola", "caido-2", QUESTION)

    kind, done = events[-1]
    assert kind == "done" and done["state"] == "bot"
    assert done["reply"] == f"{SPANISH['llm_down']} {SPANISH['try_again']}"
