"""What a failed model call tells an operator: `llm.call_failed` names the model, the endpoint it tried
(scheme, host and port: no credentials, path or query) and the kind of failure, and `LLMRouter.calls`
(shown by /readyz) keeps each model's last failure and last answer."""

from __future__ import annotations

import socket

import pytest
from structlog.testing import capture_logs

from gateway.errors import LLMError
from gateway.llm import LLMRouter
from gateway.llm_health import endpoint
from gateway.llm_retry import RetryPolicy
from tests.fakes.openai_server import FakeOpenAI, Turn
from tests.llm.conftest import fake_model
from tests.llm.test_router import FAST_RETRY, MESSAGES, Collector


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_model_nothing_listens_for_is_logged_as_connection_refused_at_its_endpoint() -> None:
    """A new user's `api_base` pointed at a port nothing listened on: three `llm.call_failed` lines said only
    "OpenAIException - Connection error.", naming no endpoint, and /readyz showed nothing (review)."""
    port = _closed_port()
    router = LLMRouter([{"model_name": "primary", "litellm_params": {
        "model": "openai/primary", "api_base": f"http://127.0.0.1:{port}/v1", "api_key": "sk-fake"}}], retry=FAST_RETRY)

    with capture_logs() as logs, pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES)

    failed = [e for e in logs if e["event"] == "llm.call_failed"]
    assert len(failed) == 2  # FAST_RETRY: one retry
    assert {(e["model"], e["endpoint"], e["failure"]) for e in failed} == {
        ("primary", f"http://127.0.0.1:{port}", "connection refused")}
    seen = router.calls.report()["primary"]
    assert seen["last_success_at"] is None and seen["failures_since_success"] == 2
    assert seen["last_failure"]["failure"] == "connection refused"
    assert seen["last_failure"]["endpoint"] == f"http://127.0.0.1:{port}" and seen["last_failure"]["at"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("turn", "failure"), [(Turn(status=500), "HTTP 500"), (Turn(status=401), "auth (HTTP 401)"),
                                               (Turn(delay=2, text="late"), "timeout")], ids=["500", "401", "timeout"])
async def test_a_failing_endpoint_is_logged_with_its_status_and_endpoint(openai_fake: FakeOpenAI, turn, failure,
                                                                         stream) -> None:
    openai_fake.script("primary", turn)
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], timeout=0.5,
                       retry=RetryPolicy(num_retries=0))

    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES,
                                       on_token=Collector() if stream else None)

    assert result.model_used == "backup"
    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]
    assert failed["model"] == "primary" and failed["failure"] == failure
    assert failed["endpoint"] == f"http://127.0.0.1:{openai_fake.port}"
    report = router.calls.report()
    assert report["primary"]["last_failure"]["failure"] == failure and report["primary"]["last_success_at"] is None
    assert report["backup"]["last_success_at"] and report["backup"]["last_failure"] is None


async def test_an_answer_after_failures_is_the_last_success_and_the_failure_stays(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(status=500), Turn(text="Answered [1]."))
    router = LLMRouter([fake_model(openai_fake, "primary")], retry=FAST_RETRY)

    await router.complete(model="primary", messages=MESSAGES)

    seen = router.calls.report()["primary"]
    assert seen["last_failure"]["failure"] == "HTTP 500" and seen["failures_since_success"] == 0
    assert seen["last_success_at"] >= seen["last_failure"]["at"]


async def test_a_stream_broken_mid_answer_is_logged_as_such(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="Refunds take five days, as the policy says [1].", break_after=2))
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], retry=RetryPolicy(num_retries=0))

    with capture_logs() as logs:
        await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=Collector())

    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]
    assert failed["failure"] == "stream broken" and failed["endpoint"] == f"http://127.0.0.1:{openai_fake.port}"


async def test_a_model_without_a_key_is_logged_as_auth(openai_fake: FakeOpenAI, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    router = LLMRouter([{"model_name": "primary", "litellm_params": {"model": "openai/primary",
                                                                     "api_base": openai_fake.base_url}}])

    with capture_logs() as logs, pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES)

    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]
    assert failed["failure"] == "auth (no api_key)" and not openai_fake.requests_for("primary")


