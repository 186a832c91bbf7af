"""LLMRouter against the real LiteLLM talking to a local scripted OpenAI-compatible fake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.errors import LLMError
from gateway.llm import LLMRouter
from gateway.llm_retry import RetryPolicy
from tests.fakes.openai_server import FakeOpenAI, ToolCallSpec, Turn
from tests.llm.conftest import fake_model

MESSAGES = [{"role": "system", "content": "Answer from the extracts."}, {"role": "user", "content": "How do refunds work?"}]
FAST_RETRY = RetryPolicy(num_retries=1, backoff_base=0.01, backoff_max=0.05)


def make_router(fake: FakeOpenAI, *names: str, timeout: float = 5.0, **params) -> LLMRouter:
    return LLMRouter([fake_model(fake, n, **params) for n in names], timeout=timeout, retry=FAST_RETRY)


class Collector:
    """An on_token callback that remembers what the customer saw."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    async def __call__(self, token: str) -> None:
        self.tokens.append(token)


async def test_complete_returns_text_usage_and_sends_messages(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="Refunds take 5 days [1].", usage=(40, 9)))
    router = make_router(openai_fake, "primary")

    result = await router.complete(model="primary", messages=MESSAGES, metadata={"conversation_id": "c-1"})

    assert result.text == "Refunds take 5 days [1]."
    assert result.model_used == "primary"
    assert result.finish_reason == "stop"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (40, 9)
    # The fake model has no price anywhere, so the cost is unknown and the usage partial.
    assert result.usage.cost_usd is None and result.usage.partial
    [request] = openai_fake.requests_for("primary")
    assert request.messages == MESSAGES
    assert request.headers["authorization"] == "Bearer sk-fake"
    assert "metadata" not in request.body  # ours, for logging and callbacks; never sent to the provider


async def test_complete_prices_usage_from_litellm_params(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("priced", Turn(text="ok [1]", usage=(1000, 100)))
    router = make_router(openai_fake, "priced", input_cost_per_token=1e-6, output_cost_per_token=2e-6)

    result = await router.complete(model="priced", messages=MESSAGES)

    assert result.usage.cost_usd == pytest.approx(1000 * 1e-6 + 100 * 2e-6)
    assert not result.usage.partial


async def test_complete_returns_tool_calls(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("invoice_status", {"number": "INV-7"}, id="c1"),)))
    router = make_router(openai_fake, "primary")
    tools = [{"type": "function", "function": {"name": "invoice_status", "parameters": {"type": "object"}}}]

    result = await router.complete(model="primary", messages=MESSAGES, tools=tools, tool_choice="auto")

    assert result.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [("c1", "invoice_status", '{"number": "INV-7"}')]
    sent = openai_fake.requests_for("primary")[0].body
    assert sent["tools"][0]["function"]["name"] == "invoice_status" and sent["tool_choice"] == "auto"


async def test_complete_retries_429_then_falls_back(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=429, retry_after=0), Turn(status=429, retry_after=0))
    openai_fake.script("backup", Turn(text="From the backup [1]."))
    router = make_router(openai_fake, "primary", "backup")

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.text == "From the backup [1]." and result.model_used == "backup"
    assert len(openai_fake.requests_for("primary")) == 2  # one try plus one retry, then the fallback


async def test_a_retry_after_past_the_backoff_cap_goes_to_the_fallback_at_once(openai_fake: FakeOpenAI) -> None:
    """"Retry-After: 30" was retried at the cap (8 s by default), refused again, and the customer waited
    16 s before the fallback was asked (review)."""
    openai_fake.script("primary", Turn(status=429, retry_after=30), Turn(text="Retried too soon [1]."))
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = make_router(openai_fake, "primary", "backup")

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "backup" and len(openai_fake.requests_for("primary")) == 1


async def test_complete_retry_on_500_recovers_on_same_model(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=500), Turn(text="Second time lucky [1]."))
    router = make_router(openai_fake, "primary", "backup")

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "primary" and result.text == "Second time lucky [1]."
    assert openai_fake.requests_for("backup") == []


