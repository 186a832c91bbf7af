"""The responder benchmark's rule for "the answer quotes the gold text"."""

from __future__ import annotations

from bench.responder import quotes

GOLD = "Refunds take 5 to 10 business days to appear on a card statement."


def test_an_answer_quotes_the_gold_when_it_holds_six_of_its_words_in_a_row() -> None:
    assert quotes("They take 5 to 10 business days to appear [1].", GOLD)  # "take 5 to 10 business days"
    assert quotes("REFUNDS   take 5 to\n10 business [2] days", GOLD)  # case, spacing and markers aside
    assert not quotes("Refunds take a week [1].", GOLD)
    assert not quotes("5 to 10 business days [1].", GOLD)  # five words in a row are not enough


def test_a_short_gold_text_must_be_quoted_whole() -> None:
    assert quotes("Plus costs $6 per month [1].", "$6 per month")
    assert not quotes("Plus costs $6 [1].", "$6 per month")
