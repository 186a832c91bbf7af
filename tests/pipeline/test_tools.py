"""The tool loop through the real pipeline: per-bot tools, injected identity, bounded rounds."""

from __future__ import annotations

import asyncio
import html
import json
import time

from structlog.testing import capture_logs

from gateway.pipeline.answer import INTERRUPTED, MAX_CALLS_PER_ROUND, NOT_RUN, TOO_MANY
from tests.fakes.openai_server import ToolCallSpec, Turn
from tests.pipeline import sample_tools
from tests.pipeline.conftest import make_rig
from tests.pipeline.sample_tools import injection_strings

INVOICE = {"name": "invoice_status", "type": "python", "import_path": "examples.tools.invoice:invoice_status"}
ESCALATE = {"name": "escalate_to_human", "type": "builtin"}


def _tool(name: str, **extra) -> dict:
    return {"name": name, "type": "python", "import_path": f"tests.pipeline.sample_tools:{name}", **extra}


def _names(request) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


async def test_tools_model_sees_only_its_bots_tools(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [INVOICE, ESCALATE]},
                                      {"name": "other", "tools": [_tool("whoami")]},
                                      {"name": "bare"}])
    openai_fake.script("primary", Turn(text="a [1]."), Turn(text="b [1]."), Turn(text="c [1]."))

    for bot in rig.bots:
        await rig.pipeline.handle(rig.turn("How much is Plus?", bot=bot))

    acme, other, bare = openai_fake.requests_for("primary")
    assert _names(acme) == ["invoice_status", "escalate_to_human"]
    assert _names(other) == ["whoami"]
    assert "tools" not in bare.body and "tool_choice" not in bare.body
    assert acme.body["tools"][0]["function"]["parameters"]["required"] == ["invoice_number"]


async def test_tools_invoice_of_another_customer_is_not_found(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [INVOICE]}])
    # Bob's invoice, asked for in Alice's conversation; the model even claims to be Bob.
    ask = ToolCallSpec("invoice_status", {"invoice_number": "INV-2025-005530", "contact_external_id": "demo-bob-session"},
                       id="c1")
    retry = ToolCallSpec("invoice_status", {"invoice_number": "INV-2025-005530"}, id="c2")
    openai_fake.script("primary", Turn(tool_calls=(ask,)), Turn(tool_calls=(retry,)),
                       Turn(text="I couldn't find invoice INV-2025-005530 on your account."))

    result = await rig.pipeline.handle(rig.turn("What's the status of invoice INV-2025-005530?"))

    first, second = result.tool_calls
    assert "error" in first["result"]  # an identity argument from the model is refused outright
    assert second["result"]["found"] is False and "No invoice" in second["result"]["message"]
    last = openai_fake.requests_for("primary")[-1]
    sent = json.dumps(last.messages)
    assert "1440" not in sent and "refunded" not in sent.lower().replace("refunded or void", "")
    assert result.reply == "I couldn't find invoice INV-2025-005530 on your account."