@pytest.mark.parametrize("status", [520, 524, 529])
async def test_a_5xx_litellm_has_no_class_for_is_retried_as_any_5xx(openai_fake: FakeOpenAI, status) -> None:
    """A 529 "overloaded" or a proxy's 520–524 from an OpenAI-compatible endpoint came out of LiteLLM as a bare
    APIError: taken as the provider's no, never retried and never cooling the model down (review)."""
    openai_fake.script("primary", Turn(status=status), Turn(text="Second try [1]."))
    router = make_router(openai_fake, "primary", "backup")

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "primary" and result.text == "Second try [1]."


async def test_complete_falls_back_on_persistent_500(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=500), Turn(status=503))
    openai_fake.script("backup", Turn(text="Backup answer [1]."))
    router = make_router(openai_fake, "primary", "backup")

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "backup"
    assert len(openai_fake.requests_for("primary")) == 2


async def test_failed_calls_are_counted_for_an_outage_alert(openai_fake: FakeOpenAI) -> None:
    # Without it an outage showed only as the offline model's tokens going up.
    from gateway.observability.metrics import Metrics

    metrics = Metrics()
    openai_fake.script("primary", Turn(status=500), Turn(status=503))
    openai_fake.script("backup", Turn(text="Backup answer [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], timeout=5, retry=FAST_RETRY,
                       metrics=metrics)
    await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)
    assert metrics.llm_failures.labels(model="primary", retryable="true")._value.get() == 2
    assert metrics.llm_failures.labels(model="backup", retryable="true")._value.get() == 0


async def test_complete_falls_back_on_timeout(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="too late", delay=3), Turn(text="too late", delay=3))
    openai_fake.script("backup", Turn(text="In time [1]."))
    router = make_router(openai_fake, "primary", "backup", timeout=0.3)

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "backup" and result.text == "In time [1]."


async def test_a_model_that_timed_out_is_not_retried_while_a_fallback_is_left(openai_fake: FakeOpenAI) -> None:
    """Each retry of a hanging model waited out its timeout again: 3 × 60 s by default, the whole turn's
    deadline (180 s), so the fallback was never asked and every message ended with the failure reply."""
    openai_fake.script("primary", *[Turn(text="too late", delay=3)] * 3)
    openai_fake.script("backup", Turn(text="In time [1]."), Turn(text="Again in time [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], timeout=0.3,
                       retry=RetryPolicy(num_retries=2, backoff_base=0.01, backoff_max=0.05), cooldown=60)

    first = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)
    second = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert (first.model_used, second.model_used) == ("backup", "backup")
    assert len(openai_fake.requests_for("primary")) == 1  # one timeout, then the fallback; cooling down after it


async def test_the_last_model_of_a_chain_is_retried_after_a_timeout(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="too late", delay=3), Turn(text="In time [1]."))
    router = make_router(openai_fake, "primary", timeout=0.3)

    result = await router.complete(model="primary", messages=MESSAGES)

    assert result.text == "In time [1]." and len(openai_fake.requests_for("primary")) == 2


async def test_complete_skips_retries_on_auth_error(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=401), Turn(text="never reached"))
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = make_router(openai_fake, "primary", "backup")

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "backup"
    assert len(openai_fake.requests_for("primary")) == 1  # a bad key does not get better by retrying


async def test_a_model_without_its_key_goes_to_the_next_at_once(openai_fake: FakeOpenAI, monkeypatch) -> None:
    """No key at all: LiteLLM raises it as an InternalServerError ("Missing credentials"), which was retried
    as a provider outage on every message; start also names the model (llm.key_missing)."""
    from gateway.preflight import models_missing_keys
    from gateway.settings import Settings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai_fake.script("backup", Turn(text="Backup [1]."))
    keyless = {"model_name": "primary", "litellm_params": {"model": "openai/primary", "api_base": openai_fake.base_url}}
    router = LLMRouter([keyless, fake_model(openai_fake, "backup")], timeout=5, retry=FAST_RETRY)
    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)
    assert result.model_used == "backup"
    assert [e["retryable"] for e in logs if e["event"] == "llm.call_failed"] == [False]
    warnings = models_missing_keys(Settings(models=[keyless, fake_model(openai_fake, "backup")]))
    assert warnings == ["model 'primary' (openai/primary) has no OPENAI_API_KEY: set it in the environment (or the "
                        "model's litellm_params), or every call to it fails"]


