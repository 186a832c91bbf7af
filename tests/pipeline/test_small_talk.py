"""Greetings and thanks are answered at once, with no search and no model call; anything more is a question."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.pipeline.core import DEFAULT_GREETING
from gateway.pipeline.small_talk import small_talk
from tests.fakes.openai_server import Turn as Scripted
from tests.pipeline.conftest import make_rig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BENCH = Path(__file__).resolve().parents[2] / "bench" / "data"


@pytest.mark.parametrize(("text", "kind"), [
    ("hi", "greeting"), ("Hello there!", "greeting"), ("good morning :)", "greeting"), ("hey team", "greeting"),
    ("thanks!", "thanks"), ("Thank you so much 🙏", "thanks"), ("ok, thanks a lot", "thanks"), ("bye", "thanks"),
    ("Hey, thanks!", "thanks"), ("cheers", "thanks"),
    ("Hi, how do I reset my password?", None), ("thanks but that did not help", None), ("hello world", None),
    ("Thanks for nothing", None), ("ok", None), ("", None), ("hi " * 30, None),
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
