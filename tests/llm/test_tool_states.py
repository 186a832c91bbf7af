"""Gate 2's check of the states an answer gives against the tools': another state of the same kind, a bare
"Not yet" to a question, a state in Spanish or German, and uncited answers in words of their own."""

from __future__ import annotations

import pytest

from tests.llm.test_tool_contradictions import FALLBACK, ORDER, _gate

SHIPPED = "Has my order A-1042 shipped?"


@pytest.mark.parametrize("text", [
    "Your order A-1042 is pending.",
    "Your order A-1042 is still on hold [1].",
    "Your parcel is pending; refunds take 5 business days [1].",
    "Order A-1042 has been cancelled.",
    "Your order A-1042 is pending, and we'll email you when it ships.",  # the condition is another clause's
    "Your order A-1042 is on hold, so it ships once we have your new address [1].",
])
def test_a_state_said_to_be_another_of_its_kind_is_a_contradiction(text: str) -> None:
    """The tool says shipped; "pending" went out, since only a denial of "shipped" was caught."""
    verified = _gate(text)

    assert verified.replaced and verified.reason == "it contradicts the tools: a tool's status said to be another"


@pytest.mark.parametrize("text", [
    "Your order A-1042 has shipped and is in transit [1].",
    "Your order A-1042 is on its way, and your refund is pending [1].",  # the refund's, not the order's
    "Your order A-1042 has shipped; the refund of 30 is pending [1].",
    "Orders are processed within 5 business days [1]. An order is pending until we have your payment [1].",
    "The order is cancelled automatically if it is not paid within 5 business days [1].",  # a rule, not a state
    "Is your order still pending? It has shipped [1].",
    "Your order A-1042 is no longer pending: it has shipped.",
    "Order A-1042 is not cancelled [1].",
    "Once it is delivered, the return window of 30 days starts [1].",
    "If your order were pending, you could still change it [1].",
])
def test_another_thing_in_another_state_or_a_denied_state_is_kept(text: str) -> None:
    assert _gate(text).text == text


@pytest.mark.parametrize(("question", "text"), [
    ("Where is my order A-1042?", "Has it shipped? Not yet [1]."),
    (SHIPPED, "Not yet, it is still being prepared."),
    (SHIPPED, "No, sorry [1]."),
    (SHIPPED, "Noch nicht, tut mir leid."),
    (SHIPPED, "Todavía no, lo siento."),
    ("Is my order A-1042 still pending?", "Yes, it is still being prepared [1]."),
    ("Can I get a refund for order A-1042, is it refundable?", "Yes, you can send it back within 30 days [1]."),
])
def test_a_bare_answer_against_the_tools_state_is_a_contradiction(question: str, text: str) -> None:
    """The tool says shipped (and not refundable): "Not yet" said it had not, and went out."""
    verified = _gate(text, question=question)

    assert verified.text in ("Has it shipped?", FALLBACK)  # the question may stay; its wrong answer goes
    assert verified.reason.startswith("it contradicts the tools") or not verified.replaced


@pytest.mark.parametrize(("question", "text"), [
    (SHIPPED, "Yes, it shipped and arrives on November 28."),
    (SHIPPED, "No problem: order A-1042 has shipped."),
    ("Is my order A-1042 still pending?", "No, it has shipped [1]."),
    ("Hasn't order A-1042 shipped yet?", "No, it has: it arrives on November 28."),  # "No" to a denial: unclear
    ("Has my order A-1042 been delivered?", "Not yet, it is in transit and arrives on November 28 [1]."),
    ("Is order A-1042 refundable?", "No, it is not refundable [1]."),
    ("Has order A-1042 shipped? Can I still change its address?", "No, not once it is on its way [1]."),
    ("Has order A-1042 shipped or is it still pending?", "Yes, it arrives on November 28."),
    ("Did my payment go through, and is order A-1042 refundable?", "Yes, your payment went through [1]."),
    ("Is my shipped order A-1042 refundable?", "No, sorry [1]."),  # a question of a flag, not of shipping
    ("Has order A-1042 shipped and can I still change its address?", "No, the address can no longer change [1]."),
])
def test_a_bare_answer_that_agrees_with_the_tools_is_kept(question: str, text: str) -> None:
    assert _gate(text, question=question).text == text


