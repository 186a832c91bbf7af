"""What an operator is shown of the models: the endpoint each one is called at, as it may be shown (its
`api_base` may carry a credential: userinfo, a proxy's token in the path, `?api-key=`), and how each one's
calls fared (`ModelCalls`, under `model_calls` in /readyz)."""

from __future__ import annotations

from typing import Any

import litellm

from gateway.models import utcnow
from gateway.offline.provider import MODEL as OFFLINE_LITELLM_MODEL
from gateway.url_secrets import origin


def endpoint(params: dict[str, Any]) -> str:
    """Where a deployment (its `litellm_params`) is called: the scheme, host and port of its `api_base`, or
    of LiteLLM's default for its provider (Ollama's `http://localhost:11434`), else "<provider>'s default"."""
    model = str(params.get("model", ""))
    if model == OFFLINE_LITELLM_MODEL:
        return "in process"
    api_base = params.get("api_base") or params.get("base_url")
    if api_base:
        return origin(str(api_base)) or "an api_base that is not a URL"
    try:
        _, provider, _, default = litellm.get_llm_provider(model)
    except Exception:  # a provider LiteLLM does not know: the call fails saying so
        return "the provider's default"
    return (origin(default) if default else None) or f"{provider}'s default"


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
