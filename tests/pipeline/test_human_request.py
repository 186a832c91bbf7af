"""`asks_for_human`: the escalation phrases count as requests for a person, not as substrings."""

from __future__ import annotations

import pytest

from gateway.pipeline.human_request import asks_for_human
from gateway.settings import EscalationSettings

PHRASES = EscalationSettings().phrases


@pytest.mark.parametrize("text", [
    "I want to talk to a human",
    "talk to a human please",
    "Can I talk to a human please?",
    "Please let me speak to someone.",
    "I need a real person",
    "Can I get a live agent?",
    "connect me to a human agent",
    "Is there a live agent?",
    "real person please!",
    "No, I want to talk to a human",
    "This bot is useless. Real person!",
    "I don’t know how this works, can I talk to a person?",
    "I can't reach a live agent",
    "I want to talk to a human <img src=x onerror=alert(1)>",
    # Missed by the first defaults (review): each went to the model.
    "Can I speak to a person?",
    "I'd like to talk to a real human",
    "I want a human",
    "human please",
    "Can I talk to a representative?",
    # "with" after a verb of reaching is still a request, and so is talking it over with one (review).
    "I'd like to chat with a real person",
    "connect me with a human please",
    "Can I have a word with a real person?",
    "Could I have a conversation with a real person?",
    "Can I discuss this with a real person?",
    "Let me discuss my refund with a real human",
    "Can I text with a live agent?",
    "I'd rather deal with a real person",
    "Can I sort this out with a real person please",
    "Can I go over my bill with a real person?",
    # Missed by the defaults (review of the web chat): the bot answered "I need a human" itself.
    "I need a human",
    "Can I get a human?",
    "talk to an operator please",
    # "with" instead of "to" (review of the pipeline): each went to the model, and the customer who
    # asked for a person got the bot.
    "Can I speak with a human?",
    "I want to speak with someone about my invoice",
    "Can I talk with a person please",
    "Can I chat with a human?",
    "Could I speak with an agent?",
    "I'd like to talk with a representative",
    "can I talk to an actual person",
])
def test_requests_for_a_person_are_recognised(text):
    assert asks_for_human(text, PHRASES) is not None


@pytest.mark.parametrize("text", [
    "I don't want to talk to a human, just tell me how to reset my password",
    "I do not need to speak to someone, thanks",
    "Is there a live agent chat on the Team plan?",
    "How do I share a note with a real person who has no account?",
    # At the end of the question, the person is still what the note is shared with (the README's example).
    "How do I share a note with a real person?",
    "Can I share a notebook with a real person?",
    "can I send my notes to the team and sync them with any real person?",
    "Is the human agent feature included in Plus?",
    "I never asked to talk to someone",
    "without a live agent, how do I export my notes?",
    "humans are great",
    "How do I get a human-readable export?",
    "I need a person-to-person transfer between accounts",
    "I don't want to speak with a human, just tell me the price",
])
def test_the_phrases_inside_other_questions_or_negated_are_not_requests(text):
    assert asks_for_human(text, PHRASES) is None


def test_custom_phrases_are_matched_as_whole_words():
    assert asks_for_human("I want an operator now", ["operator"]) == "operator"
    assert asks_for_human("Which cooperators use it?", ["operator"]) is None


@pytest.mark.parametrize(("text", "phrase"), [
    ("你好，我要人工客服", "人工客服"), ("我要转人工，谢谢", "转人工"), ("人工客服！", "人工客服"),
    ("こんにちは、オペレーターと話したい", "オペレーターと話したい"), ("مرحبا، أريد موظف دعم؟", "أريد موظف دعم"),
], ids=["zh-comma", "zh-thanks", "zh-bang", "ja", "ar"])
def test_a_phrase_in_chinese_or_japanese_is_found_inside_its_sentence(text, phrase) -> None:
    """They write no space between words and their own commas: "我要人工客服" ("I want a human agent")
    had a letter before the phrase, so it was never a whole word, and the bot answered instead."""
    assert asks_for_human(text, ["人工客服", "转人工", "オペレーターと話したい", "أريد موظف دعم"]) == phrase
    assert asks_for_human("人工智能客服怎么用？", ["人工客服", "转人工"]) is None


SPANISH_AND_GERMAN = ["quiero hablar con una persona", "hablar con una persona", "agente humano",
                      "mit einem Menschen sprechen", "einen Mitarbeiter"]


@pytest.mark.parametrize("text", [
    "Quiero hablar con una persona sobre mi factura",
    "Necesito hablar con una persona de inmediato",
    "Quiero hablar con una persona ahora mismo, por favor",
    "¿Puedo hablar con una persona?",
    "Quiero un agente humano",
    "Ich möchte mit einem Menschen sprechen, es geht um meine Rechnung",
    "Ich will einen Mitarbeiter sprechen",
    "Einen Mitarbeiter bitte",
])
def test_a_spanish_or_german_phrase_asks_for_a_person_with_more_words_after_it(text):
    """A verb phrase followed by what it is about ("… sobre mi factura") was only a request in English:
    the bot answered instead, and the customer who asked for a person never got one."""
    assert asks_for_human(text, SPANISH_AND_GERMAN) is not None


@pytest.mark.parametrize("text", [
    "No quiero hablar con una persona, solo dime el precio",
    "Prefiero no esperar: sin agente humano, ¿cómo exporto mis notas?",
    "¿Hay un agente humano en el plan Team?",
    "Ich möchte nicht mit einem Menschen sprechen, nur den Preis wissen",
    "Gibt es einen Mitarbeiter-Rabatt im Team-Plan?",
])
def test_a_spanish_or_german_negation_or_question_about_something_else_is_not_a_request(text):
    """"No quiero hablar con una persona" handed the chat to an operator, and the bot fell silent."""
    assert asks_for_human(text, SPANISH_AND_GERMAN) is None
