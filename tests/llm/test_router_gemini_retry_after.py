"""Google AI Studio says when to try again: a `Retry-After` header, or its body's `RetryInfo` (`"retryDelay":
"7s"`). Both are honoured as an OpenAI-compatible endpoint's Retry-After is: waited (up to the backoff cap),
or past the cap the fallback at once. Through the real LiteLLM against a local fake of Gemini's endpoint."""

from __future__ import annotations

import json
import time

import pytest
from structlog.testing import capture_logs

from gateway.llm import LLMRouter
from gateway.llm_retry import RetryPolicy
from tests.fakes.provider_streams import FakeProviders, Reply, gemini_answer, gemini_stream
from tests.llm.test_router import MESSAGES, Collector


def _rate_limited(*, retry_delay: str | None = None, retry_after: str | None = None) -> Reply:
    """Google AI Studio's 429, with the RetryInfo detail it adds to a quota's refusal."""
    details = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]}]
    if retry_delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay})
    body = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                      "status": "RESOURCE_EXHAUSTED", "details": details}}
    return Reply(status=429, body=json.dumps(body), content_type="application/json",
                 headers={"Retry-After": retry_after} if retry_after is not None else {})


def _router(fake: FakeProviders, *, cap: float) -> LLMRouter:
    return LLMRouter([{"model_name": name, "litellm_params": {
        "model": f"gemini/{name}", "api_base": fake.gemini_base, "api_key": "g-fake"}}
        for name in ("gemini-x", "gemini-y")], retry=RetryPolicy(num_retries=1, backoff_base=0.01, backoff_max=cap))


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("refusal", [_rate_limited(retry_after="30"), _rate_limited(retry_delay="30s")],
                         ids=["retry-after", "retry-delay"])
async def test_a_gemini_wait_past_the_cap_goes_to_the_fallback_at_once(provider_fake: FakeProviders, refusal,
                                                                       streamed) -> None:
    """LiteLLM raises a `gemini/` refusal as its `VertexAIError` (or a RateLimitError over it) with the
    answer's headers in `.headers`, which were not read, nor was the body's `retryDelay`: "wait 30 s" was
    retried at once, refused again, and the customer waited for it before the fallback (review)."""
    answer = Reply(body=gemini_stream("Retried too soon [1].")) if streamed else gemini_answer("Retried too soon [1].")
    provider_fake.script("gemini-x", refusal, answer)
    provider_fake.script("gemini-y", Reply(body=gemini_stream("Backup [1].")) if streamed else gemini_answer("Backup [1]."))

    result = await _router(provider_fake, cap=5.0).complete(
        model="gemini-x", fallbacks=["gemini-y"], messages=MESSAGES, on_token=Collector() if streamed else None)

    assert result.model_used == "gemini-y" and len(provider_fake.requests_for("gemini-x")) == 1


@pytest.mark.parametrize("refusal", [_rate_limited(retry_after="1"), _rate_limited(retry_delay="1.000s")],
                         ids=["retry-after", "retry-delay"])
async def test_a_gemini_wait_within_the_cap_is_waited_before_the_retry(provider_fake: FakeProviders, refusal) -> None:
    provider_fake.script("gemini-x", refusal, Reply(body=gemini_stream("Waited [1].")))

    started = time.monotonic()
    result = await _router(provider_fake, cap=5.0).complete(model="gemini-x", messages=MESSAGES, on_token=Collector())

    assert result.model_used == "gemini-x" and len(provider_fake.requests_for("gemini-x")) == 2
    assert time.monotonic() - started >= 1.0  # not the 10 ms backoff: the provider's second


GEMINI_QUOTA = ("You exceeded your current quota, please check your plan and billing details. For more information on "
                "this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.")


def _quota_refused(*, retry_delay: str | None) -> Reply:
    """Google AI Studio's 429 for a quota: per minute it says when to retry (RetryInfo), per day it does not."""
    details = [{"@type": "type.googleapis.com/google.rpc.Help", "links": [{
        "description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]}]
    if retry_delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay})
    return Reply(status=429, content_type="application/json", body=json.dumps(
        {"error": {"code": 429, "message": GEMINI_QUOTA, "status": "RESOURCE_EXHAUSTED", "details": details}}))


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_a_gemini_quota_that_says_when_to_retry_is_a_rate_limit_not_no_credit(provider_fake: FakeProviders,
                                                                                      streamed) -> None:
    """Gemini's per-minute quota says "You exceeded your current quota, please check your plan and billing
    details", OpenAI's words for an account without credit: it was `llm.setup_refused` "no credit", never
    retried, though its RetryInfo said to try again in a second (review). Its daily quota, which says no
    such thing, is still no credit."""
    answer = Reply(body=gemini_stream("Waited [1].")) if streamed else gemini_answer("Waited [1].")
    provider_fake.script("gemini-x", _quota_refused(retry_delay="0.2s"), answer, _quota_refused(retry_delay=None))
    provider_fake.script("gemini-y", answer)
    router = _router(provider_fake, cap=5.0)
    ask = {"model": "gemini-x", "fallbacks": ["gemini-y"], "messages": MESSAGES,
           "on_token": Collector() if streamed else None}

    with capture_logs() as logs:
        result = await router.complete(**ask)
    assert result.model_used == "gemini-x" and len(provider_fake.requests_for("gemini-x")) == 2
    assert [e["failure"] for e in logs if e["event"] == "llm.call_failed"] == ["HTTP 429"]
    assert [e for e in logs if e["event"] == "llm.setup_refused"] == [] and router.refused == {}

    with capture_logs() as logs:
        daily = await router.complete(**ask)
    assert daily.model_used == "gemini-y" and len(provider_fake.requests_for("gemini-x")) == 3
    assert [e["failure"] for e in logs if e["event"] == "llm.call_failed"] == ["no credit (HTTP 429)"]
