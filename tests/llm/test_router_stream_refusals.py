"""A stream a provider ends with an error event refusing the request (`invalid_request_error`) or the model's
key (`authentication_error`): not retried, as the same refusal unstreamed (a 400, a 401) is not, since asked
again it fails the same way. A bad request goes to the fallback; a refused key is also `llm.setup_refused`
and named under `models`. The events are the bytes OpenAI and Anthropic send, through the real LiteLLM."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from gateway.llm import LLMRouter
from tests.fakes.openai_server import FakeOpenAI, Turn
from tests.fakes.provider_streams import FakeProviders, Reply, anthropic_message, anthropic_stream
from tests.llm.conftest import fake_model
from tests.llm.test_router import FAST_RETRY, MESSAGES, Collector

OPENAI_EVENTS = [
    ({"message": "Invalid 'messages[1].content': string too long.", "type": "invalid_request_error",
      "param": "messages", "code": "string_above_max_length"}, "bad request"),
    ({"message": "Incorrect API key provided: sk-fake.", "type": "invalid_request_error", "param": None,
      "code": "invalid_api_key"}, "auth"),
    ({"message": "Invalid authentication.", "type": "authentication_error", "param": None, "code": None}, "auth"),
]


def _assert_refused(logs: list[dict], router: LLMRouter, name: str, failure: str) -> None:
    [failed] = [e for e in logs if e["event"] == "llm.call_failed" and e["model"] == name]
    assert (failed["failure"], failed["retryable"]) == (failure, False)
    assert router.calls.report()[name]["last_failure"]["failure"] == failure
    refused = [e for e in logs if e["event"] == "llm.setup_refused"]
    if failure == "auth":  # as a 401 unstreamed: an error for the operator, and named under /readyz's `models`
        assert [e["model"] for e in refused] == [name] and router.refused[name].startswith("error: ")
    else:  # one request refused, not the model's setup
        assert refused == [] and router.refused == {}


@pytest.mark.parametrize(("event", "failure"), OPENAI_EVENTS, ids=["invalid-request", "invalid-api-key", "auth"])
async def test_an_openai_error_event_refusing_the_request_goes_to_the_fallback_untried(
        openai_fake: FakeOpenAI, event, failure) -> None:
    """`data: {"error": {"type": "invalid_request_error", …}}` was "stream broken", retried on the same
    model (which refused it the same way) and cooled down for (review)."""
    openai_fake.script("primary", Turn(text="Refunds take five days.", break_after=0, stream_error=event),
                       Turn(text="Retried [1]."))
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], retry=FAST_RETRY, cooldown=30)

    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=Collector())

    assert result.model_used == "backup" and len(openai_fake.requests_for("primary")) == 1
    _assert_refused(logs, router, "primary", failure)
    assert [e for e in logs if e["event"] == "llm.cooling_down"] == []


ANTHROPIC_EVENTS = [("invalid_request_error", "messages: text content blocks must be non-empty", "bad request"),
                    ("authentication_error", "invalid x-api-key", "auth"),
                    ("permission_error", "Your API key does not have permission to use the specified resource.",
                     "auth")]


@pytest.mark.parametrize(("kind", "message", "failure"), ANTHROPIC_EVENTS, ids=[k for k, _, _ in ANTHROPIC_EVENTS])
async def test_an_anthropic_error_event_refusing_the_request_goes_to_the_fallback_untried(
        provider_fake: FakeProviders, kind, message, failure) -> None:
    """`event: error` with `invalid_request_error` or `authentication_error` was "stream broken" and retried
    (review): LiteLLM raises it as a 500 and keeps only its message."""
    provider_fake.script("claude", Reply(body=anthropic_stream("Refunds take", error=kind, message=message)),
                         anthropic_message("Retried [1]."))
    provider_fake.script("claude-b", anthropic_message("Backup [1]."))
    router = LLMRouter([{"model_name": name, "litellm_params": {
        "model": f"anthropic/{name}", "api_base": provider_fake.base_url, "api_key": "sk-ant-fake"}}
        for name in ("claude", "claude-b")], retry=FAST_RETRY)

    with capture_logs() as logs:
        result = await router.complete(model="claude", fallbacks=["claude-b"], messages=MESSAGES, on_token=Collector())

    assert result.model_used == "claude-b" and provider_fake.requests_for("claude") == ["/v1/messages"]
    _assert_refused(logs, router, "claude", failure)
