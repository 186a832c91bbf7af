"""Gate 2 reads a date written in Spanish or German ("2 de diciembre", "28. November 2026") as a date, to
check it against the tools' and to ground a sentence with it."""

from __future__ import annotations

import pytest

from tests.llm.test_tool_contradictions import FALLBACK, ORDER, _gate


@pytest.mark.parametrize("text", [
    "Tu pedido llegará el 28 de noviembre.",
    "Tu pedido llegará el 28 de noviembre de 2026.",
    "Ihr Paket kommt am 28. November an.",
    "Ihr Paket kommt am 28. November 2026 an.",
    "Ihr Paket kommt am 28 November an.",
])
def test_a_right_date_in_spanish_or_german_grounds_its_sentence(text: str) -> None:
    """Neither an identifier nor a date was read in them ("28." cut its sentence, "noviembre" was no
    month), so a correct delivery date became the fallback."""
    assert _gate(text, reply_lang="es").text == text


@pytest.mark.parametrize("text", [
    "Tu pedido A-1042 llegará el 2 de diciembre.",
    "Tu pedido A-1042 llegará el 28 de diciembre de 2026.",
    "Ihre Bestellung A-1042 kommt am 2. Dezember an.",
    "Ihre Bestellung A-1042 kommt am 28. Oktober 2026 an.",
])
def test_a_wrong_date_in_spanish_or_german_is_caught(text: str) -> None:
    """Passed on the order number, the wrong date unread."""
    verified = _gate(text, reply_lang="de")

    assert verified.text == FALLBACK and verified.reason == "it contradicts the tools: a date no extract or tool result holds"


@pytest.mark.parametrize("text", [
    "Order A-1042 came to 59.90 [1]. May I help with anything else?",
    "We ship 2 mayo jars per order [1].",
])
def test_words_that_only_look_like_a_month_make_no_date(text: str) -> None:
    result = {**ORDER, "note": "ships 2 jars"}

    assert _gate(text, grounding=[result], reply_lang="en").text == text