@pytest.mark.parametrize("text", [
    "Tu pedido A-1042 ya ha sido enviado.",
    "Ihre Bestellung A-1042 wurde bereits versandt.",
    "Tu pedido A-1042 llegará el 28 de noviembre.",
    "Ihre Bestellung A-1042 ist nicht storniert und kommt am 28. November an.",
    "Good news: your package is on its way!",
    "Your order A-1042 is shipping with UPS.",
    "Your order A-1042 has a delivery date of November 28.",  # `delivery_date`'s words
])
def test_an_uncited_answer_in_words_of_its_own_or_another_language_is_kept(text: str) -> None:
    """Half of an uncited sentence's words had to be the tool's, literally: every Spanish or German answer
    on a shipped order, and "your package is on its way", became the fallback."""
    result = {**ORDER, "carrier": "UPS"}

    verified = _gate(text, grounding=[result])

    assert verified.text == text and not verified.replaced


@pytest.mark.parametrize("text", [
    "You have no pending refunds, and order A-7 is pending [1].",
    "Your order A-7 is processing and will be shipped soon.",
    "Your order A-7 is still pending; it has not shipped yet [1].",
    "Tu pedido A-7 está pendiente y se enviará pronto.",
])
def test_words_for_a_pending_order_are_kept(text: str) -> None:
    assert _gate(text, grounding=[{"order": "A-7", "status": "pending"}]).text == text


@pytest.mark.parametrize(("question", "text", "kept"), [
    (SHIPPED, "Yes. It arrives on November 28.", "Yes. It arrives on November 28."),
    ("Is order A-1042 still pending?", "Nope. It arrives on November 28.", "Nope. It arrives on November 28."),
    ("Is order A-1042 refundable?", "Nope. It arrives on November 28.", "Nope. It arrives on November 28."),
    ("Is order A-1042 gift-wrapped?", "Yes. It arrives on November 28.", "It arrives on November 28."),  # no tool says
    ("Where is my order A-1042?", "Tu pago de 59,90 € se ha cobrado.", "Tu pago de 59,90 € se ha cobrado."),
])
def test_a_bare_answer_the_tools_state_decides_or_an_amount_they_hold_grounds_a_sentence(question, text, kept) -> None:
    """A bare "Yes." that the tool's state bears out, and a Spanish sentence stating the tool's amount, held
    no word of the results', and went."""
    assert _gate(text, question=question).text == kept


def test_an_uncited_claim_the_tools_do_not_make_still_goes() -> None:
    text = "Your package is on its way. Your package qualifies for free returns for life."

    assert _gate(text).text == "Your package is on its way."


def test_the_customers_words_ground_no_claim() -> None:
    """The question's "free upgrade" made half of the answer's words, and the promise went out."""
    verified = _gate("Yes, order A-1042 qualifies for a free upgrade.",
                     question="Can I get a free upgrade for order A-1042?")

    assert verified.replaced and verified.text == FALLBACK


def test_an_identifier_only_the_call_gave_grounds_no_sentence() -> None:
    """The model asked for A-1042 and the tool found nothing: the identifier is the model's own word."""
    verified = _gate("Tu pedido A-1042 ya ha sido enviado.", grounding=[{"found": False}])

    assert verified.replaced and verified.text == FALLBACK