async def test_the_logged_endpoint_carries_no_credentials_path_or_query(openai_fake: FakeOpenAI) -> None:
    """`api_base` may carry a credential (userinfo, a proxy's token in the path, `?api-key=`): the log and
    /readyz answer anyone, so they show the scheme, host and port alone. The HTTP client refuses a URL's
    `user:password@` beside the key's Authorization header, before any request: that was `other: ValueError`,
    retried and cooled down for as an outage, and named nowhere as the setup problem it is (review)."""
    router = LLMRouter([{"model_name": "primary", "litellm_params": {
        "model": "openai/primary", "api_key": "sk-fake",
        "api_base": f"http://bob:PASSWORD-1@127.0.0.1:{openai_fake.port}/PATH-TOKEN-2/v1?api-key=QUERY-KEY-3"}}],
        retry=FAST_RETRY, cooldown=30)

    with capture_logs() as logs, pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES)

    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]  # not retried: the same URL is refused again
    assert failed["endpoint"] == f"http://127.0.0.1:{openai_fake.port}"
    assert failed["failure"] == "bad api_base (credentials in URL)" and failed["retryable"] is False
    assert not openai_fake.requests and not [e for e in logs if e["event"] == "llm.cooling_down"]
    assert [e["hint"] for e in logs if e["event"] == "llm.setup_refused"] == ["check its api_base"]
    assert "primary" in router.refused  # named under `models` in /readyz until it answers
    shown = repr(router.calls.report()) + repr(router.refused) + repr(logs)
    assert not any(secret in shown for secret in ("PASSWORD-1", "PATH-TOKEN-2", "QUERY-KEY-3", "bob"))


