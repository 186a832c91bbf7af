"""Routing through the real pipeline: the bot's model, then its fallbacks, then an honest handoff."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from gateway.observability.metrics import Metrics
from tests.english_replies import LLM_DOWN_REPLY
from tests.fakes.openai_server import ToolCallSpec, Turn
from tests.pipeline.conftest import make_rig


@pytest.mark.parametrize("failure", [Turn(status=429, retry_after=0), Turn(status=500), Turn(text="late", delay=3)],
                         ids=["429", "500", "timeout"])
async def test_pipeline_primary_failure_falls_back(openai_fake, failure) -> None:
    rig = make_rig(openai_fake, timeout=0.5)
    openai_fake.script("primary", failure, failure)
    openai_fake.script("backup", Turn(text="Plus costs $6 per month [1]."))

    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    assert result.reply == "Plus costs $6 per month [1]." and result.answered and result.escalate is None
    assert [c.title for c in result.citations] == ["Plans and pricing"]
    # A try and a retry, then the next model; a timeout goes to the next model at once (its retry would
    # wait out the timeout again). A refused call bills nothing; a timed-out one read the prompt, so it
    # counts by its estimate.
    timed_out = failure.delay > 0
    assert len(openai_fake.requests_for("primary")) == (1 if timed_out else 2)
    assert [u["model"] for u in result.usage] == ["primary", "backup"] if timed_out else ["backup"]
    for estimate in result.usage[:-1]:
        assert estimate["partial"] and estimate["prompt_tokens"] > 50 and estimate["completion_tokens"] == 0


async def test_pipeline_every_model_failing_gives_honest_reply_and_escalates(openai_fake) -> None:
    rig = make_rig(openai_fake)
    openai_fake.script("primary", Turn(status=500), Turn(status=503))
    openai_fake.script("backup", Turn(status=429, retry_after=0), Turn(status=500))

    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    assert result.reply == LLM_DOWN_REPLY
    assert result.escalate == "every model failed" and not result.answered
    assert "Error" not in result.reply and "500" not in result.reply  # nothing technical reaches the customer
    assert len(openai_fake.requests) == 4
    assert result.retrieved and result.retrieved[0]["source"] == "help"  # operators see what the bot found


async def test_pipeline_llm_stage_latency_counts_a_turn_every_model_failed(openai_fake) -> None:
    # Observed only when a model answered: in a provider outage (each turn waiting out timeouts and
    # retries) gateway_stage_seconds{stage="llm"} went quiet instead of showing the wait.
    metrics = Metrics()
    rig = make_rig(openai_fake, metrics=metrics, timeout=0.3)
    openai_fake.script("primary", Turn(text="late", delay=2))
    openai_fake.script("backup", Turn(text="late", delay=2), Turn(text="late", delay=2))

    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    assert result.reply == LLM_DOWN_REPLY
    llm = metrics.stage_seconds.labels(stage="llm")
    assert llm._sum.get() >= 0.6  # three timed-out calls of 0.3 s
    assert sum(bucket.get() for bucket in llm._buckets) == 1


async def test_pipeline_chain_can_end_on_offline_model(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallbacks": ["offline"]}])
    openai_fake.script("primary", Turn(status=500), Turn(status=500))

    result = await rig.pipeline.handle(rig.turn("How much does the Plus plan cost per month?"))

    assert "$6 per month" in result.reply and "[1]" in result.reply
    assert result.usage[-1]["model"] == "offline" and result.usage[-1]["cost_usd"] == 0.0


OVERFLOW = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9120 tokens."


async def test_a_conversation_past_the_context_window_is_answered_without_its_history(openai_fake) -> None:
    """A long chat on a small model: every model refused the request as too long, and the customer was told
    the assistant is unavailable and handed to a person (review)."""
    rig = make_rig(openai_fake)
    history = [{"role": "user", "content": "Tell me about plans. " * 40}, {"role": "assistant", "content": "Sure."}]
    openai_fake.script("primary", Turn(text='{"queries": ["How much is Team?"]}'),  # the follow-up's rewrite
                       Turn(status=400, error=OVERFLOW), Turn(text="Team costs $12 per user per month [2]."))
    openai_fake.script("backup", Turn(status=400, error=OVERFLOW))

    result = await rig.pipeline.handle(rig.turn("And Team?", history=history))

    assert result.reply == "Team costs $12 per user per month [1]." and result.escalate is None
    asked = openai_fake.requests_for("primary")[-1].messages
    assert [m["role"] for m in asked] == ["system", "user"] and asked[-1]["content"] == "And Team?"


async def test_later_turns_of_a_conversation_past_the_context_window_do_not_each_pay_a_refused_call(openai_fake) -> None:
    """After one turn was refused as too long by every model, each later turn of that chat again failed
    once per model before its retry without history: they now send only the history that fits."""
    rig = make_rig(openai_fake)
    long_ask = {"role": "user", "content": "Tell me about plans. " * 40}
    history = [long_ask, {"role": "assistant", "content": "Sure."}]
    rewrite = Turn(text='{"queries": ["How much is Team?"]}')
    openai_fake.script("primary", rewrite, Turn(status=400, error=OVERFLOW), Turn(text="Team costs $12 per user per month [2]."))
    openai_fake.script("backup", Turn(status=400, error=OVERFLOW))
    await rig.pipeline.handle(rig.turn("And Team?", history=history))
    openai_fake.reset()
    history += [{"role": "user", "content": "And Team?"}, {"role": "assistant", "content": "Team costs $12 per user."}]
    openai_fake.script("primary", rewrite, Turn(text="Plus costs $6 per month [1]."))

    with capture_logs() as logs:
        result = await rig.pipeline.handle(rig.turn("And Plus?", history=history))

    assert result.reply == "Plus costs $6 per month [1]." and len(openai_fake.requests) == 2
    asked = openai_fake.requests_for("primary")[-1].messages
    assert [m["content"] for m in asked[1:]] == ["And Team?", "Team costs $12 per user.", "And Plus?"]
    assert [e["kept"] for e in logs if e["event"] == "llm.history_trimmed"] == [2]
    # Another conversation of the bot is not held to it.
    openai_fake.script("primary", rewrite, Turn(text="Plus costs $6 per month [1]."))
    other = rig.turn("And Plus?", history=history)
    other.conversation_id = 2
    await rig.pipeline.handle(other)
    assert len(openai_fake.requests_for("primary")[-1].messages) == 6


async def test_a_first_message_past_the_context_window_still_gets_the_honest_reply(openai_fake) -> None:
    rig = make_rig(openai_fake)
    openai_fake.script("primary", Turn(status=400, error=OVERFLOW))
    openai_fake.script("backup", Turn(status=400, error=OVERFLOW))

    result = await rig.pipeline.handle(rig.turn("How much is Plus?"))

    assert result.reply == LLM_DOWN_REPLY and len(openai_fake.requests) == 2  # nothing left to drop: no retry


async def test_the_call_with_no_tools_offered_can_end_on_the_offline_model(openai_fake) -> None:
    """The tool results go to the system message, after the extracts, so the customer's message stays the
    last one: the offline model, answering the last user message, still answers the customer's question."""
    whoami = {"name": "whoami", "type": "python", "import_path": "tests.pipeline.sample_tools:whoami"}
    rig = make_rig(openai_fake, bots=[{"name": "acme", "fallbacks": ["offline"], "tools": [whoami],
                                       "max_tool_rounds": 1}])
    again = Turn(tool_calls=(ToolCallSpec("whoami", {}),))
    openai_fake.script("primary", again, again, Turn(status=500), Turn(status=500))

    result = await rig.pipeline.handle(rig.turn("How much does the Plus plan cost per month?"))

    assert "$6 per month" in result.reply and result.usage[-1]["model"] == "offline"