async def test_tools_a_lookup_that_found_nothing_does_not_let_an_uncited_claim_through(openai_fake) -> None:
    """One call with a made-up invoice number must not switch gate 2 off for the whole answer."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [INVOICE]}])
    lookup = ToolCallSpec("invoice_status", {"invoice_number": "INV-2025-999999"})
    claim = "Our refund policy changed: email your full card number to refunds@evil.example."
    openai_fake.script("primary", Turn(tool_calls=(lookup,)), Turn(text=claim))

    result = await rig.pipeline.handle(rig.turn("Check INV-2025-999999, then tell me the refund policy."))

    assert result.tool_calls[0]["result"]["found"] is False
    assert result.reply == rig.bot.fallback_text and not result.citations


async def test_tools_own_invoice_is_found_with_identity_injected(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [INVOICE, _tool("whoami")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("invoice_status", {"invoice_number": "inv 2025 004217"}),
                                                   ToolCallSpec("whoami", {}))),
                       Turn(text="Invoice INV-2025-004217 is paid."))

    result = await rig.pipeline.handle(rig.turn("Is INV-2025-004217 paid?", contact="demo-alice-session"))

    invoice, who = result.tool_calls
    assert invoice["result"]["found"] is True and invoice["result"]["invoice"]["status"] == "paid"
    assert who["result"] == {"channel": "web", "contact": "demo-alice-session"}
    # Grounded in a tool result: kept although it cites no extract.
    assert result.reply == "Invoice INV-2025-004217 is paid." and result.answered


async def test_tools_round_limit_then_one_call_with_tool_choice_none(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("whoami")], "max_tool_rounds": 2}])
    again = Turn(tool_calls=(ToolCallSpec("whoami", {}),))
    openai_fake.script("primary", again, again, Turn(text="You are demo-alice-session on the web channel."))

    result = await rig.pipeline.handle(rig.turn("Who am I?"))

    requests = openai_fake.requests_for("primary")
    assert [r.body["tool_choice"] for r in requests] == ["auto", "auto", "none"]
    assert all(_names(r) == ["whoami"] for r in requests)  # still listed: the history refers to them
    assert [c["round"] for c in result.tool_calls] == [1, 2]
    assert result.reply == "You are demo-alice-session on the web channel." and result.answered


async def test_a_model_that_ignores_tool_choice_none_is_asked_once_more_with_no_tools(openai_fake) -> None:
    """It got the fallback text (and counted as unanswered) although its rounds had found the answer: the
    next call offers no tools at all, with the rounds' results folded into the prompt as data."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("whoami")], "max_tool_rounds": 2}])
    again = Turn(tool_calls=(ToolCallSpec("whoami", {}),))
    openai_fake.script("primary", again, again, again, Turn(text="You are demo-alice-session on the web channel."))

    with capture_logs() as logs:
        result = await rig.pipeline.handle(rig.turn("Who am I?"))

    requests = openai_fake.requests_for("primary")
    assert [r.body.get("tool_choice") for r in requests] == ["auto", "auto", "none", None]
    last = requests[-1]
    assert "tools" not in last.body
    assert [m["role"] for m in last.messages] == ["system", "user"] and last.messages[-1]["content"] == "Who am I?"
    results = last.messages[0]["content"].split("Extracts:", 1)[1]  # after the extracts, as data
    assert results.count("<tool_result") == 2 and "demo-alice-session" in results and "no more tools" in results
    assert [c["round"] for c in result.tool_calls] == [1, 2, 3]
    assert result.tool_calls[-1]["result"] == {"error": NOT_RUN}
    assert result.reply == "You are demo-alice-session on the web channel." and result.answered
    assert [e["event"] for e in logs].count("tool.choice_ignored") == 1


