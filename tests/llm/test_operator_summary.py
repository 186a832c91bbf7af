"""The operator's summary: written by the bot's real model once per conversation state, never by `offline`."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.llm import LLMRouter
from gateway.llm_retry import RetryPolicy
from gateway.operators.summary import extractive_summary, summarize
from gateway.pipeline.answer import INTERRUPTED, NOT_RUN
from gateway.settings import BotSettings
from tests.fakes.openai_server import Turn
from tests.llm.conftest import fake_model

NO_RETRY = RetryPolicy(num_retries=0, backoff_base=0.01, backoff_max=0.05)


@dataclass
class Row:
    id: int
    author: str
    text: str
    tool_calls: list[dict] = field(default_factory=list)


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


async def test_another_conversation_with_the_same_row_ids_gets_its_own_summary(openai_fake) -> None:
    """SQLite can give a deleted conversation's row ids again (retention, `gateway forget`): the cache
    must not show the old conversation's summary for the new one."""
    openai_fake.script("primary", Turn(text="Charged twice in March."), Turn(text="Wants to change plan."))
    router = LLMRouter([fake_model(openai_fake, "primary")], timeout=5, retry=NO_RETRY)
    bot = BotSettings(name="acme-reused", model="primary")

    old = await summarize(router, bot, MESSAGES, reason="asked", conversation_id=7)
    new = await summarize(router, bot, [Row(1, "contact", "Move me to Team"), Row(2, "bot", "Sure.")],
                          reason="asked", conversation_id=8)

    assert old["text"] == "Charged twice in March." and new["text"] == "Wants to change plan."


LOOKUP = {"name": "invoice_status", "arguments": {"invoice_number": "INV-1"}, "result": {"found": True}}
TICKET = {"name": "create_ticket", "arguments": {}, "result": {"error": INTERRUPTED}}
WITH_TOOLS = [Row(1, "contact", "I was charged twice for March"),
              Row(2, "bot", "Invoice INV-1 is paid.", [LOOKUP]),
              Row(3, "contact", "Then refund one"),
              Row(4, "bot", "Sorry, something went wrong on our side.", [LOOKUP, TICKET])]


def test_the_extractive_summary_names_the_tools_the_bot_used_and_a_cut_off_call() -> None:
    text = extractive_summary(WITH_TOOLS, reason="turn timed out")
    assert "Tools the bot used: invoice_status, create_ticket (interrupted)" in text.splitlines()
    assert "Tools" not in extractive_summary(MESSAGES, reason="asked")
    never_run = {"name": "whoami", "arguments": {}, "result": {"error": NOT_RUN}}
    failed = {"name": "lookup", "arguments": {}, "result": {"error": "tool timed out after 10s"}}
    rows = [Row(1, "contact", "who am I?"), Row(2, "bot", "I couldn't find that.", [never_run, failed])]
    assert "Tools the bot used: lookup (failed)" in extractive_summary(rows).splitlines()


async def test_the_model_writing_the_summary_is_told_which_tools_ran_but_not_their_results(openai_fake) -> None:
    openai_fake.script("primary", Turn(text="Wants a refund; a ticket may have been opened."))
    router = LLMRouter([fake_model(openai_fake, "primary")], timeout=5, retry=NO_RETRY)
    await summarize(router, BotSettings(name="acme-tools", model="primary"), WITH_TOOLS, reason="asked")
    (request,) = openai_fake.requests_for("primary")
    transcript = request.messages[-1]["content"]
    assert '"tools": ["invoice_status", "create_ticket (interrupted)"]' in transcript
    assert '"found"' not in transcript


async def test_a_forgotten_conversations_summary_is_never_shown_for_the_one_that_takes_its_ids(
        openai_fake, migrated_url) -> None:
    """`gateway forget` deleted the newest conversation; on SQLite the next one takes its conversation and
    message ids again, and escalated for the same reason it was keyed the same as the forgotten one's
    summary, so the operator was shown what the forgotten person had asked."""
    from gateway.models import ConversationRef, InboundMessage, Sender
    from gateway.operators.summary import summary_messages
    from gateway.retention import forget_contact
    from storage import repositories as repo
    from storage.engine import create_engine, session_factory

    openai_fake.script("primary", Turn(text="Ada was charged twice."), Turn(text="Ben wants to change plan."))
    router = LLMRouter([fake_model(openai_fake, "primary")], timeout=5, retry=NO_RETRY)
    bot = BotSettings(name=f"acme-forgotten-{migrated_url.split('+')[0]}", model="primary")  # summaries are cached per process
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)

    async def escalated(user: str, text: str) -> dict[str, str]:
        async with sessions() as session, session.begin():
            stored = await repo.store_inbound(session, bot=bot.name, message=InboundMessage(
                channel="web", external_id=f"{user}-1", conversation=ConversationRef(channel="web", chat=user),
                sender=Sender(external_id=user), text=text))
        async with sessions() as session:
            messages = await summary_messages(session, conversation_id=stored.conversation_id)
        return await summarize(router, bot, messages, reason="the customer asked for a person",
                               conversation_id=stored.conversation_id)

    try:
        assert (await escalated("ada", "I was charged twice, card ending 4242"))["text"] == "Ada was charged twice."
        await forget_contact(sessions, channel="web", user="ada")
        assert (await escalated("ben", "Move me to the Team plan"))["text"] == "Ben wants to change plan."
    finally:
        await engine.dispose()
