"""LLMRouter streaming: tokens as they come, a broken or empty stream retried or failed over (unstreamed
once a token was shown), and a filtered reply taken as an answer."""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import FakeOpenAI, ToolCallSpec, Turn
from tests.llm.test_router import MESSAGES, Collector, make_router


async def test_stream_emits_tokens_in_order(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="Refunds take five days [1].", usage=(30, 6)))
    router = make_router(openai_fake, "primary")
    seen = Collector()

    result = await router.complete(model="primary", messages=MESSAGES, on_token=seen)

    assert seen.tokens == ["Refunds", " take", " five", " days", " [1]."]
    assert result.text == "Refunds take five days [1]." and result.finish_reason == "stop"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (30, 6)
    assert openai_fake.requests_for("primary")[0].stream


async def test_stream_collects_tool_calls(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("escalate_to_human", {"reason": "angry"}, id="t1"),)))
    router = make_router(openai_fake, "primary")
    seen = Collector()

    result = await router.complete(model="primary", messages=MESSAGES, on_token=seen)

    assert seen.tokens == []
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("escalate_to_human", '{"reason": "angry"}')]
    assert result.finish_reason == "tool_calls"


async def test_parallel_calls_streamed_under_one_index_stay_apart(openai_fake: FakeOpenAI) -> None:
    """Ollama streams every call of a parallel batch under index 0: the two lookups were merged into one
    call of "invoice_statusinvoice_status" with the arguments '{…}{…}', an unknown tool (review)."""
    openai_fake.script("primary", Turn(tool_calls=(
        ToolCallSpec("invoice_status", {"invoice_number": "INV-1"}, id="a", stream_index=0),
        ToolCallSpec("invoice_status", {"invoice_number": "INV-2"}, id="b", stream_index=0))))
    router = make_router(openai_fake, "primary")

    result = await router.complete(model="primary", messages=MESSAGES, on_token=Collector())

    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("a", "invoice_status", '{"invoice_number": "INV-1"}'), ("b", "invoice_status", '{"invoice_number": "INV-2"}')]


async def test_a_stream_gone_silent_past_the_timeout_goes_to_the_fallback_as_a_timeout_does(openai_fake) -> None:
    """Headers and a first chunk, then nothing (a reasoning model thinking): each retry waited out the whole
    timeout again before the fallback was asked, where a timeout before the first byte goes to it at once."""
    openai_fake.script("primary", Turn(text="Late [1].", stall=3), Turn(text="Late [1].", stall=3))
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = make_router(openai_fake, "primary", "backup", timeout=0.5)
    cut: list = []

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=Collector(),
                                   on_abandoned=cut.append)

    assert result.model_used == "backup" and len(openai_fake.requests_for("primary")) == 1
    assert [c.model_used for c in cut] == ["primary"]  # its prompt was billed: reported as a timeout's is


async def test_stream_retries_before_first_token(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=503), Turn(text="a b", break_after=0))
    openai_fake.script("backup", Turn(text="Backup streams [1]."))
    router = make_router(openai_fake, "primary", "backup")
    seen = Collector()

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=seen)

    # Both primary failures happened before any token, so falling back is still safe.
    assert result.model_used == "backup"
    assert "".join(seen.tokens) == "Backup streams [1]."


async def test_stream_broken_after_tokens_is_retried_unstreamed(openai_fake: FakeOpenAI) -> None:
    """The final reply replaces the partial on every surface, so a retry may answer; its tokens must not
    follow the broken ones."""
    openai_fake.script("primary", Turn(text="one two three four five", break_after=2), Turn(text="whole answer [1]."))
    router = make_router(openai_fake, "primary", "backup")
    seen = Collector()

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=seen)

    assert seen.tokens == ["one", " two"] and result.text == "whole answer [1]." and result.model_used == "primary"
    assert [r.stream for r in openai_fake.requests_for("primary")] == [True, False]


async def test_stream_broken_after_tokens_falls_back_when_retries_fail(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="one two three", break_after=1), Turn(status=503))
    openai_fake.script("backup", Turn(text="Backup answer [1]."))
    router = make_router(openai_fake, "primary", "backup")
    seen = Collector()

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=seen)

    assert seen.tokens == ["one"] and result.model_used == "backup" and result.text == "Backup answer [1]."


async def test_stream_without_finish_reason_is_a_failure(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="cut short", omit_finish_reason=True), Turn(status=503))
    openai_fake.script("backup", Turn(text="Backup answer [1]."))
    router = make_router(openai_fake, "primary", "backup")
    seen = Collector()

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=seen)

    # A stream cut short is no answer, though every token arrived: the next attempt answers, unstreamed.
    assert seen.tokens == ["cut", " short"] and result.text == "Backup answer [1]."
    assert [r.stream for r in openai_fake.requests_for("backup")] == [False]


@pytest.mark.parametrize("finish", ["content_filter", "length"])
@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "plain"])
async def test_a_content_filtered_reply_is_an_answer_not_an_outage(openai_fake: FakeOpenAI, streamed, finish) -> None:
    """One customer's words tripping the provider's filter retried, fell back, and cooled every model
    down for every bot (review); so did a reasoning model that spent `max_tokens` before any text, paid
    for on every retry of the same request."""
    openai_fake.script("primary", Turn(text=None, finish_reason=finish), Turn(text="Primary answer [1]."))
    openai_fake.script("backup", Turn(text="Backup answer [1]."))
    router = make_router(openai_fake, "primary", "backup")

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES,
                                   on_token=Collector() if streamed else None)

    assert result.text == "" and result.finish_reason == finish and result.model_used == "primary"
    assert len(openai_fake.requests_for("primary")) == 1 and openai_fake.requests_for("backup") == []
    again = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)
    assert again.model_used == "primary" and openai_fake.requests_for("backup") == []  # not cooling down


async def test_stream_callback_error_propagates_unretried(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="hello there"))
    router = make_router(openai_fake, "primary", "backup")

    async def gone(token: str) -> None:
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=gone)
    assert openai_fake.requests_for("backup") == []


@pytest.mark.parametrize("body", ["<html><body><h1>502 Bad Gateway</h1></body></html>", ""])
async def test_a_stream_that_is_not_a_stream_fails_over_instead_of_answering_nothing(openai_fake, body) -> None:
    # LiteLLM turns a 200 whose body is no event stream into an empty answer with a made-up
    # finish_reason; the customer got the fallback text and the backup model was never asked.
    openai_fake.script("primary", *[Turn(raw_body=body)] * 2)
    openai_fake.script("backup", Turn(text="Refunds take 5 days [1]."))
    router = make_router(openai_fake, "primary", "backup")
    seen = Collector()

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=seen)

    assert result.model_used == "backup" and result.text == "Refunds take 5 days [1]."
    assert "".join(seen.tokens) == result.text
    assert len(openai_fake.requests_for("primary")) == 2  # retried once, then the fallback
