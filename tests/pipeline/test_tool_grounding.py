"""Gate 2 holds an answer to what the tools returned, through the real pipeline and LiteLLM."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from tests.fakes.openai_server import ToolCallSpec, Turn
from tests.pipeline.conftest import make_rig

ORDER = {"type": "object", "properties": {"order": {"type": "string"}}}
ORDER_STATUS = {"name": "order_status", "type": "python", "import_path": "tests.pipeline.sample_tools:order_status",
                "parameters": ORDER}


async def test_an_answer_that_says_a_shipped_order_has_not_shipped_is_not_sent(openai_fake) -> None:
    """The tool said "shipped"; the model, citing an extract, said "not shipped yet", and it went out."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [ORDER_STATUS]}])
    lookup = Turn(tool_calls=(ToolCallSpec("order_status", {"order": "A-7"}),))
    openai_fake.script("primary", lookup, Turn(text="Your order A-7 has not shipped yet [1]."),
                       lookup, Turn(text="Your order A-7 has shipped. Plus costs $6 per month [1]."))

    with capture_logs() as logs:
        wrong = await rig.pipeline.handle(rig.turn("Has my order A-7 shipped?"))
    right = await rig.pipeline.handle(rig.turn("Has my order A-7 shipped?"))

    assert wrong.tool_calls[0]["result"] == {"order": "A-7", "status": "shipped"}
    assert wrong.reply == rig.bot.fallback_text and not wrong.citations and not wrong.answered
    [replaced] = [e for e in logs if e["event"] == "gate2.replaced"]
    assert replaced["reason"] == "it contradicts the tools: a tool's status said not to be so"
    assert right.reply == "Your order A-7 has shipped. Plus costs $6 per month [1]." and right.answered


# Once a tool returned data, a number no evidence held went: an amount the conversation the model saw
# already held (the customer's own words, or an earlier answer: a tool's total then, an operator's word) was
# one, and a true answer that repeated it lost its sentence.
@pytest.mark.parametrize(("history", "answer"), [
    ([{"role": "user", "content": "I was charged $45 for order A-7."}, {"role": "assistant", "content": "Thanks."}],
     "Your order A-7 has shipped. The $45 you were charged is more than Plus, which costs $6 per month [1]."),
    ([{"role": "user", "content": "What did order A-7 cost?"}, {"role": "assistant", "content": "Order A-7 came to $59.90."}],
     "Your order A-7 has shipped. The $59.90 it came to is more than Plus, which costs $6 per month [1]."),
], ids=["the customer's earlier turn", "an earlier answer"])
async def test_an_amount_the_conversation_already_held_is_no_new_claim_of_the_answer(openai_fake, history, answer) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [ORDER_STATUS]}])
    openai_fake.script("primary", Turn(text='{"queries": ["order A-7 shipped"]}'),
                       Turn(tool_calls=(ToolCallSpec("order_status", {"order": "A-7"}),)), Turn(text=answer))

    result = await rig.pipeline.handle(rig.turn("Has it shipped?", history=history))

    assert result.reply == answer


async def test_a_bare_no_answers_this_message_not_an_earlier_question(openai_fake) -> None:
    """"Not yet" to "Has my order A-7 shipped?" says the shipped order has not; a "No" to a later message
    that asks something else says nothing of shipping, though the conversation asked it before."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [ORDER_STATUS]}])
    lookup = Turn(tool_calls=(ToolCallSpec("order_status", {"order": "A-7"}),))
    openai_fake.script("primary", lookup, Turn(text="Not yet, it leaves our warehouse soon [1]."),
                       Turn(text='{"queries": ["cancel order A-7"]}'), lookup,
                       Turn(text="No, it is too late to cancel it [1]."))
    history = [{"role": "user", "content": "Has my order A-7 shipped?"},
               {"role": "assistant", "content": "Yes, order A-7 has shipped."}]

    wrong = await rig.pipeline.handle(rig.turn("Has my order A-7 shipped?"))
    right = await rig.pipeline.handle(rig.turn("OK. Then can I still cancel it", history=history))

    assert wrong.reply == rig.bot.fallback_text and not wrong.answered
    assert right.reply == "No, it is too late to cancel it [1]."


async def test_a_bare_answer_answers_a_message_of_several_lines_whatever_its_last_line(openai_fake) -> None:
    """The message's last line was taken for it: "Thanks, Ana" asks nothing, so "Not yet" to a shipped
    order went out unjudged, and a true bare "Yes." went as saying nothing the tools returned."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [ORDER_STATUS]}])
    lookup = Turn(tool_calls=(ToolCallSpec("order_status", {"order": "A-7"}),))
    openai_fake.script("primary", lookup, Turn(text="Not yet, it leaves our warehouse soon [1]."),
                       lookup, Turn(text="Yes."))
    message = "Hi,\nhas my order A-7 shipped?\nThanks, Ana"

    wrong = await rig.pipeline.handle(rig.turn(message))
    right = await rig.pipeline.handle(rig.turn(message))

    assert wrong.reply == rig.bot.fallback_text and not wrong.answered
    assert right.reply == "Yes." and right.answered


async def test_an_uncited_sentence_is_read_in_the_bots_reply_language(openai_fake) -> None:
    """With no "the" or "is" in it, "Order A-7: free upgrade included!" was read as another language than
    English and passed on its order number; the bot's `replies.lang` (English here) reaches gate 2."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [ORDER_STATUS]}])
    lookup = Turn(tool_calls=(ToolCallSpec("order_status", {"order": "A-7"}),))
    openai_fake.script("primary", lookup, Turn(text="Order A-7: free upgrade included!"),
                       lookup, Turn(text="Order A-7: shipped!"))

    wrong = await rig.pipeline.handle(rig.turn("Has my order A-7 shipped?"))
    right = await rig.pipeline.handle(rig.turn("Has my order A-7 shipped?"))

    assert wrong.reply == rig.bot.fallback_text and not wrong.answered
    assert right.reply == "Order A-7: shipped!"