async def test_a_model_that_asks_for_tools_even_when_none_are_offered_gets_no_more_calls(openai_fake) -> None:
    """The loop stays bounded: after the call with no tools offered there is no other."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("whoami")], "max_tool_rounds": 1}])
    again = Turn(tool_calls=(ToolCallSpec("whoami", {}),))
    openai_fake.script("primary", again, again, again, again)

    result = await rig.pipeline.handle(rig.turn("Who am I?"))

    assert len(openai_fake.requests_for("primary")) == 3 and openai_fake.remaining("primary") == 1
    assert result.reply == rig.bot.fallback_text and not result.answered


async def test_tools_default_round_limit_is_six(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("whoami")]}])
    again = Turn(tool_calls=(ToolCallSpec("whoami", {}),))
    openai_fake.script("primary", *[again] * 6, Turn(text="You are Alice [1]."))

    await rig.pipeline.handle(rig.turn("Who am I?"))

    assert [r.body["tool_choice"] for r in openai_fake.requests_for("primary")] == ["auto"] * 6 + ["none"]


async def test_tools_error_and_timeout_become_results_for_every_call(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("boom"), _tool("slow", timeout=0.2),
                                                                  _tool("whoami")]}])
    calls = (ToolCallSpec("boom", {}, id="t1"), ToolCallSpec("slow", {}, id="t2"),
             ToolCallSpec("nope", {}, id="t3"), ToolCallSpec("whoami", {}, id="t4"))
    openai_fake.script("primary", Turn(tool_calls=calls), Turn(text="Plus costs $6 per month [1]."))

    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    by_id = {c["id"]: c["result"] for c in result.tool_calls}
    assert by_id["t1"] == {"error": "RuntimeError: the tool failed"}
    assert by_id["t2"] == {"error": "tool timed out after 0.2s"}
    assert by_id["t3"] == {"error": "unknown tool 'nope'"}
    assert by_id["t4"] == {"channel": "web", "contact": "demo-alice-session"}
    answered = [m for m in openai_fake.requests_for("primary")[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == ["t1", "t2", "t3", "t4"]
    assert "RuntimeError: the tool failed" in answered[0]["content"]
    assert result.reply == "Plus costs $6 per month [1]."


async def test_a_tool_exceptions_text_goes_to_the_log_not_to_the_model_or_the_store(openai_fake) -> None:
    order = {"type": "object", "properties": {"order": {"type": "string"}}}
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [
        _tool("boom"), _tool("refuse", parameters=order), _tool("whoami"), _tool("order_status", parameters=order),
        _tool("my_orders"), _tool("stock")]}])
    calls = (ToolCallSpec("boom", {}, id="t1"), ToolCallSpec("refuse", {"order": "A-7"}, id="t2"),
             ToolCallSpec("whoami", {"admin": True}, id="t3"), ToolCallSpec("refuse", {}, id="t4"),
             ToolCallSpec("order_status", {"order": "A-7"}, id="t5"), ToolCallSpec("my_orders", {"include_all": True},
                                                                                 id="t6"),
             ToolCallSpec("stock", {}, id="t7"))
    openai_fake.script("primary", Turn(tool_calls=calls), Turn(text="Plus costs $6 per month [1]."))

    with capture_logs() as logs:
        result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    by_id = {c["id"]: c["result"] for c in result.tool_calls}
    assert by_id["t1"] == {"error": "RuntimeError: the tool failed"}
    assert by_id["t2"] == {"error": "order A-7 was cancelled and cannot be changed"}  # a ToolError is for the model
    assert by_id["t3"] == {"error": "invalid arguments: 'admin' is not a parameter of this tool"}
    assert by_id["t4"] == {"error": "invalid arguments: missing a required argument: 'order'"}
    # Checked against the decorator's signature, not the one it wraps (whose `orders` it supplies itself).
    assert by_id["t5"] == {"order": "A-7", "status": "shipped"}
    # A parameter the schema does not declare is the tool's own, however the function names it.
    assert by_id["t6"] == {"error": "invalid arguments: 'include_all' is not a parameter of this tool"}
    assert by_id["t7"] == {"in_stock": 3}  # an instance with an async __call__ is awaited
    sent = json.dumps(openai_fake.requests_for("primary")[1].messages)
    assert "s3cret" not in sent and "s3cret" not in json.dumps(result.tool_calls)
    failed = [e for e in logs if e["event"] == "tool.failed"]
    assert len(failed) == 1 and "backend exploded" in failed[0]["error"] and failed[0]["tool"] == "boom"


async def test_malformed_arguments_are_sent_back_to_the_model_as_an_empty_object(openai_fake) -> None:
    """A truncated or non-object argument string, replayed as the model wrote it, made LiteLLM's Anthropic
    adapter refuse the whole next round (a bad request, never retried): one bad call cost the model its turn."""
    order = {"type": "object", "properties": {"order": {"type": "string"}}}
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("order_status", parameters=order)]}])
    calls = (ToolCallSpec("order_status", '{"order": "A-', id="t1"), ToolCallSpec("order_status", "[1, 2]", id="t2"),
             ToolCallSpec("order_status", {"order": "A-7"}, id="t3"),
             # Too deep for json.loads: its RecursionError failed the turn ("something went wrong", a handoff).
             ToolCallSpec("order_status", "[" * 5000 + "]" * 5000, id="t4"))
    openai_fake.script("primary", Turn(tool_calls=calls), Turn(text="Plus costs $6 per month [1]."))

    result = await rig.pipeline.handle(rig.turn("Where is my order?"))

    replayed = next(m for m in openai_fake.requests_for("primary")[1].messages if m.get("tool_calls"))
    assert [c["function"]["arguments"] for c in replayed["tool_calls"]] == ["{}", "{}", '{"order": "A-7"}', "{}"]
    by_id = {c["id"]: c["result"] for c in result.tool_calls}
    assert by_id["t1"]["error"].startswith("invalid arguments") and by_id["t2"]["error"].startswith("invalid arguments")
    assert by_id["t3"] == {"order": "A-7", "status": "shipped"}
    assert by_id["t4"] == {"error": "invalid arguments: nested too deeply"}
    assert result.reply == "Plus costs $6 per month [1]."


async def test_tools_past_the_per_round_limit_are_answered_not_run(openai_fake) -> None:
    # 25 calls in one round, each waiting out its timeout, held the turn for 50 s.
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("whoami")]}])
    many = tuple(ToolCallSpec("whoami", {}, id=f"t{i}") for i in range(25))
    openai_fake.script("primary", Turn(tool_calls=many), Turn(text="Plus costs $6 per month [1]."))

    result = await rig.pipeline.handle(rig.turn("Who am I?"))

    run = [c for c in result.tool_calls if c["result"] != {"error": TOO_MANY}]
    assert len(run) == MAX_CALLS_PER_ROUND and len(result.tool_calls) == 25
    answered = [m for m in openai_fake.requests_for("primary")[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == [f"t{i}" for i in range(25)]  # every call has its answer
    assert result.reply == "Plus costs $6 per month [1]."


async def test_tools_escalate_tool_hands_over(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [ESCALATE]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("escalate_to_human", {"reason": "refund dispute"}),)))

    result = await rig.pipeline.handle(rig.turn("I want my money back now"))

    assert result.escalate == "refund dispute" and result.reply == rig.bot.escalation.acknowledgement
    assert len(openai_fake.requests_for("primary")) == 1


async def test_tools_a_request_for_a_person_after_the_last_round_is_granted(openai_fake) -> None:
    """A model that ignores tool_choice="none" to ask for a person: its call was answered "not run", and
    the customer got the fallback text with nobody asked."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("whoami"), ESCALATE], "max_tool_rounds": 1}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("whoami", {}),)),
                       Turn(tool_calls=(ToolCallSpec("whoami", {}), ToolCallSpec("escalate_to_human", {"reason": "angry"}))))

    result = await rig.pipeline.handle(rig.turn("I want my money back now"))

    assert [r.body["tool_choice"] for r in openai_fake.requests_for("primary")] == ["auto", "none"]
    assert result.escalate == "angry" and result.reply == rig.bot.escalation.acknowledgement
    assert [c["result"] for c in result.tool_calls[1:]] == [{"error": NOT_RUN}, {"status": "escalated"}]