@pytest.mark.parametrize(("result", "wrong", "right"), [
    ({"pedido": "A-7", "estado": "enviado"}, "Tu pedido A-7 todavía no ha sido enviado [1].",
     "Tu pedido A-7 ya ha sido enviado."),
    ({"Bestellung": "A-7", "Status": "versandt"}, "Ihre Bestellung A-7 ist noch nicht versandt [1].",
     "Ihre Bestellung A-7 ist bereits versandt."),
])
def test_a_state_in_the_answers_language_is_held_like_an_english_one(result, wrong: str, right: str) -> None:
    """A shop whose tool says "enviado": "no ha sido enviado" read as no negation at all, and went out."""
    assert _gate(wrong, grounding=[result]).replaced
    assert _gate(right, grounding=[result]).text == right


NESTED = {"order": {"id": "A-1042", "status": "shipped", "payment": {"status": "pending"}}}


@pytest.mark.parametrize(("text", "kept"), [
    ("Your order has not shipped yet [1].", False),
    ("Your order is on hold [1].", False),
    ("Your payment is still pending, and your order has shipped [1].", True),
    ("It has not shipped yet [1].", True),  # "it" may be the payment: whose state is unclear
    ("Your payment has not shipped [1].", True),
])
def test_the_states_of_two_things_under_one_key_are_each_held_to_their_own(text: str, kept: bool) -> None:
    """An order's and its payment's `status` differed, so neither was held to anything: "Your order has not
    shipped yet" went out on a shipped order."""
    verified = _gate(text, grounding=[NESTED])

    assert (verified.text == text) is kept and verified.replaced is not kept


@pytest.mark.parametrize(("result", "question", "text"), [
    ({"order": "A-7", "status": "pending"}, "Has my order A-7 shipped?", "No, it's still pending."),
    ({"order": "A-7", "status": "pending"}, "Has my order A-7 shipped?", "Nope - your order is still pending [1]."),
    ({"ticket": "T-5", "status": "open"}, "Is my ticket T-5 closed?", "No, it's still open [1]."),
    ({"pedido": "A-7", "estado": "pendiente"}, "¿Se envió mi pedido A-7?", "No, está pendiente."),
])
def test_a_bare_no_then_the_tools_state_is_kept(result, question: str, text: str) -> None:
    """"No, it's still pending" on a pending order went as saying it was not pending: the answer's "No"
    was read as the negation of the "is" after it, as "no está" is."""
    assert _gate(text, grounding=[result], question=question).text == text


def test_a_spanish_no_before_the_verb_still_denies_the_state() -> None:
    verified = _gate("No, no está pendiente.", grounding=[{"pedido": "A-7", "estado": "pendiente"}])

    assert verified.replaced and verified.reason == "it contradicts the tools: a tool's estado said not to be so"


@pytest.mark.parametrize(("result", "question", "text"), [
    (ORDER, "Is my order A-1042 refundable?", "No, unfortunately it isn't refundable."),
    (ORDER, "Is my order A-1042 refundable?", "No, sorry, it's not."),
    ({"order": "A-7", "status": "pending"}, "Has my order A-7 shipped?", "Not yet, sorry."),
    ({"payment": "P-7", "status": "succeeded", "refunded": False}, "Was my payment P-7 refunded?", "No, not yet."),
    ({"ticket": "T-5", "status": "open"}, "Where is my ticket T-5?", "Your ticket is not closed yet."),
])
def test_an_uncited_answer_that_denies_in_words_of_its_own_is_kept(result, question: str, text: str) -> None:
    """"isn't", "yet", "sorry" counted as words the results had to hold, and a true "No, sorry, it's not."
    or "Not yet, sorry." became the fallback."""
    assert _gate(text, grounding=[result], question=question).text == text


@pytest.mark.parametrize(("result", "text"), [
    (ORDER, "Tu pedido A-1042 todavía no ha sido enviado."),
    (ORDER, "Ihre Bestellung A-1042 wurde noch nicht versandt."),
    (ORDER, "Tu pedido está pendiente de pago."),
    ({"order": "A-7", "status": "pending"}, "Tu pedido A-7 ya ha sido enviado."),
    ({"order": "A-7", "status": "pending"}, "Ihre Bestellung wurde bereits versandt."),
    ({"ticket": "T-5", "status": "open"}, "Su solicitud T-5 está cerrada."),
])
def test_a_state_said_otherwise_in_spanish_or_german_of_an_english_tools_state_is_a_contradiction(result,
                                                                                                  text) -> None:
    """A Spanish sentence naming the order's identifier is grounded in any words, and "todavía no ha sido
    enviado" of `"status": "shipped"` went out: only the tool's own word was looked for."""
    verified = _gate(text, grounding=[result])

    assert verified.replaced and verified.reason.startswith("it contradicts the tools: a tool's status")


