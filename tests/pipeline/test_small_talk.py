"""Greetings and thanks are answered at once, with no search and no model call; anything more is a question."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gateway.pipeline.small_talk import is_no, is_yes, small_talk
from tests.english_replies import DEFAULT_GREETING, TEXT_ONLY_REPLY
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
    ("👍", "thanks"), ("👍🏽👍🏽", "thanks"), ("🙏", "thanks"), ("❤️", "thanks"), ("😡", None), ("👍 ?", None),
    ("👋", "greeting"), ("👋🏽👋🏽", "greeting"), ("🙋‍♀️", "greeting"), ("👋 ?", None),
    # "gracias" alone was known; the forms customers use most were searched and got the fallback text.
    ("¡Muchas gracias!", "thanks"), ("Merci beaucoup", "thanks"), ("Vielen Dank!", "thanks"), ("grazie mille", "thanks"),
    ("muito obrigada", "thanks"), ("Buenos días", "greeting"), ("Hola, buenas tardes", "greeting"),
    ("Guten Tag", "greeting"), ("bom dia", "greeting"), ("gracias, adiós", "thanks"),
    ("¿Buenos días, cuánto cuesta Plus?", None), ("muchas gracias pero no funciona", None),
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


@pytest.mark.parametrize("text", ["", "   ", "\u200b\u200b\ufeff", " \u2060\u200d\u200e "])
async def test_a_message_with_nothing_to_read_gets_the_greeting_or_the_text_only_reply(openai_fake, text) -> None:
    """A bare @mention or an empty /ask asked nothing yet: the greeting, not "I can only read text", which is
    for a photo or a voice note. Zero-width characters alone are nothing to read either."""
    rig = make_rig(openai_fake)

    bare = await rig.pipeline.handle(rig.turn(text))
    photo = await rig.pipeline.handle(dataclasses.replace(rig.turn(text), attachments=[{"kind": "image"}]))

    assert (bare.reply, bare.answered) == (DEFAULT_GREETING, True)
    assert (photo.reply, photo.answered) == (TEXT_ONLY_REPLY, False)
    assert rig.search.calls == [] and openai_fake.requests == []


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
    ("👍", True), ("👌🏼", True), ("🙏", False), ("👎", False),
    ("Sí", True), ("Sí, por favor", True), ("claro que sí", True), ("Ja, bitte", True), ("ja gerne", True),
    ("Oui, merci", True), ("Sí, ¿cómo cambio mi contraseña?", False), ("No, gracias", False),
])
def test_is_yes_only_for_a_message_that_only_says_yes(text, yes) -> None:
    assert is_yes(text) is yes


OFFER = "I couldn't find that. Would you like me to get a person from our team?"


async def test_a_thumbs_up_alone_is_an_acknowledgement_not_a_question(openai_fake) -> None:
    """Searched, "👍" got the fallback text and counted as unanswered: three of them paged an operator."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFFER, "thanks_text": "Glad to help!"}])
    answered = [{"role": "user", "content": "How much is Plus?"}, {"role": "assistant", "content": "Plus costs $6 [1]."}]
    after_offer = [{"role": "user", "content": "Can I pay in bitcoin?"}, {"role": "assistant", "content": OFFER}]

    thumbs = await rig.pipeline.handle(rig.turn("👍", history=answered))
    folded = await rig.pipeline.handle(rig.turn("🙏🏽", history=answered))
    to_offer = await rig.pipeline.handle(rig.turn("👍", history=after_offer))

    assert (thumbs.reply, folded.reply) == ("Glad to help!", "Glad to help!")
    assert thumbs.answered and folded.answered and thumbs.escalate is None
    assert to_offer.escalate == "customer said yes to the offer of a person"
    assert rig.search.calls == [] and openai_fake.requests == []


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
    # A longer yes to the offer accepts it too (it went to the model, and counted as unanswered).
    for text in ("Yes, a person would be great", "yeah get me someone"):
        longer = await rig.pipeline.handle(rig.turn(text, history=after_offer))
        assert longer.escalate == "customer said yes to the offer of a person", text
    assert rig.search.calls == [] and openai_fake.requests == []
    # One that puts it off is not a yes: the model reads it.
    openai_fake.script("primary", Scripted(text="not now"), Scripted(text=OFFER))
    later = await rig.pipeline.handle(rig.turn("Yes, not now though", history=after_offer))
    assert later.escalate != "customer said yes to the offer of a person" and len(rig.search.calls) == 1


OFERTA = "No encuentro la respuesta en nuestro centro de ayuda. ¿Quieres que te atienda una persona?"