async def test_tools_injection_in_result_stays_inside_tool_result_block(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("poisoned")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("poisoned", {}, id="p1"),)),
                       Turn(text="Plus costs $6 per month [1]."))

    await rig.pipeline.handle(rig.turn("How much is Plus?"))

    messages = openai_fake.requests_for("primary")[1].messages
    [tool] = [m for m in messages if m["role"] == "tool"]
    body = tool["content"]
    assert body.startswith('<tool_result name="poisoned">\n') and body.endswith("\n</tool_result>")
    inner = body[body.index("\n") + 1: -len("\n</tool_result>")]
    assert "<" not in inner  # planted tags are escaped, so the block ends only where we end it
    decoded = html.unescape(inner)
    others = [m.get("content") or "" for m in messages if m is not tool]
    for planted in injection_strings():
        assert json.dumps(planted)[1:-1] in decoded
        assert not any(planted in text for text in others)


async def test_sync_tools_past_their_timeout_do_not_stall_the_default_thread_pool(openai_fake) -> None:
    # Each timed-out call keeps its thread (threads cannot be stopped). On asyncio's default pool, six
    # of them blocked query embedding and model calls for every bot until they returned.
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("sleepy", timeout=0.2)]}])
    calls = tuple(ToolCallSpec("sleepy", {}, id=f"s{i}") for i in range(MAX_CALLS_PER_ROUND))
    openai_fake.script("primary", Turn(tool_calls=calls), Turn(text="Plus costs $6 per month [1]."))
    sample_tools.SLEEPY_RELEASE.clear()
    try:
        started = time.monotonic()
        result = await rig.pipeline.handle(rig.turn("How much is Plus?"))
        # The turn goes on after its timed-out calls (it waited ~30 s for the threads before).
        assert time.monotonic() - started < 10
        assert all(c["result"] == {"error": "tool timed out after 0.2s"} for c in result.tool_calls)
        assert result.reply == "Plus costs $6 per month [1]."
        # The default pool still runs work at once, with every tool thread still asleep.
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 10) == "free"  # blocked: 30 s
    finally:
        sample_tools.SLEEPY_RELEASE.set()


async def test_the_calls_of_one_round_run_side_by_side(openai_fake) -> None:
    """One after the other, eight slow lookups took eight timeouts. `meet` returns only when three of it
    run at once, else it times out."""
    sample_tools.MEETING["arrived"] = 0
    seat = {"type": "object", "properties": {"seat": {"type": "integer"}}}
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("meet", timeout=5, parameters=seat)]}])
    calls = tuple(ToolCallSpec("meet", {"seat": i}, id=f"m{i}") for i in range(3))
    openai_fake.script("primary", Turn(tool_calls=calls), Turn(text="Plus costs $6 per month [1]."))
    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))
    assert [c["result"] for c in result.tool_calls] == [{"met": 3}] * 3