@pytest.mark.parametrize("where", ["config-env-reference", "OPENAI_BASE_URL", "OPENAI_API_BASE"])
async def test_the_logged_endpoint_is_the_one_called_when_the_environment_names_it(openai_fake: FakeOpenAI,
                                                                                   monkeypatch, where) -> None:
    """An `api_base` written `os.environ/VAR` (LiteLLM's convention) was logged as "an api_base that is not a
    URL", and one LiteLLM read from its own environment variables as "openai's default", while the calls went
    to the fake (review)."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    params = {"model": "openai/primary", "api_key": "sk-fake"}
    if where == "config-env-reference":
        monkeypatch.setenv("PRIMARY_BASE", openai_fake.base_url)
        params["api_base"] = "os.environ/PRIMARY_BASE"
    else:
        monkeypatch.setenv(where, openai_fake.base_url)
    # A 503, which names the request it answered, then a 200 with no choices, which names none.
    openai_fake.script("primary", Turn(status=503), Turn(raw_body=NO_CHOICES, raw_type="application/json"))
    router = LLMRouter([{"model_name": "primary", "litellm_params": params}], retry=FAST_RETRY)

    with capture_logs() as logs, pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES)

    failed = [(e["failure"], e["endpoint"]) for e in logs if e["event"] == "llm.call_failed"]
    here = f"http://127.0.0.1:{openai_fake.port}"
    assert failed == [("HTTP 503", here), ("malformed answer", here)]
    assert router.calls.report()["primary"]["last_failure"]["endpoint"] == here


async def test_a_failure_in_a_group_of_deployments_names_the_one_called(openai_fake: FakeOpenAI) -> None:
    """A model group (two deployments under one name) logged both endpoints on each failure, whichever was
    called: the operator could not tell which one refused its connections."""
    port = _closed_port()
    deployments = [{"model_name": "primary", "litellm_params": {"model": "openai/primary", "api_key": "sk-fake",
                                                                "api_base": base}}
                   for base in (openai_fake.base_url, f"http://127.0.0.1:{port}/v1")]
    openai_fake.script("primary", *[Turn(status=503)] * 16)
    router = LLMRouter(deployments, retry=RetryPolicy(num_retries=15, backoff_base=0.001, backoff_max=0.001))

    with capture_logs() as logs, pytest.raises(LLMError):
        await router.complete(model="primary", messages=MESSAGES)

    failed = {(e["failure"], e["endpoint"]) for e in logs if e["event"] == "llm.call_failed"}
    # 16 attempts spread over both deployments at random: each is named alone, with what it did.
    assert failed == {("HTTP 503", f"http://127.0.0.1:{openai_fake.port}"),
                      ("connection refused", f"http://127.0.0.1:{port}")}


NO_CHOICES = '{"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "primary", "choices": []}'


@pytest.mark.parametrize(("params", "shown"), [
    ({"model": "openai/x", "api_base": "https://key@proxy.example.com/t/SECRET/v1?k=1"}, "https://proxy.example.com:443"),
    ({"model": "openai/x", "api_base": "http://[::1]:8080/v1"}, "http://[::1]:8080"),
    ({"model": "openai/x", "api_base": "HTTP://Models.Example.com/v1"}, "http://models.example.com:80"),
    ({"model": "ollama/llama3"}, "http://localhost:11434"),  # LiteLLM's default for the provider
    ({"model": "openai/gpt-4o-mini"}, "https://api.openai.com:443"),
    ({"model": "azure/my-deployment"}, "azure's default"),  # LiteLLM knows none: it needs an api_base
    ({"model": "openai/x", "api_base": "not a url"}, "an api_base that is not a URL"),
    ({"model": "openai/x", "api_base": "os.environ/SET_BASE"}, "https://set.example.com:8443"),
    ({"model": "openai/x", "api_base": "os.environ/UNSET_BASE"}, "https://api.openai.com:443"),
], ids=["secrets", "ipv6", "default-port", "provider-base", "provider-default", "no-default", "unreadable",
        "env-reference", "unset-env-reference"])
def test_endpoint_is_scheme_host_and_port(params, shown, monkeypatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OLLAMA_API_BASE", "AZURE_API_BASE", "UNSET_BASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SET_BASE", "https://user:pw@set.example.com:8443/v1")
    assert endpoint(params) == shown


RATE_LIMITED = {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}
NO_QUOTA = {"message": "You exceeded your current quota, please check your plan and billing details.",
            "type": "insufficient_quota", "code": "insufficient_quota"}


@pytest.mark.parametrize(("stream_error", "failure", "attempts", "refused"), [
    (RATE_LIMITED, "rate limited", 2, False), (NO_QUOTA, "no credit", 1, True)], ids=["rate-limit", "no-credit"])
async def test_a_stream_failing_for_a_known_reason_is_classified_as_unstreamed(
        openai_fake: FakeOpenAI, stream_error, failure, attempts, refused) -> None:
    """A provider that reports its failure in the stream it began (OpenAI's error event) was logged as "stream
    broken" whatever it said, and an account out of credit was retried and never named (review): the
    reason is classified, retried and named as the same failure without streaming is."""
    openai_fake.script("primary", *[Turn(text="Refunds take five days.", break_after=0, stream_error=stream_error)] * 2)
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = LLMRouter([fake_model(openai_fake, n) for n in ("primary", "backup")], retry=FAST_RETRY)

    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_token=Collector())

    assert result.model_used == "backup" and result.text == "Backup [1]."
    failed = [e for e in logs if e["event"] == "llm.call_failed"]
    assert [e["failure"] for e in failed] == [failure] * attempts and len(openai_fake.requests_for("primary")) == attempts
    assert ("primary" in router.refused) is refused


async def test_a_failure_the_fallback_answered_is_not_logged_as_no_fallback_attempted(openai_fake: FakeOpenAI) -> None:
    """LiteLLM's Router adds "LiteLLM: model group 'primary' failed with the error above. No fallback was
    attempted." to its error, and `llm.call_failed` quoted it while the gateway's own chain went on to the
    backup, which answered: a new user read that their `fallbacks` were not tried (review)."""
    openai_fake.script("backup", Turn(text="Backup [1]."))
    router = LLMRouter([{"model_name": "primary", "litellm_params": {
        "model": "openai/primary", "api_base": f"http://127.0.0.1:{_closed_port()}/v1", "api_key": "sk-fake"}},
        fake_model(openai_fake, "backup")], retry=RetryPolicy(num_retries=0))

    with capture_logs() as logs:
        result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES)

    assert result.model_used == "backup"
    [failed] = [e for e in logs if e["event"] == "llm.call_failed"]
    assert failed["error"].startswith("primary: InternalServerError: ") and "Connection error." in failed["error"]
    assert "fallback" not in failed["error"].lower() and "model group" not in failed["error"]
