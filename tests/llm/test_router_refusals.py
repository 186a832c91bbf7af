"""A provider refusing a model's setup itself (its key, its name, its account's credit) rather than one
request: not retried, an error for the operator, and named (`LLMRouter.refused`, /readyz) until it answers."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from gateway.llm import LLMRouter
from tests.fakes.openai_server import FakeOpenAI, Turn
from tests.llm.conftest import fake_model
from tests.llm.test_router import FAST_RETRY, MESSAGES

NO_QUOTA = "You exceeded your current quota, please check your plan and billing details."


@pytest.mark.parametrize("refusal", [Turn(status=401), Turn(status=403), Turn(status=429, retry_after=0, error=NO_QUOTA),
                                     Turn(status=400, error="Your credit balance is too low to access the API.")],
                         ids=["bad-key", "forbidden-key", "openai-quota", "anthropic-credit"])
async def test_a_refused_setup_goes_to_the_fallback_at_once_and_is_named(openai_fake: FakeOpenAI, refusal) -> None:
    """An account out of credit (OpenAI's 429 insufficient_quota) was retried and cooled down for as a rate
    limit, one warning each time, while every message went to the fallback (review). A key the provider
    forbids (403, which LiteLLM raises for an OpenAI-compatible endpoint as a bare `APIError`, not its
    `PermissionDeniedError`) was named nowhere, unlike a 401."""
    openai_fake.script("primary", refusal, Turn(text="Retried [1]."))
    openai_fake.script("backup", Turn(text="Backup [1]."), Turn(text="Backup again [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], retry=FAST_RETRY, cooldown=30)

    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "backup" and len(openai_fake.requests_for("primary")) == 1
    assert [e["log_level"] for e in logs if e["event"] == "llm.setup_refused"] == ["error"]
    assert router.refused["primary"].startswith("error: ")
    again = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)
    assert again.model_used == "primary" and router.refused == {}  # no cooldown: fixed, it answers at once