async def test_a_huge_tool_result_is_cut_for_the_prompt_and_the_store(openai_fake) -> None:
    from gateway.pipeline.tools import DEFAULT_RESULT_CHARS

    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("huge")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("huge", {}, id="h1"),)),
                       Turn(text="Plus costs $6 per month [1]."))
    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))
    stored = result.tool_calls[0]["result"]
    assert stored["truncated"].startswith(f"the first {DEFAULT_RESULT_CHARS:,} of ")
    assert len(json.dumps(stored)) < DEFAULT_RESULT_CHARS + 1000
    sent = [m for m in openai_fake.requests_for("primary")[1].messages if m["role"] == "tool"][0]["content"]
    assert len(sent) < DEFAULT_RESULT_CHARS * 2  # escaped JSON of the cut text, not the 1.3 MB


async def test_a_tools_max_result_chars_bounds_its_result_marks_the_cut_and_logs_it(openai_fake) -> None:
    """A tool's own `max_result_chars` (a small local model's context holds less than the default): the
    model reads that much, told the rest was cut, and the log says which tool was cut and from how much."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("huge", max_result_chars=2_000), _tool("whoami")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("huge", {}, id="h1"), ToolCallSpec("whoami", {}, id="w1"))),
                       Turn(text="Plus costs $6 per month [1]."))

    with capture_logs() as logs:
        result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    cut, who = (c["result"] for c in result.tool_calls)
    assert cut["truncated"].startswith("the first 2,000 of ") and "the rest was cut" in cut["truncated"]
    assert len(cut["text"]) == 2_000 and who == {"channel": "web", "contact": "demo-alice-session"}
    sent = [m["content"] for m in openai_fake.requests_for("primary")[1].messages if m["role"] == "tool"]
    assert len(sent[0]) < 4_000 and "the rest was cut" in sent[0]
    [event] = [e for e in logs if e["event"] == "tool.result_truncated"]
    assert event["tool"] == "huge" and event["kept"] == 2_000 and event["chars"] > 1_000_000


async def test_a_tool_result_that_is_a_list_can_ground_an_answer(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("statuses")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("statuses", {}, id="s1"),)),
                       Turn(text="Sync is degraded."))
    result = await rig.pipeline.handle(rig.turn("Is sync working?"))
    assert result.reply == "Sync is degraded."


async def test_tool_calls_stopped_by_the_turn_deadline_are_still_recorded(openai_fake) -> None:
    """The worker's `turn_timeout` cancels a turn wherever it is; calls it cut off may have taken effect,
    so they stay in the turn's record (stored with the failure reply) as interrupted. A call of the same
    round that had returned is stored with its result: what it did is known."""
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("slow", timeout=20), _tool("statuses")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("slow", {}, id="s1"), ToolCallSpec("statuses", {}, id="s2"))))
    turn = rig.turn("How much is Plus?")

    started = time.monotonic()
    try:
        # 5 s: the model's answer and `statuses` are in by then on a loaded machine too (at 0.5 s they were
        # not always, and `statuses` was recorded as cut off); `slow` runs for 30.
        async with asyncio.timeout(5):
            await rig.pipeline.handle(turn)
    except TimeoutError:
        pass
    else:
        raise AssertionError("the turn was not stopped")

    assert time.monotonic() - started < 15  # stopped by the deadline, not by the 20 s tool timeout
    assert turn.record.tool_calls == [
        {"round": 1, "id": "s1", "name": "slow", "arguments": {}, "result": {"error": INTERRUPTED}},
        {"round": 1, "id": "s2", "name": "statuses", "arguments": {}, "result": [{"service": "sync", "status": "degraded"}]}]
    assert len(turn.record.usage) == 1  # the model call that asked for it finished, and is counted


async def test_tool_rounds_are_bounded_in_time_too(openai_fake, monkeypatch) -> None:
    """A model asking for a slow tool every round held a message for rounds × the tool timeout: past
    `MAX_TOOL_SECONDS` in tool rounds, the next call is the last, with tool_choice "none"."""
    import gateway.pipeline.answer as answer

    monkeypatch.setattr(answer, "MAX_TOOL_SECONDS", 0.15)  # less than one call's 0.2 s timeout, whatever the load
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("slow", timeout=0.2)]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("slow", {}),)), Turn(text="Plus costs $6 per month [1]."))

    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    requests = openai_fake.requests_for("primary")
    assert [r.body["tool_choice"] for r in requests] == ["auto", "none"]  # not 6 rounds
    assert result.reply == "Plus costs $6 per month [1]."

