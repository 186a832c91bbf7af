"""Greetings and thanks are answered at once, with no search and no model call; anything more is a question."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.pipeline.core import DEFAULT_GREETING
from gateway.pipeline.small_talk import is_yes, small_talk
from tests.fakes.openai_server import Turn as Scripted
from tests.pipeline.conftest import make_rig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BENCH = Path(__file__).resolve().parents[2] / "bench" / "data"


@pytest.mark.parametrize(("text", "kind"), [
    ("hi", "greeting"), ("Hello there!", "greeting"), ("good morning :)", "greeting"), ("hey team", "greeting"),
    ("thanks!", "thanks"), ("Thank you so much 🙏", "thanks"), ("ok, thanks a lot", "thanks"), ("bye", "thanks"),
    ("Hey, thanks!", "thanks"), ("cheers", "thanks"),
    ("Hi, how do I reset my password?", None), ("thanks but that did not help", None), ("hello world", None),
    ("ok", "thanks"), ("Great, got it!", "thanks"), ("perfect", "thanks"),
    ("Thanks for nothing", None), ("no", None), ("yes", None), ("ok but why?", None), ("", None), ("hi " * 30, None),
])
def test_small_talk_is_only_a_message_that_is_nothing_else(text, kind) -> None:
    assert small_talk(text) == kind


def test_no_question_injection_or_naughty_string_is_taken_for_small_talk() -> None:
    questions = [json.loads(line)["question"] for name in ("s10", "stici")
                 for line in (BENCH / name / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    injections = [json.loads(line)["text"] for line in
                  (FIXTURES / "injection" / "prompt_injection_strings.jsonl").read_text(encoding="utf-8").splitlines()
                  if line.strip()]
    naughty = json.loads((FIXTURES / "badinput" / "blns.json").read_text(encoding="utf-8"))
    assert len(questions) > 150 and len(injections) > 100 and len(naughty) > 400
    assert [t for t in questions + injections + naughty if small_talk(t)] == []


async def test_pipeline_answers_small_talk_without_searching_or_calling_a_model(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "thanks_text": "Glad to help!"}])

    hello = await rig.pipeline.handle(rig.turn("Hi there!"))
    thanks = await rig.pipeline.handle(rig.turn("ok thanks 🙏"))

    assert (hello.reply, thanks.reply) == (DEFAULT_GREETING, "Glad to help!")
    assert hello.answered and thanks.answered and not hello.escalate and not thanks.escalate
    assert rig.search.calls == [] and openai_fake.requests == []
    # A greeting with a question in it is a question.
    openai_fake.script("primary", Scripted(text="Plus costs $6 per month [1]."))
    asked = await rig.pipeline.handle(rig.turn("Hi, how much is Plus?"))
    assert asked.reply == "Plus costs $6 per month [1]." and rig.search.calls == [["Hi, how much is Plus?"]]


@pytest.mark.parametrize(("text", "yes"), [
    ("yes", True), ("Yes please!", True), ("sure, go ahead", True), ("ok", True), ("yeah sure", True),
    ("ok thanks", False), ("no thanks", False), ("no", False), ("yes, how do I reset my password?", False),
])
def test_is_yes_only_for_a_message_that_only_says_yes(text, yes) -> None:
    assert is_yes(text) is yes


OFFER = "I couldn't find that. Would you like me to get a person from our team?"


async def test_yes_after_the_fallbacks_offer_of_a_person_escalates(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFFER}])
    after_offer = [{"role": "user", "content": "Can I pay in bitcoin?"}, {"role": "assistant", "content": OFFER}]

    accepted = await rig.pipeline.handle(rig.turn("Yes please", history=after_offer))

    assert accepted.escalate == "customer said yes to the offer of a person"
    assert accepted.reply == rig.bot.escalation.acknowledgement and not accepted.answered
    assert rig.search.calls == [] and openai_fake.requests == []
    # "no thanks" is a polite close, not a question.
    declined = await rig.pipeline.handle(rig.turn("no thanks", history=after_offer))
    assert declined.reply == rig.bot.thanks_text and declined.escalate is None


async def test_yes_is_only_an_answer_to_the_offer(openai_fake) -> None:
    # After an ordinary answer, or when the fallback text asks nothing, "yes" goes through the pipeline.
    # Each turn has history, so each is a rewrite call and then an answer call.
    openai_fake.script("primary", *[Scripted(text=t) for t in ("yes", "Plus costs $6 [1].") * 2])
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFFER},
                                      {"name": "plain", "fallback_text": "I don't know."}])
    answered = [{"role": "user", "content": "How much is Plus?"}, {"role": "assistant", "content": "Plus costs $6 [1]."}]
    after_statement = [{"role": "user", "content": "Bitcoin?"}, {"role": "assistant", "content": "I don't know."}]

    first = await rig.pipeline.handle(rig.turn("yes", history=answered))
    second = await rig.pipeline.handle(rig.turn("yes", history=after_statement, bot=rig.bots[1]))

    assert (first.reply, second.reply) == ("Plus costs $6 [1].", "Plus costs $6 [1].")
    assert first.escalate is None and second.escalate is None and len(rig.search.calls) == 2