async def test_a_spanish_or_german_yes_to_the_offer_of_a_person_escalates(openai_fake) -> None:
    """"Sí, por favor" to a Spanish bot's offer was searched, and the customer got the offer again."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFERTA, "thanks_text": "¡De nada!"}])
    after_offer = [{"role": "user", "content": "¿Puedo pagar con bitcoin?"}, {"role": "assistant", "content": OFERTA}]

    for text in ("Sí, por favor", "sí", "Sí, una persona estaría genial", "Ja, bitte"):
        accepted = await rig.pipeline.handle(rig.turn(text, history=after_offer))
        assert accepted.escalate == "customer said yes to the offer of a person", text
    declined = await rig.pipeline.handle(rig.turn("No, gracias", history=after_offer))
    assert declined.reply == "¡De nada!" and declined.escalate is None
    assert rig.search.calls == [] and openai_fake.requests == []


async def test_yes_after_another_question_of_the_bots_goes_to_the_model(openai_fake) -> None:
    # With history, a turn is a rewrite call and then an answer call.
    openai_fake.script("primary", Scripted(text="the Android steps"), Scripted(text="On Android, open Settings [1]."))
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFFER}])
    asked = [{"role": "user", "content": "How do I turn on 2FA?"},
             {"role": "assistant", "content": "Are you on Android? Then I can give you its steps."}]

    reply = await rig.pipeline.handle(rig.turn("yes", history=asked))

    assert reply.reply == "On Android, open Settings [1]." and reply.escalate is None
    assert len(rig.search.calls) == 1
    # "ok" there is a yes too, not an acknowledgement.
    openai_fake.script("primary", Scripted(text="the Android steps"), Scripted(text="On Android, open Settings [1]."))
    assert (await rig.pipeline.handle(rig.turn("ok", history=asked))).reply == "On Android, open Settings [1]."
    assert len(rig.search.calls) == 2
    # "no thanks" there closes the turn, as it does anywhere; a bare "no" is the model's to read.
    assert (await rig.pipeline.handle(rig.turn("no thanks", history=asked))).reply == rig.bot.thanks_text
    assert len(rig.search.calls) == 2
    openai_fake.script("primary", Scripted(text="not Android"), Scripted(text="On iOS, open Settings [1]."))
    assert (await rig.pipeline.handle(rig.turn("no", history=asked))).reply == "On iOS, open Settings [1]."
    assert len(rig.search.calls) == 3


async def test_yes_or_no_after_a_statement_only_closes_the_turn(openai_fake) -> None:
    # After an answer, "yes please" used to be searched and matched table cells that say "yes".
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFFER, "thanks_text": "Glad to help!"},
                                      {"name": "plain", "fallback_text": "I don't know."},
                                      {"name": "asks", "thanks_text": "Anything else?"}])
    answered = [{"role": "user", "content": "How much is Plus?"}, {"role": "assistant", "content": "Plus costs $6 [1]."}]
    after_statement = [{"role": "user", "content": "Bitcoin?"}, {"role": "assistant", "content": "I don't know."}]
    after_thanks = answered + [{"role": "user", "content": "thanks"}, {"role": "assistant", "content": "Anything else?"}]

    replies = [await rig.pipeline.handle(rig.turn("yes please", history=answered)),
               await rig.pipeline.handle(rig.turn("Nope.", history=answered)),
               await rig.pipeline.handle(rig.turn("yes", history=after_statement, bot=rig.bots[1])),
               await rig.pipeline.handle(rig.turn("yes", history=[]))]

    assert [r.reply for r in replies] == ["Glad to help!", "Glad to help!", rig.bots[1].thanks_text, DEFAULT_GREETING]
    assert all(r.answered and r.escalate is None for r in replies)
    assert rig.search.calls == [] and openai_fake.requests == []
    # A question in the bot's own canned text asks nothing the model needs to read.
    assert (await rig.pipeline.handle(rig.turn("no", history=after_thanks, bot=rig.bots[2]))).reply == "Anything else?"
    assert rig.search.calls == []


@pytest.mark.parametrize(("text", "no"), [
    ("no", True), ("Nope.", True), ("no, that's all", True), ("no thanks", True), ("nothing else", True),
    ("no I can't log in", False), ("yes", False), ("not working", False),
    ("No, gracias", True), ("nein", True), ("Nein, danke", True), ("no sé cómo entrar", False), ("sí", False),
])
def test_is_no_only_for_a_message_that_only_says_no(text, no) -> None:
    assert is_no(text) is no


async def test_the_turn_that_escalates_for_unanswered_turns_does_not_also_offer_a_person(openai_fake) -> None:
    """Its acknowledgement follows: asking "Would you like me to get a person?" then would ask what is decided."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFFER}, {"name": "asks", "fallback_text": "Want a person?"}],
                   hits=[])
    # Uncited, so gate 2 replaces each answer with the bot's fallback text.
    openai_fake.script("primary", *[Scripted(text="Use San Marzano tomatoes.") for _ in range(3)])
    turn = rig.turn("Best pizza recipe?")

    before_the_limit = await rig.pipeline.handle(turn)
    turn.unanswered_turns = rig.bot.escalation.max_unanswered_turns - 1
    at_the_limit = await rig.pipeline.handle(turn)
    only_a_question = rig.turn("Best pizza recipe?", bot=rig.bots[1])
    only_a_question.unanswered_turns = 2

    assert before_the_limit.reply == OFFER and before_the_limit.escalate is None
    assert at_the_limit.reply == "I couldn't find that." and at_the_limit.escalate == "3 consecutive turns without an answer"
    assert (await rig.pipeline.handle(only_a_question)).reply == rig.bots[1].escalation.acknowledgement


async def test_max_unanswered_turns_0_never_escalates_by_count(openai_fake) -> None:
    """0 acted as 1: the first turn without an answer handed the conversation to a person."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallback_text": OFFER,
                                       "escalation": {"max_unanswered_turns": 0}}], hits=[])
    openai_fake.script("primary", *[Scripted(text="Use San Marzano tomatoes.") for _ in range(2)])
    turn = rig.turn("Best pizza recipe?")
    first = await rig.pipeline.handle(turn)
    turn.unanswered_turns = 50
    much_later = await rig.pipeline.handle(turn)
    assert first.escalate is None and much_later.escalate is None and much_later.reply == OFFER
