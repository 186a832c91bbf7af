"""Gate 2 against the tools' data: an answer that contradicts what a tool returned is an unsupported claim."""

from __future__ import annotations

import json

import pytest

from gateway.pipeline.citations import verify_citations
from tests.llm.hits import PASSWORD, REFUNDS
from tests.pipeline.sample_tools import injection_strings

FALLBACK = "Sorry, our help center does not cover that."
HITS = [REFUNDS, PASSWORD]
ORDER = {"found": True, "order": {"id": "A-1042", "status": "shipped", "total": 59.9, "paid": True,
                                  "refundable": False, "delivery_date": "2026-11-28",
                                  "tracking": "1Z999AA10123456784"}}


def _gate(text: str, grounding=(ORDER,), question: str = "Where is my order A-1042?", **kwargs):
    return verify_citations(text, HITS, fallback_text=FALLBACK, grounding=list(grounding),
                            tool_arguments=[{"order": "A-1042"}], question=question, message=question,
                            **kwargs)


@pytest.mark.parametrize("text", [
    "Your order A-1042 has not shipped yet.",
    "Your order A-1042 hasn't been shipped yet; refunds take 5 business days [1].",  # cited: checked all the same
    "Order A-1042 is yet to be shipped [1].",
    "Your order total is $69.90 [1].",
    "Your order A-1042 will arrive on November 26 [1].",
    "Your tracking number is 1Z999AA10123456785 [1].",
    "Your order A-1043 has shipped.",
    "Your order A-1042 is not paid yet.",
    "Order A-1042 is refundable [1].",
])
def test_an_answer_that_contradicts_a_tool_result_is_not_passed_on(text: str) -> None:
    """The tool says shipped, 59.90, November 28, paid, not refundable: each of these said otherwise (cited
    or not), and went out as if it were so."""
    verified = _gate(text)

    assert verified.text == FALLBACK and verified.replaced and not verified.citations
    assert verified.reason.startswith("it contradicts the tools")
    assert "A-104" not in verified.reason and "69" not in verified.reason  # logs hold no customer data


@pytest.mark.parametrize("text", [
    "Your order A-1042 has shipped.",
    "Your order A-1042 has already shipped, no need to worry.",
    "No, your order A-1042 is not pending: it has shipped.",
    "Your order A-1042 has shipped and is paid; its total was $59.90.",
    "Your order A-1042 arrives on 28 November. Tracking: 1Z999AA10123456784.",
    "If it has not shipped by Friday, you can ask for a refund within 30 days [1].",
    "I can't tell whether order A-1042 is refundable; refunds reach your card in 5 business days [1].",
    "Order A-1042 shipped; its total of 59,90 € is not refundable.",
])
def test_an_answer_that_agrees_with_the_tools_is_kept_whole(text: str) -> None:
    verified = _gate(text)

    assert verified.text == text and not verified.replaced


def test_only_the_contradicting_sentence_of_a_cited_answer_goes() -> None:
    text = "Your order A-1042 has not shipped yet. You can ask for a refund within 30 days of purchase [1]."

    verified = _gate(text)

    assert verified.text == "You can ask for a refund within 30 days of purchase [1]."
    assert [c.title for c in verified.citations] == ["Refunds"]


def test_a_state_that_differs_between_records_is_not_held_against_an_answer() -> None:
    """Two orders, one shipped and one pending: "not shipped" may be the pending one's."""
    orders = {"orders": [{"id": "A-1042", "status": "shipped"}, {"id": "A-1043", "status": "pending"}]}

    verified = _gate("Order A-1043 has not shipped yet.", grounding=[orders])

    assert verified.text == "Order A-1043 has not shipped yet."


def test_a_negative_status_stated_as_its_opposite_is_a_contradiction() -> None:
    invoice = json.dumps({"invoice": "INV-7", "status": "unpaid"})  # a text result that is JSON is read as JSON

    assert _gate("Invoice INV-7 is paid.", grounding=[invoice]).replaced
    assert _gate("Invoice INV-7 is unpaid.", grounding=[invoice]).text == "Invoice INV-7 is unpaid."


def test_a_count_of_what_a_tool_listed_is_supported() -> None:
    orders = {"orders": [{"id": "A-1042", "status": "shipped"}, {"id": "A-1043", "status": "shipped"}]}

    assert _gate("You have 2 orders, A-1042 and A-1043, and both have shipped.", grounding=[orders]).text == \
        "You have 2 orders, A-1042 and A-1043, and both have shipped."
    assert _gate("You have 3 orders.", grounding=[orders]).replaced


def test_a_text_field_is_no_state_even_when_it_reads_like_one() -> None:
    """A planted `"note": "not shipped"` must not make a true answer fail, nor its words count as a state."""
    result = {"order": {"id": "A-1042", "status": "shipped", "note": "not shipped", "comment": "pending"}}

    verified = _gate("Your order A-1042 has shipped; it is not pending.", grounding=[result])

    assert verified.text == "Your order A-1042 has shipped; it is not pending." and not verified.replaced