def test_a_key_from_an_unset_variable_is_named_at_start(monkeypatch) -> None:
    """README's `api_key: "${ANTHROPIC_API_KEY}"` with the variable unset reads as "": LiteLLM's check took
    that for a key, so start named nothing while every call to the model failed for want of one."""
    from gateway.preflight import models_missing_keys
    from gateway.settings import Settings

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    backup = {"model_name": "backup", "litellm_params": {"model": "anthropic/claude-3-5-haiku-latest",
                                                          "api_key": ""}}  # what the unset ${VAR} became
    assert models_missing_keys(Settings(models=[backup])) == [
        "model 'backup' (anthropic/claude-3-5-haiku-latest) has no ANTHROPIC_API_KEY: set it in the environment "
        "(or the model's litellm_params), or every call to it fails"]


async def test_a_fault_inside_litellm_is_logged_and_retried(
    openai_fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LiteLLM 1.110 now and then raises a bare LookupError from its own context-variable bookkeeping
    # (seen once in CI). It cannot be provoked on purpose, so the first call raises it here.
    openai_fake.script("primary", Turn(text="Answered on the retry [1]."))
    router = make_router(openai_fake, "primary")
    real_acompletion = router._router.acompletion
    calls = 0

    async def faulty_once(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise LookupError("<ContextVar name='service_target' default=None>")
        return await real_acompletion(**kwargs)

    monkeypatch.setattr(router._router, "acompletion", faulty_once)

    with capture_logs() as logs:
        result = await router.complete(model="primary", messages=MESSAGES)

    assert result.text == "Answered on the retry [1]." and calls == 2
    faults = [entry for entry in logs if entry["event"] == "llm.client_fault"]
    assert len(faults) == 1 and isinstance(faults[0]["exc_info"], LookupError)


async def test_an_answer_with_no_choices_is_the_providers_failure_retried_then_fallen_back(openai_fake: FakeOpenAI) -> None:
    """A 200 with `"choices": []` was an IndexError logged as `llm.client_fault` with a traceback, as if
    it were a bug of ours."""
    empty = Turn(raw_body='{"id": "x", "object": "chat.completion", "choices": []}', raw_type="application/json")
    openai_fake.script("primary", empty, empty, empty)
    openai_fake.script("backup", Turn(text="The backup answered [1]."))
    router = make_router(openai_fake, "primary", "backup")

    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.text == "The backup answered [1]." and result.model_used == "backup"
    assert [e for e in logs if e["event"] == "llm.client_fault"] == []
    failed = [e for e in logs if e["event"] == "llm.call_failed"]
    assert failed and all(e["retryable"] and "MalformedAnswer: primary answered with no choices" in e["error"]
                          for e in failed)


async def test_complete_raises_llm_error_when_every_model_fails(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=500), Turn(status=500))
    openai_fake.script("backup", Turn(status=429), Turn(status=429))
    router = make_router(openai_fake, "primary", "backup")

    with pytest.raises(LLMError) as caught:
        await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert "primary" in str(caught.value) and "backup" in str(caught.value)
    assert len(openai_fake.requests) == 4


async def test_complete_can_fall_back_to_offline_model(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=500), Turn(status=500))
    router = make_router(openai_fake, "primary")

    result = await router.complete(model="primary", fallbacks=["offline"], messages=MESSAGES)

    assert result.model_used == "offline"
    assert result.usage.cost_usd == 0.0 and not result.usage.partial


async def test_complete_rejects_unknown_model(openai_fake: FakeOpenAI) -> None:
    router = make_router(openai_fake, "primary")

    with pytest.raises(LLMError, match="unknown model"):
        await router.complete(model="nope", messages=MESSAGES)
    assert openai_fake.requests == []


async def test_router_from_settings_adds_offline_and_answers(openai_fake: FakeOpenAI) -> None:
    from gateway.settings import Settings

    settings = Settings(
        models=[fake_model(openai_fake, "primary")],
        bots=[{"name": "demo", "model": "primary", "fallbacks": ["offline"]}],
    )
    openai_fake.script("primary", Turn(text="Configured model answers [1]."))
    router = LLMRouter.from_settings(settings, retry=FAST_RETRY)
    bot = settings.bot("demo")

    result = await router.complete(model=bot.model, fallbacks=bot.fallbacks, messages=MESSAGES)

    assert router.model_names == {"primary", "offline"}
    assert result.model_used == "primary" and result.text == "Configured model answers [1]."


