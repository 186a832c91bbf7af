"""Gate 2 catches a state said with no "is" or "has" ("your payment failed"), and "on its way" said of an
order that has not shipped (`gateway.pipeline.bare_states`, `state_words`)."""

from __future__ import annotations

import pytest

from tests.llm.test_tool_contradictions import FALLBACK, _gate

PAID = {"invoice": {"id": "INV-2026-0042", "status": "paid", "total": 59.9}}
PENDING = {"order": "A-7", "status": "pending"}
ANOTHER = "it contradicts the tools: a tool's status said to be another"


@pytest.mark.parametrize(("result", "text"), [
    (PAID, "Your payment failed [1]."),
    (PAID, "Your invoice INV-2026-0042 failed [1]."),
    (PAID, "Sorry, your payment already failed [1]."),
    (PAID, "Your payment failed and needs a new card [1]."),
    (PAID, "Your payment failed, we will charge the card tomorrow [1]."),
    (PENDING, "Your order A-7 shipped [1]."),
    (PENDING, "Your order is on its way [1]."),
    (PENDING, "Good news: your package is on its way!"),
    ({"order": "A-7", "status": "cancelled"}, "Your order A-7 is on its way [1]."),
])
def test_a_state_said_without_is_or_has_or_on_its_way_is_a_contradiction(result, text: str) -> None:
    """The tool said paid (or pending), and "Your payment failed" (or "on its way") went out."""
    verified = _gate(text, grounding=[result])

    assert verified.text == FALLBACK and verified.reason == ANOTHER


@pytest.mark.parametrize(("result", "text"), [
    (PAID, "Your payment succeeded [1]."),
    (PAID, "Your payment failed last week, but it went through on retry [1]."),
    (PAID, "Your first payment failed, and the second one is paid [1]."),
    (PAID, "If your payment failed, we retry it the next day [1]."),
    (PAID, "The payment that failed was refunded [1]."),
    (PENDING, "Your order A-7 is pending and will be on its way soon [1]."),
    (PENDING, "Once it is on its way, you get a tracking number [1]."),
    (PENDING, "Orders that shipped late get a refund of shipping [1]."),
    ({"order": "A-7", "status": "shipped"}, "Your order A-7 shipped and is on its way [1]."),
    ({"order": "A-7", "status": "delivered"}, "Your order A-7 shipped and was delivered [1]."),
    ({"order": "A-7", "status": "delivered"}, "Your order A-7 is on its way [1]."),  # a stage behind, never held
    # The state's word describes the thing, and the sentence's verb comes after it.
    ({"order": "A-7", "status": "delivered"}, "The items returned within 30 days are refunded in full [1]."),
    (PAID, "The payment refunded to your card was a duplicate charge [1]."),
    (PENDING, "Your order cancelled by mistake can be restored [1]."),
])
def test_a_state_said_plainly_of_another_thing_or_time_is_kept(result, text: str) -> None:
    assert _gate(text, grounding=[result]).text == text
