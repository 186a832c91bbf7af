"""The operator's summary: written by the bot's real model once per conversation state, never by `offline`."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.llm import LLMRouter
from gateway.llm_retry import RetryPolicy
from gateway.operators.summary import summarize
from gateway.settings import BotSettings
from tests.fakes.openai_server import Turn
from tests.llm.conftest import fake_model

NO_RETRY = RetryPolicy(num_retries=0, backoff_base=0.01, backoff_max=0.05)


@dataclass
class Row:
    id: int
    author: str
    text: str


MESSAGES = [Row(1, "contact", "I was charged twice for March"), Row(2, "bot", "I couldn't find that.")]


async def test_a_failing_model_gives_the_extractive_summary_not_the_offline_models_refusal(openai_fake) -> None:
    openai_fake.script("primary", Turn(status=500))
    router = LLMRouter([fake_model(openai_fake, "primary")], timeout=5, retry=NO_RETRY)
    bot = BotSettings(name="acme", model="primary", fallbacks=["offline"])

    summary = await summarize(router, bot, MESSAGES, reason="every model failed")

    assert summary["kind"] == "extractive" and summary["text"].startswith("Asked first: I was charged twice")


async def test_the_summary_is_written_once_per_conversation_state(openai_fake) -> None:
    openai_fake.script("primary", Turn(text="Charged twice in March; wants a refund."), Turn(text="A second summary."))
    router = LLMRouter([fake_model(openai_fake, "primary")], timeout=5, retry=NO_RETRY)
    bot = BotSettings(name="acme-cache", model="primary")

    first = await summarize(router, bot, MESSAGES, reason="asked")
    again = await summarize(router, bot, MESSAGES, reason="asked")
    later = await summarize(router, bot, [*MESSAGES, Row(3, "contact", "hello?")], reason="asked")

    assert first == again == {"kind": "llm", "text": "Charged twice in March; wants a refund."}
    assert later["text"] == "A second summary." and len(openai_fake.requests_for("primary")) == 2