async def test_deployment_timeout_overrides_router_default(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="late", delay=3), Turn(text="late", delay=3))
    router = LLMRouter([fake_model(openai_fake, "primary", timeout=0.2)], timeout=30, retry=FAST_RETRY)

    with pytest.raises(LLMError, match="Timeout"):
        await router.complete(model="primary", messages=MESSAGES)


async def test_complete_passes_response_format_through(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text='{"queries": ["refund policy monthly plan"]}'))
    router = make_router(openai_fake, "primary")
    schema = {"type": "json_schema", "json_schema": {"name": "queries", "schema": {"type": "object"}}}

    result = await router.complete(model="primary", messages=MESSAGES, response_format=schema)

    assert result.text.startswith('{"queries"')
    assert openai_fake.requests_for("primary")[0].body["response_format"] == schema


async def test_a_failing_model_cools_down_so_the_next_call_starts_at_the_fallback(openai_fake: FakeOpenAI) -> None:
    """During an outage each message waited out the primary's retries again before the fallback answered."""
    openai_fake.script("primary", Turn(status=503), Turn(status=503), Turn(text="primary is back [1]."))
    openai_fake.script("backup", Turn(text="first [1]."), Turn(text="second [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], timeout=5, retry=FAST_RETRY,
                       cooldown=0.5)

    first = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)
    second = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert (first.text, second.text) == ("first [1].", "second [1].")
    assert len(openai_fake.requests_for("primary")) == 2  # both attempts of the first call, none of the second
    await asyncio.sleep(0.6)
    again = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)
    assert again.model_used == "primary" and again.text == "primary is back [1]."


async def test_a_chain_that_is_all_cooling_down_is_still_tried(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=503), Turn(status=503), Turn(text="recovered [1]."))
    router = LLMRouter([fake_model(openai_fake, "primary")], timeout=5, retry=FAST_RETRY, cooldown=60)

    with pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES)
    recovered = await router.complete(model="primary", messages=MESSAGES)

    assert recovered.text == "recovered [1]."


async def test_a_single_attempt_call_that_fails_does_not_cool_the_model_down(openai_fake: FakeOpenAI) -> None:
    """One 503 to the rewrite (one attempt, no retries) is no outage: the answer still starts at the primary."""
    openai_fake.script("primary", Turn(status=503), Turn(text="the answer [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], timeout=5, retry=FAST_RETRY,
                       cooldown=60)

    with pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES, retries=0)
    answer = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert answer.model_used == "primary" and openai_fake.requests_for("backup") == []


async def test_litellms_own_cooldown_never_refuses_a_provider_after_one_auth_error(openai_fake) -> None:
    # The gateway owns cooldowns (`llm.cooldown_seconds`, 0 here); LiteLLM's Router cooled the only
    # deployment down after one 401 and refused the next conversations without asking it.
    openai_fake.script("primary", Turn(status=401), Turn(text="Back again [1]."))
    router = make_router(openai_fake, "primary")
    with pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES)

    result = await router.complete(model="primary", messages=MESSAGES)

    assert result.text == "Back again [1]." and len(openai_fake.requests_for("primary")) == 2


async def test_the_model_that_answered_is_logged_with_its_latency_and_tokens(openai_fake: FakeOpenAI) -> None:
    """After two `llm.call_failed` lines nothing said that the fallback answered (review)."""
    openai_fake.script("primary", Turn(status=500), Turn(status=500))
    openai_fake.script("backup", Turn(text="Backup answer [1].", usage=(30, 9)))
    router = make_router(openai_fake, "primary", "backup")
    with capture_logs() as logs:
        await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES,
                              metadata={"bot": "acme", "message_id": 42, "conversation_id": 7})
    [answered] = [e for e in logs if e["event"] == "llm.answered"]
    assert answered["model"] == "backup" and answered["fallback"] is True and answered["message_id"] == 42
    assert (answered["prompt_tokens"], answered["completion_tokens"]) == (30, 9) and answered["latency_ms"] >= 0
