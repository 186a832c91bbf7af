"""What an operator is shown of the models: the endpoint each one is called at, as it may be shown (its
`api_base` may carry a credential: userinfo, a proxy's token in the path, `?api-key=`)."""

from __future__ import annotations

from typing import Any

import litellm

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