@pytest.mark.parametrize("planted", injection_strings(limit=None))
def test_injection_strings_in_a_tools_text_stay_data(planted: str) -> None:
    """A planted text field is neither a state to hold the answer to nor a reason to refuse a true one."""
    result = {"found": True, "order": {"id": "A-1042", "status": "shipped", "note": planted}}

    kept = _gate("Your order A-1042 has shipped.", grounding=[result])
    obeyed = _gate("Your order A-1042 has not shipped.", grounding=[result])

    assert kept.text == "Your order A-1042 has shipped." and not kept.replaced
    assert obeyed.replaced


@pytest.mark.parametrize("written", ["12/07/2026", "07.12.2026", "2026/12/07"])
@pytest.mark.parametrize("answer", ["Your Plus plan renews on December 7, 2026.", "Your Plus plan renews on 7 December."])
def test_a_date_a_tool_wrote_in_numbers_supports_the_same_date_in_words(written: str, answer: str) -> None:
    """`"renews_on": "12/07/2026"` (or 07.12.2026) was read as no date at all, so the true "December 7" was
    a date from nowhere and the answer became the fallback."""
    plan = {"plan": "Plus", "status": "active", "renews_on": written}

    assert _gate(answer, grounding=[plan]).text == answer


@pytest.mark.parametrize(("answer", "kept"), [
    ("Your order A-1042 arrives on 11/28/2026.", True),
    ("Your order A-1042 arrives on 28/11/2026.", True),
    ("Your order A-1042 arrives on 28.11.2026.", True),
    ("Your order A-1042 arrives on 11/30/2026.", False),  # 11, 30 and 2026 are each in the evidence
    ("Your order A-1042 arrives on 30.11.2026.", False),
])
def test_a_date_written_in_numbers_is_checked_as_a_date(answer: str, kept: bool) -> None:
    """Its numbers one by one were all the check: "11/30/2026" passed on a delivery date of 2026-11-28,
    since 30 (days to ask for a refund), 11 and 2026 are each somewhere in the evidence."""
    verified = _gate(answer)

    assert (verified.text == answer) is kept and verified.replaced is not kept


SUPPORT = "You are Acme's assistant. Our support line is +1 (555) 010-2000, Monday to Friday 9am-5pm."


@pytest.mark.parametrize("answer", [
    "Refunds take 5 business days [1]. Call +1 (555) 010-2000 from 9:00 to 17:00 with any question.",
    "Refunds take 5 business days [1]. Call 555-010-2000 from 9 a.m. to 5 p.m. with any question.",
    "Refunds take 5 business days [1]. Call +15550102000 between 9:00 am and 5:00 pm with any question.",
])
def test_a_phone_number_or_hours_written_another_way_are_the_same_values(answer: str) -> None:
    """The prompt's "9am-5pm" and "+1 (555) 010-2000" as an answer writes them: "17:00" was a number from
    nowhere, "9:00" too (its "00"), and "+15550102000" one number no text held."""
    assert _gate(answer, vouched=SUPPORT).text == answer


@pytest.mark.parametrize("answer", [
    "Refunds take 5 business days [1]. Call +1 (555) 010-2999 with any question.",
    "Refunds take 5 business days [1]. We answer from 7:30 pm.",
])
def test_a_phone_number_or_an_hour_no_evidence_holds_still_goes(answer: str) -> None:
    assert _gate(answer, vouched=SUPPORT).text == "Refunds take 5 business days [1]."


CART = {"order": {"id": "A-1042", "status": "shipped", "total": 59.9, "shipping": 4.5,
                  "items": [{"name": "Mug", "qty": 2, "unit_price": 10.0}, {"name": "Tea", "qty": 1, "unit_price": 39.9}]}}


@pytest.mark.parametrize("answer", [
    "The 2 mugs at $10.00 each come to $20.00 [1].",
    "Two mugs at $10 each: $20 [1].",
    "2 × $10 = $20 for the mugs, plus $39.90 for the tea [1].",
    "Of your $59.90, the tea was $39.90 and the mugs $20 [1].",
    "With $4.50 shipping on top of the $59.90, you paid $64.40 [1].",
])
def test_a_sum_or_product_of_the_values_a_sentence_gives_is_supported(answer: str) -> None:
    """A line total the model worked out from the quantity and the price it states beside it was a number
    from nowhere, and the true answer became the fallback."""
    assert _gate(answer, grounding=[CART]).text == answer


@pytest.mark.parametrize("answer", [
    "The mugs come to $35.00 [1].",  # 2 × 10.00 is 20.00, the line's total
    "Your total is $79.80 for the 2 mugs [1].",  # 2 × 39.90: no second value beside the 2
    "The 2 mugs at $10.00 each come to $25.00 [1].",
])
def test_a_value_the_sentence_does_not_work_out_still_goes(answer: str) -> None:
    assert _gate(answer, grounding=[CART]).replaced


