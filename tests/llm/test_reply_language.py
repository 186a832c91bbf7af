"""Gate 2 reads an uncited sentence in the turn's reply language (`replies.lang`), not in a language guessed
from whether it holds "the" or "is"."""

from __future__ import annotations

import pytest

from gateway.pipeline.answer_language import in_english
from tests.llm.test_tool_contradictions import FALLBACK, ORDER, _gate


@pytest.mark.parametrize("text", [
    "Order A-1042: free upgrade included!",
    "Order A-1042: lifetime warranty activated.",
    "A-1042 qualifies: free returns forever!",
    "Hi José, order A-1042: free upgrade included!",  # a customer's name is no other language
    "Zoë, order A-1042: lifetime warranty activated.",
])
def test_a_short_english_claim_is_not_grounded_by_its_identifier_alone(text: str) -> None:
    """No "the", "is" or "for" in it, so it was read as another language, and its order number passed it."""
    verified = _gate(text, reply_lang="en")

    assert verified.text == FALLBACK and verified.replaced


@pytest.mark.parametrize("text", [
    "Payment received: $59.90.",
    "Order A-1042 should arrive on 11/28/2026.",
    "Order A-1042: shipped, arriving November 28.",
    "Tracking: 1Z999AA10123456784.",
])
def test_a_short_english_sentence_the_results_hold_is_kept(text: str) -> None:
    payment = {**ORDER, "payment": {"status": "received", "amount": 59.9}}

    assert _gate(text, grounding=[payment], reply_lang="en-US").text == text


@pytest.mark.parametrize("text", [
    "Tu pedido A-1042 ya ha sido enviado.",
    "Ihre Bestellung A-1042 wurde bereits versandt.",
    "Nein, sie wurde bereits versandt.",
    "您的订单 A-1042 已发货。",
])
def test_a_customer_answered_in_another_language_than_the_bots_is_still_read_in_it(text: str) -> None:
    """The model answers in the customer's language, which need not be the bot's: a sentence that shows
    another language is read in it."""
    assert _gate(text, reply_lang="en").text == text


def test_with_no_reply_language_the_sentences_words_decide() -> None:
    assert not in_english("Order A-1042: free upgrade included!")
    assert in_english("Order A-1042: free upgrade included!", "en")
    assert in_english("Your order is here.", "es") and not in_english("Pedido A-1042: enviado.", "es")
    assert in_english("Your order 🎉 shipped!", "en") and not in_english("Pedido A-1042: envío gratis.", "en")
