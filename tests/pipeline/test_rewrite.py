"""Follow-up rewriting: standalone queries for the search, the customer's own words for the answer."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from gateway.pipeline.rewrite import HISTORY_TOKEN_BUDGET, bounded_history
from tests.fakes.openai_server import Turn

HISTORY = [
    {"role": "user", "content": "How much is the Team plan?"},
    {"role": "assistant", "content": "Team costs $12 per user per month [1]."},
]
FOLLOW_UP = "and on a yearly plan?"
REWRITES = ["Team plan price billed yearly", "Team plan annual cost per user"]


async def test_rewrite_queries_go_to_search_and_customer_words_to_answer(rig, openai_fake) -> None:
    openai_fake.script("primary", Turn(text=json.dumps({"queries": REWRITES})),
                       Turn(text="Team costs $120 per user per year [2]."))

    result = await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    rewrite_request, answer_request = openai_fake.requests_for("primary")
    assert rewrite_request.body["response_format"]["type"] == "json_schema"
    assert FOLLOW_UP in rewrite_request.messages[-1]["content"]
    assert rig.search.calls == [REWRITES]
    assert answer_request.messages[-1] == {"role": "user", "content": FOLLOW_UP}
    sent = json.dumps(answer_request.messages)
    assert not any(q in sent for q in REWRITES)
    assert "response_format" not in answer_request.body
    assert result.queries == REWRITES and result.reply == "Team costs $120 per user per year [1]."
    assert [u["model"] for u in result.usage] == ["primary", "primary"]  # the rewrite is paid for too


async def test_a_turns_rewrite_and_answer_calls_are_told_apart_in_the_log(rig, openai_fake) -> None:
    # Both logged `llm.answered` with the same ids: an operator could not tell the rewrite's tokens and
    # latency from the answer's, nor which of the two a `llm.call_failed` line was about.
    openai_fake.script("primary", Turn(text=json.dumps({"queries": REWRITES})), Turn(status=500),
                       Turn(text="Team costs $120 per user per year [2]."))

    with capture_logs() as logs:
        await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    calls = [(e["event"], e.get("purpose")) for e in logs if e["event"] in ("llm.answered", "llm.call_failed")]
    assert calls == [("llm.answered", "rewrite"), ("llm.call_failed", "answer"), ("llm.answered", "answer")]


async def test_rewrite_skipped_without_history(rig, openai_fake) -> None:
    openai_fake.script("primary", Turn(text="Plus costs $6 per month [1]."))

    await rig.pipeline.handle(rig.turn("How much is Plus?"))

    assert rig.search.calls == [["How much is Plus?"]]
    assert len(openai_fake.requests_for("primary")) == 1


async def test_rewrite_malformed_output_falls_back_to_raw_message(rig, openai_fake) -> None:
    openai_fake.script("primary", Turn(text="Sure! Here are some queries: yearly team price"),
                       Turn(text="Team costs $120 per user per year [2]."))

    result = await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    assert rig.search.calls == [[FOLLOW_UP]] and result.reply.endswith("[1].")


async def test_rewrite_malformed_output_is_not_logged_as_it_restates_the_customer(rig, openai_fake) -> None:
    # Logs hold ids, never message text (docs/data.md); a rewrite that is not JSON was logged whole.
    openai_fake.script("primary", Turn(text=f"You asked {FOLLOW_UP!r} about the Team plan"),
                       Turn(text="Team costs $120 per user per year [2]."))

    with capture_logs() as logs:
        await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    [malformed] = [e for e in logs if e["event"] == "rewrite.malformed"]
    assert malformed["chars"] > 0
    assert not any(FOLLOW_UP in str(value) for entry in logs for value in entry.values())


async def test_rewrite_output_nested_too_deeply_falls_back_to_raw_message(rig, openai_fake) -> None:
    # A model stuck repeating "[" wrote JSON too deep for json.loads: its RecursionError failed the whole
    # turn ("something went wrong", a handoff) where any other malformed rewrite is only skipped.
    openai_fake.script("primary", Turn(text="[" * 5000), Turn(text="Team costs $120 per user per year [2]."))

    result = await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    assert rig.search.calls == [[FOLLOW_UP]] and result.reply.endswith("[1].")


async def test_rewrite_failure_falls_back_to_raw_message(rig, openai_fake) -> None:
    # A 400 is not retried and backup has no script left: the rewrite fails, the answer still comes.
    openai_fake.script("primary", Turn(status=400), Turn(text="Team costs $120 per user per year [2]."))
    openai_fake.script("backup", Turn(status=400))

    result = await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    assert rig.search.calls == [[FOLLOW_UP]] and result.answered


async def test_a_rewrite_cut_off_by_its_deadline_is_paid_for_by_its_estimate(rig, openai_fake, monkeypatch) -> None:
    # The provider read the rewrite's prompt before the deadline cut it off: billed, so counted.
    monkeypatch.setattr("gateway.pipeline.rewrite.REWRITE_DEADLINE_SECONDS", 0.5)
    openai_fake.script("primary", Turn(text=json.dumps({"queries": REWRITES}), delay=3),
                       Turn(text="Team costs $120 per user per year [2]."))

    with capture_logs() as logs:
        result = await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    assert rig.search.calls == [[FOLLOW_UP]] and result.answered
    # The deadline's TimeoutError has no text: the line says which limit it was, and for which models.
    [failed] = [e for e in logs if e["event"] == "rewrite.failed"]
    assert failed["error"] == "no answer within 0.5s" and failed["models"] == ["primary", "backup"]
    estimate, answer = result.usage
    assert estimate["model"] == "primary" and estimate["partial"] and estimate["prompt_tokens"] > 20
    assert estimate["completion_tokens"] == 0 and answer["completion_tokens"] > 0


async def test_rewrite_makes_one_attempt_per_model_and_never_asks_offline(openai_fake) -> None:
    """An outage is paid by the answer call, not twice: the rewrite neither retries nor falls back to
    `offline` (which answers "I don't know…" to a rewrite prompt)."""
    from tests.pipeline.conftest import make_rig

    rig = make_rig(openai_fake, bots=[{"name": "acme", "model": "primary", "fallbacks": ["offline"]}])
    openai_fake.script("primary", Turn(status=503), Turn(text="Team costs $120 per user per year [2]."))

    result = await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    # One rewrite attempt (503, retryable, not retried), then the answer on the next scripted turn.
    assert len(openai_fake.requests_for("primary")) == 2 and rig.search.calls == [[FOLLOW_UP]]
    assert result.reply == "Team costs $120 per user per year [1]."


async def test_rewrite_history_bounded_by_turns_and_tokens_without_tool_turns(rig, openai_fake) -> None:
    history = []
    for i in range(20):
        history += [{"role": "user", "content": f"question number {i}"},
                    {"role": "tool", "content": f"tool output {i}"},
                    {"role": "assistant", "content": f"answer number {i}"}]
    openai_fake.script("primary", Turn(text=json.dumps({"queries": ["a", "b", "c", "d", "e"]})), Turn(text="x [1]."))

    await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=history))

    transcript = openai_fake.requests_for("primary")[0].messages[-1]["content"]
    assert "answer number 19" in transcript and "question number 14" in transcript
    assert "question number 13" not in transcript  # history_turns=6 → the last 6 exchanges only
    assert "tool output" not in transcript
    assert rig.search.calls == [["a", "b", "c", "d"]]  # at most four queries
    long = [{"role": "user", "content": "word " * 2000}, {"role": "user", "content": "short"}]
    cut, short = bounded_history(long, max_turns=6)  # the older turn cut to what is left, not dropped
    assert short == {"role": "user", "content": "short"} and "cut here" in cut["content"]
    assert len(cut["content"]) // 4 + 4 <= HISTORY_TOKEN_BUDGET // 2


async def test_a_long_answer_is_cut_in_the_history_not_the_whole_history_dropped(rig, openai_fake) -> None:
    """The history is bounded by a budget, filled newest first, and a turn that did not fit ended it: after one
    long answer (a 9,000-character how-to) the window was empty, so the follow-up was neither rewritten nor
    answered with the conversation. A turn takes at most half the budget, cut in its middle and marked."""
    long_answer = "Team costs $12 per user per month [1]. " + "Set up each seat as shown. " * 330 + "Want the yearly price?"
    history = [{"role": "user", "content": "How much is the Team plan?"}, {"role": "assistant", "content": long_answer}]
    openai_fake.script("primary", Turn(text=json.dumps({"queries": REWRITES})),
                       Turn(text="Team costs $120 per user per year [2]."))

    await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=history))

    rewrite_request, answer_request = openai_fake.requests_for("primary")
    assert rig.search.calls == [REWRITES]
    transcript = rewrite_request.messages[-1]["content"]
    assert "user: How much is the Team plan?" in transcript and "assistant: Team costs $12 per user" in transcript
    assert "Want the yearly price?" in transcript and "cut here" in transcript and len(transcript) < 7000
    said = [m for m in answer_request.messages if m["role"] in ("user", "assistant")]
    assert [m["role"] for m in said] == ["user", "assistant", "user"] and "cut here" in said[1]["content"]
    assert said[1]["content"].startswith("Team costs $12") and said[1]["content"].endswith("Want the yearly price?")


async def test_rewrite_offline_model_uses_heuristic_without_model_call(openai_fake) -> None:
    from tests.pipeline.conftest import make_rig

    rig = make_rig(openai_fake, bots=[{"name": "acme", "model": "offline", "fallbacks": []}])

    await rig.pipeline.handle(rig.turn(FOLLOW_UP, history=HISTORY))

    assert rig.search.calls == [[FOLLOW_UP, f"How much is the Team plan? {FOLLOW_UP}"]]
    assert openai_fake.requests == []


@pytest.mark.parametrize(("text", "follow_up"), [
    ("and on a yearly plan?", True), ("What about Team?", True), ("Is it free?", True), ("Team plan?", True),
    ("How much?", True), ("Which one is cheaper?", True),
    ("How often does sync run?", False), ("Can I get a refund?", False), ("How do I turn on 2FA?", False),
])
def test_offline_heuristic_prepends_the_previous_question_only_to_a_follow_up(text, follow_up) -> None:
    """A short question complete in itself used to get the previous question prepended, and that query
    won the fusion: "How often does sync run?" after "How do I turn on 2FA?" was answered about 2FA steps."""
    from gateway.pipeline.rewrite import _heuristic

    queries = _heuristic(HISTORY, text)
    assert queries == ([text, f"How much is the Team plan? {text}"] if follow_up else [text])


def test_offline_heuristic_searches_a_cut_previous_question_without_the_cut_marker() -> None:
    """A long previous question is cut in the window (`bounded_history`); the marker's words ("cut here", "the
    whole was … characters") are the window's, not the customer's, and went into the search with it."""
    from gateway.pipeline.rewrite import _heuristic, bounded_history

    pasted = "My sync fails with E-SYNC-409 " + "and the log says retrying " * 400 + "what now?"
    window = bounded_history([{"role": "user", "content": pasted}, {"role": "assistant", "content": "Try again."}],
                             max_turns=3)
    assert "cut here" in window[0]["content"]  # what the heuristic is given
    queries = _heuristic(window, "and then?")
    assert queries[1].startswith("My sync fails with E-SYNC-409") and queries[1].endswith("what now? and then?")
    assert "cut here" not in queries[1] and "characters" not in queries[1]
