"""What an operator is shown of the models: the endpoint each one is called at, as it may be shown (its
`api_base` may carry a credential: userinfo, a proxy's token in the path, `?api-key=`), and how each one's
calls fared (`ModelCalls`, under `model_calls` in /readyz)."""

from __future__ import annotations

from typing import Any

import litellm
from litellm.secret_managers.main import get_secret_str
from litellm.types.utils import LlmProviders
from litellm.utils import ProviderConfigManager

from gateway.llm_retry import causes
from gateway.models import utcnow
from gateway.offline.provider import MODEL as OFFLINE_LITELLM_MODEL
from gateway.url_secrets import origin


def endpoint(params: dict[str, Any]) -> str:
    """Where a deployment (its `litellm_params`) is called, as LiteLLM reads it: the scheme, host and port of
    its `api_base` (`os.environ/VAR`, LiteLLM's convention, read from VAR), else of its provider's base from
    LiteLLM's environment variables (`OPENAI_BASE_URL`, `OLLAMA_API_BASE`, …) or default (Ollama's
    `http://localhost:11434`), else "<provider>'s default"."""
    model = str(params.get("model", ""))
    if model == OFFLINE_LITELLM_MODEL:
        return "in process"
    api_base = params.get("api_base") or params.get("base_url")
    if isinstance(api_base, str) and api_base.startswith("os.environ/"):
        api_base = get_secret_str(api_base)  # None when unset: LiteLLM then calls the provider's base
    if api_base:
        return origin(str(api_base)) or "an api_base that is not a URL"
    try:
        name, provider, _, default = litellm.get_llm_provider(model)
    except Exception:  # a provider LiteLLM does not know: the call fails saying so
        return "the provider's default"
    default = default or _provider_base(name, provider)
    return (origin(default) if default else None) or f"{provider}'s default"


def _provider_base(model: str, provider: str) -> str | None:
    """The base LiteLLM calls `provider` at when no `api_base` is given, its environment variables read as
    LiteLLM reads them (`get_llm_provider` leaves OpenAI's and Anthropic's out), None when it knows none."""
    try:
        info = ProviderConfigManager.get_provider_model_info(model, LlmProviders(provider))
        return info.get_api_base() if info is not None else None
    except Exception:  # a provider with no model info, or one whose base must be set (hosted vLLM's)
        return None


def called_endpoint(error: BaseException) -> str | None:
    """The scheme, host and port of the request `error` came from, as the OpenAI SDK or httpx under it name
    it; None when no request was made (a URL the client refused, an answer with nothing in it). LiteLLM's own
    exceptions are not read: with `OPENAI_BASE_URL` set they name `https://api.openai.com`, never called."""
    for cause in causes(error):
        if not type(cause).__module__.startswith(("openai", "httpx")):
            continue
        try:
            request = cause.request
        except (AttributeError, RuntimeError):  # httpx raises RuntimeError for an error without its request
            continue
        if (where := origin(str(getattr(request, "url", "")))) is not None:
            return where
    return None


class ModelCalls:
    """How each model called since the process started fared: when it last answered, its last failure
    (when, its kind, the endpoint) and the failures since it last answered, which /readyz shows (a model
    that fails on every call, as one whose endpoint is down, was otherwise named nowhere but the log)."""

    def __init__(self) -> None:
        self._models: dict[str, dict[str, Any]] = {}

    def _entry(self, name: str) -> dict[str, Any]:
        return self._models.setdefault(name, {"last_success_at": None, "last_failure": None,
                                              "failures_since_success": 0})

    def answered(self, name: str) -> None:
        """`name` answered a call."""
        entry = self._entry(name)
        entry["last_success_at"], entry["failures_since_success"] = utcnow().isoformat(), 0

    def failed(self, name: str, failure: str, where: str) -> None:
        """A call to `name` failed with `failure` (`gateway.llm_retry.failure_kind`) at endpoint `where`."""
        entry = self._entry(name)
        entry["last_failure"] = {"at": utcnow().isoformat(), "failure": failure, "endpoint": where}
        entry["failures_since_success"] += 1

    def report(self) -> dict[str, dict[str, Any]]:
        """model -> `last_success_at`, `last_failure` (`at`, `failure`, `endpoint`) and `failures_since_success`."""
        return {name: {**entry, "last_failure": dict(entry["last_failure"]) if entry["last_failure"] else None}
                for name, entry in sorted(self._models.items())}