@pytest.mark.parametrize(("result", "text"), [
    (ORDER, "Tu pedido A-1042 ya ha sido enviado y no está cancelado."),
    (ORDER, "Ihre Bestellung A-1042 ist versandt und nicht storniert."),
    ({"order": "A-7", "status": "pending"}, "Tu pedido A-7 está pendiente y todavía no ha sido enviado."),
    ({"ticket": "T-5", "status": "open"}, "Su solicitud T-5 sigue abierta, no está cerrada."),
])
def test_the_tools_state_said_in_spanish_or_german_is_kept(result, text: str) -> None:
    assert _gate(text, grounding=[result]).text == text


RETURN = {"return": {"id": "RMA123", "state": "pending"}}


@pytest.mark.parametrize(("grounding", "text"), [
    ([ORDER, RETURN], "Your return RMA123 is pending."),
    ([ORDER, {"return": {"id": "R-77", "state": "pending"}}], "Your return R-77 is still pending [1]."),
    ([ORDER, RETURN], "Order A-1042 has shipped, and return RMA123 is pending [1]."),
])
def test_another_things_identifier_does_not_name_the_tools_thing(grounding, text: str) -> None:
    """Any identifier counted as the order's: "Your return RMA123 is pending" went as saying the shipped
    order was pending, though the return lookup gave RMA123 as pending."""
    assert _gate(text, grounding=grounding).text == text


@pytest.mark.parametrize("text", ["Your order A-1042 is pending.", "Order A-1042 is on hold, return RMA123 too [1]."])
def test_the_things_own_identifier_still_names_it(text: str) -> None:
    verified = _gate(text, grounding=[ORDER, RETURN])

    assert verified.replaced and verified.reason == "it contradicts the tools: a tool's status said to be another"


ORDERS = {"orders": [{"id": "A-1042", "status": "shipped"}, {"id": "A-1043", "status": "pending"}]}


@pytest.mark.parametrize(("text", "kept"), [
    ("Order A-1043 has shipped.", False),
    ("Order A-1042 is still pending [1].", False),
    ("Order A-1043 has not shipped yet [1].", True),
    ("A-1042 has shipped, A-1043 is pending and will ship soon [1].", True),
    ("Your order is pending [1].", True),  # which of the two: unclear
])
def test_each_record_of_a_list_is_held_to_its_own_state(text: str, kept: bool) -> None:
    """Two orders, one shipped and one pending, held no sentence to anything: "Order A-1043 has shipped"
    went out for the pending one."""
    verified = _gate(text, grounding=[ORDERS])

    assert (verified.text == text) is kept and verified.replaced is not kept


@pytest.mark.parametrize(("question", "text"), [
    ("Ist meine Bestellung A-1042 noch ausstehend?", "Nein, sie wurde bereits versandt."),
    ("¿Está cancelado mi pedido A-1042?", "No, tu pedido no está cancelado: ya fue enviado."),
    ("¿Está pendiente mi pedido A-1042?", "No, ya ha sido enviado."),
])
def test_an_uncited_spanish_or_german_answer_saying_the_tools_state_is_kept(question: str, text: str) -> None:
    """Without an identifier, date or amount, a Spanish or German sentence was grounded by nothing, and
    "Nein, sie wurde bereits versandt." on a shipped order became the fallback."""
    assert _gate(text, question=question).text == text


def test_a_spanish_state_word_grounds_no_other_state() -> None:
    assert _gate("Tu pedido está cancelado.").replaced