TICKET = {"ticket": {"id": "T-88", "status": "open"}}


def test_a_state_word_after_cannot_is_an_action_not_the_state() -> None:
    """"can open" was a hedge and "can't open" a denial that the ticket is open: the true answer lost a sentence."""
    text = "Your ticket T-88 is open [1]. We can't open a second ticket for the same issue, nor won't close it."

    assert _gate(text, grounding=[TICKET]).text == text


@pytest.mark.parametrize("text", [
    "Your order A-1042 never got shipped.",
    "Your order A-1042 was never shipped [1].",
    "Your order A-1042 has not been successfully shipped [1].",
    "Your order A-1042 is unshipped [1].",
    "Your order A-1042 is unpaid [1].",
])
def test_a_denial_in_other_words_is_a_contradiction(text: str) -> None:
    """Each said the opposite of the tool's state and went out: the negation sat before "got", or an
    adverb stood between it and the state, or the state took a negative prefix."""
    assert _gate(text).replaced


def test_a_negative_prefix_that_agrees_with_the_tool_is_kept() -> None:
    text = "Your order A-1042 is non-refundable, and it is not unpaid [1]."

    assert _gate(text).text == text


@pytest.mark.parametrize(("answer", "kept"), [
    ("It was delivered on November 28, so you can return it until December 28 (30 days) [1].", True),
    ("You have 30 days from delivery, until December 28, 2026, to ask for a refund [1].", True),
    ("Two weeks after delivery, on December 12, your return label expires [1].", True),
    ("You can return it until December 29 (30 days after delivery) [1].", False),
    ("You can return it until December 28 [1].", False),  # no duration beside it to work it out from
])
def test_a_date_worked_out_from_a_tools_date_and_a_stated_duration_is_supported(answer: str, kept: bool) -> None:
    """The refund window's end, 30 days (an extract's) after the tool's delivery date of 2026-11-28, was a
    date from nowhere, and the true answer became the fallback."""
    verified = _gate(answer)

    assert (verified.text == answer) is kept and verified.replaced is not kept


@pytest.mark.parametrize(("answer", "kept"), [
    ("Your payment of €59.90 succeeded [1].", True),
    ("Your payment of 59,90 EUR succeeded [1].", True),
    ("Your payment of €69.90 succeeded [1].", False),
])
def test_an_amount_a_tool_gives_in_cents_supports_the_amount_in_units(answer: str, kept: bool) -> None:
    """Payment APIs give amounts in the currency's smallest unit (`"amount": 5990` is €59.90): the true
    "€59.90" was a number from nowhere and the answer became the fallback."""
    payment = {"payment": {"id": "pi_1", "status": "succeeded", "amount": 5990, "currency": "eur",
                           "amount_refunded_cents": 0}}

    verified = _gate(answer, grounding=[payment])

    assert (verified.text == answer) is kept and verified.replaced is not kept


@pytest.mark.parametrize("text", [
    "I can confirm that your order A-1042 has not shipped yet [1].",
    "Sure, your order A-1042 has not shipped yet [1].",
    "Let me check: your order A-1042 has not shipped yet [1].",
    "As you can see, order A-1042 is not paid [1].",
    "I know order A-1042 is refundable [1].",
])
def test_a_contradiction_after_a_word_of_checking_is_still_one(text: str) -> None:
    """"can", "confirm", "sure", "check", "see", "know" anywhere before the state made the sentence a hedge:
    "I can confirm that your order has not shipped" went out on a shipped order."""
    verified = _gate(text)

    assert verified.replaced and verified.reason.startswith("it contradicts the tools")


@pytest.mark.parametrize("text", [
    "I am not sure whether order A-1042 has shipped [1].",
    "I can't tell if order A-1042 has shipped [1].",
    "Order A-1042 may not have shipped [1].",
    "I'm not sure order A-1042 has shipped [1].",
    "I don't know that order A-1042 is unpaid [1].",
    "I think order A-1042 has not shipped yet [1].",
    "We can't say order A-1042 is not refundable [1].",
])
def test_a_doubt_about_a_state_is_no_contradiction(text: str) -> None:
    assert _gate(text).text == text


@pytest.mark.parametrize("answer", ["It arrives on November 28.", "It arrives on Nov. 28.",
                                    "Your order A-1042 arrives on Saturday, November 28th."])
def test_a_tools_date_in_words_grounds_an_uncited_answer(answer: str) -> None:
    """`"delivery_date": "2026-11-28"` held the 28 but not the "November" of "It arrives on November 28.",
    whose other word is no tool's either, so half its words were not the tool's and it became the fallback."""
    assert _gate(answer).text == answer
