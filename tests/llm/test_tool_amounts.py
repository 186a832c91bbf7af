"""Gate 2's check of an answer's amounts against the tools' data, as people write them: a whole ("100%"), a
round figure ("about 60 dollars"), words ("sixty dollars"), a total of a result's list ("3 items")."""

from __future__ import annotations

import pytest

from tests.llm.test_tool_contradictions import CART, _gate

INVOICE = {"invoice": "INV-7", "status": "paid", "total": 59.9}


@pytest.mark.parametrize("answer", ["Your invoice INV-7 is 100% paid.", "Invoice INV-7 is 100 percent paid [1].",
                                    "Invoice INV-7 is one hundred percent paid [1]."])
def test_a_whole_in_percent_is_no_figure_from_nowhere(answer: str) -> None:
    """"100% paid" held a 100 no tool gave, and the true answer became the fallback."""
    assert _gate(answer, grounding=[INVOICE]).text == answer


@pytest.mark.parametrize(("total", "answer"), [
    (59.9, "Your invoice INV-7 comes to about 60 dollars."),
    ("60.00", "Your invoice INV-7 comes to about 60 dollars."),
    (59.9, "Invoice INV-7 is roughly $60 [1]."),
    (59.9, "Your invoice INV-7 comes to about sixty dollars."),
    (45.0, "Your invoice INV-7 comes to forty-five dollars."),
    (120.0, "Your invoice INV-7 comes to one hundred and twenty euros."),
    (42.5, "Your invoice INV-7 comes to forty-two dollars and fifty cents."),
])
def test_a_round_figure_or_an_amount_in_words_of_a_tools_amount_is_kept(total, answer: str) -> None:
    """"about 60 dollars" of a total of 59.90 was a number from nowhere, and the answer became the fallback."""
    verified = _gate(answer, grounding=[{**INVOICE, "total": total}])

    assert verified.text == answer and not verified.replaced


@pytest.mark.parametrize("answer", [
    "Your invoice INV-7 comes to sixty dollars.",
    "Your invoice INV-7 comes to sixty dollars [1].",
    "Your invoice INV-7 comes to about 60 dollars [1].",
    "Your invoice INV-7 comes to about sixty dollars [1].",
    "Your invoice INV-7 comes to 60 dollars [1].",  # a round figure only when the answer says it is one
])
def test_an_amount_in_words_or_a_round_figure_far_from_the_tools_goes(answer: str) -> None:
    """The tool says 45.00: "sixty dollars" went out, since only digits were read as numbers."""
    verified = _gate(answer, grounding=[{**INVOICE, "total": 45.0}])

    assert verified.replaced and verified.reason == "it contradicts the tools: a number no extract or tool result holds"


@pytest.mark.parametrize(("answer", "kept"), [
    ("Order A-1042 holds 3 items [1].", True),
    ("Your order A-1042 holds 3 items.", True),
    ("Order A-1042 holds 7 items [1].", False),
])
def test_a_total_of_a_results_list_is_held(answer: str, kept: bool) -> None:
    """A mug line of 2 and a tea line of 1 are 3 items; the 3 was a number from nowhere."""
    verified = _gate(answer, grounding=[CART])

    assert (verified.text == answer) is kept and verified.replaced is not kept


def test_a_total_of_amounts_in_cents_is_held_in_units() -> None:
    payments = {"payments": [{"id": "pi_1", "amount": 2000}, {"id": "pi_2", "amount": 3990}]}

    assert _gate("Your two payments come to €59.90 [1].", grounding=[payments]).text == \
        "Your two payments come to €59.90 [1]."
    assert _gate("Your two payments come to €69.90 [1].", grounding=[payments]).replaced


LINES = {"order": "A-7", "items": [{"name": "mug", "quantity": 2, "price": 19.95},
                                   {"name": "tea", "quantity": 1, "unit_amount": 2000}]}


@pytest.mark.parametrize(("text", "kept"), [
    ("The 2 mugs came to $39.90 [1].", True),
    ("Your 2 mugs cost $39.90 and the tea $20.00 [1].", True),
    ("The 2 mugs came to $49.90 [1].", False),
])
def test_a_lines_total_is_its_quantity_times_its_price(text: str, kept: bool) -> None:
    """"The 2 mugs came to $39.90" of 2 mugs at 19.95 lost its sentence: 39.90 is no number the tool gave."""
    verified = _gate(text, grounding=[LINES])

    assert (verified.text == text) is kept
