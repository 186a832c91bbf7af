"""A stream a provider ends with an error event: the failure is named by what the event says (`rate
limited`, `overloaded`, `server error`), as LiteLLM raises most of them as a broken connection, and retried
as the same failure unstreamed is; and a `gemini/` stream refused with a status, classified by it. The events
and answers are the bytes OpenAI, Anthropic and Google AI Studio send, through the real LiteLLM."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from gateway.llm import LLMRouter
from gateway.llm_retry import RetryPolicy
from tests.fakes.openai_server import FakeOpenAI, Turn
from tests.fakes.provider_streams import (
    GEMINI_RATE_LIMITED,
    FakeProviders,
    Reply,
    anthropic_message,
    anthropic_stream,
    gemini_answer,
    gemini_stream,
)
from tests.llm.conftest import fake_model
from tests.llm.test_router import FAST_RETRY, MESSAGES, Collector

OPENAI_SERVER_ERROR = {"message": "The server had an error while processing your request. Sorry about that!",
                       "type": "server_error", "param": None, "code": None}
OPENAI_OVERLOADED = {"message": "That model is currently overloaded with other requests. You can retry your request.",
                     "type": "server_error", "param": None, "code": None}
OPENAI_RATE_LIMITED = {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}


@pytest.mark.parametrize(("event", "failure"), [
    (OPENAI_SERVER_ERROR, "server error"), (OPENAI_OVERLOADED, "overloaded"), (OPENAI_RATE_LIMITED, "rate limited"),
], ids=["server-error", "overloaded", "rate-limited"])
async def test_an_openai_error_event_is_named_by_what_it_says_and_retried(openai_fake: FakeOpenAI, event,
                                                                            failure) -> None:
    """`data: {"error": {"type": "server_error", …}}` mid-stream came out of LiteLLM as an APIConnectionError,
    logged as "stream broken", as if the network had dropped it (review)."""
    openai_fake.script("primary", *[Turn(text="Refunds take five days.", break_after=0, stream_error=event)] * 2)
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], retry=FAST_RETRY)

    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=Collector())

    assert result.model_used == "backup"
    failed = [e for e in logs if e["event"] == "llm.call_failed"]
    assert [(e["failure"], e["retryable"]) for e in failed] == [(failure, True)] * 2
    assert router.calls.report()["primary"]["last_failure"]["failure"] == failure


ANTHROPIC_EVENTS = [("overloaded_error", "Overloaded", "overloaded"),
                    ("api_error", "Internal server error", "server error"),
                    ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
                     "rate limited")]


@pytest.mark.parametrize(("kind", "message", "failure"), ANTHROPIC_EVENTS, ids=[k for k, _, _ in ANTHROPIC_EVENTS])
async def test_an_anthropic_error_event_is_named_by_what_it_says_and_retried(provider_fake: FakeProviders, kind,
                                                                               message, failure) -> None:
    """`event: error` with `overloaded_error` (Anthropic's busy hours) was logged as "stream broken" (review)."""
    provider_fake.script("claude", Reply(body=anthropic_stream("Refunds take", error=kind, message=message)),
                         anthropic_message("Refunds take five days [1]."))
    router = LLMRouter([{"model_name": "claude", "litellm_params": {
        "model": "anthropic/claude", "api_base": provider_fake.base_url, "api_key": "sk-ant-fake"}}], retry=FAST_RETRY)
    seen = Collector()

    with capture_logs() as logs:
        result = await router.complete(model="claude", messages=MESSAGES, on_token=seen)

    assert result.text == "Refunds take five days [1]." and seen.tokens == ["Refunds take"]  # retried unstreamed
    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]
    assert failed["failure"] == failure and failed["retryable"] is True
    assert provider_fake.requests_for("claude") == ["/v1/messages"] * 2


def _gemini_error(status: int, kind: str) -> Reply:
    """Google AI Studio's answer to a request it refuses, as it is sent to a stream's request too."""
    return Reply(status=status, body=json.dumps({"error": {"code": status, "message": "refused", "status": kind}}),
                 content_type="application/json")


@pytest.mark.parametrize(("reply", "failure", "retried"), [
    (Reply(status=429, body=GEMINI_RATE_LIMITED, content_type="application/json"), "HTTP 429", True),
    (_gemini_error(503, "UNAVAILABLE"), "HTTP 503", True), (_gemini_error(500, "INTERNAL"), "HTTP 500", True),
    (_gemini_error(400, "INVALID_ARGUMENT"), "HTTP 400", False),
], ids=["429", "503", "500", "400"])
async def test_a_gemini_stream_refused_is_classified_by_its_status_not_as_a_client_fault(
        provider_fake: FakeProviders, reply, failure, retried) -> None:
    """LiteLLM raises a `gemini/` model's streamed 429 as its own `VertexAIError`, which was logged as
    `llm.client_fault` (a bug of ours, with a traceback) and retried whatever its status, a 400 included
    (review): it is the provider's answer, retried or not by its status as the same answer unstreamed is."""
    provider_fake.script("gemini-x", reply, Reply(body=gemini_stream("Refunds take five days [1].")))
    provider_fake.script("gemini-y", Reply(body=gemini_stream("Backup [1].")))
    router = LLMRouter([{"model_name": name, "litellm_params": {
        "model": f"gemini/{name}", "api_base": provider_fake.gemini_base, "api_key": "g-fake"}}
        for name in ("gemini-x", "gemini-y")], retry=FAST_RETRY)

    with capture_logs() as logs:
        result = await router.complete(model="gemini-x", fallbacks=["gemini-y"], messages=MESSAGES, on_token=Collector())

    assert [e for e in logs if e["event"] == "llm.client_fault"] == []
    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]
    assert (failed["failure"], failed["retryable"]) == (failure, retried)
    assert result.model_used == ("gemini-x" if retried else "gemini-y")
    assert provider_fake.requests_for("gemini-x")[0] == "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"


GEMINI_EVENTS = [((503, "UNAVAILABLE", "The model is overloaded. Please try again later."), "overloaded"),
                 ((500, "INTERNAL", "An internal error has occurred. Please retry or report in"), "server error"),
                 ((429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."), "rate limited")]


@pytest.mark.parametrize(("error", "failure"), GEMINI_EVENTS, ids=[e[1] for e, _ in GEMINI_EVENTS])
async def test_a_gemini_error_chunk_is_named_by_what_it_says(provider_fake: FakeProviders, error, failure) -> None:
    """Google AI Studio's `{"error": {"status": "INTERNAL", …}}` ending a stream was "stream broken" (review)."""
    provider_fake.script("gemini-x", Reply(body=gemini_stream("Refunds take", error=error)))
    provider_fake.script("gemini-y", gemini_answer("Backup [1]."))  # unstreamed: tokens were shown
    router = LLMRouter([{"model_name": name, "litellm_params": {
        "model": f"gemini/{name}", "api_base": provider_fake.gemini_base, "api_key": "g-fake"}}
        for name in ("gemini-x", "gemini-y")], retry=RetryPolicy(num_retries=0))

    with capture_logs() as logs:
        result = await router.complete(model="gemini-x", fallbacks=["gemini-y"], messages=MESSAGES, on_token=Collector())

    assert result.model_used == "gemini-y"
    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]
    assert (failed["failure"], failed["retryable"]) == (failure, True)
