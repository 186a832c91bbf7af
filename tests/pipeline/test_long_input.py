"""A long message is answered at once and never scanned for long: one used to freeze the whole server."""

from __future__ import annotations

import pytest

from gateway.offline.extracts import terms
from gateway.pipeline.core import MAX_QUESTION_CHARS
from tests.fakes.openai_server import Turn
from tests.pipeline.conftest import make_rig


@pytest.mark.parametrize(("run", "expected"), [
    ("a", {"a" * 100_000}),  # one word
    ("ab.", set()),  # a "domain" (ab.ab.ab…): addresses are not words
    ("ab-", {"ab", "ab" * 100_000}),  # a hyphenated compound: its parts, and the parts joined
    ("ab@", {"ab"}),  # no address (no dot after the @): the word between the @s
])
def test_terms_of_a_long_unbroken_run(run, expected) -> None:
    """The old patterns scanned such a run from every position in it (quadratic: 16,000 letters took 14 s,
    100,000 would take about 10 minutes each, and the suite would stall here); now each takes a fraction
    of a second, and finds the same words the short form would."""
    assert terms(run * 100_000) == expected


async def test_a_message_over_the_limit_gets_a_clear_reply_without_search_or_model(openai_fake) -> None:
    rig = make_rig(openai_fake)

    result = await rig.pipeline.handle(rig.turn("a" * (MAX_QUESTION_CHARS + 1)))

    assert "too long" in result.reply and f"{MAX_QUESTION_CHARS + 1:,} characters" in result.reply
    assert rig.search.calls == [] and openai_fake.requests == []


async def test_a_web_chat_that_accepts_longer_texts_raises_the_limit_everywhere(openai_fake) -> None:
    """The web chat let 6,000 characters in, and the pipeline then called them too long."""
    openai_fake.script("primary", Turn(text="Plus costs $6 per month [1]."))
    rig = make_rig(openai_fake, bots=[{"name": "acme", "channels": {"web": {"max_message_chars": 6000}}}])

    result = await rig.pipeline.handle(rig.turn("How much is Plus? " + "x" * 5000))

    assert result.reply == "Plus costs $6 per month [1]." and len(rig.search.calls) == 1


@pytest.mark.parametrize("where", ["end", "start"])
async def test_a_long_message_that_asks_for_a_person_gets_one(openai_fake, where) -> None:
    """A long complaint that asks for a person (a Telegram message may hold 4,096 characters, Slack's 40,000)
    was told it is too long and to write a shorter one, and nobody was asked."""
    rig = make_rig(openai_fake)
    complaint = "My sync has been broken for days and I lost my notes again. " * 80  # about 4,800 characters
    text = complaint + "I want to talk to a human." if where == "end" else "I want to talk to a human. " + complaint

    result = await rig.pipeline.handle(rig.turn(text))

    assert result.trigger == "customer_asked" and result.escalate == "customer asked: 'talk to a human'"
    assert result.reply == rig.bot.escalation.acknowledgement
    assert rig.search.calls == [] and openai_fake.requests == []
