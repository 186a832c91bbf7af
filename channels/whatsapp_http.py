"""The HTTP client the WhatsApp channel gives Twilio's SDK: a timeout on every request, and `Retry-After` kept."""

from __future__ import annotations

import contextvars
from typing import Any

from twilio.http.async_http_client import AsyncTwilioHttpClient

from gateway.backoff import asked_wait

REQUEST_TIMEOUT_S = 30.0
"""A request to Twilio unanswered after this long has an unknown outcome (a create is then looked up)."""

retry_after: contextvars.ContextVar[float | None] = contextvars.ContextVar("twilio_retry_after", default=None)
"""The last answer's `Retry-After` in this task (None: it had none)."""


class HeaderAwareHttpClient(AsyncTwilioHttpClient):
    """Twilio's async client, remembering `Retry-After`: TwilioRestException does not carry headers.

    A context variable keeps concurrent sends apart: the request runs in the caller's task.
    """

    async def request(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        # Twilio's client hands aiohttp the call's timeout, None unless given, which aiohttp takes for none at all.
        kwargs["timeout"] = kwargs.get("timeout") or REQUEST_TIMEOUT_S
        response = await super().request(*args, **kwargs)
        value = (response.headers or {}).get("Retry-After")
        retry_after.set(asked_wait(value) if value is not None else None)  # "nan": no wait, nor a 500 later
        return response
